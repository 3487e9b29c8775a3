"""Step-graph drawings (Mermaid, Graphviz dot) so authors can look at a pipeline."""

from __future__ import annotations

from runtime.contract.registry import Registry
from runtime.format.checks import Graph
from runtime.format.pipeline import Pipeline


def _edges(pipeline: Pipeline, registry: Registry) -> list[tuple[str, str, str]]:
    graph = Graph.build([s.config for s in pipeline.steps], registry)
    return [(sid, t.target, t.label) for sid in graph.ids for t, _ in graph.edges[sid]]


def _node_label(pipeline: Pipeline, sid: str) -> str:
    step = pipeline.step(sid)
    return f"{sid}<br/><i>{step.action}</i>"


def to_mermaid(pipeline: Pipeline, registry: Registry) -> str:
    """A Mermaid flowchart: entry marked, ends as stadium shapes, branches labelled."""
    lines = ["flowchart TD", "  __start__((start))"]
    ids = {s.id: f"s{i}" for i, s in enumerate(pipeline.steps)}
    for step in pipeline.steps:
        label = _node_label(pipeline, step.id).replace('"', "'")
        cls = registry.get(step.action)
        if step.end or (cls is not None and cls.terminal):
            lines.append(f'  {ids[step.id]}(["{label}"])')
        elif cls is not None and cls.bounds_loops:
            lines.append(f'  {ids[step.id]}{{{{"{label}"}}}}')
        else:
            lines.append(f'  {ids[step.id]}["{label}"]')
    if pipeline.entry_step_id in ids:
        lines.append(f"  __start__ --> {ids[pipeline.entry_step_id]}")
    for src, dst, label in _edges(pipeline, registry):
        if dst not in ids:
            continue
        arrow = "-.->" if label.startswith("catch ") else "-->"
        text = "" if label == "next" else f"|{label.replace('|', '/')}|"
        lines.append(f"  {ids[src]} {arrow}{text} {ids[dst]}")
    return "\n".join(lines)


def to_dot(pipeline: Pipeline, registry: Registry) -> str:
    """A Graphviz digraph with the same information."""
    lines = [f'digraph "{pipeline.name}" {{', "  rankdir=TB;", "  __start__ [shape=point];"]
    for step in pipeline.steps:
        cls = registry.get(step.action)
        shape = "box"
        if step.end or (cls is not None and cls.terminal):
            shape = "doublecircle"
        elif cls is not None and cls.bounds_loops:
            shape = "hexagon"
        lines.append(f'  "{step.id}" [shape={shape}, label="{step.id}\\n({step.action})"];')
    if pipeline.has_step(pipeline.entry_step_id):
        lines.append(f'  __start__ -> "{pipeline.entry_step_id}";')
    for src, dst, label in _edges(pipeline, registry):
        if not pipeline.has_step(dst):
            continue
        style = ", style=dashed" if label.startswith("catch ") else ""
        text = "" if label == "next" else label.replace('"', "'")
        lines.append(f'  "{src}" -> "{dst}" [label="{text}"{style}];')
    lines.append("}")
    return "\n".join(lines)
