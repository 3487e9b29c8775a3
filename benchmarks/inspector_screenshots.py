"""Screenshots of the run inspector for docs/serve.md (issue 33).

    python benchmarks/inspector_screenshots.py [OUT_DIR]     (default docs/images)

Runs pipelines/code_qa.yaml on the indexed sample (the runs the inspector's tests use:
tests/inspector_support.py), serves the inspector with uvicorn on 127.0.0.1 and takes
screenshots in Debian's Chromium (/usr/bin/chromium, driven by playwright): the runs
list, a run's timeline and model calls, and its context packs.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from inspector_support import StoreRuns, make_runs, serve  # noqa: E402

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def main(out: Path) -> None:
    """Write inspector-runs.png, inspector-run.png and inspector-context.png into `out`."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        runs = StoreRuns(make_runs(Path(tmp)))
        with serve(runs) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1200, "height": 420})
            page.goto(url + "/")
            page.screenshot(path=str(out / "inspector-runs.png"))
            page.set_viewport_size({"width": 1200, "height": 900})
            page.goto(url + "/inspect/runs/hostile")
            page.locator("details.call").nth(1).locator("summary").click()
            page.evaluate("window.scrollTo(0, document.getElementById('timeline').offsetTop)")
            page.screenshot(path=str(out / "inspector-run.png"))
            page.goto(url + "/inspect/runs/good")
            packs = page.locator("details.pack")
            for n in range(packs.count() - 1):  # only the answer's pack open
                packs.nth(n).locator("summary").click()
            page.evaluate("window.scrollTo(0, document.getElementById('context').offsetTop)")
            page.screenshot(path=str(out / "inspector-context.png"))
            browser.close()
    for name in ("runs", "run", "context"):
        print(out / f"inspector-{name}.png")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "images")
