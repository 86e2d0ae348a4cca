"""One registry mechanism for every kind of component chosen by name: tasks, verifiers (and reward functions),
rollout engines, learner strategies, advantage estimators, policy objectives and search strategies.

Config validation, ``--help`` and the options reference read these registries, so an entry registered from
outside the package is accepted and listed everywhere a built-in one is.  Entries arrive three ways, none of them
an import done for its side effect:

* built-ins: each package's ``__init__`` registers its own explicitly (``rollout/__init__.py`` the engines,
  ``training/__init__.py`` the learners, estimators and objectives...), by object or, where the module imports
  torch, by path (``register_path("ddp", "veriloop.training.distributed.strategies:DDPLearner")``: imported when
  first asked for, so ``--help`` or reading a run's records does not load the training stack); a registry imports
  the package that owns its kind the first time it is asked (``builtins``), so ``ENGINES.get("ray")`` works from
  anywhere;
* plugins: a package declares entry points in its metadata, one per entry, in the group of its kind
  (``veriloop.tasks``, ``veriloop.verifiers``, ``veriloop.rewards``, ``veriloop.engines``, ``veriloop.learners``,
  ``veriloop.estimators``, ``veriloop.objectives``, ``veriloop.strategies``); the entry point's name is the
  entry's name, its object the entry (a ``veriloop.rewards`` entry is a reward function
  ``fn(prompts, completions, **columns) -> list[float]``, registered as a verifier)::

      [project.entry-points."veriloop.tasks"]
      my-task = "my_package.tasks:MyTask"

* code: ``REG.register("name", obj)`` (or ``@REG.register("name")``) in a notebook, a script, or a module named
  with ``--plugin my_module`` on the command line.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from collections.abc import Callable, Iterator
from typing import Any

from veriloop.errors import InputError, UnknownNameError

log = logging.getLogger(__name__)


class Registry:
    """Named entries of one kind; ``register`` refuses to silently replace an entry.

    ``builtins``: the package whose ``__init__`` registers the built-in entries (imported on first use; none for
    a registry made in a script); ``groups``: entry-point group -> how an entry point's object becomes an entry
    (``None``: as it is)."""

    def __init__(
        self,
        kind: str,
        builtins: str | None = None,
        groups: dict[str, Callable[[str, Any], Any] | None] | None = None,
    ):
        self.kind, self.builtins, self.groups = kind, builtins, dict(groups or {})
        self._entries: dict[str, Any] = {}
        # name -> how to get the entry, resolved on first ``get``: built-ins registered by path (a package whose
        # modules import torch registers them without importing them) and plugins' entry points
        self._deferred: dict[str, Callable[[], Any]] = {}
        self._loaded = False

    def register(self, name: str, entry: Any = None, *, replace: bool = False) -> Any:
        """``REG.register("name", obj)``, or ``@REG.register("name")`` as a decorator."""

        def add(obj: Any) -> Any:
            known = name in self._deferred or (name in self._entries and self._entries[name] is not obj)
            if known and not replace:
                raise ValueError(f"{self.kind} {name!r} is already registered (pass replace=True to replace it)")
            self._deferred.pop(name, None)
            self._entries[name] = obj
            return obj

        return add(entry) if entry is not None else add

    def register_path(self, name: str, target: str) -> None:
        """Register ``"package.module:Attribute"`` under ``name`` without importing it: the module is imported
        the first time the entry is asked for (``names()`` and help texts list it without the import).  A dotted
        attribute walks attributes and dict keys (``"veriloop.training.loop.estimators:BUILT_IN.grpo"``)."""
        if name in self._entries or name in self._deferred:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        module, _, attribute = target.partition(":")

        def resolve() -> Any:
            obj = importlib.import_module(module)
            for part in attribute.split("."):
                obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
            return obj

        self._deferred[name] = resolve

    def load(self) -> None:
        """The built-ins, then every installed plugin's entry points of this kind (once)."""
        if self._loaded:
            return
        self._loaded = True
        if self.builtins:
            importlib.import_module(self.builtins)
        for group, adapt in self.groups.items():
            for ep in importlib.metadata.entry_points(group=group):
                if ep.name in self._entries or ep.name in self._deferred:
                    log.warning(
                        f"{group} entry point {ep.name!r} ({ep.value}) is ignored: {self.kind} {ep.name!r} exists"
                    )
                    continue
                self._deferred[ep.name] = self._entry_point_loader(group, ep, adapt)

    @staticmethod
    def _entry_point_loader(group: str, ep: Any, adapt: Callable[[str, Any], Any] | None) -> Callable[[], Any]:
        def resolve() -> Any:
            try:
                obj = ep.load()
            except Exception as e:  # noqa: BLE001 - a broken plugin is named, not a traceback from importlib
                raise InputError(f"{group} entry point {ep.name} = {ep.value!r} failed to load: {e}") from e
            return adapt(ep.name, obj) if adapt is not None else obj

        return resolve

    def get(self, name: str) -> Any:
        if name not in self._entries and name not in self._deferred:
            self.load()
        if name in self._deferred:
            self._entries[name] = self._deferred.pop(name)()
        if name not in self._entries:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        return self._entries[name]

    def names(self) -> list[str]:
        self.load()
        return sorted({*self._entries, *self._deferred})

    def __contains__(self, name: object) -> bool:
        if name not in self._entries and name not in self._deferred:
            self.load()
        return name in self._entries or name in self._deferred

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    __getitem__ = get

    def items(self) -> list[tuple[str, Any]]:
        """Every entry, each resolved (imports what was registered by path)."""
        return [(n, self.get(n)) for n in self.names()]

    def choices(self) -> str:
        """``a | b | c``: what a help text lists (plugins' entries included)."""
        return " | ".join(self.names())

    def adapt(self, group: str, adapt: Callable[[str, Any], Any]) -> None:
        """How ``group``'s entry points become entries (set by the package that owns the kind, before they load)."""
        self.groups[group] = adapt

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)
        self._deferred.pop(name, None)


TASKS = Registry("task", "veriloop.tasks", {"veriloop.tasks": None})
# a veriloop.rewards entry is a reward function, made a verifier by verifiers/__init__.py's adapter
VERIFIERS = Registry("verifier", "veriloop.verifiers", {"veriloop.verifiers": None, "veriloop.rewards": None})
ENGINES = Registry("rollout engine", "veriloop.rollout", {"veriloop.engines": None})
LEARNERS = Registry("learner strategy", "veriloop.training", {"veriloop.learners": None})
ESTIMATORS = Registry("advantage estimator", "veriloop.training", {"veriloop.estimators": None})
OBJECTIVES = Registry("policy objective", "veriloop.training", {"veriloop.objectives": None})
STRATEGIES = Registry("strategy", "veriloop.search", {"veriloop.strategies": None})  # search strategies
REGISTRIES = (TASKS, VERIFIERS, ENGINES, LEARNERS, ESTIMATORS, OBJECTIVES, STRATEGIES)


def import_plugins(modules: str | list[str]) -> None:
    """Import modules (comma-separated names) whose code registers entries (``--plugin``); a missing one is an
    input error."""
    names = [m.strip() for m in modules.split(",")] if isinstance(modules, str) else list(modules)
    for name in filter(None, names):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            raise InputError(f"--plugin {name!r}: no such module ({e})") from None
