"""The trainer's run directory and options: resume reproduces the run, every option does what it says,
bad input fails clearly."""

import json
import logging
import shutil

import pytest
import torch

from veriloop import cli, verifiers
from veriloop.algorithms import overlong_penalty
from veriloop.config import ConfigError, build_config
from veriloop.models.loading import PolicyLoadError, load_policy
from veriloop.models.tiny import TinyModelConfig, build_char_tokenizer, build_tiny_model
from veriloop.rollout.engine import weights_digest
from veriloop.rollout.ledger import Ledger
from veriloop.rollout.records import RecordStore
from veriloop.training.config import TrainConfig
from veriloop.training.run.metrics import TIMING_KEYS
from veriloop.training.trainer import Trainer


@verifiers.register("test-nan")
class NaNReward(verifiers.Verifier):
    name, version = "test-nan", "1"

    def verify(self, completion, reference):
        return self._verdict(float("nan"), {})


@verifiers.register("test-half-flat")
class HalfFlat(verifiers.Verifier):
    """Parity of the digit count for half the problems (by the reference's digit sum), 0 for the others."""

    name, version = "test-half-flat", "1"

    def verify(self, completion, reference):
        if sum(int(c) for c in reference if c.isdigit()) % 2:
            return self._verdict(0.0, {})
        return self._verdict(float(sum(c.isdigit() for c in completion) % 2), {})


@verifiers.register("test-outcomes")
class Outcomes(verifiers.Verifier):
    """Names an outcome per completion (by its length mod 4), as the maths verifiers do; 'error' for one of them."""

    name, version = "test-outcomes", "1"
    kinds = ("correct", "wrong", "no_answer", "error")

    def verify(self, completion, reference):
        kind = self.kinds[len(completion) % 4]
        score = float(kind == "correct")
        return verifiers.Verdict(score, {"outcome": score}, self.tag, kind, kind)


def config(policy, run_dir, **over):
    base = {
        "policy": policy,
        "run_dir": str(run_dir),
        "steps": 4,
        "checkpoint_every": 2,
        "verifier": "test-digit-share",
        "rollout.prompts_per_step": 4,
        "rollout.group_size": 4,
        "update.micro_batch_size": 6,
        "kl.beta": 0.05,
        "sampling.max_new_tokens": 12,
        # the random tiny policy's completions are nearly all cut at 12 tokens (truncation_rate 0.9-1.0): these
        # tests are about the run, not about truncation, so they learn from cut completions too
        "update.mask_truncated": False,
        "optim.lr": 1e-3,
        "task.arithmetic.heldout_size": 10,
    }
    base.update(over)
    if base.get("task.name", "arithmetic") != "arithmetic":  # the built-in task's own option: refused elsewhere
        del base["task.arithmetic.heldout_size"]
    return build_config(TrainConfig, {}, base)


def comparable(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


def final_weights(run_dir):
    return load_policy(str(run_dir / "final")).model.state_dict()


RESUMABLE = {
    "grpo": {},
    "ppo (critic, KL in the reward, adaptive beta)": {"algo": "ppo", "kl.controller": "adaptive", "kl.horizon": 16},
    "lag 1 (records in flight)": {"rollout.lag": 1},
    "dapo (dynamic sampling)": {
        "algo": "dapo",
        "verifier": "test-half-flat",
        "kl.beta": 0.05,
        "rollout.overlong_buffer": 4,
    },
}


def test_the_learner_saves_and_loads_its_own_state(tiny_policy, tmp_path):
    trained = Trainer(config(tiny_policy, tmp_path / "a", steps=2), progress=False)
    trained.train()  # two optimizer steps: Adam's moments and step counts are not zero
    trained.learner.save(tmp_path / "learner")
    fresh = Trainer(config(tiny_policy, tmp_path / "b", steps=2), progress=False)
    assert weights_digest(fresh.learner.weights()) != weights_digest(trained.learner.weights())
    assert not fresh.learner.optimizer.state_dict()["state"]
    fresh.learner.load(tmp_path / "learner")
    assert weights_digest(fresh.learner.weights()) == weights_digest(trained.learner.weights())
    want, got = trained.learner.optimizer.state_dict(), fresh.learner.optimizer.state_dict()
    assert want["state"].keys() == got["state"].keys() and want["state"]
    for key, moments in want["state"].items():
        for name, value in moments.items():
            assert torch.equal(torch.as_tensor(got["state"][key][name]), torch.as_tensor(value)), (key, name)


@pytest.mark.parametrize("over", RESUMABLE.values(), ids=RESUMABLE.keys())
def test_resume_reproduces_the_uninterrupted_run(tiny_policy, tmp_path, over):
    straight = Trainer(config(tiny_policy, tmp_path / "a", **over), progress=False)
    straight.train()
    assert straight.metrics.rows[-1]["kl"] > 0  # the policy moved: the test is not trivially equal

    # Interrupted: 3 steps done, but the crash came before step 3's checkpoint was written.
    Trainer(config(tiny_policy, tmp_path / "b", steps=3, **over), progress=False).train()
    shutil.rmtree(tmp_path / "b" / "checkpoints" / "step-000003")
    resumed = Trainer(config(tiny_policy, tmp_path / "b", steps=4, **over), resume=True, progress=False)
    assert resumed.state.step == 2 and len(resumed.metrics.rows) == 2  # step 3 is redone
    resumed.train()

    assert comparable(resumed.metrics.rows) == comparable(straight.metrics.rows)
    a, b = RecordStore(tmp_path / "a" / "rollouts"), RecordStore(tmp_path / "b" / "rollouts")
    for step in (3, 4):
        strip = lambda rs: [{k: v for k, v in r.to_json().items() if not k.endswith("_at")} for r in rs]  # noqa: E731
        assert strip(a.read(step)) == strip(b.read(step))
    wa, wb = final_weights(tmp_path / "a"), final_weights(tmp_path / "b")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def metric_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_dynamic_sampling_learns_only_from_varied_groups_and_records_every_sample(tiny_policy, tmp_path):
    over = {"rollout.dynamic_sampling": True, "rollout.max_resample_rounds": 3, "kl.beta": 0.0}
    Trainer(config(tiny_policy, tmp_path, steps=3, verifier="test-half-flat", **over), progress=False).train()
    store = RecordStore(tmp_path / "rollouts")
    for row in metric_rows(tmp_path):
        assert row["zero_variance_fraction_before"] > 0  # about half the prompts give flat groups ...
        assert row["zero_variance_fraction"] == 0.0  # ... and none reach the update
        assert 0 < row["update_records"] <= 16 and row["update_records"] % 4 == 0
        assert row["sampled_records"] == 4 * row["groups_sampled"] > row["update_records"]
        sampled = store.read(row["step"])  # dropped groups are records too
        assert len(sampled) == row["sampled_records"]
        assert row["sampled_tokens"] == sum(len(r.completion_ids) for r in sampled)


def test_max_samples_is_a_sample_budget(tiny_policy, tmp_path):
    # 4 prompts x 4 completions per step: a budget of 40 completions ends the run after step 3 (48 sampled).
    trainer = Trainer(config(tiny_policy, tmp_path, steps=10, max_samples=40), progress=False)
    trainer.train()
    assert [r["step"] for r in trainer.metrics.rows] == [1, 2, 3] and trainer.state.step == 3
    assert (tmp_path / "checkpoints" / "step-000003").is_dir() and (tmp_path / "final").is_dir()


@pytest.mark.parametrize("budget", [{"max_minutes": 1e-6}, {"max_samples": 16}], ids=["time", "samples"])
def test_a_budget_shows_no_eta_from_the_step_cap(tiny_policy, tmp_path, capsys, caplog, budget):
    # the demo's continued-SFT control runs on a time budget with steps as a 10^7 cap: no "1180 hours left"
    caplog.set_level(logging.INFO, logger="veriloop")  # off a terminal progress is lines through logging
    Trainer(config(tiny_policy, tmp_path, steps=10_000_000, **budget), progress=True).train()
    shown = "".join(capsys.readouterr()) + caplog.text
    assert "grpo step 1 | " in caplog.text  # the progress line: a count without a total, and no ETA
    assert f"stopping after step 1: {next(iter(budget))}=" in shown and "/10000000" not in shown


def test_overlong_shaping_is_a_reward_component(tiny_policy, tmp_path):
    Trainer(config(tiny_policy, tmp_path, steps=1, **{"rollout.overlong_buffer": 4}), progress=False).train()
    records = RecordStore(tmp_path / "rollouts").read(1)
    lengths = torch.tensor([len(r.completion_ids) for r in records])
    expected = overlong_penalty(lengths, 12, 4).tolist()
    assert min(expected) < 0  # some completions reach the buffer: the test is not trivially 0
    assert [r.reward_components["overlong"] for r in records] == expected
    for r in records:
        assert r.reward == pytest.approx(r.reward_components["digits"] + r.reward_components["overlong"])


def test_the_length_cost_is_a_reward_component_beside_the_overlong_ramp(tiny_policy, tmp_path):
    over = {"rollout.length_cost": 25.0, "rollout.overlong_buffer": 4}  # 25 per 1,000 tokens: 0.025 a token
    Trainer(config(tiny_policy, tmp_path, steps=1, **over), progress=False).train()
    records = RecordStore(tmp_path / "rollouts").read(1)
    lengths = [len(r.completion_ids) for r in records]
    assert len(set(lengths)) > 1  # lengths differ: the component is not one constant
    assert [r.reward_components["length_cost"] for r in records] == pytest.approx([-0.025 * n for n in lengths])
    for r in records:
        parts = r.reward_components
        assert r.reward == pytest.approx(parts["digits"] + parts["overlong"] + parts["length_cost"])


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_length_cost_is_refused_by_name(tiny_policy, tmp_path, value):
    # nan and inf are refused where the flag is read (every float option must be finite), -1 by the option's own check
    expected = "must be >= 0" if value == "-1" else "expected a finite number"
    with pytest.raises(ValueError, match=rf"rollout\.length_cost:? {expected}.*{value}"):
        config(tiny_policy, tmp_path, **{"rollout.length_cost": value})


def test_mask_truncated_leaves_cut_completions_out_of_the_update(tiny_policy, tmp_path):
    over = {"update.mask_truncated": True, "update.skip_zero_advantage": False, "sampling.max_new_tokens": 40}
    Trainer(config(tiny_policy, tmp_path, steps=2, **over), progress=False).train()
    store = RecordStore(tmp_path / "rollouts")
    for row in metric_rows(tmp_path):
        records = store.read(row["step"])
        ended = sum(not r.truncated for r in records)
        assert 0 < ended < len(records)  # both kinds present: the test can fail
        assert row["update_records"] == ended


def test_lag_and_max_staleness(tiny_policy, tmp_path):
    # lag 2: step s learns from step s-2's records; each update moves the policy 2 versions
    # (2 inner passes x 1 mini-batch), so by step 4 those records are 2 versions old.
    over = {"rollout.lag": 2, "rollout.max_staleness": 1, "update.skip_zero_advantage": False}
    Trainer(config(tiny_policy, tmp_path, steps=4, **over), progress=False).train()
    rows = metric_rows(tmp_path)
    assert [r["update_records"] for r in rows[:2]] == [0, 0]  # warming up: records still in flight
    assert rows[2]["update_records"] == 16 and rows[2]["policy_version"] == 2  # step 1's records, 0 versions old
    assert rows[3]["stale_groups_dropped"] == 4 and rows[3]["update_records"] == 0  # step 2's: 2 > 1 old


def test_truncated_importance_sampling_reports_the_sampler_learner_mismatch(tiny_policy, tmp_path):
    Trainer(config(tiny_policy, tmp_path, steps=2, **{"loss.tis_cap": 2.0}), progress=False).train()
    for row in metric_rows(tmp_path):
        assert 0.0 <= row["logprob_mismatch"] < 1e-4  # same weights, same transforms: only float noise


def test_reference_reset_makes_the_current_policy_the_anchor(tiny_policy, tmp_path):
    kept = Trainer(config(tiny_policy, tmp_path / "kept", steps=3), progress=False)
    kept.train()
    reset = Trainer(config(tiny_policy, tmp_path / "reset", steps=3, **{"kl.reset_every": 2}), progress=False)
    reset.train()
    assert reset.state.reference_step == 2 and kept.state.reference_step == 0
    ref, pol = reset.reference.model.state_dict(), final_weights(tmp_path / "reset")
    assert not all(torch.equal(ref[k], pol[k]) for k in ref)  # step 3 moved the policy away again ...
    # ... but only by one step's update: the KL to the fresh reference is smaller than to the old one.
    assert reset.metrics.rows[2]["kl"] < kept.metrics.rows[2]["kl"]
    assert reset.metrics.rows[1]["kl"] == kept.metrics.rows[1]["kl"]


def test_adaptive_kl_controller_moves_beta(tiny_policy, tmp_path):
    # k3 (>= 0 at every token) rather than ppo's k1, whose 16-sample estimate of a small KL can come out
    # negative: the controller's reaction to "KL above target" must not hang on the sign of sampling noise.
    over = {"algo": "ppo", "kl.controller": "adaptive", "kl.target": 1e-3, "kl.horizon": 16, "kl.estimator": "k3"}
    Trainer(config(tiny_policy, tmp_path, steps=3, **over), progress=False).train()
    betas = [r["kl_beta"] for r in metric_rows(tmp_path)]
    # step 1: the policy is the reference, KL ~1e-7 (float noise) < target -> beta * (1 - 0.2 * 16/16);
    # then the policy has moved, KL per completion ~0.3 > target -> beta * 1.2 each step.
    assert betas[0] == pytest.approx(0.05 * 0.8)
    assert betas[2] == pytest.approx(betas[1] * 1.2) and betas[1] == pytest.approx(betas[0] * 1.2)


def test_run_directory_contents(tiny_policy, tmp_path):
    Trainer(config(tiny_policy, tmp_path, steps=2), progress=False).train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    required = {
        "reward_mean",
        "reward_std",
        "accuracy",
        "zero_variance_fraction",
        "advantage_mean",
        "advantage_std",
        "completion_len_mean",
        "completion_len_max",
        "truncation_rate",
        "kl",
        "clip_frac_low",
        "clip_frac_high",
        "ratio_min",
        "ratio_max",
        "entropy",
        "grad_norm",
        "tokens_per_s",
        "time_generate_s",
        "time_verify_s",
        "time_update_s",
        "reward_digits",
    }
    assert required <= set(rows[0])
    records = RecordStore(tmp_path / "rollouts").read(1)
    assert len(records) == 16
    r = records[0]
    assert r.sampling["temperature"] == 0.7 and "seed" in r.sampling and r.policy_version == 0
    assert r.verifier == "test-digit-share@1" and r.finish_reason in ("eos", "length")
    assert records[-1].group_id == "1-0-3"  # step 1, sampling round 0, prompt 3
    assert RecordStore(tmp_path / "rollouts").read(2)[0].policy_version > 0
    saved = tmp_path / "checkpoints" / "step-000002"
    assert {p.name for p in saved.iterdir()} == {
        "ledger.jsonl",
        "manifest.json",
        "model",
        "optimizer.pt",
        "rng.pt",
        "trainer_state.json",
        "config.yaml",
        "metrics.jsonl",
    }
    # the ledger: each request of each step issued and done once, its records (as sampled, before the
    # verdicts the step's file adds) written once
    assert Ledger(tmp_path).done_counts() == {"1-0-0": 1, "2-0-0": 1}
    served = Ledger(tmp_path).read_request("1-0-0")
    assert [(r.completion_ids, r.behavior_logprobs) for r in served] == [
        (r.completion_ids, r.behavior_logprobs) for r in records
    ] and served[0].reward is None
    assert (saved / "model" / "model.safetensors").is_file() and (tmp_path / "config.yaml").is_file()


def test_zero_kl_weight_loads_no_reference(tiny_policy, tmp_path):
    trainer = Trainer(config(tiny_policy, tmp_path, steps=1, **{"kl.beta": 0.0}), progress=False)
    assert trainer.reference is None
    trainer.train()
    row = trainer.metrics.rows[0]
    assert "kl" not in row  # nothing measured it: no placeholder 0.0
    assert row["grad_norm"] > 0 and row["ratio_min"] <= 1 <= row["ratio_max"]


def test_a_step_that_learns_from_nothing_reports_no_update_statistics(tiny_policy, tmp_path):
    # rollout.lag 1: step 1 only samples (its batch is in flight), so nothing was updated or measured.
    Trainer(config(tiny_policy, tmp_path, steps=2, **{"rollout.lag": 1}), progress=False).train()
    first, second = metric_rows(tmp_path)
    for key in ("kl", "grad_norm", "ratio_min", "ratio_max", "clip_frac_low", "entropy", "reward_mean", "accuracy"):
        assert key not in first, key
        assert key in second, key
    assert first["sampled_records"] == 16 and first["update_records"] == 0


def test_records_and_metrics_keep_every_verdict_outcome(tiny_policy, tmp_path):
    Trainer(config(tiny_policy, tmp_path, steps=2, verifier="test-outcomes"), progress=False).train()
    rows, store = metric_rows(tmp_path), RecordStore(tmp_path / "rollouts")
    for step, row in enumerate(rows, start=1):
        records = store.read(step)
        kinds = [r.verdict_outcome for r in records]
        assert kinds == [Outcomes.kinds[len(r.completion) % 4] for r in records]
        for kind in set(kinds):
            assert row[f"outcome_rate_{kind}"] == pytest.approx(kinds.count(kind) / len(kinds))
        assert sum(v for k, v in row.items() if k.startswith("outcome_rate_")) == pytest.approx(1.0)
        # a verifier failure is no reward: groups holding an 'error' verdict are left out of the update
        groups = {r.group_id for r in records if r.verdict_outcome == "error"}
        assert row.get("error_groups_dropped", 0) == len(groups)
        assert row["update_records"] <= 16 - 4 * len(groups)


def test_adaptive_kl_controller_works_with_the_kl_in_the_loss(tiny_policy, tmp_path):
    # The learner measures KL per completion on its first pass; the controller steers beta with it.
    over = {"kl.controller": "adaptive", "kl.target": 1e-3, "kl.horizon": 16, "kl.placement": "loss"}
    Trainer(config(tiny_policy, tmp_path, steps=3, **over), progress=False).train()
    rows = metric_rows(tmp_path)
    betas = [r["kl_beta"] for r in rows]
    # step 1: policy == reference, KL ~ 0 < target -> beta * (1 - 0.2 * 16/16); then KL > target -> x 1.2
    assert betas[0] == pytest.approx(0.05 * 0.8)
    assert rows[1]["kl_per_completion"] > 1e-3
    assert betas[1] == pytest.approx(betas[0] * 1.2) and betas[2] == pytest.approx(betas[1] * 1.2)


def test_critic_warmup_trains_only_the_critic(tiny_policy, tmp_path):
    over = {"algo": "ppo", "rollout.prompts_per_step": 8, "critic.warmup_steps": 2}
    trainer = Trainer(config(tiny_policy, tmp_path, steps=3, **over), progress=False)
    start = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
    trainer.train_step(1)
    trainer.train_step(2)
    assert all(torch.equal(start[k], v) for k, v in trainer.policy.model.state_dict().items())
    assert trainer.state.policy_version == 0 and "value_loss" in trainer.metrics.rows[1]
    trainer.train_step(3)
    assert trainer.state.policy_version > 0


@pytest.mark.parametrize(
    "over, message",
    [
        (
            {"algo": "dr_grpo", "advantage.std": "sample"},
            "advantage.std='sample' is not read by the advantage estimator 'dr_grpo'.*Dr. GRPO .* only centres",
        ),
        ({"algo": "rloo", "advantage.eps": 0.1}, "advantage.eps=0.1 is not read by the advantage estimator 'rloo'"),
        (
            {"algo": "grpo", "advantage.baseline": "constant"},
            "advantage.baseline='constant' is not read by the advantage estimator 'grpo'"
            ".*advantage.estimator reinforce",
        ),
        (
            {"algo": "dpo", "loss.aggregation": "token-mean"},
            "loss.aggregation='token-mean' is not read by the policy objective 'dpo'",
        ),
        (
            {"algo": "dpo", "loss.entropy_coef": 0.01},
            "loss.entropy_coef=0.01 is not read by the policy objective 'dpo'",
        ),
        ({"algo": "dpo", "loss.tis_cap": 2.0}, "loss.tis_cap=2.0 is not read by the policy objective 'dpo'"),
        ({"algo": "dpo", "kl.beta": 0.1}, "kl.beta does not apply to loss.policy_loss=dpo"),
        (
            {"algo": "grpo", "critic.warmup_steps": 3},
            "critic.warmup_steps=3 is not read by the advantage estimator 'grpo'.*advantage.estimator gae",
        ),
        (
            {"algo": "grpo", "process.outcome_weight": 1.0},
            "process.outcome_weight=1.0 is not read by the advantage estimator 'grpo'.*advantage.estimator process",
        ),
    ],
)
def test_options_that_would_do_nothing_are_refused(over, message):
    with pytest.raises(ConfigError, match=message):
        build_config(TrainConfig, {}, over)


def test_sft_model_options_need_a_new_model_and_the_demo_owns_its_run_dirs():
    from veriloop.demo import DemoConfig
    from veriloop.training.recipes import SFT_COMMAND_DEFAULTS

    with pytest.raises(ConfigError, match="model.num_layers=2 is not read by the starting policy .*builtin:init"):
        build_config(TrainConfig, SFT_COMMAND_DEFAULTS, {"policy": "builtin:base", "model.num_layers": 2})
    assert build_config(TrainConfig, SFT_COMMAND_DEFAULTS, {"model.num_layers": 2}).model.num_layers == 2
    with pytest.raises(ConfigError, match="set --run_dir instead"):
        build_config(DemoConfig, {}, {"train.run_dir": "runs/mine"})


def test_refuses_to_overwrite_a_run(tiny_policy, tmp_path):
    Trainer(config(tiny_policy, tmp_path, steps=1), progress=False).train()
    with pytest.raises(ValueError, match="already holds a run"):
        Trainer(config(tiny_policy, tmp_path, steps=1), progress=False)


def test_non_finite_reward_stops_and_keeps_what_was_written(tiny_policy, tmp_path):
    Trainer(config(tiny_policy, tmp_path, steps=2), progress=False).train()
    # the same run resumed (a changed verifier would be refused), its reward made non-finite by the object given
    trainer = Trainer(
        config(tiny_policy, tmp_path, steps=3), resume=True, progress=False, verifier=verifiers.get("test-nan")
    )
    with pytest.raises(ValueError, match="non-finite reward"):
        trainer.train()
    assert (tmp_path / "checkpoints" / "step-000002" / "trainer_state.json").is_file()
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="kl.betta.*beta"):
        build_config(TrainConfig, {"kl": {"betta": 0.1}})
    with pytest.raises(ConfigError, match="group_size must be >= 2 for estimator grpo"):
        build_config(TrainConfig, {}, {"rollout.group_size": "1"})
    with pytest.raises(ConfigError, match="update.inner_updates: expected an integer"):
        build_config(TrainConfig, {}, {"update.inner_updates": "two"})
    with pytest.raises(ConfigError, match="loss.aggregation"):
        build_config(TrainConfig, {}, {"loss.aggregation": "mean"})
    with pytest.raises(ConfigError, match=r"rollout.overlong_buffer \(16\).*max_new_tokens \(12\)"):
        build_config(TrainConfig, {}, {"algo": "dapo", "sampling.max_new_tokens": 12})


def run_cli(args, capsys):
    code = cli.main(args)
    captured = capsys.readouterr()
    return code, captured.err


def test_cli_reports_bad_input_without_a_traceback(tiny_policy, tmp_path, capsys):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("kl:\n  betta: 0.1\n")
    code, err = run_cli(["train", "--config", str(bad_yaml), "--run_dir", str(tmp_path / "r1")], capsys)
    assert code == 2 and "bad.yaml" in err and "kl.betta" in err and "'beta'" in err

    code, err = run_cli(
        ["train", "--policy", tiny_policy, "--rollout.group_size", "1", "--run_dir", str(tmp_path / "r2")], capsys
    )
    assert code == 2 and "group_size" in err

    data = tmp_path / "problems.jsonl"
    data.write_text('{"prompt": "1+1?", "reference": "1+1"}\n{"prompt": "2+2?"}\n')
    code, err = run_cli(
        [
            "train",
            "--policy",
            tiny_policy,
            "--task.name",
            "jsonl",
            "--task.data",
            str(data),
            "--task.verifier",
            "arithmetic-outcome",
            "--run_dir",
            str(tmp_path / "r3"),
        ],
        capsys,
    )
    assert code == 2 and "problems.jsonl:2" in err and "'reference'" in err

    code, err = run_cli(["train", "--policy", str(tmp_path / "missing"), "--run_dir", str(tmp_path / "r4")], capsys)
    assert code == 2 and "not a directory" in err

    code, err = run_cli(["train", "--resume", str(tmp_path / "nothing-here")], capsys)
    assert code == 2 and "config.yaml" in err


def test_tokenizer_model_mismatch_is_named(tmp_path):
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2))
    model.resize_token_embeddings(50)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with pytest.raises(PolicyLoadError, match=r"tokenizer has \d+ tokens but the model's embedding has only 50"):
        load_policy(str(tmp_path))


def test_cli_algo_recipes(tiny_policy, tmp_path, capsys):
    assert cli.main(["algos"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in ("grpo", "ppo", "rloo", "dpo", "distill", "sft"))

    run_dir = tmp_path / "rloo"
    args = [
        "train",
        "--algo",
        "rloo",
        "--policy",
        tiny_policy,
        "--run_dir",
        str(run_dir),
        "--steps",
        "1",
        "--rollout.prompts_per_step",
        "2",
        "--rollout.group_size",
        "2",
        "--sampling.max_new_tokens",
        "8",
        "--verifier",
        "test-digit-share",
        "--loss.policy_loss",
        "clip",
    ]
    assert cli.main(args) == 0
    saved = (run_dir / "config.yaml").read_text()
    # the recipe's defaults, under the user's flag
    assert "algo: rloo" in saved and "estimator: rloo" in saved and "placement: reward" in saved
    assert "policy_loss: clip" in saved

    code, err = run_cli(["train", "--algo", "ppo2", "--run_dir", str(tmp_path / "x")], capsys)
    assert code == 2 and "ppo2" in err and "grpo" in err
    code, err = run_cli(["train", "--algo", "distill", "--run_dir", str(tmp_path / "y")], capsys)
    assert code == 2 and "rollout.teacher" in err


def test_sft_on_a_jsonl_task_reads_demonstrations(tiny_policy, tmp_path):
    data = tmp_path / "demos.jsonl"
    data.write_text(
        '{"prompt": "1+1?", "reference": "1+1", "completion": "1+1=2;answer=2"}\n'
        '{"prompt": "2+2?", "reference": "2+2", "completion": "2+2=4;answer=4"}\n'
    )
    over = {
        "algo": "sft",
        "task.name": "jsonl",
        "task.data": str(data),
        "task.verifier": "arithmetic-outcome",
        "rollout.prompts_per_step": 4,
        "rollout.group_size": 1,
    }
    trainer = Trainer(config(tiny_policy, tmp_path / "ok", steps=2, **over), progress=False)
    trainer.train()
    texts = {r.completion for r in RecordStore(tmp_path / "ok" / "rollouts").read(1)}
    assert texts <= {"1+1=2;answer=2", "2+2=4;answer=4"} and metric_rows(tmp_path / "ok")[0]["update_records"] == 4

    data.write_text(
        '{"prompt": "1+1?", "reference": "1+1", "completion": "1+1=2;answer=2"}\n'
        '{"prompt": "2+2?", "reference": "2+2"}\n'
    )
    over["rollout.prompts_per_step"] = 8
    with pytest.raises(ValueError, match=r"demos.jsonl:2: no 'completion' field"):
        Trainer(config(tiny_policy, tmp_path / "missing", steps=1, **over), progress=False).train()


def test_eval_reads_the_split_it_is_told_and_jsonl_tasks_take_a_validation_file(tiny_policy, tmp_path, capsys):
    val = tmp_path / "val.jsonl"
    val.write_text('{"prompt": "1+1?", "reference": "1+1"}\n{"prompt": "2+3?", "reference": "2+3"}\n')
    held = tmp_path / "held.jsonl"
    held.write_text('{"prompt": "4+4?", "reference": "4+4"}\n')
    common = [
        "--policy",
        tiny_policy,
        "--task.name",
        "jsonl",
        "--task.heldout_data",
        str(held),
        "--task.verifier",
        "arithmetic-outcome",
        "--eval.n_samples",
        "0",
        "--out",
    ]
    assert (
        cli.main(
            ["eval", *common, str(tmp_path / "v.json"), "--split", "validation", "--task.validation_data", str(val)]
        )
        == 0
    )
    assert "2 validation problems" in capsys.readouterr().out
    assert json.loads((tmp_path / "v.json").read_text())["split"] == "validation"
    assert cli.main(["eval", *common, str(tmp_path / "h.json")]) == 0
    assert "1 held-out problems" in capsys.readouterr().out
    # a jsonl task without a validation file says so, naming the option
    assert cli.main(["eval", *common, str(tmp_path / "x.json"), "--split", "validation"]) == 2
    assert "task.validation_data" in capsys.readouterr().err
