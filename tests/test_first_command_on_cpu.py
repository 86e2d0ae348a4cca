"""The first commands a user tries train with the task's own verifier, or stop before any step saying what to pass."""

import json

import pytest

from veriloop import cli
from veriloop.config import ConfigError, build_config
from veriloop.errors import InputError
from veriloop.models.loading import load_policy
from veriloop.tasks.config import TaskConfig
from veriloop.training.config import TrainConfig
from veriloop.training.run.preflight import check_context_fits, check_verifier_reads_references, sample_problems


@pytest.fixture
def rows(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "reference": f"{a}+{a}"}) + "\n" for a in range(1, 9)))
    return path


def _train(*argv, capsys):
    status = cli.main(["train", "--quiet", *argv])
    return status, capsys.readouterr().err


def test_gsm8k_alone_says_the_base_is_too_short_and_names_the_recipe(tmp_path, capsys):
    status, err = _train("--task.name", "gsm8k", "--run_dir", str(tmp_path / "run"), capsys=capsys)
    assert status == cli.EXIT_USAGE and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "policy 'builtin:base' has a context of 256 tokens" in err and "task 'gsm8k'" in err
    assert "--policy DIR" in err and "configs/gsm8k-qwen2.5-0.5b-instruct.yaml" in err
    assert not (tmp_path / "run").exists()  # before the run directory


def test_the_reward_verifier_is_the_task_s_own_unless_named():
    assert build_config(TrainConfig, {}, {}).verifier == "arithmetic"  # R = 0.8 outcome + 0.2 format
    assert build_config(TrainConfig, {}, {"task.name": "gsm8k"}).verifier == "gsm8k"
    assert build_config(TrainConfig, {}, {"task.name": "gsm8k", "task.reasoning": "pot"}).verifier == "gsm8k-pot"
    assert build_config(TrainConfig, {}, {"task.name": "gsm8k", "verifier": "math"}).verifier == "math"
    own = {"task.name": "jsonl", "task.data": "x.jsonl", "task.verifier": "math"}
    assert build_config(TrainConfig, {}, own).verifier == "math"


def test_a_jsonl_task_without_a_verifier_is_refused_before_any_step(rows, tmp_path, capsys):
    status, err = _train(
        "--task.name", "jsonl", "--task.data", str(rows), "--run_dir", str(tmp_path / "run"), capsys=capsys
    )
    assert status == cli.EXIT_USAGE
    assert "task jsonl has no verifier of its own" in err and "--task.verifier" in err and "--verifier" in err
    assert not (tmp_path / "run").exists()
    with pytest.raises(InputError, match="task jsonl has no verifier of its own: name the verifier of its references"):
        TaskConfig(name="jsonl", data=str(rows)).eval_verifiers()  # eval and search do not guess either


def test_a_verifier_that_cannot_read_the_references_is_refused_naming_both(tmp_path, capsys):
    status, err = _train(
        "--task.name", "gsm8k", "--verifier", "arithmetic", "--run_dir", str(tmp_path / "run"), capsys=capsys
    )
    assert status == cli.EXIT_USAGE
    assert "verifier 'arithmetic' cannot read the references of task 'gsm8k'" in err
    assert "is not a valid expression" in err and "the task's own (gsm8k)" in err
    assert not (tmp_path / "run").exists()


def test_the_checks_pass_what_fits(rows, tiny_policy):
    from veriloop.verifiers import get

    task = TaskConfig(name="jsonl", data=str(rows), verifier="arithmetic-outcome").build()
    problems = sample_problems(task, seed=0)
    assert len(problems) == 8 and len(problems[0].prompt) >= len(problems[-1].prompt)  # the longest first
    check_verifier_reads_references(get("arithmetic-outcome"), "arithmetic-outcome", task, "", problems)
    policy = load_policy(tiny_policy)
    check_context_fits(policy, tiny_policy, task, problems, max_new_tokens=64)
    with pytest.raises(InputError, match="has a context of .* tokens, but prompts of task 'jsonl' need more"):
        check_context_fits(policy, tiny_policy, task, problems, max_new_tokens=10_000)
    with pytest.raises(InputError, match="verifier 'gsm8k' cannot read the references of task 'jsonl'"):
        check_verifier_reads_references(get("gsm8k"), "gsm8k", task, "", [type(problems[0])("x", "p", "")])


def test_help_shows_every_option_s_true_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    out = capsys.readouterr().out
    assert "(default: None)" not in out
    assert "(default: 0.7)" in out  # sampling.temperature of train, not SamplingParams' own 1.0
    with pytest.raises(
        ConfigError, match=r"optim\.momentum=0\.5 is not read by the optimizer 'adamw'.*optim\.name sgd"
    ):
        build_config(TrainConfig, {}, {"optim.momentum": 0.5})
