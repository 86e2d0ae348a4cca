"""The audit of every verifier with built-in cases, on both parts, as one stamped result; renders the cards.

    python benchmarks/verifier_cards.py [--json verifier_cards.json] [--docs docs/verifier-cards.md]
                                        [--verifiers gsm8k,math] [--note TEXT]

Runs ``veriloop audit NAME --part all`` in process for each verifier (``audit.builtin_names``), writes one JSON
result (``--json``; default ``$OUT/verifier_cards.json`` when OUT is set, else ``./verifier_cards.json``) stamped
with the commit, the command, the machine and the date, and with ``--docs`` renders it into the cards page
(``scripts/render_verifier_cards.py``).  The numbers depend on the answer reader at that commit; ``--note`` puts a
sentence on the page (e.g. that a rewrite is pending).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

from veriloop.verifiers import get
from veriloop.verifiers.audit import builtin_cases, builtin_names, run_audit

ROOT = Path(__file__).resolve().parent.parent


def stamp(argv: list[str], root: Path = ROOT) -> dict:
    """Where a number came from: the commit of the checkout ``root`` (``+dirty`` when the verifiers' code or cases
    differ from it), the command, the machine, the date."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30,
                                  check=True).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "--short=12", "HEAD") or "unknown (no git)"
    dirty = git("status", "--porcelain", "--", "src/veriloop/verifiers")
    machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return {"commit": commit + ("+dirty" if dirty else ""), "command": shlex.join(["python", *argv]),
            "machine": machine, "date": date}  # fmt: skip


def audit_one(name: str) -> dict:
    verifier = get(name)
    try:
        report = run_audit(name, verifier, builtin_cases(name, "all"))
    finally:
        getattr(verifier, "close", lambda: None)()
    out = {**report.to_json(), "command": f"veriloop audit {name} --part all"}
    if hasattr(verifier, "limits"):  # code runs completions in the sandbox: its layers decide some verdicts
        from veriloop.verifiers.sandbox import isolation

        out["sandbox"] = isolation().layers
    return out


def _renderer():
    path = ROOT / "scripts" / "render_verifier_cards.py"
    spec = importlib.util.spec_from_file_location("render_verifier_cards", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", default="", help="default: $OUT/verifier_cards.json, else ./verifier_cards.json")
    p.add_argument("--docs", default="", help="also render the cards into this Markdown file")
    p.add_argument("--verifiers", default="", help="comma-separated names; default: every one with built-in cases")
    p.add_argument("--note", default="", help="a sentence printed on the cards page")
    args = p.parse_args()
    names = [n for n in args.verifiers.split(",") if n] or builtin_names()
    unknown = sorted(set(names) - set(builtin_names()))
    if unknown:
        raise SystemExit(f"--verifiers: no built-in audit cases for {unknown}; known: {builtin_names()}")
    result = {"stamp": stamp(sys.argv), "note": args.note, "verifiers": {}}
    for name in names:
        result["verifiers"][name] = audit_one(name)
        parts = result["verifiers"][name]["parts"]
        print(name, {part: (t["false_rejects"], t["false_accepts"], t["cases"]) for part, t in parts.items()},
              flush=True)  # fmt: skip
    out = Path(args.json) if args.json else Path(os.environ.get("OUT", ".")) / "verifier_cards.json"
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    if args.docs:
        Path(args.docs).write_text(_renderer().render(result), encoding="utf-8")
        print(f"wrote {args.docs}")


if __name__ == "__main__":
    main()
