"""The worker side of ``WorkerPool``: ``python -m veriloop.verifiers.pool_worker``, speaking over pipes.

A worker is a fresh interpreter, not a fork or a ``multiprocessing`` child, so it never
re-imports the parent's ``__main__`` (which breaks for ``python -``, ``python -c`` and
notebooks).  Protocol (``multiprocessing.connection`` framing of pickles on the worker's
original stdin and stdout; fds 0 and 1 are then pointed at /dev/null and stderr, so a library
that reads stdin or prints cannot corrupt it):

1. parent -> ``{"sys_path": [...], "preload": [...]}``; the worker extends ``sys.path``,
   imports each preload module, and answers ``("ready", pid)``;
2. parent -> ``(fn, args)``; worker -> ``("ok", fn(*args), "")`` or ``("error", None, why)``
   when the call raised or its result cannot be sent; the worker lives on;
3. parent -> ``None`` (or end of file): the worker exits.  It also exits when its parent dies.
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection


def _protocol_fds() -> tuple[int, int]:
    """Keep the original stdin/stdout for the protocol; give the code that runs here harmless ones."""
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # print() in a called function goes to stderr, never into the protocol
    sys.stdout = sys.stderr
    return proto_in, proto_out


def _exit_with_parent(parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:  # the parent died: this worker has no one to answer
            os._exit(0)


def _failure(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"


def main() -> None:
    proto_in, proto_out = _protocol_fds()
    rx, tx = Connection(proto_in, writable=False), Connection(proto_out, readable=False)
    parent = os.getppid()
    init = rx.recv()
    for path in init["sys_path"]:
        if path not in sys.path:
            sys.path.append(path)
    for module in init["preload"]:
        importlib.import_module(module)  # a failure here ends the worker: the parent reports its stderr
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    tx.send(("ready", os.getpid()))
    while True:
        try:
            raw = rx.recv_bytes()
        except EOFError:
            return
        try:
            message = pickle.loads(raw)
        except Exception as e:  # noqa: BLE001 - e.g. a function this interpreter cannot import
            tx.send(("error", None, f"cannot load the call: {_failure(e)}"))
            continue
        if message is None:
            return
        fn, args = message
        try:
            result = ("ok", fn(*args), "")
        except Exception as e:  # noqa: BLE001 - any failure of the call is reported, the worker lives on
            result = ("error", None, _failure(e))
        try:
            tx.send(result)
        except Exception as e:  # noqa: BLE001 - a result that cannot be pickled: nothing was written yet
            tx.send(("error", None, f"unsendable result: {_failure(e)}"))


if __name__ == "__main__":
    main()
