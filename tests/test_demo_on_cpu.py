"""`veriloop demo` end to end on a tiny budget: every stage runs and summary.json has its keys."""

import json

from veriloop import cli


def test_demo_small_budget(tmp_path, capsys):
    run_dir = tmp_path / "demo"
    code = cli.main([
        "demo", "--quiet", "--run_dir", str(run_dir), "--train.steps", "2", "--train.rollout.prompts_per_step", "4",
        "--train.rollout.group_size", "4", "--train.task.arithmetic.heldout_size", "24", "--eval.n_samples", "8",
    ])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "greedy_accuracy" in out and "teacher" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in ("base_accuracy", "final_accuracy", "base_wrong_steps_rate", "final_wrong_steps_rate",
                "base_pass@8", "final_pass@8", "teacher_accuracy", "process_final_accuracy",
                "process_final_wrong_steps_rate", "sft_control_accuracy"):  # fmt: skip
        assert isinstance(summary[key], float), key
        assert 0.0 <= summary[key] <= 1.0
    phases = summary["phase_seconds"]  # every phase's wall time, in the order it ran, within the whole
    assert list(phases) == ["evaluate base and teacher", "train grpo", "evaluate grpo", "train sft-control",
                            "evaluate sft-control", "train grpo-process", "evaluate grpo-process"]  # fmt: skip
    assert all(s >= 0 for s in phases.values()) and sum(phases.values()) <= summary["total_seconds"] + 0.5
    assert "wall time" in out and "train grpo " in out
    for sub in ("grpo", "grpo-process"):
        assert (run_dir / sub / "report.html").is_file() and (run_dir / sub / "metrics.jsonl").is_file()
    assert (run_dir / "sft-control" / "final" / "model.safetensors").is_file()
    # A second demo never overwrites the first.
    again = ["demo", "--quiet", "--run_dir", str(run_dir), "--train.steps", "1", "--process_run", "false",
             "--sft_control", "false", "--train.task.arithmetic.heldout_size", "8",
             "--eval.n_samples", "0"]  # fmt: skip
    assert cli.main(again) == 0
    assert (tmp_path / "demo-2" / "summary.json").is_file()
