"""The run browser's screenshots in the docs (docs/assets/report/*.png), one per view, from real run directories.

    python scripts/report_screenshots.py --run DEMO/grpo-process --search SEARCH_DIR \
        --compare DEMO/grpo DEMO/sft-control
                                         [--out docs/assets/report]

Each page is (re)written with ``veriloop report`` / ``veriloop compare`` first, then opened from ``file://`` in
Debian's headless Chromium (Playwright) at 1300 x 850.  The rollout view shows the latest record that an update learned
from with a non-zero advantage, its tokens coloured by advantage.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from veriloop.report.compare import write_compare
from veriloop.report.report import write_report

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a training run directory")
    ap.add_argument("--search", required=True, help="a search run directory")
    ap.add_argument("--compare", nargs="+", required=True, help="two or more training run directories")
    ap.add_argument("--out", default="docs/assets/report")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run, search = write_report(args.run), write_report(args.search)
    compare = write_compare(args.compare, Path(tempfile.mkdtemp()) / "compare.html")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=ARGS, env={**os.environ, "TMPDIR": "/tmp"})
        page = browser.new_page(viewport={"width": 1300, "height": 850})
        page.goto(run.resolve().as_uri() + "#overview")
        page.screenshot(path=out / "overview.png")
        page.click("#tab-curves")
        page.wait_for_function("Object.keys(window.veriloop.drawn).length >= window.veriloop.data.curves.panels.length")
        page.screenshot(path=out / "curves.png")
        page.click("#tab-rollouts")
        # the last step's first record that an update learned from with a non-zero advantage (PRM-scored if any)
        found = page.evaluate("""() => { const rs = window.veriloop.data.records, nz = r => r.learner && r.advantage &&
            (Array.isArray(r.advantage) ? r.advantage.some(Boolean) : true);
            const r = [...rs].reverse().find(r => nz(r) && r.prm_steps) || [...rs].reverse().find(nz) || rs[0];
            return [r.step, rs.filter(x => x.step === r.step).indexOf(r)]; }""")
        page.fill("#f-step", str(found[0]))
        page.click("#f-apply")
        page.click(f"#rec-list tr[data-k='{found[1]}']")
        page.screenshot(path=out / "rollouts.png")
        page.click("#tab-spot")
        page.click("#cards .card button[data-m='fine']")
        page.screenshot(path=out / "spot-check.png")
        page.goto(search.resolve().as_uri() + "#search")
        page.wait_for_timeout(800)
        page.screenshot(path=out / "search.png", full_page=False)
        page.goto(compare.resolve().as_uri() + "#curves")
        page.wait_for_timeout(800)
        page.screenshot(path=out / "compare.png")
        browser.close()
    print(f"wrote {', '.join(sorted(p.name for p in out.glob('*.png')))} in {out}")


if __name__ == "__main__":
    main()
