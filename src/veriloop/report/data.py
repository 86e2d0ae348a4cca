"""What the run browser shows, read from a run directory: curves, alarms, records with their token values,
the spot-check sample, a search run's cells.  Plain JSON values; ``page.py`` puts them in the page.

Kinds of run directory: a training run (``metrics.jsonl``), a search run (``results.jsonl`` + ``summary.json``
of ``veriloop search``), and a directory of runs (the demo's, a pipeline's), whose page links each run's own.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import yaml

from veriloop.errors import InputError
from veriloop.io import read_jsonl
from veriloop.rollout.index import RolloutIndex, reasoning_chars
from veriloop.rollout.records import Record, RecordStore
from veriloop.training.loop.token_values import TokenValueStore, record_key
from veriloop.training.run.alarms import ALARMS

# The curves, by panel: (panel id, title, metric keys, y-axis title).  A metric a run lacks is left out; every
# other numeric metric is offered under "more metrics".
PANELS = [
    ("reward", "Reward and accuracy", ["reward_mean", "accuracy", "reward_*"], "reward / rate"),
    (
        "evaluation",
        "Held-out evaluations",
        [
            "validation_greedy_accuracy",
            "heldout_greedy_accuracy",
            "validation_wrong_steps_rate",
            "heldout_wrong_steps_rate",
        ],
        "rate",
    ),
    ("kl_entropy", "KL and entropy", ["kl", "entropy"], "nats per token"),
    ("clipping", "Clip fractions", ["clip_frac_low", "clip_frac_high"], "fraction of tokens"),
    ("ratios", "Ratio extremes", ["ratio_min", "ratio_max"], "pi_theta / pi_behavior"),
    ("length", "Length and truncation", ["completion_len_mean", "completion_len_max", "truncation_rate"], "tokens"),
    ("groups", "Zero-variance groups", ["zero_variance_fraction"], "fraction of groups"),
    ("mismatch", "Behaviour / learner log-prob mismatch", ["logprob_mismatch"], "nats per token"),
    ("throughput", "Throughput", ["tokens_per_s", "gen_tokens_per_s"], "tokens / s"),
    ("time", "Time per phase", ["time_generate_s", "time_verify_s", "time_update_s", "time_step_s"], "seconds"),
]
EVAL_KEYS = PANELS[1][2]
SECONDARY = {"truncation_rate"}  # drawn against a right-hand axis (a rate beside token counts)
NOT_CURVES = {"step", "update_started_at", "update_ended_at"}
STATIC_RECORDS = 1500  # records a self-contained page holds (with their tokens): ~1-3 MB of JSON
SPOT_CHECK_RANGES, SPOT_CHECK_PER_RANGE, SPOT_CHECK_SEED = 4, 8, 0
ANSWER_ONLY_CHARS = 3  # at most this many non-space characters besides the final answer: no visible reasoning
MARKS_FILE = "spot_check.json"
MARKS = ("fine", "suspicious")


def run_kind(run_dir: Path) -> str:
    if (run_dir / "metrics.jsonl").is_file() or (run_dir / "rollouts").is_dir():
        return "train"
    if (run_dir / "results.jsonl").is_file() and (run_dir / "summary.json").is_file():
        return "search"
    if any(run_dir.glob("*/metrics.jsonl")) or any(run_dir.glob("*/results.jsonl")):
        return "group"
    raise InputError(
        f"{run_dir}: not a run directory (no metrics.jsonl, rollouts/, search results.jsonl, or runs inside it)"
    )


def _json(path: Path):
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not JSON ({e})") from None


def metrics_rows(run_dir: Path) -> list[dict]:
    """The metrics rows; a run still going may have its last line half-written: that line is left out."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return [r for r in rows if isinstance(r, dict) and "step" in r]


def curves(rows: list[dict]) -> dict:
    """Columns of the metrics (None where a step lacks one) and the panels that have data."""
    series: dict[str, list] = {}
    for j, r in enumerate(rows):  # one pass (a long run has 10,000 rows of ~40 values)
        for k, v in r.items():
            if type(v) in (int, float) and math.isfinite(v):  # type(): a bool is not a value to draw
                column = series.get(k)
                if column is None:
                    column = series[k] = [None] * len(rows)
                column[j] = v
    keys = sorted(set(series) - NOT_CURVES)
    series = {k: series[k] for k in keys}
    panels, placed = [], set()
    for pid, title, wanted, ytitle in PANELS:
        found = []
        for w in wanted:
            found += sorted(k for k in keys if k.startswith(w[:-1])) if w.endswith("*") else [w] if w in series else []
        found = [k for k in dict.fromkeys(found) if k not in placed]
        if found:
            placed.update(found)
            panels.append(
                {
                    "id": pid,
                    "title": title,
                    "keys": found,
                    "ytitle": ytitle,
                    "secondary": [k for k in found if k in SECONDARY],
                }
            )
    evals = [r["step"] for r in rows if any(r.get(k) is not None for k in EVAL_KEYS)]
    return {
        "steps": [r["step"] for r in rows],
        "series": series,
        "panels": panels,
        "more": [k for k in keys if k not in placed],
        "eval_steps": evals,
    }


def alarms(run_dir: Path) -> list[dict]:
    path = run_dir / "alarms.jsonl"
    return read_jsonl(path) if path.is_file() else []


def alarm_table() -> list[dict]:
    return [dataclasses.asdict(a) for a in ALARMS]


def load_tokenizer(run_dir: Path, config: dict):
    """The run's tokenizer (its final model's, else its policy's), to show each token; None when neither loads.
    Read with the ``tokenizers`` library from ``tokenizer.json`` where there is one (milliseconds, where importing
    transformers takes seconds: a served page answers while it loads)."""
    policy = str(config.get("policy") or "")
    # builtin:base is the shipped base (models/loading.py's BUILTIN_BASE; not imported: it imports torch)
    shipped = Path(__file__).resolve().parent.parent / "assets" / "base"
    places = [
        run_dir / "final",
        shipped if policy == "builtin:base" else Path(policy) if policy and policy != "builtin:init" else None,
    ]
    for place in filter(None, places):
        if (place / "tokenizer.json").is_file():
            from tokenizers import Tokenizer

            try:
                return Tokenizer.from_file(str(place / "tokenizer.json"))
            except Exception:  # noqa: BLE001  (a file the library cannot read: transformers may)
                pass
        if (place / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            try:
                return AutoTokenizer.from_pretrained(str(place), local_files_only=True)
            except (OSError, ValueError):
                continue
    if policy == "builtin:init":
        from veriloop.models.tiny import build_char_tokenizer

        return build_char_tokenizer((config.get("model") or {}).get("max_positions", 256))
    return None


class TokenText:
    """Each token's text as the browser shows it: what the token adds to the decoded text.

    Decoding one id alone splits a character whose UTF-8 bytes span several byte-level tokens into replacement
    characters; instead each token's piece is ``decode(window + token)`` minus ``decode(window)`` over the
    ``WINDOW`` tokens before it (as incremental detokenizers do), so a character belongs to the token that
    completes it, the tokens before it show nothing, and the pieces join to the decoded text."""

    WINDOW = 6  # tokens of context: more than the 4 bytes of the longest UTF-8 character

    def __init__(self, tokenizer):
        self.tokenizer, self.cache = tokenizer, {}

    def decode(self, ids: list[int]) -> str:
        key = tuple(ids)
        if key not in self.cache:
            if len(self.cache) > 200_000:  # bounded: a served page of a long run decodes on demand
                self.cache.clear()
            self.cache[key] = self.tokenizer.decode(list(ids), skip_special_tokens=False)
        return self.cache[key]

    def __call__(self, ids: list[int]) -> list[str] | None:
        if self.tokenizer is None:
            return None
        out, pending = [], False
        for i in range(len(ids)):
            lo = max(0, i - self.WINDOW)
            before, now = self.decode(ids[lo:i]), self.decode(ids[lo : i + 1])
            stem = before.rstrip("\ufffd")  # an unfinished character before: the token that finishes it shows it
            pending = now.endswith("\ufffd") and now.rstrip("\ufffd").startswith(stem)
            if pending:
                out.append("")
            elif now.startswith(stem):
                out.append(now[len(stem) :])
            else:  # a tokenizer whose window decodes differently: the token alone
                out.append(self.decode(ids[i : i + 1]))
        if pending and out:  # bytes no later token finished: the last token shows what the whole text ends with
            whole, head = self.tokenizer.decode(list(ids), skip_special_tokens=False), "".join(out[:-1])
            out[-1] = whole[len(head) :] if whole.startswith(head) else "\ufffd"
        return out


def record_view(r: Record, step: int, i: int, values: dict | None, text: TokenText) -> dict:
    """One record as the rollout browser shows it: its verdict, provenance and per-token values."""
    v = values or {}
    return {
        "id": f"{step}:{i}",
        "step": step,
        "i": i,
        "problem_id": r.problem_id,
        "group_id": r.group_id,
        "prompt": r.prompt,
        "completion": r.completion,
        "reference": r.reference,
        "pieces": text(r.completion_ids),
        "mask": r.model_mask,
        "behavior": [round(x, 5) for x in r.behavior_logprobs] if r.behavior_logprobs else None,
        "learner": v.get("learner_logprob"),
        "ratio": v.get("ratio"),
        "advantage": v.get("advantage"),
        "prm_steps": v.get("prm_steps"),
        "reward": r.reward,
        "components": r.reward_components,
        "outcome": r.verdict_outcome,
        "details": r.verdict_details,
        "verifier": r.verifier,
        "finish_reason": r.finish_reason,
        "truncated": r.truncated,
        "tool_calls": r.tool_calls or [],
        "failed_tool_calls": r.failed_tool_calls,
        "policy_version": r.policy_version,
        "sampling": r.sampling,
        "tokens": len(r.completion_ids),
        "reasoning_chars": reasoning_chars(r.completion),
    }


class RunRecords:
    """A training run's records: the step files, their token values, and the index that finds them."""

    def __init__(self, run_dir: Path, config: dict):
        self.store = RecordStore(run_dir / "rollouts")
        self.values = TokenValueStore(run_dir / "rollouts")
        self.index = RolloutIndex(run_dir / "rollouts")
        self.run_dir, self.config, self._text = run_dir, config, None
        self._steps: dict[int, list[Record]] = {}

    @property
    def text(self) -> TokenText:
        """Loaded when first needed (transformers takes seconds to import: a served page opens without it)."""
        if self._text is None:
            self._text = TokenText(load_tokenizer(self.run_dir, self.config))
        return self._text

    def read(self, step: int) -> list[Record]:
        if step not in self._steps:
            if len(self._steps) > 64:  # a bounded cache: a served page of a long run reads steps on demand
                self._steps.clear()
            self._steps[step] = self.store.read(step)
        return self._steps[step]

    def token_values(self, step: int) -> dict:
        """The values of the step's records: from the update of that step, or of a later one (asynchronous
        rollouts learn a batch up to a few steps after it was sampled)."""
        out = {}
        for s in range(step + 4, step - 1, -1):
            out.update(self.values.read(s))
        return out

    def views(self, step: int, positions: list[int]) -> list[dict]:
        records, values = self.read(step), self.token_values(step)
        return [
            record_view(records[i], step, i, values.get(record_key(records[i], i)), self.text)
            for i in positions
            if 0 <= i < len(records)
        ]

    def sample(self, budget: int = STATIC_RECORDS, seed: int = 0) -> list[dict]:
        """Whole groups from every step, as evenly as ``budget`` allows (a fixed seed picks which)."""
        steps = self.store.steps()
        if not steps:
            return []
        per_step = max(1, budget // len(steps))
        rng, out = random.Random(seed), []
        for step in steps:
            records = self.read(step)
            groups: dict[str, list[int]] = {}
            for i, r in enumerate(records):
                groups.setdefault(r.group_id, []).append(i)
            names = sorted(groups)
            rng.shuffle(names)
            chosen: list[int] = []
            for name in names:
                if chosen and len(chosen) + len(groups[name]) > per_step:
                    break
                chosen += groups[name]
            out += self.views(step, sorted(chosen))
            self._steps.pop(step, None)
        return out


def spot_check(db, seed: int = SPOT_CHECK_SEED) -> list[dict]:
    """Seed 002's advice, made a routine: look at rewarded completions by hand.  Per step range (the run cut in
    ``SPOT_CHECK_RANGES``), ``SPOT_CHECK_PER_RANGE`` rewarded records drawn with a fixed seed (a step of the
    range drawn, then one of its rewarded records: a handful of small reads however long the run), and the
    range's shortest and longest rewarded completions; each is flagged when it is one of those two or has at
    most ``ANSWER_ONLY_CHARS`` characters besides its final answer (an answer with no reasoning:
    rollout/index.py's ``reasoning_chars``)."""
    first, last = db.execute("SELECT MIN(step), MAX(step) FROM records").fetchone()
    if first is None:
        return []
    width = max(1, -(-(last - first + 1) // SPOT_CHECK_RANGES))
    items, columns = [], "step, i, tokens, reasoning_chars"
    for k in range(SPOT_CHECK_RANGES):
        lo, hi = first + k * width, min(last, first + (k + 1) * width - 1)
        if lo > last:
            break
        where = "reward > 0 AND step BETWEEN ? AND ?"
        extremes = db.execute(f"SELECT MIN(tokens), MAX(tokens) FROM records WHERE {where}", (lo, hi))
        shortest, longest = extremes.fetchone()
        if shortest is None:
            continue
        rows = {
            db.execute(
                f"SELECT {columns} FROM records WHERE {where} AND tokens = ? ORDER BY step, i LIMIT 1", (lo, hi, n)
            ).fetchone()
            for n in (shortest, longest)
        }  # always shown: the extremes
        rng = random.Random(f"{seed}:{lo}")
        for _ in range(8 * SPOT_CHECK_PER_RANGE):  # a bounded number of draws: a range may have few rewarded steps
            if len(rows) >= SPOT_CHECK_PER_RANGE + 2:
                break
            step = rng.randint(lo, hi)
            rewarded = db.execute(f"SELECT {columns} FROM records WHERE step = ? AND reward > 0", (step,)).fetchall()
            if rewarded:
                rows.add(rng.choice(rewarded))
        for step, i, tokens, reasoning in sorted(rows):
            flags = [
                f
                for f, on in (
                    ("shortest", tokens == shortest),
                    ("longest", tokens == longest),
                    ("answer-only", reasoning <= ANSWER_ONLY_CHARS),
                )
                if on
            ]
            items.append({"id": f"{step}:{i}", "step": step, "i": i, "range": f"{lo}-{hi}", "flags": flags})
    return items


def read_marks(run_dir: Path) -> dict:
    data = _json(run_dir / MARKS_FILE) or {}
    return check_marks(data, str(run_dir / MARKS_FILE))


def check_marks(data, where: str) -> dict:
    """``{"marks": {record id: {"mark": fine|suspicious, "note": str}}}``, refused with the entry named."""
    marks = data.get("marks", {}) if isinstance(data, dict) else None
    if not isinstance(marks, dict):
        raise InputError(f"{where}: expected an object with a 'marks' object")
    for rid, m in marks.items():
        if not (isinstance(m, dict) and m.get("mark") in MARKS and isinstance(m.get("note", ""), str)):
            raise InputError(
                f"{where}: mark of record {rid!r} must be {{'mark': 'fine'|'suspicious', 'note': '...'}}, got {m!r}"
            )
    return {"marks": marks}


def search_view(run_dir: Path) -> dict:
    summary = _json(run_dir / "summary.json") or {}
    results = read_jsonl(run_dir / "results.jsonl")
    return {"summary": summary, "results": results[:20000], "results_total": len(results)}


def config_of(run_dir: Path) -> tuple[str, dict]:
    path = run_dir / "config.yaml"
    if not path.is_file():
        return "", {}
    text = path.read_text()
    try:
        return text, yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not YAML ({e})") from None


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def page_data(run_dir: Path, served: bool = False) -> dict:
    """Everything one run's page shows.  ``served``: records come from the server on demand (none inlined)."""
    kind = run_kind(run_dir)
    config_text, config = config_of(run_dir)
    data = {
        "title": run_dir.name or str(run_dir),
        "run_dir": str(run_dir),
        "kind": kind,
        "served": served,
        "summary": _json(run_dir / "summary.json") if kind != "search" else None,
        "config": config_text,
        "alarms": alarms(run_dir),
        "alarm_table": alarm_table(),
        "runs": child_runs(run_dir),
        "table": (run_dir / "table.txt").read_text() if (run_dir / "table.txt").is_file() else "",
    }
    compute = _json(run_dir / "compute.json")
    if isinstance(compute, dict):
        data["compute"] = compute_view(kind, compute)
    if kind == "search":
        data["search"] = search_view(run_dir)
    if kind != "train":
        return data
    rows = metrics_rows(run_dir)
    data["curves"] = curves(rows)
    data["last"] = rows[-1] if rows else {}
    records = RunRecords(run_dir, config)
    if not served:  # the server catches the index up in the background
        records.index.catch_up(records.store)
    db = records.index.connect()
    try:
        data["record_count"] = db.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        items = spot_check(db)
    finally:
        db.close()
    data["spot_check"] = {
        "items": items,
        "per_range": SPOT_CHECK_PER_RANGE,
        "seed": SPOT_CHECK_SEED,
        "answer_only_chars": ANSWER_ONLY_CHARS,
        **read_marks(run_dir),
    }
    if not served:
        sample = records.sample()
        have = {r["id"] for r in sample}
        by_step: dict[int, list[int]] = {}
        for it in items:
            if it["id"] not in have:
                by_step.setdefault(it["step"], []).append(it["i"])
        for step, positions in sorted(by_step.items()):
            sample += records.views(step, positions)
        data["records"] = sample
    return data


def compute_view(kind: str, compute: dict) -> dict:
    """The compute ledger as the overview shows it (``training/run/compute.py``): the training column (a training run's
    own; a search's policy's, where veriloop trained it) flat, and the test-time column one row per strategy and
    budget."""
    training = compute if kind == "train" else compute.get("training")
    rows = [
        {"strategy": strategy, "budget": budget, **cell}
        for strategy, per in (compute.get("test_time_per_question") or {}).items()
        for budget, cell in per.items()
    ]
    return {"training": flatten(training) if isinstance(training, dict) else None, "test_time": rows}


def child_runs(run_dir: Path) -> list[dict]:
    out = []
    for p in sorted(run_dir.iterdir()) if run_dir.is_dir() else []:
        if p.is_dir() and ((p / "metrics.jsonl").is_file() or (p / "results.jsonl").is_file()):
            out.append({"name": p.name, "report": f"{p.name}/report.html"})
    return out
