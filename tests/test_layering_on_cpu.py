"""Structure: imports only go down the layers (docs/concepts/architecture.md, "Layout"), lazy ones inside functions
included; functions stay under 60 lines."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "veriloop"
LAYERS = [
    ("__init__", "errors", "io", "logs", "seeding", "registry", "config", "options"),
    ("algorithms",),
    ("tasks",),
    ("rollout",),
    ("models",),
    ("verifiers",),
    ("evaluation",),
    ("prm",),
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


def test_every_function_is_under_60_lines():
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 >= 60:
                long.append(
                    f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1}"
                )
    assert not long, "split these into named steps:\n" + "\n".join(long)
