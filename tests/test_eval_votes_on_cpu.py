"""maj@k in the evaluation, beside pass@k, on scripted samples whose votes are counted by hand."""

from __future__ import annotations

import pytest

from veriloop.evaluation import evaluate as evaluate_module
from veriloop.evaluation.evaluate import EvalConfig, evaluate, vote_classes
from veriloop.evaluation.run import format_result
from veriloop.tasks.base import Problem

# problem a (answer 4): two votes for 4, one for 5, one sample with no answer; problem b (answer 7): all wrong
SAMPLES = {"a": ["so\n#### 4", "#### 4", "#### 5", "no idea"], "b": ["#### 6", "#### 6", "#### 8", "#### 6"]}


def scripted(policy, problems, params, n, batch, seed):
    texts = [t for p in problems for t in (SAMPLES[p.id] if n > 1 else SAMPLES[p.id][:1])]
    return texts, [len(t) for t in texts]


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
