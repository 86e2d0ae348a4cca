"""Config dataclasses <-> YAML files <-> command-line flags, with errors that name the key.

Every config is a tree of dataclasses whose fields carry a default and a one-line
``help``.  ``add_arguments`` turns the tree into ``--section.field`` flags (so ``--help``
documents every option), ``build_config`` merges defaults <- YAML <- flags and checks
each key and value, and ``to_dict`` writes the result back out for the run directory.

Typed options: an option's allowed values are declared once, in its type and field metadata, and
both its check and its help derive from that declaration.  ``Literal["population", "sample"]``
is a choice; metadata ``ge``/``gt``/``le``/``lt`` are bounds (``{"help": ..., "ge": 0, "le": 1}``).
``check_typed`` refuses a value outside them with a ``ConfigError`` naming the option; the
config classes call it first in ``__post_init__`` (direct construction in Python is checked too)
and ``build_config`` calls it with the option's full dotted key.  Only rules that relate several
options stay written by hand.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import math
import operator
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from veriloop.errors import InputError


class ConfigError(InputError):
    """A config file or flag names an unknown key or holds a bad value."""


@functools.lru_cache(maxsize=512)
def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_dataclass_type(tp) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _scalar_type(tp):
    """int | float | str | bool for a field type (Optional[...] unwrapped; a Literal is the type of its values)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _scalar_type(args[0])
    if origin is typing.Literal:
        kinds = {type(a) for a in typing.get_args(tp)}
        return kinds.pop() if len(kinds) == 1 else str
    return tp


def choices_of(tp) -> tuple | None:
    """The allowed values of a ``Literal[...]`` option (Optional unwrapped), or None for an open type."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return choices_of(args[0]) if len(args) == 1 else None
    return typing.get_args(tp) if origin is typing.Literal else None


BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


def _number(x) -> str:
    """A bound in words: ``2**63`` rather than its 19 digits."""
    if isinstance(x, int) and x >= 2**32 and x & (x - 1) == 0:
        return f"2**{x.bit_length() - 1}"
    return repr(x)


def bounds_text(metadata) -> str:
    """``>= 0``, ``> 0``, ``in [0, 1]``, ``in (0, 1]``...: the bounds declared in a field's metadata, in words."""
    low = next(((k, metadata[k]) for k in ("ge", "gt") if k in metadata), None)
    high = next(((k, metadata[k]) for k in ("le", "lt") if k in metadata), None)
    if low and high:
        opening, closing = "[" if low[0] == "ge" else "(", "]" if high[0] == "le" else ")"
        return f"in {opening}{_number(low[1])}, {_number(high[1])}{closing}"
    one = low or high
    return f"{BOUNDS[one[0]]} {_number(one[1])}" if one else ""


_COMPARE = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}


def _outside(value, metadata) -> bool:
    """Whether ``value`` breaks a declared bound (NaN breaks every bound: no comparison with it holds)."""
    return any(k in metadata and not _COMPARE[k](value, metadata[k]) for k in BOUNDS)


def check_option(key: str, value: Any, tp, metadata) -> None:
    """Refuse ``value`` for the option ``key`` when it is not one of its ``Literal`` choices or outside the bounds of
    its metadata, with a ``ConfigError`` that names the option, the allowed values and what was given."""
    choices = choices_of(tp)
    if choices is not None and value not in choices and value is not None:
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{key} must be one of {', '.join(map(str, choices))}; got {value!r}{hint}")
    bounded = any(k in metadata for k in BOUNDS)
    if bounded and isinstance(value, (int, float)) and not isinstance(value, bool) and _outside(value, metadata):
        raise ConfigError(f"{key} must be {bounds_text(metadata)}, got {value!r}")


def check_typed(obj, section: str = "") -> None:
    """Check every leaf option of the config instance ``obj`` against its declared choices and bounds; ``section``
    prefixes the keys in messages (``"advantage"`` -> ``advantage.std``)."""
    hints = _hints(type(obj))
    prefix = f"{section}." if section else ""
    for f in dataclasses.fields(obj):
        if f.init and not _is_dataclass_type(hints[f.name]):
            check_option(prefix + f.name, getattr(obj, f.name), hints[f.name], f.metadata)


def _convert(value: Any, tp, key: str) -> Any:
    tp = _scalar_type(tp)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
            return False
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value  # exact, however large (a float round trip would change 2**60 + 1)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        try:
            f = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        if not math.isfinite(f) or f != int(f):  # 1e3 and "1e3" are 1000; nan, inf and 1.5 are not integers
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return int(f)
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            f = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if not math.isfinite(f):  # no option means anything at nan or inf; a typo must not train with them
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        return f
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    return value


def _unknown(key: str, known: list[str]) -> ConfigError:
    close = difflib.get_close_matches(key.split(".")[-1], known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"unknown config key {key!r}{hint}; known keys here: {', '.join(sorted(known))}")


def _build(cls, data: dict, prefix: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping of keys, got {data!r}")
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    for key in data:
        if not isinstance(key, str):  # YAML allows `1: 2` and `null: x`
            raise ConfigError(f"{prefix or 'config'}: keys are names, got {key!r}")
        if key not in names:
            raise _unknown(prefix + key, names)
    defaults_for = getattr(cls, "config_defaults", None)
    if defaults_for is not None:  # e.g. TrainConfig: the chosen recipe's defaults sit under the given keys
        tree: dict = {}
        for key, value in defaults_for(data).items():
            _set_dotted(tree, key, value)
        data = _merge(tree, data)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if not f.init or f.name not in data:
            continue
        tp, key = hints[f.name], prefix + f.name
        if _is_dataclass_type(tp):
            given = data[f.name] or {}
            if not isinstance(given, dict):
                raise ConfigError(f"{key}: expected a section of keys, got {given!r}")
            # Start from where this field's own default differs from tp's (TrainConfig.sampling's temperature 0.7):
            # only those, so that tp's own defaults stay defaults (a nested TrainConfig's recipe still applies).
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else tp()
            kwargs[f.name] = _build(tp, _merge(_differences(_shallow(default), _shallow(tp())), given), key + ".")
        else:
            kwargs[f.name] = _convert(data[f.name], tp, key)
            check_option(key, kwargs[f.name], tp, f.metadata)  # named by its full key (a class knows only its own)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None


def _shallow(obj) -> dict:
    """Field values of a dataclass instance, nested dataclasses as dicts."""
    return {
        f.name: (
            _shallow(getattr(obj, f.name)) if dataclasses.is_dataclass(getattr(obj, f.name)) else getattr(obj, f.name)
        )
        for f in dataclasses.fields(obj)
        if f.init
    }


def _differences(ours: dict, theirs: dict) -> dict:
    """The entries of ``ours`` that differ from ``theirs`` (nested mappings compared entry by entry)."""
    out = {}
    for k, v in ours.items():
        if isinstance(v, dict) and isinstance(theirs.get(k), dict):
            sub = _differences(v, theirs[k])
            if sub:
                out[k] = sub
        elif k not in theirs or theirs[k] != v:
            out[k] = v
    return out


def _set_dotted(tree: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{key}: {p!r} is not a section")
    node[parts[-1]] = value


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def load_yaml(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    try:
        data = yaml.safe_load(p.read_bytes().decode("utf-8")) or {}
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {str(p)!r} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping at the top level")
    return data


def build_config(cls, yaml_data: dict | None = None, overrides: dict[str, Any] | None = None, source: str = ""):
    """``cls`` defaults, then ``yaml_data``, then dotted ``overrides`` ({"kl.beta": "0.02"})."""
    data = dict(yaml_data or {})
    for key, value in (overrides or {}).items():
        _set_dotted(data, key, value)
    try:
        return _build(cls, data, "")
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}" if source else str(e)) from None


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def iter_fields(cls, prefix: str = ""):
    """(dotted key, type, default, help) for every leaf field of the config tree."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints[f.name]
        if _is_dataclass_type(tp):
            yield from iter_fields(tp, prefix + f.name + ".")
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        yield prefix + f.name, tp, default, field_help(f, tp)


def field_help(f: dataclasses.Field, tp=None) -> str:
    """A field's help, with its allowed values derived from their one declaration: a ``Literal`` type's choices,
    the bounds of its metadata, and for an option naming a registry entry (metadata ``registry``) what is
    registered now, plugins' entries included; none of them is typed into the help."""
    text, registry = f.metadata.get("help", ""), f.metadata.get("registry")
    choices = choices_of(tp) if tp is not None else None
    if choices is not None:
        text += f" (one of: {', '.join(map(str, choices))})"
    if registry is not None:
        text += f" (registered: {registry.choices()})"
    if bounds_text(f.metadata):
        text += f" ({bounds_text(f.metadata)})"
    return text


def type_label(tp) -> str:
    """A field type in words for help and the options reference: ``str`` for a Literal of strings."""
    tp = _scalar_type(tp)
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def add_arguments(parser: argparse.ArgumentParser, cls, defaults=None) -> None:
    """One ``--a.b`` flag per leaf field; values stay strings until ``build_config``."""
    group = parser.add_argument_group("options (also settable in the YAML file given with --config)")
    shown = defaults if defaults is not None else cls()
    for key, tp, _default, help_text in iter_fields(cls):
        value = shown
        for part in key.split("."):
            value = getattr(value, part)
        choices = choices_of(tp)
        group.add_argument(
            f"--{key}",
            dest=f"opt::{key}",
            default=None,
            metavar="{" + ",".join(map(str, choices)) + "}" if choices else type_label(tp).upper(),
            help=f"{help_text} (default: {value!r})".replace("%", "%%"),  # argparse formats help with %
        )


def overrides_from_args(args: argparse.Namespace) -> dict[str, str]:
    return {k[5:]: v for k, v in vars(args).items() if k.startswith("opt::") and v is not None}


def config_from_args(cls, args: argparse.Namespace, base: dict | None = None):
    """Defaults <- ``base`` (command presets) <- ``--config`` YAML <- flags."""
    data = dict(base or {})
    source = ""
    if getattr(args, "config", None):
        data = _merge(data, load_yaml(args.config))
        source = args.config
    return build_config(cls, data, overrides_from_args(args), source=source)
