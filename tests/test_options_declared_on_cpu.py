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
from veriloop.options import OptionScope, covers, dotted_defaults
from veriloop.registry import ESTIMATORS, OBJECTIVES
from veriloop.tasks.config import COMMON_TASK_OPTIONS, TaskConfig, task_reads, task_scope
from veriloop.training import option_scopes
from veriloop.training.config import TrainConfig
from veriloop.training.estimators import EstimatorInput
from veriloop.training.optim import OPTIMIZER_OPTIONS, OPTIMIZER_SCOPE, OptimConfig, build_optimizer, lr_at

# The commands whose options are TrainConfig's (sft has other defaults, the same options).
SECTIONS = {"": (option_scopes.SCOPES, option_scopes.COMMON), "task.": ((task_scope(),), COMMON_TASK_OPTIONS),
            "optim.": ((OPTIMIZER_SCOPE,), ("name",))}  # fmt: skip

# A value away from the default that the option's own validation accepts (with what it needs besides).
VALUES: dict[str, tuple[object, dict]] = {
    "advantage.std": ("sample", {}), "advantage.baseline": ("batch", {}), "loss.aggregation": ("token-mean", {}),
    "kl.estimator": ("k2", {}), "kl.placement": ("reward", {}), "kl.controller": ("adaptive", {}),
    "learner.backend": ("gloo", {}), "learner.world_size": (2, {}), "lora.target_modules": ("q_proj", {}),
    "vllm.lora": ("merged", {}), "ray.address": ("auto", {}), "ray.worker_engine": ("vllm", {}),
    "rollout.mode": ("async", {"rollout.max_staleness": 1}), "rollout.workers": (2, {}),
    "rollout.teacher": ("some/teacher", {}), "process.prm": ("some/prm", {}), "process.replay_data": ("r.jsonl", {}),
    "reference": ("some/reference", {}), "eval_split": ("heldout", {}), "task.data": ("rows.jsonl", {}),
    "task.heldout_data": ("held.jsonl", {}), "task.validation_data": ("val.jsonl", {}), "task.verifier": ("math", {}),
    "task.prompt_style": ("boxed", {}), "task.reasoning": ("tool", {}), "task.arithmetic.op_weights": ("+:1,-:1,*:2,/:0", {}),
    "task.arithmetic.min_ops": (1, {}),
    "optim.schedule": ("cosine", {}), "optim.name": ("sgd", {}),
}  # fmt: skip

# What a choice needs besides itself to be a configuration at all.
NEEDS: dict[tuple[str, str], dict] = {
    ("advantage estimator", "process"): {"process.prm": "some/prm"},
    ("advantage estimator", "gae"): {"algo": "ppo"},
    ("advantage estimator", "filter"): {"loss.policy_loss": "likelihood", "kl.beta": 0.0},
    ("advantage estimator", "one"): {"loss.policy_loss": "likelihood", "kl.beta": 0.0},
    ("policy objective", "likelihood"): {"advantage.estimator": "filter", "kl.beta": 0.0},
    ("policy objective", "dpo"): {"algo": "dpo"},
    ("rollout source", "teacher"): {"rollout.teacher": "some/teacher"},
    ("rollout source", "task-teacher"): {"algo": "sft"},
    ("reasoning format", "pot"): {"verifier": "arithmetic-pot"},
    ("reasoning format", "tool"): {"verifier": "arithmetic-tool"},
    ("task", "jsonl"): {"task.verifier": "arithmetic-outcome"},
}  # fmt: skip
# Choices no configuration can make (built in code, not from options), with why.
UNCONFIGURABLE = {("task", "fixed"): "a fixed problem is given in code (prompt and reference), not by options"}


def _other(key: str, default):
    if key in VALUES:
        return VALUES[key]
    if isinstance(default, bool):
        return not default, {}
    if isinstance(default, int):
        return default + 2, {}
    if isinstance(default, float):
        return (default * 0.5 if default else 0.5), {}
    return f"{default}-other" if default else "something", {}


def _walk():
    """(scope, prefix, component, option) for every option of every scope of ``veriloop train``."""
    for prefix, (scopes, _) in SECTIONS.items():
        defaults = {k[len(prefix):]: v for k, v in dotted_defaults(TrainConfig).items() if k.startswith(prefix)}
        for scope in scopes:
            for name in scope.names():
                for key in scope.leaves(defaults):
                    yield scope, prefix, name, key


def _build(overrides: dict):
    return build_config(TrainConfig, {}, {k: v for k, v in overrides.items()})


def test_every_option_of_train_is_declared():
    """Each leaf option is an option of a scope, the selector of one, or read whatever is chosen."""
    undeclared = []
    for key in dotted_defaults(TrainConfig):
        prefix = next((p for p in sorted(SECTIONS, key=len, reverse=True) if key.startswith(p)), "")
        scopes, common = SECTIONS[prefix]
        rel = key[len(prefix):]
        if not (covers(common, rel) or any(covers(s.options, rel) or rel == s.selector for s in scopes)):
            undeclared.append(key)
    assert undeclared == []


@pytest.mark.timeout(300)
def test_every_option_against_every_choice_of_its_component():
    checked, refused, wrong = 0, 0, []
    for scope, prefix, name, key in _walk():
        if (scope.kind, name) in UNCONFIGURABLE:
            continue
        choice = {prefix + k: v for k, v in scope.choosing(name).items()}
        base = {**NEEDS.get((scope.kind, name), {}), **choice}
        _build(base)  # the choice alone is a configuration
        full = prefix + key
        value, extra = _other(full, dotted_defaults(TrainConfig)[full])
        overrides = {**extra, **base, full: value}
        try:
            _build(overrides)
            error = ""
        except ConfigError as e:
            error = str(e)
        if scope.reads_option(name, key):  # accepted, or refused for another reason: never as not read by it
            if f"is not read by the {scope.kind} {name!r}" in error or (error and full not in error):
                wrong.append((scope.kind, name, full, value, error or "accepted"))
        else:
            refused += 1
            if full not in error:  # refused, naming the option
                wrong.append((scope.kind, name, full, value, error or "accepted"))
        checked += 1
    assert wrong == [], '\n'.join(map(str, wrong))
    assert checked > 400 and refused > 200  # the walk is not empty


def test_an_option_at_its_default_is_accepted_anywhere():
    for scope, prefix, name, key in _walk():
        if (scope.kind, name) in UNCONFIGURABLE:
            continue
        full = prefix + key
        base = {**NEEDS.get((scope.kind, name), {}), **{prefix + k: v for k, v in scope.choosing(name).items()}}
        default = TrainConfig.recipe_defaults(str(base.get("algo", "grpo")))[full]
        if full not in base:
            _build({**base, full: default})


@pytest.mark.parametrize("over, says", [
    ({"task.heldout_size": 5}, "task.heldout_size=5 is not read by the task 'arithmetic'.*task.name gsm8k"),
    ({"task.data": "missing.jsonl"}, "task.data='missing.jsonl' is not read by the task 'arithmetic'"),
    ({"task.name": "gsm8k", "task.teacher.wrong_step_rate": 0.5},
     "task.teacher.wrong_step_rate=0.5 is not read by the task 'gsm8k'.*task.name arithmetic"),
    ({"optim.momentum": 0.9}, "optim.momentum=0.9 is not read by the optimizer 'adamw'.*optim.name sgd"),
    ({"optim.name": "sgd", "optim.beta1": 0.5}, "optim.beta1=0.5 is not read by the optimizer 'sgd'.*optim.name adamw"),
    ({"kl.beta": 0.0, "kl.estimator": "k2"}, "kl.estimator='k2' is not read by the KL term 'off' \\(kl.beta 0\\)"),
    ({"lora.alpha": 8}, "lora.alpha=8.0 is not read by the adapters 'off' \\(lora.r 0\\).*lora.r > 0"),
    ({"eval_problems": 10}, "eval_problems=10 is not read by the periodic evaluation 'never'"),
    ({"ray.num_cpus": 3}, "ray.num_cpus=3 is not read by the rollout engine 'local'.*rollout.engine ray"),
    ({"learner.backend": "gloo"}, "learner.backend='gloo' is not read by the learner strategy 'local'"),
])  # fmt: skip
def test_the_issue_s_ignored_options_are_refused_by_name(over, says):
    with pytest.raises(ConfigError, match=says):
        _build(over)


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
        from veriloop.training.optim import clip_grad_norm

        clip_grad_norm(model, cfg.grad_clip)
        assert seen - {"name"} == set(declared), name


def test_each_estimator_reads_the_advantage_options_it_declares():
    B, G, T = 2, 4, 5
    gen = torch.Generator().manual_seed(0)
    for name, estimator in ESTIMATORS.items():
        seen: set = set()
        over = {"algo": "ppo"} if estimator.needs_critic else {"process.prm": "some/prm"} if estimator.needs_prm else {}
        over.update(NEEDS.get(("advantage estimator", name), {}))
        cfg = _Reads(_build({**over, "advantage.estimator": name}), seen)
        mask = torch.ones(B * G, T)
        x = EstimatorInput(torch.rand(B, G, generator=gen), mask, torch.rand(B * G, T, generator=gen),
                           torch.rand(B * G, T, generator=gen), torch.rand(B * G, T, generator=gen),
                           torch.rand(B * G, T, generator=gen) > 0.5)  # fmt: skip
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
    assert OBJECTIVES.get("dpo").reads == ("dpo_beta",)
    assert "tis_cap" not in OBJECTIVES.get("likelihood").reads  # no ratio, nothing to correct
    assert not any("clip" in k for k in OBJECTIVES.get("pg").reads)


def test_a_scope_names_only_options_that_exist():
    defaults = dotted_defaults(TrainConfig)
    for prefix, (scopes, common) in SECTIONS.items():
        keys = [k[len(prefix):] for k in defaults if k.startswith(prefix)]
        for scope in scopes:
            assert isinstance(scope, OptionScope)
            for option in scope.options:
                assert any(covers((option.lstrip("-"),), k) for k in keys), (scope.kind, option)
            for name in scope.names():
                for read in scope.read_by(name):
                    assert any(covers((read.lstrip("-"),), k) for k in keys), (scope.kind, name, read)
