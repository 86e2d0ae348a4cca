"""Problem selection by difficulty (seed 002 s.7, ``selection.filter``): a pool measured with the policy's own
samples, the always-solved and never-solved dropped, each step's prompts drawn from what is kept, the pool
measured again every N steps, a curriculum order, coverage counted; resumed runs read the measurements back.
On the shipped base and the built-in task, for real."""

import json

import pytest
import torch

from veriloop.config import ConfigError, build_config
from veriloop.errors import InputError
from veriloop.io import read_jsonl
from veriloop.models.loading import load_policy
from veriloop.tasks.base import Problem
from veriloop.training.config import TrainConfig
from veriloop.training.loop.selection import kept_problems, pass_rates
from veriloop.training.run.metrics import TIMING_KEYS
from veriloop.training.trainer import Trainer

pytestmark = pytest.mark.timeout(300)

RUN = {
    "steps": 4,
    "checkpoint_every": 2,
    "selection.filter": True,
    "selection.pool": 48,
    "selection.samples": 4,
    "selection.refresh_every": 2,
    "rollout.prompts_per_step": 8,
    "rollout.group_size": 4,
    "task.arithmetic.heldout_size": 10,
    "threads": 1,
}


PLAIN = {k: v for k, v in RUN.items() if not k.startswith("selection.")}  # the same run without selection


def config(run_dir, base=RUN, **over):
    return build_config(TrainConfig, {}, {**base, "run_dir": str(run_dir), **over})


def rows(run_dir):
    return [
        {k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


class _R:
    def __init__(self, pid, reward):
        self.problem_id, self.reward = pid, reward


def test_pass_rates_and_the_keep_rule_by_hand():
    records = [_R("a", 1.0), _R("a", 1.0), _R("b", 0.0), _R("b", 1.0), _R("c", 0.0), _R("c", 0.2), _R("d", 1.0)]
    rates = pass_rates(records, threshold=1.0)
    assert rates == {"a": 1.0, "b": 0.5, "c": 0.0, "d": 1.0}  # c's 0.2 is below the accept threshold
    pool = [Problem(pid, pid, pid) for pid in "abcd"]
    assert [p.id for p in kept_problems(pool, rates, 0.0, 1.0, "none")] == ["b"]  # strictly between
    rates = {"a": 0.75, "b": 0.5, "c": 0.25, "d": 0.5}
    assert [p.id for p in kept_problems(pool, rates, 0.0, 1.0, "easy-first")] == ["a", "b", "d", "c"]
    assert [p.id for p in kept_problems(pool, rates, 0.0, 1.0, "hard-first")] == ["c", "b", "d", "a"]
    assert [p.id for p in kept_problems(pool, rates, 0.3, 0.6, "none")] == ["b", "d"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("selection") / "run"
    Trainer(config(run_dir), progress=False).train()
    return run_dir


def test_the_pool_is_measured_with_the_policys_samples_and_each_step_draws_from_what_is_kept(straight):
    sel = straight / "selection"
    metrics = rows(straight)
    # before step 1 and before step 3 (refresh_every 2), with the weights of that moment
    for at, version in ((0, 0), (2, metrics[1]["policy_version"])):
        summary = json.loads((sel / f"step-{at:06d}.json").read_text())
        records = read_jsonl(sel / f"step-{at:06d}.jsonl.gz")
        assert summary["pool"] == 48 and len(records) == 48 * 4
        assert {r["policy_version"] for r in records} == {version}
        # the pass rates are the records' own: recount them
        by_problem: dict = {}
        for r in records:
            by_problem.setdefault(r["problem_id"], []).append(r["reward"] >= 1.0)
        assert summary["pass_rates"] == {pid: sum(v) / len(v) for pid, v in by_problem.items()}
        kept = {pid for pid, rate in summary["pass_rates"].items() if 0.0 < rate < 1.0}
        assert set(summary["kept_ids"]) == kept and 0 < len(kept) < 48
        # every prompt of the steps that drew from this measurement is a kept problem
        for step in (at + 1, at + 2):
            step_ids = {r["problem_id"] for r in read_jsonl(straight / "rollouts" / f"step-{step:06d}.jsonl.gz")}
            assert step_ids <= kept, step
    assert [("selection_kept" in m) for m in metrics] == [True, False, True, False]
    first = metrics[0]
    assert first["selection_pool"] == 48 and first["selection_sampled_records"] == 192
    assert first["selection_always_solved"] + first["selection_never_solved"] + first["selection_kept"] == 48
    assert all(m["sampled_records"] == 32 for m in metrics)  # the measurement's samples are not the step's
    coverage = json.loads((sel / "coverage.json").read_text())
    drawn = sum(c["drawn"] for c in coverage.values())
    assert drawn == 4 * 8 and metrics[-1]["coverage_problems"] == sum(c["drawn"] > 0 for c in coverage.values())
    ledger = json.loads((straight / "compute.json").read_text())
    assert ledger["tokens_sampled_for_selection"] == sum(m.get("selection_sampled_tokens", 0) for m in metrics)
    assert ledger["flops"]["selection"] > 0


def test_the_filter_takes_away_groups_that_teach_nothing(straight, tmp_path):
    # the same run without selection: more of its groups have all-equal rewards (advantage 0 for every member)
    plain = tmp_path / "plain"
    Trainer(config(plain, PLAIN), progress=False).train()
    with_filter = sum(m["zero_variance_fraction"] for m in rows(straight)) / 4
    without = sum(m["zero_variance_fraction"] for m in rows(plain)) / 4
    assert with_filter < without, (with_filter, without)  # measured: 0.344 against 0.844 (4 steps x 8 groups)


def test_a_resumed_run_reads_the_measurements_back_and_equals_the_uninterrupted_one(straight, tmp_path):
    run_dir = tmp_path / "run"
    Trainer(config(run_dir, steps=2), progress=False).train()
    resumed = Trainer(config(run_dir), resume=True, progress=False)
    resumed.train()
    assert rows(run_dir) == rows(straight)
    a = load_policy(str(run_dir / "final")).model.state_dict()
    b = load_policy(str(straight / "final")).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((run_dir / "selection" / "coverage.json").read_text()) == json.loads(
        (straight / "selection" / "coverage.json").read_text()
    )


def test_a_curriculum_gives_the_kept_problems_in_order(tmp_path):
    run_dir = tmp_path / "run"
    Trainer(config(run_dir, steps=2, **{"selection.curriculum": "easy-first"}), progress=False).train()
    summary = json.loads((run_dir / "selection" / "step-000000.json").read_text())
    rates = summary["pass_rates"]
    order = [r["problem_id"] for r in read_jsonl(run_dir / "rollouts" / "step-000001.jsonl.gz")][::4]
    order += [r["problem_id"] for r in read_jsonl(run_dir / "rollouts" / "step-000002.jsonl.gz")][::4]
    kept = summary["kept_ids"]
    n = len(kept)
    assert n < 16  # so the order starts again within the two steps
    descending = sorted((rates[pid] for pid in kept), reverse=True)
    # B a step in descending pass rate (ties in the pool's order), from the start again when all were given
    assert [rates[pid] for pid in order] == [descending[i % n] for i in range(16)]
    assert sorted(order[:n]) == sorted(kept) and order[n:] == order[: 16 - n]


def test_nothing_left_to_learn_from_stops_with_the_counts(tmp_path):
    with pytest.raises(InputError, match=r"no problem of the pool of 48 .*keep_above 0\.9 .* widen the bounds"):
        Trainer(
            config(tmp_path / "run", **{"selection.keep_above": 0.9, "selection.keep_below": 0.95}), progress=False
        ).train()


@pytest.mark.parametrize(
    ("base", "over", "message"),
    [
        (RUN, {"algo": "rft"}, r"selection\.filter with rollout\.source initial"),
        (RUN, {"rollout.lag": 1}, r"selection\.filter with rollout\.mode sync and rollout\.lag 1"),
        (RUN, {"selection.keep_above": 0.5, "selection.keep_below": 0.5}, r"keep_above \(0\.5\) must be < selection"),
        (
            PLAIN,
            {"selection.curriculum": "easy-first"},
            r"selection\.curriculum='easy-first' is not read .*filter true",
        ),
    ],
)
def test_what_selection_cannot_be_is_refused(tmp_path, base, over, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        config(tmp_path / "run", base, **over)
