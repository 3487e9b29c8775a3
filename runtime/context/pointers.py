"""Pointers: what replaces an elided payload in a prompt, and the way back to the original.

A `Pointer` {pointer_id, kind, display_text, rehydrate} is shown to the model as a
short marked block: what was elided (kind, size), its summary, and the call that gets
it back. The original is stored once, content-addressed by sha256, in the run's
pointer store (the run store's `originals` and `run_pointers` tables, or memory when
a run has no store), so it survives resume and `runtime trace` exports it.

`rehydrate(ctx, pointer_id, slice)` returns the original or an exact slice of it,
byte-identical to that part of the original text:

- `lines A-B` (or `A-B`, or `line A`): lines A to B, 1-based and inclusive, each with
  its own line ending;
- a JSON path `$`, `$.key`, `$.a[3].b`, `$["odd key"]`: the value's text exactly as it
  is written in the original (located by scanning, not re-serialised);
- `hunk N`: the N-th `@@` hunk of a unified diff (1-based, across files), header included.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from runtime.errors import RunError

PREFIX = "ptr-"
_ID = re.compile(r"^ptr-[0-9a-f]{16}$")
_LINES = re.compile(r"^\s*(?:lines?\s+)?(\d+)\s*(?:-\s*(\d+))?\s*$", re.I)
_HUNK_SLICE = re.compile(r"^\s*hunk\s+(\d+)\s*$", re.I)
_PATH_STEP = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# (pointer id, array start) -> the start of each item found so far: a later slice into the
# same array of the same original starts where the scan stopped instead of at item 0.
_ITEMS: OrderedDict[tuple[str, int], list[int]] = OrderedDict()
_ITEMS_SIZE = 64
_ITEMS_LOCK = threading.Lock()
OPEN = "[ELIDED"
CLOSE = "[/ELIDED"


class PointerStore(Protocol):
    """Where originals live: content-addressed texts and each run's pointers to them."""

    def put_original(self, run_id: str, pointer_id: str, sha256: str, kind: str, text: str) -> None:
        """Store text once (by sha256) and record the run's pointer to it."""
        ...

    def get_original(self, run_id: str, pointer_id: str) -> tuple[str, str] | None:
        """(kind, text) of a run's pointer, or None when the run has no such pointer."""
        ...

    def pointers(self, run_id: str) -> list[dict[str, Any]]:
        """A run's pointers: pointer_id, sha256, kind, chars (for `runtime trace`)."""
        ...


class MemoryPointerStore:
    """The pointer store of a run without a run store (lives as long as the process)."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        self._runs: dict[str, dict[str, tuple[str, str]]] = {}
        self._lock = threading.Lock()

    def put_original(self, run_id: str, pointer_id: str, sha256: str, kind: str, text: str) -> None:
        """Store text once (by sha256) and record the run's pointer to it."""
        with self._lock:
            self._texts.setdefault(sha256, text)
            self._runs.setdefault(run_id, {})[pointer_id] = (sha256, kind)

    def get_original(self, run_id: str, pointer_id: str) -> tuple[str, str] | None:
        """(kind, text) of a run's pointer, or None."""
        with self._lock:
            hit = self._runs.get(run_id, {}).get(pointer_id)
            return None if hit is None else (hit[1], self._texts[hit[0]])

    def pointers(self, run_id: str) -> list[dict[str, Any]]:
        """A run's pointers, in id order."""
        with self._lock:
            return [
                {"pointer_id": p, "sha256": sha, "kind": kind, "chars": len(self._texts[sha])}
                for p, (sha, kind) in sorted(self._runs.get(run_id, {}).items())
            ]


@dataclass(frozen=True)
class Pointer:
    """An elided payload: its id, kind, the block the model sees, and how to get it back."""

    pointer_id: str
    kind: str
    display_text: str
    rehydrate: str
    sha256: str
    chars: int
    lines: int


def pointer_id_of(text: str) -> tuple[str, str]:
    """(pointer id, sha256) of a text: the id is the sha256's first 16 hex digits."""
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return PREFIX + sha[:16], sha


def slice_hint(kind: str) -> str:
    """The slice forms worth offering for a kind."""
    if kind == "json":
        return 'slice="$.path[0]" or "lines A-B"'
    if kind == "diff":
        return 'slice="hunk N" or "lines A-B"'
    return 'slice="lines A-B"'


def render(pointer_id: str, kind: str, chars: int, lines: int, summary: str) -> str:
    """The marked block that stands for an elided payload in a prompt."""
    # Short: a prompt may hold several, and each summary must stay under 300 tokens with it.
    return (
        f"{OPEN} {pointer_id}: {kind}, {chars:,} chars, {lines:,} lines, summarised; "
        f"rehydrate this pointer_id for the exact text (optional {slice_hint(kind)})]\n"
        f"{summary}\n{CLOSE} {pointer_id}]"
    )


def render_short(pointer_id: str, role: str, chars: int, summary: str) -> str:
    """The short block of a compacted thread message (hundreds of them must fit a window)."""
    head = f"{OPEN} {pointer_id} {role}, {chars:,} chars: rehydrate it]"
    return f"{head} {summary}" if summary else head  # one line: no closing marker


def header_tokens(counter: Any, kind: str, chars: int, lines: int) -> int:
    """Tokens of a pointer block without its summary (the summary's budget is what is left)."""
    return int(counter.count(render(PREFIX + "0" * 16, kind, chars, lines, "")))


def make_pointer(
    store: PointerStore,
    run_id: str,
    text: str,
    kind: str,
    summary: str,
    lines: int,
    *,
    short_for: str | None = None,
) -> Pointer:
    """Store text (once) and return the pointer that stands for it with this summary.

    short_for (a role) gives the short block of a compacted thread message.
    """
    pointer_id, sha = pointer_id_of(text)
    store.put_original(run_id, pointer_id, sha, kind, text)
    shown = (
        render_short(pointer_id, short_for, len(text), summary)
        if short_for
        else render(pointer_id, kind, len(text), lines, summary)
    )
    return Pointer(
        pointer_id=pointer_id,
        kind=kind,
        display_text=shown,
        rehydrate=f"rehydrate(pointer_id={pointer_id!r}, {slice_hint(kind)})",
        sha256=sha,
        chars=len(text),
        lines=lines,
    )


def store_of(ctx: Any) -> PointerStore:
    """The run's pointer store (Services.pointers)."""
    store = getattr(ctx.services, "pointers", None)
    if store is None:
        raise RunError(
            "the run's services have no pointer store (Services.pointers)",
            code="POINTER_STORE_UNAVAILABLE",
            step_id=getattr(ctx, "step_id", None),
        )
    return store


def rehydrate(ctx: Any, pointer_id: str, part: str | None = None) -> str:
    """The original behind a run's pointer, whole or the slice `part` (exact text)."""
    if not _ID.match(pointer_id or ""):
        raise RunError(
            f"{pointer_id!r} is not a pointer id (ptr- and 16 hex digits)",
            code="POINTER_UNKNOWN",
            step_id=getattr(ctx, "step_id", None),
        )
    hit = store_of(ctx).get_original(ctx.run_id, pointer_id)
    if hit is None:
        raise RunError(
            f"run {ctx.run_id!r} has no pointer {pointer_id!r}",
            code="POINTER_UNKNOWN",
            step_id=getattr(ctx, "step_id", None),
        )
    _kind, text = hit
    if part is None or not part.strip():
        return text
    return slice_text(text, part, pointer_id)


def _bad(part: str, why: str) -> RunError:
    return RunError(f"slice {part!r}: {why}", code="SLICE_INVALID")


def slice_text(text: str, part: str, key: str | None = None) -> str:
    """An exact slice of text: `lines A-B`, a JSON path, or `hunk N` (see module doc)."""
    stripped = part.strip()
    if stripped.startswith("$"):
        return json_slice(text, stripped, key)
    m = _HUNK_SLICE.match(stripped)
    if m:
        return hunk_slice(text, int(m.group(1)))
    m = _LINES.match(stripped)
    if m:
        first = int(m.group(1))
        last = int(m.group(2) or first)
        return line_slice(text, first, last, part)
    raise _bad(part, 'use "lines A-B", a JSON path such as "$.items[3]", or "hunk N"')


def line_slice(text: str, first: int, last: int, part: str = "") -> str:
    """Lines first..last (1-based, inclusive) with their own line endings."""
    # Only \n ends a line, as the summaries number them (runtime/context/summarize.py).
    lines = text.split("\n")
    total = len(lines) - (1 if text.endswith("\n") else 0)
    if first < 1 or last < first or last > total:
        raise _bad(part or f"lines {first}-{last}", f"the text has lines 1-{total}")
    start = sum(len(ln) + 1 for ln in lines[: first - 1])
    end = start + sum(len(ln) + 1 for ln in lines[first - 1 : last])
    return text[start : min(end, len(text))]


def hunk_slice(text: str, number: int) -> str:
    """The number-th `@@` hunk of a unified diff, header line included (exact text)."""
    starts = [m.start() for m in re.finditer(r"^@@ ", text, re.M)]
    if number < 1 or number > len(starts):
        raise _bad(f"hunk {number}", f"the diff has {len(starts)} hunk(s)")
    start = starts[number - 1]
    ends = re.compile(r"^(@@ |diff --git |--- |Index: )", re.M)
    m = ends.search(text, text.find("\n", start) + 1 if "\n" in text[start:] else len(text))
    end = m.start() if m else len(text)
    return text[start:end]


def json_slice(text: str, path: str, key: str | None = None) -> str:
    """The text of the value at a JSON path, exactly as written in the original.

    key (a pointer id: the same id is the same text) lets repeated slices into one array
    reuse the item offsets found by the first (`_ITEMS`).
    """
    steps: list[str | int] = []
    pos = 1
    while pos < len(path):
        m = _PATH_STEP.match(path, pos)
        if m is None:
            raise _bad(path, f"cannot read the path at character {pos + 1}")
        if m.group(1) is not None:
            steps.append(m.group(1))
        elif m.group(2) is not None:
            steps.append(int(m.group(2)))
        else:
            steps.append(json.loads(m.group(3)))
        pos = m.end()
    start = _WS.match(text, 0).end()  # type: ignore[union-attr]
    for depth, step in enumerate(steps):
        where = path if depth == len(steps) - 1 else _path_text(steps[: depth + 1])
        start = _child(text, start, step, path, where, key)
    try:
        _, end = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError) as exc:
        raise _bad(path, f"the original is not valid JSON there: {exc}") from exc
    return text[start:end]


def _path_text(steps: list[str | int]) -> str:
    return "$" + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps)


def _child(
    text: str, start: int, step: str | int, path: str, where: str, key: str | None = None
) -> int:
    """Where the value of one path step begins, scanning the container at start."""
    opener = text[start : start + 1]
    if isinstance(step, int) and opener != "[":
        raise _bad(path, f"{where}: [{step}] indexes something that is not an array")
    if isinstance(step, str) and opener != "{":
        raise _bad(path, f"{where}: .{step} names a key of something that is not an object")
    pos = _WS.match(text, start + 1).end()  # type: ignore[union-attr]
    index = 0
    known: list[int] | None = None  # this scan's item starts (published when it ends)
    if isinstance(step, int) and key is not None:
        with _ITEMS_LOCK:
            cached = _ITEMS.get((key, start), [])
        if step < len(cached):
            return cached[step]
        known = list(cached)
        if known:  # resume at the last item found before
            index, pos = len(known) - 1, known[-1]
    try:
        while text[pos : pos + 1] not in ("]", "}", ""):
            if known is not None and index == len(known):
                known.append(pos)
            if isinstance(step, str):
                name, pos = _DECODER.raw_decode(text, pos)
                pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
                if text[pos : pos + 1] != ":":
                    raise ValueError("expected ':'")
                pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
                if name == step:
                    return pos
            elif index == step:
                return pos
            _, pos = _DECODER.raw_decode(text, pos)  # skip the value
            index += 1
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if text[pos : pos + 1] == ",":
                pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
    except (ValueError, RecursionError) as exc:
        raise _bad(path, f"the original is not valid JSON there: {exc}") from exc
    finally:
        if known is not None and key is not None:
            with _ITEMS_LOCK:
                if len(known) > len(_ITEMS.get((key, start), ())):
                    _ITEMS[(key, start)] = known
                if (key, start) in _ITEMS:
                    _ITEMS.move_to_end((key, start))
                while len(_ITEMS) > _ITEMS_SIZE:
                    _ITEMS.popitem(last=False)
    if isinstance(step, int):
        raise _bad(path, f"{where}: index {step} is past the array's {index} item(s)")
    raise _bad(path, f"{where}: no key {step!r}")


def export(store: PointerStore, run_id: str, *, with_text: bool = False) -> list[dict[str, Any]]:
    """A run's pointers for `runtime trace` (the originals too with with_text)."""
    out = []
    for entry in store.pointers(run_id):
        row: dict[str, Any] = dict(entry)
        if with_text:
            hit = store.get_original(run_id, entry["pointer_id"])
            row["text"] = hit[1] if hit else None
        out.append(row)
    return out


def as_mapping(pointer: Pointer) -> Mapping[str, Any]:
    """A pointer as trace data (without the display text, which the prompt holds)."""
    return {
        "pointer_id": pointer.pointer_id,
        "kind": pointer.kind,
        "sha256": pointer.sha256,
        "chars": pointer.chars,
        "lines": pointer.lines,
        "rehydrate": pointer.rehydrate,
    }
