"""What the chosen rollout engine and learner strategy can serve, against what the run asks of them: every such rule
of the config, in one place, derived from what each registered component declares (``EngineCapabilities`` in
``rollout/engine.py``, ``LearnerCapabilities`` in ``training/loop/learner.py``).  No rule names a component: an
engine or a learner registered by a plugin is held to exactly the same rules, and each error names the component and the
registered ones that can serve what was asked.
"""

from __future__ import annotations

from veriloop.registry import ENGINES, LEARNERS
from veriloop.rollout.engine import EngineCapabilities, EngineSections, RegisteredEngine
from veriloop.training.loop.learner import LearnerCapabilities


def rollout_engine(cfg) -> tuple[type[RegisteredEngine], str, EngineCapabilities]:
    """(the registered engine ``rollout.engine`` names, its label, what it serves under ``cfg``)."""
    engine, sections = ENGINES.get(cfg.rollout.engine), EngineSections.of(cfg)
    return engine, engine.label(sections), engine.serves(sections)


def engines_that(can: str) -> str:
    """The registered engines with the capability ``can`` (for an error's "use ...")."""
    names = [name for name, engine in ENGINES.items() if getattr(engine.capabilities, can)]
    return ", ".join(names) or "none registered"


def samples_while_updating(cfg) -> bool:
    """rollout.lag with an engine that runs ahead: a step is sampled while the learner updates (pipelined)."""
    return cfg.rollout.lag > 0 and rollout_engine(cfg)[2].runs_ahead


def device_kind(device: str) -> str:
    """``cpu`` or ``cuda`` for the run's ``device`` option (``auto``: cuda when one is present, as it resolves)."""
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device.split(":")[0]


def check_placement(cfg, role: str, label: str, can, others: str) -> None:
    """The run's device and dtype against what a component (``role`` ``label``) declares it serves."""
    kind = device_kind(cfg.device)
    if kind not in can.devices:
        raise ValueError(
            f"device={cfg.device}: {role} {label!r} runs on {', '.join(can.devices)} only, not {kind}; {others}"
        )
    if cfg.dtype not in can.dtypes:
        raise ValueError(f"dtype={cfg.dtype}: {role} {label!r} serves {', '.join(can.dtypes)} only; {others}")


def check_engine(cfg) -> None:
    """rollout.* and sampling.* against the engine's declarations."""
    if cfg.ray.worker_engine not in ENGINES:
        raise ValueError(
            f"ray.worker_engine must be a registered engine ({ENGINES.choices()}), got {cfg.ray.worker_engine!r}"
        )
    engine, label, can = rollout_engine(cfg)
    check_placement(cfg, "rollout engine", label, can, f"registered engines: {ENGINES.choices()}")
    r = cfg.rollout
    if r.source == "task-teacher" and cfg.rollout.engine != "local":
        raise ValueError(f"rollout.engine={label} samples with a model; rollout.source=task-teacher samples nothing")
    if r.workers > 1 and not can.many_workers:
        raise ValueError(
            f"rollout.workers={r.workers}: rollout engine {label!r} is one engine; engines with workers: "
            f"{engines_that('many_workers')}"
        )
    if r.mode == "async" and not can.runs_ahead:
        raise ValueError(
            f"rollout.mode=async: rollout engine {label!r} cannot run ahead of the learner (one engine cannot); "
            f"engines that can: {engines_that('runs_ahead')}"
        )
    if cfg.sampling.max_thinking_tokens and r.source != "task-teacher" and not can.thinking_budget:
        raise ValueError(
            f"rollout engine {label!r}: the {label} engine does not force the end of thinking "
            f"(sampling.max_thinking_tokens): use rollout.engine {engines_that('thinking_budget')} "
            "(or ray holding one of them)"
        )
    if cfg.task.reasoning == "tool" and not can.tool_calls:
        raise ValueError(
            f"rollout engine {label!r}: the {label} engine does not run tool calls (task.reasoning tool): it samples "
            "each completion in one "
            f"call, with no pause for the sandbox; use rollout.engine {engines_that('tool_calls')} (or ray "
            "holding one of them)"
        )


def check_learner(cfg) -> None:
    """learner.* and lora.* against the learner strategy's declarations."""
    learner = LEARNERS.get(cfg.learner.strategy)
    can: LearnerCapabilities = learner.capabilities
    check_placement(cfg, "learner strategy", learner.name, can, f"registered strategies: {LEARNERS.choices()}")
    if cfg.learner.world_size > 1 and not can.distributed:
        ranked = [name for name, entry in LEARNERS.items() if entry.capabilities.distributed]
        raise ValueError(
            f"learner.world_size={cfg.learner.world_size}: learner strategy {learner.name!r} runs in one process; "
            f"strategies with ranks: {', '.join(ranked)}"
        )
    if cfg.lora.enabled and not can.lora:
        raise ValueError(f"lora.r > 0: learner strategy {learner.name!r} does not train LoRA adapters")


def check_layout(cfg) -> None:
    """ray.layout colocated: the engines share the learner ranks' bundles, so they take turns (no sampling ahead)."""
    if cfg.ray.layout != "colocated":
        return
    needs = {
        "learner.placement ray (the ranks' placement group holds the engines)": cfg.learner.placement == "ray",
        "rollout.engine ray": cfg.rollout.engine == "ray",
        "ray.worker_engine local (vLLM's sleep mode is not wired yet)": cfg.ray.worker_engine == "local",
        "rollout.lag 0 and rollout.mode sync (an engine cannot sample while the learner holds its memory)": (
            cfg.rollout.lag == 0 and cfg.rollout.mode == "sync"
        ),
    }
    missing = [need for need, ok in needs.items() if not ok]
    if missing:
        raise ValueError(f"ray.layout colocated needs {'; '.join(missing)}")


def check_controller_weights(cfg) -> None:
    """learner.controller_weights none: nothing on the controller may need the policy's weights."""
    if cfg.learner.controller_weights != "none":
        return
    from veriloop.registry import ESTIMATORS, OBJECTIVES

    needs = {
        "learner.placement ray": cfg.learner.placement == "ray",
        "a learner strategy that shards the weights (fsdp2)": LEARNERS.get(
            cfg.learner.strategy
        ).capabilities.shards_weights,
        "rollout.engine ray with ray.worker_engine local (the actors hold the weights and sample)": (
            cfg.rollout.engine == "ray" and cfg.ray.worker_engine == "local"
        ),
        "rollout.source policy": cfg.rollout.source == "policy",
        "lora.r 0": not cfg.lora.enabled,
        "kl.beta 0 (the reference's log-probs are taken on the controller)": cfg.kl.beta == 0,
        "no truncated importance sampling that recomputes log-probs on the controller (loss.tis_cap 0)": not (
            cfg.loss.tis_cap > 0 and OBJECTIVES.get(cfg.loss.policy_loss).needs_behavior
        ),
        "an advantage estimator without a process reward model": not ESTIMATORS.get(cfg.advantage.estimator).needs_prm,
        "an advantage estimator without a critic": not ESTIMATORS.get(cfg.advantage.estimator).needs_critic,
    }
    missing = [need for need, ok in needs.items() if not ok]
    if missing:
        raise ValueError(f"learner.controller_weights none needs {'; '.join(missing)}")


def check_capabilities(cfg) -> None:
    check_engine(cfg)
    check_learner(cfg)
    check_layout(cfg)
    check_controller_weights(cfg)
