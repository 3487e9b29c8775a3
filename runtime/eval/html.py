"""One self-contained HTML report: tables, the plots inline, a drill-down to each run.

No script, no external resource (no CDN): the plots are data: URIs and the drill-down is
<details>. Every string from a case, an answer or an index is escaped (html.escape,
quotes included), so a hostile case or answer is shown as text, never run.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime.eval.report import COST, QUALITY

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:75em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.3em .6em}
th{background:#f3f3f3}td.n{text-align:right}.bad{color:#b00}pre{white-space:pre-wrap;
background:#f7f7f7;padding:.5em}img{max-width:48%;margin-right:1%}details{margin:.3em 0}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _n(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return _e(value)


def _img(path: Path | None, alt: str) -> str:
    if path is None or not path.is_file():
        return f"<p>{_e(alt)}: not drawn (matplotlib is not installed)</p>"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def render(report: Mapping[str, Any], plots: Mapping[str, Path | None]) -> str:
    """The report page as one string."""
    out = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "img-src data:; style-src 'unsafe-inline'\">",
        f"<title>runtime eval: {_e(report['pipeline'])}</title><style>{_STYLE}</style></head><body>",
        f"<h1>runtime eval</h1><p>pipeline <code>{_e(report['pipeline'])}</code>, cases "
        f"<code>{_e(report['cases_file'])}</code>, model <code>{_e(report['model'])}</code>, "
        f"{_n(report['repeat'])} repeat(s)</p>",
        "<h2>Aggregate</h2><table><tr><th>measure</th><th>mean</th><th>95% CI</th></tr>",
    ]
    agg = report["aggregate"]
    for name in (*QUALITY, *COST):
        entry = agg[name]
        if entry["mean"] is None:
            continue
        ci = entry["ci95"]
        shown = "-" if ci is None else f"{_n(ci[0])} .. {_n(ci[1])}"
        out.append(
            f"<tr><td>{_e(name)}</td><td class=n>{_n(entry['mean'])}</td><td>{shown}</td></tr>"
        )
    out.append("</table>")
    if report.get("regressions"):
        out.append("<h2 class=bad>Regressions against the baseline</h2><ul>")
        for r in report["regressions"]:
            out.append(
                f"<li class=bad>{_e(r['case'])}: {_e(r['metric'])} {_n(r['baseline'])} &rarr; "
                f"{_n(r['current'])} ({_n(r['delta'])})</li>"
            )
        out.append("</ul>")
    out.append("<h2>Curves</h2>")
    out.append(_img(plots.get("context_rot"), "context rot"))
    out.append(_img(plots.get("position"), "position"))
    out.append("<h2>Cases</h2><table><tr><th>case</th><th>runs</th>")
    out += [f"<th>{_e(n)}</th>" for n in QUALITY]
    out.append("<th>tokens in</th><th>tokens out</th><th>errors</th></tr>")
    for cid, s in report["cases"].items():
        out.append(
            f"<tr><td><a href='#case-{_e(cid)}'>{_e(cid)}</a></td><td class=n>{s['runs']}</td>"
        )
        out += [f"<td class=n>{_n(s[n]['mean'])}</td>" for n in QUALITY]
        out.append(
            f"<td class=n>{_n(s['tokens_in']['mean'], 0)}</td>"
            f"<td class=n>{_n(s['tokens_out']['mean'], 0)}</td><td class=n>{s['errors']}</td></tr>"
        )
    out.append("</table><h2>Runs</h2>")
    for cid in report["cases"]:
        out.append(f"<h3 id='case-{_e(cid)}'>{_e(cid)}</h3>")
        for run in (r for r in report["runs"] if r["case"] == cid):
            status = run["error"] or run["status"]
            out.append(
                f"<details><summary>{_e(run['variant'])}, repeat {run['repeat']}: recall "
                f"{_n(run['evidence_recall'])}, facts {_n(run['fact_coverage'])}, "
                f"{_e(status)} (run <code>{_e(run['run_id'])}</code>)</summary>"
            )
            out.append(f"<p>answer:</p><pre>{_e(run['answer'])}</pre>")
            pos = ", ".join(f"{p:.2f}" for p in run["evidence_positions"]) or "-"
            out.append(f"<p>evidence positions (0 first block, 1 last): {_e(pos)}</p>")
            shown_ids = set(run.get("evidence_shown") or ())
            out.append(
                f"<p>the whole context: <code>runtime context {_e(run['run_id'])}</code>; "
                "expected evidence in <b>bold</b></p>"
            )
            for call in run["context"]:
                out.append(
                    f"<p>call {call['call']} (step <code>{_e(call['step'])}</code>, pack "
                    f"<code>{_e(call['pack_id'])}</code>) was shown {len(call['evidence'])} "
                    "evidence block(s):</p><ol>"
                )
                out += [
                    f"<li><b><code>{_e(i)}</code></b></li>"
                    if i in shown_ids
                    else f"<li><code>{_e(i)}</code></li>"
                    for i in call["evidence"]
                ]
                out.append("</ol>")
            out.append("</details>")
    out.append("</body></html>\n")
    return "\n".join(out)
