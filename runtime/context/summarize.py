"""Deterministic summarisers, budgeted in real tokens: text, diff, JSON, code, log, Markdown.

`summarise(text, kind, budget_tokens, counter)` returns a `Summary` whose text never
exceeds `budget_tokens` tokens of `counter` (checked by counting, not estimated). The
kind is detected when `None`. Each summariser works from the structure of its input
and cites line numbers (or JSON paths, or hunk numbers), so a model reading it can ask
for the exact part it needs with `rehydrate`.

Large inputs are read without counting them whole: a summariser looks at the lines it
keeps, and JSON is walked breadth-first with an explicit queue and a node limit, so a
5 MB document costs one `json.loads` and a bounded walk, never recursion.

Code is summarised by the classifiers' compaction, which lives in a higher layer than
this one: the action layer registers it with `register("code", ...)` (see
actions/_summarisers.py). Asking for a kind nobody registered is `SUMMARY_KIND_UNAVAILABLE`;
a kind that does not match the text (JSON that does not parse) is `SUMMARY_KIND_MISMATCH`.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from runtime.errors import RunError

KINDS = ("text", "diff", "json", "code", "log", "markdown")
# A BPE token of cl100k_base or o200k_base is at most this many UTF-8 bytes, so a text of
# B bytes has at least B / MAX_TOKEN_BYTES tokens (a lower bound needing no tokenizer).
MAX_TOKEN_BYTES = 128
_HEAD_CHARS = 6000  # text/log: how far into each end a summariser looks for sentences/lines
_JSON_NODES = 400  # JSON: at most this many values described (breadth-first)
_SENTENCE = re.compile(
    r"(?<!\bMr\.)(?<!Mrs\.)(?<!\bDr\.)(?<!\bMs\.)(?<!\bSt\.)(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])"
)
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_LOG_LEVEL = re.compile(
    r"\b(ERROR|ERR|FATAL|CRITICAL|SEVERE|PANIC|WARN|WARNING|Exception|Traceback|failed|error:)\b"
)
_LOG_LINE = re.compile(
    r"^(\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|\[?\d{2}:\d{2}:\d{2}|\w{3} +\d+ \d{2}:\d{2}:\d{2}"
    r"|(DEBUG|INFO|WARN|WARNING|ERROR|TRACE|FATAL)\b|\[(DEBUG|INFO|WARN|WARNING|ERROR)\])"
)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


class Counter(Protocol):
    """What a summariser needs of a token counter (runtime/context/tokens.py)."""

    def count(self, text: str) -> int:
        """Exact token count."""
        ...

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of text within max_tokens."""
        ...


@dataclass(frozen=True)
class Summary:
    """A summary: its kind, its text, its tokens, and the size of what it stands for."""

    kind: str
    text: str
    tokens: int
    original_chars: int
    original_lines: int


# kind -> fn(text, budget_tokens, counter) -> summary text (may exceed; summarise() fits it)
Summariser = Callable[[str, int, Counter], str]
_REGISTRY: dict[str, Summariser] = {}
# A registered code summariser may also say whether a text is code (for detection).
_CODE_DETECT: list[Callable[[str], bool]] = []


def register(kind: str, fn: Summariser, detect: Callable[[str], bool] | None = None) -> None:
    """Install the summariser of a kind (the action layer installs `code`)."""
    if kind not in KINDS:
        raise ValueError(f"unknown summary kind {kind!r}")
    _REGISTRY[kind] = fn
    if kind == "code" and detect is not None:
        _CODE_DETECT[:] = [detect]


def line_count(text: str) -> int:
    """Lines as `lines A-B` slices number them (a final newline ends the last line)."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def detect_kind(text: str) -> str:
    """The kind of a payload: diff, json, markdown, log, code (if registered), else text."""
    head = text[:4000]
    stripped = head.lstrip()
    if stripped.startswith(("diff --git ", "--- ", "Index: ")) and "\n@@ " in text[:20000]:
        return "diff"
    # Shape only: parsing 5 MB twice (here and in the summariser) would double the cost. A
    # detected JSON that does not parse is summarised as text (see summarise).
    if stripped[:1] in ("{", "[") and text.rstrip()[-1:] in ("}", "]"):
        return "json"
    lines = head.splitlines()[:60]
    if lines:
        headings = sum(1 for ln in lines if _HEADING.match(ln))
        if headings >= 2 or (headings == 1 and _HEADING.match(lines[0])):
            return "markdown"
        logged = sum(1 for ln in lines if _LOG_LINE.match(ln))
        if len(lines) >= 3 and logged * 2 >= len(lines):
            return "log"
    if _CODE_DETECT and "code" in _REGISTRY and _CODE_DETECT[0](text):
        return "code"
    return "text"


def summarise(text: str, kind: str | None, budget_tokens: int, counter: Counter) -> Summary:
    """A summary of text within budget_tokens tokens (kind detected when None)."""
    if budget_tokens < 1:
        raise RunError(
            f"a summary needs a budget of at least 1 token, got {budget_tokens}",
            code="SUMMARY_BUDGET_INVALID",
        )
    detected = kind is None
    kind = kind or detect_kind(text)
    fn = _REGISTRY.get(kind)
    if fn is None:
        raise RunError(
            f"no {kind!r} summariser is installed (kinds: {', '.join(sorted(_REGISTRY))})",
            code="SUMMARY_KIND_UNAVAILABLE",
        )
    try:
        body = fn(text, budget_tokens, counter)
    except RunError as exc:
        if not (detected and exc.code == "SUMMARY_KIND_MISMATCH"):
            raise
        kind, body = "text", summarise_text(text, budget_tokens, counter)  # looked like JSON
    tokens = counter.count(body)
    if tokens > budget_tokens:  # a summariser's own fitting is line-wise; this cut is exact
        body = counter.truncate(body, budget_tokens)
        tokens = counter.count(body)
    return Summary(kind, body, tokens, len(text), line_count(text))


# --- fitting ---------------------------------------------------------------------------


def fit_lines(
    head: Iterable[str],
    optional: Iterable[str],
    budget: int,
    counter: Counter,
    *,
    order: Callable[[list[tuple[int, str]]], list[str]] | None = None,
    parents: Mapping[int, int] | None = None,
) -> str:
    """head lines, then as many optional lines as fit in budget tokens (exactly counted).

    Lines are added while the running per-line count stays within the budget, then the
    joined text is counted exactly and trailing optional lines dropped while it is over.
    `order` puts the kept (priority, line) pairs back in display order; `parents` maps an
    optional line's index to the one it needs (a hunk's first line needs its header).
    """
    kept: list[tuple[int, str]] = [(i, ln) for i, ln in enumerate(head)]
    used = sum(counter.count(ln) + 1 for _, ln in kept)
    base = len(kept)
    optional_list = list(optional)
    needs = {base + k: base + v for k, v in (parents or {}).items()}
    taken = {i for i, _ in kept}
    for i, line in enumerate(optional_list, start=base):
        if i in needs and needs[i] not in taken:
            continue
        cost = counter.count(line) + 1
        if used + cost > budget:
            if cost > budget // 4:  # one long line must not end the summary: try shorter ones
                continue
            break
        kept.append((i, line))
        taken.add(i)
        used += cost

    def render(pairs: list[tuple[int, str]]) -> str:
        return "\n".join(order(pairs) if order else [ln for _, ln in pairs])

    text = render(kept)
    while len(kept) > base and counter.count(text) > budget:
        kept.pop()
        text = render(kept)
    # The running count over-estimates joins (about a token a line): top up with exact counts.
    taken = {i for i, _ in kept}
    tries = 0
    for i, line in enumerate(optional_list, start=base):
        if i in taken:
            continue
        if i in needs and needs[i] not in taken:
            continue
        if tries == 16:
            break
        tries += 1
        candidate = sorted([*kept, (i, line)])
        wider = render(candidate)
        if counter.count(wider) <= budget:
            kept, text = candidate, wider
            taken.add(i)
    return text


def _clip(line: str, chars: int = 200) -> str:
    """One line shortened for display (the original stays whole behind the pointer)."""
    return line if len(line) <= chars else line[: chars - 1] + "…"


# --- the summarisers -------------------------------------------------------------------


def _sentences(text: str) -> list[str]:
    """Sentences; lines instead when the text has next to no sentence punctuation."""
    pieces = [p for p in _SENTENCE.split(text.strip()) if p]
    if len(pieces) < 4 and text.count("\n") >= 4:  # a listing, a table, a log-like text
        return [ln for ln in text.strip().split("\n") if ln.strip()]
    return pieces


def summarise_text(text: str, budget: int, counter: Counter) -> str:
    """Whole sentences from the head and the tail, alternately, with what lies between."""
    if len(text) <= budget * MAX_TOKEN_BYTES and counter.count(text) <= budget:
        return text  # it fits: nothing to summarise
    head = _sentences(text[:_HEAD_CHARS])
    if len(text) > _HEAD_CHARS:
        head = head[:-1] or head  # the last piece may be cut mid-sentence
        tail = _sentences(text[-_HEAD_CHARS:])[1:]
    else:
        tail = []
    intro = f"text: {len(text):,} characters, {line_count(text):,} lines; head and tail:"
    # Alternate head and tail so both ends are represented whatever the budget.
    picks: list[str] = []
    side: dict[str, int] = {}
    for i in range(max(len(head), len(tail))):
        if i < len(head):
            s = " ".join(_clip(head[i], 400).split())
            picks.append(s)
            side.setdefault(s, i)
        if i < len(tail):
            s = " ".join(_clip(tail[-1 - i], 400).split())
            if s not in side:  # a short text's head and tail overlap
                picks.append(s)
                side[s] = 1_000_000 - i

    def order(pairs: list[tuple[int, str]]) -> list[str]:
        kept = [ln for _, ln in pairs[1:]]
        heads = [ln for ln in kept if side[ln] < 500_000]
        tails = sorted((ln for ln in kept if side[ln] >= 500_000), key=lambda s: side[s])
        return [pairs[0][1], *heads, "[…]", *tails]

    return fit_lines([intro], picks, budget, counter, order=order)


def summarise_diff(text: str, budget: int, counter: Counter) -> str:
    """Files with +/- counts, then each hunk's header and first and last changed lines."""
    files: list[dict[str, Any]] = []
    hunks: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    hunk: dict[str, Any] | None = None
    # A hunk ends where its header's line counts say (old and new lines left): a deleted
    # line that reads "-- x" (a SQL comment) shows as "--- x" and is no file header.
    left = [0, 0]
    for number, line in enumerate(text.split("\n"), start=1):
        inside = hunk is not None and (left[0] > 0 or left[1] > 0)
        if line.startswith("diff --git "):
            hunk = None
            current = {"name": line.split(" b/", 1)[-1], "add": 0, "del": 0, "hunks": 0}
            files.append(current)
            continue
        if not inside and line.startswith("--- "):
            hunk = None
            if current is None or current["hunks"]:  # a plain diff's next file
                current = {"name": "?", "add": 0, "del": 0, "hunks": 0}
                files.append(current)
            continue
        if not inside and line.startswith("+++ "):
            name = line[4:].split("\t")[0]
            name = name[2:] if name.startswith("b/") else name
            if current is None:
                current = {"name": name, "add": 0, "del": 0, "hunks": 0}
                files.append(current)
            elif name != "/dev/null":
                current["name"] = name
            continue
        m = _HUNK.match(line)
        if m:
            if current is None:
                current = {"name": "?", "add": 0, "del": 0, "hunks": 0}
                files.append(current)
            current["hunks"] += 1
            hunk = {"n": len(hunks) + 1, "line": number, "header": line, "file": current["name"]}
            hunk.update({"add": 0, "del": 0, "first": None, "last": None})
            hunks.append(hunk)
            left = [int(m.group(2) or 1), int(m.group(4) or 1)]
            continue
        if not inside or hunk is None:
            continue
        if not line or line[0] == " ":  # context (a blank one may have lost its space)
            left = [left[0] - 1, left[1] - 1]
            continue
        if line[0] not in "+-":  # "\ No newline at end of file"
            continue
        key = "add" if line[0] == "+" else "del"
        left[0 if key == "del" else 1] -= 1
        hunk[key] += 1
        if current is not None:
            current[key] += 1
        hunk["first"] = hunk["first"] or line
        hunk["last"] = line
    total_add = sum(f["add"] for f in files)
    total_del = sum(f["del"] for f in files)
    head = [
        f"diff: {len(files)} file(s), {len(hunks)} hunk(s), +{total_add} -{total_del}, "
        f"{line_count(text):,} lines"
    ]
    # Priority: every file, then every hunk's header, then hunks' first and last lines;
    # shown in the diff's order, each hunk's lines under its header.
    optional: list[str] = []
    where: list[tuple[int, int, int]] = []
    parents: dict[int, int] = {}
    for n, f in enumerate(files):
        optional.append(f"{f['name']}: {f['hunks']} hunk(s) +{f['add']} -{f['del']}")
        where.append((0, n, 0))
    header_at: dict[int, int] = {}
    for h in hunks:
        header_at[h["n"]] = len(optional)
        optional.append(
            f"hunk {h['n']} (line {h['line']}, {h['file']}): {_clip(h['header'], 120)} "
            f"+{h['add']} -{h['del']}"
        )
        where.append((1, h["n"], 0))
    for h in hunks:
        if h["first"] is None:
            continue
        ends = [("first: ", h["first"])]
        if h["last"] is not h["first"]:
            ends.append(("last:  ", h["last"]))
        for k, (label, line) in enumerate(ends, start=1):
            parents[len(optional)] = header_at[h["n"]]
            optional.append(f"  {label}{_clip(line, 160)}")
            where.append((1, h["n"], k))

    def in_diff_order(pairs: list[tuple[int, str]]) -> list[str]:
        shown = sorted(pairs[1:], key=lambda p: where[p[0] - 1])
        # What the budget left out is counted, so a partial listing never reads as whole.
        listed = [where[i - 1] for i, _ in shown if where[i - 1][2] == 0]
        left = [
            f"{total - sum(1 for w in listed if w[0] == kind)} of {total} {what}"
            for kind, total, what in ((0, len(files), "file(s)"), (1, len(hunks), "hunk(s)"))
            if sum(1 for w in listed if w[0] == kind) < total
        ]
        note = [f"[not listed: {', '.join(left)}]"] if left else []
        return [pairs[0][1], *[ln for _, ln in shown], *note]

    return fit_lines(head, optional, budget, counter, order=in_diff_order, parents=parents)


def _shape(value: Any) -> str:
    """A value's type and size, one word or two: object{3}, array[120], string(45), int."""
    if isinstance(value, dict):
        return f"object{{{len(value)}}}"
    if isinstance(value, list):
        return f"array[{len(value)}]"
    if isinstance(value, str):
        return f"string({len(value)})"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "number"
    return "null"


def _key_path(path: str, key: str) -> str:
    return (
        f"{path}.{key}"
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key)
        else (f"{path}[{json.dumps(key, ensure_ascii=False)}]")
    )


def summarise_json(text: str, budget: int, counter: Counter) -> str:
    """Breadth-first: each value's path, type and size; objects' keys; arrays' first item."""
    try:
        root = json.loads(text)
    except (ValueError, RecursionError) as exc:  # too deep to parse is not JSON here
        raise RunError(f"the payload is not JSON: {exc}", code="SUMMARY_KIND_MISMATCH") from exc
    head = [f"json: {len(text):,} characters, root {_shape(root)}"]
    optional: list[str] = []
    values: list[str] = []  # sample scalar values, shown after the whole structure
    queue: deque[tuple[str, Any]] = deque([("$", root)])
    described = 0
    while queue and described < _JSON_NODES:
        path, value = queue.popleft()
        described += 1
        if isinstance(value, dict):
            keys = list(value)
            shown = ", ".join(f"{k}: {_shape(value[k])}" for k in keys[:12])
            more = f", … {len(keys) - 12} more keys" if len(keys) > 12 else ""
            optional.append(f"{path}: object{{{len(keys)}}} {{{_clip(shown, 300)}{more}}}")
            for k in keys[:12]:
                if isinstance(value[k], (dict, list)):
                    queue.append((_key_path(path, str(k)), value[k]))
                else:
                    shown = _clip(json.dumps(value[k], ensure_ascii=False), 80)
                    values.append(f"{_key_path(path, str(k))} = {shown}")
        elif isinstance(value, list):
            kinds = sorted(
                {_shape(v).split("{")[0].split("[")[0].split("(")[0] for v in value[:50]}
            )
            optional.append(f"{path}: array[{len(value)}] of {'|'.join(kinds) or 'nothing'}")
            if value and isinstance(value[0], (dict, list)):
                queue.append((f"{path}[0]", value[0]))
                if len(value) > 1:  # the last item too: arrays are often sorted or appended
                    queue.append((f"{path}[{len(value) - 1}]", value[-1]))
            elif value:
                optional.append(
                    f"{path}[0] = {_clip(json.dumps(value[0], ensure_ascii=False), 80)}"
                )
    return fit_lines(head, optional + values, budget, counter)


def summarise_log(text: str, budget: int, counter: Counter) -> str:
    """Error and warning lines first (numbered), then the head and the tail of the log."""
    lines = text.split("\n")
    if lines[-1] == "":  # a final newline ends the last line; it starts none
        lines.pop()
    flagged = [f"{n}: {_clip(ln)}" for n, ln in enumerate(lines, start=1) if _LOG_LEVEL.search(ln)]
    head = [f"log: {len(lines):,} lines, {len(flagged)} error/warning line(s)"]
    optional = flagged[:200]
    ends: list[str] = []
    for i in range(min(20, len(lines))):
        ends.append(f"{i + 1}: {_clip(lines[i])}")
        j = len(lines) - 1 - i
        if j > i:
            ends.append(f"{j + 1}: {_clip(lines[j])}")
    optional += [ln for ln in ends if ln not in set(flagged[:200])]

    def by_line(pairs: list[tuple[int, str]]) -> list[str]:
        first, rest = pairs[0][1], pairs[1:]
        return [first, *sorted({ln for _, ln in rest}, key=lambda s: int(s.split(":", 1)[0]))]

    return fit_lines(head, optional, budget, counter, order=by_line)


def summarise_markdown(text: str, budget: int, counter: Counter) -> str:
    """The headings outline with line numbers, shallow levels first when it must be cut."""
    outline: list[tuple[int, int, str]] = []
    fenced = False
    for number, line in enumerate(text.split("\n"), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if m:
            outline.append((len(m.group(1)), number, _clip(m.group(2), 120)))
    head = [f"markdown: {line_count(text):,} lines, {len(outline)} heading(s); outline:"]
    ranked = sorted(outline, key=lambda h: (h[0], h[1]))
    optional = [f"{n}: {'  ' * (lvl - 1)}{'#' * lvl} {title}" for lvl, n, title in ranked]

    def by_line(pairs: list[tuple[int, str]]) -> list[str]:
        first, rest = pairs[0][1], [ln for _, ln in pairs[1:]]
        return [first, *sorted(rest, key=lambda s: int(s.split(":", 1)[0]))]

    return fit_lines(head, optional, budget, counter, order=by_line)


register("text", summarise_text)
register("diff", summarise_diff)
register("json", summarise_json)
register("log", summarise_log)
register("markdown", summarise_markdown)
