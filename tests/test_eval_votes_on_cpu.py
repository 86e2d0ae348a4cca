"""maj@k in the evaluation, beside pass@k, on scripted samples whose votes are counted by hand."""

from __future__ import annotations

import pytest

from veriloop.evaluation import evaluate as evaluate_module
from veriloop.evaluation.evaluate import EvalConfig, evaluate, vote_classes
from veriloop.evaluation.run import format_result
from veriloop.tasks.base import Problem

# problem a (answer 4): two votes for 4, one for 5, one sample with no answer; problem b (answer 7): all wrong
SAMPLES = {"a": ["so\n#### 4", "#### 4", "#### 5", "no idea"], "b": ["#### 6", "#### 6", "#### 8", "#### 6"]}


def scripted(policy, problems, params, n, batch, seed, samples=SAMPLES, cut=None):
    """``_complete`` on written samples: (texts, lengths, whether each was cut by max_new_tokens)."""
    rows = [(p.id, j) for p in problems for j in (range(len(samples[p.id])) if n > 1 else [0])]
    texts = [samples[i][j] for i, j in rows]
    return texts, [len(t) for t in texts], [j in (cut or {}).get(i, ()) for i, j in rows]


def test_eval_reports_maj_at_k_beside_pass_at_k(monkeypatch):
    monkeypatch.setattr(evaluate_module, "_complete", scripted)
    problems = [Problem(id="a", prompt="2+2?", reference="4"), Problem(id="b", prompt="3+4?", reference="7")]
    r = evaluate(None, problems, {"outcome": "gsm8k"}, EvalConfig(n_samples=4), ks=(1, 2, 4))
    # a, by hand over the C(4,2) = 6 pairs: {4,4} right, {4,5} x2 ties (1/2 each), {4,-} x2 right, {5,-} wrong
    assert r.maj_at["2"] == pytest.approx((4 / 6 + 0) / 2)
    assert r.maj_at["4"] == pytest.approx((1 + 0) / 2)  # all four vote: 4 beats 5; b's 6 wins and is wrong
    assert r.maj_at["1"] == pytest.approx(r.sampled_accuracy) == pytest.approx((2 / 4 + 0) / 2)
    assert r.pass_at["2"] == pytest.approx((1 - 1 / 6 + 0) / 2)  # pass@2 > maj@2: the vote is not the oracle
    assert "maj@2" in format_result("scripted", r)


def test_a_key_the_verifier_judged_both_ways_is_split_by_verdict():
    keys, ok = vote_classes(["2", "2", "3", None], [True, False, False, False])
    assert keys == [("2", True), ("2", False), "3", None] and ok == [True, False, False, False]
    assert vote_classes(["2", "2"], [True, True]) == (["2", "2"], [True, True])


def test_a_cut_sample_is_not_answered_and_does_not_vote(monkeypatch):
    # Problem a's samples: "#### 4" ended, "#### 4" cut twice, "#### 5" ended (the greedy one is the first cut
    # one here).  Counted, the cut ones would make 4 the majority (3 votes) and 3 of 4 samples right; they are
    # not the model's answers, so the vote is 4 against 5 (a tie: 1/2), one sample of four is right, and the
    # greedy completion is not answered.
    samples = {"a": ["#### 4", "#### 4", "#### 4", "#### 5"]}

    def complete(policy, problems, params, n, batch, seed):
        return scripted(policy, problems, params, n, batch, seed, samples, {"a": (1, 2) if n > 1 else (0,)})

    monkeypatch.setattr(evaluate_module, "_complete", complete)
    r = evaluate(
        None, [Problem(id="a", prompt="2+2?", reference="4")], {"outcome": "gsm8k"}, EvalConfig(n_samples=4), ks=(1, 4)
    )
    assert r.greedy_accuracy == 0.0 and r.truncation_rate == 1.0
    assert r.sampled_accuracy == pytest.approx(1 / 4) and r.sampled_truncation_rate == pytest.approx(2 / 4)
    assert r.maj_at["4"] == pytest.approx(1 / 2)
    assert r.pass_at["1"] == pytest.approx(1 / 4)
    assert r.examples[0]["truncated"] is True and r.examples[0]["outcome"] == 0.0
    text = format_result("scripted", r)
    assert "truncated (greedy)   1.000" in text and "truncated (sampled)  0.500" in text
