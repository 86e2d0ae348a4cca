"""Mixed rewards per data source (seed 003 s.5.1, s.6 stage 4): a batch that holds several kinds of rows scores each
kind with its own source (a rule verifier, or a reward model for a kind without rules), the components of each kept
and each kind's metrics apart; the R1 pipeline's last RL stage takes its own reward and data settings."""

import json

import pytest
import torch

from veriloop.config import ConfigError, build_config
from veriloop.errors import InputError
from veriloop.io import read_jsonl
from veriloop.models.loading import load_policy
from veriloop.pipeline import PipelineConfig, final_rl_config
from veriloop.preference.model import RewardModel
from veriloop.preference.verifier import PreferenceVerifier
from veriloop.rollout.records import Record
from veriloop.tasks.jsonl import DatasetError, load_problems
from veriloop.training.config import TrainConfig
from veriloop.training.loop.reward_sources import SourceRoutedReward, parse_reward_sources
from veriloop.training.run.metrics import accuracy, accuracy_metrics
from veriloop.training.trainer import Trainer
from veriloop.verifiers import get

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory):
    """A reward model with a random head (seeded): distinct scores, no training needed to test the routing."""
    path = tmp_path_factory.mktemp("rm") / "rm"
    torch.manual_seed(0)
    rm = RewardModel(load_policy("builtin:base"))
    with torch.no_grad():
        rm.head.weight.normal_()
    rm.save(path)
    return path


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A JSONL data mix: arithmetic rows of kind maths (a rule checks them) and rows of kind chat (no rule)."""
    path = tmp_path_factory.mktemp("mix") / "mix.jsonl"
    rows = [
        {"prompt": f"{a}+{b}?", "reference": f"{a}+{b}", "data_source": "maths"} for a, b in [(12, 3), (7, 5), (9, 9)]
    ] + [{"prompt": f"{a}*{b}?", "reference": f"{a}*{b}", "data_source": "chat"} for a, b in [(3, 4), (6, 2)]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_reward_sources_parse_and_refuse_by_hand():
    assert parse_reward_sources("maths=gsm8k, chat=reward_model") == {"maths": "gsm8k", "chat": "reward_model"}
    assert parse_reward_sources("") == {}
    for bad, match in (("maths", "DATA_SOURCE=VERIFIER"), ("=gsm8k", "DATA_SOURCE"), ("a=x,a=y", "named twice")):
        with pytest.raises(InputError, match=match):
            parse_reward_sources(bad)


def test_each_completion_goes_to_its_own_kind_s_verifier_in_order(reward_model):
    rm = PreferenceVerifier(path=str(reward_model), unaudited=True)
    routed = SourceRoutedReward({"chat": rm}, get("arithmetic-outcome"))
    comps = ["12+3=15;answer=15", "3*4=12;answer=12", "12+3=14;answer=14", "6*2=12;answer=12"]
    refs, prompts = ["12+3", "3*4", "12+3", "6*2"], ["12+3?", "3*4?", "12+3?", "6*2?"]
    sources = ["maths", "chat", "", "chat"]
    verdicts = routed.verify_batch(comps, refs, prompts=prompts, data_sources=sources)
    assert [v.score for v in verdicts[::2]] == [1.0, 0.0]  # maths (not named: the default) and '' by the rule
    assert verdicts[0].version.startswith("arithmetic-outcome@") and "outcome" in verdicts[0].components
    expected = rm.rm.score(["3*4?", "6*2?"], ["3*4=12;answer=12", "6*2=12;answer=12"])
    assert [v.score for v in verdicts[1::2]] == pytest.approx(expected)
    assert all(v.version.startswith("bradley-terry@") and set(v.components) == {"reward_model"} for v in verdicts[1::2])
    with pytest.raises(InputError, match="reads the prompts"):
        routed.verify_batch(comps, refs, data_sources=sources)


def _record(source, components, reward):
    return Record("p", "g", "q", "r", [1], [2], "c", [0.0], {}, 0, "eos", reward, components, "v", data_source=source)


def test_accuracy_counts_only_what_a_rule_judged():
    records = [
        _record("maths", {"outcome": 1.0}, 1.0),
        _record("maths", {"outcome": 0.0}, 0.0),
        _record("chat", {"reward_model": 2.5}, 2.5),  # r >= 1 is no right answer
        _record("", {}, 1.0),  # a rule without components: reward >= 1
    ]
    assert accuracy(records) == pytest.approx(2 / 3)
    assert accuracy(records[2:3]) is None
    row = accuracy_metrics(records)
    assert row["accuracy"] == pytest.approx(2 / 3)
    assert row["source_maths_accuracy"] == 0.5 and row["source_maths_records"] == 2
    assert row["source_chat_reward_mean"] == 2.5 and "source_chat_accuracy" not in row
    assert row["source_task_accuracy"] == 1.0
    assert not any(k.startswith("source_") for k in accuracy_metrics(records[:2]))  # one kind: no split


def test_a_mixed_batch_trains_with_each_kind_scored_by_its_own_source(mixed, reward_model, tmp_path):
    cfg = build_config(
        TrainConfig,
        {},
        {
            "run_dir": str(tmp_path / "run"),
            "task.name": "jsonl",
            "task.data": str(mixed),
            "task.verifier": "arithmetic-outcome",
            "reward_model": str(reward_model),
            "reward_sources": "chat=reward_model",
            "steps": 1,
            "rollout.prompts_per_step": 8,
            "rollout.group_size": 4,
            "threads": 1,
        },
    )
    Trainer(cfg, progress=False).train()
    records = read_jsonl(tmp_path / "run" / "rollouts" / "step-000001.jsonl.gz")
    kinds = {r["data_source"] for r in records}
    assert kinds == {"maths", "chat"}
    rule, rm = get("arithmetic-outcome"), PreferenceVerifier(path=str(reward_model), unaudited=True)
    for r in records:
        if r["data_source"] == "maths":
            assert r["verifier"] == rule.tag and r["reward"] == rule.verify(r["completion"], r["reference"]).score
        else:
            assert r["verifier"] == rm.tag and set(r["reward_components"]) == {"reward_model"}
            assert r["reward"] == pytest.approx(rm.rm.score([r["prompt"]], [r["completion"]])[0], abs=1e-5)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    maths = [r for r in records if r["data_source"] == "maths"]
    assert row["accuracy"] == pytest.approx(sum(r["reward"] for r in maths) / len(maths))
    assert row["source_chat_records"] + row["source_maths_records"] == len(records)


def test_the_reward_sources_options_are_checked(tmp_path, reward_model):
    base = {"run_dir": str(tmp_path / "r")}
    with pytest.raises(ConfigError, match="no verifier 'nope'"):
        build_config(TrainConfig, {}, {**base, "reward_sources": "chat=nope"})
    with pytest.raises(ConfigError, match="set --reward_model"):
        build_config(TrainConfig, {}, {**base, "reward_sources": "chat=reward_model"})
    with pytest.raises(ConfigError, match="routes no data source to it"):
        build_config(TrainConfig, {}, {**base, "reward_model": str(reward_model), "reward_sources": "maths=arithmetic"})
    (tmp_path / "bad.jsonl").write_text('{"prompt": "1+1?", "reference": "1+1", "data_source": 3}\n')
    with pytest.raises(DatasetError, match="bad.jsonl:1: field 'data_source' must be a string"):
        load_problems(str(tmp_path / "bad.jsonl"))


def test_the_pipeline_s_last_rl_stage_takes_its_own_settings(mixed):
    cfg = build_config(
        PipelineConfig,
        {},
        {
            "rl.kl.beta": 0.02,
            "rl_again.task.name": "jsonl",
            "rl_again.task.data": str(mixed),
            "rl_again.task.verifier": "arithmetic-outcome",
            "rl_again.reward_sources": "chat=arithmetic-format",
        },
    )
    last = final_rl_config(cfg, "builtin:base", 7)
    assert last.task.name == "jsonl" and last.reward_sources == "chat=arithmetic-format"
    assert last.kl.beta == 0.02 and last.steps == 7  # rl.*'s where rl_again.* sets nothing
    first = final_rl_config(build_config(PipelineConfig, {}, {"rl.kl.beta": 0.02}), "builtin:base", 7)
    assert first.task.name == "arithmetic" and first.reward_sources == ""
    with pytest.raises(ConfigError, match="variant r1-zero"):
        build_config(PipelineConfig, {}, {"variant": "r1-zero", "rl_again.reward_sources": "chat=arithmetic"})
