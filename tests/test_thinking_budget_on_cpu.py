"""Thinking budgets (``sampling.max_thinking_tokens``): at the cap the end-of-thinking marker is forced, the model
answers, and the forced tokens are not the model's (mask 0, no loss)."""

import json

import pytest

from veriloop.config import ConfigError, build_config
from veriloop.errors import InputError
from veriloop.evaluation.evaluate import EvalConfig, evaluate
from veriloop.models.loading import load_policy
from veriloop.rollout.sampler import Generation, SamplingParams
from veriloop.rollout.thinking import generate_with_thinking_budget, marker_rest, thinking_ended
from veriloop.search.run import SearchConfig
from veriloop.tasks.config import TaskConfig
from veriloop.training.config import TrainConfig
from veriloop.training.trainer import Trainer

pytestmark = pytest.mark.timeout(300)


def test_the_marker_appends_only_what_the_text_does_not_already_end_with():
    assert marker_rest("2+3=5;5*", ";answer=") == ";answer="
    assert marker_rest("2+3=5;", ";answer=") == "answer="
    assert marker_rest("x </thi", "</think>") == "nk>"
    assert thinking_ended("2+3=5;answer=", ";answer=") and not thinking_ended("2+3=5;5*4", ";answer=")
    assert thinking_ended("so\n#### 7", "\n#### ")


class ScriptedTrace:
    """The built-in tokenizer and a model that writes ``2+3=5;5*4=20;answer=20``: from any context it writes the
    rest of that trace, or, once the context holds ``answer=``, the number ``20`` (it answers when told to)."""

    TRACE = "2+3=5;5*4=20;answer=20"

    def __init__(self):
        self.tokenizer = load_policy("builtin:base").tokenizer

    def sample(self, prompt_ids, params, *, n, row_seeds=None, stop_ids=(), generator=None):
        out, lps, fin = [], [], []
        for ids in (p for p in prompt_ids for _ in range(n)):
            written = self.tokenizer.decode(ids).split("?", 1)[1]
            rest = "20" if "answer=" in written and not self.TRACE.startswith(written) else self.TRACE[len(written) :]
            new = self.tokenizer(rest, add_special_tokens=False).input_ids + [self.tokenizer.eos_token_id]
            why = "eos"
            if len(new) > params.max_new_tokens:
                new, why = new[: params.max_new_tokens], "length"
            out.append(new)
            lps.append([-0.25] * len(new))
            fin.append(why)
        return Generation(out, lps, fin)


def budgeted(budget: int, max_new_tokens: int = 40):
    policy = ScriptedTrace()
    prompt = policy.tokenizer("(2+3)*4?", add_special_tokens=False).input_ids
    params = SamplingParams(max_new_tokens=max_new_tokens, max_thinking_tokens=budget, thinking_end=";answer=")
    gen = generate_with_thinking_budget(policy, [prompt], params, row_seeds=[3], n=1)
    return gen, policy.tokenizer.decode(gen.completion_ids[0])


def test_at_the_cap_the_marker_is_forced_and_the_model_answers():
    gen, text = budgeted(8)
    assert text == "2+3=5;5*;answer=20<eos>" and gen.finish_reasons == ["eos"] and gen.forced_at == [8]
    mask, lps = gen.model_masks[0], gen.logprobs[0]
    assert [text[i] for i, m in enumerate(mask) if m == 0] == list(";answer=")  # only the marker is not the model's
    assert all(lps[i] == 0.0 for i, m in enumerate(mask) if m == 0)
    gen, text = budgeted(6)  # cut right after a separator: only the rest of the marker
    assert text == "2+3=5;answer=20<eos>" and gen.forced_at == [6]


def test_a_trace_that_ends_its_thinking_in_budget_is_untouched():
    gen, text = budgeted(21)  # "answer=" is written by token 20
    assert text == "2+3=5;5*4=20;answer=20<eos>" and gen.forced_at == [None] and all(gen.model_masks[0])
    gen, text = budgeted(30)  # finished inside the budget
    assert text == "2+3=5;5*4=20;answer=20<eos>" and gen.forced_at == [None]


def test_the_whole_completion_stays_within_max_new_tokens():
    gen, text = budgeted(8, max_new_tokens=12)
    assert len(gen.completion_ids[0]) == 12 and gen.finish_reasons == ["length"] and text == "2+3=5;5*;ans"


def test_options_that_would_do_nothing_are_refused():
    base = {"sampling.max_thinking_tokens": 8}
    with pytest.raises(ConfigError, match="sampling.max_thinking_tokens with rollout.source task-teacher"):
        build_config(TrainConfig, {}, {**base, "algo": "sft"})
    with pytest.raises(ConfigError, match="with task.reasoning tool is not built"):
        build_config(TrainConfig, {}, {**base, "task.reasoning": "tool", "verifier": "arithmetic-tool"})
    with pytest.raises(ConfigError, match="does not force the end of thinking"):
        build_config(TrainConfig, {}, {**base, "rollout.engine": "vllm"})
    with pytest.raises(ConfigError, match="sampling.thinking_end applies only with sampling.max_thinking_tokens"):
        build_config(TrainConfig, {}, {"sampling.thinking_end": "</think>"})
    with pytest.raises(ConfigError, match="max_thinking_tokens must be in .*a cap at the completion limit never"):
        build_config(TrainConfig, {}, {"sampling.max_thinking_tokens": 64})
    with pytest.raises(InputError, match="sampling.max_thinking_tokens caps whole solutions .*step by step"):
        build_config(SearchConfig, {}, {**base, "strategy": "majority,beam"})
    with pytest.raises(InputError, match="eval.thinking_budgets must be"):
        EvalConfig(thinking_budgets="8,200")


def test_training_with_a_budget_records_the_forced_tokens(tmp_path):
    cfg = build_config(
        TrainConfig,
        {},
        {
            "run_dir": str(tmp_path),
            "steps": 1,
            "rollout.prompts_per_step": 4,
            "rollout.group_size": 4,
            "sampling.max_thinking_tokens": 10,
            "task.arithmetic.heldout_size": 10,
        },
    )
    Trainer(cfg, progress=False).train()
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert row["thinking_forced_rate"] > 0.5  # the base's traces run ~18 tokens before answer=
    from veriloop.rollout.records import RecordStore

    records = RecordStore(tmp_path / "rollouts").read(1)
    forced = [r for r in records if not all(r.model_mask)]
    assert len(forced) / len(records) == row["thinking_forced_rate"]
    for r in forced:
        assert r.sampling["max_thinking_tokens"] == 10 and r.sampling["thinking_end"] == ";answer="
        holes = [i for i, m in enumerate(r.model_mask) if m == 0]
        assert holes[0] == 10 and r.completion[holes[0] : holes[-1] + 1] in (";answer=", "answer=")


def test_a_sampled_token_budget_stops_the_run(tmp_path):
    cfg = build_config(
        TrainConfig,
        {},
        {
            "run_dir": str(tmp_path),
            "steps": 5,
            "rollout.prompts_per_step": 2,
            "rollout.group_size": 2,
            "max_sampled_tokens": 150,
            "task.arithmetic.heldout_size": 10,
        },
    )
    trainer = Trainer(cfg, progress=False)
    trainer.train()
    counts = [r["sampled_tokens"] for r in trainer.metrics.rows]  # ~110 tokens a step (4 completions of ~28)
    assert 2 <= len(counts) < 5 and sum(counts[:-1]) < 150 <= sum(counts)


def test_eval_reports_accuracy_against_the_budget():
    task = TaskConfig().build()
    problems = task.validation()[:40]
    verifiers = {"outcome": "arithmetic-outcome"}
    r = evaluate(
        load_policy("builtin:base"),
        problems,
        verifiers,
        EvalConfig(n_samples=0, thinking_budgets="4,40"),
        thinking_end=task.thinking_end,
    )
    small, large = r.by_thinking_budget["4"], r.by_thinking_budget["40"]
    assert small["forced_rate"] == 1.0 and small["greedy_accuracy"] < r.greedy_accuracy
    assert large == {
        "greedy_accuracy": r.greedy_accuracy,
        "mean_completion_tokens": r.mean_completion_tokens,
        "forced_rate": 0.0,
        "truncation_rate": r.truncation_rate,
    }  # a budget over every trace forces nothing and changes nothing
