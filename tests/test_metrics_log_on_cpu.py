"""metrics.jsonl: a step appends one line (a step's cost must not grow with the run's length), and the file always
reads back as exactly the rows the log holds, also after a cut last line and a resume's truncation."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from veriloop.training.run.metrics import MetricsLog


def file_rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_step_appends_its_line_and_never_rewrites_the_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    log.append({"step": 1, "reward_mean": 0.5})
    inode, first = path.stat().st_ino, path.read_bytes()
    for step in range(2, 6):
        log.append({"step": step, "reward_mean": step / 10})
    assert path.stat().st_ino == inode  # an atomic rewrite would have replaced the file
    assert path.read_bytes().startswith(first)
    assert [r["step"] for r in file_rows(path)] == [1, 2, 3, 4, 5]
    assert MetricsLog(path).rows == log.rows


def test_after_a_cut_last_line_the_next_append_rewrites_the_file_whole(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "cu')
    log = MetricsLog(path)
    assert [r["step"] for r in log.rows] == [1]
    log.append({"step": 2})
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'  # no cut bytes glued to the new row


def test_a_whole_last_row_without_its_newline_is_kept_and_the_next_row_starts_a_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}')
    log = MetricsLog(path)
    log.append({"step": 3})
    assert [r["step"] for r in file_rows(path)] == [1, 2, 3]


def test_truncate_then_append(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for step in range(1, 6):
        log.append({"step": step})
    log.truncate(2)
    log.append({"step": 3, "again": True})
    assert file_rows(path) == [{"step": 1}, {"step": 2}, {"step": 3, "again": True}]


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.floats(allow_nan=False, allow_infinity=False)),
        st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=30)),
        st.tuples(st.just("reopen"), st.just(0)),
        st.tuples(st.just("cut"), st.integers(min_value=1, max_value=8)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops=operations)
def test_the_file_always_reads_back_as_the_logs_rows(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("metrics") / "metrics.jsonl"
    log = MetricsLog(path)
    for op, arg in ops:
        if op == "append":
            log.append({"step": (log.rows[-1]["step"] if log.rows else 0) + 1, "value": arg})
        elif op == "truncate":
            log.truncate(arg)
        elif op == "reopen":
            log = MetricsLog(path)
        elif path.exists() and path.stat().st_size > arg:  # a kill cut the file's last bytes
            path.write_bytes(path.read_bytes()[:-arg])
            log = MetricsLog(path)
        if op in ("append", "truncate"):  # written: the file holds exactly the rows, each line whole
            assert file_rows(path) == log.rows
        assert (MetricsLog(path).rows if path.exists() else []) == log.rows  # what a reader (a resume) sees
    log.append({"step": (log.rows[-1]["step"] if log.rows else 0) + 1})
    assert file_rows(path) == log.rows
    assert MetricsLog(path).rows == log.rows
