"""Hierarchical compaction, levels 2 and 3 (docs/budget.md, Automatic compaction).

`compact_prompt` (policy.py) compacts per source first (level 1: each payload behind its
own pointer). When the prompt is still over its trigger:

- level 2, per cluster: related payloads are grouped (the same `path:` of their evidence
  blocks when two or more share one; else the source they came from, a user part or one
  turn's evidence section; the thread's turns together) and each group of two or more
  becomes one item: a cluster block at one member's place, holding a digest that cites
  every member (its node id, or its segment id) with a summary of each, and at every other
  member's place a one-line reference naming its own pointer and the cluster's;
- level 3, the whole session: every payload goes into one session block (a digest of all
  of them) and one-line references, the same way.

The original behind a cluster or session pointer is its manifest: each member's id and
the pointer of its own original. So any original is reached from any level in at most
two rehydrations (the manifest, then the member's pointer); each member's reference in the
prompt already names its own pointer (one). Evidence block headers are fixed text and
stay: a member is still read and cited as its node. Everything is extractive and
deterministic: the same prompt compacts to the same text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from runtime.context import pointers as ptr
from runtime.context.summarize import KINDS, line_count, summarise

# policy.py's Segment and PromptMessage (policy imports this module: no import back).
Segment = Any
PromptMessage = Any

LEVELS = {1: "per source", 2: "per cluster", 3: "whole session"}
_LABEL_CHARS = 80  # a member's label (node id or segment id) in a digest is cut here
_MIN_SHARE = 48  # a member's summary in a digest under this many tokens: its opening words
_MIN_WORDS = 4  # ...under this, the label alone


@dataclass
class Member:
    """A payload the higher levels may fold: where it is, and what it is."""

    message: int  # index of its message in the prompt
    role: str
    seg: Segment
    source: str  # its level-1 source (a user part, an evidence section, a thread turn)
    own: bool  # in the step's own user message (the last), not an earlier turn

    @property
    def label(self) -> str:
        """How a digest and a manifest cite it: its node id, else its segment id."""
        text = self.seg.cite or self.seg.sid
        return text if len(text) <= _LABEL_CHARS else text[:_LABEL_CHARS] + "…"


def source_of(sid: str) -> str:
    """The level-1 source of a segment id: an evidence block's section, else the id."""
    if sid.endswith("]") and "[" in sid:
        cut = sid.rindex("[")
        if sid[cut + 1 : -1].isdigit() and "." in sid[:cut]:
            return sid[:cut]
    return sid


def members(messages: Sequence[PromptMessage], mine: set[int]) -> list[Member]:
    """The payloads levels 2 and 3 may fold, in prompt order: summarisable segments still
    whole or behind a pointer this compaction made (`mine`, by id); a thread turn the
    thread compaction already cut to one line stays as it is."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    out = []
    for i, m in enumerate(messages):
        for s in m.segments():
            if s.summarizable and (s.pointer is None or id(s) in mine):
                out.append(Member(i, m.role, s, source_of(s.sid), i == last_user))
    return out


def clusters(found: Sequence[Member]) -> list[tuple[str, list[Member]]]:
    """Related members grouped, deterministically, in prompt order of their first member:
    by path when two or more share one, else by source, a thread's turns together.
    Groups of one are left out (nothing to fold)."""
    paths: dict[str, int] = {}
    for m in found:
        if m.seg.group:
            paths[m.seg.group] = paths.get(m.seg.group, 0) + 1
    groups: dict[str, list[Member]] = {}
    for m in found:
        if m.seg.group and paths[m.seg.group] > 1:
            key = f"path {m.seg.group}"
        elif m.source != m.seg.sid or m.own:
            key = f"source {m.source}"
        else:
            key = "the thread"
        groups.setdefault(key, []).append(m)
    return [(key, group) for key, group in groups.items() if len(group) > 1]


def host_of(group: Sequence[Member]) -> Member:
    """Where a cluster's block goes: its first member in the latest message holding one
    (the step's own user message when a member is there, never a system message)."""
    last = max(m.message for m in group)
    return next(m for m in group if m.message == last)


def _one_line(text: str, tokens: int, counter: Any) -> str:
    head = " ".join(text[: tokens * 8].split())
    cut = counter.truncate(head, tokens)
    return cut + "…" if cut != head else cut


def digest(
    group: Sequence[Member],
    budget: int,
    counter: Any,
    summariser: Callable[..., Any] = summarise,
) -> str:
    """A summary of a group that cites every member: one `[label]` line each, then an equal
    share of what the labels leave of `budget` for each member's own summary (its kind's
    summariser; the opening words under _MIN_SHARE tokens; none under _MIN_WORDS)."""
    labels = [f"[{m.label}]" for m in group]
    left = budget - sum(counter.count_cached(x) + 1 for x in labels)
    share = left // len(group) if left > 0 else 0
    parts = []
    for m, label in zip(group, labels, strict=True):
        text = m.seg.text
        if share >= _MIN_SHARE:
            kind = m.seg.kind if m.seg.kind in KINDS else None
            body = summariser(text, kind, share, counter).text
        elif share >= _MIN_WORDS:
            body = _one_line(text, share - 1, counter)
        else:
            body = ""
        parts.append(f"{label}\n{body}" if body else label)
    return "\n".join(parts)


def manifest(kind: str, what: str, group: Sequence[Member], pointers: dict[int, str]) -> str:
    """The original behind a cluster or session pointer: each member and its own pointer."""
    of = f" ({what})" if what else ""
    lines = [f"{kind} of {len(group)} items{of}; rehydrate a pointer_id for its original"]
    for n, m in enumerate(group, 1):
        lines.append(f"{n}. {m.label} ({m.seg.sid}): {pointers[id(m.seg)]}")
    return "\n".join(lines) + "\n"


def render_block(
    pointer_id: str, kind: str, what: str, n: int, chars: int, summary: str, way_back: bool
) -> str:
    """The block of a cluster or the session: what it folds, its digest, the way back."""
    back = (
        "; rehydrate this pointer_id for its members' pointers, a member's for its text"
        if way_back
        else ""
    )
    of = f" ({what})" if what else ""
    return (
        f"{ptr.OPEN} {pointer_id}: {kind} of {n} items{of}, {chars:,} chars, "
        f"summarised{back}]\n{summary}\n{ptr.CLOSE} {pointer_id}]"
    )


def render_ref(pointer_id: str, kind: str, host: str) -> str:
    """A folded member's one line: its own pointer (its original) and its block's."""
    return f"{ptr.OPEN} {pointer_id}: {kind}, in {host}]"


def own_pointer(seg: Segment) -> tuple[ptr.Pointer, bool]:
    """The member's own pointer, and whether its original is still to be stored: the one an
    earlier level made (its id is the original's whatever block it shows), or a new one."""
    if seg.pointer is not None:
        return seg.pointer, False
    kind = seg.kind if seg.kind in KINDS else "text"
    return _unstored(seg.text, kind or "text", ptr.slice_hint(kind or "text")), True


def _unstored(text: str, kind: str, hint: str | None) -> ptr.Pointer:
    pointer_id, sha = ptr.pointer_id_of(text)
    way = f", {hint}" if hint else ""
    return ptr.Pointer(
        pointer_id=pointer_id,
        kind=kind,
        display_text="",
        rehydrate=f"rehydrate(pointer_id={pointer_id!r}{way})",
        sha256=sha,
        chars=len(text),
        lines=line_count(text),
    )


@dataclass
class Fold:
    """One cluster or session folded: its pointer, each member's own and shown pointers,
    and the originals `keep` stores once the fold is applied (the manifest, and members
    sent whole until now)."""

    pointer: ptr.Pointer
    members: list[tuple[Member, ptr.Pointer, ptr.Pointer]]  # member, own pointer, shown
    originals: list[tuple[ptr.Pointer, str]]

    def keep(self, store: ptr.PointerStore, run_id: str) -> None:
        """Store the originals behind the fold's pointers (nothing before it is applied)."""
        for p, text in self.originals:
            store.put_original(run_id, p.pointer_id, p.sha256, p.kind, text)


def fold(
    kind: str,
    what: str,
    group: Sequence[Member],
    *,
    counter: Any,
    summary_tokens: int,
    way_back: bool,
    summariser: Callable[..., Any] = summarise,
) -> Fold:
    """Fold a group into one block (kind cluster or session); nothing is applied or stored."""
    owns = {id(m.seg): own_pointer(m.seg) for m in group}
    originals = [(p, m.seg.text) for m in group for p, new in [owns[id(m.seg)]] if new]
    listing = manifest(kind, what, group, {k: p.pointer_id for k, (p, _) in owns.items()})
    block = _unstored(listing, "text", None)
    originals.append((block, listing))
    chars = sum(len(m.seg.text) for m in group)
    summary = digest(group, summary_tokens, counter, summariser)
    shown = render_block(block.pointer_id, kind, what, len(group), chars, summary, way_back)
    block = replace(block, display_text=shown)
    host = host_of(group)
    out = []
    for m in group:
        own = owns[id(m.seg)][0]
        display = shown if m is host else render_ref(own.pointer_id, own.kind, block.pointer_id)
        out.append((m, own, replace(own, display_text=display)))
    return Fold(block, out, originals)
