"""call_model's budget stage: the context policy between message assembly and the model.

`stage(ctx, provider, messages, reserve)` maps the assembled chat messages onto the
policy's segments (runtime/context/policy.py), compacts the conversation thread past
`trace_threshold_tokens`, decides ok | needs_summary | reject, traces
`CONTEXT_BUDGET_DECISION`, and returns the messages to send with their exact size.
`reject` raises `CONTEXT_OVERFLOW` (catchable, as before the policy existed).

Segments: each user part's value (each evidence block on its own) is summarisable
unless the part says `summarizable: false` or reads `question`; history and thread
turns are summarisable when they are the model's (`assistant`) or a tool's; system turns
never are, nor the user turns of `conversation_history` (what the person asked). The user
turns of a `full` thread are the prompts earlier steps assembled (their evidence and all):
they are summarisable like the model's turns, so a thread that validates clean under a
policy cannot overflow on the whole user messages it keeps (docs/fidelity.md). The user message is segmented only when re-rendering it part by
part gives exactly the assembled text, so a change in assembly can never make the
policy send something else: otherwise it is one segment that is not summarisable.

A prompt sent over its budget (possible only in dry_run) increments the run counter
`context_budget_violations`; compactions increment `compactions` and `tokens_saved`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from actions import _summarisers  # noqa: F401  (installs the code summariser)
from runtime.context import policy as pol
from runtime.context.blocks import HEADER, as_evidence, split_block, split_blocks
from runtime.context.joined import whole
from runtime.context.pointers import store_of
from runtime.contract.action import StepContext
from runtime.errors import ContextOverflowError

# User parts that hold the question itself: never summarised whatever the step says.
NEVER_SUMMARISED = frozenset({"question"})
SUMMARISABLE_ROLES = frozenset({"assistant", "tool"})


_OPEN_EVIDENCE = "<evidence>\n"
_CLOSE_EVIDENCE = "\n</evidence>"


def user_pieces(ctx: StepContext, render: Any, note: str, escape: Any) -> list[str | pol.Segment]:
    """The user message as fixed text and segments (one per part, one per evidence block)."""
    pieces: list[str | pol.Segment] = []
    parts = ctx.step.get("user_parts") or {}
    for i, (name, part) in enumerate(parts.items()):
        if i:
            pieces.append("\n\n")
        template = part.get("template", "{}")
        before, after = template.split("{}", 1) if "{}" in template else (template + "\n", "")
        value = as_evidence(ctx.get(part["source"]))  # node records are evidence too
        summarizable = part.get("summarizable", True) and part["source"] not in NEVER_SUMMARISED
        kind = part.get("summary_kind")
        pieces.append(before)
        if (
            isinstance(value, list)
            and value
            and all(isinstance(v, str) for v in value)
            and any(v.startswith(HEADER) for v in value)
        ):
            pieces.append(f"{note}\n<evidence>\n")
            for j, block in enumerate(value):
                if j:
                    pieces.append("\n\n")
                pieces += _block_pieces(
                    f"user_parts.{name}[{j}]", escape(block), summarizable, kind
                )
            pieces.append("\n</evidence>")
        elif isinstance(value, str) and HEADER in value:
            # Blocks joined in one string: cut before each header (escaping is per block
            # as render's is over the whole: no escaped pattern spans a header).
            pieces.append(f"{note}\n<evidence>\n")
            for j, chunk in enumerate(split_blocks(value)):
                pieces += _block_pieces(
                    f"user_parts.{name}[{j}]", escape(chunk), summarizable, kind
                )
            pieces.append("\n</evidence>")
        else:
            pieces.append(pol.Segment(f"user_parts.{name}", render(value), summarizable, kind))
        pieces.append(after)
    return pieces


def _block_pieces(sid: str, block: str, summarizable: bool, kind: str | None) -> list[Any]:
    """An evidence block as its header (fixed text) and its text (the segment).

    Only the text may go behind a pointer: the header names the node, so a summarised
    block is still read, and cited, as its node (issue 24).
    """
    head, text = split_block(block)
    if not head:
        return [pol.Segment(sid, text, summarizable, kind)]
    # The node and its path, for compaction's clusters (runtime/context/hierarchy.py).
    fields: dict[str, str] = {}
    for key, value in _FIELD.findall(head):  # the header's own lines come before metadata
        fields.setdefault(key, value)
    seg = pol.Segment(
        sid, text, summarizable, kind, cite=fields.get("id"), group=fields.get("path")
    )
    return [head, seg]


_FIELD = re.compile(r"^(id|path): (.+)$", re.M)


def prompt_of(
    ctx: StepContext,
    messages: list[dict[str, Any]],
    user: list[str | pol.Segment],
    thread_turns: int = 0,
) -> list[pol.PromptMessage]:
    """The assembled messages as policy messages (see the module doc for what is segmented).

    thread_turns: how many of the first messages are a `full` thread's history.
    """
    out: list[pol.PromptMessage] = []
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    for i, m in enumerate(messages):
        content = m.get("content") or ""
        if i == last_user and i == len(messages) - 1 and ctx.step.get("user_parts"):
            built = pol.PromptMessage("user", user)
            if built.is_content(content):
                out.append(built)
                continue
        content = whole(content)  # not segmented as the step's parts: sent as one text
        role = m["role"]
        if role == "user" and i < thread_turns:
            # An earlier turn of the thread: summarisable, but its evidence blocks keep their
            # headers and the delimiter around them, as the step's own part does.
            out.append(pol.PromptMessage(role, turn_pieces(f"{role}[{i}]", content)))
            continue
        summarizable = role in SUMMARISABLE_ROLES
        out.append(pol.PromptMessage(role, [pol.Segment(f"{role}[{i}]", content, summarizable)]))
    return out


def turn_pieces(sid: str, content: str) -> list[str | pol.Segment]:
    """A thread's earlier user turn as pieces: the text around its `<evidence>` sections
    summarisable, each section's delimiters and block headers fixed, each block's text a
    segment of its own. A turn with no evidence is one summarisable segment."""
    pieces: list[str | pol.Segment] = []
    rest, n = content, 0
    while True:
        start = rest.find(_OPEN_EVIDENCE)
        end = rest.find(_CLOSE_EVIDENCE, start + 1) if start >= 0 else -1
        if start < 0 or end < 0 or HEADER not in rest[start:end]:
            break
        if start:
            pieces.append(pol.Segment(f"{sid}.text{n}", rest[:start], True))
        pieces.append(_OPEN_EVIDENCE)
        body = rest[start + len(_OPEN_EVIDENCE) : end]
        for j, chunk in enumerate(split_blocks(body)):
            pieces += _block_pieces(f"{sid}.evidence{n}[{j}]", chunk, True, None)
        pieces.append(_CLOSE_EVIDENCE)
        rest, n = rest[end + len(_CLOSE_EVIDENCE) :], n + 1
    if rest or not pieces:
        pieces.append(pol.Segment(f"{sid}.text{n}" if pieces else sid, rest, True))
    return pieces


def stage(
    ctx: StepContext,
    provider: Any,
    messages: list[dict[str, Any]],
    reserve: int,
    *,
    overhead: int,
    render: Any,
    note: str,
    escape: Any,
    thread: str | None = None,
    preamble_tokens: int = 0,
    record: dict[str, Any] | None = None,
    tool_spec_tokens: int = 0,
) -> tuple[list[dict[str, Any]], int]:
    """Apply the step's context policy; the messages to send and their exact token count.

    `record`, when given, gets what a context pack needs (runtime/context/packs.py): the
    prompt budget, the tokens before the policy, the summarised segments and the thread's
    compaction (`budget`, `original_tokens`, `summarised`, `compaction`).

    `thread`: the thread a `full` step resolved (fid.resolve_thread), None for a fresh
    conversation, whose turns are conversation_history's. `preamble_tokens`: the fidelity
    preamble's share of the system message (a reject names it when it is the cause).
    """
    cfg = pol.policy_config(ctx.settings, ctx.step)
    if not cfg.enabled or cfg.dry_run:  # the prompt goes as assembled: as whole text
        messages = plain(messages)
    config = provider.config
    margin = config.token_margin  # the tokenizer may not be the model's (docs/models.md)
    profile = pol.model_profile(config.name, config.context_window, reserve, cfg, margin)
    full_budget = profile.budget
    if tool_spec_tokens:  # the specs are sent beside the messages: their room comes first
        profile = dataclasses.replace(profile, budget=profile.budget - tool_spec_tokens)
    counter = ctx.services.tokens_for(config)
    turns = len(ctx.thread(thread)) if thread else 0
    user = user_pieces(ctx, render, note, escape) if cfg.enabled else []
    prompt = prompt_of(ctx, messages, user, turns)
    store = store_of(ctx) if cfg.enabled else None
    # The blocks tell the model to rehydrate only when it has the tool to.
    way_back = _offers_rehydrate(ctx.step)
    if store is not None and cfg.trace_threshold_tokens and not cfg.dry_run:
        compaction = _compact(
            ctx, prompt, cfg, counter, store, overhead, thread or "conversation_history", way_back
        )
        if record is not None and compaction is not None:
            record["compaction"] = compaction
    auto = None
    if store is not None and isinstance(cfg.compact, Mapping) and not cfg.dry_run:
        auto = _auto_compact(ctx, prompt, cfg, profile.budget, counter, store, overhead, way_back)
        if record is not None and cfg.compact.get("after_tool_call"):
            record["prompt_messages"] = prompt  # compact_round's, before each tool round
    summarise_with = None
    if store is not None and not cfg.dry_run:  # a dry run asks no model for summaries
        from actions import _model_summary

        if _model_summary.wanted([s for m in prompt for s in m.segments()]):
            summarise_with = _model_summary.summariser(ctx, store, counter, way_back)
    decision = pol.enforce(
        prompt,
        profile,
        cfg,
        counter,
        store=store if store is not None else pol.NoStore(),
        run_id=ctx.run_id,
        overhead=overhead,
        preamble_tokens=preamble_tokens,
        summarise_with=summarise_with,
        way_back=way_back,
    )
    data = decision.trace_data(ctx.step_id, config.name)
    compacted = [{**e, **_COMPACTED} for e in auto.entries] if auto else []
    if auto is not None:
        data.update(
            compacted_by="trigger" if compacted else None,
            compaction_trigger=auto.fired,
            compacted=compacted,
            compacted_tokens_before=auto.tokens_before,
            compacted_tokens_after=auto.tokens_after,
            compaction_levels=auto.levels,
            compaction_folds=auto.folds,
        )
    if record is not None:
        record.update(
            budget=full_budget,  # the pack's prompt budget: the messages and the specs
            # Before the trigger's compaction too: the pack's drop report accounts for both.
            original_tokens=decision.original_tokens
            + (auto.tokens_before - auto.tokens_after if auto else 0),
            summarised=compacted + ([] if cfg.dry_run else list(decision.summarised)),
        )
    data.update(tokenizer=config.tokenizer, token_margin=margin)
    if tool_spec_tokens:  # `budget` stays the prompt budget; the messages had less
        data.update(
            budget=full_budget, tool_spec_tokens=tool_spec_tokens, messages_budget=profile.budget
        )
    if decision.decision == "reject":
        # The prompt as it came, for `runtime trace RUN --step ID --full` (or --messages).
        ctx.trace("CONTEXT_BUDGET_DECISION", **data, messages=rejected_prompt(plain(messages)))
        bound = "" if decision.exact else "at least "
        raise ContextOverflowError(
            f"prompt {bound}{decision.prompt_tokens} tokens exceeds the "
            f"{decision.budget}-token prompt budget of {config.name} ({config.context_window}-"
            f"token window, {decision.reserve} reserved for output"
            f"{f', {tool_spec_tokens} for the tool specs offered' if tool_spec_tokens else ''}"
            f") by {bound}{decision.deficit}: {decision.reason}",
            step_id=ctx.step_id,
            hint=f"{decision.hint} The rejected prompt: runtime trace {ctx.run_id} --step "
            f"{ctx.step_id} --messages (the decision's numbers: --full).",
        )
    if cfg.dry_run:  # decided and traced; the prompt goes as assembled
        sent = messages
        tokens = sum(counter.count_cached(m.get("content") or "") + overhead for m in messages)
        hard = pol.model_profile(
            config.name, config.context_window, profile.reserve, pol.PolicyConfig(), margin
        )
        if tokens + tool_spec_tokens > hard.budget:
            ctx.trace("CONTEXT_BUDGET_DECISION", **data, sent_tokens=None)
            specs = f" + {tool_spec_tokens} of tool specs" if tool_spec_tokens else ""
            raise ContextOverflowError(
                f"prompt {tokens} tokens{specs} + {profile.reserve} reserved for output exceeds the "
                f"{config.context_window}-token window of {config.name} (context_policy dry_run"
                f"{f', token_margin {margin:g}' if margin else ''})",
                step_id=ctx.step_id,
            )
    else:
        sent = [
            {**m, "content": pm.content()} if pm.content() != m.get("content") else m
            for m, pm in zip(messages, prompt, strict=True)
        ]
        tokens = decision.prompt_tokens
    # What goes to the model in the first round (a dry run sends the prompt as assembled).
    ctx.trace("CONTEXT_BUDGET_DECISION", **data, sent_tokens=tokens)
    if tokens > profile.budget:
        ctx.increment("context_budget_violations")
    write_pointers(ctx, compacted + ([] if cfg.dry_run else decision.summarised))
    return sent, tokens


# What a trigger's compaction adds to each entry: the pack's drop reason and what caused it.
_COMPACTED = {"drop_reason": "compaction", "by": "context_policy.compact"}


def _auto_compact(
    ctx: StepContext,
    prompt: list[pol.PromptMessage],
    cfg: pol.PolicyConfig,
    budget: int,
    counter: Any,
    store: Any,
    overhead: int,
    way_back: bool,
    force: str | None = None,
) -> pol.AutoCompaction:
    """context_policy.compact on the prompt (pol.compact_prompt); counted in the run.

    As for the thread's compaction, a payload compacted on an earlier call (the same
    pointer) is not counted again.
    """
    spec = cfg.compact or {}
    known = {p["pointer_id"] for p in store.pointers(ctx.run_id)}
    result = pol.compact_prompt(
        prompt,
        budget,
        counter,
        at=float(spec.get("at", pol.DEFAULT_COMPACT_AT)),
        max_items=spec.get("max_items"),
        force=force,
        store=store,
        run_id=ctx.run_id,
        overhead=overhead,
        summary_tokens=cfg.summary_tokens,
        way_back=way_back,
    )
    _count_new(ctx, result.entries, known)
    return result


def _count_new(ctx: StepContext, entries: list[dict[str, Any]], known: set[str]) -> None:
    """Count the compactions of entries in the run, but not one compacted on an earlier call
    (its pointer is among the run's known ones)."""
    new = [e for e in entries if e["pointer_id"] not in known]
    if new:
        ctx.increment("compactions", len(new))
        ctx.increment("tokens_saved", sum(e["tokens_before"] - e["tokens_after"] for e in new))


def compact_round(
    ctx: StepContext,
    provider: Any,
    messages: list[dict[str, Any]],
    record: dict[str, Any],
    number: int,
    overhead: int,
) -> None:
    """`compact: {after_tool_call: true}`: before tool round `number`, the payloads of the
    step's prompt (already read by the model) go behind pointers, in place in `messages`;
    the tool calls and results stay whole. Traced as CONTEXT_COMPACTED."""
    prompt: list[pol.PromptMessage] | None = record.get("prompt_messages")
    if not prompt:
        return
    cfg = pol.policy_config(ctx.settings, ctx.step)
    store = store_of(ctx)
    if store is None:
        return
    config = provider.config
    budget = int(record.get("budget") or 0)
    counter = ctx.services.tokens_for(config)
    way_back = _offers_rehydrate(ctx.step)
    result = _auto_compact(
        ctx, prompt, cfg, budget, counter, store, overhead, way_back, force="after_tool_call"
    )
    if not result.entries:
        return
    for i, pm in enumerate(prompt):
        content = pm.content()
        if messages[i].get("content") != content:
            messages[i] = {**messages[i], "content": content}
    ctx.trace(
        "CONTEXT_COMPACTED",
        model=config.name,
        round=number,
        compacted_by="after_tool_call",
        compacted=[{**e, **_COMPACTED} for e in result.entries],
        compaction_levels=result.levels,
        compaction_folds=result.folds,
        tokens_before=result.tokens_before,
        tokens_after=result.tokens_after,
    )


def write_pointers(ctx: StepContext, summarised: list[dict[str, Any]]) -> None:
    """Each user part's `pointer_to` variable: the pointer its value went behind.

    A record {pointer_id, kind, chars, lines, tokens_before, tokens_after}, or null when
    the part was sent whole; for a part of evidence blocks, the list of its summarised
    blocks' records (each with its `block` number). A `rehydrate` step reads a record with
    `pointer_id_from`, so no pointer id (a hash) need be written in the YAML.
    """
    for name, part in (ctx.step.get("user_parts") or {}).items():
        target = part.get("pointer_to")
        if not target:
            continue
        sid = f"user_parts.{name}"
        blocks = []
        record = None
        for s in summarised:
            keep = {k: s[k] for k in _RECORD if k in s}
            if s["id"] == sid:
                record = keep
            elif s["id"].startswith(sid + "["):
                blocks.append({"block": int(s["id"][len(sid) + 1 : -1]), **keep})
        value = ctx.get(part["source"], None)
        evidence = (
            isinstance(value, list)
            and any(isinstance(v, str) and v.startswith(HEADER) for v in value)
        ) or (isinstance(value, str) and HEADER in value)
        ctx.set(target, blocks if evidence or blocks else record)


_RECORD = ("pointer_id", "kind", "chars", "lines", "tokens_before", "tokens_after")


# A rejected prompt may be megabytes: the trace keeps this much of each message.
REJECTED_CHARS = 100_000


def plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """messages with every content as one string (a JoinedText joined)."""
    return [{**m, "content": whole(m.get("content") or "")} for m in messages]


def rejected_prompt(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of a rejected prompt for the trace, each cut at REJECTED_CHARS (said so)."""
    out = []
    for m in messages:
        content = m.get("content") or ""
        if len(content) > REJECTED_CHARS:
            content = (
                content[:REJECTED_CHARS]
                + f"\n[… the trace keeps the first {REJECTED_CHARS:,} of {len(content):,} "
                "characters of this message]"
            )
        out.append({"role": m["role"], "content": content})
    return out


def _compact(
    ctx: StepContext,
    prompt: list[pol.PromptMessage],
    cfg: pol.PolicyConfig,
    counter: Any,
    store: Any,
    overhead: int,
    thread_id: str,
    way_back: bool = True,
) -> dict[str, Any] | None:
    """Compact the thread (the turns between the system prompt and the user message).

    What was compacted (tokens before and after, the map of turns to pointers), or None.
    """
    start = 1 if prompt and prompt[0].role == "system" else 0
    end = len(prompt) - 1 if len(prompt) > start and prompt[-1].role == "user" else len(prompt)
    thread = prompt[start:end]
    if not thread:
        return None
    known = {p["pointer_id"] for p in store.pointers(ctx.run_id)}
    result = pol.compact_thread(
        thread,
        int(cfg.trace_threshold_tokens or 0),
        counter,
        store=store,
        run_id=ctx.run_id,
        overhead=overhead,
        summary_tokens=cfg.summary_tokens,
        way_back=way_back,
    )
    if not result.entries:
        return None
    ctx.trace(
        "THREAD_COMPACTED",
        thread=thread_id,
        threshold=cfg.trace_threshold_tokens,
        tokens_before=result.tokens_before,
        tokens_after=result.tokens_after,
        map=[{**e, "index": e["index"] + start} for e in result.entries],
    )
    _count_new(ctx, result.entries, known)
    return {
        "tokens_before": result.tokens_before,
        "tokens_after": result.tokens_after,
        "map": [{**e, "index": e["index"] + start} for e in result.entries],
    }


def policy_fields() -> Mapping[str, Any]:
    """The step field call_model declares for a per-step policy."""
    return {"context_policy": pol.POLICY_SCHEMA}


def _offers_rehydrate(step: Any) -> bool:
    """The step offers its model the rehydrate tool (any `tools:` form)."""
    from actions._tools import entries

    return any(name == "rehydrate" for name, _, _ in entries(step.get("tools")))
