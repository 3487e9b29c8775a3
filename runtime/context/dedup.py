"""Cross-source deduplication for context assembly: which candidates repeat a more relevant
one, and why.

A candidate (in rank order) duplicates a kept one when they have the same id, the same
commit, the same file of one origin with overlapping lines, text similarity at or above the
threshold (rapidfuzz's normalised Indel similarity of whitespace-collapsed text: code
without its comments, a commit's message alone), or a passage of at least three lines that
nearly all appear in the other (a doc quoting a method). Two code symbols of different
names, and two texts whose numbers differ, are never merged by text.

Speed (issue 27: 500 items in under 20 ms): the similarity rule would compare every pair.
Instead the candidate pairs are found for all items at once, before the ordered pass:
identical texts by hash, the rest by an exact upper bound of the Indel ratio from 64-bucket
character histograms (the longest common subsequence has, per bucket, at most the smaller of
the two counts), computed block by block with numpy. Only pairs the bound lets through go to
rapidfuzz. The bound never skips a pair that could reach the threshold, so the result is
the one an all-pairs comparison gives (tests/runtime/test_dedup.py holds that on real code).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar


class Item(Protocol):
    """What dedup reads of a candidate (runtime/context/assembly.py's Candidate)."""

    id: str
    kind: str
    text: str
    fields: Mapping[str, Any]
    path: str
    origin: str
    start_line: int
    end_line: int
    commit: str
    name: str


Candidate = TypeVar("Candidate", bound=Item)

# 0.93, not the 0.9: on the labelled real set (benchmarks/dedup_quality.py) 0.9
# merges two different commit subjects (0.92) and nothing there needs less than 1.0.
DEFAULT_THRESHOLD = 0.93
# A passage quoted in another item counts as a duplicate when it has this many lines worth
# comparing and nearly all of them appear there.
_QUOTE_MIN_LINES = 3
_QUOTE_MIN_LINE = 8
_BUCKETS = 64
_BLOCK = 128  # rows of the pair bound computed at once (128 x n 16-bit counts)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_LINE_COMMENT = re.compile(r"(//|--)[^\n]*")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_FENCE = re.compile(r"`{3,}")


@dataclass(slots=True)
class _Sig:
    text: str  # whitespace collapsed
    lines: set[str]  # its lines (trimmed) long enough to count when quoted
    _numbers: tuple[str, ...] | None = None

    @property
    def numbers(self) -> tuple[str, ...]:
        """The numbers in the text, sorted (found on first use: most items never need them)."""
        if self._numbers is None:
            self._numbers = tuple(sorted(_NUMBER.findall(self.text)))
        return self._numbers


def signature(c: Item) -> _Sig:
    """What the text rules compare of c."""
    message = c.fields.get("message") if c.kind == "commit" else None
    raw = message if isinstance(message, str) else c.text
    if c.kind == "code" and ("//" in raw or "--" in raw or "/*" in raw):
        # A copy whose comments were edited is the same code.
        raw = _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub("", raw))
    quotable = _FENCE.sub("", raw) if "```" in raw else raw
    # Trimmed lines; the few with a tab or a run of spaces inside are collapsed too (doing
    # that to every line costs more than the rest of the signature).
    lines = {
        x if "  " not in x and "\t" not in x else " ".join(x.split())
        for x in map(str.strip, quotable.splitlines())
        if len(x) >= _QUOTE_MIN_LINE
    }
    return _Sig(" ".join(raw.split()), lines)


def dedupe(
    ordered: Sequence[Candidate], threshold: float = DEFAULT_THRESHOLD
) -> tuple[list[Candidate], list[tuple[Candidate, Candidate, str]]]:
    """Keep the first of each group of duplicates: (kept, [(dropped, kept copy, reason)])."""
    from rapidfuzz.distance import Indel

    sigs = [signature(c) for c in ordered]
    near = similar_pairs([s.text for s in sigs], threshold)
    kept: list[Candidate] = []
    dropped: list[tuple[Candidate, Candidate, str]] = []
    is_kept = [False] * len(ordered)
    ids: dict[str, int] = {}
    commits: dict[str, int] = {}
    paths: dict[tuple[str, str], list[int]] = {}
    lines: defaultdict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(ordered):
        sig = sigs[i]
        hit: tuple[int, str] | None = None
        if c.id in ids:
            hit = ids[c.id], "same id"
        elif c.commit and c.commit in commits:
            hit = commits[c.commit], "same commit"
        elif c.path and c.start_line > 0:
            for j in paths.get((c.origin, c.path), ()):
                k = ordered[j]
                if c.start_line <= k.end_line and k.start_line <= max(c.end_line, c.start_line):
                    hit = j, "same path with overlapping lines"
                    break
        if hit is None and sig.text:
            for j in near.get(i, ()):
                if not is_kept[j] or _named_apart(c, ordered[j]):
                    continue
                ks = sigs[j]
                if ks.numbers == sig.numbers:
                    ratio = Indel.normalized_similarity(sig.text, ks.text, score_cutoff=threshold)
                    if ratio >= threshold:
                        hit = j, f"text similarity {ratio:.2f}"
                        break
            if hit is None:
                hit = _quoted(i, c, sigs, ordered, lines, threshold)
        if hit is not None:
            dropped.append((c, ordered[hit[0]], hit[1]))
            continue
        is_kept[i] = True
        kept.append(c)
        if len(sig.lines) >= _QUOTE_MIN_LINES:  # fewer lines never count as a quoted passage
            for line in sig.lines:
                lines[line].append(i)
        ids[c.id] = i
        if c.commit:
            commits[c.commit] = i
        if c.path and c.start_line > 0:
            paths.setdefault((c.origin, c.path), []).append(i)
    return kept, dropped


def _named_apart(a: Item, b: Item) -> bool:
    """Two code symbols of different names are two facts, however alike."""
    return a.kind == "code" and b.kind == "code" and bool(a.name and b.name) and a.name != b.name


def _quoted(
    i: int,
    c: Item,
    sigs: Sequence[_Sig],
    ordered: Sequence[Item],
    lines: defaultdict[str, list[int]],
    threshold: float,
) -> tuple[int, str] | None:
    """A kept item that c quotes nearly line for line, or that quotes c."""
    sig = sigs[i]
    if len(sig.lines) < _QUOTE_MIN_LINES:
        return None
    shared: dict[int, int] = {}
    for line in sig.lines:
        for j in lines.get(line, ()):
            shared[j] = shared.get(j, 0) + 1
    for j in sorted(shared):
        ks = sigs[j]
        fewer = min(len(sig.lines), len(ks.lines))
        if fewer < _QUOTE_MIN_LINES or shared[j] < threshold * fewer:
            continue
        if _named_apart(c, ordered[j]):
            continue
        short, long = (sig, ks) if len(sig.lines) <= len(ks.lines) else (ks, sig)
        if set(short.numbers) <= set(long.numbers):
            return j, "quoted passage"
    return None


def similar_pairs(texts: Sequence[str], threshold: float) -> dict[int, list[int]]:
    """For each text that has any, the earlier ones (ascending) whose Indel ratio with it may
    reach threshold: every pair that does is listed (the bound is exact), few others are."""
    uniq: dict[str, int] = {}  # the exact pass: one row per distinct text
    rep = [uniq.setdefault(t, len(uniq)) for t in texts]
    members: list[list[int]] = [[] for _ in uniq]
    for i, u in enumerate(rep):
        members[u].append(i)
    partners = _bounded_pairs(list(uniq), threshold)
    out: dict[int, list[int]] = {}
    for u, mine in enumerate(members):
        if len(mine) == 1 and not partners[u]:
            continue
        others = [j for v in partners[u] for j in members[v]]
        for i in mine:
            near = [j for j in mine if j < i] + [j for j in others if j < i]
            if near:
                out[i] = sorted(near)
    return out


def _bounded_pairs(texts: Sequence[str], threshold: float) -> list[list[int]]:
    """For each distinct text, the others whose histogram bound reaches threshold."""
    n = len(texts)
    try:
        import numpy as np
    except ImportError:  # the core install: every pair goes to rapidfuzz
        return [[j for j in range(n) if j != i] for i in range(n)]
    partners: list[list[int]] = [[] for _ in range(n)]
    if n < 2:
        return partners
    sizes = np.fromiter(map(len, texts), dtype=np.int64, count=n)
    mask = _BUCKETS - 1
    hist = np.array(
        [
            np.bincount(
                np.frombuffer(t.encode("utf-32-le"), dtype=np.uint32) & mask, minlength=_BUCKETS
            )
            for t in texts
        ]
    )
    # Bucket-major (one contiguous row per bucket), 16 bits when no count can overflow them.
    kind = np.int16 if int(sizes.max()) < 2**15 else np.int64
    by_bucket = np.ascontiguousarray(hist.T, dtype=kind)
    # ratio = 2 LCS / (la + lb) <= 2 sum(min(ha, hb)) / (la + lb): a pair is kept when that
    # reaches the threshold (less a hair, so float rounding never drops an exact pair).
    half = (threshold - 1e-9) / 2
    for start in range(0, n, _BLOCK):
        stop = min(n, start + _BLOCK)
        common = np.zeros((stop - start, stop), dtype=kind)
        part = np.empty_like(common)
        for row in by_bucket:
            np.minimum(row[start:stop, None], row[None, :stop], out=part)
            common += part
        rows, cols = np.nonzero(common >= half * (sizes[start:stop, None] + sizes[None, :stop]))
        rows += start
        lower = cols < rows
        for a, b in zip(rows[lower].tolist(), cols[lower].tolist(), strict=True):
            partners[a].append(b)
            partners[b].append(a)
    return partners
