"""The audit of every verifier with built-in cases, on both parts, as one stamped result; renders the cards.

    python benchmarks/verifier_cards.py [--json FILE] [--verifiers gsm8k,math] [--note TEXT] [--quick]

Runs ``veriloop audit NAME --part all`` in process for each verifier (``audit.builtin_names``) and writes one JSON
result (``--json``; default ``$OUT/verifier_cards.json`` when OUT is set, else ``runs/bench/verifier_cards.json``)
stamped with the commit, the command, the machine and the date.  The cards page (``docs/results/verifier-cards.md``)
is rendered by ``make results-pages`` from the latest result in ``docs/results/verifier_cards/`` (``render``): a
card per verifier with its version, its families, case counts, false-accept and false-reject rates on each part
(development: the answer reader is tuned on it; heldout: written from reading, never edited), the real-output
corpus's false-reject rate where the verifier has one, and the command that made the numbers.  The numbers depend on
the answer reader at that commit; ``--note`` puts a sentence on the page (e.g. that a rewrite is pending).
``--quick``: one verifier (``arithmetic-outcome``).
"""

from __future__ import annotations

import argparse
import sys

from common import result_args, save, stamp

from veriloop.verifiers import get
from veriloop.verifiers.audit import builtin_cases, builtin_names, run_audit


def audit_one(name: str) -> dict:
    verifier = get(name)
    try:
        report = run_audit(name, verifier, builtin_cases(name, "all"))
    finally:
        getattr(verifier, "close", lambda: None)()
    out = {**report.to_json(), "command": f"veriloop audit {name} --part all"}
    if hasattr(verifier, "limits"):  # code runs completions in the sandbox: its layers decide some verdicts
        from veriloop.sandbox import isolation

        out["sandbox"] = isolation().layers
    return out


REAL_OUTPUTS = "real-outputs"  # heldout/real-outputs.jsonl: final-answer forms real models write


def _pct(bad: int, n: int) -> str:
    return f"{bad} of {n} ({100 * bad / n:.1f}%)" if n else "no cases"


def _part_table(parts: dict[str, dict]) -> list[str]:
    lines = [
        "| part | cases | false rejects (of the cases to accept) | false accepts (of the cases to reject) |",
        "|---|---:|---:|---:|",
    ]
    for part in ("development", "heldout", "user"):
        if part in parts:
            t = parts[part]
            lines.append(
                f"| {part} | {t['cases']} | {_pct(t['false_rejects'], t['accept_cases'])} | "
                f"{_pct(t['false_accepts'], t['reject_cases'])} |"
            )
    return lines


def _family_table(rows: list[dict]) -> list[str]:
    lines = ["| part | family | expect | cases | wrong |", "|---|---|---|---:|---:|"]
    for r in rows:
        family = r["category"].replace("|", "\\|")
        lines.append(f"| {r['part']} | {family} | {r['expect']} | {r['cases']} | {r['false']} |")
    return lines


def render_card(name: str, audit: dict) -> list[str]:
    parts, files = audit["parts"], audit.get("files", {})
    families = {p: sorted({r["category"] for r in audit["rows"] if r["part"] == p}) for p in parts}
    lines = [
        f"## `{name}`",
        "",
        f"Version `{audit['version']}`. Families: " + "; ".join(f"{p} {len(fs)}" for p, fs in families.items()) + ".",
        "",
    ]
    lines += _part_table(parts) + [""]
    real = files.get("heldout", {}).get(REAL_OUTPUTS)
    if real:
        lines += [
            f"Real model outputs (`heldout/{REAL_OUTPUTS}.jsonl`): false rejects "
            f"{_pct(real['false_rejects'], real['accept_cases'])}; false accepts on their wrong-value twins "
            f"{_pct(real['false_accepts'], real['reject_cases'])}.",
            "",
        ]
    if audit.get("sandbox"):
        lines += [f"Sandbox layers: `{audit['sandbox']}`.", ""]
    lines += [f"Reproduce: `{audit['command']}`", "", '<details markdown="1"><summary>per family</summary>', ""]
    return lines + _family_table(audit["rows"]) + ["", "</details>", ""]


PAGE = "verifier-cards"


def render(results: list[dict]) -> str:
    """The cards page (``docs/results/verifier-cards.md``) of the latest of the results (the last in file-name
    order; earlier ones stay in ``docs/results/verifier_cards/`` and in the index)."""
    result = results[-1]
    s = result["stamp"]
    made = f"Made by `{s['command']}` at commit `{s['commit']}` on {s['machine']}, {s['date']}."
    lines = [
        "# Verifier cards",
        "",
        "What each verifier gets wrong on its audit cases, on both parts: **development** (the answer reader "
        "was tuned on these) and **heldout** (written from reading and never edited; a file whose failures were "
        "studied no longer measures unseen text: see the held-out reads in "
        "[auditing](../auditing.md)). A false reject is a right answer scored below 1; a false accept is a "
        "case to reject scored above 0.",
        "",
        made,
    ]
    if result.get("note"):
        lines += ["", f"**Note:** {result['note']}"]
    lines += [
        "",
        "| verifier | version | development: false rejects | development: false accepts | "
        "heldout: false rejects | heldout: false accepts |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, audit in result["verifiers"].items():
        cells = []
        for part in ("development", "heldout"):
            t = audit["parts"].get(part)
            cells += (
                [_pct(t["false_rejects"], t["accept_cases"]), _pct(t["false_accepts"], t["reject_cases"])]
                if t
                else ["", ""]
            )
        lines.append(f"| `{name}` | `{audit['version']}` | " + " | ".join(cells) + " |")
    lines.append("")
    for name, audit in result["verifiers"].items():
        lines += render_card(name, audit)
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--verifiers", default="", help="comma-separated names; default: every one with built-in cases")
    p.add_argument("--note", default="", help="a sentence printed on the cards page")
    result_args(p, "verifier_cards")
    args = p.parse_args()
    names = [n for n in args.verifiers.split(",") if n] or (["arithmetic-outcome"] if args.quick else builtin_names())
    unknown = sorted(set(names) - set(builtin_names()))
    if unknown:
        raise SystemExit(f"--verifiers: no built-in audit cases for {unknown}; known: {builtin_names()}")
    # the commit, and +dirty when the verifiers' code or cases differ from it
    result = {"stamp": stamp(sys.argv, paths=("src/veriloop/verifiers",)), "note": args.note, "verifiers": {}}
    for name in names:
        result["verifiers"][name] = audit_one(name)
        parts = result["verifiers"][name]["parts"]
        print(
            name, {part: (t["false_rejects"], t["false_accepts"], t["cases"]) for part, t in parts.items()}, flush=True
        )
    save(args, "verifier_cards", result)


if __name__ == "__main__":
    main()
