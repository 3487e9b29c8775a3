"""The budget policy of a model call: decide ok | needs_summary | reject, and apply it.

A prompt is a list of `PromptMessage`s, each a sequence of fixed text and `Segment`s
(payloads: a user part's value, an evidence block, a history turn, a thread message).
`enforce` counts it against the model profile's prompt budget with the real tokenizer:

- `ok`: it fits; nothing changes;
- `needs_summary`: the oldest summarisable segments are replaced, one at a time, by
  pointers (runtime/context/pointers.py) holding a summary (summarize.py), and the
  prompt is decided again until it fits; segments that are not summarisable (a user
  part with `summarizable: false`, the question, system and user turns) are never
  touched;
- `reject`: it cannot fit (the non-summarisable part alone is over the budget, the
  budget is under the emergency floor, or the policy is off); the caller raises
  `CONTEXT_OVERFLOW`.

`dry_run` decides and records what it would replace but changes nothing. Every
decision is exact: a prompt the policy passes is counted whole, never estimated.
Counting is cheap for huge payloads: a segment whose byte size or counted prefix (cut
where BPE pieces cannot span, see tokens.py) already exceeds the budget is known to
overflow without counting the rest.

`compact_thread` is the rolling ledger of a conversation thread: past
`trace_threshold_tokens`, its oldest summarisable messages become pointers, system and
user messages stay, in order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from runtime.context import pointers as ptr
from runtime.context.summarize import KINDS, MAX_TOKEN_BYTES, line_count, summarise

if TYPE_CHECKING:
    from runtime.context.joined import JoinedText

DEFAULT_SUMMARY_TOKENS = 200
DEFAULT_EMERGENCY_FLOOR = 256
DEFAULT_COMPACT_AT = 0.8  # compact: fraction of the prompt budget that triggers it
_MIN_SUMMARY = 8  # a thread message's summary under this many tokens is left out
_FULL_SUMMARY = 48  # under this, a thread message's summary is its opening words
_JOINT_SLACK = 2  # tokens a joint between two pieces may add when counted together
_SAFE_CUT = re.compile(r"\n(?=[^\s/])")  # see runtime/context/tokens.py

POLICY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Token budget policy of model calls (docs/budget.md).",
    "properties": {
        "enabled": {"type": "boolean", "description": "Summarise to fit (default true here)."},
        "dry_run": {"type": "boolean", "description": "Decide and trace, never change."},
        "prompt_budget": {
            "type": "integer",
            "minimum": 1,
            "description": "Prompt tokens (default: window minus response_reserve).",
        },
        "response_reserve": {
            "type": "integer",
            "minimum": 1,
            "description": "Tokens kept for the reply (default: the step's max_output_tokens).",
        },
        "trace_threshold_tokens": {
            "type": "integer",
            "minimum": 1,
            "description": "Compact a conversation thread past this many tokens.",
        },
        "summary_tokens": {
            "type": "integer",
            "minimum": 16,
            "description": f"Tokens of each summary (default {DEFAULT_SUMMARY_TOKENS}).",
        },
        "emergency_floor": {
            "type": "integer",
            "minimum": 0,
            "description": "Reject when the prompt budget is under this (default "
            f"{DEFAULT_EMERGENCY_FLOOR}).",
        },
        "compact": {
            "type": "object",
            "description": "Compact the context before the call even when it fits "
            "(docs/budget.md, Automatic compaction).",
            "properties": {
                "at": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": 1,
                    "description": "Above this fraction of the prompt budget (default "
                    f"{DEFAULT_COMPACT_AT}).",
                },
                "max_items": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Above this many whole summarisable payloads.",
                },
                "after_tool_call": {
                    "type": "boolean",
                    "description": "Before each tool round, the payloads already sent go "
                    "behind pointers.",
                },
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


@dataclass(frozen=True)
class PolicyConfig:
    """settings.context_policy with a step's context_policy over it."""

    enabled: bool = False
    dry_run: bool = False
    prompt_budget: int | None = None
    response_reserve: int | None = None
    trace_threshold_tokens: int | None = None
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS
    emergency_floor: int = DEFAULT_EMERGENCY_FLOOR
    compact: Mapping[str, Any] | None = None  # automatic compaction (compact_prompt)


# The shortest summary the policy shortens to before it rejects (summarisers floor at 16).
_MIN_SHRUNK = 16


def policy_config(settings: Mapping[str, Any], step: Mapping[str, Any]) -> PolicyConfig:
    """The policy of one step: none configured is off (overflow is CONTEXT_OVERFLOW)."""
    merged: dict[str, Any] = {}
    for source in (settings.get("context_policy"), step.get("context_policy")):
        if isinstance(source, Mapping):
            merged.update(source)
    if not merged:
        return PolicyConfig()
    known = set(PolicyConfig.__dataclass_fields__)
    return PolicyConfig(**{"enabled": True, **{k: v for k, v in merged.items() if k in known}})


@dataclass(frozen=True)
class Profile:
    """A model's budget: window, reserved reply, prompt budget, emergency floor."""

    model: str
    window: int
    reserve: int
    budget: int
    floor: int


def model_profile(
    model: str, window: int, max_output_tokens: int, cfg: PolicyConfig, margin: float = 0.0
) -> Profile:
    """The profile of a call: the budget is the window less the reserve, or less if set.

    A token_margin (the model's tokenizer is not the one counting) makes it the largest
    count with count * (1 + margin) <= window - reserve, in exact decimal arithmetic.
    """
    from fractions import Fraction

    reserve = cfg.response_reserve if cfg.response_reserve is not None else max_output_tokens
    budget = window - reserve
    if margin and budget > 0:
        budget = int(budget / (1 + Fraction(repr(float(margin)))))
    if cfg.prompt_budget is not None:
        budget = min(budget, cfg.prompt_budget)
    return Profile(model, window, reserve, budget, cfg.emergency_floor)


@dataclass
class Segment:
    """A payload in a prompt: its id, text, whether it may be summarised, its kind hint."""

    sid: str
    text: str
    summarizable: bool = True
    kind: str | None = None
    pointer: ptr.Pointer | None = None
    cite: str | None = None  # the node an evidence block is (its header's id)
    group: str | None = None  # ...and its path: compaction clusters blocks of one path

    @property
    def shown(self) -> str:
        """What the prompt holds: the text, or the pointer block that replaced it."""
        return self.pointer.display_text if self.pointer else self.text


@dataclass
class PromptMessage:
    """One chat message as fixed text and segments, concatenated in order."""

    role: str
    pieces: list[str | Segment]

    def content(self) -> str:
        """The message text as sent."""
        return "".join(p if isinstance(p, str) else p.shown for p in self.pieces)

    def is_content(self, text: str | JoinedText) -> bool:
        """Whether text is content(), compared piece by piece (no joined copy of a large one)."""
        at = 0
        for p in self.pieces:
            piece = p if isinstance(p, str) else p.shown
            if not text.startswith(piece, at):
                return False
            at += len(piece)
        return at == len(text)

    def segments(self) -> list[Segment]:
        """The message's segments in order."""
        return [p for p in self.pieces if isinstance(p, Segment)]


@dataclass
class Decision:
    """What the policy decided for one call, for the trace and the caller.

    A count is exact unless its flag says otherwise: a payload too large to be worth
    encoding whole is sized by a lower bound (`lower_bound`), and so is every total it is
    part of. `lower_bounds` names the event's fields that are bounds, not counts.
    """

    decision: str  # ok | needs_summary | reject
    reason: str
    prompt_tokens: int  # as sent (exact), or the lower bound the reject was decided on
    original_tokens: int  # before any summary (a lower bound when original_exact is False)
    budget: int
    reserve: int
    deficit: int
    summarised: list[dict[str, Any]] = field(default_factory=list)
    dry_run: bool = False
    exact: bool = True  # prompt_tokens (and a reject's deficit) is a count, not a bound
    original_exact: bool = True
    # A reject's cause (see REJECT_CAUSES), its numbers and what to do about it.
    cause: str = ""
    hint: str = ""
    breakdown: dict[str, Any] = field(default_factory=dict)

    @property
    def lower_bounds(self) -> list[str]:
        """The fields of the trace event that hold lower bounds instead of exact counts."""
        out = []
        if not self.exact:
            out.append("prompt_tokens")
        if not self.original_exact:
            out.append("original_tokens")
        # A reject's deficit is over the prompt it could make, a summary's over the original.
        if self.deficit and not (self.exact if self.decision == "reject" else self.original_exact):
            out.append("deficit")
        out += [
            f"summaries[{i}].tokens_before"
            for i, s in enumerate(self.summarised)
            if not s.get("tokens_before_exact", True)
        ]
        return out

    def trace_data(self, step: str, model: str) -> dict[str, Any]:
        """The CONTEXT_BUDGET_DECISION event's fields."""
        out = {
            "step": step,
            "model": model,
            "prompt_tokens": self.prompt_tokens,
            "original_tokens": self.original_tokens,
            "reserve": self.reserve,
            "budget": self.budget,
            "decision": self.decision,
            "reason": self.reason,
            "deficit": self.deficit,
            "summarised": [s["pointer_id"] for s in self.summarised],
            "summaries": self.summarised,
            "dry_run": self.dry_run,
            "exact": not self.lower_bounds,
            "lower_bounds": self.lower_bounds,
        }
        if self.decision == "reject":
            out.update(cause=self.cause, hint=self.hint, breakdown=self.breakdown)
        return out


# Why a prompt was rejected (Decision.cause), each with the hint the error carries.
REJECT_CAUSES: dict[str, str] = {
    "no_policy": "Set a context_policy so oversized payloads are summarised behind pointers, "
    "or bound the parts named (an input's maxLength, manage_context_budget).",
    "floor": "Raise prompt_budget (or the window) to at least emergency_floor, or lower "
    "emergency_floor.",
    "unsummarisable": "Shorten or bound the parts named (an input's maxLength; "
    "`summarizable: true` on a part that may be summarised), lower the reply reserve, or use "
    "a model with a larger context_window.",
    "preamble": "Give the step a lighter fidelity (truncate or compact), or raise its "
    "prompt budget.",
    "pointer_blocks": "Lower context_policy.summary_tokens, send fewer payloads (bound "
    "context_blocks with manage_context_budget), or use a larger context_window.",
    "summary_size": "Lower context_policy.summary_tokens: at this size a pointer block is no "
    "smaller than the payloads it would replace.",
}


def _utf8_size(text: str) -> int:
    """Bytes of text's UTF-8, a megabyte at a time (no whole encoded copy of a large input)."""
    if text.isascii():
        return len(text)
    step = 1 << 20
    return sum(len(text[at : at + step].encode("utf-8")) for at in range(0, len(text), step))


def lower_bound(text: str, limit: int, counter: Any) -> tuple[int, bool]:
    """(tokens, exact) of text, or a lower bound above limit found without counting it all."""
    size = _utf8_size(text) if len(text) * 4 > limit * MAX_TOKEN_BYTES else len(text)
    if size // MAX_TOKEN_BYTES > limit:  # no token holds more than MAX_TOKEN_BYTES bytes
        return size // MAX_TOKEN_BYTES, False
    # Counts add up exactly at a safe cut, so a prefix's count is a lower bound of the whole.
    pos = max(4 * limit, 4096)
    while pos < len(text):
        m = _SAFE_CUT.search(text, pos)
        if m is None:
            break
        head = counter.count_cached(text[: m.end()])
        if head > limit:
            return head, False
        pos = 2 * m.end()
    return counter.count_cached(text), True


def prompt_tokens(messages: Sequence[PromptMessage], counter: Any, overhead: int) -> int:
    """The exact prompt size: each message's content plus its framing tokens."""
    return sum(counter.count_cached(m.content()) + overhead for m in messages)


def _estimate(
    messages: Sequence[PromptMessage], sizes: dict[int, int], counter: Any, slack: int
) -> int:
    """Sum of pieces' counts (segments from sizes), with slack per joint."""
    total = 0
    for m in messages:
        for p in m.pieces:
            if isinstance(p, str):
                total += counter.count_cached(p) if p else 0
            else:
                total += sizes[id(p)]
            total += slack
    return max(total, 0)


class NoStore:
    """A dry run's store: keeps nothing."""

    def put_original(self, run_id: str, pointer_id: str, sha256: str, kind: str, text: str) -> None:
        """Keep nothing."""

    def get_original(self, run_id: str, pointer_id: str) -> tuple[str, str] | None:
        """Nothing is kept."""
        return None

    def pointers(self, run_id: str) -> list[dict[str, Any]]:
        """Nothing is kept."""
        return []

    def get_index(self, run_id: str, pointer_id: str) -> tuple[str, bytes | None] | None:
        """Nothing is kept."""
        return None

    def put_index(self, run_id: str, pointer_id: str, text: str, index: bytes) -> None:
        """Keep nothing."""

    def read_original(self, run_id: str, pointer_id: str, start: int, end: int) -> str:
        """Nothing is kept."""
        return ""

    def original_size(self, run_id: str, pointer_id: str) -> int | None:
        """Nothing is kept."""
        return None


def point(
    seg: Segment,
    store: ptr.PointerStore,
    run_id: str,
    counter: Any,
    summary_tokens: int,
    summariser: Callable[..., Any] = summarise,
    *,
    short_for: str | None = None,
    way_back: bool = True,
) -> ptr.Pointer:
    """Summarise a segment's text and store it behind a pointer (returned, not applied).

    With short_for (a thread message's role) the pointer has the short block, and a
    summary_tokens of 0 gives it no summary. way_back: the block may tell the model to
    rehydrate (the step offers the tool).
    """
    lines = line_count(seg.text)
    kind = seg.kind if seg.kind in KINDS else None
    if short_for and summary_tokens <= 0:
        return ptr.make_pointer(
            store,
            run_id,
            seg.text,
            kind or "text",
            "",
            lines,
            short_for=short_for,
            way_back=way_back,
        )
    if short_for and summary_tokens < _FULL_SUMMARY:
        # A few tokens: the message's opening words on one line are the best summary.
        head = " ".join(seg.text[: summary_tokens * 8].split())
        cut = counter.truncate(head, summary_tokens - 1)
        shown = cut + "…" if cut != head else cut
        return ptr.make_pointer(
            store,
            run_id,
            seg.text,
            kind or "text",
            shown,
            lines,
            short_for=short_for,
            way_back=way_back,
        )
    summary = summariser(seg.text, kind, max(16, summary_tokens), counter)
    return ptr.make_pointer(
        store,
        run_id,
        seg.text,
        summary.kind,
        summary.text,
        lines,
        short_for=short_for,
        way_back=way_back,
    )


def enforce(
    messages: Sequence[PromptMessage],
    profile: Profile,
    cfg: PolicyConfig,
    counter: Any,
    *,
    store: ptr.PointerStore,
    run_id: str,
    overhead: int,
    preamble_tokens: int = 0,
    summarise_with: Callable[[Segment, int], Any] | None = None,
    way_back: bool = True,
) -> Decision:
    """Decide for one prompt and, unless dry_run, replace segments by pointers to fit.

    preamble_tokens: how much of the first system message is the fidelity preamble (a
    reject names it as the cause when it is what overflows). summarise_with(segment,
    tokens): a summariser for a segment (None: the deterministic one of its kind).
    """
    budget = profile.budget
    base: dict[str, Any] = {"budget": budget, "reserve": profile.reserve, "dry_run": cfg.dry_run}
    segs = [s for m in messages for s in m.segments() if s.pointer is None]
    sizes: dict[int, int] = {}
    bounded: set[int] = set()  # segments whose size is a lower bound, not a count
    for s in segs:
        sizes[id(s)], known = lower_bound(s.text, budget, counter)
        if not known:
            bounded.add(id(s))
    exact = not bounded
    for m in messages:
        for s in m.segments():
            if s.pointer is not None:
                sizes[id(s)] = counter.count_cached(s.shown)
    if exact:
        original = prompt_tokens(messages, counter, overhead)
    else:
        original = max(sizes.values()) + overhead
    if original <= budget:
        return Decision("ok", "fits", original, original, deficit=0, **base)
    if budget < profile.floor or not cfg.enabled:
        cause = "floor" if budget < profile.floor else "no_policy"
        numbers = _breakdown(messages, sizes, bounded, (), counter, overhead, preamble_tokens)
        what = (
            f"the prompt budget {budget} is under the emergency floor {profile.floor}"
            if cause == "floor"
            else "over budget and no context_policy"
        )
        return Decision(
            "reject",
            f"{what}; {_largest(numbers)}",
            original,
            original,
            deficit=original - budget,
            exact=exact,
            original_exact=exact,
            cause=cause,
            hint=REJECT_CAUSES[cause],
            breakdown=numbers,
            **base,
        )
    # Work on copies in a dry run: the caller's prompt must stay as it is.
    work = list(messages)
    if cfg.dry_run:
        work = [
            PromptMessage(m.role, [replace(p) if isinstance(p, Segment) else p for p in m.pieces])
            for m in messages
        ]
        for wm, om in zip(work, messages, strict=True):
            for w, o in zip(wm.segments(), om.segments(), strict=True):
                sizes[id(w)] = sizes[id(o)]
                if id(o) in bounded:
                    bounded.add(id(w))
    inexact = bounded
    store_used: ptr.PointerStore = NoStore() if cfg.dry_run else store
    all_segs = [s for m in work for s in m.segments()]
    # Oldest first: segments in prompt order (history, then parts and their blocks).
    candidates = [s for s in all_segs if s.summarizable and s.pointer is None]
    summarised: list[dict[str, Any]] = []
    replaced: list[Segment] = []

    def settled() -> bool:  # every size known exactly (no lower bound left in the prompt)
        return not any(id(s) in inexact and s.pointer is None for s in all_segs)

    def fits() -> int | None:  # the exact size when it may fit, else None
        if not settled() or _estimate(work, sizes, counter, 0) + overhead * len(work) > budget:
            return None
        return prompt_tokens(work, counter, overhead)

    tokens: int | None = None
    for seg in candidates:
        tokens = fits()
        if tokens is not None and tokens <= budget:
            break
        before = sizes[id(seg)]
        if summarise_with is not None:
            pointer = summarise_with(seg, cfg.summary_tokens)
        else:
            pointer = point(seg, store_used, run_id, counter, cfg.summary_tokens, way_back=way_back)
        after = counter.count_cached(pointer.display_text)
        if after >= before:
            continue  # a pointer would not be smaller: keep the payload
        seg.pointer = pointer
        replaced.append(seg)
        sizes[id(seg)] = after
        summarised.append(
            {
                "id": seg.sid,
                **ptr.as_mapping(pointer),
                "tokens_before": before,
                "tokens_before_exact": id(seg) not in inexact,
                "tokens_after": after,
            }
        )
    else:
        tokens = fits()
    # Every payload is behind a pointer and the blocks still overflow: shorter summaries,
    # halving down to the smallest a summariser writes, before anything is rejected (a small
    # window, such as a local model's 2,048, holds few blocks at the configured size).
    size = cfg.summary_tokens
    while replaced and (tokens is None or tokens > budget) and size > _MIN_SHRUNK:
        size = max(_MIN_SHRUNK, size // 2)
        for seg, entry in zip(replaced, summarised, strict=True):
            if summarise_with is not None:
                pointer = summarise_with(seg, size)
            else:
                pointer = point(seg, store_used, run_id, counter, size, way_back=way_back)
            after = counter.count_cached(pointer.display_text)
            if after < sizes[id(seg)]:
                seg.pointer = pointer
                sizes[id(seg)] = after
                entry.update(ptr.as_mapping(pointer), tokens_after=after, summary_tokens=size)
        tokens = fits()
    if tokens is None:  # still over: exact when known, else the lower bound
        tokens = (
            prompt_tokens(work, counter, overhead)
            if settled()
            else _estimate(work, sizes, counter, -_JOINT_SLACK) + overhead * len(work)
        )
    if tokens > budget:
        exact_now = settled()
        numbers = _breakdown(work, sizes, inexact, replaced, counter, overhead, preamble_tokens)
        cause, reason = _cause(numbers, budget, cfg.summary_tokens)
        for seg in replaced:  # a rejected prompt is left as it came (the caller raises)
            seg.pointer = None
        return Decision(
            "reject",
            reason,
            tokens,
            original,
            deficit=tokens - budget,
            summarised=summarised,
            exact=exact_now,
            original_exact=exact,
            cause=cause,
            hint=REJECT_CAUSES[cause],
            breakdown=numbers,
            **base,
        )
    shrunk = size < cfg.summary_tokens
    return Decision(
        "needs_summary",
        f"{len(summarised)} payload(s) summarised behind pointers"
        + (f" (summaries shortened to {size} tokens to fit)" if shrunk else ""),
        tokens,
        original,
        deficit=original - budget,
        summarised=summarised,
        exact=True,  # a prompt that passes is counted whole
        original_exact=exact,
        **base,
    )


def _breakdown(
    messages: Sequence[PromptMessage],
    sizes: Mapping[int, int],
    inexact: set[int] | frozenset[int],
    replaced: Sequence[Segment],
    counter: Any,
    overhead: int,
    preamble: int,
) -> dict[str, Any]:
    """Where a rejected prompt's tokens are: the numbers a reject reports.

    fixed: template text and framing; unsummarisable: segments the policy may not touch
    (the preamble taken out of the first system message); pointer_blocks: payloads already
    behind pointers (this call's and earlier compactions'); kept_whole: summarisable payloads
    whose pointer block would not have been smaller. `*_exact` False: some sizes are bounds.
    """
    fixed = overhead * len(messages)
    keep: list[dict[str, Any]] = []
    blocks = kept = 0
    n_blocks = 0
    kept_ids: list[str] = []
    exact = {"unsummarisable": True, "kept_whole": True}
    first_system = True
    taken = {id(s) for s in replaced}
    for m in messages:
        for p in m.pieces:
            if isinstance(p, str):
                fixed += counter.count_cached(p) if p else 0
                continue
            size = sizes.get(id(p))
            if size is None:
                size = counter.count_cached(p.shown)
            if p.pointer is not None or id(p) in taken:
                blocks += size
                n_blocks += 1
            elif not p.summarizable:
                own = size
                if first_system and m.role == "system" and preamble:
                    own = max(0, size - preamble)
                    first_system = False
                keep.append({"id": p.sid, "tokens": own, "exact": id(p) not in inexact})
                exact["unsummarisable"] &= id(p) not in inexact
            else:
                kept += size
                kept_ids.append(p.sid)
                exact["kept_whole"] &= id(p) not in inexact
    keep.sort(key=lambda k: -k["tokens"])
    return {
        "fixed": fixed,
        "preamble": preamble,
        "unsummarisable": sum(k["tokens"] for k in keep),
        "unsummarisable_exact": exact["unsummarisable"],
        "unsummarisable_parts": keep[:8],
        "pointer_blocks": blocks,
        "pointer_block_count": n_blocks,
        "kept_whole": kept,
        "kept_whole_exact": exact["kept_whole"],
        "kept_whole_parts": kept_ids[:8],
    }


def _n(tokens: int, exact: bool = True) -> str:
    return f"{tokens:,}" if exact else f"at least {tokens:,}"


def _largest(numbers: Mapping[str, Any]) -> str:
    """The biggest parts of a prompt, named with their tokens."""
    parts = [
        f"{k['id']} {_n(k['tokens'], k['exact'])}" for k in numbers["unsummarisable_parts"][:3]
    ]
    if numbers["kept_whole"]:
        parts.append(
            f"summarisable {', '.join(numbers['kept_whole_parts'][:3])} "
            f"{_n(numbers['kept_whole'], numbers['kept_whole_exact'])}"
        )
    return "largest parts (tokens): " + "; ".join(parts) if parts else "no payload"


def _cause(numbers: Mapping[str, Any], budget: int, summary_tokens: int) -> tuple[str, str]:
    """The cause of a reject after summarising all it could, and the reason naming it.

    The largest of the four shares is the cause: what may not be summarised (with the fixed
    text), the fidelity preamble, the pointer blocks, the payloads kept whole because a
    pointer would not have been smaller.
    """
    of = f"of the {budget:,}-token budget"
    fixed = numbers["fixed"]
    shares = {
        "unsummarisable": numbers["unsummarisable"] + fixed,
        "preamble": numbers["preamble"],
        "pointer_blocks": numbers["pointer_blocks"],
        "summary_size": numbers["kept_whole"],
    }
    cause = max(shares, key=lambda k: shares[k])
    if cause == "preamble":
        return cause, (
            f"the fidelity preamble takes {numbers['preamble']:,} tokens {of}; with the rest "
            f"that may not be summarised ({numbers['unsummarisable'] + fixed:,}) nothing fits"
        )
    if cause == "pointer_blocks":
        return cause, (
            f"{numbers['pointer_block_count']} pointer block(s) still take "
            f"{numbers['pointer_blocks']:,} tokens {of} at summary_tokens {summary_tokens}, "
            f"beside {shares['unsummarisable']:,} that may not be summarised"
        )
    if cause == "summary_size":
        return cause, (
            f"summary_tokens {summary_tokens} left nothing summarisable: "
            f"{len(numbers['kept_whole_parts'])} payload(s) of "
            f"{_n(numbers['kept_whole'], numbers['kept_whole_exact'])} tokens "
            f"({', '.join(numbers['kept_whole_parts'][:3])}) are no larger than their pointer "
            f"blocks would be, {of}"
        )
    named = ", ".join(
        f"{k['id']} {_n(k['tokens'], k['exact'])}" for k in numbers["unsummarisable_parts"][:3]
    )
    return cause, (
        f"the parts that may not be summarised take "
        f"{_n(shares['unsummarisable'], numbers['unsummarisable_exact'])} tokens {of} "
        f"({named}{', ' if named else ''}templates and framing {fixed:,})"
    )


@dataclass
class Compaction:
    """What compact_thread did: the map of replaced messages and the tokens saved."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    tokens_before: int = 0
    tokens_after: int = 0

    @property
    def tokens_saved(self) -> int:
        """Tokens the thread lost by compaction."""
        return self.tokens_before - self.tokens_after


def compact_thread(
    thread: Sequence[PromptMessage],
    threshold: int,
    counter: Any,
    *,
    store: ptr.PointerStore,
    run_id: str,
    overhead: int,
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
    way_back: bool = True,
) -> Compaction:
    """Past threshold tokens, replace the oldest summarisable messages by pointers, in place.

    The ledger is each message's token count (cached by content, so a thread that grows
    by a turn is counted only over the new turn). System and user messages are never
    summarisable; order is kept. Returns the compaction map (index, role, pointer id,
    tokens before and after).
    """
    ledger = [counter.count_cached(m.content()) + overhead for m in thread]
    out = Compaction(tokens_before=sum(ledger), tokens_after=sum(ledger))
    if out.tokens_before <= threshold:
        return out
    total = out.tokens_before
    # Hundreds of messages may have to fit: each gets the short pointer block and an equal
    # share of what the messages that stay leave under the threshold for its summary.
    open_ = [
        i
        for i, m in enumerate(thread)
        if any(s.summarizable and s.pointer is None for s in m.segments())
    ]
    staying = total - sum(ledger[i] for i in open_)
    frame = counter.count_cached(
        ptr.render_short(ptr.PREFIX + "0" * 16, "assistant", 10**6, "", way_back)
    )
    share = (threshold - staying) // max(1, len(open_)) - frame - overhead - 2
    room = min(summary_tokens, share) if share >= _MIN_SUMMARY else 0
    for index, message in enumerate(thread):
        if total <= threshold:
            break
        for seg in message.segments():
            if not seg.summarizable or seg.pointer is not None:
                continue
            pointer = point(
                seg, store, run_id, counter, room, short_for=message.role, way_back=way_back
            )
            before = ledger[index]
            seg.pointer = pointer
            after = counter.count_cached(message.content()) + overhead
            if after >= before:
                seg.pointer = None  # no smaller: keep the message
                continue
            ledger[index] = after
            total += after - before
            out.entries.append(
                {
                    "index": index,
                    "role": message.role,
                    "id": seg.sid,
                    "pointer_id": pointer.pointer_id,
                    "tokens_before": before,
                    "tokens_after": after,
                }
            )
    out.tokens_after = total
    return out


@dataclass
class AutoCompaction:
    """What compact_prompt did: why it fired, what went behind pointers, the tokens."""

    fired: str | None = None  # at | max_items | after_tool_call, None when not triggered
    entries: list[dict[str, Any]] = field(default_factory=list)
    tokens_before: int = 0
    tokens_after: int = 0
    items_before: int = 0
    items_after: int = 0
    levels: list[int] = field(default_factory=list)  # the levels that ran (1, 2, 3)
    # Each level's cluster or session pointers: {pointer_id, level, of, members, tokens}.
    folds: list[dict[str, Any]] = field(default_factory=list)


def _is_block(sid: str) -> bool:
    """An evidence block's segment (`user_parts.P[j]`, `user[i].evidenceN[j]`), not a
    whole thread turn (`assistant[i]`)."""
    if not sid.endswith("]") or "[" not in sid:
        return False
    cut = sid.rindex("[")
    return sid[cut + 1 : -1].isdigit() and "." in sid[:cut]


def compact_prompt(
    messages: Sequence[PromptMessage],
    budget: int,
    counter: Any,
    *,
    at: float = DEFAULT_COMPACT_AT,
    max_items: int | None = None,
    force: str | None = None,
    store: ptr.PointerStore,
    run_id: str,
    overhead: int,
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
    way_back: bool = True,
) -> AutoCompaction:
    """Compact a prompt that fits but is over its trigger, in place (context_policy.compact).

    Fires when the prompt is over `at` of the budget, or holds more than `max_items` whole
    summarisable payloads, or when `force` names a cause (after_tool_call: then every
    payload is compacted). Level 1, per source: the step's user parts and the evidence of
    each thread turn, all blocks of one source at a time (block headers stay), in prompt
    order; then, while still over, the oldest thread turns one at a time. Level 2, only
    when level 1 left it over: clusters of related payloads, one at a time, each folded
    into one block (hierarchy.py). Level 3, only when level 2 left it over: the whole
    session in one block. Deterministic with the deterministic summarisers. A prompt
    holding a payload too large to count (over the budget by its size alone) is left to
    `enforce`.
    """
    from runtime.context import hierarchy

    out = AutoCompaction()
    for m in messages:
        for s in m.segments():
            if s.pointer is None and not lower_bound(s.text, budget, counter)[1]:
                return out

    def whole() -> list[Segment]:
        return [s for m in messages for s in m.segments() if s.summarizable and s.pointer is None]

    limit = int(at * budget)
    total = prompt_tokens(messages, counter, overhead)
    out.tokens_before = out.tokens_after = total
    out.items_before = out.items_after = len(whole())

    def still() -> str | None:  # over the trigger's size or count (not its force)
        if total > limit:
            return "at"
        if max_items is not None and len(whole()) > max_items:
            return "max_items"
        return None

    def over() -> str | None:
        return force or still()

    def why(level: int) -> str:
        cause = still() or force
        if cause == "at":
            return f"{hierarchy.LEVELS[level]}: the prompt was {total:,} tokens, over {limit:,}"
        if cause == "max_items":
            return f"{hierarchy.LEVELS[level]}: {len(whole())} payloads whole, over {max_items}"
        return f"{hierarchy.LEVELS[level]}: {cause}"

    out.fired = over()
    if out.fired is None:
        return out
    out.levels.append(1)
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    # Sources in prompt order: an evidence section (its blocks), or a user part's value.
    sources: dict[str, list[Segment]] = {}
    turns: list[tuple[PromptMessage, Segment]] = []
    for i, m in enumerate(messages):
        for s in m.segments():
            if not s.summarizable or s.pointer is not None:
                continue
            if _is_block(s.sid):
                sources.setdefault(s.sid[: s.sid.rindex("[")], []).append(s)
            elif i == last_user:
                sources.setdefault(s.sid, []).append(s)
            else:
                turns.append((m, s))
    steps: list[tuple[str, str, list[Segment], str | None]] = [
        ("source", key, segs, None) for key, segs in sources.items()
    ]
    steps += [("turn", s.sid, [s], m.role) for m, s in turns]
    mine: set[int] = set()  # the segments this compaction put behind pointers
    entries: dict[str, dict[str, Any]] = {}
    for phase, key, segs, role in steps:
        if over() is None:
            break
        reason = why(1)
        for seg in segs:
            before = counter.count_cached(seg.text)
            pointer = point(
                seg,
                store,
                run_id,
                counter,
                summary_tokens,
                short_for=role,
                way_back=way_back,
            )
            after = counter.count_cached(pointer.display_text)
            if after >= before:
                continue  # a pointer would not be smaller: keep the payload
            seg.pointer = pointer
            mine.add(id(seg))
            entries[seg.sid] = {
                "id": seg.sid,
                **ptr.as_mapping(pointer),
                "tokens_before": before,
                "tokens_after": after,
                "phase": phase,
                "source": key,
                "level": 1,
                "level_reason": reason,
            }
        total = prompt_tokens(messages, counter, overhead)
    for level in (2, 3):
        if still() is None:
            break
        out.levels.append(level)
        found = hierarchy.members(messages, mine)
        groups = (
            hierarchy.clusters(found) if level == 2 else ([("", found)] if len(found) > 1 else [])
        )
        for what, group in groups:
            if still() is None:
                break
            reason = why(level)
            now = {id(m.seg): counter.count_cached(m.seg.shown) for m in group}
            # The digest at summary_tokens, halved down to the smallest summary while the
            # block and its references would not be smaller than what the group shows now
            # (the session's, the last level, also while the prompt would stay over).
            size = summary_tokens
            while True:
                done = hierarchy.fold(
                    "cluster" if level == 2 else "session",
                    what,
                    group,
                    counter=counter,
                    summary_tokens=size,
                    way_back=way_back,
                )
                then = {id(m.seg): counter.count_cached(p.display_text) for m, _, p in done.members}
                gain = sum(now.values()) - sum(then.values())
                if size <= _MIN_SHRUNK or (gain > 0 and (level == 2 or total - gain <= limit)):
                    break
                size = max(_MIN_SHRUNK, size // 2)
            if sum(then.values()) >= sum(now.values()):
                continue  # the fold would not be smaller: keep the group as it is
            done.keep(store, run_id)
            for member, own, shown in done.members:
                seg = member.seg
                seg.pointer = shown
                mine.add(id(seg))
                entry = entries.get(seg.sid)
                if entry is None:  # whole until now (its level-1 pointer was no smaller)
                    entry = entries[seg.sid] = {
                        "id": seg.sid,
                        **ptr.as_mapping(own),
                        "tokens_before": counter.count_cached(seg.text),
                        "phase": "cluster" if level == 2 else "session",
                        "source": member.source,
                    }
                entry.update(
                    tokens_after=then[id(seg)],
                    level=level,
                    level_reason=reason,
                    **{"cluster" if level == 2 else "session": done.pointer.pointer_id},
                )
            out.folds.append(
                {
                    "level": level,
                    "pointer_id": done.pointer.pointer_id,
                    "of": what,
                    "members": [m.seg.sid for m in group],
                    "tokens_before": sum(now.values()),
                    "tokens_after": sum(then.values()),
                }
            )
            total = prompt_tokens(messages, counter, overhead)
    out.entries = list(entries.values())  # in the order level 1 took them, then the rest
    out.tokens_after = total
    out.items_after = len(whole())
    return out
