"""Server-drawn SVG for the inspector: a pipeline's step graph and a run's step timeline.

Drawn here rather than by Mermaid in the browser: Mermaid's script is ~3 MB and the
inspector works offline. Every text placed in the drawing comes from a run or a pipeline
and is escaped (`html.escape`), so a step id such as `<script>` is shown, never parsed.
"""

from __future__ import annotations

import html
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

NODE_W, NODE_H, GAP_X, GAP_Y = 190, 44, 30, 46
ROW_H, LABEL_W, BAR_W = 22, 200, 560


def esc(value: Any) -> str:
    """Text for HTML or SVG: markup, quotes and control characters as plain text."""
    return html.escape(visible(str(value)), quote=True)


def visible(text: str) -> str:
    """Control characters (a terminal escape, NUL) as `\\xNN` text; tabs and newlines kept."""
    if text.isprintable():
        return text
    return "".join(
        ch
        if ch.isprintable() or ch in "\n\t"
        else f"\\x{ord(ch):02x}"
        if ord(ch) < 0x100
        else f"\\u{ord(ch):04x}"
        for ch in text
    )


def graph_data(pipeline: Any, registry: Any) -> dict[str, Any]:
    """A pipeline's steps and labelled edges as plain data (what `graph_svg` draws)."""
    from runtime.format.checks import Graph
    from runtime.format.graph import edge_text

    graph = Graph.build([s.config for s in pipeline.steps], registry)
    nodes = []
    for step in pipeline.steps:
        cls = registry.get(step.action)
        nodes.append(
            {"id": step.id, "action": step.action, "end": bool(step.end or (cls and cls.terminal))}
        )
    edges = [
        {"source": sid, "target": e.target, "label": edge_text(e.label, e.attrs)}
        for sid in graph.ids
        for e, _ in graph.edges[sid]
    ]
    return {"entry": pipeline.entry_step_id, "nodes": nodes, "edges": edges}


def _layers(data: Mapping[str, Any]) -> dict[str, int]:
    """Each step's row: its distance from the entry step; steps never reached go below."""
    ids = [str(n["id"]) for n in data["nodes"]]
    out: dict[str, list[str]] = {i: [] for i in ids}
    for e in data["edges"]:
        if str(e["source"]) in out and str(e["target"]) in out:
            out[str(e["source"])].append(str(e["target"]))
    entry = str(data.get("entry") or (ids[0] if ids else ""))
    depth: dict[str, int] = {}
    if entry in out:
        depth[entry] = 0
        queue = deque([entry])
        while queue:
            sid = queue.popleft()
            for nxt in out[sid]:
                if nxt not in depth:
                    depth[nxt] = depth[sid] + 1
                    queue.append(nxt)
    last = max(depth.values(), default=-1)
    for sid in ids:
        if sid not in depth:
            last += 1
            depth[sid] = last
    return depth


def graph_svg(data: Mapping[str, Any], visited: Sequence[str] = ()) -> str:
    """The step graph as an SVG element: rows by distance from the entry, edges labelled;
    steps the run visited are marked."""
    depth = _layers(data)
    rows: dict[int, list[str]] = {}
    for n in data["nodes"]:
        rows.setdefault(depth[str(n["id"])], []).append(str(n["id"]))
    width = max((len(r) for r in rows.values()), default=1) * (NODE_W + GAP_X) + GAP_X + 260
    pos: dict[str, tuple[int, int]] = {}
    for row, ids in rows.items():
        offset = (width - 260 - len(ids) * (NODE_W + GAP_X) + GAP_X) // 2
        for col, sid in enumerate(ids):
            pos[sid] = (offset + col * (NODE_W + GAP_X), GAP_Y // 2 + row * (NODE_H + GAP_Y))
    height = (max(rows, default=0) + 1) * (NODE_H + GAP_Y)
    seen = set(visited)
    parts = [
        f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="pipeline step graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker>'
        "</defs>",
    ]
    # edges between the same two steps (two caught codes) are drawn once, labels joined
    merged: dict[tuple[str, str], list[str]] = {}
    for e in data["edges"]:
        labels = merged.setdefault((str(e["source"]), str(e["target"])), [])
        if e.get("label"):
            labels.append(str(e["label"]))
    for (src, dst), labels in merged.items():
        if src not in pos or dst not in pos:
            continue
        (x1, y1), (x2, y2) = pos[src], pos[dst]
        full = label = " / ".join(labels)
        catch = bool(labels) and all(x.startswith("catch ") for x in labels)
        if catch and len(labels) > 1:  # the codes in the label's tooltip
            label = f"catch {len(labels)} codes"
        cls = "edge catch" if catch else "edge"
        anchor = "middle"
        if depth[dst] > depth[src]:
            sx, sy, tx, ty = x1 + NODE_W // 2, y1 + NODE_H, x2 + NODE_W // 2, y2
            path = f"M{sx},{sy} C{sx},{sy + 24} {tx},{ty - 24} {tx},{ty}"
            lx, ly = (sx + tx) // 2, (sy + ty) // 2 + 4
        elif depth[dst] == depth[src]:  # sideways: an arc above the row
            sx, sy, tx, ty = x1 + NODE_W // 2, y1, x2 + NODE_W // 2, y2
            path = f"M{sx},{sy} C{sx},{sy - 30} {tx},{ty - 30} {tx},{ty}"
            lx, ly = (sx + tx) // 2, sy - 20
        else:  # back edge: around the right side
            sx, sy, tx, ty = x1 + NODE_W, y1 + NODE_H // 2, x2 + NODE_W, y2 + NODE_H // 2
            bend = max(sx, tx) + 30 + 8 * abs(depth[src] - depth[dst])
            path = f"M{sx},{sy} C{bend},{sy} {bend},{ty} {tx},{ty}"
            lx, ly, anchor = bend - 4, (sy + ty) // 2, "start"
        parts.append(f'<path class="{cls}" d="{path}" marker-end="url(#arrow)"/>')
        if label:
            parts.append(
                f'<text class="edge-label" x="{lx}" y="{ly}" text-anchor="{anchor}">'
                f"{esc(_cut(label, 48))}<title>{esc(full)}</title></text>"
            )
    for n in data["nodes"]:
        sid = str(n["id"])
        x, y = pos[sid]
        cls = "node" + (" end" if n.get("end") else "") + (" visited" if sid in seen else "")
        if sid == str(data.get("entry")):
            cls += " entry"
        rx = NODE_H // 2 if n.get("end") else 6
        parts.append(
            f'<g class="{cls}"><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" '
            f'rx="{rx}"/><text x="{x + NODE_W // 2}" y="{y + 19}" class="sid">{esc(_cut(sid))}'
            f'</text><text x="{x + NODE_W // 2}" y="{y + 35}" class="act">'
            f"{esc(_cut(str(n.get('action'))))}</text><title>{esc(sid)}</title></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _cut(text: str, n: int = 26) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def timeline_svg(steps: Sequence[Mapping[str, Any]]) -> str:
    """One bar per step visit on the run's time axis (`start`, `ms` in each row)."""
    if not steps:
        return ""
    t0 = min(float(s.get("retrying_from") or s["start"]) for s in steps)
    t1 = max(float(s["start"]) + float(s["ms"]) / 1000 for s in steps)
    span = max(t1 - t0, 1e-6)
    height = ROW_H * len(steps) + 24
    parts = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{LABEL_W + BAR_W + 90}"'
        f' height="{height}" role="img" aria-label="step timeline">'
    ]
    for i, s in enumerate(steps):
        y = i * ROW_H + 4
        x = LABEL_W + (float(s["start"]) - t0) / span * BAR_W
        w = max(float(s["ms"]) / 1000 / span * BAR_W, 1.5)
        cls = (
            "bar"
            + (" failed" if s.get("failed") else "")
            + (" retried" if s.get("retries") else "")
        )
        label = _cut(str(s["step_id"]), 28)
        if s.get("retrying_from") is not None:  # the failed attempts and their backoff
            rx = LABEL_W + (float(s["retrying_from"]) - t0) / span * BAR_W
            parts.append(
                f'<rect class="bar retrying" x="{rx:.1f}" y="{y + 3}" width="{max(x - rx, 1):.1f}"'
                f' height="{ROW_H - 8}"><title>{esc(s["step_id"])}: {esc(s.get("retries"))} '
                "failed attempt(s) and backoff</title></rect>"
            )
        parts.append(
            f'<text class="tl-label" x="{LABEL_W - 8}" y="{y + 14}">{esc(label)}</text>'
            f'<rect class="{cls}" x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{ROW_H - 8}">'
            f"<title>{esc(s['step_id'])}: {float(s['ms']):.3f} ms</title></rect>"
            f'<text class="tl-ms" x="{x + w + 4:.1f}" y="{y + 14}">{float(s["ms"]):.1f} ms</text>'
        )
    parts.append(
        f'<text class="tl-axis" x="{LABEL_W}" y="{height - 4}">0</text>'
        f'<text class="tl-axis" x="{LABEL_W + BAR_W}" y="{height - 4}">{span * 1000:.1f} ms</text>'
        "</svg>"
    )
    return "".join(parts)
