"""Training alarms: patterns in ``metrics.jsonl`` that say a run has gone wrong, each said once.

The list is seed 003's debugging advice (section 9.1: what to track during PPO/GRPO training and what each
pattern points at), with the sections behind each item.  The module is pure: ``AlarmWatcher.observe`` takes
the metrics row of one step and returns the alarms that fire on it; the trainer logs them, appends them to
``alarms.jsonl`` and the report shows them.  Non-finite values are not an alarm but a stop:
``check_finite_row`` / ``check_finite`` raise ``NonFiniteError`` naming the step and the value.

Trends are measured over the last ``window`` steps.  For the values ``v_1..v_n`` of a metric in the window
(steps without it skipped), with ``h = n // 2``::

    early = mean(v_1..v_h)        late = mean(v_{n-h+1}..v_n)        level = mean(v_1..v_n)

(the middle value of an odd ``n`` is in neither half).  An alarm is judged once the window holds at least
``min_steps`` values of its metric; a mean or a trend over fewer steps is noise.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields

from veriloop.config import check_typed

# ------------------------------------------------------------------------------------------------- the options


@dataclass
class AlarmsConfig:
    """Alarms on the metrics of each step (docs/concepts/alarms.md); each fires at most once per run."""

    enabled: bool = field(default=True, metadata={"help": "watch the metrics for the alarms; false = none is said"})
    window: int = field(default=20, metadata={"ge": 2, "help": "steps over which means and trends are measured"})
    min_steps: int = field(
        default=10, metadata={"ge": 2, "help": "values of its metric the window must hold before an alarm is judged"}
    )
    reward_hacking_reward_rise: float = field(
        default=0.1,
        metadata={"ge": 0, "help": "reward_hacking: training reward rise over the window (late - early), at least"},
    )
    reward_hacking_accuracy_drop: float = field(
        default=0.05,
        metadata={
            "ge": 0,
            "help": "reward_hacking: fall of validation (or held-out) greedy accuracy between its last two "
            "evaluations, at least",
        },
    )
    length_rise: float = field(
        default=0.3,
        metadata={"ge": 0, "help": "length_without_success: completion_len_mean late / early - 1 above this"},
    )
    length_flat: float = field(
        default=0.02,
        metadata={
            "ge": 0,
            "help": "length_without_success: while abs(late - early) of accuracy (else reward) is at most this",
        },
    )
    zero_variance_max: float = field(
        default=0.9,
        metadata={
            "ge": 0,
            "le": 1,
            "help": "zero_variance_groups: mean zero_variance_fraction over the window above this",
        },
    )
    ratio_high: float = field(
        default=10.0, metadata={"gt": 1, "help": "extreme_ratios: a step is extreme if ratio_max > this"}
    )
    ratio_low: float = field(
        default=0.1, metadata={"gt": 0, "lt": 1, "help": "extreme_ratios: ... or ratio_min < this"}
    )
    ratio_share: float = field(
        default=0.25,
        metadata={"ge": 0, "le": 1, "help": "extreme_ratios: share of the window's steps that are extreme above this"},
    )
    entropy_floor: float = field(
        default=1e-3,
        metadata={"ge": 0, "help": "entropy_collapse: mean entropy over the window (nats/token) below this"},
    )
    entropy_fraction: float = field(
        default=0.25,
        metadata={
            "ge": 0,
            "le": 1,
            "help": "entropy_collapse: ... or below this fraction of the run's early entropy (mean of its "
            "first `window` values)",
        },
    )
    kl_max: float = field(
        default=1.0, metadata={"ge": 0, "help": "kl_runaway: mean kl over the window (nats/token) above this"}
    )
    kl_growth: float = field(
        default=5.0, metadata={"gt": 1, "help": "kl_runaway: ... or kl late / early above this factor"}
    )
    kl_growth_floor: float = field(
        default=0.1, metadata={"ge": 0, "help": "kl_runaway: the growth counts only once late kl is at least this"}
    )
    truncation_max: float = field(
        default=0.2,
        metadata={"ge": 0, "le": 1, "help": "truncation_rising: mean truncation_rate over the window above this"},
    )
    truncation_rise: float = field(
        default=0.1, metadata={"ge": 0, "help": "truncation_rising: ... or truncation_rate late - early above this"}
    )
    logprob_mismatch_max: float = field(
        default=0.05,
        metadata={
            "ge": 0,
            "help": "logprob_mismatch: mean abs(learner - behaviour) log-prob (nats/token) over the window above this",
        },
    )

    def __post_init__(self):
        # Shares and fractions are bounded by 1 (above it the alarm could never fire); the rest by 0 (declared).
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "enabled" and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise ValueError(f"alarms.{f.name} must be a finite number, got {v!r}")
        for name in ("window", "min_steps"):
            if not isinstance(getattr(self, name), int):
                raise ValueError(f"alarms.{name} must be an integer, got {getattr(self, name)!r}")
        check_typed(self, "alarms")
        if self.min_steps > self.window:
            raise ValueError(
                f"alarms.min_steps must be an integer in [2, alarms.window = {self.window}], got {self.min_steps!r}"
            )


# --------------------------------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class AlarmSpec:
    """One alarm: what it reads, what sets it, what it means and what to do (the seed's advice)."""

    name: str
    metrics: tuple[str, ...]  # the metrics-row keys it reads
    options: tuple[str, ...]  # its AlarmsConfig fields (alarms.<name>)
    when: str  # the rule, in words and symbols
    meaning: str
    advice: str
    seed: str  # where the advice comes from


ALARMS: tuple[AlarmSpec, ...] = (
    AlarmSpec(
        "reward_hacking",
        ("reward_mean", "validation_greedy_accuracy", "heldout_greedy_accuracy"),
        ("reward_hacking_reward_rise", "reward_hacking_accuracy_drop"),
        "reward late - early >= rise while greedy accuracy (validation, else held-out) fell >= drop between its last "
        "two evaluations",
        "the score goes up but the task the score stands for does not: the policy has found a way to be rewarded "
        "without solving the problems",
        "suspect the verifier first: read completions the reward accepts that the evaluation rejects, look for a "
        "loophole (an answer format it misreads, a test it can be fooled by), then fix it and audit it",
        "seed 003 §9.1, §7",
    ),
    AlarmSpec(
        "length_without_success",
        ("completion_len_mean", "accuracy", "reward_mean"),
        ("length_rise", "length_flat"),
        "completion_len_mean late / early - 1 > rise while abs(late - early) of accuracy (else reward) <= flat",
        "completions grow without solving more problems: length is being rewarded or not held back, rather than "
        "bought with success",
        "check how the loss normalises over length (loss.aggregation) and every signal tied to length (a per-token "
        "reward, rollout.length_cost, rollout.overlong_buffer); reward the gain per cost, not length itself",
        "seed 003 §9.1, §4.4, §7",
    ),
    AlarmSpec(
        "zero_variance_groups",
        ("zero_variance_fraction",),
        ("zero_variance_max",),
        "mean zero_variance_fraction over the window > max",
        "most groups scored all their completions the same, so their advantages are all zero and they teach "
        "nothing: the prompts are too easy (all right) or too hard (all wrong) for the policy, or it no longer "
        "explores",
        "look at the task's difficulty for this model and at exploration: more completions per prompt "
        "(rollout.group_size), easier or harder prompts, resampling such groups (rollout.dynamic_sampling) or "
        "another signal; a small eps in the std cannot create a signal",
        "seed 003 §9.1, §4.3",
    ),
    AlarmSpec(
        "extreme_ratios",
        ("ratio_max", "ratio_min"),
        ("ratio_high", "ratio_low", "ratio_share"),
        "share of the window's steps with ratio_max > high or ratio_min < low > share",
        "the learner's probabilities of the sampled tokens are often far from the ones they were sampled with: "
        "the data no longer comes from (near) the policy being trained, and clipping alone does not repair that",
        "check that each record's behaviour log-prob belongs to the policy version that really sampled it "
        "(rollout.lag, rollout.max_staleness), that the sampling transforms (temperature, top-p/top-k) are "
        "accounted for, and how far one step moves the policy (optim.lr with update.inner_updates > 1)",
        "seed 003 §9.1, §8.1, §8.2",
    ),
    AlarmSpec(
        "entropy_collapse",
        ("entropy",),
        ("entropy_floor", "entropy_fraction"),
        "mean entropy over the window < floor, or < fraction x the run's early entropy",
        "the policy has become nearly deterministic on its own samples: groups stop differing and exploration is gone",
        "the seed ties lost exploration to groups that no longer differ and to a KL weight that holds the policy "
        "back: check zero_variance_fraction, the sampling temperature, kl.beta and loss.entropy_coef",
        "seed 003 §9.1, §4.3, §3.2 (entropy itself is not in the seed)",
    ),
    AlarmSpec(
        "kl_runaway",
        ("kl",),
        ("kl_max", "kl_growth", "kl_growth_floor"),
        "mean kl over the window > max, or kl late / early > growth with late >= floor",
        "the policy is drifting away from the reference faster than the KL term holds it",
        "watch the measured KL against the weight chosen for it: raise kl.beta (or use kl.controller=adaptive), "
        "lower optim.lr, and check the reward for what drives the drift",
        "seed 003 §9.1, §3.2",
    ),
    AlarmSpec(
        "truncation_rising",
        ("truncation_rate",),
        ("truncation_max", "truncation_rise"),
        "mean truncation_rate over the window > max, or late - early > rise",
        "more completions are cut by the token budget: a cut is the budget's ending, not the model's, and says "
        "nothing about whether the answer was right",
        "keep truncated completions apart from ended ones (update.mask_truncated, or rollout.overlong_buffer), and "
        "look at length together with difficulty and success: raise sampling.max_new_tokens or find what makes "
        "completions run on",
        "seed 003 §9.1, §1.1, §7",
    ),
    AlarmSpec(
        "logprob_mismatch",
        ("logprob_mismatch",),
        ("logprob_mismatch_max",),
        "mean logprob_mismatch over the window > max",
        "the sampler and the learner give the same tokens different log-probs before any update, so the ratio is "
        "off from the first pass",
        "record the likelihood of the distribution that actually sampled (after temperature and top-p/top-k), and "
        "check the engine's sampling settings, dtype and that it holds the current weights; loss.tis_cap corrects "
        "a small remaining gap",
        "seed 003 §8.2, §8.1",
    ),
    AlarmSpec(
        "non_finite",
        ("any numeric key",),
        (),
        "any value NaN or +-inf (always on: the run stops)",
        "a NaN or an infinity has entered the numbers; every update after it would spread it into the weights",
        "the run stops at that step; find the first non-finite value (rewards, advantages, log-probs, loss, "
        "gradients) and resume from the last checkpoint once fixed",
        "seed 003 §9.1",
    ),
)

_SPECS = {a.name: a for a in ALARMS}


def alarm_spec(name: str) -> AlarmSpec:
    """The table's row for ``name`` (KeyError naming the known ones)."""
    if name not in _SPECS:
        raise KeyError(f"no alarm {name!r}; known: {', '.join(_SPECS)}")
    return _SPECS[name]


def markdown_table(cfg: AlarmsConfig | None = None) -> str:
    """The table of docs/concepts/alarms.md: alarm | metric | option | default | meaning | advice | seed."""
    cfg = cfg or AlarmsConfig()
    lines = ["| alarm | metric | option | default | what it means | advice | seed |", "|---|---|---|---|---|---|---|"]
    for a in ALARMS:
        metrics = ", ".join(f"`{m}`" for m in a.metrics if m != "any numeric key") or "any numeric value"
        options = "<br>".join(f"`alarms.{o}`" for o in a.options) or "always on"
        defaults = "<br>".join(f"{getattr(cfg, o):g}" for o in a.options) or "-"
        lines.append(
            f"| `{a.name}` | {metrics} | {options} | {defaults} | {a.meaning} ({a.when}) | {a.advice} | {a.seed} |"
        )
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------------- the events


@dataclass
class AlarmEvent:
    """One alarm said: which, when, on what value against what threshold, and what to do."""

    name: str
    step: int
    metric: str
    value: float
    threshold: float
    message: str  # one sentence with the numbers
    advice: str
    seed: str

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, row: Mapping) -> AlarmEvent:
        return cls(**{f.name: row[f.name] for f in fields(cls)})

    def line(self) -> str:
        """The log line."""
        return f"alarm {self.name} at step {self.step}: {self.message}. Advice: {self.advice} ({self.seed})"


# ------------------------------------------------------------------------------------------------ non-finite


class NonFiniteError(RuntimeError):
    """A NaN or an infinity in a value of step ``step``: the run stops there.

    The message is neutral ("step 12: loss is nan; the run stops here"): the caller adds where it resumes from.
    """

    def __init__(self, step, name: str, value: float, detail: str = "", where=None):
        self.step, self.name, self.value, self.detail, self.where = step, name, value, detail, where
        message = f"step {step}: {name} {detail or f'is {_fmt_nonfinite(value)}'}; the run stops here"
        if where is not None:  # the run directory: what is kept, and how to go on
            message += (
                f" (its metrics row was not written; {where}/alarms.jsonl and report.html say so; after fixing "
                f"the cause, `veriloop train --resume {where}` continues from its last checkpoint)"
            )
        super().__init__(message)

    def __reduce__(self):  # pickles (across processes) with its own fields, not the message
        return type(self), (self.step, self.name, self.value, self.detail, self.where)


def _fmt_nonfinite(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_finite(name: str, value, step) -> None:
    """Raise ``NonFiniteError`` if ``value`` (a number or a tensor) holds a NaN or an infinity."""
    if _is_number(value):
        if isinstance(value, float) and not math.isfinite(value):  # an int is always finite
            raise NonFiniteError(step, name, float(value))
        return
    import torch  # a tensor: imported here so that the module stays light for the report

    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    if not t.is_floating_point():
        return  # integers and booleans cannot be NaN or infinite
    bad = ~torch.isfinite(t)
    count = int(bad.sum())  # one device sync, and only a count comes back
    if count:
        first = float(t[bad].flatten()[0])
        detail = (
            ""
            if t.numel() == 1
            else (f"has {count:,} of {t.numel():,} values not finite (first: {_fmt_nonfinite(first)})")
        )
        raise NonFiniteError(step, name, first, detail)


def check_finite_row(row: Mapping, ignore: Iterable[str] = ()) -> None:
    """Raise ``NonFiniteError`` at the first numeric value of a metrics row that is NaN or infinite.

    Nested dicts and lists are walked (named ``a.b`` and ``a[0]``); ``ignore`` names top-level keys to skip.
    """
    skip = set(ignore)
    step = row.get("step")
    for key, v in row.items():
        if key not in skip:
            _walk_finite(str(key), v, step)


def _walk_finite(name: str, v, step) -> None:
    if _is_number(v):
        check_finite(name, v, step)
    elif isinstance(v, Mapping):
        for k, x in v.items():
            _walk_finite(f"{name}.{k}", x, step)
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _walk_finite(f"{name}[{i}]", x, step)


# ------------------------------------------------------------------------------------------------- the watcher

# The keys the watcher keeps from each row (everything else is dropped: the state is a bounded window).
_WATCHED = (
    "reward_mean",
    "accuracy",
    "completion_len_mean",
    "zero_variance_fraction",
    "ratio_min",
    "ratio_max",
    "entropy",
    "kl",
    "truncation_rate",
    "logprob_mismatch",
)
_EVAL_KEYS = ("validation_greedy_accuracy", "heldout_greedy_accuracy")  # the first one a run reports is used


def _num(row: Mapping, key: str) -> float | None:
    v = row.get(key)
    if not _is_number(v):
        return None  # missing or text: not measured
    try:
        v = float(v)
    except OverflowError:  # an int beyond floats
        return None
    return v if math.isfinite(v) else None  # a NaN or an infinity measures nothing (check_finite_row stops on it)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


class AlarmWatcher:
    """Watches the metrics rows of a run and says each alarm at most once.

    State: the last ``cfg.window`` rows (only the watched keys), the last two evaluations, the mean of the first
    ``cfg.window`` entropy values, and the alarms fired: bounded, whatever the run's length.  ``skip`` names
    alarms that do not apply to the run (e.g. ``zero_variance_groups`` for a method without group baselines).
    """

    def __init__(self, cfg: AlarmsConfig | None = None, skip: Iterable[str] = ()):
        self.cfg = cfg or AlarmsConfig()
        self.skip = frozenset(skip)
        for name in self.skip:
            alarm_spec(name)  # a typo is refused, not silently watched
        self._fired: dict[str, AlarmEvent] = {}
        self._reset()

    def _reset(self) -> None:
        self._window: deque[tuple[int, dict[str, float]]] = deque(maxlen=self.cfg.window)
        self._evals: deque[tuple[int, float]] = deque(maxlen=2)  # (step, greedy accuracy), oldest first
        self._eval_key: str | None = None
        self._early_sum, self._early_count = 0.0, 0  # the run's first `window` entropy values (then frozen)
        self._rows = 0

    @property
    def fired(self) -> dict[str, AlarmEvent]:
        """The alarms said so far (this run and restored ones), by name, in the order they fired."""
        return dict(self._fired)

    def restore(self, events: Iterable[Mapping | AlarmEvent]) -> None:
        """Mark the alarms of earlier events (``alarms.jsonl`` rows) as said, so a resumed run does not repeat them."""
        for e in events:
            e = e if isinstance(e, AlarmEvent) else AlarmEvent.from_json(e)
            self._fired.setdefault(e.name, e)

    def replay(self, rows: Iterable[Mapping]) -> None:
        """Rebuild the state from earlier metrics rows (on resume), silently: nothing fires."""
        self._reset()
        for row in rows:
            self._take(row)

    def observe(self, row: Mapping) -> list[AlarmEvent]:
        """Take one step's metrics row; return the alarms that fire on it (each at most once per run)."""
        if not self.cfg.enabled:
            return []
        step = self._take(row)
        events = []
        for spec in ALARMS:
            if spec.name in self._fired or spec.name in self.skip or spec.name == "non_finite":
                continue
            found = getattr(self, "_" + spec.name)(step)
            if found is not None:
                metric, value, threshold, message = found
                event = AlarmEvent(
                    spec.name, step, metric, float(value), float(threshold), message, spec.advice, spec.seed
                )
                self._fired[spec.name] = event
                events.append(event)
        return events

    # ---- state

    def _take(self, row: Mapping) -> int:
        self._rows += 1
        number = _num(row, "step")
        step = int(number) if number is not None and number == int(number) else self._rows  # else: its position
        kept = {k: v for k in _WATCHED if (v := _num(row, k)) is not None}
        self._window.append((step, kept))
        if (e := kept.get("entropy")) is not None and self._early_count < self.cfg.window:
            self._early_sum += e
            self._early_count += 1
        for key in _EVAL_KEYS:
            if (acc := _num(row, key)) is not None and self._eval_key in (None, key):
                self._eval_key = key
                self._evals.append((step, acc))
                break
        return step

    def _values(self, key: str) -> list[float] | None:
        """The window's values of ``key``, or None while they are fewer than ``min_steps``."""
        vs = [r[key] for _, r in self._window if key in r]
        return vs if len(vs) >= self.cfg.min_steps else None

    @staticmethod
    def _halves(vs: list[float]) -> tuple[float, float]:
        h = len(vs) // 2
        return _mean(vs[:h]), _mean(vs[len(vs) - h :])

    def _span(self) -> str:
        return f"the last {len(self._window)} steps"

    # ---- the alarms: each returns (metric, value, threshold, message) or None

    def _reward_hacking(self, step):
        c = self.cfg
        rewards = self._values("reward_mean")
        if rewards is None or len(self._evals) < 2:
            return None
        early, late = self._halves(rewards)
        (s0, a0), (s1, a1) = self._evals
        if late - early >= c.reward_hacking_reward_rise and a0 - a1 >= c.reward_hacking_accuracy_drop:
            what = self._eval_key.replace("_", " ")
            return (
                self._eval_key,
                a0 - a1,
                c.reward_hacking_accuracy_drop,
                f"{what} fell {a0 - a1:.3g} ({a0:.3g} at step {s0} -> {a1:.3g} at step {s1}) while the training "
                f"reward rose {late - early:.3g} ({early:.3g} -> {late:.3g}) over {self._span()}",
            )
        return None

    def _length_without_success(self, step):
        c = self.cfg
        lengths = self._values("completion_len_mean")
        success_key = "accuracy" if self._values("accuracy") is not None else "reward_mean"
        success = self._values(success_key)
        if lengths is None or success is None:
            return None
        l0, l1 = self._halves(lengths)
        s0, s1 = self._halves(success)
        if l0 <= 0:
            return None
        rise = l1 / l0 - 1
        if rise > c.length_rise and abs(s1 - s0) <= c.length_flat:
            return (
                "completion_len_mean",
                rise,
                c.length_rise,
                f"mean completion length rose {rise:.0%} ({l0:.4g} -> {l1:.4g} tokens) over {self._span()} while "
                f"{success_key} stayed within {c.length_flat:g} ({s0:.3g} -> {s1:.3g})",
            )
        return None

    def _zero_variance_groups(self, step):
        c = self.cfg
        vs = self._values("zero_variance_fraction")
        if vs is not None and (m := _mean(vs)) > c.zero_variance_max:
            return (
                "zero_variance_fraction",
                m,
                c.zero_variance_max,
                f"{m:.0%} of groups on average over {self._span()} had all their rewards equal (above "
                f"{c.zero_variance_max:.0%}), so they carried no learning signal",
            )
        return None

    def _extreme_ratios(self, step):
        c = self.cfg
        steps = [r for _, r in self._window if "ratio_max" in r or "ratio_min" in r]
        if len(steps) < c.min_steps:
            return None
        extreme = sum(r.get("ratio_max", 1.0) > c.ratio_high or r.get("ratio_min", 1.0) < c.ratio_low for r in steps)
        share = extreme / len(steps)
        if share > c.ratio_share:
            return (
                "ratio_max",
                share,
                c.ratio_share,
                f"{extreme} of {len(steps)} steps had a probability ratio above {c.ratio_high:g} or below "
                f"{c.ratio_low:g} ({share:.0%}, above {c.ratio_share:.0%})",
            )
        return None

    def _entropy_collapse(self, step):
        c = self.cfg
        vs = self._values("entropy")
        if vs is None:
            return None
        m = _mean(vs)
        if m < c.entropy_floor:
            return (
                "entropy",
                m,
                c.entropy_floor,
                f"mean entropy over {self._span()} is {m:.3g} nats/token, below {c.entropy_floor:g}",
            )
        early = self._early_sum / self._early_count
        if m < c.entropy_fraction * early:
            return (
                "entropy",
                m,
                c.entropy_fraction * early,
                f"mean entropy over {self._span()} is {m:.3g} nats/token, below {c.entropy_fraction:g} x the "
                f"run's early {early:.3g}",
            )
        return None

    def _kl_runaway(self, step):
        c = self.cfg
        vs = self._values("kl")
        if vs is None:
            return None
        m = _mean(vs)
        if m > c.kl_max:
            return (
                "kl",
                m,
                c.kl_max,
                f"mean KL to the reference over {self._span()} is {m:.3g} nats/token, above {c.kl_max:g}",
            )
        early, late = self._halves(vs)
        if late >= c.kl_growth_floor and late > c.kl_growth * early:
            if early <= 0:  # from exactly 0: no factor to report, the late level is the news
                return (
                    "kl",
                    late,
                    c.kl_growth_floor,
                    f"KL to the reference grew from 0 to {late:.3g} nats/token over {self._span()}",
                )
            return (
                "kl",
                late / early,
                c.kl_growth,
                f"KL to the reference grew x{late / early:.3g} ({early:.3g} -> {late:.3g} nats/token) over "
                f"{self._span()}, more than x{c.kl_growth:g}",
            )
        return None

    def _truncation_rising(self, step):
        c = self.cfg
        vs = self._values("truncation_rate")
        if vs is None:
            return None
        m = _mean(vs)
        if m > c.truncation_max:
            return (
                "truncation_rate",
                m,
                c.truncation_max,
                f"{m:.0%} of completions on average over {self._span()} were cut at the token budget (above "
                f"{c.truncation_max:.0%})",
            )
        early, late = self._halves(vs)
        if late - early > c.truncation_rise:
            return (
                "truncation_rate",
                late - early,
                c.truncation_rise,
                f"the share of completions cut at the token budget climbed {late - early:.3g} ({early:.3g} -> "
                f"{late:.3g}) over {self._span()}, more than {c.truncation_rise:g}",
            )
        return None

    def _logprob_mismatch(self, step):
        c = self.cfg
        vs = self._values("logprob_mismatch")
        if vs is not None and (m := _mean(vs)) > c.logprob_mismatch_max:
            return (
                "logprob_mismatch",
                m,
                c.logprob_mismatch_max,
                f"learner and sampler log-probs of the same tokens differ by {m:.3g} nats/token on average over "
                f"{self._span()}, above {c.logprob_mismatch_max:g}",
            )
        return None


# ------------------------------------------------------------------------------------------------ in a run


def alarms_not_for(cfg, estimator) -> tuple[str, ...]:
    """The alarms whose pattern a run has by design: zero-variance groups without group baselines (SFT, RFT,
    PPO: nothing is compared within a group), and the behaviour/learner mismatch when a frozen policy or a teacher
    samples (``rollout.source`` other than ``policy``: off-policy on purpose)."""
    skip = [] if estimator.min_group_size > 1 else ["zero_variance_groups"]
    if cfg.rollout.source != "policy":
        skip.append("logprob_mismatch")
    return tuple(skip)


ALARMS_FILE = "alarms.jsonl"


class RunAlarms:
    """The alarms of one run: the watcher, ``alarms.jsonl`` in the run directory, and the log.

    ``check(row)`` stops the run on a non-finite value (the event written first, so the report shows it) and
    says every alarm that fires, once: a warning on the log, a line in ``alarms.jsonl``."""

    def __init__(self, run_dir, cfg: AlarmsConfig, skip: Iterable[str] = (), log=None):
        from pathlib import Path

        self.path = Path(run_dir) / ALARMS_FILE
        self.watcher, self.log = AlarmWatcher(cfg, skip), log

    def resume(self, rows: list[Mapping], step: int) -> None:
        """The state at the checkpoint of ``step``: its metrics rows replayed, its alarms (those said up to that
        step; later lines were of steps that are redone, and go) kept as said."""
        from veriloop.io import atomic_write_jsonl, read_jsonl

        events = [e for e in read_jsonl(self.path) if int(e.get("step", 0)) <= step] if self.path.exists() else []
        if self.path.exists():
            atomic_write_jsonl(self.path, events)
        self.watcher.replay([r for r in rows if r.get("step", 0) <= step])
        self.watcher.restore(events)

    def _say(self, event: AlarmEvent) -> None:
        import json

        row = event.to_json()
        row["value"] = row["value"] if _is_number(row["value"]) and math.isfinite(row["value"]) else str(row["value"])
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self.log is not None:
            self.log.warning(event.line())

    def stopped(self, error: NonFiniteError) -> None:
        """Write the non-finite stop as an event (the report shows it beside the alarms)."""
        spec = alarm_spec("non_finite")
        self._say(
            AlarmEvent(
                "non_finite", int(error.step or 0), error.name, error.value, 0.0, str(error), spec.advice, spec.seed
            )
        )

    def check(self, row: Mapping) -> list[AlarmEvent]:
        try:
            check_finite_row(row)
        except NonFiniteError as e:
            self.stopped(e)
            raise
        events = self.watcher.observe(row)
        for event in events:
            self._say(event)
        return events
