"""Assert-style tests judged by the grader: the test code runs here, the program in the sandbox answers.

Each name the program defined is, in the tests' namespace, a proxy (``_Remote``); every request it makes
crosses the control pipe of one sandboxed process (``supervisor.Child``) and comes back as a strictly encoded
built-in value, a handle or an exception.  Nothing the program sends is a verdict.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import keyword
from dataclasses import dataclass

from veriloop.sandbox.limits import SandboxLimits
from veriloop.sandbox.probe import isolation
from veriloop.sandbox.supervisor import Child, SessionOver, parse_answer


class RemoteError(Exception):
    """An exception the program raised that is not one of Python's built-in ``Exception`` classes."""


@dataclass(frozen=True)
class TestRun:
    """How an assert-style run ended (``status`` as in ``RunResult``) and what the grader found."""

    __test__ = False  # not a pytest class
    status: str
    passed: int
    total: int
    first_fail: str = ""
    detail: str = ""
    wall_seconds: float = 0.0
    layers: str = ""


_SETUP = (
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.Pass,
)


def parse_tests(source: str) -> list[tuple[bool, object, str]]:
    """Assert-style test code -> ``[(is_test, code, text)]``, one entry per top-level statement, in order.

    Definitions, imports and assignments set up; every other statement (``assert``, a call such as
    HumanEval's ``check(candidate)``, ``try``/``if``/``for`` blocks) is one test, passed when it runs to its
    end.  Raises ``SyntaxError`` or ``ValueError`` (no test at all)."""
    tree = ast.parse(source)
    out = [
        (not isinstance(node, _SETUP), compile(ast.Module([node], []), "<test>", "exec"), ast.unparse(node))
        for node in tree.body
    ]
    if not any(is_test for is_test, _, _ in out):
        raise ValueError("the test code has no test statement (assert, or a call such as check(candidate))")
    return out


def run_tests(program: str, tests: list[tuple[bool, object, str]], limits: SandboxLimits | None = None) -> TestRun:
    """Run ``program`` in the sandbox, then evaluate ``tests`` (``parse_tests``) here, in the grader.

    The test code never enters the sandbox.  Each name the program defined is, in the tests' namespace, its
    value when it is a built-in value (``N = 5``) and otherwise a proxy: calling it, reading an attribute,
    iterating, ``len``, ``[]``, ``in`` and truth send one request to the sandbox, which answers with a
    strictly encoded built-in value, a handle to an object that is not one (a proxy again, equal only to
    itself), or the exception raised (re-raised here as the built-in class of that name, or ``RemoteError``).
    So every comparison and every ``assert`` is the grader's: what the program prints, exits with or patches
    in its own process decides nothing.  The test code is the grader's own code (it comes with the reference):
    it runs in this process, unsandboxed, and only its calls into the program cross the boundary."""
    child = Child(program, "serve", limits or SandboxLimits(), None, isolation())
    passed, total, first_fail = 0, sum(is_test for is_test, _, _ in tests), ""
    try:
        names = child.start_session()
        if names is not None:
            namespace = test_namespace(child, names)
            for is_test, code, text in tests:
                try:
                    exec(code, namespace)  # noqa: S102 - the reference's own test code, with proxies
                except SessionOver:
                    break
                except (Exception, SystemExit) as e:  # a failed assert, or the program's exception re-raised
                    if not first_fail:
                        first_fail = (
                            f"{'test' if is_test else 'setup'} {text[:200]!r} failed: "
                            + (f"{type(e).__name__}: {e}"[:300])
                        )
                    continue
                if child.over:  # the run ended inside this statement (and the test code caught it): no pass
                    break
                passed += is_test
        run = child.end_session()
        return TestRun(run.status, passed, total, first_fail or run.detail, run.detail, run.wall_seconds, run.layers)
    finally:
        child.close()


# Modules the tests may use under the name the program imported them by (the grader's own import, never the
# program's): pure computation, no side effect on import.  Anything else the program names as a module is not
# imported here ("this" prints, "antigravity" opens a browser, "venv.__main__" exits the grader).
TEST_MODULES = frozenset(
    "math cmath decimal fractions numbers statistics random itertools functools operator "
    "collections heapq bisect array copy re string textwrap unicodedata datetime calendar json "
    "typing dataclasses enum hashlib base64 struct".split()
)
_KINDS = ("value", "object", "module")


def test_namespace(child, names) -> dict:
    """The tests' namespace: the program's names (``_test_binding``) and then the grader's own ``__name__`` and
    ``__builtins__``, which no name the program reports can replace."""
    namespace = {}
    for name, (kind, body) in names:
        bound = _test_binding(child, name, kind, body)
        if bound is not _UNBOUND:
            namespace[name] = bound
    namespace.update({"__name__": "__veriloop_test__", "__builtins__": builtins})
    return namespace


def _test_binding(child, name: str, kind: str, body):
    """What a name the program defined is in the tests' namespace.  Only a plain identifier that is not a
    dunder (``__builtins__``) nor a keyword is bound: the names come from the program's process, which may
    report anything.  A built-in's name (``abs``, ``sorted``) is never the program's: a test's ``abs(f(x) - y)
    < 1e-9`` must not call the program's ``abs``.  A module the program imported is the grader's own import of
    it when it is one of ``TEST_MODULES``, never the program's (patched) one; any other is not bound."""
    if type(name) is not str or not name.isidentifier() or name.startswith("__") or keyword.iskeyword(name):
        return _UNBOUND
    if hasattr(builtins, name) or kind not in _KINDS:
        return _UNBOUND
    if kind == "value":
        return _decode(body)
    if kind == "module":
        return importlib.import_module(str(body)) if body in TEST_MODULES else _UNBOUND
    return _Remote(child, ("name", name), str(body))


_UNBOUND = object()  # the name stays unbound in the tests' namespace


def _encode(v, depth: int = 0):
    """The grader's side of the strict encoding (built-in values, and proxies by reference)."""
    t = type(v)
    if depth > 50:
        raise TypeError("value nested too deeply")
    if v is None or t in (bool, int, str, bytes):
        return v
    if t is float:
        return ("float", repr(v))
    if t in (list, tuple):
        return (t.__name__, [_encode(x, depth + 1) for x in v])
    if t in (set, frozenset):
        return (t.__name__, sorted((_encode(x, depth + 1) for x in v), key=repr))
    if t is dict:
        return ("dict", [(_encode(k, depth + 1), _encode(x, depth + 1)) for k, x in v.items()])
    if t is _Remote:
        return ("ref", object.__getattribute__(v, "_ref"))
    raise TypeError(f"only built-in values and the program's own objects can be passed to it, not {t.__name__}")


def _decode(encoded):
    """Inverse of the strict encoder: built-in values only."""
    if isinstance(encoded, tuple):
        if len(encoded) != 2 or not isinstance(encoded[0], str):
            raise ValueError("not an encoded value")
        kind, body = encoded
        if kind == "float":
            return float(body)
        if kind in ("list", "tuple", "set", "frozenset"):
            items = [_decode(x) for x in body]
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
        if kind == "dict":
            return {_decode(k): _decode(x) for k, x in body}
        raise ValueError(f"not an encoded value: {kind!r}")
    if encoded is None or type(encoded) in (bool, int, str, bytes):
        return encoded
    raise ValueError("not an encoded value")


def _remote_exception(name: str, message: str) -> Exception:
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and cls is not StopIteration:
        try:
            return cls(message)
        except Exception:  # an exception class with other required arguments (UnicodeDecodeError)
            pass
    return RemoteError(f"{name}: {message}")


class _Remote:
    """A name or object of the program, in the grader's test namespace.  Equal only to itself."""

    __slots__ = ("_child", "_ref", "_type")

    def __init__(self, child, ref, type_name):
        object.__setattr__(self, "_child", child)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_type", type_name)

    def _ask(self, op, payload=None):
        return _answer(object.__getattribute__(self, "_child"), op, object.__getattribute__(self, "_ref"), payload)

    def __call__(self, *args, **kwargs):
        return self._ask("call", (_encode(list(args)), _encode(dict(kwargs))))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", name)

    def __setattr__(self, name, value):
        raise TypeError("the tests cannot set attributes of the program's objects")

    def __iter__(self):
        it = self._ask("iter")
        return it if isinstance(it, _Remote) else iter(it)

    def __next__(self):
        return self._ask("next")

    def __len__(self):
        return self._ask("len")

    def __getitem__(self, key):
        return self._ask("getitem", _encode(key))

    def __contains__(self, item):
        return self._ask("contains", _encode(item))

    def __bool__(self):
        return self._ask("bool")

    def __repr__(self):
        return f"<the program's {object.__getattribute__(self, '_type')}>"


def _answer(child: Child, op: str, target, payload):
    """One request to the program, its answer as a value or a proxy, or its exception raised here."""
    kind, text = child.exchange(op, target, payload)
    try:
        if kind == "VALUE":
            return _decode(parse_answer(text))
        if kind == "HANDLE":
            index, type_name = parse_answer(text)
            return _Remote(child, ("handle", int(index)), str(type_name))
        if kind == "RAISE":
            name, message = parse_answer(text)
            error = _remote_exception(str(name), str(message))
        elif kind == "STOP":
            error = StopIteration()
        else:
            raise ValueError(kind)
    except OverflowError as e:
        child.protocol_error(str(e))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        child.protocol_error()
    raise error
