"""`veriloop doctor`: a row per part, required parts failing the exit status with their fix named."""

import shutil

from veriloop import cli, doctor
from veriloop.training.run import export


def _rows(**kw):
    return {r.name: r for r in doctor.checks(**kw)}


def test_this_machine_has_what_veriloop_needs_and_says_so(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    for name in (
        "python",
        "torch",
        "memory",
        "transformers",
        "safetensors",
        "math-verify",
        "built-in base",
        "free disk",
        "ray",
        "vllm",
        "peft",
        "code sandbox",
    ):
        assert f"\n{name} " in out, name
    rows = _rows()
    assert all(rows[n].status == "ok" for n in ("python", "torch", "transformers", "built-in base", "free disk"))
    assert "checksums match" in rows["built-in base"].detail
    assert "everything veriloop's commands need is here" in out


def test_a_missing_required_part_fails_with_its_fix(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(doctor, "MIN_FREE_DISK_GIB", 1e9)
    assert doctor.run_doctor(tmp_path) == doctor.DOCTOR_FAILED == 3
    out = capsys.readouterr().out
    assert "free disk      FAIL" in out and "fix: at least 1000000000 GiB" in out
    assert out.rstrip().endswith("missing what commands need: free disk")


def test_an_altered_base_is_named_with_the_command_that_restores_it(monkeypatch, tmp_path):
    base = tmp_path / "base"
    shutil.copytree(export.BUILTIN_BASE, base)
    (base / "config.json").write_text((base / "config.json").read_text() + " ")
    monkeypatch.setattr(export, "BUILTIN_BASE", base)
    row = _rows()["built-in base"]
    assert row.status == "FAIL" and "differs from base.sha256" in row.detail and "git checkout --" in row.fix
    shutil.rmtree(base)
    assert _rows()["built-in base"].status == "FAIL"  # gone altogether


def test_a_missing_optional_part_is_reported_with_its_extra_and_fails_nothing(monkeypatch, capsys):
    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda *dists: "" if "ray" in dists else real(*dists))
    assert doctor.run_doctor() == 0
    row = _rows()["ray"]
    assert row.status == "missing" and "rollout.engine ray" in row.detail and "[distributed]" in row.fix
