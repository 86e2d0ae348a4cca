"""Per-step file names are written and read back by one pair of functions; JSONL errors name the line."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from veriloop.errors import InputError
from veriloop.io import read_jsonl, step_name, step_of, steps_in

AFFIXES = [("step-", ""), ("step-", ".jsonl.gz"), ("labels-step-", ".jsonl")]


def test_the_names_on_disk():
    assert step_name(1) == "step-000001"
    assert step_name(12, suffix=".jsonl.gz") == "step-000012.jsonl.gz"
    assert step_name(3, "labels-step-", ".jsonl") == "labels-step-000003.jsonl"
    assert step_name(1234567) == "step-1234567"  # wider than six digits: still one name per step
    assert step_of("step-000001") == 1 and step_of("step-000012.jsonl.gz", suffix=".jsonl.gz") == 12
    assert step_of("labels-step-000003.jsonl", "labels-step-", ".jsonl") == 3


@pytest.mark.parametrize(
    "name, prefix, suffix",
    [
        (".step-000001.tmp", "step-", ""),  # a checkpoint being written
        (".step-000001.jsonl.gz.abc.tmp", "step-", ".jsonl.gz"),  # an atomic write in flight
        ("step-000001.jsonl.gz", "step-", ""),
        ("step-000001", "step-", ".jsonl.gz"),
        ("labels-step-000001.jsonl", "step-", ".jsonl"),
        ("step-", "step-", ""),
        ("step-12a", "step-", ""),
        ("step--00001", "step-", ""),
        ("step-٣", "step-", ""),  # a digit, but not an ASCII one
    ],
)
def test_other_names_carry_no_step(name, prefix, suffix):
    assert step_of(name, prefix, suffix) is None


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(AFFIXES))
def test_a_name_gives_back_its_step(step, affixes):
    prefix, suffix = affixes
    name = step_name(step, prefix, suffix)
    assert step_of(name, prefix, suffix) == step
    assert all(step_of(name, p, s) is None for p, s in AFFIXES if (p, s) != affixes)


@given(st.lists(st.integers(min_value=0, max_value=999_999), unique=True, max_size=8))
def test_names_sort_by_step(steps):
    assert sorted(step_name(s) for s in steps) == [step_name(s) for s in sorted(steps)]


def test_steps_in_a_directory(tmp_path):
    assert steps_in(tmp_path / "missing") == []
    for s in (10, 2, 1):
        (tmp_path / step_name(s, suffix=".jsonl.gz")).write_text("")
    (tmp_path / ".step-000003.jsonl.gz.x.tmp").write_text("")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / step_name(4)).mkdir()
    files = steps_in(tmp_path, suffix=".jsonl.gz")
    assert files == [(s, tmp_path / step_name(s, suffix=".jsonl.gz")) for s in (1, 2, 10)]
    assert steps_in(tmp_path) == [(4, tmp_path / "step-000004")]


def test_a_line_that_is_not_json_is_named(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2\n')
    with pytest.raises(InputError, match=r"rows.jsonl:3: not valid JSON"):
        read_jsonl(path)
    path.write_bytes(b'{"a": "\xff"}\n')
    with pytest.raises(InputError, match="not UTF-8"):
        read_jsonl(path)
