"""The run browser in a real headless Chromium (Debian's ``chromium``, driven by Playwright; nothing downloaded).

The pages are those of a real training run (the shipped base, a few steps, with evaluations and an alarm), a real
search run, a comparison, and a run holding tool calls and PRM step scores (records written as the trainer writes
them).  Each page loads from ``file://`` with no console error, every chart draws data, the rollout filter narrows
the list, token colouring switches, and a spot-check mark is kept: exported from the static page and read back by
``veriloop report --marks``, saved to the run directory by ``--serve``.  Without Chromium the tests are skipped,
unless ``VERILOOP_REQUIRE_BROWSER`` is set (``.ci/run`` sets it after installing the browser): then they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from veriloop.config import build_config
from veriloop.report.compare import write_compare
from veriloop.report.report import write_report
from veriloop.report.serve import start_server
from veriloop.rollout.records import Record, RecordStore
from veriloop.search.run import SearchConfig, run_search
from veriloop.training.config import TrainConfig
from veriloop.training.loop.token_values import TokenValueStore, record_key
from veriloop.training.trainer import Trainer

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
if not Path(CHROMIUM).exists() and not os.environ.get("VERILOOP_REQUIRE_BROWSER"):
    pytest.skip(
        "no Chromium here (apt-get install chromium); VERILOOP_REQUIRE_BROWSER=1 makes this a failure",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api") if not os.environ.get("VERILOOP_REQUIRE_BROWSER") else None
from playwright.sync_api import sync_playwright  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        # TMPDIR /tmp: Chromium's singleton socket path must stay short (a test's temporary directory is not)
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, env={**os.environ, "TMPDIR": "/tmp"})
        yield b
        b.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    base = {
        "policy": "builtin:base",
        "steps": 6,
        "rollout.prompts_per_step": 4,
        "rollout.group_size": 4,
        "eval_every": 3,
        "eval_problems": 16,
        "task.arithmetic.heldout_size": 16,
        "checkpoint_every": 100,
        "alarms.window": 4,
        "alarms.min_steps": 2,
        "threads": 1,
    }
    for name, over in {"a": {}, "b": {"optim.lr": 3e-4, "sampling.max_new_tokens": 26}}.items():
        Trainer(build_config(TrainConfig, {}, {**base, **over, "run_dir": str(root / name)}), progress=False).train()
        write_report(root / name)
    cfg = SearchConfig(
        strategy="single,best_of_n,mcts",
        scorer="verifier",
        mcts_value="verifier",
        budgets="2,4",
        problems=4,
        out=str(root / "search"),
    )
    run_search(cfg, progress=False)
    write_report(root / "search")
    write_compare([root / "a", root / "b"], root / "compare.html")
    tool_run(root / "tools")
    write_report(root / "tools")
    return root


def tool_run(run_dir: Path) -> None:
    """A run directory whose records hold tool calls (one failed) and PRM step scores, as the trainer writes them."""
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("algo: grpo\npolicy: builtin:base\n")
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.5, "accuracy": 0.5}) + "\n")
    ids = [ord(c) % 90 + 3 for c in "{a=2+3;a}[5]answer=5"]
    mask = [1] * 9 + [0] * 3 + [1] * 8
    calls = [
        [{"code": "a=2+3;a", "output": "5", "status": "ok", "seconds": 0.01, "start": 9, "tokens": 3}],
        [{"code": "1/0", "output": "ZeroDivisionError", "status": "error", "seconds": 0.01, "start": 9, "tokens": 3}],
    ]
    records = [
        Record(
            problem_id="p-1",
            group_id="1-0-0",
            prompt="2+3?",
            reference="5",
            prompt_ids=[4, 5],
            completion_ids=ids,
            completion="{a=2+3;a}[5]answer=5",
            behavior_logprobs=[-0.1] * len(ids),
            sampling={"temperature": 1.0, "seed": 10 + k},
            policy_version=0,
            finish_reason="eos",
            reward=1.0 - k,
            reward_components={"outcome": 1.0 - k},
            verifier="arithmetic-tool@1",
            verdict_outcome="correct" if k == 0 else "wrong",
            model_mask=mask,
            tool_calls=calls[k],
        )
        for k in range(2)
    ]
    RecordStore(run_dir / "rollouts", index=True).write(1, records)
    TokenValueStore(run_dir / "rollouts").write(
        1,
        [
            {
                "key": record_key(r, k),
                "advantage": 1.0 - 2 * k,
                "learner_logprob": [-0.2] * len(ids),
                "ratio": [1.5] * len(ids),
                "prm_steps": [[8, 0.9], [19, 0.7 - k]],
            }
            for k, r in enumerate(records)
        ],
    )


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1300, "height": 900}, accept_downloads=True)
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    return page, errors


def drawn(page) -> dict:
    return page.evaluate("window.veriloop.drawn")


def test_a_training_run_page_draws_filters_colours_and_keeps_marks(browser, runs, tmp_path):
    page, errors = open_page(browser, (runs / "a" / "report.html").as_uri())
    assert page.inner_text("#view-overview")  # summary, last step, config
    assert "flops.total" in page.inner_text("#view-overview")  # the compute ledger (training/run/compute.py)
    page.click("#tab-curves")
    page.wait_for_function("Object.keys(window.veriloop.drawn).length >= window.veriloop.data.curves.panels.length")
    charts = drawn(page)
    panels = [p["id"] for p in page.evaluate("window.veriloop.data.curves.panels")]
    assert {"reward", "evaluation", "kl_entropy", "length", "time"} <= set(panels)
    assert all(charts[f"chart-{p}"] > 0 for p in panels), charts  # every chart has drawn data
    assert charts["chart-evaluation"] == 2 * 2  # validation accuracy and wrong-steps rate at steps 3 and 6

    page.click("#tab-rollouts")
    everything = int(page.get_attribute("#count", "data-matches"))
    assert everything == 6 * 16  # a short run's page holds all its records
    page.fill("#f-step", "2-3")
    page.click("#f-apply")
    assert int(page.get_attribute("#count", "data-matches")) == 2 * 16
    page.select_option("#f-outcome", "correct")
    narrowed = int(page.get_attribute("#count", "data-matches"))
    assert 0 < narrowed < 2 * 16
    assert len(page.query_selector_all("#rec-list tr[data-k]")) == narrowed

    page.fill("#f-step", "")
    page.select_option("#f-outcome", "")
    page.click("#f-apply")
    # a record the update learned from with a non-zero advantage: its tokens are coloured green or red
    row = page.evaluate("window.veriloop.data.records.findIndex(r => r.learner && r.advantage)")
    assert row >= 0
    page.click(f"#rec-list tr[data-k='{row}']")
    by_advantage = page.eval_on_selector("#tokens .tok", "e => e.style.background")
    page.select_option("#colorby", "mismatch")
    by_mismatch = page.eval_on_selector("#tokens .tok", "e => e.style.background")
    assert by_advantage.startswith("rgba(") and by_advantage != by_mismatch

    page.click("#tab-spot")
    first = page.query_selector("#cards .card")
    record_id = first.get_attribute("id").removeprefix("spot-").replace("-", ":")
    first.query_selector("button[data-m='suspicious']").click()
    with page.expect_download() as download:
        page.click("#export")
    exported = tmp_path / "marks.json"
    download.value.save_as(exported)
    assert json.loads(exported.read_text())["marks"][record_id]["mark"] == "suspicious"
    assert errors == []

    done = subprocess.run(
        [sys.executable, "-m", "veriloop.cli", "report", str(runs / "a"), "--marks", str(exported)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "1 suspicious" in done.stdout
    assert json.loads((runs / "a" / "spot_check.json").read_text())["marks"][record_id]["mark"] == "suspicious"
    fresh, _ = open_page(browser, (runs / "a" / "report.html").as_uri() + "#spot")
    fresh.evaluate("localStorage.clear()")
    fresh.reload()
    assert "suspicious" in fresh.get_attribute(f"#spot-{record_id.replace(':', '-')}", "class")


def test_tool_calls_and_prm_step_scores_are_shown(browser, runs):
    page, errors = open_page(browser, (runs / "tools" / "report.html").as_uri() + "#rollouts")
    page.select_option("#f-tools", "failed")
    assert int(page.get_attribute("#count", "data-matches")) == 1
    page.click("#rec-list tr[data-k='0']")
    detail = page.inner_text("#rec-detail")
    assert "ZeroDivisionError" in detail and "1/0" in detail and "arithmetic-tool@1" in detail
    assert len(page.query_selector_all("#tokens .tok.tool")) == 3  # the tool's output: no colour, no loss
    assert [b.inner_text() for b in page.query_selector_all("#tokens .badge")] == ["PRM 0.9000", "PRM -0.3000"]
    assert errors == []


def test_the_served_page_reads_records_on_demand_and_saves_marks(browser, runs):
    httpd, _ = start_server(runs / "b")
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/"
        page, errors = open_page(browser, url + "#rollouts")
        page.wait_for_selector("#rec-list tr[data-k]")
        assert int(page.get_attribute("#count", "data-matches")) == 6 * 16
        # run b's budget of 26 tokens cuts many completions (its metrics count them): the filter finds each
        truncated = round(sum(json.loads(x)["truncation_rate"] * 16 for x in (runs / "b" / "metrics.jsonl").open()))
        assert 0 < truncated < 96
        page.select_option("#f-truncated", "yes")
        page.wait_for_function(f"document.querySelector('#count').dataset.matches === '{truncated}'")
        page.click("#tab-overview")
        assert "truncation_rising" in page.inner_text("#view-overview")  # said by the run, shown by the page
        page.click("#tab-rollouts")
        page.click("#rec-list tr[data-k='0']")
        page.wait_for_selector("#tokens")
        page.click("#tab-spot")
        card = page.wait_for_selector("#cards .card")
        record_id = card.get_attribute("id").removeprefix("spot-").replace("-", ":")
        card.query_selector("button[data-m='fine']").click()
        # page.evaluate awaits the fetch's promise (wait_for_function would take the promise itself as truthy)
        deadline = time.monotonic() + 30
        while record_id not in page.evaluate("fetch('/api/marks').then(r => r.json()).then(m => m.marks)"):
            assert time.monotonic() < deadline, "the mark never reached the server"
            time.sleep(0.1)
        assert json.loads((runs / "b" / "spot_check.json").read_text())["marks"][record_id]["mark"] == "fine"
        assert errors == [] or all("favicon" in e or "404" in e for e in errors)
    finally:
        httpd.shutdown()


def test_search_and_comparison_pages_draw(browser, runs):
    page, errors = open_page(browser, (runs / "search" / "report.html").as_uri() + "#search")
    page.wait_for_function("Object.keys(window.veriloop.drawn).length > 0")
    assert all(n > 0 for k, n in drawn(page).items() if k == "search-chart-all")
    assert page.query_selector_all("#s-detail .tree div")  # an MCTS tree
    assert page.query_selector_all("#s-detail table tr td")  # best-of-N's candidates with their scores
    page.click("#tab-overview")  # test-time compute per question (its policy, the shipped base: no training column)
    assert len(page.query_selector_all("#compute-test-time tr")) > 1
    page, errors2 = open_page(browser, (runs / "compare.html").as_uri())
    page.wait_for_function("Object.keys(window.veriloop.drawn).length > 0")
    assert all(n > 0 for n in drawn(page).values())
    page.click("#tab-config")
    rows = page.query_selector_all("#config-diff tr")
    assert any("optim.lr" in r.inner_text() for r in rows)
    assert errors == [] and errors2 == []
