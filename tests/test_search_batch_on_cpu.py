"""Search at batch speed: several problems per sampler call and PRM pass, each problem's draws unchanged."""

import json

import pytest
import torch

from veriloop.config import build_config
from veriloop.errors import InputError
from veriloop.models.loading import load_policy
from veriloop.prm.model import PRM
from veriloop.rollout.sampler import GroupStreams, SamplingParams, generate
from veriloop.search.lm import LMProposer
from veriloop.search.run import SearchConfig, run_search
from veriloop.search.strategies import SearchSettings, Strategies

BATCHED = "single,majority,best_of_n,weighted_vote,beam,lookahead"


@pytest.fixture(scope="module")
def policy():
    return load_policy("builtin:base")


@pytest.fixture(scope="module")
def prm():
    """A PRM with a seeded random head: its scores rank candidates, so beams branch differently."""
    torch.manual_seed(0)
    prm = PRM(load_policy("builtin:base"), "semicolon", "{reference}?", {"labels": "hard", "loss": "bce"})
    torch.nn.init.normal_(prm.head.weight, std=0.5)
    return prm


def test_group_streams_draw_what_each_group_draws_alone(policy):
    # three prompts of different lengths, four samples each, stopped at the step separator so rows end
    # at different steps and the live batch compacts: each group's tokens equal its own call's
    prompts = [policy.encode_prompt(p) for p in ("3+4*2=?", "(7-2)*3+10=?", "9*9=?")]
    params = SamplingParams(temperature=1.0, max_new_tokens=24)
    stops = LMProposer(policy, params, "semicolon").stops
    alone = [
        generate(
            policy.model,
            [p],
            params,
            eos_id=policy.end_ids,
            pad_id=policy.pad_id,
            n=4,
            stop_ids=stops,
            generator=torch.Generator().manual_seed(10 + k),
        ).completion_ids
        for k, p in enumerate(prompts)
    ]
    streams = GroupStreams([torch.Generator().manual_seed(10 + k) for k in range(3)], [4, 4, 4])
    together = generate(
        policy.model,
        prompts,
        params,
        eos_id=policy.end_ids,
        pad_id=policy.pad_id,
        n=4,
        stop_ids=stops,
        generator=streams,
    ).completion_ids
    assert together == [c for group in alone for c in group]
    assert len({len(c) for c in together}) > 1  # rows did end at different steps
    # one stream for the whole batch (what batching without GroupStreams would do) draws other tokens
    shared = generate(
        policy.model,
        prompts,
        params,
        eos_id=policy.end_ids,
        pad_id=policy.pad_id,
        n=4,
        stop_ids=stops,
        generator=torch.Generator().manual_seed(10),
    ).completion_ids
    assert shared != together
    with pytest.raises(ValueError, match="generators"):
        GroupStreams([torch.Generator()], [2, 2])


def _search(tmp_path, policy, prm, batch, name):
    data = {
        "strategy": BATCHED,
        "budgets": "1,4",
        "problems": 6,
        "bin_samples": 2,
        "max_steps": 6,
        "batch_problems": batch,
        "out": str(tmp_path / name),
    }
    cfg = build_config(SearchConfig, data, {})
    calls = []
    sample = policy.sample

    def counted(*a, **k):
        calls.append(len(a[0]))
        return sample(*a, **k)

    policy.sample = counted
    try:
        run_search(cfg, progress=False, policy=policy, prm=prm)
    finally:
        del policy.sample
    rows = [json.loads(x) for x in (tmp_path / name / "results.jsonl").read_text().splitlines()]
    return rows, calls


def test_batched_search_gives_the_per_problem_results_in_fewer_calls(tmp_path, policy, prm):
    one, one_calls = _search(tmp_path, policy, prm, 1, "one")
    many, many_calls = _search(tmp_path, policy, prm, 4, "many")  # 6 problems: batches of 4 and 2
    assert len(one) == len(many) == 6 * (1 + 5 * 2)
    for a, b in zip(one, many):
        assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    assert len({r["completion"] for r in many if r["strategy"] == "beam"}) > 1
    # the same prompts went through the sampler, in far fewer calls (the bins' sampling is batched in both)
    assert sum(one_calls) == sum(many_calls)
    assert len(many_calls) < 0.5 * len(one_calls), (len(many_calls), len(one_calls))


def test_run_many_refuses_what_does_not_batch_and_bad_sizes(policy):
    strategies = Strategies(LMProposer(policy, SamplingParams(), "semicolon"), None, SearchSettings())
    with pytest.raises(InputError, match="does not batch"):
        strategies.run_many("mcts", ["1+1=?"], 2)
    with pytest.raises(InputError, match="budget"):
        strategies.run_many("majority", ["1+1=?"], 0)
    with pytest.raises(InputError, match="scorer"):
        strategies.run_many("best_of_n", ["1+1=?"], 2)
    with pytest.raises(InputError, match="batch_problems"):
        SearchConfig(batch_problems=0)
    strategies.proposer.reseed_many([1, 2])
    outs = strategies.run_many("majority", ["1+1=?", "2*3=?"], 3)
    assert all(o.cost.tokens > 0 and o.candidates == 3 for o in outs)
    assert outs[0].cost.seconds == outs[1].cost.seconds > 0  # the batch's wall time, shared
