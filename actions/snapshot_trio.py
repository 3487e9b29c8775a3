"""The older engine's snapshot comparison: `parallel_roads_action`, `fork_action`, `merge_action`.

In the older engine (LocalAI-RAG) a fork ran the steps from its `search_action` up to the
`merge_action` once per snapshot, in a loop over shared mutable state: the merge stored
each snapshot's `node_texts` under a label ("Branch {}") and routed back to the fork
until every snapshot was done, then appended the labelled blocks to `context_blocks`.
Here the same pipeline file runs unchanged, but the segment runs as concurrent branches
(actions/branches.py), one per snapshot, each a run of its own on a copy of the state
with the snapshot as its `snapshot` input: no branch sees another's results, a failed
branch fails the fork (as the older engine's exception did), a resumed run re-runs only
the branches that had not completed. The fork then goes straight to the merge, which
builds the same labelled blocks in the order the fork names the snapshots.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from runtime.contract.action import (
    ENGINE_OWNED,
    Action,
    Outcome,
    Problem,
    StepContext,
    Transition,
)
from runtime.errors import RunError

# What the older engine's merge emptied after each snapshot (its retrieval state): here the
# branches wrote them, so the parent holds them empty after the merge, as it did there.
CLEARED: dict[str, Any] = {
    "retrieval_seed_nodes": [],
    "retrieval_hits": [],
    "graph_seed_nodes": [],
    "graph_expanded_nodes": [],
    "graph_edges": [],
    "graph_debug": {},
    "graph_node_texts": [],
    "node_texts": [],
}
STATE = "parallel_roads"  # where the fork leaves each snapshot's node_texts for the merge
# The older engine's references to the request's two snapshots -> the variables holding them.
REFS = {
    "${snapshot_id}": "snapshot_id",
    "$snapshot_id": "snapshot_id",
    "snapshot_id": "snapshot_id",
    "${snapshot_id_b}": "snapshot_id_b",
    "$snapshot_id_b": "snapshot_id_b",
    "snapshot_id_b": "snapshot_id_b",
}
_SNAPSHOTS = {
    "type": "object",
    "minProperties": 1,
    "propertyNames": {"pattern": "^[A-Za-z0-9_.-]+$"},
    "additionalProperties": {"type": "string", "minLength": 1},
}


class ParallelRoads(Action):
    """Opens a snapshot comparison (the older engine initialised its state here)."""

    name = "parallel_roads_action"
    summary = "The older engine's snapshot comparison opener (nothing to do here)."
    runnable = True
    writes = (STATE,)

    def run(self, ctx: StepContext) -> None:
        """A new comparison starts with no results (a loop back here starts over)."""
        ctx.set(STATE, {})


class Fork(Action):
    """Runs the steps from `search_action` to the merge once per snapshot, concurrently."""

    name = "fork_action"
    summary = "The older engine's snapshot fork: its segment runs once per snapshot, at once."
    fields: ClassVar[dict[str, dict[str, Any]]] = {
        "search_action": {
            "type": "string",
            "minLength": 1,
            "description": "The first step each snapshot runs (up to the merge_action).",
        },
        "snapshots": {
            **_SNAPSHOTS,
            "description": "name -> snapshot id, or ${snapshot_id} / ${snapshot_id_b} for "
            "the request's two snapshots.",
        },
        "on_done": {"type": "string", "description": "Ignored (the older engine's)."},
        "max_concurrency": {
            "type": "integer",
            "minimum": 1,
            "maximum": 64,
            "description": "Snapshots searched at once (default: all).",
        },
    }
    required = ("search_action", "snapshots")
    writes = (STATE,)
    runnable = True

    @classmethod
    def targets(cls, step: Mapping[str, Any]) -> Iterator[Transition]:
        """`next` and the segment's first step (what each branch runs)."""
        yield from super().targets(step)
        if isinstance(step.get("search_action"), str) and step.get("search_action") != step.get(
            "next"
        ):
            yield Transition("per snapshot", ("search_action",), step["search_action"])

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """The segment's shape is checked with the whole graph (runtime/format/checks.py)."""
        return iter(())

    def run(self, ctx: StepContext) -> Outcome:
        """Each snapshot's node_texts into `parallel_roads`, then on to the merge."""
        from actions.branches import run_branches
        from runtime.engine import Engine
        from runtime.format.pipeline import Pipeline

        step = ctx.step
        plan = [(name, self._snapshot(ctx, name, ref)) for name, ref in step["snapshots"].items()]
        segment, merge = self._segment(ctx)
        data = self._sub_pipeline(ctx, segment, merge)
        pipeline = Pipeline.from_dict(data, file=ctx.pipeline.file)
        store = getattr(ctx.services, "run_store", None)
        registry = getattr(ctx.services, "registry", None)
        engine = Engine(pipeline, registry=registry, services=ctx.services, store=store)
        # A copy of the state, as the older engine's segment saw it (each branch its own).
        state = {k: v for k, v in ctx.variables().items() if k not in ENGINE_OWNED}
        state.pop(STATE, None)
        jobs = [
            (name, "segment", {**state, "snapshot": snapshot, "snapshot_id": snapshot})
            for name, snapshot in plan
        ]
        width = int(step.get("max_concurrency", len(jobs)))
        results = run_branches(ctx, {"segment": engine}, jobs, width=width, fail_fast=True)
        ctx.set(
            STATE,
            {
                "snapshots": [[name, snapshot] for name, snapshot in plan],
                "results": {
                    name: list(r.state.get("node_texts") or [])
                    for (name, _), r in zip(plan, results, strict=True)
                },
            },
        )
        return Outcome.goto(merge, "merge")

    @staticmethod
    def _snapshot(ctx: StepContext, name: str, ref: str) -> str:
        ref = ref.strip()
        variable = REFS.get(ref)
        if variable is None:
            return ref
        value = ctx.inputs.get(variable)
        if value is None and variable == "snapshot_id":
            value = ctx.inputs.get("snapshot")  # this runtime's name for the first one
        if not isinstance(value, str) or not value.strip():
            raise RunError(
                f"step {ctx.step_id!r}: snapshot {name!r} is {ref}, but the run has no "
                f"{variable!r} input",
                code="VARIABLE_MISSING",
                step_id=ctx.step_id,
            )
        return value.strip()

    @staticmethod
    def _segment(ctx: StepContext) -> tuple[list[str], str]:
        from runtime.format.compat import snapshot_segment
        from runtime.format.transitions import outgoing

        pipeline: Any = ctx.pipeline
        registry = getattr(ctx.services, "registry", None)
        actions = {s.id: s.action for s in pipeline.steps}

        def successors(sid: str) -> list[str]:
            s = pipeline.step(sid)
            cls = registry.get(s.action) if registry is not None else None
            return [e.target for e in outgoing(s.config, cls)]

        try:
            return snapshot_segment(ctx.step_id, ctx.step["search_action"], actions, successors)
        except ValueError as exc:  # validate reports it first (SNAPSHOT_TRIO_INVALID)
            raise RunError(
                f"step {ctx.step_id!r}: {exc}", code="SNAPSHOT_TRIO_INVALID", step_id=ctx.step_id
            ) from exc

    @staticmethod
    def _sub_pipeline(ctx: StepContext, segment: list[str], merge: str) -> dict[str, Any]:
        """The segment as a pipeline of its own: its steps, then the merge's id as its end."""
        pipeline: Any = ctx.pipeline
        state = {k for k in ctx.variables() if k not in ENGINE_OWNED and k != STATE}
        inputs = {name: {"type": "any", "required": False} for name in state}
        inputs.update(
            {n: {"type": "string"} for n in ("snapshot", "snapshot_id")},
        )
        settings = {
            k: v for k, v in pipeline.settings.items() if k not in ("entry_step_id", "compat_mode")
        }
        settings["entry_step_id"] = segment[0]
        steps = [dict(pipeline.step(sid).config) for sid in segment]
        # Where the older engine's segment went on to the merge, a branch ends.
        steps.append({"id": merge, "action": "parallel_roads_action", "end": True})
        return {
            "name": f"{pipeline.name}/{ctx.step_id}",
            "settings": settings,
            "inputs": inputs,
            "steps": steps,
        }


class Merge(Action):
    """The snapshots' node texts as labelled blocks appended to `context_blocks`."""

    name = "merge_action"
    summary = "The older engine's snapshot merge: labelled evidence blocks per snapshot."
    fields: ClassVar[dict[str, dict[str, Any]]] = {
        "snapshots": {
            **_SNAPSHOTS,
            "description": "name -> label template ('{}' is the snapshot's name).",
        },
        "on_done": {"type": "string", "description": "Ignored (the older engine's)."},
    }
    required = ("snapshots",)
    reads = (STATE,)
    writes = ("context_blocks", *CLEARED)
    runnable = True

    def run(self, ctx: StepContext) -> None:
        """context_blocks + (label, node blocks) per snapshot, in the fork's order."""
        roads = ctx.get(STATE, None)
        if not isinstance(roads, Mapping) or "results" not in roads:
            raise RunError(
                f"step {ctx.step_id!r}: no snapshot results to merge (a fork_action must run "
                "before a merge_action)",
                code="VARIABLE_MISSING",
                step_id=ctx.step_id,
            )
        labels = ctx.step["snapshots"]
        blocks: list[str] = []
        for name, _snapshot in roads["snapshots"]:
            blocks.append(_label(str(labels.get(name) or ""), name))
            blocks.extend(
                _node_block(n) for n in roads["results"].get(name, []) if isinstance(n, Mapping)
            )
        before = ctx.get("context_blocks", None)
        ctx.set("context_blocks", [*(before if isinstance(before, list) else []), *blocks])
        for name, empty in CLEARED.items():
            ctx.set(name, type(empty)())
        ctx.trace(
            "SNAPSHOT_MERGE", snapshots=[n for n, _ in roads["snapshots"]], blocks=len(blocks)
        )


def _label(template: str, name: str) -> str:
    """The older engine's label rule: '{}' or '{name}' is replaced, else the name follows."""
    t = template.strip()
    if not t:
        return name
    if "{}" in t:
        return t.replace("{}", name)
    if "{name}" in t:
        return t.replace("{name}", name)
    return f"{t} {name}"


def _node_block(node: Mapping[str, Any]) -> str:
    """One node as the older engine's merge wrote it."""
    node_id = str(node.get("node_id") or node.get("id") or "").strip()
    path = str(node.get("path") or node.get("source") or "").strip()
    return f"--- NODE ---\nid: {node_id}\npath: {path}\ntext:\n{node.get('text') or ''}\n"
