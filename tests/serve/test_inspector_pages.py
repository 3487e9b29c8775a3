"""The inspector's pages over real runs of code_qa, read with httpx from a real uvicorn server."""

from __future__ import annotations

import html
import re

import httpx
import pytest

pytest.importorskip("starlette", reason="the serve extra (starlette, uvicorn) is not installed")

from inspector_support import HOSTILE, QUESTION, StoreRuns, make_runs, serve

from runtime.serve.inspector import CSP


def eval_row(case: str, run_id: str, recall: float) -> dict:
    """A run's row of a `runtime eval` report (the keys runtime/eval/runner.py writes)."""
    return {
        "case": case, "variant": "base", "size": None, "size_unit": None, "position": None,
        "seed": 0, "repeat": 1, "run_id": run_id, "status": "completed", "error": None,
        "evidence_recall": recall, "fact_coverage": 0.5, "answer_contains": 1.0,
        "tools_used": None, "within_max_tokens": None, "evidence_positions": [],
        "evidence_shown": ["eshop::main::table::dbo.OrderLines"], "distractors_seen": 0,
        "blocks": 3, "tokens_in": 5000, "tokens_out": 400, "model_calls": 3,
        "latency_s": 0.2, "steps": 12, "answer": "a", "context": [],
    }  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from runtime.eval.report import build

    rows = [eval_row("orderlines", "good", 0.75), eval_row("other", "elsewhere", 0.25)]
    report = build(rows, pipeline="code_qa", cases_file="cases.yaml", model="extractive", repeat=1)
    store = make_runs(tmp_path_factory.mktemp("inspector"))
    return StoreRuns(store, reports={"evals/nightly/report.json": report})


@pytest.fixture(scope="module")
def url(runs):
    with serve(runs) as base:
        yield base


def get(url: str, path: str, **params: str) -> httpx.Response:
    return httpx.get(url + path, params=params, timeout=30)


def text_of(page: str) -> str:
    """The page's visible text, roughly: tags removed, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_runs_list_names_both_runs_with_status_and_links(url):
    resp = get(url, "/")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/html")
    assert resp.headers["content-security-policy"] == CSP
    page = resp.text
    assert 'href="/inspect/runs/good"' in page
    assert 'href="/inspect/runs/hostile"' in page
    assert page.count('<span class="status completed">completed</span>') == 2
    assert page.count('<span class="status failed">failed</span>') == 1


def test_runs_list_filters_by_status_and_pipeline(url):
    failed = get(url, "/", status="failed").text
    assert "/inspect/runs/good" not in failed and "/inspect/runs/failed" in failed
    assert "No runs match." in get(url, "/", status="running").text
    assert "/inspect/runs/good" in get(url, "/", status="completed").text
    assert "/inspect/runs/good" in get(url, "/", pipeline="code_qa").text
    assert "/inspect/runs/good" not in get(url, "/", pipeline="other").text


def test_runs_json_is_what_the_list_page_polls(url):
    page = get(url, "/", status="completed").text
    poll = html.unescape(re.search(r'data-poll="([^"]+)"', page).group(1))
    assert poll == "/inspect/api/runs?status=completed"
    rows = httpx.get(url + poll, timeout=30).json()["runs"]
    assert {r["run_id"] for r in rows} == {"good", "hostile"}
    assert {r["url"] for r in rows} == {"/inspect/runs/good", "/inspect/runs/hostile"}
    assert get(url, "/inspect/api/runs", status="running").json() == {"runs": []}
    (failed,) = get(url, "/inspect/api/runs", status="failed").json()["runs"]
    assert failed["run_id"] == "failed" and failed["error"] == "MODEL_PROVIDER_ERROR"
    one = get(url, "/inspect/api/runs/good").json()
    assert one["status"] == "completed" and one["events"] > 20


def test_run_page_timeline_has_every_step_in_order_with_durations(url, runs):
    page = get(url, "/inspect/runs/good").text
    timeline = page[page.index('id="timeline"') : page.index('id="calls"')]
    steps = [e for e in runs.trace("good") if e["type"] == "STEP"]
    rows = re.findall(r"<tr><td>(\d+)</td><td>([^<]+)</td><td>([^<]+)</td>", timeline)
    assert [(int(s), sid) for s, sid, _ in rows] == [(e["seq"], e["step_id"]) for e in steps]
    assert rows[-1][1] == "finish"
    # one bar per step, with its duration
    assert timeline.count('<rect class="bar') == len(steps)
    assert f"{steps[0]['duration_ms']:.3f}" in timeline


def test_retries_show_on_the_retried_step(url):
    page = get(url, "/inspect/runs/hostile").text
    timeline = page[page.index('id="timeline"') : page.index('id="calls"')]
    route = re.search(
        r"<tr><td>\d+</td><td>route</td><td>call_model</td><td>(\d+)</td><td>(\d+)</td>", timeline
    )
    assert route.groups() == ("2", "1")  # attempt 2, after one retry
    other = re.search(r"<td>check</td><td>call_model</td><td>(\d+)</td><td>(\d+)</td>", timeline)
    assert other.groups() == ("1", "0")
    assert timeline.count('class="bar retried"') == 1
    # the failed attempt and its backoff (0.1 s) are drawn before the attempt that succeeded
    (width,) = re.findall(
        r'<rect class="bar retrying" x="[\d.]+" y="\d+" width="([\d.]+)"', timeline
    )
    (ok,) = re.findall(r'<rect class="bar retried" x="[\d.]+" y="\d+" width="([\d.]+)"', timeline)
    assert float(width) > float(ok)


def test_a_failed_run_shows_its_error_and_the_step_that_failed(url, runs):
    page = get(url, "/inspect/runs/failed").text
    error = runs.get_run("failed")["error"]
    assert f'<div class="error"><b>{error["code"]}</b>' in page
    timeline = page[page.index('id="timeline"') : page.index('id="calls"')]
    assert re.search(
        r'<tr class="failed"><td>\d+</td><td>route</td><td>call_model</td><td>1</td><td>0</td>'
        r"<td>[\d.]+</td><td>failed MODEL_PROVIDER_ERROR</td>",
        timeline,
    ), timeline
    assert timeline.count('<rect class="bar failed"') == 1


def test_model_calls_show_the_prompt_and_the_reply(url, runs):
    page = get(url, "/inspect/runs/good").text
    calls = page[page.index('id="calls"') : page.index('id="context"')]
    model_calls = [e for e in runs.trace("good") if e["type"] == "MODEL_CALL"]
    assert f"Model calls ({len(model_calls)})" in calls
    answer = model_calls[-1]
    system = answer["messages"][0]["content"]
    shown = text_of(calls)
    assert system.split("\n")[0] in shown
    assert QUESTION in shown
    assert answer["reply"].split("\n")[0] in shown


def test_context_packs_show_sections_items_and_drops(url, runs):
    page = get(url, "/inspect/runs/good").text
    ctx = page[page.index('id="context"') : page.index('id="graph"')]
    packs = runs.packs("good")
    assert f"Context packs ({len(packs)})" in ctx
    answer = packs[-1]
    knowledge = next(s for s in answer["sections"] if s["type"] == "knowledge")
    assert f"<td>knowledge</td><td>-</td><td>{knowledge['tokens']}</td>" in ctx or (
        f"<td>knowledge</td><td>{knowledge['budget']}" in ctx
    )
    for item in knowledge["items"]:
        assert f"<td>{html.escape(item['id'])}</td>" in ctx
    drops = answer["drops"]["items"]
    assert drops, "the sample's answer pack drops duplicates"
    assert f"Dropped: {len(drops)} item(s)" in ctx
    for d in drops:
        assert f"<td>{html.escape(d['id'])}</td><td>{d['reason']}</td>" in ctx


def test_graph_is_server_drawn_svg_with_every_step_and_visited_marked(url, runs):
    page = get(url, "/inspect/runs/good").text
    graph = page[page.index('id="graph"') : page.index('id="evals"')]
    data = runs.graph("good")
    assert graph.count('<g class="node') == len(data["nodes"])
    ran = {e["step_id"] for e in runs.trace("good") if e["type"] == "STEP"}
    visited = re.findall(r'<g class="node[^"]*visited[^"]*">.*?<title>([^<]+)</title>', graph)
    assert set(visited) == ran
    assert ">other / route retrieve<" in graph  # two edges between the same steps, joined
    # route's two caught codes go to the same step: one edge, its codes in the tooltip
    assert re.search(
        r">catch 2 codes<title>catch (INVALID_STRUCTURED_OUTPUT|MODEL_OUTPUT_TRUNCATED) / catch ",
        graph,
    )


def test_eval_reports_that_name_the_run_show_its_measures(url):
    page = get(url, "/inspect/runs/good").text
    evals = page[page.index('id="evals"') :]
    assert "Eval reports (1)" in evals
    assert "evals/nightly/report.json: case orderlines, variant base" in evals
    assert "<tr><th>evidence_recall</th><td>0.75</td></tr>" in evals
    assert "case other" not in evals  # another run's row
    assert "Eval reports (0)" in get(url, "/inspect/runs/hostile").text


def test_unknown_run_is_404_and_unknown_static_file_is_refused(url):
    resp = get(url, "/inspect/runs/nope")
    assert resp.status_code == 404
    assert "No run nope" in resp.text
    assert get(url, "/inspect/api/runs/nope").json()["error"]["code"] == "RUN_NOT_FOUND"
    assert get(url, "/inspect/static/../../pyproject.toml").status_code == 404
    assert get(url, "/inspect/static/secret.txt").status_code == 404
    js = get(url, "/inspect/static/inspector.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")


def test_pages_load_nothing_from_another_origin_and_no_inline_script(url):
    for path in ("/", "/inspect/runs/good", "/inspect/runs/hostile"):
        page = get(url, path).text
        assert not re.search(r"(src|href)=\"(https?:)?//", page), path
        scripts = re.findall(r"<script[^>]*>", page)
        assert scripts == ['<script src="/inspect/static/inspector.js" defer>'], path
        assert " style=" not in page and "<style" not in page, path


def test_hostile_values_are_escaped_in_every_page(url):
    for path in ("/", "/inspect/runs/hostile", "/inspect/api/runs"):
        page = get(url, path).text
        assert "<script>alert" not in page
        assert "<img src=x" not in page
        assert "\x1b" not in page
    page = get(url, "/inspect/runs/hostile").text
    assert html.escape(HOSTILE.replace("\x1b", "\\x1b"), quote=True) in page


def test_a_huge_run_page_shows_the_first_rows_and_links_the_rest():
    """A run of 1,200 steps and 150 model calls: the page holds the caps, says how many
    there are and links the JSON that has them all."""
    from runtime.serve import _pages

    events = []
    for n in range(1200):
        events.append(
            {"seq": 2 * n, "type": "STEP", "step_id": f"s{n % 7}", "action": "a", "ts": n,
             "duration_ms": 1.0, "outcome": "next", "next": "s", "attempt": 1}
        )  # fmt: skip
        if n < 150:
            events.append(
                {"seq": 2 * n + 1, "type": "MODEL_CALL", "step_id": "s0", "model": "m",
                 "tokens_in": 1, "tokens_out": 1, "prompt_tokens": 1, "messages": [],
                 "response": "r"}
            )  # fmt: skip
    run = {"run_id": "big/run", "status": "completed", "pipeline": "p"}
    page = _pages.run_page(run, events, [], None, [])
    rows = re.findall(r"<tr(?: class=\"failed\")?><td>\d+</td>", page)
    assert len(rows) == _pages.MAX_STEPS
    assert f"The first {_pages.MAX_STEPS} of 1200 steps" in text_of(page)
    assert "Model calls (150)" in page
    assert f"The first {_pages.MAX_CALLS} of 150 model calls" in text_of(page)
    assert 'href="/runs/big%2Frun/trace"' in page
    small = _pages.run_page(run, events[:20], [], None, [])
    assert "The first" not in text_of(small)
