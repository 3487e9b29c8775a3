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
  is written in the original (not re-serialised), located through the offset index stored
  with a json original (`build_json_index`), scanning only inside small values;
- `hunk N`: the N-th `@@` hunk of a unified diff (1-based, across files), header included.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import zlib
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from runtime.errors import RunError, StoreError

PREFIX = "ptr-"
_ID = re.compile(r"^ptr-[0-9a-f]{16}$")
# Slice expressions are bounded before they are parsed, and parsed by patterns whose
# quantifiers are possessive (no backtracking), on the stripped expression: linear time
# whatever a model or a variable sends. Digits are ASCII only, and at most _MAX_DIGITS.
MAX_SLICE_CHARS = 1_000
_MAX_DIGITS = 15
_LINES = re.compile(r"(?:lines?\s++)?+([0-9]++)\s*+(?:-\s*+([0-9]++))?+", re.I)
_HUNK_SLICE = re.compile(r"hunk\s++([0-9]++)", re.I)
_PATH_STEP = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*+)|\[([0-9]++)\]|\[("(?:[^"\\]|\\.)*+")\]')
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
OPEN = "[ELIDED"
CLOSE = "[/ELIDED"


class PointerStore(Protocol):
    """Where originals live: content-addressed texts and each run's pointers to them.

    A store also keeps, beside each json original, its offset index (`index_for`, built
    when the original is put) and reads a range of an original's characters, so a
    JSON-path slice seeks to the value instead of loading and scanning the whole text.
    """

    def put_original(self, run_id: str, pointer_id: str, sha256: str, kind: str, text: str) -> None:
        """Store text once (by sha256), with its offset index, and record the run's pointer."""
        ...

    def get_original(self, run_id: str, pointer_id: str) -> tuple[str, str] | None:
        """(kind, text) of a run's pointer, or None when the run has no such pointer."""
        ...

    def pointers(self, run_id: str) -> list[dict[str, Any]]:
        """A run's pointers: pointer_id, sha256, kind, chars (for `runtime trace`)."""
        ...

    def get_index(self, run_id: str, pointer_id: str) -> tuple[str, bytes | None] | None:
        """(kind, stored offset index or None) of a run's pointer, or None without the pointer."""
        ...

    def put_index(self, run_id: str, pointer_id: str, text: str, index: bytes) -> None:
        """Keep the offset index built late for a pointer's original (text: that original)."""
        ...

    def read_original(self, run_id: str, pointer_id: str, start: int, end: int) -> str:
        """Characters start..end of a pointer's original (read without loading it whole)."""
        ...

    def original_size(self, run_id: str, pointer_id: str) -> int | None:
        """Characters of a run's pointer's original, or None without the pointer."""
        ...


class MemoryPointerStore:
    """The pointer store of a run without a run store (lives as long as the process)."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        self._indexes: dict[str, bytes] = {}
        self._runs: dict[str, dict[str, tuple[str, str]]] = {}
        self._lock = threading.Lock()

    def put_original(self, run_id: str, pointer_id: str, sha256: str, kind: str, text: str) -> None:
        """Store text once (by sha256), with its offset index, and record the run's pointer."""
        with self._lock:
            known = sha256 in self._texts
        index = None if known else index_for(kind, text)  # built outside the lock
        with self._lock:
            self._texts.setdefault(sha256, text)
            if index is not None:
                self._indexes.setdefault(sha256, index)
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

    def get_index(self, run_id: str, pointer_id: str) -> tuple[str, bytes | None] | None:
        """(kind, offset index or None) of a run's pointer, or None."""
        with self._lock:
            hit = self._runs.get(run_id, {}).get(pointer_id)
            return None if hit is None else (hit[1], self._indexes.get(hit[0]))

    def put_index(self, run_id: str, pointer_id: str, text: str, index: bytes) -> None:
        """Keep an offset index built late."""
        with self._lock:
            hit = self._runs.get(run_id, {}).get(pointer_id)
            if hit is not None:
                self._indexes[hit[0]] = index

    def read_original(self, run_id: str, pointer_id: str, start: int, end: int) -> str:
        """Characters start..end of a pointer's original ("" without the pointer)."""
        with self._lock:
            hit = self._runs.get(run_id, {}).get(pointer_id)
            return "" if hit is None else self._texts[hit[0]][start:end]

    def original_size(self, run_id: str, pointer_id: str) -> int | None:
        """Characters of a run's pointer's original, or None."""
        with self._lock:
            hit = self._runs.get(run_id, {}).get(pointer_id)
            return None if hit is None else len(self._texts[hit[0]])


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


_HASH_STEP = 1 << 20


def pointer_id_of(text: str) -> tuple[str, str]:
    """(pointer id, sha256) of a text: the id is the sha256's first 16 hex digits."""
    digest = hashlib.sha256()
    for at in range(0, len(text), _HASH_STEP):  # a megabyte at a time: no second whole copy
        digest.update(text[at : at + _HASH_STEP].encode("utf-8"))
    sha = digest.hexdigest()
    return PREFIX + sha[:16], sha


def slice_hint(kind: str) -> str:
    """The slice forms worth offering for a kind."""
    if kind == "json":
        return 'slice="$.path[0]" or "lines A-B"'
    if kind == "diff":
        return 'slice="hunk N" or "lines A-B"'
    return 'slice="lines A-B"'


def render(
    pointer_id: str, kind: str, chars: int, lines: int, summary: str, way_back: bool = True
) -> str:
    """The marked block that stands for an elided payload in a prompt.

    way_back: the step offers the rehydrate tool; without it the block does not tell the
    model to call a tool it does not have.
    """
    # Short: a prompt may hold several, and each summary must stay under 300 tokens with it.
    back = (
        f"; rehydrate this pointer_id for the exact text (optional {slice_hint(kind)})"
        if way_back
        else ""
    )
    return (
        f"{OPEN} {pointer_id}: {kind}, {chars:,} chars, {lines:,} lines, summarised{back}]\n"
        f"{summary}\n{CLOSE} {pointer_id}]"
    )


def render_short(
    pointer_id: str, role: str, chars: int, summary: str, way_back: bool = True
) -> str:
    """The short block of a compacted thread message (hundreds of them must fit a window)."""
    head = f"{OPEN} {pointer_id} {role}, {chars:,} chars{': rehydrate it' if way_back else ''}]"
    return f"{head} {summary}" if summary else head  # one line: no closing marker


def header_tokens(counter: Any, kind: str, chars: int, lines: int) -> int:
    """Tokens of a pointer block without its summary, with a stand-in id of 16 zeros.

    A real id's hex digits may take more tokens (up to 18 more over 2,000 ids with
    cl100k_base): count the rendered block where the exact figure matters.
    """
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
    way_back: bool = True,
) -> Pointer:
    """Store text (once) and return the pointer that stands for it with this summary.

    short_for (a role) gives the short block of a compacted thread message; way_back False
    (the step offers no rehydrate tool) leaves the call to rehydrate out of the block.
    """
    pointer_id, sha = pointer_id_of(text)
    store.put_original(run_id, pointer_id, sha, kind, text)
    shown = (
        render_short(pointer_id, short_for, len(text), summary, way_back)
        if short_for
        else render(pointer_id, kind, len(text), lines, summary, way_back)
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


class SliceTooLarge(RunError):
    """A slice refused before it was read whole or encoded: over a token budget by a bound.

    `chars` characters were seen (the slice has at least that many), so it has at least
    `tokens` tokens: no token of the counter's encoding holds more than `token_bytes`
    UTF-8 bytes, and a character is at least one byte.
    """

    def __init__(self, chars: int, token_bytes: int, budget: int) -> None:
        self.chars, self.token_bytes, self.budget = chars, token_bytes, budget
        self.tokens = -(-chars // token_bytes)
        super().__init__(
            f"the slice has at least {self.tokens:,} tokens ({chars:,} characters or more, "
            f"and no token holds more than {token_bytes} bytes), over the {budget:,}-token "
            "budget: ask for a smaller slice",
            code="REHYDRATE_OVER_BUDGET",
        )


_TOKEN_BYTES: dict[str, int] = {}


def max_token_bytes(counter: Any) -> int | None:
    """The most UTF-8 bytes one token of the counter's encoding holds, or None when unknown.

    Read from the BPE vocabulary itself (tiktoken's `token_byte_values`): 128 for
    cl100k_base and o200k_base. A text of B bytes then has at least B / 128 tokens, and
    of C characters at least C / 128 (a character is at least one byte). A counter
    without such a vocabulary (a server's tokenizer) gives no bound: its slices are
    counted after they are read.
    """
    encoding = getattr(counter, "encoding", None)
    values = getattr(encoding, "token_byte_values", None)
    if values is None:
        return None
    name = str(getattr(encoding, "name", id(encoding)))
    if name not in _TOKEN_BYTES:
        _TOKEN_BYTES[name] = max(len(v) for v in values())
    return _TOKEN_BYTES[name]


def _refuse_over(chars: int, limit: tuple[int, int] | None) -> None:
    """SliceTooLarge when chars characters are over the (budget, token bytes) bound."""
    if limit is not None and chars > limit[0] * limit[1]:
        raise SliceTooLarge(chars, limit[1], limit[0])


class Slice(NamedTuple):
    """A parsed slice expression: form "whole", "lines" (first, last), "hunk" (first) or "json"."""

    form: str
    first: int = 0
    last: int = 0
    path: str = ""
    steps: tuple[str | int, ...] = ()


def parse_slice(part: str | None) -> Slice:
    """The slice an expression asks for; SLICE_INVALID for anything malformed.

    Bounded before it is read (MAX_SLICE_CHARS) and parsed in linear time, so a slice
    from a model's tool call or a variable cannot hold a step.
    """
    if part is None:
        return Slice("whole")
    if len(part) > MAX_SLICE_CHARS:
        raise _bad(part, f"{len(part):,} characters, over the {MAX_SLICE_CHARS:,}-character limit")
    stripped = part.strip()
    if not stripped:
        return Slice("whole")
    if stripped.startswith("$"):
        return Slice("json", path=stripped, steps=tuple(_parse_path(stripped)))
    m = _LINES.fullmatch(stripped)
    if m is not None:
        first = _number(m.group(1), part)
        return Slice("lines", first, _number(m.group(2), part) if m.group(2) else first)
    m = _HUNK_SLICE.fullmatch(stripped)
    if m is not None:
        return Slice("hunk", _number(m.group(1), part))
    raise _bad(part, 'use "lines A-B", a JSON path such as "$.items[3]", or "hunk N"')


def _number(digits: str, part: str) -> int:
    """A line, hunk or array number of a slice (ASCII digits, at most _MAX_DIGITS of them)."""
    if len(digits) > _MAX_DIGITS:
        raise _bad(part, f"a number of {len(digits):,} digits is past any text")
    return int(digits)


def rehydrate(
    ctx: Any,
    pointer_id: str,
    part: str | None = None,
    *,
    max_tokens: int | None = None,
    token_bytes: int | None = None,
) -> str:
    """The original behind a run's pointer, whole or the slice `part` (exact text).

    With max_tokens and token_bytes (`max_token_bytes` of the counter), a slice with more
    than max_tokens x token_bytes characters is SliceTooLarge (REHYDRATE_OVER_BUDGET),
    decided from the stored sizes and offsets before it is read, or while a lines slice is
    located chunk by chunk: memory stays proportional to the slice, not the original.
    """
    if not isinstance(pointer_id, str) or not _ID.fullmatch(pointer_id):
        raise RunError(
            f"{_shown(pointer_id)} is not a pointer id (ptr- and 16 hex digits)",
            code="POINTER_UNKNOWN",
            step_id=getattr(ctx, "step_id", None),
        )
    want = parse_slice(part)
    store = store_of(ctx)
    limit = (max_tokens, token_bytes) if max_tokens is not None and token_bytes else None
    if want.form == "json":
        text = _rehydrate_json(ctx, store, pointer_id, want.path, list(want.steps), limit)
    elif want.form == "lines":
        text = _rehydrate_lines(ctx, store, pointer_id, want.first, want.last, part, limit)
    else:
        if want.form == "whole":
            size = store.original_size(ctx.run_id, pointer_id)
            if size is None:
                raise _unknown(ctx, pointer_id)
            _refuse_over(size, limit)
        hit = store.get_original(ctx.run_id, pointer_id)
        if hit is None:
            raise _unknown(ctx, pointer_id)
        text = hit[1] if want.form == "whole" else hunk_slice(hit[1], want.first)
    _refuse_over(len(text), limit)  # what no bound caught before reading: still not encoded
    return text


def _rehydrate_lines(
    ctx: Any,
    store: PointerStore,
    pointer_id: str,
    first: int,
    last: int,
    part: str | None,
    limit: tuple[int, int] | None = None,
) -> str:
    """A `lines A-B` slice: through the stored line index, reading only the blocks it spans."""
    found = store.get_index(ctx.run_id, pointer_id)
    if found is None:
        raise _unknown(ctx, pointer_id)
    kind, index = found
    if index is not None and is_line_index(index):
        lines = LineIndex(index)
        start, end, skipped = lines.span(first, last, part or f"lines {first}-{last}")
        if limit is None or end - start <= limit[0] * limit[1]:
            text = store.read_original(ctx.run_id, pointer_id, start, end)
            return line_slice(text, first - skipped, last - skipped, part or "")

        # The blocks are over the bound (a 50 MB line is one block): find the lines'
        # exact range piece by piece, refusing as soon as it is over, then read only it.
        def read(a: int, b: int) -> str:
            return store.read_original(ctx.run_id, pointer_id, a, b)

        s, e = _locate_lines(read, start, end, first - skipped, last - skipped, limit, pointer_id)
        return read(s, e)
    hit = store.get_original(ctx.run_id, pointer_id)
    if hit is None:
        raise _unknown(ctx, pointer_id)
    kind, text = hit
    if index is None and kind != "json" and len(text) >= _BIG:
        # Stored before line indexes were: build it now, once, so the next slice seeks.
        store.put_index(ctx.run_id, pointer_id, text, build_line_index(text))
    return line_slice(text, first, last, part or "")


_SCAN = 65_536  # characters read at a time while locating a lines slice in a long block


def _locate_lines(
    read: Any, start: int, end: int, first: int, last: int, limit: tuple[int, int], name: str
) -> tuple[int, int]:
    """(start, end) of lines first..last (counted from the block at start), read piece by
    piece; SliceTooLarge as soon as the lines are over the bound."""
    pos, line = start, 1
    begin = start if first == 1 else -1
    while pos < end:
        piece = read(pos, min(pos + _SCAN, end))
        if not piece:
            raise StoreError(f"the line index of {name} points past its text (store damaged)")
        at = piece.find("\n")
        while at >= 0:
            line += 1
            if line == first:
                begin = pos + at + 1
            elif line == last + 1:
                return begin, pos + at + 1
            at = piece.find("\n", at + 1)
        pos += len(piece)
        if begin >= 0:
            _refuse_over(pos - begin, limit)
    if begin < 0 or line < last:
        raise StoreError(f"the line index of {name} disagrees with its text (store damaged)")
    return begin, end


def _unknown(ctx: Any, pointer_id: str) -> RunError:
    return RunError(
        f"run {ctx.run_id!r} has no pointer {pointer_id!r}",
        code="POINTER_UNKNOWN",
        step_id=getattr(ctx, "step_id", None),
    )


def _rehydrate_json(
    ctx: Any,
    store: PointerStore,
    pointer_id: str,
    path: str,
    steps: list[str | int],
    limit: tuple[int, int] | None = None,
) -> str:
    """A JSON-path slice: through the stored index, read range by range from the store.

    Only an original that is one JSON document as a whole answers a path: a build log
    starting with a year or a CSV starting with a number is SLICE_INVALID, whatever its kind.
    """
    found = store.get_index(ctx.run_id, pointer_id)
    if found is None:
        raise _unknown(ctx, pointer_id)
    kind, index = found
    if index is not None and not is_line_index(index):

        def read(start: int, end: int) -> str:
            return store.read_original(ctx.run_id, pointer_id, start, end)

        json_index = JsonIndex(index)
        _check_blank_tail(json_index, read, path)
        return _indexed_slice(json_index, read, path, steps, pointer_id, limit)
    hit = store.get_original(ctx.run_id, pointer_id)
    if hit is None:
        raise _unknown(ctx, pointer_id)
    kind, text = hit
    # Not indexed: a json original stored before indexes were (m005), or any other kind.
    # Either is answered only when the whole text is one JSON document.
    try:
        index = build_json_index(text)
    except (ValueError, RecursionError) as exc:
        raise _bad(path, f"the original is not valid JSON ({exc})") from exc
    if kind == "json":  # keep it, so the next slice (in this process or another) seeks
        store.put_index(ctx.run_id, pointer_id, text, index)
    return _indexed_slice(JsonIndex(index), lambda a, b: text[a:b], path, steps, pointer_id)


def _check_blank_tail(index: JsonIndex, read: Any, path: str) -> None:
    """SLICE_INVALID when text follows the root value (an index built before that was refused)."""
    at, chars = index.root()[1], index.chars
    while at < chars:
        piece = read(at, min(at + _LOOKBACK, chars))
        if piece.strip(" \t\n\r"):
            raise _bad(path, f"the original is not valid JSON (text after its value at char {at})")
        if not piece:
            break
        at += len(piece)


def _bad(part: str, why: str) -> RunError:
    if len(why) > 200:  # it may quote a key or a path of the (bounded) slice
        why = f"{why[:180]}... ({len(why):,} characters)"
    return RunError(f"slice {_shown(part)}: {why}", code="SLICE_INVALID")


def _shown(value: Any) -> str:
    """A value quoted in an error, cut when long (a model may send megabytes)."""
    if isinstance(value, str) and len(value) > 80:
        return f"{value[:60]!r}... ({len(value):,} characters)"
    return repr(value) if isinstance(value, str) else f"a {type(value).__name__}"


def slice_text(text: str, part: str) -> str:
    """An exact slice of text: `lines A-B`, a JSON path, or `hunk N` (see module doc).

    A JSON path is answered only when the whole text is one JSON document.
    """
    want = parse_slice(part)
    if want.form == "json":
        return document_slice(text, want.path, list(want.steps))
    if want.form == "hunk":
        return hunk_slice(text, want.first)
    if want.form == "lines":
        return line_slice(text, want.first, want.last, part)
    return text


def document_slice(text: str, path: str, steps: list[str | int] | None = None) -> str:
    """The value at a JSON path of a text that must be one JSON document (else SLICE_INVALID)."""
    try:
        index = build_json_index(text)
    except (ValueError, RecursionError) as exc:
        raise _bad(path, f"the original is not valid JSON ({exc})") from exc
    found = _parse_path(path) if steps is None else steps
    return _indexed_slice(JsonIndex(index), lambda a, b: text[a:b], path, found)


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


def _parse_path(path: str) -> list[str | int]:
    steps: list[str | int] = []
    pos = 1
    while pos < len(path):
        m = _PATH_STEP.match(path, pos)
        if m is None:
            raise _bad(path, f"cannot read the path at character {pos + 1}")
        if m.group(1) is not None:
            steps.append(m.group(1))
        elif m.group(2) is not None:
            steps.append(_number(m.group(2), path))
        else:
            try:
                steps.append(json.loads(m.group(3)))
            except ValueError as exc:
                raise _bad(
                    path, f"the quoted key at character {pos + 2} is not a JSON string"
                ) from exc
        pos = m.end()
    return steps


def json_slice(text: str, path: str, index: bytes | None = None) -> str:
    """The text of the value at a JSON path, exactly as written in the original.

    With index (`build_json_index(text)`) the indexed levels are not scanned: the slice
    seeks to the stored offsets and scans only inside the addressed unindexed container.
    """
    steps = _parse_path(path)
    if index is not None:
        return _indexed_slice(JsonIndex(index), lambda a, b: text[a:b], path, steps)
    start = _WS.match(text, 0).end()  # type: ignore[union-attr]
    return _scanned_value(text, start, steps, 0, path)


def _scanned_value(text: str, start: int, steps: list[str | int], done: int, path: str) -> str:
    """The value at steps[done:] below the value at start, found by scanning text."""
    for depth in range(done, len(steps)):
        where = path if depth == len(steps) - 1 else _path_text(steps[: depth + 1])
        start = _child(text, start, steps[depth], path, where)
    try:
        _, end = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError) as exc:
        raise _bad(path, f"the original is not valid JSON there: {exc}") from exc
    return text[start:end]


def _path_text(steps: list[str | int]) -> str:
    return "$" + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps)


def _child(text: str, start: int, step: str | int, path: str, where: str) -> int:
    """Where the value of one path step begins, scanning the container at start."""
    opener = text[start : start + 1]
    if isinstance(step, int) and opener != "[":
        raise _bad(path, f"{where}: [{step}] indexes something that is not an array")
    if isinstance(step, str) and opener != "{":
        raise _bad(path, f"{where}: .{step} names a key of something that is not an object")
    pos = _WS.match(text, start + 1).end()  # type: ignore[union-attr]
    index = 0
    try:
        while text[pos : pos + 1] not in ("]", "}", ""):
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
    if isinstance(step, int):
        raise _bad(path, f"{where}: index {step} is past the array's {index} item(s)")
    raise _bad(path, f"{where}: no key {step!r}")


# --- the offset index of a JSON original -------------------------------------------------
# One flat little-endian int64 array, stored beside the original (table original_index):
#   header   MAGIC, chars of the text, number of containers, root container (-1: a scalar),
#            root value start, root value end
#   table    per container: kind (0 array, 1 object), members, where its members start
#   members  array: value start, value end, child container (-1: not indexed)
#            object: crc32 of the key, key start, value start, value end, child container;
#                    sorted by (crc32, position), so the first of equal keys comes first
# Indexed containers: the root, its first _DIRECT members (the top two levels of an
# envelope such as {"results": [...]}) and every container of _BIG characters or more at
# any depth. A slice scans only inside a container under _BIG, so its cost is bounded
# however deep in the document the value sits.
_MAGIC = 0x4A53_4958_0000_0001  # "JSIX", format 1
_HEADER = 6
_BIG = 65_536
_DIRECT = 16
_MAX_DEPTH = 64  # deeper containers are scanned (each level under it is bounded anyway)
_LOOKBACK = 256


def build_json_index(text: str) -> bytes:
    """The offset index of a JSON text, in one pass (ValueError when it is not JSON)."""
    ws = _WS.match
    records: list[tuple[int, int, list[int]]] = []

    def scan(start: int, depth: int, direct: int) -> tuple[int, int]:
        # Members are decoded whole with raw_decode (C speed) unless they are among the
        # `direct` first, which are scanned member by member (no second pass over them).
        is_obj = text[start] == "{"
        close = "}" if is_obj else "]"
        pos = ws(text, start + 1).end()  # type: ignore[union-attr]
        members: list[tuple[int, ...]] = []
        if text[pos : pos + 1] != close:
            while True:
                key_start = pos
                if is_obj:
                    if text[pos : pos + 1] != '"':
                        raise ValueError(f"expected a key at char {pos}")
                    key, pos = _DECODER.raw_decode(text, pos)
                    pos = ws(text, pos).end()  # type: ignore[union-attr]
                    if text[pos : pos + 1] != ":":
                        raise ValueError(f"expected ':' at char {pos}")
                    pos = ws(text, pos + 1).end()  # type: ignore[union-attr]
                opener = text[pos : pos + 1]
                nested = opener in ("[", "{") and depth < _MAX_DEPTH
                child = -1
                if nested and len(members) < direct:
                    end, child = scan(pos, depth + 1, 0)
                else:
                    _, end = _DECODER.raw_decode(text, pos)
                    if nested and end - pos >= _BIG:
                        _, child = scan(pos, depth + 1, 0)  # a second pass, over big ones only
                if is_obj:
                    crc = zlib.crc32(key.encode("utf-8", "surrogatepass"))
                    members.append((crc, len(members), key_start, pos, end, child))
                else:
                    members.append((pos, end, child))
                pos = ws(text, end).end()  # type: ignore[union-attr]
                sep = text[pos : pos + 1]
                if sep == ",":
                    pos = ws(text, pos + 1).end()  # type: ignore[union-attr]
                elif sep == close:
                    break
                else:
                    raise ValueError(f"expected ',' or {close!r} at char {pos}")
        flat: list[int] = []
        if is_obj:
            for m in sorted(members):
                flat += (m[0], m[2], m[3], m[4], m[5])
        else:
            for m in members:
                flat += m
        records.append((1 if is_obj else 0, len(members), flat))
        return pos + 1, len(records) - 1

    root_start = ws(text, 0).end()  # type: ignore[union-attr]
    if text[root_start : root_start + 1] in ("[", "{"):
        root_end, root = scan(root_start, 0, _DIRECT)
    else:
        _, root_end = _DECODER.raw_decode(text, root_start)
        root = -1
    after = ws(text, root_end).end()  # type: ignore[union-attr]
    if after != len(text):  # "2026-01-01 ..." is a log, not the number 2026
        raise ValueError(f"text after the JSON value at char {after}")
    out = array("q", [_MAGIC, len(text), len(records), root, root_start, root_end])
    at = _HEADER + 3 * len(records)
    for kind, count, flat in records:
        out += array("q", (kind, count, at))
        at += len(flat)
    for _, _, flat in records:
        out += array("q", flat)
    return _packed(out)


def _packed(values: array[int]) -> bytes:
    """int64s as stored: little-endian whatever the machine."""
    if sys.byteorder == "big":
        values.byteswap()
    return values.tobytes()


def _int64s(blob: bytes) -> array[int]:
    """The int64s of a stored index (little-endian); a torn blob is a damaged store."""
    if len(blob) % 8:
        raise StoreError(f"a stored index of {len(blob)} bytes is not whole int64s (store damaged)")
    a = array("q")
    a.frombytes(blob)
    if sys.byteorder == "big":
        a.byteswap()
    return a


def index_for(kind: str, text: str) -> bytes | None:
    """The offset index a store keeps beside an original: json paths or (big texts) lines."""
    if kind != "json":
        return build_line_index(text) if len(text) >= _BIG else None
    try:
        return build_json_index(text)
    except (ValueError, RecursionError):
        # Not JSON after all: no index, and a JSON-path slice reports the error where it is.
        return None


class JsonIndex:
    """A stored offset index, read without copying its members (array('q') over the bytes)."""

    __slots__ = ("a",)

    def __init__(self, blob: bytes) -> None:
        a = _int64s(blob)
        if len(a) < _HEADER or a[0] != _MAGIC or len(a) < _HEADER + 3 * a[2]:
            raise StoreError("a stored JSON offset index is not one (format or length)")
        self.a = a

    @property
    def chars(self) -> int:
        """Characters of the text the index was built from."""
        return self.a[1]

    def root(self) -> tuple[int, int, int]:
        """(start, end, container) of the root value."""
        return self.a[4], self.a[5], self.a[3]

    def container(self, record: int) -> tuple[int, int, int]:
        """(kind, members, where the members start) of an indexed container."""
        if not 0 <= record < self.a[2]:
            raise StoreError(f"a stored JSON offset index names container {record}, not stored")
        at = _HEADER + 3 * record
        return self.a[at], self.a[at + 1], self.a[at + 2]


def _indexed_slice(
    index: JsonIndex,
    read: Any,
    path: str,
    steps: list[str | int],
    name: str = "the original",
    limit: tuple[int, int] | None = None,
) -> str:
    """The value at steps, seeking through the index's levels, then scanning within."""
    a = index.a
    start, end, record = index.root()
    for depth, step in enumerate(steps):
        where = path if depth == len(steps) - 1 else _path_text(steps[: depth + 1])
        if record < 0:  # below the indexed levels: scan inside this (bounded) value
            return _scanned_value(_read_value(index, read, start, end, name), 0, steps, depth, path)
        kind, count, at = index.container(record)
        if isinstance(step, int):
            if kind != 0:
                raise _bad(path, f"{where}: [{step}] indexes something that is not an array")
            if step >= count:
                raise _bad(path, f"{where}: index {step} is past the array's {count} item(s)")
            at += 3 * step
            start, end, record = a[at], a[at + 1], a[at + 2]
            continue
        if kind != 1:
            raise _bad(path, f"{where}: .{step} names a key of something that is not an object")
        crc = zlib.crc32(step.encode("utf-8", "surrogatepass"))
        lo, hi = 0, count
        while lo < hi:  # the first member whose key has this crc32
            mid = (lo + hi) // 2
            if a[at + 5 * mid] < crc:
                lo = mid + 1
            else:
                hi = mid
        found = -1
        for m in range(at + 5 * lo, at + 5 * count, 5):
            if a[m] != crc:
                break
            if _stored_key(read(a[m + 1], a[m + 2]), a[m + 1], name) == step:
                found = m
                break
        if found < 0:
            raise _bad(path, f"{where}: no key {step!r}")
        start, end, record = a[found + 2], a[found + 3], a[found + 4]
    _refuse_over(end - start, limit)  # the value's size is known before it is read
    return _read_value(index, read, start, end, name)


def _read_value(index: JsonIndex, read: Any, start: int, end: int, name: str) -> str:
    """The text of a value at stored offsets, checked to be one value exactly there."""
    # Read with up to _LOOKBACK characters before the value: what precedes a value must be
    # `[`, `,` or `:` (after blanks), or it is the root; a start moved into a number or a
    # string would not be.
    back = min(start, _LOOKBACK) if start != index.root()[0] else 0
    window = read(start - back, end)
    text = window[back:]
    _check_span(text, start, end, index, name)
    before = window[:back].rstrip(" \t\n\r")
    if back and (before[-1:] not in ("[", ",", ":") if before else start == back):
        raise _corrupt(name, start, "no value starts there (not after '[', ',' or ':')")
    if end - start <= _BIG:
        # Decoded whole: a stored offset that is off would not end the value where stored.
        try:
            _, stop = _DECODER.raw_decode(text, 0)
        except (ValueError, RecursionError) as exc:
            raise _corrupt(name, start, f"no JSON value starts there ({exc})") from exc
        if stop != len(text):
            raise _corrupt(name, start, f"the value ends at {start + stop}, not {end}")
    elif (text[0], text[-1]) not in (("[", "]"), ("{", "}")):
        raise _corrupt(name, start, "a large value that is not a container")
    return text


def _stored_key(text: str, at: int, name: str) -> str:
    """The key of an object member from its stored text (`"key" :` and blanks)."""
    try:
        key, stop = _DECODER.raw_decode(text, 0)
    except (ValueError, RecursionError) as exc:
        raise _corrupt(name, at, f"no key starts there ({exc})") from exc
    if not isinstance(key, str) or text[stop:].strip(" \t\n\r") != ":":
        raise _corrupt(name, at, "no key and ':' there")
    return key


def _check_span(text: str, start: int, end: int, index: JsonIndex, name: str) -> None:
    if not 0 <= start < end <= index.chars or len(text) != end - start:
        raise _corrupt(name, start, f"offsets {start}-{end} are outside its {index.chars} chars")


def _corrupt(name: str, at: int, why: str) -> StoreError:
    return StoreError(
        f"the stored JSON offset index of {name} disagrees with it at char {at}: {why} "
        "(the run store is damaged; deleting the original's row in original_index rebuilds it)"
    )


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


# --- the line index of a big text original ---------------------------------------------
# One flat little-endian int64 array: LINE_MAGIC, chars, lines (as line_slice counts them),
# then where every _LINE_STEP-th line starts (lines 1, 1 + _LINE_STEP, ...). A `lines A-B`
# slice reads the blocks from the one holding line A to the end of the one holding line B,
# so its cost is bounded by the slice, not by the text. Texts under _BIG are read whole.
_LINE_MAGIC = 0x4C49_4E45_0000_0001  # "LINE", format 1
_LINE_HEADER = 3
_LINE_STEP = 256


def build_line_index(text: str) -> bytes:
    """The line index of text: its line count and every _LINE_STEP-th line's start."""
    starts = [0]
    pos, line = 0, 1
    find = text.find
    while True:
        pos = find("\n", pos) + 1
        if pos == 0:
            break
        line += 1
        if line % _LINE_STEP == 1 and pos < len(text):
            starts.append(pos)
    total = line - (1 if text.endswith("\n") else 0)
    return _packed(array("q", [_LINE_MAGIC, len(text), total, *starts]))


def is_line_index(blob: bytes) -> bool:
    """Whether a stored index is a line index (else a JSON offset index)."""
    return len(blob) >= 8 and _int64s(blob[:8])[0] == _LINE_MAGIC


class LineIndex:
    """A stored line index."""

    __slots__ = ("a",)

    def __init__(self, blob: bytes) -> None:
        a = _int64s(blob)
        if len(a) < _LINE_HEADER + 1 or a[0] != _LINE_MAGIC:
            raise StoreError("a stored line index is not one (format or length)")
        blocks = (max(a[2], 1) - 1) // _LINE_STEP + 1
        if len(a) != _LINE_HEADER + blocks:
            raise StoreError(
                f"a stored line index holds {len(a) - _LINE_HEADER} block starts for "
                f"{a[2]} lines (store damaged)"
            )
        self.a = a

    def span(self, first: int, last: int, part: str) -> tuple[int, int, int]:
        """(start, end, lines before start) of the blocks holding lines first..last."""
        a, total = self.a, self.a[2]
        if first < 1 or last < first or last > total:
            raise _bad(part, f"the text has lines 1-{total}")
        k = (first - 1) // _LINE_STEP
        after = last // _LINE_STEP + 1  # the block after the one holding line `last`
        end = a[_LINE_HEADER + after] if _LINE_HEADER + after < len(a) else a[1]
        return a[_LINE_HEADER + k], end, k * _LINE_STEP
