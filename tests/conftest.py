"""Test settings shared by every test module."""

import ctypes
import fcntl
import json
import os
import socket
import struct
from pathlib import Path

import pytest
from hypothesis import settings


def _loopback_only_network() -> str:
    """Run the whole test session in a network namespace of its own whose only interface is loopback.

    The test Ray clusters, gloo process groups and servers then cannot listen on, or send to, any address
    but 127.0.0.1, whatever their defaults (Ray 2.60's gRPC servers listen on every interface when started in
    the machine's namespace).  Needs unshare(CLONE_NEWNET) (root, or a user namespace); where the OS refuses
    it, or with VERILOOP_TEST_NETNS=0, the session stays in the machine's namespace and the header says so.
    Done at import, before any thread exists: a namespace belongs to the thread that enters it and is
    inherited by the threads and processes it starts.
    """
    if os.environ.get("VERILOOP_TEST_NETNS", "1") == "0":
        return "the machine's (VERILOOP_TEST_NETNS=0)"
    if os.environ.get("VERILOOP_TEST_NETNS_OF"):  # a process the session started (it imported this file again)
        # (pytest-xdist's workers are such processes: they must know they run in loopback only, or the test that
        # checks where Ray listens would skip there)
        entered_by = os.environ["VERILOOP_TEST_NETNS_OF"]
        return f"the session's namespace: loopback (127.0.0.1) only, entered by process {entered_by}"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
        return f"the machine's (unshare(CLONE_NEWNET) refused: errno {ctypes.get_errno()})"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # `ip link set lo up`, without iproute2
        flags = 0x1 | 0x8 | 0x40  # IFF_UP | IFF_LOOPBACK | IFF_RUNNING
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags, b"\0" * 14))  # SIOCSIFFLAGS
    os.environ["VERILOOP_TEST_NETNS_OF"] = str(os.getpid())  # inherited: children stay in this namespace
    return "a namespace of its own: loopback (127.0.0.1) only"


NETWORK = _loopback_only_network()
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # Ray reports nothing anywhere

# Under pytest-xdist (`make test` runs one worker per core) each worker computes with one thread, and so do the
# processes its tests start: two one-thread workers get through the suite's small matmuls faster than one
# two-thread process, and never oversubscribe the cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"
    import torch

    torch.set_num_threads(1)


# the sandbox's layers: the `sandbox_layer` marker, the summary line of what was exercised, CI's expectation
pytest_plugins = ["sandbox_layers_plugin"]


def pytest_report_header(config):
    return f"network of the test session: {NETWORK}"


# Property tests draw the same examples on every run (CI must not pass or fail by luck);
# HYPOTHESIS_PROFILE=explore draws new ones, to hunt for counterexamples locally.
settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

from veriloop import verifiers  # noqa: E402


@verifiers.register("test-digit-share")
class DigitShare(verifiers.Verifier):
    """Share of digits in the completion: a dense reward a random tiny model varies on (the arithmetic
    verifier scores such a model 0 everywhere, and every advantage would be 0). Shared by the tests."""

    name, version = "test-digit-share", "1"

    def verify(self, completion, reference):
        score = sum(c.isdigit() for c in completion) / max(len(completion), 1)
        return self._verdict(score, {"digits": score})


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    """A tiny random built-in policy (char tokenizer, 2 layers of 64), saved once per module: its directory."""
    from veriloop.models.tiny import TinyModelConfig, build_char_tokenizer, build_tiny_model  # after the netns

    path = tmp_path_factory.mktemp("policy")
    tok = build_char_tokenizer()
    model = build_tiny_model(
        tok, TinyModelConfig(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2), seed=1
    )
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


# ----------------------------------------------------------------------------- the order files run in
# `make test` runs `-n 2 --dist loadfile --no-loadscope-reorder`: each file goes whole to one worker, in the
# order below.  Longest first (measured seconds per file, tests/file_durations.json), so that the two workers
# finish together instead of one waiting alone on a long file that started last (longest-processing-time
# scheduling).  A file not in the table runs after the measured ones.  VERILOOP_RECORD_TEST_DURATIONS=1 updates
# the table's entries of the files the session ran from their setup + call + teardown times.
FILE_DURATIONS = Path(__file__).with_name("file_durations.json")


def _file_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def pytest_collection_modifyitems(config, items):
    seconds = json.loads(FILE_DURATIONS.read_text()) if FILE_DURATIONS.is_file() else {}
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        first_seen.setdefault(_file_of(item.nodeid), i)
    items.sort(key=lambda item: (-seconds.get(_file_of(item.nodeid), 0.0), first_seen[_file_of(item.nodeid)]))


_SPENT: dict[str, float] = {}


def pytest_runtest_logreport(report):
    if os.environ.get("VERILOOP_RECORD_TEST_DURATIONS") == "1":
        _SPENT[_file_of(report.nodeid)] = _SPENT.get(_file_of(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    if _SPENT and not hasattr(session.config, "workerinput"):  # the controller (or a run without xdist)
        # merged into the table: `make test` runs the vLLM files in a session of their own, after the main one
        old = json.loads(FILE_DURATIONS.read_text()) if FILE_DURATIONS.is_file() else {}
        spent = {**old, **{name: round(value, 1) for name, value in _SPENT.items()}}
        table = dict(sorted(spent.items(), key=lambda kv: -kv[1]))
        FILE_DURATIONS.write_text(json.dumps(table, indent=1) + "\n")
