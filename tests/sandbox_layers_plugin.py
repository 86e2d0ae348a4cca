"""The code sandbox's isolation layers in a test run: which ones the tests exercised, which this machine lacks, and
CI's expectation (issue 36).  Loaded by tests/conftest.py.

A test that exercises a layer says so: ``@pytest.mark.sandbox_layer("namespaces", "seccomp")``.  Where the machine
lacks one of a test's layers (``isolation()`` did not find it) the test is skipped, the reason naming the layer and
why it is missing: the one way a sandbox test skips for the machine's sake.  The terminal summary then says, in one
line, what was exercised and what this machine lacks:

    sandbox layers exercised: namespaces, bwrap, seccomp, pids-cgroup, rlimits, audit-hook; not available here: none

``bwrap`` is the namespaces made by bubblewrap (``Isolation.bwrap``): the kernel layer's tests run once under it
(marked ``bwrap``) and once under the ``unshare`` fall-back (tests/test_sandbox_isolation_on_cpu.py), so a machine
with bwrap exercises both ways, and one without it says so here.

``VERILOOP_EXPECT_SANDBOX_LAYERS=namespaces,seccomp,...`` (.ci/run sets it to what the machine offers) turns a gap
into a failure: the session fails unless each layer named there was exercised by a selected test that ran, and no
selected test of it was skipped because of it.  Unset or empty: no expectation (a developer's ``-k`` run).

Under pytest-xdist the workers collect, so they mark and skip; the controller, which prints the summary, counts the
test reports, which carry each test's layers in ``user_properties`` (sent over with the report).
"""

from __future__ import annotations

import os

import pytest

from veriloop.sandbox import Isolation, isolation

ENV = "VERILOOP_EXPECT_SANDBOX_LAYERS"
MARKER = "sandbox_layer"
_LAYERS, _MISSING = "sandbox_layers", "sandbox_layers_missing"  # user_properties keys
# words by which Isolation.why names each kernel layer (rlimits and the audit hook are always there)
_WORDS = {
    "namespaces": ("namespace", "unshare"),
    "bwrap": ("bwrap", "namespace"),  # missing where the namespaces are, for their reason
    "seccomp": ("seccomp",),
    "pids-cgroup": ("pids",),
    "memory-cgroup": ("memory",),
}


def known_layers() -> tuple[str, ...]:
    """Every layer the sandbox has, in its own order: ``Isolation.layers`` of a machine that has them all."""
    return tuple(Isolation(True, "pids-cgroup", "", "libseccomp", "memory-cgroup", "bwrap").layers.split("+"))


def missing_layers(iso: Isolation) -> dict[str, str]:
    """The layers ``iso`` lacks, each with why: the parts of ``iso.why`` that name it (the probe records no reason
    for a missing pids cgroup, so that one says so)."""
    have = set(iso.layers.split("+"))
    parts = [p.strip() for p in iso.why.split(";") if p.strip()]
    out = {}
    for layer in known_layers():
        if layer not in have:
            mine = [p for p in parts if any(w in p for w in _WORDS.get(layer, (layer,)))]
            mine = mine or [p for p in parts if "VERILOOP_SANDBOX" in p]
            out[layer] = "; ".join(mine) or "isolation() found none on this machine and gives no reason"
    return out


def parse_expected(value: str) -> tuple[str, ...]:
    """The layers ``VERILOOP_EXPECT_SANDBOX_LAYERS`` names (comma-separated, in the sandbox's order, each once)."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in known_layers()]
    if unknown:
        raise pytest.UsageError(
            f"{ENV}={value!r}: {', '.join(map(repr, unknown))} is not a sandbox layer; the "
            f"layers are {', '.join(known_layers())}"
        )
    return tuple(layer for layer in known_layers() if layer in names)


def layers_of(item: pytest.Item) -> tuple[str, ...]:
    """The layers an item's ``sandbox_layer`` markers name (function, class, module and parameter marks together);
    ValueError for a marker that names none, or something else."""
    names = []
    for mark in item.iter_markers(MARKER):
        if not mark.args or mark.kwargs or not all(isinstance(a, str) and a in known_layers() for a in mark.args):
            raise ValueError(
                f"{item.nodeid}: @pytest.mark.{MARKER}{mark.args or '()'}: name one or more of the "
                f"sandbox's layers: {', '.join(known_layers())}"
            )
        names += mark.args
    return tuple(layer for layer in known_layers() if layer in names)


_BAD_MARKER = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*layers): the test exercises these layers of the code sandbox "
        "(skipped where the machine lacks one; counted in the run's summary line)",
    )
    expected = parse_expected(os.environ.get(ENV, ""))  # a wrong name stops every process, the workers' too
    if not hasattr(config, "workerinput"):  # the controller, or a run without xdist: it sees every report
        config.pluginmanager.register(Tally(expected, os.environ.get(ENV, "")), "sandbox-layers-tally")


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: the machine is probed only if a layer test is left
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = []
    for item in items:
        try:
            layers = layers_of(item)
        except ValueError as e:  # the test errors, saying so (an exception here would crash an xdist worker)
            item.stash[_BAD_MARKER] = str(e)
            continue
        if layers:
            marked.append((item, layers))
    if not marked:
        return
    missing = missing_layers(isolation())
    for item, layers in marked:
        item.user_properties.append((_LAYERS, ",".join(layers)))
        lacking = [layer for layer in layers if layer in missing]
        if lacking:
            item.user_properties.append((_MISSING, ",".join(lacking)))
            why = ", ".join(f"{layer} ({missing[layer]})" for layer in lacking)
            item.add_marker(pytest.mark.skip(reason=f"sandbox layer not available here: {why}"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _BAD_MARKER in item.stash:
        pytest.fail(item.stash[_BAD_MARKER], pytrace=False)


class Tally:
    """Per layer: the selected tests of it that ran, and those skipped because of it (with why)."""

    def __init__(self, expected: tuple[str, ...], raw: str):
        self.expected, self.raw = expected, raw
        self.ran: dict[str, set[str]] = {layer: set() for layer in known_layers()}
        self.skipped: dict[str, dict[str, str]] = {layer: {} for layer in known_layers()}
        self.problems: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)  # pairs (lists, once sent over by an xdist worker)
        if not props.get(_LAYERS):
            return
        layers = props[_LAYERS].split(",")
        if report.when == "call" and (not report.skipped or hasattr(report, "wasxfail")):
            for layer in layers:
                self.ran[layer].add(report.nodeid)
        elif report.skipped:  # the plugin's skip blames the missing layers; any other blames all the test's
            blamed = props[_MISSING].split(",") if props.get(_MISSING) else layers
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            for layer in blamed:
                self.skipped[layer][report.nodeid] = reason.removeprefix("Skipped: ")

    def _seen(self) -> bool:
        return any(self.ran.values()) or any(self.skipped.values())

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.expected or session.config.option.collectonly:
            return
        missing = missing_layers(isolation())
        for layer in self.expected:
            skipped = self.skipped[layer]
            if layer in missing:
                self.problems.append(f"{layer}: not available here ({missing[layer]}); {len(skipped)} test(s) skipped")
            elif not self.ran[layer]:
                why = f"{len(skipped)} skipped: {_examples(skipped)}" if skipped else "none selected or collected"
                self.problems.append(f"{layer}: no selected test of it ran ({why})")
            elif skipped:
                self.problems.append(f"{layer}: {len(skipped)} selected test(s) skipped: {_examples(skipped)}")
        if self.problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not (self._seen() or self.expected):
            return
        terminalreporter.write_line(self.summary_line(missing_layers(isolation())))
        if self.problems:
            terminalreporter.write_line(
                f"FAILED: {ENV}={self.raw} (CI expects each of these layers exercised):", red=True, bold=True
            )
            for problem in self.problems:
                terminalreporter.write_line(f"  {problem}", red=True)

    def summary_line(self, missing: dict[str, str]) -> str:
        """``sandbox layers exercised: ...; not available here: ...`` and, where there are any, the layers this
        machine has whose tests did not run, and those some of whose tests were skipped."""
        exercised = [layer for layer in known_layers() if self.ran[layer]]
        absent = [f"{layer} ({why})" for layer, why in missing.items()]
        line = f"sandbox layers exercised: {', '.join(exercised) or 'none'}; not available here: "
        line += ", ".join(absent) or "none"
        idle = [layer for layer in known_layers() if not self.ran[layer] and layer not in missing]
        if idle:
            line += "; not exercised: " + ", ".join(
                f"{layer} ({_examples(self.skipped[layer]) if self.skipped[layer] else 'no test of it selected'})"
                for layer in idle
            )
        partly = [layer for layer in exercised if self.skipped[layer]]
        if partly:
            line += "; some tests skipped: " + ", ".join(
                f"{layer} ({_examples(self.skipped[layer])})" for layer in partly
            )
        return line


def _examples(skipped: dict[str, str], n: int = 2) -> str:
    shown = "; ".join(f"{nodeid}: {why}" for nodeid, why in sorted(skipped.items())[:n])
    return shown + (f"; and {len(skipped) - n} more" if len(skipped) > n else "")
