"""`veriloop train --dry-run`: the derived quantities of a run from its config, the model and the data; no step."""

from veriloop import cli
from veriloop.models.loading import load_policy
from veriloop.training.config import TrainConfig
from veriloop.training.preflight import sample_problems


def _rows(out: str) -> dict:
    body = out.split("\n\n", 1)[1]
    return {line[:34].strip(): line[34:].strip() for line in body.splitlines() if line.strip()}


def test_train_dry_run_derives_each_quantity_and_makes_nothing(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert cli.main(["train", "--dry-run", "--run_dir", str(run_dir), "--steps", "10",
                     "--rollout.prompts_per_step", "4", "--rollout.group_size", "3", "--update.inner_updates", "2",
                     "--update.mini_batches", "2", "--update.micro_batch_size", "4", "--rollout.lag", "1",
                     "--rollout.engine", "ray"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert not run_dir.exists()
    rows = _rows(out)
    cfg = TrainConfig()
    longest = max(len(load_policy("builtin:base").encode_prompt(p.prompt))
                  for p in sample_problems(cfg.task.build(), 0))  # fmt: skip
    assert rows["prompts per step (B)"] == "4"
    assert rows["completions per step (B x G)"] == "12 (group size 3)"
    assert rows["longest prompt"].startswith(f"{longest} tokens")
    assert rows["tokens per step, at most"].startswith(f"{12 * (longest + 64):,} ")
    assert rows["optimizer steps per batch (mu)"].startswith("4 ")
    assert rows["micro-batches per optimizer step"] == "2 of up to 4 rows"  # 12 rows / 2 mini-batches / 4
    assert rows["optimizer steps in the run"].startswith("40 ")
    assert rows["staleness, in policy versions"].startswith("up to 7 ")  # lag 1 x mu 4 + mu - 1
    assert "KL reference" in rows["learner memory, estimated"]  # kl.beta 0.1 by default


def test_dry_run_memory_follows_the_options_that_change_it(capsys):
    def memory(*flags):
        assert cli.main(["train", "--dry-run", *flags]) == 0
        return _rows(capsys.readouterr().out)

    plain, no_kl = memory(), memory("--kl.beta", "0")
    assert "KL reference" not in no_kl["learner memory, estimated"]
    assert no_kl["staleness, in policy versions"].startswith("up to 1 ")  # inner_updates 2 by default
    on_policy = memory("--update.inner_updates", "1")
    assert on_policy["staleness, in policy versions"] == "up to 0 (lag 0 x mu + mu - 1): on-policy"
    checkpointed = memory("--update.gradient_checkpointing", "true")
    size = lambda text: float(text.split()[0])  # noqa: E731 - MiB for this model
    assert size(checkpointed["learner memory, estimated"]) < size(plain["learner memory, estimated"])
    shorter = memory("--sampling.max_new_tokens", "32")["sampler KV cache, estimated"]
    assert size(shorter) < size(plain["sampler KV cache, estimated"])


def test_sft_takes_dry_run_too(tmp_path, capsys):
    assert cli.main(["sft", "--dry-run", "--run_dir", str(tmp_path / "sft"), "--steps", "5"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["completions per step (B x G)"].endswith("(group size 1)") and not (tmp_path / "sft").exists()
    assert rows["sampler KV cache, estimated"] == "none: nothing is sampled (rollout.source task-teacher)"


def test_pipeline_dry_run_plans_each_stage_of_its_variant(tmp_path, capsys):
    assert cli.main(["pipeline", "--dry-run", "--run_dir", str(tmp_path / "r1"), "--rl_steps", "7",
                     "--rs_problems", "10", "--rs_samples", "3"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert not (tmp_path / "r1").exists()
    stages = [line.split(":")[0] for line in out.splitlines() if line and not line.startswith((" ", "veriloop"))]
    assert stages == ["cold_start", "rl", "rejection_sample", "sft_from_base", "rl_again"]
    assert "rl: grpo, 7 steps" in out and "10 training problems x 3 samples = 30 completions" in out
    assert cli.main(["pipeline", "--dry-run", "--variant", "rl-long", "--max_minutes", "2"]) == 0
    out = capsys.readouterr().out
    assert "rl: grpo, 2.0 minutes" in out and "cold_start" not in out
