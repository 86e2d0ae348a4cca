"""The GRPO trainer's run directory: resume reproduces the run, bad input fails clearly."""

import json
import shutil

import pytest
import torch

from veriloop import cli, verifiers
from veriloop.models.loading import PolicyLoadError, load_policy
from veriloop.models.tiny import TinyModelConfig, build_char_tokenizer, build_tiny_model
from veriloop.rollout.records import RecordStore
from veriloop.training.config import ConfigError, build_config
from veriloop.training.metrics import TIMING_KEYS
from veriloop.training.run_config import TrainConfig
from veriloop.training.trainer import Trainer


@verifiers.register("test-digit-share")
class DigitShare(verifiers.Verifier):
    """Share of digits in the completion: a dense reward a random tiny model varies on."""

    name, version = "test-digit-share", "1"

    def verify(self, completion, reference):
        score = sum(c.isdigit() for c in completion) / max(len(completion), 1)
        return self._verdict(score, {"digits": score})


@verifiers.register("test-nan")
class NaNReward(verifiers.Verifier):
    name, version = "test-nan", "1"

    def verify(self, completion, reference):
        return self._verdict(float("nan"), {})


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    path = tmp_path_factory.mktemp("policy")
    tok = build_char_tokenizer()
    model = build_tiny_model(
        tok, TinyModelConfig(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2), seed=1
    )
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


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
        "optim.lr": 1e-3,
        "task.arithmetic.heldout_size": 10,
    }
    base.update(over)
    return build_config(TrainConfig, {}, base)


def comparable(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


def final_weights(run_dir):
    return load_policy(str(run_dir / "final")).model.state_dict()


def test_resume_reproduces_the_uninterrupted_run(tiny_policy, tmp_path):
    straight = Trainer(config(tiny_policy, tmp_path / "a"), progress=False)
    straight.train()
    assert straight.metrics.rows[-1]["kl"] > 0  # the policy moved: the test is not trivially equal

    # Interrupted: 3 steps done, but the crash came before step 3's checkpoint was written.
    Trainer(config(tiny_policy, tmp_path / "b", steps=3), progress=False).train()
    shutil.rmtree(tmp_path / "b" / "checkpoints" / "step-000003")
    resumed = Trainer(config(tiny_policy, tmp_path / "b", steps=4), resume=True, progress=False)
    assert resumed.state.step == 2 and len(resumed.metrics.rows) == 2  # step 3 is redone
    resumed.train()

    assert comparable(resumed.metrics.rows) == comparable(straight.metrics.rows)
    a, b = RecordStore(tmp_path / "a" / "rollouts"), RecordStore(tmp_path / "b" / "rollouts")
    for step in (3, 4):
        strip = lambda rs: [{k: v for k, v in r.to_json().items() if not k.endswith("_at")} for r in rs]  # noqa: E731
        assert strip(a.read(step)) == strip(b.read(step))
    wa, wb = final_weights(tmp_path / "a"), final_weights(tmp_path / "b")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


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
    assert {p.name for p in saved.iterdir()} == {"model", "optimizer.pt", "rng.pt", "trainer_state.json"}
    assert (saved / "model" / "model.safetensors").is_file() and (tmp_path / "config.yaml").is_file()


def test_zero_kl_weight_loads_no_reference(tiny_policy, tmp_path):
    trainer = Trainer(config(tiny_policy, tmp_path, steps=1, **{"kl.beta": 0.0}), progress=False)
    assert trainer.reference is None
    trainer.train()
    assert trainer.metrics.rows[0]["kl"] == 0.0


def test_refuses_to_overwrite_a_run(tiny_policy, tmp_path):
    Trainer(config(tiny_policy, tmp_path, steps=1), progress=False).train()
    with pytest.raises(ValueError, match="already holds a run"):
        Trainer(config(tiny_policy, tmp_path, steps=1), progress=False)


def test_non_finite_reward_stops_and_keeps_what_was_written(tiny_policy, tmp_path):
    Trainer(config(tiny_policy, tmp_path, steps=2), progress=False).train()
    trainer = Trainer(config(tiny_policy, tmp_path, steps=3, verifier="test-nan"), resume=True, progress=False)
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
