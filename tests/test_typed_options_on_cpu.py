"""Typed options: an option's allowed values are declared once (a ``Literal`` type, bounds in the field's metadata) and
both its check and its help derive from that declaration (veriloop/config.py, docs/configuration.md)."""

import dataclasses
import re
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veriloop.config import BOUNDS, ConfigError, build_config, check_option, choices_of, field_help, iter_fields


def _commands():
    from veriloop.demo import DemoConfig
    from veriloop.evaluation.run import EvalRunConfig
    from veriloop.pipeline import PipelineConfig
    from veriloop.prm.label import LabelConfig
    from veriloop.prm.train import PRMTrainConfig
    from veriloop.search.allocate import AllocateConfig
    from veriloop.search.revision import RevisionPairsConfig
    from veriloop.search.run import SearchConfig
    from veriloop.training.config import TrainConfig

    return {
        "train": TrainConfig,
        "eval": EvalRunConfig,
        "demo": DemoConfig,
        "pipeline": PipelineConfig,
        "prm label": LabelConfig,
        "prm train": PRMTrainConfig,
        "search": SearchConfig,
        "allocate": AllocateConfig,
        "revision-pairs": RevisionPairsConfig,
    }


COMMANDS = _commands()


def _leaf_fields(cls, prefix=""):
    """(dotted key, type, dataclasses.Field) of every leaf option of the config tree ``cls``."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            yield from _leaf_fields(tp, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, tp, f


TYPED = sorted(
    {
        (command, key)
        for command, cls in COMMANDS.items()
        for key, tp, f in _leaf_fields(cls)
        if choices_of(tp) is not None or any(k in f.metadata for k in BOUNDS)
    }
)


def _outside(tp, metadata) -> list:
    """Values just outside an option's declaration."""
    out = []
    if choices_of(tp) is not None:
        out.append("not-one-of-them")
    integer = typing.get_origin(tp) is None and tp is int
    step = 1 if integer else 0.5
    for bound, value in ((k, metadata[k]) for k in BOUNDS if k in metadata):
        out.append({"ge": value - step, "gt": value, "le": value + step, "lt": value}[bound])
    return out


def test_many_options_are_typed():
    assert len({key for _, key in TYPED}) >= 60, "the declarations cover the plain choice and range options"


@pytest.mark.parametrize("command, key", TYPED, ids=[f"{c}:{k}" for c, k in TYPED])
def test_a_value_outside_the_declaration_is_refused_naming_the_option(command, key):
    cls = COMMANDS[command]
    tp, f = next((tp, f) for k, tp, f in _leaf_fields(cls) if k == key)
    for value in _outside(tp, f.metadata):
        with pytest.raises(ConfigError, match=re.escape(f"{key} must be")):
            build_config(cls, {}, {key: value})


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_help_types_its_choices_or_bounds_a_second_time(command):
    for key, tp, f in _leaf_fields(COMMANDS[command]):
        text = f.metadata.get("help", "")
        assert not re.search(r"\w \| \w", text), f"{command} {key}: a list of choices typed into the help: {text!r}"
        choices = choices_of(tp)
        if choices is not None:
            assert f"(one of: {', '.join(map(str, choices))})" in field_help(f, tp), key


def test_help_and_flags_show_the_declaration():
    from veriloop.training.config import TrainConfig

    helps = {key: text for key, _, _, text in iter_fields(TrainConfig)}
    assert helps["advantage.std"].endswith("(one of: population, sample, none)")
    assert helps["advantage.gamma"].endswith("(in [0, 1])")
    assert helps["loss.clip_ratio_c"].endswith("(> 1)")
    assert helps["seed"].endswith("(in [0, 2**63))")


_BOUNDED = {"help": "x", "gt": 0, "le": 1}


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-3, max_value=3))
def test_a_bounded_option_accepts_exactly_its_interval(x):
    inside = 0 < x <= 1
    try:
        check_option("a.b", x, float, _BOUNDED)
        accepted = True
    except ConfigError as e:
        assert str(e) == f"a.b must be in (0, 1], got {x!r}"
        accepted = False
    assert accepted == inside


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12))
def test_a_choice_option_accepts_exactly_its_choices(value):
    tp = typing.Literal["population", "sample", "none"]
    try:
        check_option("advantage.std", value, tp, {})
        accepted = True
    except ConfigError as e:
        assert str(e).startswith("advantage.std must be one of population, sample, none; got ")
        accepted = False
    assert accepted == (value in ("population", "sample", "none"))


def test_an_integer_bound_is_exact_for_huge_values():
    check_option("seed", 2**63 - 1, int, {"ge": 0, "lt": 2**63})
    with pytest.raises(ConfigError, match=r"seed must be in \[0, 2\*\*63\), got 9223372036854775808"):
        check_option("seed", 2**63, int, {"ge": 0, "lt": 2**63})


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-5, max_value=5), st.floats(min_value=-5, max_value=5, allow_nan=False))
def test_an_integer_against_a_float_bound_compares_as_numbers(value, bound):
    try:
        check_option("a.b", value, int, {"ge": bound})
        accepted = True
    except ConfigError:
        accepted = False
    assert accepted == (value >= bound)
