"""Every option of every command is read by the component it belongs to, or refused.

A component declares the options it reads (``OptionScope``, ``veriloop/options.py``).  These tests
walk every option of every command against every choice of the component it belongs to: set away
from its default on a component that reads it, the option is accepted; on one that does not, it is a
``ConfigError`` naming the option.  They also check that every option is declared somewhere (a scope,
or read whatever is chosen), and that the declarations say what the components really read.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from veriloop.config import ConfigError, build_config
from veriloop.options import covers, declarations, dotted_defaults, lookup
from veriloop.registry import ESTIMATORS, OBJECTIVES
from veriloop.tasks.config import TaskConfig, task_reads
from veriloop.training.config import TrainConfig
from veriloop.training.loop.estimators import EstimatorInput
from veriloop.training.loop.optim import OPTIMIZER_OPTIONS, OptimConfig, build_optimizer, clip_grad_norm, lr_at


def _commands() -> dict:
    """Every command of the CLI with config options: its name -> (config class, preset defaults)."""
    from veriloop.demo import DemoConfig
    from veriloop.evaluation.run import EvalRunConfig
    from veriloop.pipeline import PipelineConfig
    from veriloop.prm.label import LabelConfig
    from veriloop.prm.train import PRMTrainConfig
    from veriloop.search.allocate import AllocateConfig
    from veriloop.search.revision import RevisionPairsConfig
    from veriloop.search.run import SearchConfig
    from veriloop.training.recipes import SFT_COMMAND_DEFAULTS

    return {
        "train": (TrainConfig, {}),
        "sft": (TrainConfig, SFT_COMMAND_DEFAULTS),
        "eval": (EvalRunConfig, {}),
        "demo": (DemoConfig, {}),
        "pipeline": (PipelineConfig, {}),
        "prm label": (LabelConfig, {}),
        "prm train": (PRMTrainConfig, {}),
        "search": (SearchConfig, {}),
        "allocate": (AllocateConfig, {}),
        "revision-pairs": (RevisionPairsConfig, {}),
    }


COMMANDS = _commands()
# sft's options, scopes and checks are train's (one TrainConfig), under a preset of the sft recipe: walked as train
WALKED = sorted(set(COMMANDS) - {"sft"})
# A value away from the default that the option's own validation accepts (with what it needs besides).
VALUES: dict[str, tuple[object, dict]] = {
    "advantage.std": ("sample", {}),
    "advantage.baseline": ("batch", {}),
    "loss.aggregation": ("token-mean", {}),
    "kl.estimator": ("k2", {}),
    "kl.placement": ("reward", {}),
    "kl.controller": ("adaptive", {}),
    "learner.backend": ("gloo", {}),
    "learner.world_size": (2, {}),
    "lora.target_modules": ("q_proj", {}),
    "vllm.lora": ("merged", {}),
    "ray.address": ("auto", {}),
    "ray.worker_engine": ("vllm", {}),
    "rollout.mode": ("async", {"rollout.max_staleness": 1}),
    "rollout.workers": (2, {}),
    "rollout.teacher": ("some/teacher", {}),
    "process.prm": ("some/prm", {}),
    "process.replay_data": ("r.jsonl", {}),
    "reference": ("some/reference", {}),
    "eval_split": ("heldout", {}),
    "task.data": ("rows.jsonl", {}),
    "task.heldout_data": ("held.jsonl", {}),
    "task.validation_data": ("val.jsonl", {}),
    "task.verifier": ("math", {}),
    "task.prompt_style": ("boxed", {}),
    "task.reasoning": ("tool", {}),
    "task.arithmetic.op_weights": ("+:1,-:1,*:2,/:0", {}),
    "task.arithmetic.min_ops": (1, {}),
    "optim.schedule": ("cosine", {}),
    "optim.name": ("sgd", {}),
}

# What a choice needs besides itself to be a configuration at all (keys relative to the scope's own section).
NEEDS: dict[tuple[str, str], dict] = {
    ("advantage estimator", "process"): {"process.prm": "some/prm"},
    ("advantage estimator", "gae"): {"algo": "ppo"},
    ("advantage estimator", "gae_process"): {"algo": "ppo", "process.prm": "some/prm"},
    ("advantage estimator", "filter"): {"loss.policy_loss": "likelihood", "kl.beta": 0.0},
    ("advantage estimator", "one"): {"loss.policy_loss": "likelihood", "kl.beta": 0.0},
    ("policy objective", "likelihood"): {"advantage.estimator": "filter", "kl.beta": 0.0},
    ("policy objective", "dpo"): {"algo": "dpo"},
    ("rollout source", "teacher"): {"rollout.teacher": "some/teacher"},
    ("rollout source", "task-teacher"): {"algo": "sft"},
    ("reasoning format", "pot"): {"verifier": "arithmetic-pot"},
    ("reasoning format", "tool"): {"verifier": "arithmetic-tool"},
    ("task", "jsonl"): {"verifier": "arithmetic-outcome"},
    ("pipeline variant", "rl-long"): {"max_minutes": 1.0},
    ("strategy set", "revision"): {"revision_policy": "some/reviser"},
}
# Choices no configuration can make, with why: (kind, component), or (command, kind, component) in one command.
UNCONFIGURABLE = {
    ("task", "fixed"): "a fixed problem is given in code (prompt and reference), not by options",
    ("pipeline", "starting policy", "builtin:init"): "the pipeline sets rl.policy to its --base",
    ("pipeline", "reasoning format", "tool"): "its rejection sampling samples without running tools",
}


def _unconfigurable(command: str, scope, name: str) -> bool:
    return (scope.kind, name) in UNCONFIGURABLE or (command, scope.kind, name) in UNCONFIGURABLE


def _other(default):
    if isinstance(default, bool):
        return not default, {}
    if isinstance(default, int):
        return default + 2, {}
    if isinstance(default, float):
        return (default * 0.5 if default else 0.5), {}
    return f"{default}-other" if default else "something", {}


def _walk(command: str):
    """(scope, prefix, component, option) for every option of every scope of ``command``."""
    cls, _ = COMMANDS[command]
    every = dotted_defaults(cls)
    for prefix, scopes, _ in declarations(cls):
        defaults = {k[len(prefix) :]: v for k, v in every.items() if k.startswith(prefix)}
        for scope in scopes:
            for name in scope.names():
                for key in scope.leaves(defaults):
                    yield scope, prefix, name, key


def _relative(table: dict, key: str):
    """``table``'s entry for the dotted ``key`` or for its tail inside a section (``train.optim.name``)."""
    parts = key.split(".")
    return next((table[".".join(parts[i:])] for i in range(len(parts)) if ".".join(parts[i:]) in table), None)


def _build(command: str, overrides: dict):
    cls, preset = COMMANDS[command]
    return build_config(cls, preset, dict(overrides))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_of_every_command_is_declared(command):
    """Each leaf option is an option of a scope, the selector of one, or read whatever is chosen."""
    cls, _ = COMMANDS[command]
    found = declarations(cls)
    undeclared = []
    for key in dotted_defaults(cls):
        covered = False
        for prefix, scopes, common in found:
            rel = key[len(prefix) :] if key.startswith(prefix) else None
            if rel is not None and (
                covers(common, rel) or any(covers(s.options, rel) or rel == s.selector for s in scopes)
            ):
                covered = True
        if not covered:
            undeclared.append(key)
    assert undeclared == []


@pytest.mark.timeout(600)
@pytest.mark.parametrize("command", WALKED)
def test_every_option_against_every_choice_of_its_component(command):
    checked, refused, wrong = 0, 0, []
    every = dotted_defaults(COMMANDS[command][0])
    for scope, prefix, name, key in _walk(command):
        if _unconfigurable(command, scope, name):
            continue
        base = _choice(scope, prefix, name, command)
        _build(command, base)  # the choice alone is a configuration
        full = prefix + key
        value, extra = _relative(VALUES, full) or _other(every[full])
        overrides = {**{prefix + k: v for k, v in extra.items()}, **base, full: value}
        try:
            _build(command, overrides)
            error = ""
        except ConfigError as e:
            error = str(e)
        if scope.reads_option(name, key):  # accepted, or refused for another reason: never as not read by it
            if f"is not read by the {scope.kind} {name!r}" in error or (error and key.split(".")[-1] not in error):
                wrong.append((scope.kind, name, full, value, error or "accepted"))
        else:
            refused += 1
            if key not in error:  # refused, naming the option
                wrong.append((scope.kind, name, full, value, error or "accepted"))
        checked += 1
    assert wrong == [], "\n".join(map(str, wrong))
    assert checked >= refused > 0  # the walk is not empty


@pytest.mark.parametrize("command", WALKED)
def test_an_option_at_its_default_is_accepted_anywhere(command):
    cls, preset = COMMANDS[command]
    for scope, prefix, name, key in _walk(command):
        if _unconfigurable(command, scope, name):
            continue
        base = _choice(scope, prefix, name, command)
        if prefix + key not in base:  # the option set explicitly to its default
            build_config(
                cls, preset, {**base, prefix + key: _default_under(build_config(cls, preset, base), prefix, key)}
            )


def _choice(scope, prefix: str, name: str, command: str = "") -> dict:
    needs = NEEDS.get((scope.kind, name), {})
    chosen = scope.choosing(name)
    if command == "allocate" and scope.kind == "strategy set":  # allocate needs single among its strategies
        chosen = {"strategy": "single" if name == "single" else f"single,{name}"}
    return {**{prefix + k: v for k, v in needs.items()}, **{prefix + k: v for k, v in chosen.items()}}


def _default_under(cfg, prefix: str, key: str):
    """The option's default where the config under test sits (a recipe's default for TrainConfig)."""
    section = lookup(cfg, prefix[:-1]) if prefix else cfg
    if isinstance(section, TrainConfig):
        return TrainConfig.recipe_defaults(section.algo)[key]
    return dotted_defaults(type(section))[key]


@pytest.mark.parametrize(
    "over, says",
    [
        ({"task.heldout_size": 5}, "task.heldout_size=5 is not read by the task 'arithmetic'.*task.name gsm8k"),
        ({"task.data": "missing.jsonl"}, "task.data='missing.jsonl' is not read by the task 'arithmetic'"),
        (
            {"task.name": "gsm8k", "task.teacher.wrong_step_rate": 0.5},
            "task.teacher.wrong_step_rate=0.5 is not read by the task 'gsm8k'.*task.name arithmetic",
        ),
        ({"optim.momentum": 0.9}, "optim.momentum=0.9 is not read by the optimizer 'adamw'.*optim.name sgd"),
        (
            {"optim.name": "sgd", "optim.beta1": 0.5},
            "optim.beta1=0.5 is not read by the optimizer 'sgd'.*optim.name adamw",
        ),
        ({"kl.beta": 0.0, "kl.estimator": "k2"}, "kl.estimator='k2' is not read by the KL term 'off' \\(kl.beta 0\\)"),
        ({"lora.alpha": 8}, "lora.alpha=8.0 is not read by the adapters 'off' \\(lora.r 0\\).*lora.r > 0"),
        ({"eval_problems": 10}, "eval_problems=10 is not read by the periodic evaluation 'never'"),
        ({"ray.num_cpus": 3}, "ray.num_cpus=3 is not read by the rollout engine 'local'.*rollout.engine ray"),
        ({"learner.backend": "gloo"}, "learner.backend='gloo' is not read by the learner strategy 'local'"),
    ],
)
def test_the_issue_s_ignored_options_are_refused_by_name(over, says):
    with pytest.raises(ConfigError, match=says):
        _build("train", over)


def test_a_nested_train_config_applies_its_recipe():
    """``--train.algo dapo`` (demo) and ``--rl.algo dapo`` (pipeline) take the recipe's defaults, as train does."""
    demo, pipeline = _build("demo", {"train.algo": "dapo"}), _build("pipeline", {"rl.algo": "dapo"})
    assert demo.train.loss.clip_eps_high == pipeline.rl.loss.clip_eps_high == 0.28 and demo.train.kl.beta == 0.0
    assert demo.train.sampling.temperature == 0.7  # the field's own default still applies


class _Reads:
    """A config tree that records which dotted keys are read."""

    def __init__(self, obj, seen: set, prefix: str = ""):
        self._obj, self._seen, self._prefix = obj, seen, prefix

    def __getattr__(self, name):
        value = getattr(self._obj, name)
        key = self._prefix + name
        if dataclasses.is_dataclass(value):
            return _Reads(value, self._seen, key + ".")
        self._seen.add(key)
        return value


def test_each_optimizer_reads_what_it_declares():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3))
    for name, declared in OPTIMIZER_OPTIONS.items():
        seen: set = set()
        cfg = _Reads(OptimConfig(name=name, warmup_steps=2, schedule="cosine"), seen)
        opt = build_optimizer(model, cfg)
        lr_at(5, 10, cfg)
        opt.step()
        clip_grad_norm(model, cfg.grad_clip)
        assert seen - {"name"} == set(declared), name


def test_each_estimator_reads_the_advantage_options_it_declares():
    B, G, T = 2, 4, 5
    gen = torch.Generator().manual_seed(0)
    for name, estimator in ESTIMATORS.items():
        seen: set = set()
        over = {"algo": "ppo"} if estimator.needs_critic else {"process.prm": "some/prm"} if estimator.needs_prm else {}
        over.update(NEEDS.get(("advantage estimator", name), {}))
        cfg = _Reads(_build("train", {**over, "advantage.estimator": name}), seen)
        mask = torch.ones(B * G, T)
        x = EstimatorInput(
            torch.rand(B, G, generator=gen),
            mask,
            torch.rand(B * G, T, generator=gen),
            torch.rand(B * G, T, generator=gen),
            torch.rand(B * G, T, generator=gen),
            torch.rand(B * G, T, generator=gen) > 0.5,
        )
        estimator(x, cfg)
        advantage = {k.split(".", 1)[1] for k in seen if k.startswith("advantage.")}
        assert advantage == set(estimator.reads), name
        assert any(k.startswith("process.") for k in seen) == estimator.needs_prm, name


def test_each_task_is_built_from_exactly_the_options_it_declares():
    """A task's factory receives only the options it declares, so it cannot read another one."""
    for name in ("arithmetic", "gsm8k", "jsonl"):
        assert task_reads(name) <= set(f.name for f in dataclasses.fields(TaskConfig))
    assert task_reads("arithmetic") == {"arithmetic", "teacher", "reasoning"}
    assert {"heldout_size", "verifier", "data"} <= task_reads("gsm8k")
    assert "heldout_size" not in task_reads("jsonl") and "teacher" not in task_reads("gsm8k")


def test_each_objective_declares_the_loss_options_of_its_formula():
    assert set(OBJECTIVES.get("clip").reads) >= {"clip_eps_low", "clip_eps_high", "aggregation", "tis_cap"}
    assert "clip_ratio_c" in OBJECTIVES.get("dual-clip").reads and "clip_ratio_c" not in OBJECTIVES.get("clip").reads
    assert OBJECTIVES.get("dpo").reads == ("dpo_beta", "dpo_pairs")
    assert "tis_cap" not in OBJECTIVES.get("likelihood").reads  # no ratio, nothing to correct
    assert not any("clip" in k for k in OBJECTIVES.get("pg").reads)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_scope_names_only_options_that_exist(command):
    every = dotted_defaults(COMMANDS[command][0])
    for prefix, scopes, common in declarations(COMMANDS[command][0]):
        keys = [k[len(prefix) :] for k in every if k.startswith(prefix)]
        for name in (
            *common,
            *(o for s in scopes for o in s.options),
            *(r for s in scopes for n in s.names() for r in s.read_by(n)),
        ):
            assert any(covers((name.lstrip("-"),), k) for k in keys), (command, prefix, name)
