"""Step-graph drawings (Mermaid, Graphviz dot) so authors can look at a pipeline."""

from __future__ import annotations

import re
from collections.abc import Mapping

from runtime.contract.registry import Registry
from runtime.format.branches import as_action, branch_refs, branch_steps
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


def branches_of(pipeline: Pipeline) -> list[tuple[str, str, Pipeline]]:
    """(step id, branch name, the branch as a pipeline) for each map and parallel step."""
    out = []
    for step in pipeline.steps:
        for name, steps in branch_steps(step.config).items():
            if not isinstance(steps, list) or not steps:
                continue
            plain = [as_action(s) for s in steps if isinstance(s, Mapping)]
            first = plain[0].get("id") if plain else None
            sub = Pipeline.from_dict(
                {"name": f"{step.id}/{name}", "settings": {"entry_step_id": first}, "steps": plain}
            )
            out.append((step.id, str(name), sub))
        for name, ref in branch_refs(step.config).items():  # drawn as the pipeline it runs
            sub = Pipeline.from_dict(
                {
                    "name": f"{step.id}/{name}",
                    "settings": {"entry_step_id": "pipeline"},
                    "steps": [{"id": "pipeline", "action": ref, "end": True}],
                }
            )
            out.append((step.id, str(name), sub))
    return out


def _branch_title(pipeline: Pipeline, sid: str, name: str) -> str:
    """`map per_snapshot: each snapshot` (the item's name), `parallel both: code`."""
    step = pipeline.step(sid)
    if step.action == "map":
        return f"map {sid}: each {step.config.get('as') or 'item'}"
    return f"parallel {sid}: {name}"


def to_mermaid(pipeline: Pipeline, registry: Registry, prefix: str = "s") -> str:
    """A Mermaid flowchart: entry marked, ends as stadium shapes, branches labelled; the
    branches of map and parallel steps as subgraphs."""
    lines = ["flowchart TD", "  __start__((start))"] if prefix == "s" else []
    ids = {s.id: f"{prefix}{i}" for i, s in enumerate(pipeline.steps)}
    for step in pipeline.steps:
        label = _node_label(pipeline, step.id)
        cls = registry.get(step.action)
        if step.end or (cls is not None and cls.terminal):
            lines.append(f'  {ids[step.id]}(["{label}"])')
        elif cls is not None and cls.bounds_loops:
            lines.append(f'  {ids[step.id]}{{{{"{label}"}}}}')
        else:
            lines.append(f'  {ids[step.id]}["{label}"]')
    if pipeline.entry_step_id in ids and prefix == "s":
        lines.append(f"  __start__ --> {ids[pipeline.entry_step_id]}")
    for n, (sid, name, sub) in enumerate(branches_of(pipeline)):
        inner = f"{ids[sid]}b{n}_"
        title = mermaid_text(_branch_title(pipeline, sid, name))
        lines.append(f'  subgraph {inner}g["{title}"]')
        lines.extend("  " + line for line in to_mermaid(sub, registry, inner).splitlines())
        lines.append("  end")
        if sub.entry_step_id in {s.id for s in sub.steps}:
            first = [s.id for s in sub.steps].index(sub.entry_step_id)
            lines.append(
                f"  {ids[sid]} -.->|{'each' if pipeline.step(sid).action == 'map' else 'branch'}| {inner}{first}"
            )
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
    for n, (sid, name, sub) in enumerate(branches_of(pipeline)):
        inner = f"{sid}/{name}"
        lines.append(f"  subgraph {dot_string('cluster_' + str(n))} {{")
        lines.append(f"    label={dot_string(_branch_title(pipeline, sid, name))};")
        for step in sub.steps:
            label = dot_string(f"{step.id}\n({step.action})")
            lines.append(f"    {dot_string(inner + '/' + step.id)} [shape=box, label={label}];")
        for src, dst, _label, shown in _edges(sub, registry):
            if sub.has_step(dst):
                lines.append(
                    f"    {dot_string(inner + '/' + src)} -> {dot_string(inner + '/' + dst)}"
                    f" [label={dot_string(shown)}];"
                )
        lines.append("  }")
        if sub.has_step(sub.entry_step_id):
            lines.append(
                f"  {dot_string(sid)} -> {dot_string(inner + '/' + sub.entry_step_id)}"
                " [style=dotted];"
            )
    lines.append("}")
    return "\n".join(lines)
