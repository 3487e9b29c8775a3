"""The run inspector shows hostile run data as text: nothing from a run executes in a browser.

A question, a retrieved file, a model reply, a step id, a pack label or a run id may hold
markup, quotes, `javascript:` URLs or terminal escapes. Every page is built with each such
value escaped (fuzzed here over every field the pages show), and a Content-Security-Policy
without inline script stands behind that. In a real Chromium, a run whose question and
model replies carry `<script>`, `onerror` and terminal escapes fires no dialog and shows
the text literally.
"""

from __future__ import annotations

import os
from html.parser import HTMLParser
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.serve import _pages

# the tags and attributes the pages themselves write; anything else came from data
TAGS = {
    "html", "head", "meta", "title", "link", "script", "body", "header", "main", "a", "h1",
    "h2", "h4", "nav", "table", "thead", "tbody", "tr", "th", "td", "span", "div", "b", "p",
    "pre", "details", "summary", "section", "code", "form", "label", "select", "option",
    "button", "svg", "defs", "marker", "path", "g", "rect", "text",
}  # fmt: skip
ATTRS = {
    "lang", "charset", "name", "content", "rel", "href", "src", "defer", "class", "id",
    "data-run", "data-status", "data-poll", "data-events", "method", "action", "value",
    "selected", "type", "aria-live", "open", "xmlns", "width", "height", "viewbox", "role",
    "aria-label", "refx", "refy", "markerwidth", "markerheight", "orient", "d", "x", "y",
    "rx", "marker-end", "text-anchor",
}  # fmt: skip


class Tags(HTMLParser):
    """Every start tag with its attributes, as a browser's tokenizer would see them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.seen: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def check(page: str) -> Tags:
    parser = Tags()
    parser.feed(page)
    scripts = 0
    for tag, attrs in parser.seen:
        assert tag in TAGS, tag
        for name, value in attrs:
            assert name in ATTRS, (tag, name)
            if name in ("href", "src"):
                assert value is not None
                assert value.startswith(("/", "#", "data:,")), value  # never javascript:
        scripts += tag == "script"
    assert scripts == 1
    assert "\x1b" not in page
    return parser


EVIL = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "' onmouseover='alert(1)",
    "javascript:alert(1)",
    "\x1b[31mred\x1b[0m\x07\x00",
    "</pre></td></table></svg><script>",
    "&lt;script&gt;",
    "]]><!--",
]
text = st.one_of(st.sampled_from(EVIL), st.text(max_size=40))


def hostile_page(v: list[str]) -> str:
    """A run page with a hostile value in every field the page shows."""
    run: dict[str, Any] = {
        "run_id": v[0], "pipeline": v[1], "status": v[2], "created_at": 1.0, "seconds": v[3],
        "steps": v[4], "error": {"code": v[5], "message": v[6]}, "inputs": {v[7]: v[8]},
        "output": v[9],
    }  # fmt: skip
    events: list[dict[str, Any]] = [
        {"type": "RETRY", "step_id": v[10], "seq": 1},
        {"type": "STEP", "step_id": v[10], "action": v[11], "attempt": v[12], "seq": 2,
         "duration_ms": 1.5, "ts": 10.0, "outcome": v[13], "next": v[14]},
        {"type": "MODEL_CALL", "step_id": v[10], "model": v[15], "seq": 3, "reply": v[16],
         "messages": [{"role": v[17], "content": v[18],
                       "tool_calls": [{"id": v[19], "function": {"name": v[0], "arguments": v[1]}}]},
                      v[2]]},
    ]  # fmt: skip
    packs = [
        {"seq": v[3], "pack_id": v[4], "step_id": v[10], "model": v[15], "prompt_budget": v[5],
         "tokens": {"prompt": v[6]}, "adherence": [{"section": v[7], "verdict": v[8]}],
         "sections": [{"type": v[7], "budget": v[9], "fraction": v[11], "tokens": v[12],
                       "reason": v[13], "items": [{"id": v[14], "source": v[15], "score": v[16],
                                                   "labels": [v[17], v[18]], "tokens": v[19],
                                                   "reason": v[0]}]}],
         "drops": {"coverage": v[1], "tokens_removed": v[2],
                   "items": [{"id": v[3], "reason": v[4], "by": v[5], "note": v[6]}]}},
        {"seq": v[8], "sections": v[9]},  # not a pack: shown as stored
    ]  # fmt: skip
    graph = {
        "entry": v[10],
        "nodes": [{"id": v[10], "action": v[11]}, {"id": v[12] + "x", "action": v[13], "end": True}],
        "edges": [{"source": v[10], "target": v[12] + "x", "label": v[14]},
                  {"source": v[12] + "x", "target": v[10], "label": v[15]}],
    }  # fmt: skip
    reports = [{"name": v[16], "metrics": {v[17]: v[18]}, v[19]: v[0]}]
    return _pages.run_page(run, events, packs, graph, reports)


def test_the_evil_strings_show_as_text_in_a_run_page():
    for evil in EVIL:
        parser = check(hostile_page([evil] * 20))
        shown = "".join(parser.text)
        assert evil.replace("\x1b", "\\x1b").replace("\x07", "\\x07").replace("\x00", "\\x00") in (
            shown
        )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(text, min_size=20, max_size=20))
def test_fuzzed_values_never_make_markup_in_a_run_page(values):
    check(hostile_page(values))


@settings(max_examples=60, deadline=None)
@given(st.lists(text, min_size=6, max_size=6))
def test_fuzzed_values_never_make_markup_in_the_runs_list(v):
    rows = [
        {"run_id": v[0], "pipeline": v[1], "status": v[2], "created_at": 2.0, "seconds": v[3],
         "steps": v[4], "error": {"code": v[5]}}
    ]  # fmt: skip
    check(_pages.runs_page(rows, [v[1], v[3]], v[1], v[2]))
    check(_pages.not_found(v[0]))


CHROMIUM = os.environ.get("STEP_RUNTIME_CHROMIUM", "/usr/bin/chromium")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM}")
def test_a_hostile_run_fires_no_dialog_and_shows_its_text_literally(tmp_path):
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    pytest.importorskip("playwright", reason="playwright (the dev extra) is not installed")
    from inspector_support import HOSTILE, HOSTILE_REPLY, StoreRuns, make_runs, serve
    from playwright.sync_api import sync_playwright

    runs = StoreRuns(make_runs(tmp_path))
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
    with serve(runs) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        page = browser.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        for path in ("/", "/inspect/runs/hostile"):
            page.goto(url + path)
            page.wait_for_load_state("networkidle")
        shown = page.locator("main").inner_text()
        literal = HOSTILE.replace("\x1b", "\\x1b")
        assert f"Who writes OrderLines? {literal}" in shown  # the question
        assert HOSTILE_REPLY.replace("\x1b", "\\x1b") in shown  # the answer step's reply
        assert page.locator("main img").count() == 0
        assert page.locator("script").count() == 1  # the inspector's own
        # markup that slipped through escaping still would not run: the CSP refuses inline
        # script and event handlers (the page's own script is a file of the same origin)
        page.evaluate(
            """() => {
              const s = document.createElement('script');
              s.textContent = 'window.__ran = 1';
              document.body.appendChild(s);
              const i = document.createElement('img');
              i.setAttribute('onerror', 'window.__ran = 2');
              i.src = 'data:,x';
              document.body.appendChild(i);
            }"""
        )
        page.wait_for_timeout(300)
        assert page.evaluate("() => window.__ran") is None
        page.screenshot(path=str(tmp_path / "hostile.png"), full_page=True)
        browser.close()
    assert dialogs == []
