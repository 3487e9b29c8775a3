"""fetch_node_texts: materialise node texts into node_texts under an evidence budget."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

from actions._scope import access_view, record_access
from runtime.context.blocks import format_block, seed_block, selected_metadata
from runtime.context.tokens import CUT_RULE, digest
from runtime.contract.action import Action, Outcome, Problem, StepContext, setting_ref
from runtime.contract.tool import ToolFace
from runtime.errors import RunError

# Ordered from least to most sensitive: the aggregate reports the highest present.
CLASSIFICATION_LEVELS = ("public", "internal", "confidential", "restricted", "secret")

MODES = ("seed_first", "graph_first", "balanced")


class FetchNodeTexts(Action):
    """Order candidates, measure each formatted block, skip what does not fit."""

    name = "fetch_node_texts"
    summary = "Materialise seed and graph node texts under an evidence budget."
    fields = {
        "prioritization_mode": {
            "enum": list(MODES),
            "description": "Order of candidates (default balanced).",
        },
        "max_chars": {"type": "integer", "minimum": 1, "description": "Budget in characters."},
        "budget_tokens": {"type": "integer", "minimum": 1, "description": "Budget in tokens."},
        "budget_tokens_from_settings": setting_ref({"type": "integer"}),
        "include_metadata_in_context": {
            "type": "boolean",
            "description": "Add metadata lines to blocks.",
        },
        "metadata_fields": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Metadata keys to include (default all).",
        },
        # Written in the older engine's pipelines, read by neither engine: a warning says so.
        "max_context_tokens": {
            "type": "integer",
            "minimum": 1,
            "description": "Older engine field, ignored as it was there (the global budget is "
            "settings.max_context_tokens).",
        },
        "top_n_from_settings": {
            "type": "string",
            "minLength": 1,
            "description": "Older engine field, ignored as it was there.",
        },
    }
    tool = ToolFace(
        name="fetch_node_texts",
        description="Read the source text of the nodes found by search_nodes and "
        "expand_dependency_tree, within an evidence budget; returns them as evidence blocks "
        "to cite by node id.",
        parameters={
            "type": "object",
            "properties": {
                "prioritization_mode": {
                    "enum": list(MODES),
                    "description": "seed_first: found nodes first; graph_first: each found "
                    "node with its neighbours; balanced: alternate.",
                },
                "budget_tokens": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Most tokens of text (never more than the step allows).",
                },
            },
            "additionalProperties": False,
        },
        ceilings=("budget_tokens",),
        result=("node_texts",),
        items="node_texts",
        accumulate=("node_texts",),
        safety=("read_only", "scoped"),
        access="fetch",
    )
    reads = ("retrieval_seed_nodes", "graph_expanded_nodes", "graph_edges")
    defaults = {"retrieval_seed_nodes": [], "graph_expanded_nodes": [], "graph_edges": []}
    runnable = True
    writes = ("node_texts", "fetch_debug", "security_labels", "security_classification")

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Exactly one budget; the fallback setting must exist; it must fit the global budget."""
        for ignored in ("max_context_tokens", "top_n_from_settings"):
            if ignored in step:
                yield Problem(
                    "FIELD_IGNORED",
                    f"{ignored} on a fetch_node_texts step is ignored, as the older engine "
                    "ignored it: the budget is budget_tokens, budget_tokens_from_settings, "
                    "max_chars, else 70% of settings.max_context_tokens",
                    (ignored,),
                    severity="warning",
                    key=True,
                )
        given = [
            k for k in ("max_chars", "budget_tokens", "budget_tokens_from_settings") if k in step
        ]
        if len(given) > 1:
            yield Problem(
                "BUDGET_OPTIONS_EXCLUSIVE",
                f"{' and '.join(given)} exclude each other",
                (given[1],),
                key=True,
            )
        if not given and not isinstance(settings.get("max_context_tokens"), int):
            yield Problem(
                "BUDGET_SETTING_MISSING",
                "no budget given and settings.max_context_tokens "
                "is not set (the default budget is 70% of it)",
                ("action",),
                hint="set budget_tokens or settings.max_context_tokens",
            )
        budget = step.get("budget_tokens")
        if isinstance(step.get("budget_tokens_from_settings"), str):
            budget = settings.get(step["budget_tokens_from_settings"])
        total = settings.get("max_context_tokens")
        if isinstance(budget, int) and isinstance(total, int) and budget > total:
            path = "budget_tokens" if "budget_tokens" in step else "budget_tokens_from_settings"
            yield Problem(
                "BUDGET_CANNOT_FIT",
                f"evidence budget {budget} exceeds settings.max_context_tokens {total}",
                (path,),
            )

    @staticmethod
    def _mode(ctx: StepContext) -> tuple[str, str]:
        mode, source = ctx.step.get("prioritization_mode", "balanced"), "yaml"
        for msg in ctx.messages:  # the last message that asks wins
            wanted = msg.payload.get("prioritization_mode")
            if wanted is not None:
                if wanted not in MODES:
                    raise RunError(
                        f"inbox message {msg.id} asks for prioritization_mode {wanted!r}; "
                        f"valid: {', '.join(MODES)}",
                        code="PRIORITIZATION_MODE_INVALID",
                    )
                mode, source = wanted, "inbox"
        return mode, source

    @staticmethod
    def _bfs(
        seeds: list[str], edges: list[dict[str, str]]
    ) -> tuple[dict[str, int], dict[str, str | None], dict[str, str]]:
        """Depth, parent and root seed of every node reachable from the seeds (edges undirected)."""
        adj: dict[str, list[str]] = {}
        for e in edges:
            adj.setdefault(e["from_id"], []).append(e["to_id"])
            adj.setdefault(e["to_id"], []).append(e["from_id"])
        depth = {s: 0 for s in seeds}
        parent: dict[str, str | None] = {s: None for s in seeds}
        root = {s: s for s in seeds}
        queue = deque(seeds)
        while queue:
            cur = queue.popleft()
            for nxt in sorted(adj.get(cur, [])):
                if nxt not in depth:
                    depth[nxt], parent[nxt], root[nxt] = depth[cur] + 1, cur, root[cur]
                    queue.append(nxt)
        return depth, parent, root

    @staticmethod
    def order(
        mode: str, seeds: list[str], graph: list[str], depth: dict[str, int], root: dict[str, str]
    ) -> list[str]:
        """Candidate order for a prioritization mode."""
        ranked_graph = sorted(graph, key=lambda n: (depth.get(n, 10**6), n))
        if mode == "seed_first":
            return seeds + ranked_graph
        if mode == "graph_first":
            out: list[str] = []
            for s in seeds:
                out.append(s)
                out += [g for g in ranked_graph if root.get(g) == s]
            return out + [g for g in ranked_graph if g not in out]
        out, gi = [], iter(ranked_graph)
        for s in seeds:
            out.append(s)
            g = next(gi, None)
            if g is not None:
                out.append(g)
        return out + list(gi)

    def _budget(self, ctx: StepContext) -> tuple[str, int]:
        step = ctx.step
        if "max_chars" in step:
            return "chars", int(step["max_chars"])
        if "budget_tokens" in step:
            return "tokens", int(step["budget_tokens"])
        key = step.get("budget_tokens_from_settings", "max_context_tokens")
        value = ctx.settings.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            # validate reports this (BUDGET_SETTING_MISSING); a pipeline run unvalidated
            # through the engine gets the same answer, not a KeyError.
            raise RunError(
                f"no evidence budget: settings.{key} is {value!r}, not an integer",
                code="BUDGET_SETTING_MISSING",
            )
        if key != "max_context_tokens":
            return "tokens", value
        # 70%, in integers: int(0.7 * 90) is 62, not 63.
        return "tokens", value * 7 // 10

    def run(self, ctx: StepContext) -> Outcome | None:
        """Order candidates, then take each whole block that fits (atomic skip)."""
        mode, source = self._mode(ctx)
        seeds = list(
            dict.fromkeys(s for s in ctx.get("retrieval_seed_nodes", []) if isinstance(s, str))
        )
        expanded = [n for n in ctx.get("graph_expanded_nodes", []) if isinstance(n, str)]
        graph = [n for n in dict.fromkeys(expanded) if n not in seeds]
        depth, parent, root = self._bfs(seeds, list(ctx.get("graph_edges", [])))
        candidates = self.order(mode, seeds, graph, depth, root)
        # An evaluation's plan (runtime eval; runtime/context/evidence_hook.py): distractors
        # added, the evidence placed; unset in every other run.
        hook = getattr(ctx.services, "evidence_hook", None)
        if hook is not None:
            candidates = hook.candidates(ctx.step_id, candidates)
        view = access_view(ctx)  # the run's access policy decides what is fetched
        nodes = view.get_nodes(candidates, action="fetch")
        admitted = record_access(ctx, view)
        unit, budget = self._budget(ctx)
        if hook is not None:
            budget = hook.budget(ctx.step_id, unit, budget)
        counter = ctx.services.tokens() if unit == "tokens" else None
        fields = ctx.step.get("metadata_fields")
        with_meta = bool(ctx.step.get("include_metadata_in_context"))
        used, items, decisions, missing, empty = 0, [], [], 0, 0
        for nid in candidates:
            node = nodes.get(nid)
            if node is None:
                missing += 1
                decisions.append(
                    {"id": nid, "decision": "skip", "reason": "missing_or_not_visible"}
                )
                continue
            if not node.text.strip():
                empty += 1
                decisions.append({"id": nid, "decision": "skip", "reason": "empty"})
                continue
            meta = selected_metadata(node.metadata, fields) if with_meta else {}
            block = format_block(node.to_dict(), compact=False, metadata=meta)
            # The text's counts from the index, bound to its digest: the budget step (in
            # this process or another) then encodes only the block's header and joints.
            carried = _carried(node)
            if counter and carried:
                seed_block(counter, block, {"text": node.text, "tokens": carried})
            cost = counter.count_block(block, "\n\n") if counter else len(block) + 2
            if used + cost > budget:
                decisions.append(
                    {"id": nid, "decision": "skip", "reason": "over_budget", "cost": cost}
                )
                continue
            used += cost
            items.append(
                {
                    "id": nid,
                    "text": node.text,
                    "path": node.path,
                    "language": node.language,
                    "is_seed": nid in seeds,
                    "depth": depth.get(nid),
                    "parent_id": parent.get(nid),
                    "labels": node.labels,
                    "metadata": meta,
                    **({"tokens": carried} if carried else {}),
                }
            )
            decisions.append(
                {"id": nid, "decision": "include", "cost": cost, "access": admitted.get(nid)}
            )
        if hook is not None:
            by_id = {it["id"]: it for it in items}
            items = [by_id[i] for i in hook.arrange(ctx.step_id, [it["id"] for it in items])]
            ctx.trace("EVIDENCE_HOOK", order=[it["id"] for it in items], **hook.describe())
        labels = sorted({lb for it in items for lb in it["labels"]})
        levels = [lb for lb in CLASSIFICATION_LEVELS if lb in labels]
        ctx.set("node_texts", items)
        ctx.set("security_labels", labels)
        ctx.set("security_classification", levels[-1] if levels else None)
        debug = {
            "mode": mode,
            "mode_source": source,
            "budget": budget,
            "unit": unit,
            "used": used,
            "included": len(items),
            "missing": missing,
            "empty": empty,
            "candidates": decisions,
        }
        ctx.set("fetch_debug", debug)
        ctx.trace("FETCH_NODE_TEXTS", **{k: v for k, v in debug.items() if k != "candidates"})
        return None


def _carried(node: Any) -> dict[str, Any] | None:
    """The node text's index counts as a record TokenCounter.carried reads; None if it has none."""
    counts = getattr(node, "tokens", None)  # a store of another kind may not count
    if not counts:
        return None
    return {
        "digest": digest(node.text),
        "rule": CUT_RULE,
        "parts": {name: list(parts) for name, parts in sorted(counts.items())},
    }
