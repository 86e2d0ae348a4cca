"""Docs match code: the README's bound and its two commands, links and anchors that resolve, the site built strictly,
the generated reference pages current, --help documenting every option, and every shell command the README and the
Getting started pages show run (with tiny budgets where a command trains or evaluates)."""

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import markdown
import pytest
import torch
import yaml

from veriloop import cli
from veriloop.config import iter_fields
from veriloop.evaluation.run import EvalRunConfig
from veriloop.training.config import TrainConfig
from veriloop.training.recipes import SFT_COMMAND_DEFAULTS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 150
# Files that links may name before they exist: each is made by the command beside it, and checked once it exists.
GENERATED = {"docs/results/demo.svg": "make results-pages (the demo's figure, from its committed result)"}


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return module


# ------------------------------------------------------------------------------------------------ generated pages


def test_options_doc_is_current():
    """Rendered in a fresh interpreter: the page lists what is registered, and this test process may hold entries
    other tests registered in code (a test-only verifier is not part of the reference)."""
    gen = _script("gen_options")
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'scripts')!r}); import gen_options; "
        "sys.stdout.write(gen_options.render())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert not re.search(r"registered: [^)]*test-", gen.PATH.read_text())  # no test-only entry listed
    assert gen.PATH.read_text() == out.stdout, "docs/options.md is out of date: run python scripts/gen_options.py"


def test_commands_reference_is_current(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # what the script sets: argparse wraps at the terminal's width
    gen = _script("gen_cli_reference")
    assert gen.PATH.read_text() == gen.render(), (
        "docs/reference/commands.md is out of date: run python scripts/gen_cli_reference.py"
    )
    text = gen.PATH.read_text()
    commands = {name for name, _, _ in gen._subcommands(gen._parser())}
    assert {"train", "eval", "demo", "search", "prm"} <= commands
    assert all(f"## `veriloop {name}`" in text for name in commands)


@pytest.mark.parametrize("command, cls", [("train", TrainConfig), ("sft", TrainConfig), ("eval", EvalRunConfig)])
def test_help_documents_every_option(command, cls, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    for key, _tp, _default, help_text in iter_fields(cls):
        assert f"--{key}" in text
        assert help_text, f"{cls.__name__}.{key} has no help text"


# ---------------------------------------------------------------------------------------------------------- README


def _code(readme: str) -> list[str]:
    """Every fenced block and inline code span of the README."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", readme, re.DOTALL)
    rest = re.sub(r"```.*?```", "", readme, flags=re.DOTALL)
    return blocks + re.findall(r"`([^`\n]+)`", rest)


def _make_recipe(makefile: str, target: str) -> tuple[str, list[str]]:
    """(prerequisites, recipe lines) of a Makefile target."""
    m = re.search(rf"^{re.escape(target)}:(.*)\n((?:\t.*\n)*)", makefile, re.MULTILINE)
    assert m, f"Makefile has no target {target!r}"
    return m.group(1), [line.strip() for line in m.group(2).splitlines()]


def test_readme_is_a_front_page_of_at_most_150_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move the detail into docs/"
    text = README.read_text()
    # the demo's table and picture are generated (make results-pages) from its committed result: once there is one,
    # the README shows them
    if any((ROOT / "docs" / "results" / "demo_seeds").glob("*.json")):
        assert "<!-- BEGIN generated: demo-table (make results-pages) -->" in text
        assert "<!-- END generated: demo-table -->" in text
        assert "![the demo's held-out accuracy](docs/results/demo.svg)" in text


def test_readme_gives_exactly_two_commands_and_they_do_what_it_says():
    readme = README.read_text()
    section = readme.split("## Two commands on a fresh machine", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    for target, runs in (("demo", "$(BIN)/veriloop demo"), ("test", "$(BIN)/python -m pytest")):
        prerequisites, recipe = _make_recipe(makefile, target)
        assert "setup" in prerequisites.split(), f"make {target} must set up the venv first"
        assert any(line.startswith(runs) for line in recipe), (target, recipe)
    _, setup = _make_recipe(makefile, "$(VENV)/.installed")
    assert any("requirements/cpu.txt" in line for line in setup)
    assert "torch==2.13.0" in (ROOT / "requirements" / "cpu.txt").read_text()  # never a multi-GB CUDA build
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "make test" in ci
    _, docs = _make_recipe(makefile, "docs")
    assert any("mkdocs build --strict" in line for line in docs), docs


def test_every_command_and_script_the_readme_names_exists():
    readme = README.read_text()
    code = "\n".join(_code(readme))
    parser = cli._parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    prm_sub = next(a for a in sub["prm"]._actions if a.dest == "prm_command").choices
    named = set(re.findall(r"\bveriloop ([a-z][a-z-]*)", code))
    assert {"demo", "train", "eval", "search"} <= named  # the parse found the commands
    assert named <= set(sub), f"README names commands that do not exist: {sorted(named - set(sub))}"
    assert set(re.findall(r"\bveriloop prm ([a-z]+)", code)) <= set(prm_sub)
    scripts = set(re.findall(r"\bpython ((?:benchmarks|examples|scripts)/[\w/]+\.py)", readme))
    missing = sorted(p for p in scripts if not (ROOT / p).is_file())
    assert not missing, f"README names scripts that do not exist: {missing}"


def test_the_readme_s_tour_has_a_row_for_every_command():
    """The tour of the commands is the README's one hand-written list of them: the parser's commands (made from
    veriloop.cli_help.COMMANDS) and prm's sub-commands are each in it, so that a new command cannot be left out."""
    tour = README.read_text().split("## A tour of the commands", 1)[1].split("\n## ", 1)[0]
    rows = "\n".join(line.split(" | ")[0] for line in tour.splitlines() if line.startswith("| `veriloop "))
    sub = next(a for a in cli._parser()._actions if a.dest == "command").choices
    prm_sub = next(a for a in sub["prm"]._actions if a.dest == "prm_command").choices
    toured = set(re.findall(r"`veriloop ([a-z][a-z-]*)", rows))
    assert toured == set(sub), (
        f"README's tour: missing {sorted(set(sub) - toured)}, unknown {sorted(toured - set(sub))}"
    )
    assert set(re.findall(r"`(?:veriloop )?prm ([a-z]+)`", rows)) == set(prm_sub)


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_load(path):
    from veriloop.config import build_config, load_yaml

    if path.name == "r1.yaml":  # `veriloop pipeline`'s
        from veriloop.pipeline import PipelineConfig

        build_config(PipelineConfig, load_yaml(path), source=str(path))
        return
    base = SFT_COMMAND_DEFAULTS if path.name.startswith("sft") else {}  # what `veriloop sft` starts from
    build_config(TrainConfig, {**base, **load_yaml(path)}, source=str(path))


# ------------------------------------------------------------------------------------------------ links, anchors

PAGES = [README, *sorted(p for p in DOCS.rglob("*.md"))]


def _markdown_extensions() -> list:
    """The Markdown extensions of mkdocs.yml (names, with their settings), so headings get the site's ids."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)  # !!python tags stay text
    names, settings = [], {}
    for entry in config.get("markdown_extensions", []):
        name, options = next(iter(entry.items())) if isinstance(entry, dict) else (entry, {})
        names.append(name)
        settings[name] = {k: v for k, v in (options or {}).items() if k != "permalink"}
    return [names, settings]


_ANCHORS: dict = {}


def _anchors(page: Path, cache=_ANCHORS) -> set[str]:
    """The ids MkDocs gives the headings (and explicit ``{#id}``s) of a page: rendered with the site's extensions."""
    if page not in cache:
        names, settings = _markdown_extensions()
        html = markdown.markdown(page.read_text(), extensions=names, extension_configs=settings)
        cache[page] = set(re.findall(r'\bid="([^"]+)"', html))
    return cache[page]


def _links(text: str) -> list[str]:
    """The targets of the Markdown links and images of a page, outside code."""
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.DOTALL | re.MULTILINE)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text)


def test_every_link_and_anchor_of_the_readme_and_the_docs_resolves():
    broken, waiting = [], []
    for page in PAGES:
        for link in _links(page.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", link):  # https:, mailto:
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)} -> {link}"
            if path and not target.exists():
                if str(target.relative_to(ROOT)) in GENERATED:
                    waiting.append(where)
                else:
                    broken.append(f"{where}: no such file")
                continue
            if page.is_relative_to(DOCS) and not target.is_relative_to(DOCS):
                broken.append(f"{where}: outside docs/, so the site cannot serve it (name the file in `code`)")
                continue
            if anchor and target.suffix == ".md" and anchor not in _anchors(target):
                broken.append(f"{where}: no heading with the anchor #{anchor} in {target.relative_to(ROOT)}")
    assert broken == []
    if waiting:  # a generated file not made yet: reported, not failed (the link is checked once it exists)
        print("links to generated files not made yet:", *waiting, sep="\n  ")


def test_the_anchor_rule_is_the_sites():
    """The anchors the link test computes are the ones the site gives: a heading with code, punctuation, digits."""
    page = DOCS / "run-directory.md"
    assert "veriloop-demo-and-veriloop-pipeline-stop-then-continue" in _anchors(page)
    assert "4-make-base-never-overwrites-the-shipped-base" in _anchors(DOCS / "defaults.md")


# ------------------------------------------------------------------------------------------------------- the site


@pytest.mark.timeout(240)
def test_the_site_builds_strictly_and_offline(tmp_path):
    """`make docs`'s build, into a temporary directory: any warning (a broken link or anchor, a page missing from the
    nav's files, a docstring mkdocstrings cannot read) fails it. The session's network is loopback only."""
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-5000:]
    assert not re.search(r"^(WARNING|ERROR)\b", log, re.MULTILINE), log[-5000:]
    api = (site / "reference" / "api" / "algorithms" / "index.html").read_text()
    assert "group_advantages" in api and "population" in api  # the docstrings made it into the page
    assert "fonts.googleapis.com" not in (site / "index.html").read_text()  # theme.font: false


# -------------------------------------------------------------------------------------- commands the pages show

GETTING_STARTED = sorted((DOCS / "getting-started").glob("*.md"))
RUN_PAGES = [README, *GETTING_STARTED]
SHELL_FENCES = {"bash"}  # the one language of commands to run; other fences show text, code or files
OTHER_FENCES = {"text", "python", "yaml", "toml", "json", "jsonl"}

# Commands the pages show that this test does not run, and why.
EXCLUDED = {
    r"^make (demo|test)$": "the two commands themselves: make test is this suite, and make demo's `veriloop demo` "
    "runs below with tiny budgets",
    r"^make setup$": "creates .venv with pip, which this session already runs in (and it has no network)",
    r"^make docs$": "test_the_site_builds_strictly_and_offline builds the site",
    r"^\. \.venv/bin/activate$": "this session already runs in .venv",
    r"^python3 -m venv ": "creates an environment: installs need the network, which the test session lacks",
    r"^(\.venv/bin/)?pip install ": "installs packages from the network, which the test session lacks",
    r"^hf download ": "downloads from the Hugging Face Hub: the test session has no network; the page's own tiny "
    "model stands in for it",
}
# What the pages' commands name that a test machine does not have, and what stands in for it.
STAND_INS = {"models/Qwen2.5-0.5B-Instruct": "models/tiny-qwen2"}  # the random model the same page makes
# Tiny budgets appended to a command (argparse: the last value of a flag wins), by command.
TRAIN = [
    "--steps",
    "2",
    "--rollout.prompts_per_step",
    "2",
    "--rollout.group_size",
    "2",
    "--sampling.max_new_tokens",
    "16",
    "--eval_every",
    "0",
    "--device",
    "cpu",
    "--dtype",
    "float32",
]
TINY = {
    "train": TRAIN,
    "sft": TRAIN,
    "eval": ["--eval.max_problems", "4", "--eval.n_samples", "2", "--eval.max_new_tokens", "32"],
    "demo": [
        "--train.steps",
        "2",
        "--train.rollout.prompts_per_step",
        "4",
        "--train.rollout.group_size",
        "4",
        "--train.task.arithmetic.heldout_size",
        "16",
        "--eval.n_samples",
        "2",
    ],
    "search": ["--problems", "4", "--budgets", "1,2", "--bin_samples", "2"],
}


def _fences(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^```(\w*)[^\n]*\n(.*?)^```", text, re.DOTALL | re.MULTILINE)


def _commands(block: str) -> list[str]:
    """The commands of a shell block: a line, its `\\` continuations, or a line opening a here-document and its body."""
    out, lines = [], block.splitlines()
    while lines:
        line = lines.pop(0)
        while line.rstrip().endswith("\\") and lines:
            line = line.rstrip()[:-1] + " " + lines.pop(0).strip()
        heredoc = re.search(r"<<-?\s*'?(\w+)'?", line)
        if heredoc:
            end = lines.index(heredoc.group(1))
            line, lines = "\n".join([line, *lines[: end + 1]]), lines[end + 1 :]
        if line.split("#", 1)[0].strip() or heredoc:
            out.append(line.strip())
    return out


def _shown(page: Path) -> list[str]:
    return [c for lang, block in _fences(page.read_text()) if lang in SHELL_FENCES for c in _commands(block)]


def _excluded(command: str) -> str | None:
    bare = command.split("#", 1)[0].strip()
    return next((why for pattern, why in EXCLUDED.items() if re.search(pattern, bare)), None)


def test_the_pages_show_commands_only_in_bash_blocks_and_every_exclusion_is_used():
    fences = {(page.name, lang) for page in RUN_PAGES for lang, _ in _fences(page.read_text())}
    odd = sorted(f for f in fences if f[1] not in SHELL_FENCES | OTHER_FENCES)
    assert odd == [], f"a fence of another language (or none) would hide commands from this test: {odd}"
    shown = [c for page in RUN_PAGES for c in _shown(page)]
    unused = [p for p in EXCLUDED if not any(re.search(p, c.split("#", 1)[0].strip()) for c in shown)]
    assert unused == [], f"exclusions no page needs any more: {unused}"


def _in_process(argv: list[str]) -> bool:
    """A `veriloop ...` command without shell syntax runs through `veriloop.cli.main`, as the console script does."""
    return bool(argv) and argv[0] == "veriloop"


def _run(command: str, cwd: Path, capfd) -> tuple[int, str]:
    bare = command.split("#", 1)[0].strip() if "<<" not in command else command
    for real, stand_in in STAND_INS.items():
        bare = bare.replace(real, stand_in)
    shell = "<<" in bare or re.search(r"[|<>;&$`]", re.sub(r"'[^']*'|\"[^\"]*\"", "", bare))
    argv = [] if shell else shlex.split(bare)
    if _in_process(argv):
        if not {"-h", "--help"} & set(argv):
            sub = next((a for a in argv[1:] if not a.startswith("-")), "")
            argv += TINY.get(sub, [])
        try:
            code = cli.main(argv[1:])
        except SystemExit as e:  # argparse's --help
            code = e.code or 0
        out = capfd.readouterr()
        return code, out.out + out.err
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # `python`, `veriloop`: the session's
    env = {**os.environ, "PATH": path, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", "-c", bare], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_the_page_shows_runs(page, tmp_path, monkeypatch, capfd):
    """Run in order, from a directory that looks like the repository's root to them (its examples/ and configs/),
    so that a page's later commands read what its earlier ones wrote."""
    for name in ("examples", "configs"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    threads, ran = torch.get_num_threads(), 0
    torch.set_num_threads(1)  # as in `make test`'s workers: two-thread ops beside other work stall on 2 cores
    try:
        for command in _shown(page):
            if _excluded(command):
                continue
            code, out = _run(command, tmp_path, capfd)
            assert code == 0, f"{page.relative_to(ROOT)}: `{command}` exited {code}:\n{out[-3000:]}"
            ran += 1
    finally:
        torch.set_num_threads(threads)
    assert ran or page == README, f"{page.name} shows no command this test runs"
