"""A private Ray cluster that veriloop starts tries to reach nothing beyond loopback (issue 37).

``veriloop train --rollout.engine ray`` runs under strace, which logs every ``connect``, ``sendto`` and ``sendmsg``
of every process the run starts (the driver, GCS, raylet, the runtime-env and dashboard agents, the actors), in a
network namespace whose only interface is loopback: an attempt to reach another address fails there instead of
leaving the machine, and the test fails on any such attempt.  Before the fix Ray's dashboard process asked
169.254.169.254:80 (the cloud metadata address) and the machine's DNS resolver, with usage stats off.
"""

import re
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(400)

# the address of a connect/sendto/sendmsg, as strace prints it
ADDRESS = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"')


def is_loopback(address: str) -> bool:
    return address.startswith(("127.", "::ffff:127.")) or address in ("::1", "0.0.0.0", "::")


def beyond_loopback(trace: str) -> list[str]:
    """The lines of an strace log that try to reach an address other than loopback."""
    return [line for line in trace.splitlines() for m in ADDRESS.finditer(line) if not is_loopback(m[1] or m[2])]


def test_the_trace_reader_sees_an_attempt():
    """The reader the test relies on, on lines as strace 6 writes them."""
    trace = (
        '9615  connect(23, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("169.254.169.254")}, 16) = -1\n'
        '9576  connect(7, {sa_family=AF_INET, sin_port=htons(6379), sin_addr=inet_addr("127.0.0.1")}, 16) = 0\n'
        "9577  connect(8, {sa_family=AF_INET6, sin6_port=htons(53), sin6_flowinfo=htonl(0), "
        'inet_pton(AF_INET6, "2001:4860:4860::8888", &sin6_addr), sin6_scope_id=0}, 28) = -1\n'
        '9578  connect(9, {sa_family=AF_INET6, sin6_port=htons(1), inet_pton(AF_INET6, "::ffff:127.0.0.1", &x)}) = 0\n'
    )
    assert [line.split()[0] for line in beyond_loopback(trace)] == ["9615", "9577"]


def _loopback_wrapper() -> list[str]:
    """The command prefix that runs in a loopback-only namespace: none where the session is in one already."""
    from conftest import NETWORK

    if "loopback" in NETWORK:
        return []
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"this machine cannot make a loopback-only network namespace ({probe.stderr.decode().strip()})")
    # a new namespace's loopback starts down: bring it up (`ip link set lo up`) before the run starts
    return [
        "unshare",
        "-rn",
        sys.executable,
        "-c",
        "import fcntl, os, socket, struct, sys\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "fcntl.ioctl(s, 0x8914, struct.pack('16sH14s', b'lo', 0x49, bytes(14)))\n"
        "os.execvp(sys.argv[1], sys.argv[1:])",
    ]


def test_a_ray_backed_run_tries_to_reach_nothing_beyond_loopback(tiny_policy, tmp_path):
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed: nothing here can see every process's connection attempts")
    log = tmp_path / "trace.log"
    train = [
        sys.executable,
        "-m",
        "veriloop.cli",
        "train",
        "--policy",
        tiny_policy,
        "--run_dir",
        str(tmp_path / "run"),
        "--steps",
        "2",
        "--rollout.engine",
        "ray",
        "--rollout.workers",
        "1",
        "--rollout.prompts_per_step",
        "2",
        "--rollout.group_size",
        "2",
        "--sampling.max_new_tokens",
        "8",
        "--kl.beta",
        "0",
        "--task.arithmetic.heldout_size",
        "10",
        "--threads",
        "1",
    ]
    strace = [
        "strace",
        "-f",
        "-qq",
        "--seccomp-bpf",
        "-e",
        "trace=connect,sendto,sendmsg",
        "-e",
        "signal=none",
        "-o",
        str(log),
    ]
    out = subprocess.run([*_loopback_wrapper(), *strace, *train], capture_output=True, text=True, timeout=360)
    assert out.returncode == 0, out.stderr[-3000:]
    trace = log.read_text()
    assert 'inet_addr("127.0.0.1")' in trace  # the cluster's own traffic was seen: the trace covers its processes
    assert beyond_loopback(trace) == []
