"""expand_dependency_tree: breadth-first expansion from the seeds over the dependency graph."""

from __future__ import annotations

from typing import Any

from actions._scope import access_view, record_access
from runtime.contract.action import Action, Outcome, StepContext, setting_ref
from runtime.contract.tool import ToolFace


class ExpandDependencyTree(Action):
    """Walk edges from retrieval_seed_nodes; write graph_* variables."""

    name = "expand_dependency_tree"
    summary = "Follow the dependency graph from the search seeds."
    fields = {
        "max_depth": {
            "type": "integer",
            "minimum": 0,
            "description": "Hops from a seed (default 2).",
        },
        "max_depth_from_settings": setting_ref({"type": "integer"}),
        "max_nodes": {
            "type": "integer",
            "minimum": 1,
            "description": "Nodes in all, seeds included (default 25).",
        },
        "max_nodes_from_settings": setting_ref({"type": "integer"}),
        "edge_allowlist": {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "description": "Edge types to follow (default all; null, as the older engine "
            "wrote it, also means all).",
        },
        "edge_allowlist_from_settings": setting_ref({"type": "array"}),
        "direction": {
            "enum": ["out", "in", "both"],
            "description": "Edge direction (default out).",
        },
    }
    tool = ToolFace(
        name="expand_dependency_tree",
        description="Follow the dependency graph (calls, reads, writes, references) from the "
        "nodes found by search_nodes; returns the ids of the related nodes and the edges.",
        parameters={
            "type": "object",
            "properties": {
                "max_depth": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 5,
                    "description": "Hops from a found node (never more than the step allows).",
                },
                "max_nodes": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "description": "Nodes in all (never more than the step allows).",
                },
                "direction": {
                    "enum": ["out", "in", "both"],
                    "description": "out: what they use; in: what uses them; both.",
                },
            },
            "additionalProperties": False,
        },
        base={"max_depth": 2, "max_nodes": 25},
        ceilings=("max_depth", "max_nodes"),
        result=("graph_debug", "graph_expanded_nodes"),
        items="graph_expanded_nodes",
        accumulate=("graph_expanded_nodes", "graph_edges"),
        safety=("read_only", "scoped"),
        access="expand",
    )
    reads = ("retrieval_seed_nodes",)
    defaults = {"retrieval_seed_nodes": []}
    runnable = True
    writes = ("graph_seed_nodes", "graph_expanded_nodes", "graph_edges", "graph_debug")

    @staticmethod
    def _param(ctx: StepContext, name: str, default: Any) -> Any:
        if name in ctx.step:
            return ctx.step[name]
        key = ctx.step.get(f"{name}_from_settings")
        return ctx.settings[key] if isinstance(key, str) else default

    def run(self, ctx: StepContext) -> Outcome | None:
        """Walk the graph breadth-first; never through nodes the caller may not see."""
        seeds = [s for s in ctx.get("retrieval_seed_nodes", []) if isinstance(s, str)]
        max_depth = int(self._param(ctx, "max_depth", 2))
        max_nodes = int(self._param(ctx, "max_nodes", 25))
        allow = self._param(ctx, "edge_allowlist", None)
        direction = ctx.step.get("direction", "out")
        if not seeds:
            for name in ("graph_seed_nodes", "graph_expanded_nodes", "graph_edges"):
                ctx.set(name, [])
            ctx.set("graph_debug", {"reason": "no_seeds", "seeds": 0, "expanded": 0, "edges": 0})
            return None
        # Reads go through the run's access policy (docs/access.md): a node the subject may
        # not see is neither returned nor walked through.
        store = access_view(ctx)
        visible = store.get_nodes(seeds, action="expand")
        order = [s for s in dict.fromkeys(seeds) if s in visible][:max_nodes]
        included = set(order)
        edges: list[dict[str, str]] = []
        frontier, depth, truncated = list(order), 0, False
        while frontier and depth < max_depth and not truncated:
            depth += 1
            nxt: list[str] = []
            for f, t, e in store.edges(frontier, direction=direction, edge_types=allow):
                other = t if f in frontier and (direction != "in" or t not in frontier) else f
                if other not in included:
                    if len(included) >= max_nodes:
                        truncated = True
                        continue
                    included.add(other)
                    order.append(other)
                    nxt.append(other)
                edges.append({"from_id": f, "to_id": t, "edge_type": e})
            frontier = nxt
        edges = [
            e
            for e in {(d["from_id"], d["to_id"], d["edge_type"]): d for d in edges}.values()
            if e["from_id"] in included and e["to_id"] in included
        ]
        ctx.set("graph_seed_nodes", order[: len([s for s in seeds if s in visible])])
        ctx.set("graph_expanded_nodes", order)
        ctx.set("graph_edges", edges)
        debug = {
            "seeds": len([s for s in order if s in seeds]),
            "expanded": len(order) - len([s for s in order if s in seeds]),
            "edges": len(edges),
            "depth_reached": depth,
            "max_depth": max_depth,
            "max_nodes": max_nodes,
            "direction": direction,
        }
        if truncated:
            debug["truncated"] = True
        ctx.set("graph_debug", debug)
        record_access(ctx, store)
        ctx.trace("EXPAND", **debug)
        return None
