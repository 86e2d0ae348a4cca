"""Structure: imports only go down the layers (docs/concepts/architecture.md, "Layout"), lazy ones inside functions
included; functions stay under 60 lines."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "veriloop"
LAYERS = [
    ("__init__", "errors", "io", "logs", "seeding", "registry", "config", "options"),
    ("algorithms",),
    ("sandbox",),
    ("tasks",),
    ("rollout",),
    ("models",),
    ("verifiers",),
    ("evaluation",),
    ("prm", "preference", "judge"),
    ("training",),
    ("search",),
    ("report",),
    ("demo_runs",),
    ("demo", "pipeline", "doctor"),
    ("cli", "cli_help"),
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _imported(tree: ast.AST):
    """(line, veriloop package imported) for every import statement, wherever it sits."""
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "veriloop":
            parts = node.module.split(".")
            names = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1] for a in node.names if a.name.startswith("veriloop.")]
        for name in names:
            yield node.lineno, name


def test_every_package_has_a_layer():
    packages = {
        p.relative_to(ROOT).parts[0].removesuffix(".py")
        for p in ROOT.iterdir()
        if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").is_file())
    }
    assert packages <= set(LAYER), (
        f"put these in LAYERS (and the layout in docs/concepts/architecture.md): {packages - set(LAYER)}"
    )


def test_no_upward_imports():
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        own = path.relative_to(ROOT).parts[0].removesuffix(".py")
        for line, target in _imported(ast.parse(path.read_text())):
            if target in LAYER and LAYER[target] > LAYER[own]:
                upward.append(f"{path.relative_to(ROOT.parent)}:{line}: {own} imports {target}")
    assert not upward, "upward imports:\n" + "\n".join(upward)


# Inside training/, by role (src/veriloop/training/__init__.py): a module imports only its own layer and those below.
TRAINING_LAYERS = [
    ("run",),  # infrastructure: run directory, checkpoints, metrics, tracking, alarms, export, pre-flight
    ("loop",),  # the roles of one step
    ("distributed",),  # learner strategies across processes
    ("config", "option_scopes", "capabilities", "recipes"),  # the option tree
    ("trainer", "dry_run", "__init__"),  # the controller
]
TRAINING_LAYER = {name: i for i, names in enumerate(TRAINING_LAYERS) for name in names}
TRAINING = ROOT / "training"


def _training_part(module: str) -> str | None:
    """The part of training/ a dotted module (``veriloop.training.loop.learner``) belongs to, else None."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["veriloop", "training"] else None


def test_training_is_split_by_role_and_every_module_has_a_layer():
    parts = {
        p.name.removesuffix(".py") for p in TRAINING.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()
    }
    assert parts <= set(TRAINING_LAYER), f"put these in TRAINING_LAYERS: {parts - set(TRAINING_LAYER)}"
    assert {p.name for p in TRAINING.iterdir() if (p / "__init__.py").is_file()} == {"run", "loop", "distributed"}


def test_training_imports_go_down_its_roles():
    upward = []
    for path in sorted(TRAINING.rglob("*.py")):
        own = path.relative_to(TRAINING).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            modules = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            modules += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module == "veriloop.training":
                modules = [f"veriloop.training.{a.name}" for a in node.names]
            for module in modules:
                target = _training_part(module)
                if target in TRAINING_LAYER and TRAINING_LAYER[target] > TRAINING_LAYER[own]:
                    upward.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {own} imports {module}")
    assert not upward, "upward imports inside training/:\n" + "\n".join(upward)


def test_every_function_is_under_60_lines():
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 >= 60:
                long.append(
                    f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1}"
                )
    assert not long, "split these into named steps:\n" + "\n".join(long)


def _module_graph() -> dict[str, set[str]]:
    """veriloop module -> the veriloop modules it imports (lazy imports inside functions included; ``from pkg import
    name`` counts as importing ``pkg.name`` when that is a module)."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("veriloop"):
                targets |= {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                }
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                on_stack.discard(w)
                component.append(w)
            on_stack.discard(v)
            if component:
                found.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_between_files():
    """No two modules import each other, directly or round a longer circle, lazy imports included: a circle
    'resolved' by a lazy import is still one (a shared part belongs in a module both import)."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check finds one
    assert not (circles := _cycles(_module_graph())), f"import circles: {circles}"


def test_the_step_trace_names_the_roles_of_one_grpo_step():
    """scripts/step_trace.py (the architecture page's files-and-hops figure) runs, and the step it traces goes
    through every role: the controller, the collector, an engine, a verifier, the signal and the learner."""
    import json
    import subprocess
    import sys

    script = ROOT.parent.parent / "scripts" / "step_trace.py"
    out = subprocess.run([sys.executable, str(script), "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    trace = json.loads(out.stdout)
    for role in (
        "training/trainer.py",
        "training/loop/collect.py",
        "rollout/engine.py",
        "verifiers/base.py",
        "training/loop/signals.py",
        "training/loop/learner.py",
        "training/loop/objectives.py",
    ):
        assert role in trace["files"], role
    assert ["training/trainer.py", "training/loop/learner.py"] in trace["hops"]
    assert ["training/loop/objectives.py", "training/loop/learner.py"] not in trace["hops"]  # no round trip back
