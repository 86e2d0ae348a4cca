"""Every capability rule of the config is derived from what the chosen engine and learner declare, never from their
names: an engine or learner registered from outside, lacking one capability, is refused with an error that names it,
and the same engine declaring the capability is accepted (training/capabilities.py)."""

import dataclasses
import typing

import pytest

from veriloop.config import ConfigError, build_config, choices_of
from veriloop.registry import ENGINES, LEARNERS
from veriloop.rollout.engine import EngineCapabilities, RegisteredEngine
from veriloop.training.config import TrainConfig
from veriloop.training.loop.learner import LearnerCapabilities, LocalLearner

EVERYTHING = EngineCapabilities(
    tool_calls=True, thinking_budget=True, runs_ahead=True, many_workers=True, in_worker=True
)


# what a many-worker, run-ahead engine reads (as Ray declares)
OPTIONS = ("rollout.workers", "rollout.mode", "rollout.request_timeout_s", "rollout.max_request_retries")


def _engine(name: str, capabilities: EngineCapabilities, options=OPTIONS):
    class PluginEngine(RegisteredEngine):
        pass

    PluginEngine.name, PluginEngine.capabilities, PluginEngine.options = name, capabilities, options
    return PluginEngine


@pytest.fixture
def registered():
    """Register ``(registry, name, entry)``s for one test and remove them after it."""
    added = []

    def add(registry, name, entry):
        registry.register(name, entry)
        added.append((registry, name))

    yield add
    for registry, name in added:
        registry.unregister(name)


# (the capability, options that need it): each rule of check_engine, asked of an engine that lacks only that one
NEEDS = [
    ("many_workers", {"rollout.workers": 2}),
    ("runs_ahead", {"rollout.mode": "async", "rollout.max_staleness": 1}),
    ("thinking_budget", {"sampling.max_thinking_tokens": 8, "sampling.max_new_tokens": 64}),
    ("tool_calls", {"task.reasoning": "tool", "kl.beta": 0}),
]


@pytest.mark.parametrize("capability, options", NEEDS, ids=[n for n, _ in NEEDS])
def test_an_engine_lacking_one_capability_is_refused_by_name_and_accepted_with_it(registered, capability, options):
    registered(ENGINES, "lacks", _engine("lacks", dataclasses.replace(EVERYTHING, **{capability: False})))
    registered(ENGINES, "has", _engine("has", EVERYTHING))
    with pytest.raises(ConfigError, match="'lacks'") as refused:
        build_config(TrainConfig, {}, {"rollout.engine": "lacks", **options})
    assert "has" in str(refused.value)  # the error names the registered engines that can serve it
    cfg = build_config(TrainConfig, {}, {"rollout.engine": "has", **options})
    assert cfg.rollout.engine == "has"


def test_an_engine_declares_its_devices_and_dtypes(registered):
    registered(ENGINES, "gpu-only", _engine("gpu-only", dataclasses.replace(EVERYTHING, devices=("cuda",))))
    registered(ENGINES, "no-half", _engine("no-half", dataclasses.replace(EVERYTHING, dtypes=("float32",))))
    with pytest.raises(ConfigError, match="device=cpu: rollout engine 'gpu-only' runs on cuda only, not cpu"):
        build_config(TrainConfig, {}, {"rollout.engine": "gpu-only", "device": "cpu"})
    with pytest.raises(ConfigError, match="dtype=bfloat16: rollout engine 'no-half' serves float32 only"):
        build_config(TrainConfig, {}, {"rollout.engine": "no-half", "dtype": "bfloat16"})
    assert build_config(TrainConfig, {}, {"rollout.engine": "no-half", "dtype": "float32"}).dtype == "float32"


def test_a_learner_declares_ranks_lora_devices_and_dtypes(registered):
    class OneProcessFloat32(LocalLearner):
        name = "one-process-float32"
        capabilities = LearnerCapabilities(lora=False, dtypes=("float32",), devices=("cpu",))

    registered(LEARNERS, OneProcessFloat32.name, OneProcessFloat32)
    base = {"learner.strategy": OneProcessFloat32.name}
    with pytest.raises(ConfigError, match="learner strategy 'one-process-float32' runs in one process"):
        build_config(TrainConfig, {}, {**base, "learner.world_size": 2})
    with pytest.raises(ConfigError, match="'one-process-float32' does not train LoRA"):
        build_config(TrainConfig, {}, {**base, "lora.r": 4})
    with pytest.raises(ConfigError, match="dtype=float16: learner strategy 'one-process-float32' serves float32"):
        build_config(TrainConfig, {}, {**base, "dtype": "float16"})
    with pytest.raises(ConfigError, match="device=cuda:1: learner strategy 'one-process-float32' runs on cpu only"):
        build_config(TrainConfig, {}, {**base, "device": "cuda:1"})
    assert build_config(TrainConfig, {}, base).learner.strategy == OneProcessFloat32.name


def test_the_built_in_components_serve_every_device_and_dtype_the_options_offer():
    dtypes = set(choices_of(typing.get_type_hints(TrainConfig)["dtype"]))
    for registry in (ENGINES, LEARNERS):
        for name, entry in registry.items():
            assert set(entry.capabilities.dtypes) == dtypes, name
            assert set(entry.capabilities.devices) == {"cpu", "cuda"}, name


def test_the_options_an_engine_reads_are_what_it_declares(registered):
    registered(ENGINES, "reads-nothing", _engine("reads-nothing", EVERYTHING, options=()))
    with pytest.raises(ConfigError, match="rollout.request_timeout_s=5.0 is not read by the rollout engine 'reads-no"):
        build_config(TrainConfig, {}, {"rollout.engine": "reads-nothing", "rollout.request_timeout_s": 5})
    registered(ENGINES, "reads-it", _engine("reads-it", EVERYTHING, options=("rollout.request_timeout_s",)))
    cfg = build_config(TrainConfig, {}, {"rollout.engine": "reads-it", "rollout.request_timeout_s": 5})
    assert cfg.rollout.request_timeout_s == 5
