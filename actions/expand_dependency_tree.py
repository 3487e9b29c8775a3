"""expand_dependency_tree: breadth-first expansion from the seeds over the dependency graph."""

from __future__ import annotations

from runtime.action import Action, Outcome, StepContext, setting_ref


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
            "type": "array",
            "items": {"type": "string"},
            "description": "Edge types to follow (default all).",
        },
        "edge_allowlist_from_settings": setting_ref({"type": "array"}),
        "direction": {
            "enum": ["out", "in", "both"],
            "description": "Edge direction (default out).",
        },
    }
    reads = ("retrieval_seed_nodes",)
    writes = ("graph_seed_nodes", "graph_expanded_nodes", "graph_edges", "graph_debug")

    def run(self, ctx: StepContext) -> Outcome | None:
        """Not runnable yet."""
        raise NotImplementedError
