"""What every benchmark shares: seeds from the command line, mean +- spread over them, and the stamped JSON result.

A number that moves with the seed is reported as ``mean +- sd`` (sample standard deviation
over the seeds, n - 1 in the denominator); the JSON output keeps every seed's value.

Every benchmark script writes one JSON result (``save``), stamped (``stamp``) with the commit, the command, the
machine and the date, and has a ``--quick`` mode (``result_args``): the smallest run that goes end to end through the
script's real code path and writes its result, which CI runs (``tests/test_benchmarks_quick_on_cpu.py``) so that no
script rots; its numbers mean nothing.  A quick run writes into a scratch directory unless ``--json`` names a file,
and never into ``docs/results`` (the committed results that ``make results-pages`` renders).

A module with committed results (``docs/results/<module>/*.json``) also says how they read, for
``scripts/render_results.py``: ``PAGE`` (the page's name, ``docs/results/<PAGE>.md``) and ``render(results) ->
str``, and optionally ``blocks`` (generated blocks of other Markdown files) and ``figures`` (files beside the
pages); see that script's docstring.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import posixpath
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "docs" / "results"  # what `make results-pages` renders: a quick run never writes here
STAMP_FIELDS = ("commit", "command", "machine", "cores", "cpu", "torch", "gpu", "date", "quick")


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise SystemExit(f"--seeds must name distinct seeds, got {text!r}")
    return seeds


def mean_sd(values: list[float]) -> tuple[float, float | None]:
    """(mean, sample standard deviation; None for one value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def fmt(values: list[float | None], digits: int = 3) -> str:
    """``0.877 ± 0.012`` over seeds (``0.877`` for one seed, blank when nothing was measured)."""
    values = [v for v in values if v is not None]
    if not values:
        return ""
    mean, sd = mean_sd(values)
    return f"{mean:.{digits}f}" if sd is None else f"{mean:.{digits}f} ± {sd:.{digits}f}"


def silence_hub_progress() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


# ---------------------------------------------------------------------------------------------- the stamp


def _git(root: Path, *args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _torch_build() -> str:
    """The installed torch's version (its build: ``+cpu``, ``+cu128``, ...), and CUDA's when torch is loaded."""
    torch = sys.modules.get("torch")
    if torch is not None:
        cuda = getattr(torch.version, "cuda", None)
        return torch.__version__ + (f" (CUDA {cuda})" if cuda else "")
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _gpus() -> str:
    """The GPUs' names, or ``none``: asked of torch when the benchmark loaded it, else of nvidia-smi if there."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if not torch.cuda.is_available():
                return "none"
            return ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        except Exception:  # noqa: BLE001 - a broken driver is still "no usable GPU"
            return "none (torch.cuda failed)"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            names = subprocess.run(
                [smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
            ).stdout.split("\n")
            return ", ".join(n.strip() for n in names if n.strip()) or "none"
        except (OSError, subprocess.SubprocessError):
            pass
    return "none"


def stamp(argv: list[str], root: Path = ROOT, paths: tuple[str, ...] = ("src", "benchmarks", "configs")) -> dict:
    """Where a number came from: the commit of the checkout ``root`` (``+dirty`` when its ``paths`` differ from it),
    the command (``argv``, as ``sys.argv``), the machine (cores, CPU model, torch build, GPUs or none), the date
    (UTC), and whether it was a ``--quick`` run (a smoke test, not a measurement)."""
    commit = _git(root, "rev-parse", "--short=12", "HEAD") or "unknown (no git)"
    dirty = _git(root, "status", "--porcelain", "--", *paths)
    cores, cpu, torch, gpu = os.cpu_count(), _cpu_model(), _torch_build(), _gpus()
    machine = (
        f"{platform.system()} {platform.machine()}, {cores} CPUs ({cpu}), Python {platform.python_version()}, "
        f"torch {torch}, GPU: {gpu}"
    )
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    script = Path(argv[0]).resolve() if argv and argv[0].endswith(".py") else None
    if script is not None and script.is_relative_to(ROOT):  # as run from the repository's root
        argv = [script.relative_to(ROOT).as_posix(), *argv[1:]]
    return {
        "commit": commit + ("+dirty" if dirty else ""),
        "command": shlex.join(["python", *argv]),
        "machine": machine,
        "cores": cores,
        "cpu": cpu,
        "torch": torch,
        "gpu": gpu,
        "date": date,
        "quick": "--quick" in argv,
    }


# ---------------------------------------------------------------------------------------------- the result


def result_args(parser: argparse.ArgumentParser, name: str) -> None:
    """``--quick`` and ``--json`` for the benchmark whose result is ``name.json``."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the smallest run through this script's real code path, as CI runs it (a smoke test: "
        "its numbers mean nothing); its result goes to a scratch directory unless --json",
    )
    parser.add_argument(
        "--json",
        default="",
        help=f"the stamped JSON result; default $OUT/{name}.json when OUT is set, else "
        f"runs/bench/{name}.json (with --quick: {scratch() / (name + '.json')})",
    )


def scratch() -> Path:
    """Where a quick run's files go by default."""
    return Path(tempfile.gettempdir()) / "veriloop-bench-quick"


def result_path(args: argparse.Namespace, name: str) -> Path:
    """Where the result goes (``result_args``' ``--json`` and its defaults); a quick run refuses to write among the
    committed results."""
    if args.json:
        out = Path(args.json)
    elif args.quick:
        out = scratch() / f"{name}.json"
    else:
        out = Path(os.environ.get("OUT") or Path("runs") / "bench") / f"{name}.json"
    if args.quick and out.resolve().is_relative_to(COMMITTED.resolve()):
        raise SystemExit(f"--quick writes no result into {COMMITTED} (the committed results): got {out}")
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def save(args: argparse.Namespace, name: str, result: dict, root: Path = ROOT) -> Path:
    """Write ``result`` (with its ``stamp`` first: made here unless it has one) where ``--json`` says."""
    import json

    out = result_path(args, name)
    result = {"stamp": result.get("stamp") or stamp(sys.argv, root)} | {k: v for k, v in result.items() if k != "stamp"}
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    print(f"result: {out}", flush=True)
    return out


# ---------------------------------------------------------------------------------------------- rendering helpers


def stamp_line(result: dict) -> str:
    """A result's stamp as a results page's list item: its command, commit, date and machine."""
    s = result["stamp"]
    return f"- `{s['command']}` at `{s['commit']}`, {s['date']}, {s['machine']}"


def link(target: str, where: str) -> str:
    """A relative link to ``target`` from the Markdown file ``where`` (both relative to the repository's root):
    ``link("docs/results/demo.svg", "README.md") == "docs/results/demo.svg"``, from ``docs/index.md``
    ``results/demo.svg``."""
    return posixpath.relpath(target, posixpath.dirname(where) or ".")


def svg(figure) -> str:
    """A matplotlib ``Figure`` as SVG text that is the same bytes on every run (no date, no creator, ids from a
    fixed salt, glyphs as paths): a figure the results pages show, checked like them.  Make the figure with
    ``matplotlib.figure.Figure()`` (no pyplot: no backend, no global state)."""
    import io

    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "veriloop", "svg.fonttype": "path", "svg.id": None}):
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    return buffer.getvalue()
