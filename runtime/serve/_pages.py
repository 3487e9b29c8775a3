"""The inspector's HTML pages, built as strings: every value from a run goes through `esc`.

Run data is hostile (a question, a retrieved file or a model reply may hold markup, quotes
or terminal escapes), so nothing from a run is placed in HTML unescaped, none of it lands
in a script, style or URL context except run ids and filter values, which are
percent-encoded in URLs and escaped as attributes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from runtime.serve._svg import esc, graph_svg, timeline_svg

STATUSES = ("running", "interrupted", "completed", "failed")
STATIC = "/inspect/static"


def page(title: str, body: str, *, script: bool = True) -> str:
    """A whole document: the stylesheet and script are files of the package, never inline."""
    js = f'<script src="{STATIC}/inspector.js" defer></script>' if script else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · step-runtime inspector</title>"
        f'<link rel="icon" href="data:,">'  # no favicon request
        f'<link rel="stylesheet" href="{STATIC}/inspector.css">{js}</head>'
        f'<body><header class="top"><a href="/">step-runtime inspector</a></header>'
        f"<main>{body}</main></body></html>"
    )


def run_url(run_id: str) -> str:
    """The run page of a run id (percent-encoded: an id is run data too)."""
    return "/inspect/runs/" + quote(run_id, safe="")


def when(ts: Any) -> str:
    """A Unix time as UTC `YYYY-MM-DD HH:MM:SS`, or '-'."""
    if not isinstance(ts, int | float):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def run_row(r: Mapping[str, Any]) -> dict[str, Any]:
    """A runs-list row as JSON for the page's script (which sets text, never markup)."""
    err = r.get("error") or {}
    return {
        "run_id": str(r.get("run_id")),
        "url": run_url(str(r.get("run_id"))),
        "pipeline": str(r.get("pipeline")),
        "status": str(r.get("status")),
        "started": when(r.get("created_at")),
        "seconds": r.get("seconds"),
        "steps": r.get("steps"),
        "error": str(err.get("code") or "") if isinstance(err, Mapping) else str(err),
    }


def runs_page(
    rows: Sequence[Mapping[str, Any]],
    pipelines: Sequence[str],
    pipeline: str | None,
    status: str | None,
) -> str:
    """The runs list with its filter form; the script refreshes the table while it is open."""
    options = "".join(
        f'<option value="{esc(p)}"{" selected" if p == pipeline else ""}>{esc(p)}</option>'
        for p in pipelines
    )
    states = "".join(
        f'<option value="{s}"{" selected" if s == status else ""}>{s}</option>' for s in STATUSES
    )
    query = urlencode({k: v for k, v in (("pipeline", pipeline), ("status", status)) if v})
    body = [
        "<h1>Runs</h1>",
        '<form class="filters" method="get" action="/">',
        f'<label>pipeline <select name="pipeline"><option value="">all</option>{options}'
        "</select></label>",
        f'<label>status <select name="status"><option value="">all</option>{states}'
        "</select></label>",
        '<button type="submit">filter</button>',
        '<span id="live" class="live" aria-live="polite"></span></form>',
        f'<table id="runs" class="runs" data-poll="/inspect/api/runs?{esc(query)}">',
        "<thead><tr><th>run</th><th>pipeline</th><th>status</th><th>started (UTC)</th>"
        "<th>seconds</th><th>steps</th><th>error</th></tr></thead><tbody>",
    ]
    for r in map(run_row, rows):
        body.append(
            f'<tr data-run="{esc(r["run_id"])}"><td><a href="{esc(r["url"])}">'
            f"{esc(r['run_id'])}</a></td><td>{esc(r['pipeline'])}</td>"
            f'<td><span class="status {esc(r["status"])}">{esc(r["status"])}</span></td>'
            f"<td>{esc(r['started'])}</td><td>{esc(r['seconds'])}</td><td>{esc(r['steps'])}</td>"
            f"<td>{esc(r['error'])}</td></tr>"
        )
    body.append("</tbody></table>")
    if not rows:
        body.append('<p class="empty">No runs match.</p>')
    return page("Runs", "".join(body))


def steps_of(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each step visit with its start, duration and the retries before it.

    A step that succeeded is its STEP event; one that failed has none: its CATCH (caught,
    routed on) or RUN_FAILED event ends it, timed from the event before its first attempt.
    """
    out: list[dict[str, Any]] = []
    retries: dict[str, int] = {}
    began: dict[str, float] = {}  # step id -> when its first attempt began (last event before)
    last = None
    for e in events:
        kind, sid = e.get("type"), e.get("step_id")
        ts = float(e.get("ts") or 0.0)
        if sid is not None and str(sid) not in began and kind != "STEP":
            began[str(sid)] = ts if last is None else last
        if kind == "RETRY":
            retries[str(sid)] = retries.get(str(sid), 0) + 1
        elif kind == "STEP" and sid is not None:
            ms = float(e.get("duration_ms") or 0.0)
            first = began.pop(str(sid), None)
            n = retries.pop(str(sid), 0)
            out.append(
                {
                    "seq": e.get("seq"),
                    "step_id": str(sid),
                    "action": e.get("action"),
                    "attempt": e.get("attempt"),
                    "retries": n,
                    "ms": ms,
                    "start": ts - ms / 1000,
                    # the failed attempts and their backoff, before the one that succeeded
                    "retrying_from": first if n and first is not None else None,
                    "outcome": e.get("outcome"),
                    "next": e.get("next"),
                    "failed": False,
                }
            )
        elif kind in ("CATCH", "RUN_FAILED") and sid is not None:
            start = began.pop(str(sid), last if last is not None else ts)
            n = retries.pop(str(sid), 0)
            out.append(
                {
                    "seq": e.get("seq"),
                    "step_id": str(sid),
                    "action": e.get("action"),
                    "attempt": n + 1,
                    "retries": n,
                    "ms": max(ts - start, 0.0) * 1000,
                    "start": start,
                    "outcome": f"failed {e.get('code')}",
                    "next": e.get("next"),
                    "failed": True,
                }
            )
        last = ts
    return out


def _kv(pairs: Sequence[tuple[str, Any]]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in pairs)
    return f'<table class="kv">{rows}</table>'


def _value(value: Any) -> str:
    """A run value shown whole: text as it is, anything else as indented JSON."""
    text = value if isinstance(value, str) else json.dumps(value, indent=1, ensure_ascii=False)
    return f'<pre class="value">{esc(text)}</pre>'


# A run page shows at most this many steps, model calls and context packs (the first ones):
# a run of 100k steps would otherwise be a page of megabytes that no browser lays out. The
# rest are in the JSON API (GET /runs/{id}/trace, /context), which the note links.
MAX_STEPS = 500
MAX_CALLS = 100
MAX_PACKS = 100


def _more(shown: int, total: int, what: str, rid: str, path: str) -> str:
    """The note under a list cut at its cap (empty when nothing was cut)."""
    if total <= shown:
        return ""
    href = f"/runs/{quote(rid, safe='')}/{path}"
    return (
        f'<p class="more">The first {shown} of {total} {what}; all of them: '
        f'<a href="{esc(href)}">{esc(href)}</a> (JSON).</p>'
    )


def run_page(
    run: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    packs: Sequence[Mapping[str, Any]],
    graph: Mapping[str, Any] | None,
    reports: Sequence[Mapping[str, Any]],
) -> str:
    """One run: summary, timeline, model calls, context packs, graph, eval reports."""
    rid = str(run.get("run_id"))
    status = str(run.get("status"))
    err = run.get("error")
    steps = steps_of(events)
    actions = {str(n.get("id")): n.get("action") for n in (graph or {}).get("nodes") or ()}
    for s in steps:  # a failed step's event does not name its action; the graph does
        s["action"] = s["action"] or actions.get(s["step_id"]) or "-"
    body = [
        f'<h1 id="run" data-run="{esc(rid)}" data-status="{esc(status)}" '
        f'data-poll="/inspect/api/runs/{esc(quote(rid, safe=""))}" '
        f'data-events="{len(events)}">Run {esc(rid)}</h1>',
        '<nav class="toc"><a href="#timeline">timeline</a> <a href="#calls">model calls</a> '
        '<a href="#context">context</a> <a href="#graph">graph</a> '
        '<a href="#evals">eval reports</a></nav>',
        _kv(
            [
                ("pipeline", run.get("pipeline")),
                ("status", status),
                ("started (UTC)", when(run.get("created_at"))),
                ("seconds", run.get("seconds")),
                ("steps", run.get("steps")),
            ]
        ),
    ]
    if err:
        code = err.get("code") if isinstance(err, Mapping) else None
        message = err.get("message") if isinstance(err, Mapping) else err
        body.append(
            f'<div class="error"><b>{esc(code or "error")}</b> <span>{esc(message)}</span></div>'
        )
    if run.get("inputs"):
        body.append("<h2>Inputs</h2>" + _value(run["inputs"]))
    if run.get("output") is not None:
        body.append('<h2>Output</h2><div id="output">' + _value(run["output"]) + "</div>")
    body.append(_timeline(steps[:MAX_STEPS]))
    body.append(_more(min(len(steps), MAX_STEPS), len(steps), "steps", rid, "trace"))
    calls = [e for e in events if e.get("type") == "MODEL_CALL"]
    body.append(_calls(calls[:MAX_CALLS], len(calls)))
    body.append(_more(min(len(calls), MAX_CALLS), len(calls), "model calls", rid, "trace"))
    body.append(_packs(packs[:MAX_PACKS]))
    body.append(_more(min(len(packs), MAX_PACKS), len(packs), "context packs", rid, "context"))
    body.append('<section id="graph"><h2>Pipeline graph</h2>')
    if graph:
        body.append(graph_svg(graph, [s["step_id"] for s in steps]))
    else:
        body.append('<p class="empty">The pipeline this run ran is not served here.</p>')
    body.append("</section>")
    body.append(_reports(reports))
    return page(f"Run {rid}", "".join(body))


def _timeline(steps: Sequence[Mapping[str, Any]]) -> str:
    out = ['<section id="timeline"><h2>Timeline</h2>']
    if not steps:
        return out[0] + '<p class="empty">No step has finished yet.</p></section>'
    out.append(timeline_svg(steps))
    out.append(
        '<table class="steps"><thead><tr><th>event</th><th>step</th><th>action</th>'
        "<th>attempt</th><th>retries</th><th>ms</th><th>outcome</th><th>next</th></tr>"
        "</thead><tbody>"
    )
    for s in steps:
        cls = ' class="failed"' if s["failed"] else ""
        out.append(
            f"<tr{cls}><td>{esc(s['seq'])}</td><td>{esc(s['step_id'])}</td>"
            f"<td>{esc(s['action'])}</td><td>{esc(s['attempt'])}</td>"
            f"<td>{esc(s['retries'])}</td><td>{s['ms']:.3f}</td><td>{esc(s['outcome'])}</td>"
            f"<td>{esc(s['next'] or '-')}</td></tr>"
        )
    out.append("</tbody></table></section>")
    return "".join(out)


def _calls(calls: Sequence[Mapping[str, Any]], total: int) -> str:
    out = [f'<section id="calls"><h2>Model calls ({total})</h2>']
    for n, c in enumerate(calls, 1):
        about = ", ".join(
            f"{label} {esc(c[key])}"
            for label, key in (
                ("model", "model"),
                ("tokens in", "tokens_in"),
                ("out", "tokens_out"),
                ("latency ms", "latency_ms"),
                ("attempt", "attempt"),
            )
            if c.get(key) is not None
        )
        out.append(
            f'<details class="call" id="call-{n}"{" open" if n == len(calls) else ""}>'
            f"<summary>{n}. step <b>{esc(c.get('step_id'))}</b> ({about})</summary>"
        )
        for i, m in enumerate(c.get("messages") or (), 1):
            if not isinstance(m, Mapping):
                out.append(f'<div class="msg">{_value(m)}</div>')
                continue
            role = esc(m.get("role"))
            out.append(f'<div class="msg {role}"><div class="role">message {i}: {role}</div>')
            content = m.get("content")
            out.append(_value("" if content is None else content))
            for tc in m.get("tool_calls") or ():
                fn = (tc.get("function") or {}) if isinstance(tc, Mapping) else {}
                out.append(
                    f'<div class="tool">tool call {esc(tc.get("id") if isinstance(tc, Mapping) else tc)}'
                    f": {esc(fn.get('name'))} {esc(fn.get('arguments'))}</div>"
                )
            out.append("</div>")
        out.append('<div class="msg reply"><div class="role">reply</div>')
        out.append(_value(c.get("reply") if c.get("reply") is not None else "") + "</div>")
        out.append("</details>")
    if not calls:
        out.append('<p class="empty">No model calls.</p>')
    out.append("</section>")
    return "".join(out)


def _packs(packs: Sequence[Mapping[str, Any]]) -> str:
    out = [f'<section id="context"><h2>Context packs ({len(packs)})</h2>']
    if not packs:
        out.append('<p class="empty">No context packs were recorded for this run.</p>')
    for p in packs:
        try:
            out.append(_pack(p))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # a damaged or hand-edited row is named and shown as stored, not a 500
            out.append(
                f'<div class="error">pack {esc(p.get("seq", "?"))}: not a context pack '
                f"({esc(type(exc).__name__)}: {esc(exc)})</div>{_value(dict(p))}"
            )
    out.append("</section>")
    return "".join(out)


def _pack(p: Mapping[str, Any]) -> str:
    t = p.get("tokens") or {}
    out = [
        f'<details class="pack" open><summary>pack {esc(p.get("seq", "?"))} '
        f"<code>{esc(p.get('pack_id'))}</code>: step <b>{esc(p.get('step_id'))}</b>, "
        f"model {esc(p.get('model'))}, prompt {esc(t.get('prompt'))} tokens of budget "
        f"{esc(p.get('prompt_budget'))}</summary>",
        '<table class="sections"><thead><tr><th>section</th><th>budget</th><th>tokens</th>'
        "<th>items</th><th>reason</th></tr></thead><tbody>",
    ]
    verdicts = {a.get("section"): a.get("verdict") for a in p.get("adherence") or ()}
    items: list[tuple[str, Mapping[str, Any]]] = []
    for s in p["sections"]:
        budget = "-" if s.get("budget") is None else f"{s['budget']} ({s.get('fraction')})"
        verdict = verdicts.get(s["type"], "ok")
        over = "" if verdict == "ok" else f' <span class="verdict">{esc(verdict)}</span>'
        out.append(
            f"<tr><td>{esc(s['type'])}</td><td>{esc(budget)}</td><td>{esc(s['tokens'])}{over}"
            f"</td><td>{len(s.get('items') or ())}</td><td>{esc(s.get('reason') or '')}</td></tr>"
        )
        items += [(str(s["type"]), it) for it in s.get("items") or ()]
    out.append("</tbody></table>")
    if items:
        out.append(
            '<table class="items"><thead><tr><th>section</th><th>item</th><th>source</th>'
            "<th>score</th><th>labels</th><th>tokens</th><th>reason</th></tr></thead><tbody>"
        )
        for section, it in items:
            score = it.get("score")
            labels = ", ".join(str(x) for x in it.get("labels") or ())
            out.append(
                f"<tr><td>{esc(section)}</td><td>{esc(it.get('id'))}</td>"
                f"<td>{esc(it.get('source') or '')}</td>"
                f"<td>{'-' if score is None else esc(f'{score:.4g}' if isinstance(score, float) else score)}"
                f"</td><td>{esc(labels)}</td><td>{esc(it.get('tokens'))}</td>"
                f"<td>{esc(it.get('reason') or '')}</td></tr>"
            )
        out.append("</tbody></table>")
    drops = p.get("drops") or {}
    dropped = drops.get("items") or ()
    out.append(
        f"<h4>Dropped: {len(dropped)} item(s), coverage {esc(drops.get('coverage'))}, "
        f"{esc(drops.get('tokens_removed', 0))} tokens removed</h4>"
    )
    if dropped:
        out.append(
            '<table class="drops"><thead><tr><th>item</th><th>reason</th><th>by</th>'
            "<th>tokens saved</th><th>note</th></tr></thead><tbody>"
        )
        for d in dropped:
            out.append(
                f"<tr><td>{esc(d.get('id'))}</td><td>{esc(d.get('reason'))}</td>"
                f"<td>{esc(d.get('by'))}</td><td>{esc(d.get('tokens_saved'))}</td>"
                f"<td>{esc(d.get('note') or '')}</td></tr>"
            )
        out.append("</tbody></table>")
    out.append("</details>")
    return "".join(out)


def _reports(reports: Sequence[Mapping[str, Any]]) -> str:
    out = [f'<section id="evals"><h2>Eval reports ({len(reports)})</h2>']
    if not reports:
        out.append('<p class="empty">No eval report names this run.</p>')
    for r in reports:
        out.append(f'<details class="report"><summary>{esc(r.get("name", "report"))}</summary>')
        metrics = r.get("metrics")
        if isinstance(metrics, Mapping):
            out.append(_kv(sorted((str(k), v) for k, v in metrics.items())))
        out.append(_value({k: v for k, v in r.items() if k not in ("name", "metrics")}))
        out.append("</details>")
    out.append("</section>")
    return "".join(out)


def not_found(run_id: str) -> str:
    """The page for a run id the store does not hold."""
    return page("Not found", f'<h1>No run {esc(run_id)}</h1><p><a href="/">all runs</a></p>')
