"""Which options each component reads; an option set on a component that ignores it is an error.

Many options belong to one kind of component, chosen by another option: ``optim.momentum`` to the
optimizer (``optim.name``), ``task.heldout_size`` to the task (``task.name``), ``critic.*`` to the
advantage estimator.  An ``OptionScope`` declares, for each component of one kind, the options of
the scope it reads.  ``refuse_unread`` checks a config against its scopes: an option of a scope whose
value differs from its default while the chosen component does not read it raises a ``ConfigError``
that names the option, the component, and the components that do read it (what to use instead).
Setting an option to its default is harmless and accepted.

Each config section checks its own scopes (``TaskConfig``, ``OptimConfig``); a command's config
checks those that cross sections (``TrainConfig``: the estimator's ``critic.*``, the engine's
``ray.*``...).  ``tests/test_options_declared_on_cpu.py`` walks every option of every command against
every choice of the component it belongs to, and checks the declarations against what the
components read.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from veriloop.config import ConfigError


def lookup(cfg: Any, key: str) -> Any:
    """The value of the dotted ``key`` in a config tree (dataclasses or mappings)."""
    value = cfg
    for part in key.split("."):
        value = value[part] if isinstance(value, Mapping) else getattr(value, part)
    return value


def dotted_defaults(cls, prefix: str = "") -> dict[str, Any]:
    """``{dotted key: default}`` for every leaf option of the config class ``cls``, a section's defaults taken
    from the field's own default (which may differ from its class's: ``TrainConfig.sampling``), built without
    constructing ``cls`` itself."""
    return dict(_dotted_defaults(cls, prefix))


@functools.lru_cache(maxsize=256)
def _dotted_defaults(cls, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(default):
            out.update(_flatten(default, f"{prefix}{f.name}."))
        else:
            out[prefix + f.name] = default
    return out


def _flatten(obj: Any, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if f.init:
            value = getattr(obj, f.name)
            out.update(
                _flatten(value, f"{prefix}{f.name}.") if dataclasses.is_dataclass(value) else {prefix + f.name: value}
            )
    return out


def covers(names: Collection[str], key: str) -> bool:
    """Whether ``key`` is one of ``names`` or inside a section named there (``critic`` covers ``critic.lr``), and
    not excluded by a name with a leading ``-`` (``("kl", "-kl.target")``: every ``kl.*`` option but one)."""

    def within(n: str) -> bool:
        return key == n or key.startswith(n + ".")

    return any(within(n) for n in names if not n.startswith("-")) and not any(
        within(n[1:]) for n in names if n.startswith("-")
    )


@functools.lru_cache(maxsize=1024)
def _leaves(options: tuple[str, ...], keys: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(k for k in keys if covers(options, k))


@dataclass(frozen=True)
class OptionScope:
    """The options of one kind of component, and which component reads which.

    ``kind`` names the component in messages ("optimizer"); ``selector`` is the option that chooses it
    (``name`` in ``optim``); ``options`` are the options of the scope and ``reads`` maps each component
    to those it reads (or is a function of the component's name); a section's name stands for all its
    options.  When the choice is not one option's value (the KL term is off when ``kl.beta`` is 0),
    ``component`` computes its name from the config and ``choose`` gives the options that select it
    (what the property test sets).  Keys are relative to the config that checks the scope; ``prefix``
    is where that config sits in every command (``task.``), for messages.
    """

    kind: str
    selector: str
    options: tuple[str, ...]  # option keys and sections (``critic``); ``-key`` excludes one
    reads: Mapping[str, Collection[str]] | Callable[[str], Collection[str]]
    choices: Callable[[], Iterable[str]] | None = None  # every component (default: the keys of ``reads``)
    component: Callable[[Any], str] | None = None  # the chosen component (default: the selector's value)
    choose: Callable[[str], dict] | None = None  # options that choose a component (default: {selector: name})
    prefix: str = ""
    hint: Mapping[str, str] = field(default_factory=dict)  # option -> what to use instead, when not obvious
    # component -> the settings that choose it, for messages (a mapping, or a function of the component's name)
    when: Mapping[str, str] | Callable[[str], str] = field(default_factory=dict)

    def read_by(self, name: str) -> frozenset[str]:
        got = self.reads(name) if callable(self.reads) else self.reads.get(name, ())
        return frozenset(got)

    def reads_option(self, name: str, key: str) -> bool:
        return covers(self.read_by(name), key)

    def names(self) -> list[str]:
        return list(self.choices() if self.choices is not None else self.reads)  # type: ignore[arg-type]

    def chosen(self, cfg: Any) -> str:
        return self.component(cfg) if self.component is not None else str(lookup(cfg, self.selector))

    def selecting(self, name: str) -> str:
        """The settings that choose component ``name``, as a message says them: ``optim.name sgd``."""
        when = self.when(name) if callable(self.when) else self.when.get(name)
        return when or f"{self.prefix}{self.selector} {name}"

    def choosing(self, name: str) -> dict:
        return self.choose(name) if self.choose is not None else {self.selector: name}

    def leaves(self, defaults: Mapping[str, Any]) -> list[str]:
        """The scope's options as leaf keys of ``defaults``."""
        return list(_leaves(self.options, tuple(defaults)))


def unread_message(scope: OptionScope, key: str, value: Any, default: Any, name: str) -> str:
    readers = [n for n in scope.names() if scope.reads_option(n, key)]
    p = scope.prefix
    hint = next((text for name_, text in scope.hint.items() if covers((name_,), key)), "")
    if hint:
        instead = hint
    elif readers:
        instead = f"it is read with {' or '.join(scope.selecting(n) for n in readers)}: set that"
    else:
        instead = f"no {scope.kind} reads it"
    return (
        f"{p}{key}={value!r} is not read by the {scope.kind} {name!r} ({scope.selecting(name)}), so it would do "
        f"nothing; {instead}, or leave {p}{key} at its default {default!r}"
    )


# config class -> (its scopes, the options it reads whatever is chosen): what the declarations test walks
DECLARED: dict[type, tuple[tuple[OptionScope, ...], tuple[str, ...]]] = {}


def declare(cls: type, scopes: Iterable[OptionScope] = (), common: Iterable[str] = ()) -> None:
    """Record ``cls``'s scopes and the options (and sections) it reads whatever is chosen."""
    DECLARED[cls] = (tuple(scopes), tuple(common))


def check_declared(cfg: Any) -> None:
    """``refuse_unread`` with the scopes declared for ``type(cfg)``, against its class defaults."""
    scopes, _ = DECLARED[type(cfg)]
    refuse_unread(cfg, scopes, dotted_defaults(type(cfg)))


def declarations(cls: type, prefix: str = "") -> list[tuple[str, tuple[OptionScope, ...], tuple[str, ...]]]:
    """``(prefix, scopes, common)`` of every declared config class in the tree of ``cls``, outermost first."""
    out = [(prefix, *DECLARED[cls])] if cls in DECLARED else []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if f.init and isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out += declarations(tp, f"{prefix}{f.name}.")
    return out


def refuse_unread(cfg: Any, scopes: Iterable[OptionScope], defaults: Mapping[str, Any]) -> None:
    """Raise a ``ConfigError`` for the first option of a scope whose value differs from ``defaults`` (dotted
    leaf keys: ``dotted_defaults``) that the chosen component does not read."""
    for scope in scopes:
        name = scope.chosen(cfg)
        for key in scope.leaves(defaults):
            value = lookup(cfg, key)
            if value != defaults[key] and not scope.reads_option(name, key):
                raise ConfigError(unread_message(scope, key, value, defaults[key], name))


def not_read_by(command: str, options: tuple[str, ...], hint: str = "") -> OptionScope:
    """A scope of one component, the command itself, that reads none of ``options`` (``sampling.max_thinking_tokens``
    in a command that samples without budget forcing)."""
    return OptionScope(
        "command",
        "command",
        options,
        {command: ()},
        component=lambda cfg: command,
        choose=lambda name: {},
        when={command: f"`veriloop {command}`"},
        hint={o: hint for o in options} if hint else {},
    )


def toggled(
    kind: str,
    selector: str,
    options: tuple[str, ...],
    on: Callable[[Any], bool],
    when_on: str,
    when_off: str,
    choose_on: dict,
    choose_off: dict,
) -> OptionScope:
    """A scope whose options are read only when a setting is on (``select`` with ``val_data``)."""
    return OptionScope(
        kind,
        selector,
        options,
        {"on": options, "off": ()},
        component=lambda cfg: "on" if on(cfg) else "off",
        choose=lambda name: dict(choose_on if name == "on" else choose_off),
        when={"on": when_on, "off": when_off},
    )
