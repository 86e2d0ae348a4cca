"""A run directory: opened new or resumed, and a resumed run is the same run.

``open_run_dir`` refuses a directory that holds a run unless it is resumed; resuming removes what a kill
left behind (``.step-N.tmp``, hidden ``.*.tmp`` files), takes the latest checkpoint that matches its
manifest (``checkpoint.find_resumable_checkpoint``), and when there is none starts the run over from step 0
in the same directory.  Each checkpoint holds the run's resolved config (``config.yaml``) and its
``metrics.jsonl`` as of its step: resuming compares the config about to run with the checkpoint's and refuses
any difference but those in ``SAFE_TO_CHANGE`` (naming each key, old -> new); accepted changes are recorded in
``history.jsonl`` and ``config.yaml`` rewritten to the config now in force.  ``config.yaml`` is listed with its
size and SHA-256 in the run's own ``manifest.json`` (``io.write_checked``), so a cut or edited one is named
(``read_run_config``), never read as a shorter config; a ``metrics.jsonl`` that lost rows up to the checkpoint
is put back from the checkpoint's copy, with a warning.
"""

from __future__ import annotations

import json
import logging
import shutil
from datetime import UTC, datetime
from pathlib import Path

import yaml

from veriloop.config import ConfigError
from veriloop.errors import InputError
from veriloop.io import atomic_write_bytes, check_file, fsync_dir, remove_temp_files, steps_in, write_checked
from veriloop.rollout.records import RecordStore
from veriloop.training.run.checkpoint import (
    CONFIG,
    HISTORY,
    METRICS,
    RUN_OUTPUTS,
    check_checkpoint,
    config_bytes,
    find_resumable_checkpoint,
    flatten,
    list_checkpoints,
)

log = logging.getLogger(__name__)

# The options a resume may change (``veriloop train --resume RUN --steps 400``).  Each decides when the run stops,
# where it writes, what else it reports or how long it waits; none changes what a step computes, so the steps
# already taken stay those of the run being continued and the run keeps its meaning.  Any other difference from
# the checkpoint's config is refused: another seed, batch, model, reward or optimizer would make a different
# run that only looks continued (and some, such as LoRA or the model's shape, could not even load the weights).
SAFE_TO_CHANGE = {
    "steps": "when the run ends (not below the steps done; refused with optim.schedule cosine, whose learning "
    "rate at every step depends on steps)",
    "max_minutes": "a stopping rule",
    "max_samples": "a stopping rule",
    "max_sampled_tokens": "a stopping rule",
    "checkpoint_every": "how often it saves",
    "keep_checkpoints": "how many saves it keeps",
    "eval_every": "how often validation is measured (greedy: it draws nothing the training reads)",
    "threads": "CPU threads: speed only (on CPU the last bits of later steps may differ, as between machines)",
    "report_to": "where metrics are also sent",
    "export": "where the final model is also saved",
    "run_dir": "where the run lives (a moved directory)",
    "rollout.request_timeout_s": "how long a request may run before the run fails",
    "learner.timeout_s": "how long a collective may run before the run fails",
    "ray.timeout_s": "how long starting and stopping Ray may take",
    # where the learner runs: the same update, its gradient sums in another order (a resume on a smaller cluster)
    "learner.strategy": "where the update runs (local, ddp, fsdp2: the last bits of later steps may differ)",
    "learner.world_size": "how many ranks (the last bits of later steps may differ)",
    "learner.placement": "where the ranks run",
    "learner.nodes": "how many nodes the ranks spread over",
    "learner.ranks_per_node": "how many ranks on each node",
    "learner.node_strategy": "how the ranks' bundles are placed",
    "learner.cpus_per_rank": "what each rank reserves",
    "learner.gpus_per_rank": "what each rank reserves",
    "learner.sync_bucket_mb": "how the weights travel (the same bytes arrive)",
    "ray.address": "which cluster",
}


# ---------------------------------------------------------------------------------------------------- run dirs


def _remove_leftovers(run_dir: Path) -> None:
    """What a kill mid-write leaves: a checkpoint's temporary directory, final/'s (``.final.tmp``, ``.final.old``:
    the resumed run writes final/ again), hidden ``.*.tmp`` files."""
    checkpoints = run_dir / "checkpoints"
    for p in [
        *(checkpoints.glob(".step-*") if checkpoints.is_dir() else []),
        run_dir / ".final.tmp",
        run_dir / ".final.old",
    ]:
        if p.is_dir() and p.name.endswith((".tmp", ".old")):
            shutil.rmtree(p)
    for d in (run_dir, run_dir / "rollouts", run_dir / "rollouts" / "requests", run_dir / "prm"):
        remove_temp_files(d)


def _partial_run(run_dir: Path) -> list[str]:
    """The outputs of a run in ``run_dir`` (it has no complete checkpoint), in words; [] when there are none."""
    said = []
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        rows = [line for line in metrics.read_bytes().splitlines() if line.strip()]
        said.append(f"{len(rows)} metrics row{'s' * (len(rows) != 1)}")
    steps = RecordStore(run_dir / "rollouts").steps()
    if steps:
        said.append(f"the rollouts of {len(steps)} step{'s' * (len(steps) != 1)}")
    ledger = run_dir / "ledger.jsonl"
    if ledger.is_file():
        events = len([line for line in ledger.read_bytes().splitlines() if line.strip()])
        said.append(f"{events} ledger event{'s' * (events != 1)}")
    for name in ("rollouts", "prm", "final"):
        if (run_dir / name).is_dir() and any((run_dir / name).iterdir()) and not (name == "rollouts" and steps):
            said.append(f"{name}/")
    if any(p.is_dir() for _, p in steps_in(run_dir / "checkpoints")):
        said.append("checkpoints/")
    return said


def _start_over(run_dir: Path, why: str) -> None:
    """Discard a run's partial outputs (``RUN_OUTPUTS``) so that it runs again from step 0; config.yaml stays."""
    discarded = _partial_run(run_dir)
    for name in RUN_OUTPUTS:
        p = run_dir / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    fsync_dir(run_dir)
    log.warning(
        f"{why} in {str(run_dir)!r}: starting the run over from step 0 with its config, discarding "
        f"{', '.join(discarded) or 'nothing (it had written nothing yet)'}"
    )


def open_run_dir(run_dir: Path, config: dict, resume: bool) -> Path | None:
    """The checkpoint to resume from (resume), or a new run: refuse a directory that holds one, write config.yaml.

    Resuming checks ``config`` against the checkpoint's (``check_resume``), then records the resume in
    history.jsonl and makes config.yaml say ``config``.  Resuming a run directory (one with config.yaml) that
    has no valid checkpoint (killed before its first one, or every one damaged) checks ``config`` against
    config.yaml and starts it over from step 0: returns None after discarding its partial outputs."""
    if resume:
        _remove_leftovers(run_dir)
        complete = list_checkpoints(run_dir)
        checkpoint = find_resumable_checkpoint(run_dir)
        if checkpoint is not None:
            done = int(json.loads((checkpoint / "trainer_state.json").read_text())["step"])
            changed = check_resume(checkpoint_config(run_dir, checkpoint), config, done, run_dir)
            _put_back_metrics(run_dir, checkpoint, done)
            _in_force(run_dir, config, {"event": "resume", "checkpoint": checkpoint.name, "changed": changed})
            return checkpoint
        if not (run_dir / CONFIG).is_file():
            raise FileNotFoundError(
                f"nothing to resume in {str(run_dir)!r}: no "
                f"{'valid (undamaged)' if complete else 'complete'} checkpoint"
            )
        changed = check_resume(read_run_config(run_dir), config, 0, run_dir)
        why = "no valid checkpoint (every one is damaged)" if complete else "no complete checkpoint"
        _start_over(run_dir, why)
        _in_force(run_dir, config, {"event": "start over", "why": why, "changed": changed})
        return None
    if list_checkpoints(run_dir):
        raise InputError(
            f"run directory {str(run_dir)!r} already holds a run; continue it with "
            f"`veriloop train --resume {run_dir}` or choose another --run_dir"
        )
    partial = _partial_run(run_dir) if run_dir.is_dir() else []
    if partial and (run_dir / "config.yaml").is_file():
        raise InputError(
            f"run directory {str(run_dir)!r} already holds a run that stopped before its first complete checkpoint "
            f"({', '.join(partial)}); `veriloop train --resume {run_dir}` starts it over from step 0 with its "
            "config.yaml (discarding those), or choose another --run_dir"
        )
    if partial:
        raise InputError(
            f"run directory {str(run_dir)!r} already holds a run's files ({', '.join(partial)}) but no config.yaml "
            "and no checkpoint, so it cannot be resumed; remove them or choose another --run_dir"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    write_checked(run_dir, CONFIG, config_bytes(config))
    _record(run_dir, {"event": "start"})
    return None


ABSENT = "(absent)"  # a key one config has and the other has not (written by another veriloop version)


def config_changes(old: dict, new: dict) -> dict[str, list]:
    """``{dotted key: [old, new]}`` for every option whose value differs, in the order of ``new``."""
    a, b = flatten(old), flatten(new)
    return {
        k: [a.get(k, ABSENT), b.get(k, ABSENT)]
        for k in [*b, *(k for k in a if k not in b)]
        if a.get(k, ABSENT) != b.get(k, ABSENT)
    }


def check_resume(old: dict, new: dict, done: int, run_dir: Path) -> dict[str, list]:
    """The changes from ``old`` (the checkpoint's config, after ``done`` steps) to ``new`` (the config about to
    run), when every one is in ``SAFE_TO_CHANGE``; else an InputError naming each refused key, old -> new."""
    changed = config_changes(old, new)
    cosine = flatten(new).get("optim.schedule") == "cosine"
    refused = []
    for key, (o, n) in changed.items():
        if key not in SAFE_TO_CHANGE:
            refused.append(f"{key} {o!r} -> {n!r}")
        elif key == "steps" and cosine:
            refused.append(f"steps {o!r} -> {n!r} (with optim.schedule cosine each step's learning rate depends on it)")
        elif key == "steps" and isinstance(n, int) and n < done:
            refused.append(f"steps {o!r} -> {n!r} (below the {done} steps done)")
    if refused:
        raise InputError(
            f"cannot resume {str(run_dir)!r} with another configuration: {'; '.join(refused)} (old: the "
            f"config its {done} steps were trained with, new: this resume's). A resumed run is the same run: "
            "resume without these changes, or start a new run with another --run_dir. A resume may change only "
            f"{', '.join(SAFE_TO_CHANGE)} (docs/run-directory.md)"
        )
    return changed


def checkpoint_config(run_dir: Path, checkpoint: Path) -> dict:
    """The config a checkpoint was written under (its config.yaml, which its manifest covers); a checkpoint of a
    veriloop before that has none, and the run's config.yaml stands in, with a warning."""
    saved = checkpoint / CONFIG
    if saved.is_file():
        return _parse_config(saved.read_bytes(), saved)
    log.warning(
        f"checkpoint {checkpoint} holds no {CONFIG} (written by an older veriloop): the resumed config "
        f"is compared with {run_dir / CONFIG} instead"
    )
    return read_run_config(run_dir)


def _parse_config(data: bytes, path: Path) -> dict:
    try:
        config = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{path} is not a readable config ({type(e).__name__}: {e})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path} does not hold a mapping of options")
    return config


def read_run_config(run_dir: Path) -> dict:
    """The run's config.yaml (the config in force), checked against the run's manifest.json.

    A damaged one (cut, edited) is an InputError saying what is wrong and what to do: copy back the latest
    checkpoint's config.yaml, which is then accepted as it is (it is a copy the checkpoint's manifest covers)."""
    run_dir = Path(run_dir)
    path = run_dir / CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"nothing to resume in {str(run_dir)!r}: no {CONFIG}")
    status, why = check_file(run_dir, CONFIG)
    data = path.read_bytes()
    if status == "bad":
        copy = _latest_config_copy(run_dir)
        if copy is None or copy.read_bytes() != data:
            if copy is None:
                remedy = (
                    "the run has no checkpoint holding a copy, so nothing would be lost by starting it again: "
                    "start a new run with another --run_dir"
                )
            else:
                remedy = (
                    f"put back the config of its latest checkpoint (`cp {copy} {path}`) and resume again; "
                    f"options changed by resumes since that checkpoint are listed in {run_dir / HISTORY}: "
                    "give them again as flags"
                )
            raise InputError(f"{path} is damaged: {why}; {remedy}")
        write_checked(run_dir, CONFIG, data)  # the checkpoint's copy, put back: what the manifest lists from now on
    elif status == "unlisted":
        log.warning(f"{path} is read unchecked: {why} (a run directory of a veriloop before run manifests)")
    return _parse_config(data, path)


def _latest_config_copy(run_dir: Path) -> Path | None:
    for checkpoint in reversed(list_checkpoints(run_dir)):
        if (checkpoint / CONFIG).is_file() and check_checkpoint(checkpoint)[0] == "ok":
            return checkpoint / CONFIG
    return None


def _put_back_metrics(run_dir: Path, checkpoint: Path, done: int) -> None:
    """metrics.jsonl must begin with the checkpoint's copy (the rows of its steps; later rows are dropped on
    resume); where it does not (cut, edited, lost), the copy is put back, with a warning naming it."""
    saved, ours = checkpoint / METRICS, run_dir / METRICS
    if not saved.is_file():  # an older veriloop's checkpoint
        return
    want = saved.read_bytes()
    have = ours.read_bytes() if ours.is_file() else None
    if have is not None and have.startswith(want):
        return
    what = "is missing" if have is None else f"does not begin with the rows of steps 1-{done} that {checkpoint} saved"
    log.warning(f"{ours} {what} (cut or changed); putting back the checkpoint's copy")
    atomic_write_bytes(ours, want)


def _record(run_dir: Path, event: dict) -> None:
    """One line of history.jsonl: when the run started, was resumed or started over, and what changed."""
    path = run_dir / HISTORY
    old = path.read_bytes() if path.is_file() else b""
    if old and not old.endswith(b"\n"):  # a line cut by a kill: kept, and ended
        old += b"\n"
    row = {"time": datetime.now(UTC).isoformat(timespec="seconds"), **event}
    atomic_write_bytes(path, old + (json.dumps(row) + "\n").encode("utf-8"))


def _in_force(run_dir: Path, config: dict, event: dict) -> None:
    """Record a resume (or start-over) in history.jsonl, then make config.yaml say the config now in force."""
    _record(run_dir, event)
    data = config_bytes(config)
    path = run_dir / CONFIG
    if not path.is_file() or path.read_bytes() != data or check_file(run_dir, CONFIG)[0] != "ok":
        write_checked(run_dir, CONFIG, data)
