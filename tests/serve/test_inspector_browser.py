"""The inspector in a real headless browser: Debian's Chromium driven by Playwright.

The server is uvicorn on 127.0.0.1 started by the test; the browser is /usr/bin/chromium
(never a browser Playwright downloads). Screenshots go to the test's tmp dir.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the serve extra (starlette, uvicorn) is not installed")
pytest.importorskip("playwright", reason="playwright (the dev extra) is not installed")

from inspector_support import PIPELINE, QUESTION, StoreRuns, make_runs, serve

CHROMIUM = os.environ.get("STEP_RUNTIME_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason=f"no Chromium at {CHROMIUM} (.ci/system-deps.sh installs Debian's chromium)",
    ),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return StoreRuns(make_runs(tmp_path_factory.mktemp("browser")))


@pytest.fixture(scope="module")
def url(runs):
    with serve(runs) as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    """A page that records dialogs, console errors and requests to other origins."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    one = context.new_page()
    one.dialogs, one.errors, one.requests = [], [], []
    one.on("dialog", lambda d: (one.dialogs.append(d.message), d.dismiss()))
    one.on("console", lambda m: one.errors.append(m.text) if m.type == "error" else None)
    one.on("request", lambda r: one.requests.append(r.url))
    yield one
    context.close()


def test_runs_list_shows_runs_and_filters(page, url, tmp_path):
    page.goto(url + "/")
    rows = page.locator("#runs tbody tr")
    assert sorted(rows.locator("td:first-child").all_inner_texts()) == ["failed", "good", "hostile"]
    page.select_option("select[name=status]", "failed")
    page.click("button[type=submit]")
    page.wait_for_url("**/?pipeline=&status=failed")
    assert page.locator("#runs tbody tr td:first-child").all_inner_texts() == ["failed"]
    page.select_option("select[name=status]", "running")
    page.click("button[type=submit]")
    page.wait_for_url("**/?pipeline=&status=running")
    assert page.locator("#runs tbody tr").count() == 0
    page.screenshot(path=str(tmp_path / "runs.png"), full_page=True)
    assert (tmp_path / "runs.png").stat().st_size > 0
    assert page.errors == [] and page.dialogs == []


def test_runs_list_updates_live(page, runs, tmp_path):
    """A run that starts while the list is open appears in it without a reload."""
    import sqlite3

    from click.testing import CliRunner

    from runtime.cli import cli

    store = str(tmp_path / "runs.db")
    with sqlite3.connect(runs.store.path) as src, sqlite3.connect(store) as dst:
        src.backup(dst)
    index = str(Path(runs.store.path).parent / "index.db")
    with serve(StoreRuns(store)) as url:
        page.goto(url + "/")
        assert page.locator("#runs tbody tr").count() == 3
        args = ["exec", PIPELINE, "--store", store, "--index", index, "--model", "extractive"]
        done = CliRunner().invoke(cli, [*args, "--run-id", "later", "--input", "question=q"])
        assert done.exit_code == 0, done.output
        later = page.locator("#runs tbody tr[data-run=later]")
        later.wait_for(timeout=15_000)
        assert "completed" in later.inner_text()
        assert later.locator("a").get_attribute("href") == "/inspect/runs/later"
        assert page.locator("#live").inner_text().startswith("live, updated")
    assert page.errors == []


def test_a_running_runs_page_follows_it_until_it_ends(page, runs):
    """The page of a running run reloads when its status or its events change."""

    class Running(StoreRuns):
        status = "running"

        def get_run(self, run_id):
            return {**super().get_run(run_id), "status": self.status}

    reader = Running(runs.store.path)
    with serve(reader) as url:
        page.goto(url + "/inspect/runs/good")
        assert page.locator("#run").get_attribute("data-status") == "running"
        reader.status = "completed"
        page.locator("#run[data-status=completed]").wait_for(timeout=15_000)
    assert page.errors == []


def test_run_timeline_and_model_call_prompt(page, url, runs, tmp_path):
    page.goto(url + "/")
    page.click("#runs a:text-is('good')")
    page.wait_for_url("**/inspect/runs/good")
    steps = [e["step_id"] for e in runs.trace("good") if e["type"] == "STEP"]
    shown = page.locator("#timeline table.steps tbody tr td:nth-child(2)").all_inner_texts()
    assert shown == steps
    assert page.locator("#timeline svg rect.bar").count() == len(steps)
    # the answer's call is open: its prompt (system message and the question) is visible
    last = page.locator("details.call").last
    assert last.get_attribute("open") is not None
    assert QUESTION in last.inner_text()
    first = page.locator("details.call").first
    assert not first.locator("pre.value").first.is_visible()
    first.locator("summary").click()
    assert first.locator("pre.value").first.is_visible()
    page.screenshot(path=str(tmp_path / "run.png"), full_page=True)
    assert page.errors == [] and page.dialogs == []


def test_context_pack_and_graph(page, url, runs, tmp_path):
    page.goto(url + "/inspect/runs/good#context")
    packs = runs.packs("good")
    assert page.locator("details.pack").count() == len(packs)
    items = page.locator("details.pack").last.locator("table.items tbody tr")
    assert items.count() == sum(len(s.get("items") or ()) for s in packs[-1]["sections"])
    drops = page.locator("details.pack").last.locator("table.drops tbody tr")
    assert drops.count() == len(packs[-1]["drops"]["items"])
    graph = page.locator("#graph svg.graph")
    assert graph.locator("g.node").count() == len(runs.graph("good")["nodes"])
    assert graph.bounding_box()["width"] > 200
    page.locator("#context").screenshot(path=str(tmp_path / "context.png"))
    assert page.errors == [] and page.dialogs == []


def test_nothing_is_fetched_from_another_origin(page, url):
    for path in ("/", "/inspect/runs/good", "/inspect/runs/hostile"):
        page.goto(url + path)
        page.wait_for_load_state("networkidle")
    assert page.requests and all(r.startswith(url) for r in page.requests)
