"""Step-graph drawings (Mermaid, Graphviz dot) so authors can look at a pipeline."""

from __future__ import annotations

import re
from collections.abc import Mapping

from runtime.contract.registry import Registry
from runtime.format.checks import Graph
from runtime.format.pipeline import Pipeline

# Mermaid reads `#name;` and `#NNN;` entity codes inside labels; every character that
# could end a label, open markup or start an entity is written as a code, so a route
# key such as `say "hi"` or `<img src=x>` is shown as text, never parsed or rendered.
_PLAIN = re.compile(r"[A-Za-z0-9_ ]+")  # an edge label written as it is
_MERMAID_CODES = {'"': "#quot;", "#": "#35;", "<": "#lt;", ">": "#gt;", "&": "#amp;"}


def mermaid_text(text: str) -> str:
    """Text for inside a quoted Mermaid label: quotes, markup and entities as codes."""
    out = "".join(_MERMAID_CODES.get(ch, ch) for ch in text)
    return out.replace("\r", " ").replace("\n", " ")


def dot_string(text: str) -> str:
    """A Graphviz double-quoted string: backslashes and quotes escaped, newlines as \\n."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\r", "").replace("\n", "\\n") + '"'


def _edges(pipeline: Pipeline, registry: Registry) -> list[tuple[str, str, str, str]]:
    """(source, target, label, text): text is what the edge shows, attributes included."""
    graph = Graph.build([s.config for s in pipeline.steps], registry)
    return [
        (sid, e.target, e.label, edge_text(e.label, e.attrs))
        for sid in graph.ids
        for e, _ in graph.edges[sid]
    ]


def edge_text(label: str, attrs: Mapping[str, str]) -> str:
    """An edge's label: the branch (none for `next`), then the long form's fidelity and thread."""
    parts = [] if label == "next" else [label]
    if "fidelity" in attrs:
        parts.append(f"fidelity {attrs['fidelity']}")
    if "thread_id" in attrs:
        parts.append(f"thread {attrs['thread_id']}")
    return ", ".join(parts)


def _node_label(pipeline: Pipeline, sid: str) -> str:
    step = pipeline.step(sid)
    return f"{mermaid_text(sid)}<br/><i>{mermaid_text(step.action)}</i>"


def to_mermaid(pipeline: Pipeline, registry: Registry) -> str:
    """A Mermaid flowchart: entry marked, ends as stadium shapes, branches labelled."""
    lines = ["flowchart TD", "  __start__((start))"]
    ids = {s.id: f"s{i}" for i, s in enumerate(pipeline.steps)}
    for step in pipeline.steps:
        label = _node_label(pipeline, step.id)
        cls = registry.get(step.action)
        if step.end or (cls is not None and cls.terminal):
            lines.append(f'  {ids[step.id]}(["{label}"])')
        elif cls is not None and cls.bounds_loops:
            lines.append(f'  {ids[step.id]}{{{{"{label}"}}}}')
        else:
            lines.append(f'  {ids[step.id]}["{label}"]')
    if pipeline.entry_step_id in ids:
        lines.append(f"  __start__ --> {ids[pipeline.entry_step_id]}")
    for src, dst, label, shown in _edges(pipeline, registry):
        if dst not in ids:
            continue
        arrow = "-.->" if label.startswith("catch ") else "-->"
        if not shown:
            text = ""
        elif _PLAIN.fullmatch(shown):
            text = f"|{shown}|"
        else:  # quoted, so `|`, `-->` or markup in a route key cannot end or break the edge
            text = f'|"{mermaid_text(shown)}"|'
        lines.append(f"  {ids[src]} {arrow}{text} {ids[dst]}")
    return "\n".join(lines)


def to_dot(pipeline: Pipeline, registry: Registry) -> str:
    """A Graphviz digraph with the same information."""
    lines = [
        f"digraph {dot_string(pipeline.name)} {{",
        "  rankdir=TB;",
        "  __start__ [shape=point];",
    ]
    for step in pipeline.steps:
        cls = registry.get(step.action)
        shape = "box"
        if step.end or (cls is not None and cls.terminal):
            shape = "doublecircle"
        elif cls is not None and cls.bounds_loops:
            shape = "hexagon"
        label = dot_string(f"{step.id}\n({step.action})")
        lines.append(f"  {dot_string(step.id)} [shape={shape}, label={label}];")
    if pipeline.has_step(pipeline.entry_step_id):
        lines.append(f"  __start__ -> {dot_string(pipeline.entry_step_id)};")
    for src, dst, label, shown in _edges(pipeline, registry):
        if not pipeline.has_step(dst):
            continue
        style = ", style=dashed" if label.startswith("catch ") else ""
        lines.append(
            f"  {dot_string(src)} -> {dot_string(dst)} [label={dot_string(shown)}{style}];"
        )
    lines.append("}")
    return "\n".join(lines)
