"""The results pages, made from the committed results and never typed: ``make results-pages``.

    python scripts/render_results.py           # write docs/results/*.md and index.md, the figures, the blocks
    python scripts/render_results.py --check   # write nothing; exit 1 naming every file that differs

Each folder ``docs/results/<module>/`` holds the committed JSON results of ``benchmarks/<module>.py`` (stamped by
``benchmarks/common.py``'s ``save``), passed to the module's renderers as a list in file-name order (name them
``1-before.json``, ``2-after.json``, ... where the order matters).  The module says how they read:

* ``PAGE = "some-name"`` and ``render(results: list[dict]) -> str``: the page ``docs/results/some-name.md``
  (lowercase, hyphens; its first line ``# Title``);
* ``figures = {"some-name.svg": fn}``, optional: ``fn(results) -> str | bytes`` is written to
  ``docs/results/some-name.svg`` (``common.svg`` makes a matplotlib figure the same bytes on every run);
* ``blocks = {"block-name": fn}``, optional: ``fn(results, where) -> str`` is the text of every generated block of
  that name in ``README.md`` and ``docs/**/*.md`` (``where``: that file's path from the repository's root, for
  relative links: ``common.link``).  A generated block is the text between these two lines, which stay::

    <!-- BEGIN generated: block-name (make results-pages) -->
    <!-- END generated: block-name -->

``docs/results/index.md`` lists every page with the stamp (commit, machine, date) of each of its results.  Every
other file directly in ``docs/results/`` is made here too: one that nothing makes any more is deleted (``--check``
names it).  ``tests/test_results_pages_on_cpu.py`` checks that the committed files are what this makes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
PAGE_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
BLOCK = re.compile(
    r"^<!-- BEGIN generated: (?P<name>[A-Za-z0-9_.-]+) \(make results-pages\) -->\n"
    r"(?P<body>.*?)"
    r"^<!-- END generated: (?P=name) -->$",
    re.S | re.M,
)
BEGIN = re.compile(r"^<!-- BEGIN generated: (\S+)", re.M)


@dataclass
class Source:
    """One benchmark module with committed results."""

    name: str  # the module's name and its results' folder
    module: ModuleType
    files: list[Path]
    results: list[dict] = field(default_factory=list)

    @property
    def page(self) -> str | None:
        return getattr(self.module, "PAGE", None)


def _import(root: Path, name: str) -> ModuleType:
    path = root / "benchmarks" / f"{name}.py"
    if not path.is_file():
        raise SystemExit(f"docs/results/{name}/ holds results, but there is no benchmarks/{name}.py to render them")
    if str(path.parent) not in sys.path:  # the benchmarks import their neighbours (common, peers, ...)
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"_results_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # what a dataclass of the module looks itself up in
    spec.loader.exec_module(module)
    return module


def sources(root: Path = ROOT) -> list[Source]:
    """Every ``docs/results/<module>/`` holding JSON results, with its module and results, by name."""
    out = []
    for folder in sorted(p for p in (root / "docs" / "results").iterdir() if p.is_dir()):
        files = sorted(folder.glob("*.json"))
        if not files:
            continue
        source = Source(folder.name, _import(root, folder.name), files)
        source.results = [json.loads(f.read_text(encoding="utf-8")) for f in files]
        for f, r in zip(files, source.results):
            if not isinstance(r, dict) or not isinstance(r.get("stamp"), dict):
                raise SystemExit(f"{f.relative_to(root)}: not a stamped result (no 'stamp' object)")
            if r["stamp"].get("quick"):
                raise SystemExit(f"{f.relative_to(root)}: a --quick result (a smoke test) is no result to publish")
        has = [hasattr(source.module, a) for a in ("PAGE", "render")]
        if any(has) and not all(has):
            raise SystemExit(f"benchmarks/{folder.name}.py: a page needs both PAGE and render(results)")
        if not (all(has) or getattr(source.module, "blocks", None) or getattr(source.module, "figures", None)):
            raise SystemExit(
                f"benchmarks/{folder.name}.py renders nothing (no PAGE/render, blocks or figures) for "
                f"docs/results/{folder.name}/"
            )
        if source.page is not None and not PAGE_NAME.match(source.page):
            raise SystemExit(f"benchmarks/{folder.name}.py: PAGE {source.page!r} must be lowercase words and hyphens")
        out.append(source)
    return out


def _title(page: str, fallback: str) -> str:
    first = page.splitlines()[0] if page else ""
    return first[2:].strip() if first.startswith("# ") else fallback


def index(root: Path, made: list[tuple[Source, str]]) -> str:
    lines = [
        "# Results",
        "",
        "Every number on these pages comes from a JSON result committed under `docs/results/<benchmark>/`, "
        "stamped with the commit, the command, the machine and the date that made it.  The pages are rendered "
        "from those files by `make results-pages` (`scripts/render_results.py`), never typed, and a test checks "
        "that they are up to date.  To add a result: run the benchmark (its command is in each result's stamp), "
        "copy its JSON into the benchmark's folder, and run `make results-pages`.",
        "",
        "| page | benchmark | result | commit | machine | date |",
        "|---|---|---|---|---|---|",
    ]
    for source, page in made:
        if source.page is not None:
            what = f"[{_title(page, source.page)}]({source.page}.md)"
        else:  # figures and generated blocks only
            what = ", ".join(
                [f"`{f}`" for f in getattr(source.module, "figures", None) or {}]
                + [f"block `{b}`" for b in getattr(source.module, "blocks", None) or {}]
            )
        for i, (f, r) in enumerate(zip(source.files, source.results)):
            s = r["stamp"]
            first = what if i == 0 else ""
            bench = f"`benchmarks/{source.name}.py`" if i == 0 else ""
            cells = [
                first,
                bench,
                f"`{source.name}/{f.name}`",
                f"`{s.get('commit', '')}`",
                s.get("machine", ""),
                s.get("date", ""),
            ]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _footer(source: Source) -> str:
    return (
        f"\n---\n\n*Generated by `make results-pages` from the results in `docs/results/{source.name}/` "
        f"(made by `benchmarks/{source.name}.py`); edit the renderer or the results, not this page.*\n"
    )


def markdown_files(root: Path) -> list[Path]:
    """Where generated blocks may stand: README.md and docs/**/*.md (not the results pages themselves)."""
    docs = root / "docs"
    files = [root / "README.md"] if (root / "README.md").is_file() else []
    return files + sorted(p for p in docs.rglob("*.md") if not p.is_relative_to(docs / "results"))


def fill_blocks(text: str, where: str, renderers: dict) -> str:
    """``text`` with every generated block's body made anew by its renderer."""
    names = BEGIN.findall(text)
    blocks = list(BLOCK.finditer(text))
    if len(names) != len(blocks):
        raise SystemExit(
            f"{where}: a `<!-- BEGIN generated: NAME (make results-pages) -->` line without its "
            "`<!-- END generated: NAME -->` line (or the BEGIN line is not word for word)"
        )

    def body(match: re.Match) -> str:
        name = match["name"]
        if name not in renderers:
            raise SystemExit(
                f"{where}: generated block {name!r} has no renderer (known: {sorted(renderers)}); a "
                "benchmark module with results in docs/results/<module>/ registers it in `blocks`"
            )
        source, fn = renderers[name]
        made = fn(source.results, where).strip("\n")
        return (
            f"<!-- BEGIN generated: {name} (make results-pages) -->\n"
            + (made + "\n" if made else "")
            + f"<!-- END generated: {name} -->"
        )

    return BLOCK.sub(body, text)


def render_all(root: Path = ROOT) -> dict[Path, bytes | None]:
    """Every file this makes, with its bytes (``None``: a file in docs/results/ that nothing makes, to delete)."""
    results_dir = root / "docs" / "results"
    out: dict[Path, bytes | None] = {}
    made, renderers = [], {}
    for source in sources(root):
        page = ""
        if source.page is not None:
            page = source.module.render(source.results)
            out[results_dir / f"{source.page}.md"] = (page.rstrip("\n") + "\n" + _footer(source)).encode()
        made.append((source, page))
        for filename, fn in (getattr(source.module, "figures", None) or {}).items():
            data = fn(source.results)
            out[results_dir / filename] = data.encode() if isinstance(data, str) else data
        for name, fn in (getattr(source.module, "blocks", None) or {}).items():
            if name in renderers:
                raise SystemExit(
                    f"generated block {name!r} registered twice: by benchmarks/"
                    f"{renderers[name][0].name}.py and benchmarks/{source.name}.py"
                )
            renderers[name] = (source, fn)
    out[results_dir / "index.md"] = index(root, made).encode()
    for path in results_dir.iterdir():
        if path.is_file() and path not in out:
            out[path] = None  # nothing makes it: results pages are generated, never typed
    for path in markdown_files(root):
        text = path.read_text(encoding="utf-8")
        if "<!-- BEGIN generated:" in text:
            new = fill_blocks(text, path.relative_to(root).as_posix(), renderers)
            if new != text:
                out[path] = new.encode()
    return out


def stale(files: dict[Path, bytes | None]) -> list[Path]:
    """The files whose committed bytes are not what the renderer makes."""

    def differs(path: Path, data: bytes | None) -> bool:
        return path.exists() if data is None else not path.is_file() or path.read_bytes() != data

    return sorted(p for p, data in files.items() if differs(p, data))


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every file that differs")
    args = p.parse_args(argv)
    files = render_all(root)
    changed = stale(files)
    for path in changed:
        what = "delete" if files[path] is None else "write"
        if args.check:
            print(f"stale: {path.relative_to(root)} (would {what})")
        elif files[path] is None:
            path.unlink()
            print(f"deleted {path.relative_to(root)} (nothing makes it)")
        else:
            path.write_bytes(files[path])
            print(f"wrote {path.relative_to(root)}")
    if args.check and changed:
        print("the results pages are not what the committed results make: run `make results-pages`", file=sys.stderr)
        return 1
    if not changed:
        print("results pages up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
