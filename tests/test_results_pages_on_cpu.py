"""Results pages are generated, never typed: the committed pages, figures and generated blocks are exactly what
``make results-pages`` (``scripts/render_results.py``) makes from the committed JSON results."""

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _renderer():
    spec = importlib.util.spec_from_file_location("render_results", ROOT / "scripts" / "render_results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass of the module looks itself up there
    spec.loader.exec_module(module)
    return module


def test_the_committed_results_pages_are_what_the_renderer_makes():
    render = _renderer()
    files = render.render_all(ROOT)
    stale = [f"{p.relative_to(ROOT)} ({'to delete' if files[p] is None else 'differs'})" for p in render.stale(files)]
    assert not stale, (
        "the results pages are not what the committed results make: run `make results-pages` and "
        f"commit what it writes; stale: {', '.join(stale)}"
    )
    pages = sorted(p.name for p in files if p.parent == ROOT / "docs" / "results" and p.suffix == ".md")
    assert "index.md" in pages and all(render.PAGE_NAME.match(p[:-3]) for p in pages), pages
    index = files[ROOT / "docs" / "results" / "index.md"].decode()
    for page in pages:  # the index is the Results entry point: it links every page
        assert page == "index.md" or f"]({page})" in index, page


def test_every_committed_result_is_stamped_and_no_quick_run():
    for source in _renderer().sources(ROOT):
        for f, r in zip(source.files, source.results):
            assert {"commit", "command", "machine", "date"} <= set(r["stamp"]), f
            assert not r["stamp"].get("quick"), f


# ---------------------------------------------------------------- the renderer on a tree of its own

TOY = """
from matplotlib.figure import Figure

from common import link, svg

PAGE = "toy-results"


def render(results):
    return "# Toy results\\n\\n" + "".join(f"- {r['stamp']['commit']}: {r['value']}\\n" for r in results)


def _figure(results):
    fig = Figure(figsize=(3, 2))
    fig.add_subplot().plot([r["value"] for r in results])
    return svg(fig)


def _table(results, where):
    return f"| value |\\n|---|\\n| {results[-1]['value']} |\\n\\n![plot]({link('docs/results/toy.svg', where)})"


figures = {"toy.svg": _figure}
blocks = {"toy-table": _table}
"""


def _stamp(commit: str, **more) -> dict:
    return {
        "commit": commit,
        "command": "python benchmarks/toy.py",
        "machine": "M, 2 CPUs",
        "date": "2026-01-02 03:04 UTC",
        **more,
    }


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "common.py", tmp_path / "benchmarks" / "common.py")
    (tmp_path / "benchmarks" / "toy.py").write_text(TOY)
    results = tmp_path / "docs" / "results" / "toy"
    results.mkdir(parents=True)
    (results / "1-first.json").write_text(json.dumps({"stamp": _stamp("aaa"), "value": 3}))
    (results / "2-second.json").write_text(json.dumps({"stamp": _stamp("bbb"), "value": 5}))
    (tmp_path / "docs" / "results" / "typed-by-hand.md").write_text("# Typed\n")
    block = "<!-- BEGIN generated: toy-table (make results-pages) -->\nold\n<!-- END generated: toy-table -->\n"
    (tmp_path / "README.md").write_text(f"# Toy\n\nBefore.\n\n{block}\nAfter.\n")
    (tmp_path / "docs" / "guide").mkdir()
    (tmp_path / "docs" / "guide" / "page.md").write_text(f"# Guide\n\n{block}")
    return tmp_path


def test_pages_figures_index_and_blocks_are_made_from_the_results(tree):
    render = _renderer()
    files = render.render_all(tree)
    results = tree / "docs" / "results"
    page = files[results / "toy-results.md"].decode()
    assert page.startswith("# Toy results\n\n- aaa: 3\n- bbb: 5\n")  # every result, in file-name order
    assert "make results-pages" in page and "docs/results/toy/" in page
    index = files[results / "index.md"].decode()
    assert "| [Toy results](toy-results.md) | `benchmarks/toy.py` | `toy/1-first.json` | `aaa` | M, 2 CPUs |" in index
    assert "| `toy/2-second.json` | `bbb` |" in index
    assert files[results / "typed-by-hand.md"] is None  # nothing makes it: deleted
    svg = files[results / "toy.svg"]
    assert svg.startswith(b"<?xml") and svg == render.render_all(tree)[results / "toy.svg"]  # the same bytes again
    assert b"<dc:date>" not in svg
    readme = files[tree / "README.md"].decode()
    assert readme == (
        "# Toy\n\nBefore.\n\n<!-- BEGIN generated: toy-table (make results-pages) -->\n"
        "| value |\n|---|\n| 5 |\n\n![plot](docs/results/toy.svg)\n"
        "<!-- END generated: toy-table -->\n\nAfter.\n"
    )
    guide = files[tree / "docs" / "guide" / "page.md"].decode()
    assert "![plot](../results/toy.svg)" in guide  # links relative to the file the block stands in

    assert render.main([], root=tree) == 0  # writes them, deletes the typed page
    assert not (results / "typed-by-hand.md").exists() and (results / "toy.svg").read_bytes() == svg
    assert render.main(["--check"], root=tree) == 0 and not render.stale(render.render_all(tree))
    (tree / "README.md").write_text((tree / "README.md").read_text().replace("| 5 |", "| 6 |"))  # typed over
    assert render.main(["--check"], root=tree) == 1
    assert render.stale(render.render_all(tree)) == [tree / "README.md"]


def test_a_block_nothing_renders_a_broken_block_and_a_quick_result_are_refused(tree):
    render = _renderer()
    page = tree / "docs" / "guide" / "page.md"
    page.write_text("<!-- BEGIN generated: no-such (make results-pages) -->\n<!-- END generated: no-such -->\n")
    with pytest.raises(SystemExit, match="'no-such' has no renderer"):
        render.render_all(tree)
    page.write_text("<!-- BEGIN generated: toy-table (make results-pages) -->\nno end\n")
    with pytest.raises(SystemExit, match="without its"):
        render.render_all(tree)
    page.write_text("# Guide\n")
    (tree / "docs" / "results" / "toy" / "3-quick.json").write_text(json.dumps({"stamp": _stamp("c", quick=True)}))
    with pytest.raises(SystemExit, match="--quick result"):
        render.render_all(tree)


def test_a_page_name_must_be_lowercase_with_hyphens(tree):
    toy = tree / "benchmarks" / "toy.py"
    toy.write_text(toy.read_text().replace('PAGE = "toy-results"', 'PAGE = "Toy_Results"'))
    with pytest.raises(SystemExit, match="lowercase"):
        _renderer().render_all(tree)


def test_results_without_a_module_to_render_them_are_refused(tree):
    (tree / "docs" / "results" / "orphan").mkdir()
    (tree / "docs" / "results" / "orphan" / "1.json").write_text(json.dumps({"stamp": _stamp("d")}))
    with pytest.raises(SystemExit, match="no benchmarks/orphan.py"):
        _renderer().render_all(tree)


def test_the_makefile_target_runs_the_renderer():
    make = (ROOT / "Makefile").read_text()
    assert "\nresults-pages:" in make
    recipe = make.split("\nresults-pages:")[1].split("\n\n")[0]
    assert "scripts/render_results.py" in recipe
