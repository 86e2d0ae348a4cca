"""Fuzzing what users and models feed in (issue 17): config files and flags, dataset rows, verifier inputs.

The contract: bad input is an ``InputError`` (``ConfigError``, ``DatasetError``) whose message names the key, file
or line, never another exception from deep inside; a completion, however strange, gets a verdict in bounded time
and never an exception; only a bad *reference* is a ``VerifierError``.  Each defect these tests found is fixed and
kept below as a regression example.
"""

import json
import math
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from veriloop.config import ConfigError, build_config, load_yaml
from veriloop.errors import InputError
from veriloop.training.config import TrainConfig

# the maths verifier's worker pool and the record files are the only things started here; each example is bounded
pytestmark = pytest.mark.timeout(600)

# ---------------------------------------------------------------- config files and flags

KEYS = [
    "steps",
    "seed",
    "optim.lr",
    "optim.weight_decay",
    "sampling.temperature",
    "sampling.top_p",
    "sampling.max_new_tokens",
    "rollout.group_size",
    "rollout.prompts_per_step",
    "kl.beta",
    "run_dir",
    "task.name",
    "algo",
    "checkpoint_every",
    "advantage.estimator",
    "rollout.max_tool_calls",
    "clip.ratio_low",
    "nope",
    "optim.nope",
    "",
    "a..b",
    "steps.x",
]
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "1e3", "0x10", " 7 ", "true", "grpo", "\x00", "é"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=4))
@example({"optim.lr": float("nan")})  # was accepted: a run that trains with lr nan
@example({"kl.beta": "inf"})  # was accepted
@example({"steps": "nan"})  # was a bare ValueError from int(nan)
@example({"steps": "1e400"})  # was an OverflowError from int(inf)
@example({"seed": 2**64})  # was accepted, then torch.manual_seed overflowed mid-run
@example({"run_dir": ""})  # was accepted: the run would write into the current directory
def test_config_overrides_are_built_or_refused_by_name(overrides):
    try:
        cfg = build_config(TrainConfig, {}, overrides)
    except InputError as e:  # ConfigError, or UnknownNameError for a name nothing is registered under
        assert str(e)  # a message, naming the key (checked for the cases below)
        return
    for key, value in overrides.items():  # what was accepted is what was given, finite and in range
        node = cfg
        for part in key.split("."):
            node = getattr(node, part)
        if isinstance(node, float):
            assert math.isfinite(node), (key, value)
    assert 0 <= cfg.seed < 2**63 and cfg.run_dir.strip()


@pytest.mark.parametrize(
    "key, value, named",
    [
        ("optim.lr", float("nan"), "optim.lr"),
        ("sampling.temperature", "inf", "sampling.temperature"),
        ("steps", "nan", "steps"),
        ("steps", "1e400", "steps"),
        ("seed", 2**64, "seed"),
        ("run_dir", " ", "run_dir"),
        ("optim.lr", True, "optim.lr"),
    ],
)
def test_bad_values_name_their_key(key, value, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        build_config(TrainConfig, {}, {key: value})


def test_large_integers_are_exact():
    assert build_config(TrainConfig, {}, {"seed": 2**60 + 1}).seed == 2**60 + 1  # no float round trip
    assert build_config(TrainConfig, {}, {"seed": "1152921504606846977"}).seed == 2**60 + 1
    assert build_config(TrainConfig, {}, {"steps": "1e3"}).steps == 1000


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
@example(b"\xff\xfe steps: 3")  # was a UnicodeDecodeError
@example(b"- 1\n- 2")  # a list, not a mapping
@example(b"steps: [1, 2]")
@example(b"1: 2")  # a key that is not a string
@example(b"optim: 3")
def test_config_files_are_loaded_or_refused_by_name(tmp_path, data):
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    try:
        build_config(TrainConfig, load_yaml(path), {})
    except InputError as e:
        assert "c.yaml" in str(e) or ":" in str(e)


# ---------------------------------------------------------------- dataset rows


ROW_VALUES = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=30),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "prompt": ROW_VALUES,
                    "reference": ROW_VALUES,
                    "tags": ROW_VALUES,
                    "completion": ROW_VALUES,
                    "id": ROW_VALUES,
                },
            ),
            st.binary(max_size=40),
        ),
        max_size=4,
    )
)
@example([b"\xff\xfe\xfa"])  # invalid UTF-8: was a UnicodeDecodeError from the file reader
@example([])  # an empty file
@example([{"prompt": "2+2", "reference": "4", "id": {"a": 1}}])
def test_dataset_rows_are_loaded_or_refused_by_file_and_line(tmp_path, rows):
    from veriloop.tasks.jsonl import load_problems

    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"\n".join(r if isinstance(r, bytes) else json.dumps(r).encode() for r in rows))
    try:
        problems = load_problems(str(path))
    except InputError as e:
        assert "rows.jsonl" in str(e), e
        return
    assert all(isinstance(p.prompt, str) and p.prompt and isinstance(p.reference, str) for p in problems)


# ---------------------------------------------------------------- verifier inputs

TEXT_VERIFIERS = ["arithmetic-outcome", "arithmetic-process", "arithmetic-format", "arithmetic-tool", "gsm8k"]
COMPLETIONS = st.one_of(
    st.text(max_size=300),
    st.text(alphabet="0123456789+-*/=;()answer#. \n", max_size=300),
    st.integers(min_value=1, max_value=300).map(lambda n: "\\frac{" * n + "1" + "}{2}" * n),
    st.integers(min_value=1, max_value=3000).map(lambda n: "(" * n + "1" + ")" * n),
    st.integers(min_value=1, max_value=200).map(lambda n: "answer=" + "9" * n),
)
REFERENCES = {
    "arithmetic-outcome": "(2+3)*4",
    "arithmetic-process": "(2+3)*4",
    "arithmetic-format": "(2+3)*4",
    "arithmetic-tool": "(2+3)*4",
    "gsm8k": "#### 72",
    "math": "\\frac{1}{2}",
}


@pytest.mark.parametrize("name", TEXT_VERIFIERS)
@settings(max_examples=120, deadline=None)
@given(completion=COMPLETIONS)
@example(completion="answer=" + "9" * 5000)  # a 5,000-digit answer
@example(completion="#### " + "1" * 5000)
@example(completion="\ud800")  # a lone surrogate
@example(completion="x" * 200_000)
def test_text_verifiers_give_a_verdict_for_any_completion(name, completion):
    from veriloop.verifiers import get

    start = time.monotonic()
    v = get(name).verify(completion, REFERENCES[name])
    assert 0.0 <= v.score <= 1.0 and math.isfinite(v.score), v
    assert time.monotonic() - start < 5.0


@settings(max_examples=10, deadline=None)
@given(completion=COMPLETIONS)
@example(completion="\\boxed{" + "\\frac{" * 200 + "1" + "}{2}" * 200 + "}")  # deeply nested LaTeX
@example(completion="\\boxed{" + "9" * 5000 + "}")
@example(completion="\\boxed{x^{x^{x^{x^{x^{x^{99}}}}}}}")
@example(completion="\\boxed{10^{10^{10^{10}}}}")  # a pathological expression
def test_the_maths_verifier_gives_a_verdict_in_bounded_time(maths, completion):
    start = time.monotonic()
    v = maths.verify(completion, REFERENCES["math"])  # a pathological one times out (5 s) in its worker
    assert 0.0 <= v.score <= 1.0 and isinstance(v.outcome, str) and v.outcome, v
    assert time.monotonic() - start < 30.0, completion[:80]


@pytest.fixture(scope="module")
def maths():
    from veriloop.verifiers import get

    verifier = get("math")  # one worker pool for the module
    yield verifier
    close = getattr(verifier, "close", None)
    if close:
        close()


@pytest.mark.parametrize(
    "name, reference",
    [
        ("arithmetic-outcome", "(2+"),
        ("arithmetic-outcome", ""),
        ("gsm8k", "no final answer"),
        ("code", "[not json"),
        ("code", "x = 1"),
    ],
)
def test_only_a_bad_reference_is_a_verifier_error(name, reference):
    from veriloop.verifiers import VerifierError, get

    with pytest.raises(VerifierError, match="reference"):  # the message says it is the reference's fault
        get(name).verify("answer=1", reference)


# ---------------------------------------------------------------- the record store's reader


def _one_step_of_records(tmp_path):
    from veriloop.rollout.records import Record, RecordStore

    store = RecordStore(tmp_path / "rollouts")
    rec = Record(
        "p1",
        "1-0-0",
        "(2+3)*4?",
        "(2+3)*4",
        [1, 2, 3],
        [4, 5, 6],
        "2+3",
        [-0.1, -0.2, -0.3],
        {"temperature": 1.0},
        0,
        "eos",
        reward=1.0,
    )
    return store, store.write(1, [rec, rec])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(min_value=0.0, max_value=1.0), flip=st.one_of(st.none(), st.integers(min_value=0)))
@example(cut=0.5, flip=None)  # a truncated gzip: was an EOFError from gzip
@example(cut=1.0, flip=0)  # not gzip at all: was a BadGzipFile
def test_a_damaged_record_file_is_an_input_error_naming_it(tmp_path, cut, flip):
    store, path = _one_step_of_records(tmp_path)
    data = bytearray(path.read_bytes())
    data = data[: int(len(data) * cut)]
    if flip is not None and data:
        data[flip % len(data)] ^= 0xFF
    path.write_bytes(bytes(data))
    try:
        records = store.read(1)
    except InputError as e:
        assert str(path) in str(e), e
        return
    assert all(r.problem_id == "p1" for r in records)  # what reads is what was written (a gzip CRC checks it)


@pytest.mark.parametrize(
    "line", ['{"problem_id": "p"}', "[1, 2]", '{"problem_id": 1, "group_id": "g"}', "not json", '{"extra": 1}']
)
def test_a_record_line_that_is_not_a_record_names_its_file_and_line(tmp_path, line):
    import gzip

    store, path = _one_step_of_records(tmp_path)
    rows = gzip.decompress(path.read_bytes()).decode().splitlines()
    path.write_bytes(gzip.compress("\n".join([rows[0], line]).encode()))
    with pytest.raises(InputError, match=f"{path}:2"):
        store.read(1)
