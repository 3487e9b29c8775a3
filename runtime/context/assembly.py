"""Context assembly: one budgeted, deduplicated markdown pack from several sources.

Pure logic over what it is given (candidates already retrieved, a token counter, an
optional code compactor and pointer maker); `assemble_context` does the retrieving.

1. Rank: each source's scores are scaled to its best (1.0), then the boosts its YAML
   declares multiply them (importance, confidence, recency half-life, confidence tiers).
2. Deduplicate across sources, best first (runtime/context/dedup.py): same id, same file
   with overlapping lines, same commit, or text similarity at or above the threshold. The
   copy kept is the more relevant one (ties: the earlier source); the other goes to the
   drop record.
3. Cap: no item takes more than `item_cap` of its source's nominal share; a longer one is
   cut (code: compacted first) with a note naming where the whole lives.
4. Budget: split by weight; what a source cannot use goes back to the others, round after
   round, until no source can use more (`allocate`).
5. Render: one section per non-empty source, a footer `N items from M sources, T tokens`.
   Every part (a heading, an item, the footer) ends with a newline and the next starts
   with neither whitespace nor "/": a safe cut (runtime/context/tokens.py), so the parts'
   counts add up exactly to the count of the whole, and T is that count.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from runtime.context.dedup import DEFAULT_THRESHOLD, dedupe

TIERS = {"gold": 1.0, "silver": 0.85, "bronze": 0.7, "abandoned": 0.3}
DEFAULT_CAP = 0.25
DEFAULT_POINTER_OVER = 1000
# soft: the least text a cut item shows when the cap cannot hold its header and note.
SOFT_FLOOR = 16
_WS = re.compile(r"\s+")
_BARE_ROW = re.compile(r"\n[ \t]*-?[ \t]*$")
_FENCE = re.compile(r"`{3,}")


@dataclass(frozen=True)
class Source:
    """A source as the step declares it."""

    name: str
    kind: str
    weight: float = 1.0
    max_items: int = 10
    item_cap: float | None = None  # None: the step's
    boosts: Mapping[str, Any] = field(default_factory=dict)
    title: str = ""


@dataclass
class Candidate:
    """One retrieved item before assembly."""

    id: str
    source: str
    kind: str  # code, doc, memory, experience, value, commit, state
    text: str
    score: float
    location: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    path: str = ""
    origin: str = ""  # repository::snapshot of a node (paths compare within one)
    start_line: int = 0
    end_line: int = 0
    commit: str = ""
    language: str = ""
    name: str = ""
    rank_score: float = 0.0  # after scaling and boosts
    labels: tuple[str, ...] | None = None  # its security labels (None: not known)


@dataclass(frozen=True)
class Options:
    """The step's assembly options."""

    max_tokens: int
    soft: bool = False
    item_cap: float = DEFAULT_CAP
    threshold: float = DEFAULT_THRESHOLD
    pointer_over: int = DEFAULT_POINTER_OVER


@dataclass
class _Entry:
    cand: Candidate
    block: str
    tokens: int
    truncated: bool
    full_tokens: int
    pointer: str | None = None


Compactor = Callable[[str, str, int], str]  # (text, language, budget tokens) -> shorter text
PointerMaker = Callable[[str, str], str]  # (text, kind) -> pointer id


# --- ranking -----------------------------------------------------------------


def _age_days(value: Any, now: datetime) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (now - when).total_seconds() / 86400)


def boosted(c: Candidate, best: float, boosts: Mapping[str, Any], now: datetime) -> float:
    """c's score scaled to its source's best (1.0) and multiplied by the declared boosts.

    importance / confidence: weight w turns a field value v in 0..1 into (1 - w + w*v);
    recency_half_life_days: halves the score per half-life of age (created_at);
    tiers: true (the default table) or {tier: factor}, applied to confidence_tier.
    """
    score = c.score / best if best > 0 else 0.0
    f = c.fields
    for name in ("importance", "confidence"):
        w = boosts.get(name)
        v = f.get(name)
        if isinstance(w, int | float) and isinstance(v, int | float):
            score *= 1 - w + w * max(0.0, min(1.0, float(v)))
    half = boosts.get("recency_half_life_days")
    if isinstance(half, int | float) and half > 0:
        age = _age_days(f.get("created_at") or f.get("date"), now)
        if age is not None:
            score *= 0.5 ** (age / half)
    tiers = boosts.get("tiers")
    if tiers:
        table = TIERS if tiers is True else {**TIERS, **tiers}
        tier = f.get("confidence_tier")
        if isinstance(tier, str) and tier in table:
            score *= float(table[tier])
    return round(score, 6)  # stable across platforms: no last-bit differences in the order


def rank(sources: Sequence[Source], found: dict[str, list[Candidate]], now: datetime) -> None:
    """Set rank_score on every candidate and sort each source's list best first."""
    for s in sources:
        items = found.setdefault(s.name, [])
        best = max((c.score for c in items), default=0.0)
        for c in items:
            c.rank_score = boosted(c, best, s.boosts, now)
        items.sort(key=lambda c: (-c.rank_score, c.id))


# --- rendering -------------------------------------------------------------------


def _one_line(value: Any) -> str:
    return _WS.sub(" ", str(value)).strip()


def _quote(text: str) -> str:
    """Prose as a blockquote: retrieved text cannot open a heading or end a section."""
    return "\n".join("> " + line if line.strip() else ">" for line in text.splitlines()) or ">"


def _fence(text: str, language: str = "") -> str:
    longest = max((len(m.group()) for m in _FENCE.finditer(text)), default=2)
    ticks = "`" * max(3, longest + 1)
    lang = {"dotnet": "csharp", "sql": "sql"}.get(language, "")
    return f"{ticks}{lang}\n{text.rstrip(chr(10))}\n{ticks}"


def header(c: Candidate) -> str:
    """The item's first line (a level-3 heading)."""
    f = c.fields
    if c.kind in ("code", "doc"):
        where = f"{c.path}:{c.start_line}-{c.end_line}" if c.path else c.id
        return f"### {where} · {f.get('node_kind') or c.kind} {c.name}".rstrip()
    if c.kind == "memory":
        bits = [c.id, str(f.get("type") or "")]
        if isinstance(f.get("importance"), int | float):
            bits.append(f"importance {f['importance']:g}")
        return "### " + " · ".join(b for b in bits if b)
    if c.kind == "experience":
        bits = [c.id, f"{f.get('domain') or '?'} / {f.get('strategy') or '?'}"]
        bits += [str(f.get("outcome_status") or ""), str(f.get("confidence_tier") or "")]
        return "### " + " · ".join(b for b in bits if b)
    if c.kind == "value":
        size = f.get("cluster_size")
        bits = [c.id, str(f.get("axis") or "")]
        bits.append(f"from {size} experiences" if isinstance(size, int) else "")
        return "### " + " · ".join(b for b in bits if b)
    if c.kind == "commit":
        short = f.get("short_sha") or c.commit[:12]
        return f"### commit {short} · {_one_line(f.get('author') or '?')} · {f.get('date') or '?'}"
    if c.kind == "facet":
        return f"### {_one_line(f.get('title') or c.id)}"
    return f"### {_one_line(c.id)}"


EXPERIENCE_FIELDS = ("goal", "hypothesis", "action", "prediction", "outcome", "surprise", "lesson")


def body(c: Candidate) -> str:
    """The item's text as shown (before any cut)."""
    f = c.fields
    if c.kind == "code":
        return c.text
    if c.kind == "experience" and any(f.get(k) for k in ("goal", "lesson", "action")):
        rows = []
        for name in EXPERIENCE_FIELDS:
            if name == "outcome":
                value = ": ".join(
                    _one_line(v) for v in (f.get("outcome_status"), f.get("outcome_result")) if v
                )
            else:
                value = _one_line(f.get(name) or "")
            rows.append(f"- {name}: {value or '—'}")
        return "\n".join(rows)
    if c.kind == "facet" and isinstance(f.get("rows"), list | tuple):
        return "\n".join(f"- {_one_line(k)}: {_one_line(v)}" for k, v in f["rows"])
    if c.kind == "commit":
        given = f.get("message")
        message = given if isinstance(given, str) else c.text
        listed = f.get("files")
        files: list[Any] = listed if isinstance(listed, list) else []
        shown = ", ".join(
            f"{x.get('path')} (+{x.get('added', 0)} -{x.get('deleted', 0)})"
            for x in files[:20]
            if isinstance(x, Mapping)
        )
        more = f", and {len(files) - 20} more" if len(files) > 20 else ""
        return f"{message.strip()}\n\nfiles: {shown or '—'}{more}"
    return c.text


def render_item(c: Candidate, text: str, note: str = "") -> str:
    """One item's markdown part (ends with a blank line)."""
    if c.kind == "code":
        shown = _fence(text, c.language)
    elif c.kind in ("experience", "facet") and text.startswith("- "):
        shown = "\n".join(_neutral(line) for line in text.splitlines())
    else:
        shown = _quote(text)
    tail = f"\n{note}" if note else ""
    return f"{header(c)}\n{shown}{tail}\n\n"


def _neutral(line: str) -> str:
    """An experience row stays one list line (no heading, rule or fence can start it)."""
    return line if line.startswith("- ") else "  " + line


def section_heading(s: Source, kind_title: str) -> str:
    """A section's heading part."""
    return f"## {s.title or s.name} ({kind_title})\n\n"


def footer(items: int, sources: int, tokens: int) -> str:
    """The footer part."""
    i = "item" if items == 1 else "items"
    s = "source" if sources == 1 else "sources"
    return f"---\n{items} {i} from {sources} {s}, {tokens} tokens\n"


# --- cutting ------------------------------------------------------------------------


def _fit(
    c: Candidate,
    cap: int,
    counter: Any,
    opts: Options,
    compact: Compactor | None,
    make_pointer: PointerMaker | None,
    soft_floor: int = 0,
) -> _Entry | None:
    """The item within cap tokens: whole, or cut with a note; None when not even its header
    and note fit (soft_floor: the cap is raised to fit them and that many tokens of text)."""
    text = body(c)
    whole = render_item(c, text)
    tokens = counter.count(whole)
    if tokens <= cap:
        return _Entry(c, whole, tokens, False, tokens)
    full = counter.count(text)
    pointer = None
    if make_pointer is not None and full > opts.pointer_over:
        pointer = make_pointer(c.text, "code" if c.kind == "code" else "text")
    where = (
        f"rehydrate pointer_id={pointer} (slice lines A-B) or {c.location}"
        if pointer
        else c.location
    )

    def note(shown: int) -> str:
        return f"[cut to fit: {shown} of {full} tokens shown; the whole text: {where}]"

    bare = counter.count(render_item(c, "", note(full)))
    if soft_floor and cap < bare + soft_floor:
        cap = bare + soft_floor  # soft: an item is shown cut rather than not at all
    room = cap - bare
    if room <= 0:
        return None
    cut = text
    if c.kind == "code" and compact is not None:
        compacted = compact(text, c.language, room)
        # A skeleton with almost nothing left of it says less than the code's first lines.
        if counter.count(compacted.strip()) >= min(room, 24):
            cut = compacted
    while True:
        cut = counter.truncate(cut, room) if counter.count(cut) > room else cut
        if c.kind in ("experience", "facet"):
            cut = _BARE_ROW.sub("", cut)  # a row cut before its first word: only its dash
        shown = counter.count(cut)
        block = render_item(c, cut, note(shown))
        tokens = counter.count(block)
        if tokens <= cap:
            return _Entry(c, block, tokens, True, full, pointer)
        room -= tokens - cap
        if room <= 0:
            return None


# --- budget ------------------------------------------------------------------------


def allocate(
    names: Sequence[str],
    weights: Mapping[str, float],
    queues: Mapping[str, Sequence[int]],
    cost: Callable[[str, int, bool], int],
    budget: int,
) -> dict[str, list[int]]:
    """Which entries each source takes: the budget split by weight, then again and again
    what is left over among the sources that can still use it.

    queues: each source's entries in rank order; cost(source, entry, first) the entry's
    tokens (first: with the section heading). A round gives each active source (one with
    an entry that fits what is left) its weight's share of the leftover and takes entries
    in rank order that fit it (first fit). When no share fits any next entry, the whole
    leftover goes to the heaviest active source (ties: the earlier one) for one entry.
    Weight 0: a source gets only what every weighted source leaves unused.
    """
    taken: dict[str, list[int]] = {n: [] for n in names}
    pending: dict[str, list[int]] = {n: list(queues.get(n, ())) for n in names}
    used = 0

    def fitting(n: str, room: int) -> int | None:
        for e in pending[n]:
            if cost(n, e, not taken[n]) <= room:
                return e
        return None

    while True:
        left = budget - used
        weighted = [n for n in names if weights[n] > 0 and fitting(n, left) is not None]
        active = weighted or [n for n in names if weights[n] <= 0 and fitting(n, left) is not None]
        if not active:
            return taken
        total = sum(weights[n] for n in active) if weighted else float(len(active))
        progress = False
        for n in active:
            room = math.floor(left * (weights[n] if weighted else 1.0) / total)
            for e in list(pending[n]):
                c = cost(n, e, not taken[n])
                if c <= room:
                    taken[n].append(e)
                    pending[n].remove(e)
                    room -= c
                    used += c
                    progress = True
        if not progress:
            n = max(active, key=lambda x: (weights[x], -names.index(x)))
            one = fitting(n, left)
            assert one is not None  # active means something fits
            used += cost(n, one, not taken[n])
            taken[n].append(one)
            pending[n].remove(one)


# --- the whole --------------------------------------------------------------------


def assemble(
    sources: Sequence[Source],
    found: Mapping[str, Sequence[Candidate]],
    counter: Any,
    opts: Options,
    *,
    kind_titles: Mapping[str, str] | None = None,
    compact: Compactor | None = None,
    make_pointer: PointerMaker | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The assembled pack: markdown and its record (items, drops, token counts)."""
    now = now or datetime.now(UTC)
    titles = kind_titles or {}
    pools: dict[str, list[Candidate]] = {s.name: list(found.get(s.name, ())) for s in sources}
    for name, pool in pools.items():
        for c in pool:
            c.source = name  # the section it was found for, whatever the fetcher wrote
    rank(sources, pools, now)
    dropped: list[dict[str, Any]] = []
    order = {s.name: i for i, s in enumerate(sources)}
    ranked: list[Candidate] = []
    for s in sources:
        keep, over = pools[s.name][: s.max_items], pools[s.name][s.max_items :]
        ranked += keep
        for c in over:
            dropped.append(_drop(c, "max_items", counter.count(c.text)))
    ranked.sort(key=lambda c: (-c.rank_score, order[c.source], c.id))
    kept, dups = dedupe(ranked, opts.threshold)
    for c, k, why in dups:
        dropped.append(_drop(c, f"duplicate of {k.id} ({k.source}): {why}", counter.count(c.text)))

    by_source: dict[str, list[Candidate]] = {s.name: [] for s in sources}
    for c in kept:
        by_source[c.source].append(c)
    live = [s for s in sources if by_source[s.name]]
    footer_reserve = counter.count(footer(len(kept), len(sources), 10 * max(opts.max_tokens, 1)))
    budget = max(0, opts.max_tokens - footer_reserve)
    total_w = sum(s.weight for s in live if s.weight > 0)
    entries: dict[str, list[_Entry]] = {}
    heads: dict[str, tuple[str, int]] = {}
    wanted = {
        s.name: sum(counter.count(render_item(c, body(c))) for c in by_source[s.name]) for s in live
    }
    grown = _shares(wanted, {s.name: s.weight for s in live}, budget)
    for s in live:
        share = budget * s.weight / total_w if s.weight > 0 else budget / max(len(live), 1)
        # Its share grows by what sources that need less leave it (as the budget will).
        share = max(share, grown[s.name])
        if sum(wanted.values()) <= budget:
            share = max(share, wanted[s.name] / (s.item_cap or opts.item_cap))  # all fits: no cut
        cap = math.floor(share * (s.item_cap if s.item_cap is not None else opts.item_cap))
        head = section_heading(s, titles.get(s.kind, s.kind))
        heads[s.name] = (head, counter.count(head))
        fitted: list[_Entry] = []
        for c in by_source[s.name]:
            e = _fit(c, cap, counter, opts, compact, make_pointer, SOFT_FLOOR if opts.soft else 0)
            if e is None:
                dropped.append(_drop(c, f"over the item cap ({cap} tokens) even when cut", None))
            else:
                fitted.append(e)
        entries[s.name] = fitted

    names = [s.name for s in live]
    weights = {s.name: s.weight for s in live}

    def cost(n: str, i: int, first: bool) -> int:
        return entries[n][i].tokens + (heads[n][1] if first else 0)

    taken = allocate(names, weights, {n: range(len(entries[n])) for n in names}, cost, budget)
    if opts.soft:  # every non-empty source shows at least its best item
        for n in names:
            if not taken[n] and entries[n]:
                taken[n].append(0)
    while True:
        parts, record_items = _render(sources, entries, taken, heads)
        body_tokens = sum(t for _, t in parts)
        n_items = len(record_items)
        n_sources = sum(1 for n in names if taken[n])
        if not n_items:
            markdown, total = "", 0
            break
        total = body_tokens
        for _ in range(8):  # T counts the footer, which shows T: a fixed point, found in 1-2 steps
            nxt = body_tokens + counter.count(footer(n_items, n_sources, total))
            if nxt == total:
                break
            total = nxt
        foot = footer(n_items, n_sources, total)
        markdown = "".join(p for p, _ in parts) + foot
        if opts.soft or total <= opts.max_tokens:
            break
        # Only when the footer took more than reserved: give up the last taken item.
        worst = min(
            ((n, i) for n in names for i in taken[n]),
            key=lambda x: (entries[x[0]][x[1]].cand.rank_score, -order[x[0]]),
        )
        taken[worst[0]].remove(worst[1])
    taken_ids = {id(entries[n][i]) for n in names for i in taken[n]}
    for n in names:
        for e in entries[n]:
            if id(e) not in taken_ids:
                dropped.append(_drop(e.cand, "over budget", e.tokens))
    return {
        "markdown": markdown,
        "items": record_items,
        "token_count": total,
        "max_tokens": opts.max_tokens,
        "soft": opts.soft,
        "exceeded": max(0, total - opts.max_tokens),
        "sources_used": [n for n in names if taken[n]],
        "dropped": dropped,
        "parts": {
            "headings": sum(heads[n][1] for n in names if taken[n]),
            "items": sum(i["tokens"] for i in record_items),
            "footer": total - body_tokens if n_items else 0,
        },
    }


def _shares(
    wanted: Mapping[str, int], weights: Mapping[str, float], budget: int
) -> dict[str, float]:
    """Each source's share once what the sources wanting less than theirs leave is
    redistributed by weight (weight 0: an equal part of what the weighted leave)."""
    share = {n: 0.0 for n in wanted}
    left = float(budget)
    for group in ([n for n in wanted if weights[n] > 0], [n for n in wanted if weights[n] <= 0]):
        active = list(group)
        while active and left > 0:
            total = sum(weights[n] for n in active) if weights[active[0]] > 0 else len(active)
            part = {n: left * (weights[n] if weights[n] > 0 else 1) / total for n in active}
            done = [n for n in active if wanted[n] <= part[n]]
            if not done:
                for n in active:
                    share[n] = part[n]
                left = 0
                break
            for n in done:
                share[n] = float(wanted[n])
                left -= wanted[n]
                active.remove(n)
    return share


def _drop(c: Candidate, reason: str, tokens: int | None) -> dict[str, Any]:
    return {"id": c.id, "source": c.source, "reason": reason, "tokens": tokens}


def _render(
    sources: Sequence[Source],
    entries: Mapping[str, list[_Entry]],
    taken: Mapping[str, list[int]],
    heads: Mapping[str, tuple[str, int]],
) -> tuple[list[tuple[str, int]], list[dict[str, Any]]]:
    """The parts in order (section heading, its items best first) with their tokens."""
    parts: list[tuple[str, int]] = []
    items: list[dict[str, Any]] = []
    for s in sources:
        chosen = sorted(
            (entries[s.name][i] for i in taken.get(s.name, ())),
            key=lambda e: (-e.cand.rank_score, e.cand.id),
        )
        if not chosen:
            continue
        parts.append(heads[s.name])
        for e in chosen:
            parts.append((e.block, e.tokens))
            item: dict[str, Any] = {
                "id": e.cand.id,
                "source": s.name,
                "kind": e.cand.kind,
                "score": e.cand.rank_score,
                "tokens": e.tokens,
                "truncated": e.truncated,
                "location": e.cand.location,
                "labels": list(e.cand.labels) if e.cand.labels is not None else None,
            }
            if e.truncated:
                item["full_tokens"] = e.full_tokens
            if e.pointer:
                item["pointer_id"] = e.pointer
            items.append(item)
    return parts, items
