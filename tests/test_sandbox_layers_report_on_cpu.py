"""tests/sandbox_layers_plugin.py: the run's summary line of the sandbox layers exercised, the skip of a test whose
layer this machine lacks, and CI's expectation (VERILOOP_EXPECT_SANDBOX_LAYERS) that turns such a skip into a
failure.  Each case runs a tiny pytest session of its own in a subprocess, with VERILOOP_SANDBOX=process: the
kernel layers are then missing on any machine, for a known reason."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sandbox_layers_plugin as plugin

from veriloop.sandbox import Isolation

pytestmark = pytest.mark.timeout(300)
TESTS = Path(__file__).parent
INNER = """
import pytest

@pytest.mark.sandbox_layer("namespaces")
def test_kernel():
    pass

@pytest.mark.sandbox_layer("audit-hook")
def test_hook():
    pass

@pytest.mark.sandbox_layer("rlimits")
def test_limits_skipped_by_the_test_itself():
    pytest.skip("the test's own reason")

def test_plain():
    pass
"""
PROCESS = "VERILOOP_SANDBOX=process"


def _absent() -> tuple[str, str]:
    """What the inner sessions lack, as the plugin says it: namespaces always (VERILOOP_SANDBOX=process), and the
    layers short of namespaces that this machine cannot give (the process mode takes every one that works); and
    the kernel layers it has that no inner test marks."""
    from veriloop.sandbox.probe import process_layers

    missing = plugin.missing_layers(process_layers(PROCESS))
    assert "namespaces" in missing
    unmarked = [
        f"{layer} (no test of it selected)"
        for layer in plugin.known_layers()
        if layer not in missing and layer not in ("rlimits", "audit-hook")
    ]
    return "not available here: " + ", ".join(f"{layer} ({why})" for layer, why in missing.items()), "".join(
        f"{u}, " for u in unmarked
    )


ABSENT, UNMARKED = _absent()


def inner(tmp_path, *args, expect=None, source=INNER):
    """Run ``source`` as a pytest session of its own (the plugin loaded, no conftest): (exit code, output)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # its own rootdir, not the repository's settings
    (tmp_path / "test_inner.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VERILOOP_"))}
    env.update(PYTHONPATH=str(TESTS), VERILOOP_SANDBOX="process")
    if expect is not None:
        env[plugin.ENV] = expect
    command = [sys.executable, "-m", "pytest", "-p", "sandbox_layers_plugin", "-p", "no:cacheprovider", "-rs", *args]
    out = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout + out.stderr


def test_the_summary_line_says_what_ran_and_what_this_machine_lacks(tmp_path):
    rc, out = inner(tmp_path)
    assert rc == 0, out
    line = (
        f"sandbox layers exercised: audit-hook; {ABSENT}; not exercised: {UNMARKED}rlimits "
        "(test_inner.py::test_limits_skipped_by_the_test_itself: the test's own reason)"
    )
    assert line in out.splitlines(), out
    # the plugin's skip names the missing layer and why
    assert f"SKIPPED [1] test_inner.py:4: sandbox layer not available here: namespaces ({PROCESS})" in out, out
    assert "2 passed, 2 skipped" in out, out


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_the_expectation_turns_a_skipped_layer_into_a_failure(tmp_path, workers):
    """Under pytest-xdist too: the controller counts the workers' reports."""
    rc, out = inner(tmp_path, *workers, expect="namespaces,audit-hook,rlimits")
    assert rc == 1, out
    assert "2 passed, 2 skipped" in out and "failed" not in out, out  # no test failed: the session did
    assert f"sandbox layers exercised: audit-hook; {ABSENT}" in out, out
    assert "FAILED: VERILOOP_EXPECT_SANDBOX_LAYERS=namespaces,audit-hook,rlimits" in out, out
    assert f"  namespaces: not available here ({PROCESS}); 1 test(s) skipped" in out, out
    # a skip the test made itself counts too: the layer was not exercised
    assert (
        "  rlimits: no selected test of it ran (1 skipped: test_inner.py::test_limits_skipped_by_the_test_itself:"
        " the test's own reason)"
    ) in out, out
    assert "audit-hook:" not in out, out  # exercised: no complaint


def test_an_expectation_that_is_met_passes_and_names_only_its_layers(tmp_path):
    rc, out = inner(tmp_path, "-n", "2", expect="audit-hook")  # namespaces is missing here, but not expected
    assert rc == 0 and "FAILED" not in out and "sandbox layers exercised: audit-hook;" in out, out


def test_deselected_layer_tests_fail_the_expectation(tmp_path):
    rc, out = inner(tmp_path, "-k", "plain", expect="audit-hook")
    assert rc == 1 and "1 passed, 3 deselected" in out, out
    assert "  audit-hook: no selected test of it ran (none selected or collected)" in out, out
    rc, out = inner(tmp_path, "-k", "plain")  # no expectation, no layer test: no summary line either
    assert rc == 0 and "sandbox layers" not in out, out


def test_a_wrong_layer_name_is_an_error_that_names_it(tmp_path):
    rc, out = inner(tmp_path, expect="namespaces,sekcomp")
    assert rc == 4 and "VERILOOP_EXPECT_SANDBOX_LAYERS='namespaces,sekcomp': 'sekcomp' is not a sandbox layer" in out
    # a wrong marker errors its test (under xdist too, where an exception in a worker's collection would crash it)
    source = 'import pytest\n\n@pytest.mark.sandbox_layer("seccom")\ndef test_x():\n    pass\n\n'
    source += "def test_y():\n    pass\n"
    rc, out = inner(tmp_path, "-n", "2", source=source)
    assert rc == 1 and "1 passed, 1 error" in out, out
    assert "test_inner.py::test_x: @pytest.mark.sandbox_layer('seccom',): name one or more of the sandbox's" in out, out


def test_missing_layers_name_each_layer_with_its_own_reason():
    assert plugin.known_layers() == (
        "namespaces",
        "bwrap",
        "seccomp",
        "pids-cgroup",
        "memory-cgroup",
        "rlimits",
        "audit-hook",
    )
    iso = Isolation(
        False,
        "",
        "namespaces unavailable: unshare failed; no seccomp filter: libseccomp is not installed (Debian: libseccomp2)",
        "",
    )
    assert plugin.missing_layers(iso) == {
        "namespaces": "namespaces unavailable: unshare failed",
        "bwrap": "namespaces unavailable: unshare failed",
        "seccomp": "no seccomp filter: libseccomp is not installed (Debian: libseccomp2)",
        "pids-cgroup": "isolation() found none on this machine and gives no reason",
        "memory-cgroup": "isolation() found none on this machine and gives no reason",
    }
    full = Isolation(True, "/sys/fs/cgroup/x", "", "libseccomp.so.2", "/sys/fs/cgroup/m", "/usr/bin/bwrap")
    assert plugin.missing_layers(full) == {}
    unshare = Isolation(True, "/x", "no bwrap command (Debian: bubblewrap): unshare makes the namespaces", "lib", "/m")
    assert plugin.missing_layers(unshare) == {
        "bwrap": "no bwrap command (Debian: bubblewrap): unshare makes the namespaces"
    }
    assert plugin.missing_layers(
        Isolation(True, "/x", "no memory cgroup this process may make", "lib", "", "bwrap")
    ) == {"memory-cgroup": "no memory cgroup this process may make"}
    assert plugin.parse_expected(" audit-hook,namespaces,,namespaces ") == ("namespaces", "audit-hook")
    assert plugin.parse_expected("") == ()
    with pytest.raises(
        pytest.UsageError, match="'pids' is not a sandbox layer; the layers are namespaces, bwrap, seccomp"
    ):
        plugin.parse_expected("pids")


def test_no_sandbox_test_skips_on_the_machine_but_through_the_marker():
    """A skip on the sandbox's isolation written by hand would hide from the summary line and from CI's check."""
    by_hand = re.compile(r"skip(if)?\(.*(\bISO\b|isolation\(\)|\.namespaces|\.seccomp|\.pids_cgroup|\.memory_cgroup)")
    offenders = [
        f"{path.name}:{n}"
        for path in TESTS.glob("test_*.py")
        if path.name != Path(__file__).name
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if by_hand.search(line)
    ]
    assert offenders == [], offenders
