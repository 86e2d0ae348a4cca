"""One registry mechanism for everything chosen by name: tasks, verifiers, advantage
estimators, policy objectives and search strategies.

Config validation reads these registries, so something registered from outside the
package is accepted everywhere a built-in one is.  A module registers its entries when it
is imported: name it with ``--plugin my_module`` on the command line, or declare it as an
entry point of the group ``veriloop.plugins`` in its package's metadata (imported the first
time a registry is asked for a name it lacks - how the package's own higher layers, such as
the ``prm`` verifier, register into lower ones without an upward import)::

    from veriloop.registry import ESTIMATORS
    @ESTIMATORS.register("my_estimator")
    class MyEstimator(Estimator): ...
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterator
from typing import Any

from veriloop.errors import InputError, UnknownNameError


class Registry:
    """Named entries of one kind; ``register`` refuses to silently replace an entry."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Any] = {}

    def register(self, name: str, entry: Any = None, *, replace: bool = False) -> Any:
        """``REG.register("name", obj)``, or ``@REG.register("name")`` as a decorator."""

        def add(obj: Any) -> Any:
            if name in self._entries and not replace:
                raise ValueError(f"{self.kind} {name!r} is already registered (pass replace=True to replace it)")
            self._entries[name] = obj
            return obj

        return add(entry) if entry is not None else add

    def get(self, name: str) -> Any:
        if name not in self._entries:
            load_entry_points()
        if name not in self._entries:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        return self._entries[name]

    def names(self) -> list[str]:
        load_entry_points()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            load_entry_points()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    __getitem__ = get

    def items(self) -> list[tuple[str, Any]]:
        return [(n, self._entries[n]) for n in self.names()]

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)


TASKS = Registry("task")
VERIFIERS = Registry("verifier")
ESTIMATORS = Registry("advantage estimator")
OBJECTIVES = Registry("policy objective")
STRATEGIES = Registry("strategy")  # search strategies


def import_plugins(modules: str | list[str]) -> None:
    """Import modules (comma-separated names) that register entries; a missing one is an input error."""
    names = [m.strip() for m in modules.split(",")] if isinstance(modules, str) else list(modules)
    for name in filter(None, names):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            raise InputError(f"--plugin {name!r}: no such module ({e})") from None


_entry_points_loaded = False


def load_entry_points() -> None:
    """Import every module declared under the entry-point group ``veriloop.plugins`` (once)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in importlib.metadata.entry_points(group="veriloop.plugins"):
        ep.load()
