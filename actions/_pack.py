"""call_model's context pack: what the call sent, by section, and what was left out.

`record(ctx, ...)` feeds runtime/context/packs.py's PackBuilder from what call_model
assembled and what its budget stage did (actions/_budget.py's `record`), stores the pack
(Services.packs), traces CONTEXT_PACK, and enforces the step's `pack_budget`:
PACK_BUDGET_OVER (an event) for a section 5-10% over its share, PACK_BUDGET_EXCEEDED
(an error, after the pack is stored) beyond. A drop report that accounts for less than
95% of the tokens the call removed is a PACK_COVERAGE_LOW event.

Where each section comes from (docs/packs.md):
- policy: the step's system prompt file; fidelity: the preamble, or a `full` thread's turns;
- history: conversation_history turns; tools: the specs of the tools offered;
- user: parts reading a run input (the question); task: other parts and the templates;
- knowledge: evidence blocks, one item per node;
- memory: the memories, experiences and values of an assemble_context pack a part reads
  (its `<output_to>_markdown`); the pack's code, docs and commits go to knowledge, and
  what the assembly left out or cut goes to the drop report (`by: assemble_context`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from runtime.context import packs
from runtime.context.blocks import HEADER, as_evidence, block_id, split_block, split_blocks
from runtime.contract.action import StepContext

# search_nodes' modes as the pack's retriever kinds.
RETRIEVERS = {"bm25": "keyword", "semantic": "vector", "vector": "vector", "hybrid": "hybrid"}


def record(
    ctx: StepContext,
    *,
    model: str,
    messages: list[dict[str, Any]],
    prompt_tokens: int,
    fidelity: Mapping[str, Any],
    budget: Mapping[str, Any],
    count: Callable[[str], int],
    render: Callable[[Any], str],
    scrub: Callable[[str], str],
    tools: list[str] | None = None,
) -> dict[str, Any]:
    """Build, store and check the pack of the call about to be made; the pack."""
    b = packs.PackBuilder(
        run_id=ctx.run_id,
        step_id=ctx.step_id,
        model=model,
        prompt_budget=budget.get("budget"),
        pack_budget=packs.resolve_budget(ctx.settings, ctx.step),
    )
    summarised = {s["id"]: s for s in budget.get("summarised") or ()}
    thread_turns = int(fidelity.get("thread_messages") or 0)
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    # The turns the thread's compaction put behind pointers, by message index.
    compacted: dict[int, list[str]] = {}
    for e in (budget.get("compaction") or {}).get("map") or ():
        compacted.setdefault(int(e["index"]), []).append(e["pointer_id"])
    # A `full` step sends its thread's turns, then its own messages (system prompt first).
    own_start = thread_turns if fidelity.get("fidelity") == "full" else 0
    for i, m in enumerate(messages):
        content = m.get("content") or ""
        if i == own_start and m["role"] == "system":
            _system(ctx, b, content, fidelity, count)
        elif i == last_user and ctx.step.get("user_parts"):
            _user_parts(ctx, b, summarised, count, render, scrub)
        else:
            kind = "fidelity" if i < own_start else "history"
            if m["role"] == "tool" or m.get("tool_calls"):
                kind = "tools"
            sid = f"{m['role']}[{i}]"
            hits = [s for k, s in summarised.items() if k == sid or k.startswith(sid + ".")]
            item: dict[str, Any] = {
                "id": sid,
                "source": "thread" if kind == "fidelity" else "history",
                "reason": f"a {m['role']} turn of "
                + (f"thread {fidelity.get('thread_id')}" if kind == "fidelity" else "the history"),
                "content_hash": packs.content_hash(content),
            }
            refs = compacted.get(i, [])
            if hits:
                refs = refs + [s["pointer_id"] for s in hits]
                levels = [s["level"] for s in hits if s.get("level")]
                if levels:
                    item["compaction_level"] = max(levels)
                for s in hits:
                    _summarised_drop(b, s)
            if refs:
                item["summary_ref"] = refs
            b.add(kind, count(content), item=item)
            b.reason(
                kind,
                f"the {fidelity.get('thread_id')!r} thread the step joined (fidelity full)"
                if kind == "fidelity"
                else "conversation_history (use_history)",
            )
    _tools(ctx, b, count, tools)
    for d in budget.get("evidence_drops") or ():  # issue 29: off-topic and flagged text
        detail = {k: v for k, v in d.items() if k not in ("id", "reason", "tokens_saved")}
        b.drop(d["id"], d["reason"], d["tokens_saved"], **detail)
    saved = sum(s["tokens_before"] - s["tokens_after"] for s in summarised.values())
    b.removed_by_call(int(budget.get("original_tokens") or prompt_tokens) - prompt_tokens, saved)
    compaction = budget.get("compaction")
    if compaction:
        entries = compaction["map"]
        for e in entries:
            b.drop(
                e["id"],
                "compaction",
                e["tokens_before"] - e["tokens_after"],
                pointer_id=e["pointer_id"],
                by="context_policy.trace_threshold_tokens",
            )
        b.removed_by_call(
            compaction["tokens_before"] - compaction["tokens_after"],
            sum(e["tokens_before"] - e["tokens_after"] for e in entries),
        )
    if b.sections["knowledge"]["items"]:
        _retrieval_drops(ctx, b)
    pack = b.finish(
        messages, prompt_tokens, fidelity_mode=fidelity.get("fidelity"), access=_access(ctx)
    )
    seq = ctx.services.packs.save_pack(ctx.run_id, pack, b.body, b.body_sha256)
    event = packs.summary(pack)
    del event["step_id"]  # the event's own
    ctx.trace("CONTEXT_PACK", pack_seq=seq, **event)
    drops = pack["drops"]
    if drops["coverage"] < packs.MIN_COVERAGE:
        ctx.trace(
            "PACK_COVERAGE_LOW",
            pack_id=pack["pack_id"],
            coverage=drops["coverage"],
            tokens_removed=drops["tokens_removed"],
            tokens_accounted=drops["tokens_accounted"],
        )
    over = [a for a in pack["adherence"] if a["verdict"] != "ok"]
    for a in over:
        if a["verdict"] == "warning":
            ctx.trace("PACK_BUDGET_OVER", pack_id=pack["pack_id"], **a)
    errors = [a for a in over if a["verdict"] == "error"]
    if errors:
        what = ", ".join(
            f"{a['section']} {a['tokens']} tokens over its {a['budget']} ({a['over']:.0%})"
            for a in errors
        )
        raise packs.PackBudgetExceededError(
            f"pack_budget exceeded by more than {packs.ERROR_OVER:.0%}: {what}",
            step_id=ctx.step_id,
            hint=f"the pack: runtime context {ctx.run_id} --step {ctx.step_id}",
        )
    return pack


def _system(
    ctx: StepContext, b: packs.PackBuilder, content: str, fidelity: Mapping[str, Any], count: Any
) -> None:
    """The system message: the prompt file (policy) and the fidelity preamble after it."""
    preamble = int(fidelity.get("preamble_tokens") or 0)
    key = ctx.step.get("prompt_key")
    total = count(content)
    policy = max(0, total - preamble)
    b.add(
        "policy",
        policy,
        item={
            "id": f"prompt:{key}",
            "source": "prompt file",
            "reason": "the step's prompt_key",
            "content_hash": packs.content_hash(content),
        },
    )
    b.reason("policy", f"the step's system prompt ({key})")
    if preamble:
        b.add(
            "fidelity",
            preamble,
            item={
                "id": "preamble",
                "source": "fidelity preamble",
                "reason": f"the run so far, fidelity {fidelity.get('fidelity')}",
            },
        )
        b.reason(
            "fidelity", f"fidelity {fidelity.get('fidelity')} ({fidelity.get('fidelity_from')})"
        )
        for what in ("steps", "variables"):
            dropped = fidelity.get(f"preamble_{what}_dropped")
            if dropped:
                b.drop(
                    f"preamble:{what}", "truncation", None, count=dropped, by="fidelity preamble"
                )


def _user_parts(
    ctx: StepContext,
    b: packs.PackBuilder,
    summarised: Mapping[str, Mapping[str, Any]],
    count: Any,
    render: Any,
    scrub: Any,
) -> None:
    """Each user part: the question (user), evidence blocks (knowledge), the rest (task)."""
    evidence: list[tuple[str, str]] = []  # (segment id, block)
    for name, part in (ctx.step.get("user_parts") or {}).items():
        source = part["source"]
        value = as_evidence(ctx.get(source, None))
        template = str(part.get("template", "{}")).replace("{}", "", 1)
        if template.strip():
            b.add("task", count(template))
            b.reason("task", "the user parts' templates")
        blocks = _blocks(value)
        sid = f"user_parts.{name}"
        if blocks is not None:
            evidence += [(f"{sid}[{j}]", blk) for j, blk in enumerate(blocks)]
            continue
        record = _assembly_record(ctx, source, value)
        if record is not None:
            _assembled(b, source, record, count)
            continue
        text = render(value)
        s = summarised.get(sid)
        # Sent summarised: its pointer block (the original is not counted again: it may be
        # megabytes, and the policy's tokens_before may be a lower bound).
        tokens = s["tokens_after"] if s is not None else count(text)
        item: dict[str, Any] = {
            "id": sid,
            "source": f"variable {source}",
            "reason": f"user part {name!r} reads {source}",
            "content_hash": packs.content_hash(text),
        }
        if s is not None:
            item["summary_ref"] = s["pointer_id"]
            if s.get("level"):
                item["compaction_level"] = s["level"]
            _summarised_drop(b, s)
        kind = "user" if source == "question" or source in ctx.inputs else "task"
        b.add(kind, max(0, tokens), item=item)
        b.reason(kind, "the run's input" if kind == "user" else "the step's user parts")
    if evidence:
        _knowledge(ctx, b, evidence, summarised, count, scrub)


def _blocks(value: Any) -> list[str] | None:
    """The evidence blocks of a part's value, or None when it is not evidence."""
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, str) for v in value)
        and any(v.startswith(HEADER) for v in value)
    ):
        return list(value)
    if isinstance(value, str) and HEADER in value:
        return split_blocks(value)
    return None


# Item kinds of an assembly record that are memory (premortem's facets are experiences').
MEMORY_KINDS = frozenset({"memory", "experience", "value", "facet"})
# An assembly drop reason (its start) as the drop report's reason.
ASSEMBLY_DROPS = (
    ("duplicate of ", "duplicate"),
    ("over budget", "budget_skip"),
    ("max_items", "budget_skip"),
    ("over the item cap", "per_item_cap"),
)


def _assembly_record(ctx: StepContext, source: str, value: Any) -> Mapping[str, Any] | None:
    """The assemble_context record whose markdown a part reads (`X_markdown` beside `X`)."""
    if not isinstance(value, str) or not source.endswith("_markdown"):
        return None
    record = ctx.get(source[: -len("_markdown")], None)
    if (
        isinstance(record, Mapping)
        and record.get("markdown") == value
        and isinstance(record.get("items"), list)
        and isinstance(record.get("dropped"), list)
    ):
        return record
    return None


def _assembled(b: packs.PackBuilder, source: str, record: Mapping[str, Any], count: Any) -> None:
    """An assembly's items in the memory (or knowledge) section, its drops in the report."""
    items = [i for i in record["items"] if isinstance(i, Mapping)]
    kinds = {"memory" if i.get("kind") in MEMORY_KINDS else "knowledge" for i in items}
    shown = 0
    for i in items:
        kind = "memory" if i.get("kind") in MEMORY_KINDS else "knowledge"
        # The record is state: any step could have written one, so each field is checked.
        tokens = _count(i.get("tokens")) or 0
        shown += tokens
        name = packs.clip(str(i.get("source")))
        labels = i.get("labels")
        item: dict[str, Any] = {
            "id": str(i.get("id")),
            "source": f"assembly:{name}",
            "score": _number(i.get("score")),
            "labels": [packs.clip(x) for x in labels[:50]] if _strings(labels) else None,
            "reason": f"assembled from source {name!r} ({packs.clip(str(i.get('kind')))}) by score",
            "location": packs.clip(str(i.get("location"))),
        }
        if i.get("truncated"):
            item["truncated"] = True
            b.drop(
                item["id"],
                "per_item_cap",
                None,
                by="assemble_context",
                source=name,
                shortened=True,
                full_tokens=_count(i.get("full_tokens")),
                pointer_id=packs.clip(i.get("pointer_id")),
            )
        b.add(kind, tokens, item=item)
        b.reason(kind, f"the assembled context in {source}")
    # Its section headings and footer: the assembly's framing, where its items are.
    rest = count(record["markdown"]) - shown if items else 0
    if rest > 0:
        b.add("memory" if "memory" in kinds else "knowledge", rest)
    for d in record["dropped"]:
        if not isinstance(d, Mapping):
            continue
        why = str(d.get("reason") or "")
        reason = next((r for start, r in ASSEMBLY_DROPS if why.startswith(start)), "assembly")
        b.drop(
            str(d.get("id")),
            reason,
            _count(d.get("tokens")),
            by="assemble_context",
            source=packs.clip(str(d.get("source"))),
            note=why,
        )


def _count(value: Any) -> int | None:
    """A token count from state, or None."""
    return value if type(value) is int and value >= 0 else None


def _number(value: Any) -> float | int | None:
    """A score from state, or None."""
    return value if type(value) in (int, float) else None


def _strings(value: Any) -> bool:
    """Whether a value from state is a list of strings."""
    return isinstance(value, list) and all(isinstance(x, str) for x in value)


def _knowledge(
    ctx: StepContext,
    b: packs.PackBuilder,
    evidence: list[tuple[str, str]],
    summarised: Mapping[str, Mapping[str, Any]],
    count: Any,
    scrub: Any,
) -> None:
    """One item per evidence block, with where it came from and the scope that admitted it."""
    seeds = [s for s in ctx.get("retrieval_seed_nodes", None) or () if isinstance(s, str)]
    hits = {
        h["id"]: h
        for h in ctx.get("retrieval_hits", None) or ()
        if isinstance(h, Mapping) and "id" in h
    }
    expanded = {n for n in ctx.get("graph_expanded_nodes", None) or () if isinstance(n, str)}
    parents: dict[str, str] = {}
    for e in ctx.get("graph_edges", None) or ():
        if isinstance(e, Mapping):
            a, z = str(e.get("from_id")), str(e.get("to_id"))
            if a in seeds and z not in seeds:
                parents.setdefault(z, a)
            elif z in seeds and a not in seeds:
                parents.setdefault(a, z)
    mode = ctx.get("retrieval_mode", None)
    query = ctx.get("retrieval_query", None)
    query = packs.clip(scrub(query)) if isinstance(query, str) else None
    # Labels are read back for retrieved nodes only (a block a step assembled may name a
    # node of no index the run has).
    ids = [block_id(blk) for _, blk in evidence]
    retrieved = [n for n in ids if n is not None and (n in hits or n in expanded)]
    scope, filters, labels = _scope(ctx, retrieved)
    admitted = _admitted(ctx)
    seen: set[str] = set()
    for (sid, blk), node in zip(evidence, ids, strict=True):
        nid = node or sid
        s = summarised.get(sid)
        # Sent summarised: its header and the pointer block its text went behind.
        tokens = count(split_block(blk)[0]) + s["tokens_after"] if s is not None else count(blk)
        item: dict[str, Any] = {"id": nid, "content_hash": packs.content_hash(blk)}
        if node is None:  # a string between the blocks (a divider a step added)
            item.update(source="assembly", score=None, reason="text between evidence blocks")
        elif nid in hits:
            hit = hits[nid]
            item.update(source="search", score=hit.get("score"), rank=hit.get("rank"))
            item["reason"] = f"search hit, rank {hit.get('rank')}"
            item["evidence"] = {
                "retriever": RETRIEVERS.get(str(mode), str(mode)),
                "query": query,
                "filters": filters,
                "score": hit.get("score"),
            }
        elif nid in expanded:
            item.update(source="expansion", score=None)
            item["reason"] = f"graph neighbour of {parents.get(nid) or 'a search hit'}"
            item["evidence"] = {
                "retriever": "graph",
                "query": parents.get(nid),  # the search hit it was reached from
                "filters": filters,
                "score": None,
            }
        else:
            item.update(source="assembly", score=None, reason="a block the step's input holds")
        if node is not None:
            # None: not read back (a node no search or expansion of this run returned).
            item["labels"] = labels.get(nid) if nid in hits or nid in expanded else None
            # The access decision that admitted it (docs/access.md), else the scope.
            item["decision"] = admitted.get(nid) or f"scope:{scope}"
        if s is not None:
            item["summary_ref"] = s["pointer_id"]
            if s.get("level"):
                item["compaction_level"] = s["level"]
            _summarised_drop(b, s, node=nid)
        if _shortened(blk):
            b.drop(nid, "compaction", None, by="manage_context_budget", shortened=True)
        if nid in seen:
            item["duplicate"] = True
            b.drop(nid, "duplicate", 0, note="sent more than once")
        seen.add(nid)
        b.add("knowledge", max(0, tokens), item=item)
    b.reason(
        "knowledge",
        f"evidence blocks: {len(seeds)} search hits ({mode}) and their graph expansion, "
        "fetched under the evidence budget",
    )


def _shortened(block: str) -> bool:
    """Whether a block's header says `compact: true` (manage_context_budget shortened it):
    `"\ncompact: true\n" in header + "\n"`, found without copying the block."""
    end = block.find("\ntext:\n")
    if end < 0:
        return "\ncompact: true\n" in block or block.endswith("\ncompact: true")
    return block.find("\ncompact: true\n", 0, end + 1) >= 0


def _scope(ctx: StepContext, ids: list[str]) -> tuple[str, dict[str, Any], dict[str, list[str]]]:
    """The run's scope as `repository/snapshot/labels` and as filters; each node's labels.

    `*`: any repository (snapshot); `unlabelled`: no allowed labels, so only unlabelled
    nodes are visible (runtime/retrieval/node.py's Scope).
    """
    from actions._scope import run_scope

    scope = run_scope(ctx)
    allowed = "+".join(scope.allowed_labels or ()) or "unlabelled"
    text = f"{scope.repository or '*'}/{scope.snapshot or '*'}/{allowed}"
    filters = {
        "repository": scope.repository,
        "snapshot": scope.snapshot,
        "allowed_labels": list(scope.allowed_labels or ()),
    }
    labels: dict[str, list[str]] = {}
    if ids:
        nodes = ctx.services.node_store.get_nodes(ids, scope=scope)
        labels = {nid: sorted(node.labels or ()) for nid, node in nodes.items()}
    return text, filters, labels


def _admitted(ctx: StepContext) -> dict[str, str]:
    """node id -> the access decision that admitted it (fetch's, else the search's)."""
    out: dict[str, str] = {}
    for h in ctx.get("retrieval_hits", None) or ():
        if isinstance(h, Mapping) and isinstance(h.get("decision"), str):
            out[str(h.get("id"))] = h["decision"]
    debug = ctx.get("fetch_debug", None)
    for c in (debug.get("candidates") or ()) if isinstance(debug, Mapping) else ():
        if isinstance(c, Mapping) and isinstance(c.get("access"), str):
            out[str(c.get("id"))] = c["access"]
    return out


def _access(ctx: StepContext) -> dict[str, Any] | None:
    """The access decisions of the reads behind this call: ids and reasons of the allowed
    ones, the denied ones counted (never listed: docs/access.md)."""
    reads = [r for r in ctx.get("access_decisions", None) or () if isinstance(r, Mapping)]
    if not reads:
        return None
    engines = sorted({str(r.get("engine")) for r in reads})
    decisions = sorted({d for r in reads for d in r.get("decisions") or () if isinstance(d, str)})
    return {
        "engines": engines,
        "reads": len(reads),
        "decisions": decisions[:200],
        "denied": sum(int(r.get("denied") or 0) for r in reads),
        "failed": sum(1 for r in reads if r.get("code") == "ACCESS_ENGINE_FAILED"),
    }


# fetch_node_texts' skip reasons as drop reasons.
FETCH_SKIPS = {"over_budget": "budget_skip", "missing_or_not_visible": "scope_deny"}


def _retrieval_drops(ctx: StepContext, b: packs.PackBuilder) -> None:
    """What the last fetch_node_texts considered and did not take (its fetch_debug)."""
    for hit in ctx.get("retrieval_hits", None) or ():
        for child in (hit.get("children") or ()) if isinstance(hit, Mapping) else ():
            b.drop(str(child), "duplicate", 0, by="search_nodes", note=f"folded into {hit['id']}")
    graph = ctx.get("graph_debug", None)
    if isinstance(graph, Mapping) and graph.get("truncated"):
        b.drop(
            "graph:max_nodes",
            "per_item_cap",
            None,
            by="expand_dependency_tree",
            note=f"expansion stopped at max_nodes {graph.get('max_nodes')}",
        )
    debug = ctx.get("fetch_debug", None)
    if not isinstance(debug, Mapping):
        return
    for c in debug.get("candidates") or ():
        if not isinstance(c, Mapping) or c.get("decision") != "skip":
            continue
        reason = str(c.get("reason"))
        b.drop(
            str(c.get("id")),
            FETCH_SKIPS.get(reason, reason),
            c.get("cost") if isinstance(c.get("cost"), int) else None,
            by="fetch_node_texts",
            unit=debug.get("unit") if "cost" in c else None,
        )


def _summarised_drop(b: packs.PackBuilder, s: Mapping[str, Any], node: str | None = None) -> None:
    b.drop(
        s["id"],
        s.get("drop_reason", "summarisation"),  # compaction: context_policy.compact's
        s["tokens_before"] - s["tokens_after"],
        pointer_id=s["pointer_id"],
        node=node,
        kind=s.get("kind"),
        by=s.get("by"),
        # False: the original was not counted whole (too big), tokens_saved is a lower bound.
        exact=s.get("tokens_before_exact", True),
        # Compaction's level (1 per source, 2 per cluster, 3 the session), why, and the
        # cluster or session block it was folded into.
        level=s.get("level"),
        level_reason=s.get("level_reason"),
        cluster=s.get("cluster"),
        session=s.get("session"),
    )


def _tools(
    ctx: StepContext, b: packs.PackBuilder, count: Any, names: list[str] | None = None
) -> None:
    """The specs of the tools the call offers (default: every one the step names)."""
    from actions._tools import entries, resolve

    if names is None:
        names = [name for name, _, _ in entries(ctx.step.get("tools"))]
    if not names:
        return
    specs = {t.name: t.spec() for t in resolve(ctx.step.get("tools"))}
    for name in names:
        spec = json.dumps(specs[name], sort_keys=True)
        tokens = count(spec)
        b.outside += tokens
        b.add(
            "tools",
            tokens,
            item={
                "id": f"tool:{name}",
                "source": "tool spec",
                "reason": "offered by the step's tools:",
                "content_hash": packs.content_hash(spec),
            },
        )
    b.reason("tools", "the step's `tools:`")
