"""Training alarms (training/run/alarms.py): each alarm fires once, at the step worked out by hand, and nothing else.

Every sequence starts from a neutral row (nothing moves, nothing is extreme) and changes one thing; the defaults
are window 20, min_steps 10, so an alarm is judged from the 10th value of its metric on, and with ``n`` values in
the window the halves are the first and last ``n // 2`` of them.
"""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from veriloop.training.run.alarms import (
    ALARMS,
    AlarmEvent,
    AlarmsConfig,
    AlarmWatcher,
    NonFiniteError,
    alarm_spec,
    check_finite,
    check_finite_row,
    markdown_table,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "concepts" / "alarms.md"


def neutral(step: int, **over) -> dict:
    """A step where nothing moves and nothing is extreme; ``over`` replaces or adds keys (None removes one)."""
    row = {
        "step": step,
        "reward_mean": 0.5,
        "accuracy": 0.5,
        "completion_len_mean": 100.0,
        "completion_len_max": 150.0,
        "truncation_rate": 0.01,
        "zero_variance_fraction": 0.2,
        "ratio_min": 0.9,
        "ratio_max": 1.1,
        "clip_frac_low": 0.0,
        "clip_frac_high": 0.0,
        "entropy": 0.5,
        "kl": 0.01,
        "logprob_mismatch": 1e-6,
        "loss": 0.1,
        "grad_norm": 1.0,
        "advantage_mean": 0.0,
    }
    row.update(over)
    return {k: v for k, v in row.items() if v is not None}


def run(rows, cfg=None, **kw) -> list[AlarmEvent]:
    w = AlarmWatcher(cfg or AlarmsConfig(), **kw)
    return [e for row in rows for e in w.observe(row)]


def fired_once(events, name, step):
    assert [(e.name, e.step) for e in events] == [(name, step)], [e.line() for e in events]
    return events[0]


# ------------------------------------------------------------------------------------------- one alarm at a time


def test_reward_hacking_fires_when_reward_rises_and_validation_accuracy_falls():
    # reward 0.3 + 0.015 (s - 1): over a full window late - early = 0.015 x 10 = 0.15 >= 0.1.
    # validation: 0.8 at step 10, 0.8 at step 20, 0.7 at step 30: the first drop (0.1 >= 0.05) is at step 30.
    evals = {10: 0.8, 20: 0.8, 30: 0.7, 40: 0.6}
    rows = [
        neutral(s, reward_mean=0.3 + 0.015 * (s - 1), validation_greedy_accuracy=evals.get(s)) for s in range(1, 51)
    ]
    e = fired_once(run(rows), "reward_hacking", 30)
    assert e.metric == "validation_greedy_accuracy" and e.value == pytest.approx(0.1) and e.threshold == 0.05
    assert "0.8 at step 20 -> 0.7 at step 30" in e.message and "rose 0.15" in e.message
    assert e.seed.startswith("seed 003 §9.1") and "verifier" in e.advice


def test_reward_hacking_reads_held_out_accuracy_and_needs_two_evaluations():
    rows = [
        neutral(s, reward_mean=0.3 + 0.015 * (s - 1), heldout_greedy_accuracy={20: 0.8, 40: 0.7}.get(s))
        for s in range(1, 45)
    ]
    assert fired_once(run(rows), "reward_hacking", 40).metric == "heldout_greedy_accuracy"
    one_eval = [
        neutral(s, reward_mean=0.3 + 0.015 * (s - 1), heldout_greedy_accuracy={20: 0.1}.get(s)) for s in range(1, 45)
    ]
    assert run(one_eval) == []


def test_reward_hacking_is_not_a_flat_reward_with_a_falling_accuracy():
    rows = [neutral(s, validation_greedy_accuracy={10: 0.8, 20: 0.5}.get(s)) for s in range(1, 40)]
    assert run(rows) == []  # the reward did not rise: a worse policy, not a hacked verifier


def test_length_without_success_fires_when_length_grows_and_accuracy_is_flat():
    # length 100 up to step 20, then 300: at step 20 + k the halves are 100 and 100 + 20 k, so the rise is 0.2 k;
    # k = 1: 0.2, k = 2: 0.4 > 0.3 -> step 22. Accuracy stays 0.5 (|late - early| = 0 <= 0.02).
    rows = [neutral(s, completion_len_mean=100.0 if s <= 20 else 300.0) for s in range(1, 50)]
    e = fired_once(run(rows), "length_without_success", 22)
    assert e.value == pytest.approx(0.4) and e.threshold == 0.3 and "40%" in e.message and "accuracy" in e.message


def test_length_growing_with_success_is_not_an_alarm():
    rows = [
        neutral(s, completion_len_mean=100.0 if s <= 20 else 300.0, accuracy=0.3 if s <= 20 else 0.6)
        for s in range(1, 50)
    ]
    assert run(rows) == []


def test_length_without_success_falls_back_to_the_reward_when_accuracy_is_absent():
    rows = [neutral(s, accuracy=None, completion_len_mean=100.0 if s <= 20 else 300.0) for s in range(1, 30)]
    assert "reward_mean stayed" in fired_once(run(rows), "length_without_success", 22).message


def test_zero_variance_groups_fires_on_the_window_mean():
    # 0.2 up to step 10, then 1.0.  Step 27: window 8..27 holds three 0.2 -> (0.6 + 17) / 20 = 0.88;
    # step 28: window 9..28 holds two -> (0.4 + 18) / 20 = 0.92 > 0.9.
    rows = [neutral(s, zero_variance_fraction=0.2 if s <= 10 else 1.0) for s in range(1, 60)]
    e = fired_once(run(rows), "zero_variance_groups", 28)
    assert e.value == pytest.approx(0.92) and e.threshold == 0.9 and "92%" in e.message


def test_extreme_ratios_fires_above_the_share_and_not_at_it():
    # every 3rd step has ratio_min 0.05 < 0.1: at step 10, 3 of 10 = 0.3 > 0.25.
    rows = [neutral(s, ratio_min=0.05 if s % 3 == 0 else 0.9) for s in range(1, 60)]
    e = fired_once(run(rows), "extreme_ratios", 10)
    assert e.value == pytest.approx(0.3) and e.message.startswith("3 of 10 steps")
    # every 4th step has ratio_max 20 > 10: at most 1 in 4 = 0.25 at any step, never more.
    assert run([neutral(s, ratio_max=20.0 if s % 4 == 0 else 1.1) for s in range(1, 100)]) == []


def test_entropy_collapse_below_a_fraction_of_the_early_entropy():
    # entropy 1.0 for 20 steps (the early value), then 0.1: with k low steps in the window the mean is
    # 1 - 0.045 k; k = 16: 0.28, k = 17: 0.235 < 0.25 x 1.0 -> step 37.
    rows = [neutral(s, entropy=1.0 if s <= 20 else 0.1) for s in range(1, 60)]
    e = fired_once(run(rows), "entropy_collapse", 37)
    assert e.value == pytest.approx(0.235) and e.threshold == pytest.approx(0.25)


def test_entropy_collapse_below_the_floor():
    e = fired_once(run([neutral(s, entropy=1e-4) for s in range(1, 30)]), "entropy_collapse", 10)
    assert e.threshold == 1e-3 and "below 0.001" in e.message


def test_kl_runaway_by_growth():
    # kl 0.02 for 20 steps, then 0.2: with k high steps late = 0.02 + 0.018 k (k <= 10), early = 0.02;
    # k = 4: 0.092, k = 5: 0.11 >= 0.1 (the floor) and > 5 x 0.02 -> step 25, growth 0.11 / 0.02 = 5.5.
    rows = [neutral(s, kl=0.02 if s <= 20 else 0.2) for s in range(1, 60)]
    e = fired_once(run(rows), "kl_runaway", 25)
    assert e.value == pytest.approx(5.5) and e.threshold == 5.0 and "x5.5" in e.message


def test_kl_runaway_by_level_and_kl_growing_from_zero_below_the_floor_is_quiet():
    assert fired_once(run([neutral(s, kl=2.0) for s in range(1, 30)]), "kl_runaway", 10).value == 2.0
    assert run([neutral(s, kl=0.0 if s <= 10 else 0.05) for s in range(1, 60)]) == []  # x inf, but below 0.1


def test_truncation_rising_by_climb():
    # 0.01 for 20 steps, then 0.2: with k high steps late - early = 0.019 k (k <= 10); k = 5: 0.095,
    # k = 6: 0.114 > 0.1 -> step 26 (the mean, 0.01 + 0.0095 k, stays below 0.2).
    rows = [neutral(s, truncation_rate=0.01 if s <= 20 else 0.2) for s in range(1, 60)]
    e = fired_once(run(rows), "truncation_rising", 26)
    assert e.value == pytest.approx(0.114) and e.threshold == 0.1


def test_truncation_rising_by_level():
    rows = [neutral(s, truncation_rate=0.5) for s in range(1, 30)]
    assert fired_once(run(rows), "truncation_rising", 10).value == 0.5


def test_logprob_mismatch():
    # 0.2 from step 9 (1e-6 before): mean at step 10 = (0.4 + 8e-6) / 10 ~ 0.04, at 11 = 0.6 / 11 ~ 0.0545 > 0.05.
    rows = [neutral(s, logprob_mismatch=0.2 if s >= 9 else 1e-6) for s in range(1, 40)]
    e = fired_once(run(rows), "logprob_mismatch", 11)
    assert e.value == pytest.approx((0.6 + 8e-6) / 11) and e.threshold == 0.05


# --------------------------------------------------------------------------------------------------- a healthy run


def healthy(n: int = 100) -> list[dict]:
    """Reward 0.3 -> 0.9, accuracy and validation rising, length steady with noise, entropy 1.0 -> 0.6."""
    rows = []
    for s in range(1, n + 1):
        x = (s - 1) / (n - 1)  # 0 -> 1 over the run
        noise = ((s * 7) % 5 - 2) / 2  # -1 .. 1, no trend
        row = {
            "step": s,
            "reward_mean": 0.3 + 0.6 * x,
            "accuracy": 0.25 + 0.6 * x,
            "completion_len_mean": 200 + 10 * noise,
            "completion_len_max": 400 + 20 * noise,
            "truncation_rate": 0.01,
            "zero_variance_fraction": 0.2,
            "ratio_min": 0.8 + 0.05 * (s % 3),
            "ratio_max": 1.25 - 0.05 * (s % 2),
            "clip_frac_low": 0.01,
            "clip_frac_high": 0.02,
            "entropy": 1.0 - 0.4 * x,
            "kl": 0.0005 * (s - 1),
            "logprob_mismatch": 1e-6,
            "loss": -0.01,
            "grad_norm": 0.5,
            "advantage_mean": 0.0,
        }
        if s % 10 == 0:
            row["validation_greedy_accuracy"] = 0.3 + 0.5 * x
        rows.append(row)
    return rows


def test_a_healthy_run_fires_nothing():
    assert run(healthy(200)) == []


def test_disabled_and_skipped_alarms_fire_nothing():
    rows = [neutral(s, zero_variance_fraction=1.0, kl=2.0) for s in range(1, 30)]
    assert run(rows, AlarmsConfig(enabled=False)) == []
    assert [e.name for e in run(rows, skip=["zero_variance_groups"])] == ["kl_runaway"]
    with pytest.raises(KeyError, match="no alarm 'zero_variance'"):
        AlarmWatcher(skip=["zero_variance"])


def test_several_alarms_on_one_step_come_in_the_table_order():
    events = run([neutral(s, zero_variance_fraction=1.0, kl=2.0, logprob_mismatch=0.3) for s in range(1, 30)])
    assert [(e.name, e.step) for e in events] == [
        ("zero_variance_groups", 10),
        ("kl_runaway", 10),
        ("logprob_mismatch", 10),
    ]


# ------------------------------------------------------------------------------------------------- missing keys


def test_missing_and_odd_values_never_crash_and_count_as_not_measured():
    w = AlarmWatcher()
    for row in [
        {},
        {"step": 1},
        {"reward_mean": None},
        {"step": "3", "entropy": "low"},
        {"kl": float("nan")},
        {"step": 5, "ratio_max": float("inf"), "accuracy": True},
        {"step": 6.0, "extra": [1, 2]},
        {"step": 10**400, "entropy": 10**400},
    ]:
        assert w.observe(row) == []
    # rows without the key: the alarm waits for min_steps values of its own metric
    rows = [neutral(s, zero_variance_fraction=1.0 if s % 2 else None) for s in range(1, 40)]
    assert fired_once(run(rows), "zero_variance_groups", 19).value == 1.0  # the 10th value is at step 19


def test_a_row_without_a_step_is_numbered_by_its_position():
    rows = [{"zero_variance_fraction": 1.0} for _ in range(12)]
    assert fired_once(run(rows), "zero_variance_groups", 10).step == 10


# -------------------------------------------------------------------------------------------- resume: replay, restore


def test_replay_rebuilds_the_state_silently():
    rows = [neutral(s, zero_variance_fraction=0.2 if s <= 10 else 1.0) for s in range(1, 60)]
    w = AlarmWatcher()
    w.replay(rows[:27])  # steps 1..27: the window mean is 0.88, nothing is said
    assert w.fired == {}
    assert [e.step for e in w.observe(rows[27])] == [28]  # as in the uninterrupted run


def test_replay_says_nothing_and_a_condition_still_true_is_said_on_the_next_step():
    rows = [neutral(s, kl=2.0) for s in range(1, 40)]
    w = AlarmWatcher()
    w.replay(rows[:30])
    assert w.fired == {}  # it was never said (no alarms.jsonl entry): the next step says it
    assert [(e.name, e.step) for e in w.observe(rows[30])] == [("kl_runaway", 31)]


def test_restored_events_are_not_said_again():
    rows = [neutral(s, kl=2.0) for s in range(1, 40)]
    first = AlarmWatcher()
    events = [e for row in rows[:15] for e in first.observe(row)]
    saved = [json.loads(json.dumps(e.to_json(), allow_nan=False)) for e in events]  # alarms.jsonl
    again = AlarmWatcher()
    again.restore(saved)
    again.replay(rows[:15])
    assert [e for row in rows[15:] for e in again.observe(row)] == []
    assert again.fired == {"kl_runaway": events[0]}
    assert AlarmEvent.from_json(saved[0]) == events[0]


def test_replay_keeps_the_runs_early_entropy():
    # the early entropy is the first 20 values of the run: a resume must not take the window's values for it.
    rows = [neutral(s, entropy=1.0 if s <= 20 else 0.1) for s in range(1, 60)]
    w = AlarmWatcher()
    w.replay(rows[:36])
    assert [(e.name, e.step) for e in w.observe(rows[36])] == [("entropy_collapse", 37)]


# ---------------------------------------------------------------------------------------------------- non-finite


def test_check_finite_row_names_the_step_and_the_key():
    check_finite_row(neutral(3))  # finite: nothing
    with pytest.raises(NonFiniteError) as e:
        check_finite_row(neutral(12, loss=float("nan")))
    assert str(e.value) == "step 12: loss is nan; the run stops here"
    assert (e.value.step, e.value.name, math.isnan(e.value.value)) == (12, "loss", True)
    assert isinstance(e.value, RuntimeError)
    with pytest.raises(NonFiniteError, match=r"^step 4: eval\.scores\[1\] is -inf; the run stops here$"):
        check_finite_row({"step": 4, "eval": {"scores": [0.5, float("-inf")]}})
    check_finite_row({"step": 5, "tokens_per_s": float("inf")}, ignore=["tokens_per_s"])


def test_check_finite_on_numbers_and_tensors():
    check_finite("grad_norm", 1.5, 7)
    check_finite("tokens", 10**400, 7)  # an int is finite, even one beyond floats
    check_finite("mask", torch.tensor([True, False]), 7)  # booleans and integers cannot be NaN
    check_finite("ids", torch.tensor([1, 2]), 7)
    with pytest.raises(NonFiniteError, match=r"^step 7: grad_norm is inf; the run stops here$"):
        check_finite("grad_norm", float("inf"), 7)
    with pytest.raises(NonFiniteError, match=r"^step 8: loss is nan; the run stops here$"):
        check_finite("loss", torch.tensor(float("nan")), 8)
    with pytest.raises(NonFiniteError) as e:
        check_finite("advantages", torch.tensor([[1.0, float("nan")], [float("inf"), 2.0]], dtype=torch.bfloat16), 9)
    assert str(e.value) == "step 9: advantages has 2 of 4 values not finite (first: nan); the run stops here"
    again = pickle.loads(pickle.dumps(e.value))  # crosses process boundaries whole
    assert (type(again), again.step, again.name, str(again)) == (NonFiniteError, 9, "advantages", str(e.value))


# ------------------------------------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    "field,bad",
    [
        ("window", 1),
        ("window", 2.5),
        ("min_steps", 1),
        ("min_steps", 30),
        ("reward_hacking_reward_rise", -0.1),
        ("length_rise", float("nan")),
        ("zero_variance_max", 1.5),
        ("ratio_high", 0.5),
        ("ratio_low", 1.0),
        ("ratio_share", 2.0),
        ("entropy_floor", float("inf")),
        ("entropy_fraction", 1.2),
        ("kl_max", -1.0),
        ("kl_growth", 1.0),
        ("truncation_max", 2.0),
        ("logprob_mismatch_max", "0.05"),
    ],
)
def test_config_validation_names_the_field_and_the_value(field, bad):
    with pytest.raises(ValueError, match=rf"^alarms\.{field} must .*got {bad!r}"):
        AlarmsConfig(**{field: bad})


def test_every_option_has_help_and_every_alarm_names_real_options():
    from dataclasses import fields

    cfg = AlarmsConfig()
    assert all(f.metadata.get("help") for f in fields(cfg))
    names = {f.name for f in fields(cfg)}
    used = {o for a in ALARMS for o in a.options}
    assert used <= names and used | {"enabled", "window", "min_steps"} == names  # each threshold belongs to an alarm
    assert [a.name for a in ALARMS] == [
        "reward_hacking",
        "length_without_success",
        "zero_variance_groups",
        "extreme_ratios",
        "entropy_collapse",
        "kl_runaway",
        "truncation_rising",
        "logprob_mismatch",
        "non_finite",
    ]
    assert all(a.seed.startswith("seed 003 §") for a in ALARMS) and alarm_spec("non_finite").options == ()


def test_the_docs_page_holds_the_table_of_the_code():
    assert markdown_table() in DOC.read_text(), "docs/concepts/alarms.md: paste training.run.alarms.markdown_table()"


# ----------------------------------------------------------------------------------------------------- properties

NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.floats(-2, 2), st.floats(0, 1), st.integers(-5, 500)
)
VALUE = st.one_of(NUMBER, NUMBER, NUMBER, st.none(), st.text(max_size=3), st.booleans())
KEYS = [
    "step",
    "reward_mean",
    "accuracy",
    "validation_greedy_accuracy",
    "heldout_greedy_accuracy",
    "completion_len_mean",
    "truncation_rate",
    "zero_variance_fraction",
    "ratio_min",
    "ratio_max",
    "entropy",
    "kl",
    "logprob_mismatch",
    "loss",
    "grad_norm",
    "other",
]
ROWS = st.lists(st.dictionaries(st.sampled_from(KEYS), VALUE, max_size=len(KEYS)), max_size=80)
CONFIGS = st.builds(lambda w, m: AlarmsConfig(window=w, min_steps=min(m, w)), st.integers(2, 8), st.integers(2, 8))


@settings(max_examples=200, deadline=None)
@given(rows=ROWS, cfg=CONFIGS)
def test_random_rows_fire_each_alarm_at_most_once_with_bounded_state(rows, cfg):
    w = AlarmWatcher(cfg)
    events = []
    for row in rows:
        events += w.observe(row)
        # the state does not grow with the run: a window of rows (watched keys only) and two evaluations
        assert len(w._window) <= cfg.window and len(w._evals) <= 2
        assert all(len(kept) <= 10 for _, kept in w._window)
    names = [e.name for e in events]
    assert len(names) == len(set(names)) and set(names) <= {a.name for a in ALARMS} - {"non_finite"}
    assert list(w.fired) == names
    json.dumps([e.to_json() for e in events], allow_nan=False)  # alarms.jsonl stays valid JSON


@settings(max_examples=100, deadline=None)
@given(rows=ROWS)
def test_replay_then_observe_equals_observing_throughout_for_the_state(rows):
    a, b = AlarmWatcher(AlarmsConfig(window=4, min_steps=2)), AlarmWatcher(AlarmsConfig(window=4, min_steps=2))
    for row in rows:
        a.observe(row)
    b.replay(rows)
    assert (list(a._window), list(a._evals), a._early_sum, a._early_count) == (
        list(b._window),
        list(b._evals),
        b._early_sum,
        b._early_count,
    )
