"""The audit's two parts: held-out cases only grow and are never edited, every label is a person's, the report
gives both parts, and the verifier cards render from a result file."""

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from veriloop import verifiers
from veriloop.tasks.jsonl import DatasetError
from veriloop.verifiers import from_reward_function
from veriloop.verifiers.audit import BUILTIN_SUITES, AuditCase, builtin_cases, builtin_names, run_audit
from veriloop.verifiers.audit_files import (
    AUDIT_DIR,
    LOCK_NAME,
    PARTS,
    append_lock,
    check_lock,
    part_files,
    read_case_file,
)

ROOT = Path(__file__).resolve().parent.parent
HELDOUT = AUDIT_DIR / "heldout"


# ---------------------------------------------------------------- held-out cases only grow


def test_every_heldout_case_line_is_locked_unchanged_and_in_order():
    assert part_files("heldout"), "no held-out case files"
    assert check_lock() == []


def _case(n: int) -> str:
    return json.dumps(
        {
            "completion": f"#### {n}",
            "reference": str(n),
            "expect": "accept",
            "family": "f",
            "verifiers": ["gsm8k"],
            "labelled_by": "reading",
        }
    )


def test_the_lock_refuses_an_edited_case_and_records_only_appended_ones(tmp_path):
    cases = tmp_path / "a.jsonl"
    cases.write_text(_case(1) + "\n" + _case(2) + "\n")
    assert check_lock(tmp_path) == [
        "a.jsonl: lines 1-2 are not locked yet: run python -m veriloop.verifiers.audit_files --lock"
    ]
    assert append_lock(tmp_path) == 2 and check_lock(tmp_path) == []
    lock_before = (tmp_path / LOCK_NAME).read_text()
    cases.write_text(cases.read_text() + _case(3) + "\n")  # appended: allowed, once locked
    assert append_lock(tmp_path) == 1 and (tmp_path / LOCK_NAME).read_text().startswith(lock_before)
    cases.write_text(_case(1) + "\n" + _case(20) + "\n" + _case(3) + "\n")  # line 2 edited
    assert check_lock(tmp_path) == [
        "a.jsonl: case line 2 is not the locked one (edited, removed or moved); "
        "held-out cases are never edited: append a new case instead"
    ]
    with pytest.raises(DatasetError, match="depart from their lock:\na.jsonl: case line 2"):
        append_lock(tmp_path)
    cases.write_text(_case(2) + "\n" + _case(1) + "\n" + _case(3) + "\n")  # reordered
    assert "case line 1 is not the locked one" in check_lock(tmp_path)[0]
    cases.unlink()
    assert check_lock(tmp_path) == ["a.jsonl: locked, but the file is gone"]


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60)


def test_every_committed_version_of_a_heldout_file_is_a_prefix_of_the_current_one():
    if shutil.which("git") is None:
        pytest.skip(
            "git is not installed: the committed history of the held-out files cannot be checked "
            "(the LOCK test still checks every case line)"
        )
    if _git("rev-parse", "--is-inside-work-tree").returncode != 0:
        pytest.skip(
            f"{ROOT} is not a git checkout: the committed history of the held-out files cannot be checked "
            "(the LOCK test still checks every case line)"
        )
    rel = HELDOUT.relative_to(ROOT).as_posix()
    ever = {p for p in _git("log", "--format=", "--name-only", "--", rel).stdout.decode().split("\n") if p}
    gone = sorted(p for p in ever if not (ROOT / p).exists())
    assert not gone, f"held-out files were removed or renamed: {gone}"
    checked = 0
    for path in sorted(HELDOUT.glob("*.jsonl")) + [HELDOUT / LOCK_NAME]:
        now = path.read_bytes()
        log = _git("log", "--follow", "--format=%H", "--name-only", "--", path.relative_to(ROOT).as_posix())
        lines = [x for x in log.stdout.decode().split("\n") if x]
        for commit, old_path in zip(lines[::2], lines[1::2]):
            old = _git("show", f"{commit}:{old_path}").stdout
            assert now.startswith(old), (
                f"{path.name}: the version of commit {commit[:12]} is not a prefix of the "
                "current file: held-out cases were edited, removed or reordered"
            )
            checked += 1
    assert checked >= len(ever) > 0


# ---------------------------------------------------------------- every label is a person's


def _all_rows() -> list[dict]:
    return [r for part in PARTS for path in part_files(part) for r in read_case_file(path)]


def test_every_case_file_row_is_labelled_by_a_reading_and_names_registered_verifiers():
    rows = _all_rows()
    assert len(rows) > 800
    not_read = [r["where"] for r in rows if r.get("labelled_by") != "reading"]
    assert not not_read, f"cases whose label is not a person's reading (labelled_by must be 'reading'): {not_read[:10]}"
    unknown = {n for r in rows for n in r["verifiers"]} - set(verifiers.names())
    assert not unknown, f"case files name verifiers that are not registered: {sorted(unknown)}"


def test_no_math_audit_label_is_taken_from_the_verifier(monkeypatch):
    """Every math-verify case keeps math-verify's test expectation, unless a person's reading replaces it; the
    documented differences (our verifier's verdicts) decide no label: changing them changes no case."""
    from veriloop.verifiers import mathverify_suite as mv

    _, cases = mv.load_cases()
    expected = {c.id: ("accept" if c.expected else "reject") for c in cases}
    generated = mv.audit_cases()
    from_tests = [c for c in generated if c.labelled_by == "math-verify tests"]
    assert len(from_tests) > 200 and all(c.expect == expected[c.note] for c in from_tests)
    assert {c.labelled_by for c in generated} == {"math-verify tests", "reading"}
    read = mv.read_ids()
    assert read <= set(expected) and not read & {c.note for c in from_tests}
    monkeypatch.setattr(mv, "load_differences", lambda *a, **k: {c.id: {"kind": "answer-reading"} for c in cases})
    assert mv.audit_cases() == generated


def test_every_verifier_with_a_suite_has_a_heldout_part_and_the_corpus_has_twins():
    for name in BUILTIN_SUITES:
        assert builtin_cases(name, "heldout"), f"{name} has no held-out cases"
        assert {c.part for c in builtin_cases(name, "all")} == {"development", "heldout"}
    real = read_case_file(HELDOUT / "real-outputs.jsonl")
    for name in ("gsm8k", "math"):
        families = {r["family"] for r in real if name in r["verifiers"]}
        assert len(families) >= 20
        for family in families:
            expects = {r["expect"] for r in real if name in r["verifiers"] and r["family"] == family}
            assert expects == {"accept", "reject"}, f"{family}: no wrong-value twin (or no right one) for {name}"


def test_a_malformed_case_file_is_refused_naming_the_line_and_field(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text(_case(1) + "\n" + json.dumps({**json.loads(_case(2)), "verifiers": "gsm8k"}) + "\n")
    with pytest.raises(DatasetError, match=r"x\.jsonl:2: field 'verifiers' must be a non-empty list"):
        read_case_file(bad)
    bad.write_text(json.dumps({**json.loads(_case(2)), "verifier": ["gsm8k"]}) + "\n")
    with pytest.raises(DatasetError, match=r"x\.jsonl:1: unknown field\(s\) \['verifier'\]"):
        read_case_file(bad)
    with pytest.raises(ValueError, match="part must be one of"):
        builtin_cases("gsm8k", "test")
    with pytest.raises(DatasetError, match=r"audit case directory .*heldout is missing \(package data"):
        part_files("heldout", tmp_path)  # no part silently empty: its numbers would look perfect


# ---------------------------------------------------------------- the report: both parts


def test_report_counts_false_accepts_and_rejects_per_part_and_file():
    # accept cases score 1, 0, 1 (one false reject of 3); reject cases score 0, 1 (one false accept of 2)
    scores = {"a1": 1.0, "a2": 0.0, "a3": 1.0, "r1": 0.0, "r2": 1.0, "d1": 1.0}
    cases = [
        AuditCase(
            c,
            "-",
            "accept" if c[0] in "ad" else "reject",
            "fam",
            part="heldout" if c[0] != "d" else "development",
            source="real-outputs" if c in ("a1", "a2") else "other",
        )
        for c in scores
    ]
    report = run_audit(
        "fake",
        from_reward_function(lambda prompts, completions, reference, **_: [scores[c] for c in completions]),
        cases,
    )
    t = report.totals()
    assert t["heldout"] == {
        "cases": 5,
        "accept_cases": 3,
        "reject_cases": 2,
        "false_accepts": 1,
        "false_rejects": 1,
        "false_accept_rate": 0.5,
        "false_reject_rate": 1 / 3,
    }
    assert t["development"]["false_rejects"] == 0 and t["development"]["false_accept_rate"] is None
    files = report.source_totals()["heldout"]
    assert files["real-outputs"]["false_rejects"] == 1 and files["real-outputs"]["accept_cases"] == 2
    assert files["other"]["false_accepts"] == 1 and files["other"]["false_rejects"] == 0
    table = report.table()
    assert "heldout: 5 cases; false accepts 1 of 2 (0.500); false rejects 1 of 3 (0.333)" in table
    assert "development: 1 cases; false accepts 0 of 0; false rejects 0 of 1 (0.000)" in table
    assert "false accepts: 1; false rejects: 1" in table


def test_audit_command_reports_each_part_and_exits_1_on_any_false_verdict(tmp_path, capsys):
    from veriloop import cli

    out = tmp_path / "a.json"
    code = cli.main(["audit", "arithmetic-outcome", "--json", str(out)])
    result = json.loads(out.read_text())
    assert set(result["parts"]) == {"development", "heldout"}
    assert code == (1 if result["false_accepts"] or result["false_rejects"] else 0)
    text = capsys.readouterr().out
    assert re.search(r"^development: 30 cases;", text, re.M) and re.search(r"^heldout: \d+ cases;", text, re.M)
    code = cli.main(["audit", "arithmetic-outcome", "--part", "development", "--json", str(out)])
    result = json.loads(out.read_text())
    assert set(result["parts"]) == {"development"} and "heldout:" not in capsys.readouterr().out
    assert code == (1 if result["false_accepts"] or result["false_rejects"] else 0)
    cases = tmp_path / "mine.jsonl"
    cases.write_text(
        json.dumps({"completion": "answer=20", "reference": "(2+3)*4", "expect": "accept", "family": "mine"}) + "\n"
    )
    assert cli.main(["audit", "arithmetic-outcome", "--no-builtin", "--cases", str(cases), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["parts"]["user"]["cases"] == 1
    assert "user: 1 cases" in capsys.readouterr().out
    assert cli.main(["audit", "length"]) == 2
    assert "built-in cases exist for " + ", ".join(builtin_names()) in capsys.readouterr().err


# ---------------------------------------------------------------- the cards


def _renderer():
    if str(ROOT / "benchmarks") not in sys.path:  # the benchmark scripts import their `common` module
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("verifier_cards", ROOT / "benchmarks" / "verifier_cards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _part(cases, accept, fr, fa):
    return {
        "cases": cases,
        "accept_cases": accept,
        "reject_cases": cases - accept,
        "false_accepts": fa,
        "false_rejects": fr,
    }


def test_the_cards_render_every_number_from_the_result_file():
    result = {
        "stamp": {
            "commit": "abc123",
            "command": "python benchmarks/verifier_cards.py",
            "machine": "M",
            "date": "2026-01-01 00:00 UTC",
        },
        "note": "Not final.",
        "verifiers": {
            "toy": {
                "version": "toy@3",
                "command": "veriloop audit toy --part all",
                "parts": {"development": _part(10, 4, 0, 0), "heldout": _part(8, 5, 2, 1)},
                "files": {"heldout": {"real-outputs": _part(6, 4, 2, 0)}},
                "rows": [
                    {"part": "development", "category": "a|b", "expect": "accept", "cases": 4, "false": 0},
                    {"part": "heldout", "category": "label line A:", "expect": "accept", "cases": 5, "false": 2},
                ],
            }
        },
    }
    page = _renderer().render([result])
    assert "`python benchmarks/verifier_cards.py` at commit `abc123` on M, 2026-01-01 00:00 UTC" in page
    assert "**Note:** Not final." in page
    # summary: development 0 of 4 rejects, 0 of 6 accepts; heldout 2 of 5 (40.0%), 1 of 3 (33.3%)
    assert "| `toy` | `toy@3` | 0 of 4 (0.0%) | 0 of 6 (0.0%) | 2 of 5 (40.0%) | 1 of 3 (33.3%) |" in page
    assert "| heldout | 8 | 2 of 5 (40.0%) | 1 of 3 (33.3%) |" in page
    assert "Real model outputs (`heldout/real-outputs.jsonl`): false rejects 2 of 4 (50.0%)" in page
    assert "Families: development 1; heldout 1." in page and "Reproduce: `veriloop audit toy --part all`" in page
    assert "| development | a\\|b | accept | 4 | 0 |" in page  # a | in a family name does not split the cell
