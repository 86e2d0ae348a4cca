"""Tool-integrated rollouts against chain of thought: wall time per GRPO step, with warm and with fresh sandboxes.

    python benchmarks/tool_rollouts.py [--rounds 3] [--steps 4] [--sft_steps 200] [--threads 2]
                                       [--work runs/tool-rollouts] [--json FILE] [--quick]

Three variants, each a GRPO run on the built-in task at the trainer's defaults (16 prompts x 8, one update) from a
base that writes its format:

* ``cot``: the shipped base (``builtin:base``), chain of thought;
* ``tool-fresh``: the tool base (the shipped base SFT'd on the teacher's tool traces for ``--sft_steps`` steps, as
  ``reasoning_formats.py`` makes it; kept in ``--work`` and reused), each code block in a new sandboxed process
  (``rollout.tool_interpreter fresh``);
* ``tool-warm``: the same base and seed, each block in a forked copy of a warm sandboxed interpreter
  (``rollout.tool_interpreter warm``, the default; ``sandbox/warm.py``).

Each round runs every variant for ``--steps`` steps (same seed, so the two tool variants sample the same tokens and
see the same tool outputs), in an order that turns round by round; the first step of each run is left out (it pays
the one-time costs: the first prefill, the warm pool's start).  Per variant: the step's phases (generate, which
holds the tool calls; verify; update) and the whole step in seconds, mean +- sd over the rounds' per-run means; tool
calls per step; and the ratio of each tool variant's step and rollout (generate + verify) to chain of thought's.
The goal (issue 41): tool-integrated rollouts within 2x chain-of-thought wall time.  ``--quick``: 1 round of 2 steps
of 2 prompts x 2, a 2-step SFT, in a scratch ``--work``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import link, result_args, save, silence_hub_progress, stamp_line  # noqa: E402
from reasoning_formats import SFT, VERIFIER, base_of  # noqa: E402

from veriloop.config import build_config  # noqa: E402
from veriloop.training.config import TrainConfig  # noqa: E402
from veriloop.training.trainer import Trainer  # noqa: E402

VARIANTS = {  # name: (format, rollout.tool_interpreter)
    "cot": ("cot", None),
    "tool-fresh": ("tool", "fresh"),
    "tool-warm": ("tool", "warm"),
}
PHASES = ("time_generate_s", "time_verify_s", "time_update_s", "time_step_s")


def run_variant(name: str, base: str, a, round_: int) -> dict:
    fmt, interpreter = VARIANTS[name]
    run_dir = Path(a.work) / f"{name}-round{round_}"
    shutil.rmtree(run_dir, ignore_errors=True)  # this script's own run of an earlier invocation (the SFT base stays)
    settings = {
        "policy": base,
        "run_dir": str(run_dir),
        "seed": a.seed,
        "steps": a.steps,
        "task.reasoning": fmt,
        "verifier": VERIFIER[fmt],
        "rollout.prompts_per_step": a.prompts,
        "rollout.group_size": a.group,
        "checkpoint_every": 100_000,
        "save_rollouts": False,
        "threads": a.threads,
        **({"rollout.tool_interpreter": interpreter} if interpreter else {}),
        **a.extra,
    }
    trainer = Trainer(build_config(TrainConfig, {}, settings), progress=False)
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    rows = trainer.metrics.rows[1:]  # the first step pays one-time costs
    out = {k: statistics.fmean(r.get(k, 0.0) for r in rows) for k in PHASES}
    out["rollout_s"] = out["time_generate_s"] + out["time_verify_s"]
    out["tool_calls_per_step"] = statistics.fmean(
        r.get("tool_calls_per_completion", 0.0) * a.prompts * a.group for r in rows
    )
    out["tokens_per_step"] = statistics.fmean(r.get("sampled_tokens", 0) for r in rows)
    out["reward_mean"] = statistics.fmean(r.get("reward_mean", 0.0) for r in rows)
    out["run_s"] = wall
    print(
        f"round {round_} {name:10s} step {out['time_step_s']:.2f} s (generate {out['time_generate_s']:.2f}, verify "
        f"{out['time_verify_s']:.2f}, update {out['time_update_s']:.2f}); {out['tool_calls_per_step']:.0f} tool calls "
        f"and {out['tokens_per_step']:.0f} sampled tokens a step",
        flush=True,
    )
    return out


def summarize(runs: dict[str, list[dict]]) -> dict:
    def ms(values):
        return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else None}

    keys = (*PHASES, "rollout_s", "tool_calls_per_step", "tokens_per_step")
    out = {name: {k: ms([r[k] for r in rs]) for k in keys} for name, rs in runs.items()}
    for name in runs:
        if name != "cot" and "cot" in runs:
            # per round (the variants of a round ran back to back), then over rounds
            for k, label in (("time_step_s", "step_ratio"), ("rollout_s", "rollout_ratio")):
                out[name][label] = ms([t[k] / c[k] for t, c in zip(runs[name], runs["cot"])])
    return out


def table(summary: dict) -> list[str]:
    def cell(d, digits=2):
        return f"{d['mean']:.{digits}f}" + (f" ± {d['sd']:.{digits}f}" if d["sd"] is not None else "")

    lines = [
        "| variant | generate (s/step) | verify | update | step | rollout / CoT's | step / CoT's | tool calls / step "
        "| sampled tokens / step |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in summary.items():
        ratios = [f"{cell(s[k])}x" if k in s else "" for k in ("rollout_ratio", "step_ratio")]
        lines.append(
            f"| {name} | {cell(s['time_generate_s'])} | {cell(s['time_verify_s'])} | {cell(s['time_update_s'])} "
            f"| {cell(s['time_step_s'])} | {ratios[0]} | {ratios[1]} | {cell(s['tool_calls_per_step'], 0)} "
            f"| {cell(s['tokens_per_step'], 0)} |"
        )
    return lines


PAGE = "tool-rollouts"


def render(results: list[dict]) -> str:
    lines = [
        "# Tool-integrated rollouts against chain of thought",
        "",
        "`benchmarks/tool_rollouts.py` times GRPO steps on the built-in task at the trainer's defaults "
        "(16 prompts x 8) from a chain-of-thought base and from a tool base (the shipped base SFT'd on the teacher's "
        "tool traces), "
        "the tool runs once with a new sandboxed process per code block (`rollout.tool_interpreter fresh`) and "
        "once with a forked copy of a warm sandboxed interpreter (`warm`, the default). Seconds per step are mean "
        "± sd over rounds (each round runs every variant back to back; the first step of each run is left out); "
        "the ratios are taken per round. Rollout = generate (the tool calls included) + verify.",
        "",
    ]
    for r in results:
        s = r["settings"]
        lines += [
            f"{r['rounds']} rounds of {s['steps']} steps, {s['prompts']} prompts x {s['group']}, tool base SFT'd "
            f"{s['sft_steps']} steps, {s['threads'] or 'default'} torch threads:",
            "",
            *table(r["summary"]),
            "",
            stamp_line(r),
            "",
        ]
    return "\n".join(lines)


def summary_block(results: list[dict], where: str) -> str:
    """The latest result in a sentence, for the tools guide."""
    r = results[-1]
    s = r["summary"]
    cot, warm, fresh = s["cot"], s["tool-warm"], s["tool-fresh"]

    def sec(d):
        return f"{d['time_step_s']['mean']:.2f} s"

    return (
        f"Measured ([results]({link('docs/results/tool-rollouts.md', where)}), {r['rounds']} rounds on "
        f"{r['stamp']['machine']}): a GRPO step of 16 prompts x 8 took {sec(cot)} with chain of thought, "
        f"{sec(warm)} with tool calls in warm sandboxes ({warm['step_ratio']['mean']:.2f}x CoT's step; the rollout "
        f"phase alone {warm['rollout_ratio']['mean']:.1f}x) and {sec(fresh)} with a fresh sandboxed process per call "
        f"({fresh['step_ratio']['mean']:.1f}x), each step making {warm['tool_calls_per_step']['mean']:.0f} calls."
    )


blocks = {"tool-rollouts-summary": summary_block}


def main() -> None:
    silence_hub_progress()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=4, help="GRPO steps per run (the first is left out)")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--sft_steps", type=int, default=200)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default="runs/tool-rollouts")
    result_args(p, "tool_rollouts")
    a = p.parse_args()
    a.extra = {}
    if a.quick:
        a.rounds, a.steps, a.prompts, a.group, a.sft_steps, a.threads = 1, 2, 2, 2, 2, 1
        a.extra = {"task.arithmetic.validation_size": 4, "task.arithmetic.heldout_size": 4}
        a.work = tempfile.mkdtemp(prefix="tool-rollouts-quick-")
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    if not variants or any(v not in VARIANTS for v in variants) or a.steps < 2 or a.rounds < 1:
        p.error(f"--variants: some of {tuple(VARIANTS)}; --steps >= 2; --rounds >= 1")
    # the tool base, as reasoning_formats.py makes it (its SFT settings; the checkpoint by validation accuracy)
    a.sft_every = a.sft_steps
    bases = {"cot": "builtin:base"}
    if any(VARIANTS[v][0] == "tool" for v in variants):
        bases["tool"], chosen = base_of("tool", a)
        print(f"tool base: {bases['tool']} (validation: {chosen.get('validation_curve')})", flush=True)
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for round_ in range(a.rounds):
        order = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]
        for name in order:
            runs[name].append(run_variant(name, bases[VARIANTS[name][0]], a, round_))
    summary = summarize(runs)
    print()
    print("\n".join(table(summary)))
    settings = {k: getattr(a, k) for k in ("steps", "prompts", "group", "sft_steps", "threads", "seed")}
    save(a, "tool_rollouts", {"settings": settings, "sft": SFT, "rounds": a.rounds, "runs": runs, "summary": summary})


if __name__ == "__main__":
    main()
