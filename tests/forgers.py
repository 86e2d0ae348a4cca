"""Programs that try to forge a pass of assert-style tests instead of solving them (issue 17).

Each defines a wrong ``is_prime`` (``add``, ``area``) and then attacks whatever reports the tests' results.
Against the previous harness (``code@1``, which ran the tests inside the graded process and read its reports),
the first eight in ``FORGERS`` and ``SHADOWING_FORGER`` scored a full pass; measured when issue 17 was built.
Against the grader-side evaluation (``code@2``) every one scores 0.
"""

PRIME_TESTS = "assert is_prime(7)\nassert is_prime(13)\nassert not is_prime(8)\nassert is_prime(2)"
ADD_TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\nassert add(10, 5) == 15"

# Shared forging routine: find the harness's reporting function in a frame, report PASS for every test and
# whatever "finished" looks like, then leave before the real tests run.
_FORGE = """
import os
def forge(frame):
    while frame is not None:
        report = frame.f_locals.get("report")
        if callable(report):
            for i in range(16):
                report("PASS", i)
                report("VALUE", str(i) + " True")
            report("DONE", "")
            os._exit(0)
        frame = frame.f_back
def is_prime(n):
    return False
"""

FORGERS = {
    "walks sys._getframe to the harness": _FORGE + "import sys\nforge(sys._getframe(1))\n",
    "walks inspect.stack": _FORGE + "import inspect\nfor info in inspect.stack():\n    forge(info.frame)\n",
    "walks a traceback's frames": _FORGE
    + ("try:\n    raise RuntimeError\nexcept RuntimeError as e:\n    forge(e.__traceback__.tb_frame)\n"),
    "walks a generator's frame": _FORGE
    + ("import sys\ndef g():\n    yield sys._getframe().f_back\nforge(next(g()))\n"),
    "forges from a signal handler": _FORGE
    + (
        "import signal, time\nsignal.signal(signal.SIGALRM, lambda s, f: forge(f))\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.01)\ntime.sleep(1)\n"
    ),
    "forges from a test call": (
        "import sys, os\ndef is_prime(n):\n    f = sys._getframe(1)\n    while f is not None:\n"
        "        report = f.f_locals.get('report')\n        if callable(report):\n"
        "            for i in range(16):\n                report('PASS', i)\n            report('DONE', '')\n"
        "            os._exit(0)\n        f = f.f_back\n    return False\n"
    ),
    "takes the token and writes to the control descriptor": (
        "import sys, os\ndef is_prime(n):\n    return False\nf = sys._getframe(1)\n"
        "token, fd = f.f_locals['token'], int(sys.argv[2])\n"
        "os.write(fd, ''.join(f'{token} PASS {i}\\n' for i in range(16)).encode() + f'{token} DONE \\n'.encode())\n"
        "os._exit(0)\n"
    ),
    "answers every call itself": (
        # the harness's own reader and reporter, used to serve True for every request
        "import sys, os\ndef is_prime(n):\n    return False\nf = sys._getframe(1)\n"
        "token, fd_in, fd_out = f.f_locals['token'], int(sys.argv[1]), int(sys.argv[2])\n"
        'os.write(fd_out, f\'{token} READY [("is_prime", ("object", "function"))]\\n\'.encode())\n'
        "for i in range(16):\n    os.write(fd_out, f'{token} PASS {i}\\n{token} VALUE True\\n'.encode())\n"
        "os.write(fd_out, f'{token} DONE \\n'.encode())\nos._exit(0)\n"
    ),
    "writes fake results to every inherited descriptor": (
        "import os\ndef is_prime(n):\n    return False\nfor fd in range(1, 64):\n    try:\n"
        "        os.write(fd, b'PASS 0\\nPASS 1\\nPASS 2\\nPASS 3\\nVALUE True\\nDONE\\n')\n    except OSError:\n"
        "        pass\n"
    ),
    "prints fake result lines then exits 0": (
        "import os\ndef is_prime(n):\n    return False\nprint('PASS 0\\nPASS 1\\nPASS 2\\nPASS 3\\nDONE')\n"
        "os._exit(0)\n"
    ),
    "patches builtins": (
        "import builtins\nbuiltins.bool = lambda *a: True\nbuiltins.AssertionError = type('Ok', (Exception,), {})\n"
        "builtins.isinstance = lambda *a: True\ndef is_prime(n):\n    return False\n"
    ),
    "returns an object that equals everything and is always true": (
        "class T:\n    def __eq__(self, other):\n        return True\n    def __bool__(self):\n        return True\n"
        "    def __str__(self):\n        return 'True'\n    __hash__ = object.__hash__\n"
        "def is_prime(n):\n    return T()\n"
    ),
    "returns a subclass of bool": (
        "class B(int):\n    def __bool__(self):\n        return True\n    def __eq__(self, o):\n        return True\n"
        "    __hash__ = int.__hash__\ndef is_prime(n):\n    return B(0)\n"
    ),
    "exhausts recursion inside the harness": (
        "import sys\ndef is_prime(n):\n    sys.setrecursionlimit(20)\n    return False\n"
    ),
    "recurses without end": "def is_prime(n):\n    return is_prime(n)\n",
}

# the attacks on an equality test: the program's add is wrong, its result tries to compare equal
EQ_FORGERS = {
    "always-equal result": (
        "class E:\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"
        "def add(a, b):\n    return E()\n"
    ),
    "int subclass that equals everything": (
        "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return I(0)\n"
    ),
    "patches abs and sorted in its own process": (
        "import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.sorted = lambda x: [5]\ndef add(a, b):\n    return -1\n"
    ),
}

# the attack on a tolerance test: a wrong area, and the program's own abs (which the tests would call if they ran
# in the program's namespace)
AREA_TESTS = "assert abs(area(1) - 3.14159) < 0.001\nassert abs(area(2) - 12.56637) < 0.001"
SHADOWING_FORGER = "def area(r):\n    return 0.0\ndef abs(x):\n    return 0\n"
