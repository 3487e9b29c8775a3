"""Citations in a model's answer, checked against what the model was shown (issue 29).

Two pure functions, used by call_model's `shown_to` and the verify_answer action:

- `shown_record(messages)`: what a model call was given that an answer may cite, read
  from the messages really sent (every tool round included): each evidence block's node
  id and path (user and tool messages only: the model's own turns are not evidence),
  each pointer (`[ELIDED ptr-...`) with what it stands for, ids in JSON tool results.
  Bounded: at most `MAX_SHOWN` items (the rest counted in `omitted`).
- `verify(answer, shown)`: the verdict `{ok, unsupported, unknown_citations,
  unnamed_summaries, citations}` (docs/actions/verify_answer.md says what each means).

What counts as a citation (`citations_in`): a bracketed or back-quoted node id
(`[repo::snapshot::kind::name]`, three `::` at least), a pointer (`ptr-` and 16 hex
digits, optionally followed by a slice), a memory id (`[memory:ID]`, `[experience:ID]`,
`[value:ID]`), a path with a line (`src/Orders.cs:42`, bracketed or not), or any
bracketed text equal to an id or path that was shown. `[1]`, `[x]` and Markdown link
texts are not citations.

What counts as a claim (`is_claim`): a sentence that names a code identifier (two-hump
CamelCase, snake_case, a dotted name, `name(`, back-quoted code, a path with an
extension) or asserts behaviour (a verb such as writes, reads, calls, returns, inserts,
throws, `BEHAVIOUR_VERBS`). Never a claim: a question, a greeting or thanks, an
abstention (`I could not find`, `No evidence`, `There is no`, `Nothing`), the offline
responder's notice, an echoed `Question:` line, a quote (`>` lines, fenced code), a
heading, a line holding only citations. A claim is supported when its sentence holds a
citation, or it continues (indented, or a `=`/`>` line) a list item whose first line
holds one.

All patterns are linear in the text (bounded spans, no nested quantifiers): answers and
prompts of megabytes are read in one pass.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

VERSION = 1
MAX_SHOWN = 5000  # items kept in a shown record
MAX_LISTED = 200  # entries kept in each list of a verdict (the rest counted)
CLAIM_CHARS = 2000
MAX_QUOTED = 200  # characters of a sentence or citation quoted in a verdict

_POINTER = re.compile(r"ptr-[0-9a-f]{16}")
# A pointer block names its original: `[ELIDED ptr-X: kind, N chars` (a part or a block's
# text) or `[ELIDED ptr-X role, N chars` (a compacted thread turn).
_ELIDED_NAMED = re.compile(r"\[ELIDED (ptr-[0-9a-f]{16})(?:: (\w+)| (\w+)), ([0-9,]{1,20}) chars")
_ELIDED_ANY = re.compile(r"\[ELIDED\b")
_BRACKET = re.compile(r"\[([^\[\]\n]{1,400})\](\()?")
_BACKTICK = re.compile(r"`([^`\n]{1,400})`")
_MEMORY_ID = re.compile(r"(?:memory|experience|value):[^\s\[\],;]{1,200}")
_LINES = re.compile(r"[0-9]{1,9}(?:-[0-9]{1,9})?")
_TOKEN = re.compile(r"[^\s\[\]`()<>\"']+")
# A bare pointer and the slice read through it: `ptr-X lines 1-20`, `ptr-X hunk 2`, `ptr-X $.a`.
_SLICED_POINTER = re.compile(
    r"ptr-[0-9a-f]{16}(?: (?:lines? [0-9]{1,9}(?:-[0-9]{1,9})?|hunk [0-9]{1,9}|whole|\$[^\s,;)]{0,200}))?"
)
_PIECE_SPLIT = re.compile(r"\s*[;,]\s+|\s*;\s*")
_TRAIL = ".,;:!?)'\""

_VERBS_TEXT = (
    "write writes wrote written read reads call calls called invoke invokes invoked "
    "execute executes executed run runs return returns returned insert inserts inserted "
    "update updates updated delete deletes deleted remove removes removed select selects "
    "selected query queries queried join joins store stores stored save saves saved load "
    "loads loaded throw throws thrown raise raises raised validate validates validated "
    "check checks checked implement implements implemented inherit inherits inherited "
    "extend extends extended override overrides overridden depend depends depended "
    "create creates created send sends sent publish publishes published handle handles "
    "handled map maps mapped convert converts converted set sets compute computes computed "
    "calculate calculates calculated retry retries retried lock locks locked commit commits "
    "committed roll rolls rolled trigger triggers triggered fire fires fired reference "
    "references referenced contain contains contained define defines defined declare "
    "declares declared use uses used"
)
BEHAVIOUR_VERBS = tuple(_VERBS_TEXT.split(" "))
_VERB = re.compile(
    r"\b(?:" + "|".join(sorted(set(BEHAVIOUR_VERBS), key=len, reverse=True)) + r")\b"
)
_IDENTIFIER = re.compile(
    r"`[^`\n]{1,400}`"  # back-quoted code
    r"|\b[a-z]{1,60}[A-Z][A-Za-z0-9]{0,60}"  # camelCase
    r"|\b[A-Z][a-z0-9]{1,60}[A-Z][A-Za-z0-9]{0,60}"  # PascalCase with two humps
    r"|\b[A-Za-z][A-Za-z0-9]{0,60}_[A-Za-z0-9_]{1,60}"  # snake_case, usp_X
    r"|\b[A-Za-z_][A-Za-z0-9_]{1,60}\.[A-Za-z_][A-Za-z0-9_]{1,60}"  # dotted: dbo.Orders
    r"|\b[A-Za-z_][A-Za-z0-9_]{0,60}\(\)?"  # a call: Name( or Name()
    r"|\b[\w-]{1,60}/[\w/-]{0,120}\.[A-Za-z0-9]{1,8}\b"  # a path with an extension
)
_EXEMPT = re.compile(
    r"^(?:no language model was used|no evidence|nothing\b|there is no|there are no|"
    r"i (?:could|can|did|do)(?:n't| not| no)|i'm sorry|i am sorry|sorry\b|i don't know|"
    r"i do not know|unknown\b|hello\b|hi\b|hey\b|thanks?\b|thank you|you're welcome|"
    r"question\s*:|sources?\s*:|read through rehydrate\s*:|rehydrate failed\s*:|"
    r"most relevant evidence\s*:)",
    re.I,
)
_LIST_ITEM = re.compile(r"^(\s*)(?:[-*+•]|\d{1,3}[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


def _clip(text: str) -> str:
    return text if len(text) <= MAX_QUOTED else text[:MAX_QUOTED] + f"… [{len(text):,} chars]"


# --- what a call was shown --------------------------------------------------------------


def shown_record(messages: Sequence[Mapping[str, Any]], step_id: str = "") -> dict[str, Any]:
    """What the model was given that an answer may cite (see the module docstring)."""
    from runtime.models.evidence import split_prompt

    items: dict[str, dict[str, Any]] = {}
    pointers: dict[str, dict[str, Any]] = {}
    unnamed: list[dict[str, Any]] = []
    omitted = 0

    def add(item_id: str, **data: Any) -> None:
        nonlocal omitted
        if not item_id or item_id in items:
            return
        if len(items) >= MAX_SHOWN:
            omitted += 1
            return
        items[item_id] = {"id": item_id, **{k: v for k, v in data.items() if v}}

    for index, m in enumerate(messages):
        if m.get("role") not in ("user", "tool"):
            continue
        content = m.get("content")
        if not isinstance(content, str) or not content:
            continue
        for block in split_prompt(content).blocks:
            if block.id:
                add(block.id, path=block.path, kind=_kind_of(block.id), summarised=block.compact)
            for hit in _ELIDED_NAMED.finditer(block.text):
                pointers.setdefault(hit.group(1), {"id": hit.group(1), "of": block.id or None})
        for hit in _ELIDED_NAMED.finditer(content):
            pointers.setdefault(
                hit.group(1),
                {"id": hit.group(1), "of": hit.group(3) or None, "chars": hit.group(4)},
            )
        named = {h.start() for h in _ELIDED_NAMED.finditer(content)}
        for hit in _ELIDED_ANY.finditer(content):
            if hit.start() not in named and len(unnamed) < MAX_LISTED:
                line = content.count("\n", 0, hit.start()) + 1
                unnamed.append(
                    {"message": index, "line": line, "text": _clip(content[hit.start() :][:80])}
                )
        if m.get("role") == "tool":
            for item_id, path in _json_ids(content):
                add(item_id, path=path, kind=_kind_of(item_id))
    for p in pointers.values():
        p.pop("chars", None)
    return {
        "version": VERSION,
        "step_id": step_id,
        "items": list(items.values()),
        "pointers": sorted(pointers.values(), key=lambda p: p["id"]),
        "unnamed_summaries": unnamed,
        "omitted": omitted,
    }


def _kind_of(item_id: str) -> str:
    if _POINTER.fullmatch(item_id):
        return "pointer"
    if _MEMORY_ID.fullmatch(item_id):
        return item_id.split(":", 1)[0]
    return "node" if "::" in item_id else "other"


def _json_ids(content: str) -> Iterable[tuple[str, str]]:
    """Ids (and paths) of the records in a JSON tool result: a list, or {results|nodes: [...]}."""
    text = content.lstrip()
    if not text.startswith(("[", "{")) or len(text) > 4_000_000:
        return []
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return []
    if isinstance(value, Mapping):
        value = next(
            (
                value[k]
                for k in ("results", "nodes", "items", "hits")
                if isinstance(value.get(k), list)
            ),
            [value],
        )
    if not isinstance(value, list):
        return []
    return [
        (str(v["id"]), str(v["path"]) if isinstance(v.get("path"), str) else "")
        for v in value[:MAX_SHOWN]
        if isinstance(v, Mapping) and isinstance(v.get("id"), str)
    ]


def record_problems(record: Any) -> str | None:
    """Why a value is not a shown record (None when it is one)."""
    if not isinstance(record, Mapping):
        return f"a shown record is a mapping, not {type(record).__name__}"
    for key in ("items", "pointers"):
        value = record.get(key)
        if not isinstance(value, list) or not all(
            isinstance(v, Mapping) and isinstance(v.get("id"), str) for v in value
        ):
            return f"a shown record's {key!r} is a list of {{id, ...}} mappings"
    return None


# --- citations and claims in an answer ---------------------------------------------------


def _path_line(piece: str) -> tuple[str, int, int | None] | None:
    """(path, first line, last line) of `path/file.ext:12` or `...:12-20`; None otherwise."""
    path, colon, lines = piece.rpartition(":")
    if not colon or not _LINES.fullmatch(lines) or not path or len(path) > 600:
        return None
    if "//" in path or any(ch.isspace() for ch in path):  # a URL is no path
        return None
    name = path.rsplit("/", 1)[-1]
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or not (1 <= len(ext) <= 8) or not ext.isalnum() or not ext.isascii():
        return None
    first, _, last = lines.partition("-")
    return path, int(first), int(last) if last else None


def _classify(piece: str) -> str | None:
    """The kind of citation a piece of text is, or None when it is no citation."""
    pointer = _POINTER.match(piece)
    if pointer and (len(piece) == 20 or piece[20] == " "):
        return "pointer"
    if _MEMORY_ID.fullmatch(piece):
        return "memory"
    if piece.count("::") >= 3 and "\n" not in piece and len(piece) <= 600:
        return "node"
    if _path_line(piece) is not None:
        return "path_line"
    return None


def citations_in(text: str, known: frozenset[str] = frozenset()) -> list[tuple[int, str, str]]:
    """(offset, kind, citation) of each citation in text, in order (see the module docstring).

    `known`: ids and paths that were shown; bracketed text equal to one is a citation too.
    """
    out: list[tuple[int, str, str]] = []
    taken: list[int] = []  # start, end, start, end... of the spans read as citations, in order
    for m in _BRACKET.finditer(text):
        if m.group(2):  # [text](url): a Markdown link, not a citation
            continue
        inner = m.group(1).strip()
        found: list[tuple[int, str, str]] = []
        if inner in known:
            found.append((m.start(), _classify(inner) or "id", inner))
        else:
            for piece in _PIECE_SPLIT.split(inner):
                piece = piece.strip()
                kind = "id" if piece in known else _classify(piece)
                if kind is not None:
                    found.append((m.start(), kind, piece))
        if found:
            out += found
            taken += (m.start(), m.end())
    ticks: list[int] = []
    for m in _BACKTICK.finditer(text):
        inner = m.group(1).strip()
        kind = _classify(inner)
        if _inside(taken, m.start()):
            continue
        if kind is not None or inner in known:
            out.append((m.start(), kind or "id", inner))
            ticks += (m.start(), m.end())
    taken = sorted(taken + ticks)
    for m in _SLICED_POINTER.finditer(text):
        if not _inside(taken, m.start()):
            out.append((m.start(), "pointer", m.group(0)))
    for m in _TOKEN.finditer(text):
        if _inside(taken, m.start()) or _POINTER.match(m.group(0)):
            continue
        token = m.group(0).rstrip(_TRAIL)
        if token.count("::") >= 3 and len(token) <= 600:
            out.append((m.start(), "node", token))
        elif ":" in token and _path_line(token) is not None:
            out.append((m.start(), "path_line", token))
    out.sort(key=lambda c: c[0])
    return out


def _inside(spans: list[int], at: int) -> bool:
    """Whether `at` falls in one of the sorted, disjoint [start, end) spans."""
    i = bisect.bisect_right(spans, at)
    return i % 2 == 1


def is_claim(sentence: str) -> bool:
    """Whether a sentence carries a claim that needs a citation (module docstring)."""
    # A sentence is judged by its first CLAIM_CHARS characters: the patterns stay linear.
    text = sentence[:CLAIM_CHARS].strip().lstrip("*_#").strip()
    if not text or text.endswith("?") or _EXEMPT.match(text):
        return False
    return bool(_IDENTIFIER.search(text) or _VERB.search(text.lower()))


def _units(answer: str) -> Iterable[tuple[int, str, bool]]:
    """(line number, text, inherits a citation) of each sentence to judge.

    A list item's first line is judged as its own; its continuation lines (indented under
    it, or `=` lines) inherit the item's citation when the first line holds one. Quotes
    (`>` lines) and fenced code are never judged.
    """
    fenced = False
    item_indent: int | None = None
    item_cited = False
    paragraph: list[tuple[int, str]] = []

    def flush() -> Iterable[tuple[int, str, bool]]:
        for n, sentence in _sentences(paragraph):
            yield n, sentence, False
        paragraph.clear()

    for n, raw in enumerate(answer.splitlines(), start=1):
        line = raw.rstrip()
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            yield from flush()
            fenced = not fenced
            continue
        if fenced or stripped.startswith(">"):
            continue
        if not stripped:
            yield from flush()
            item_indent = None
            continue
        indent = len(line) - len(line.lstrip())
        item = _LIST_ITEM.match(line)
        if item:
            yield from flush()
            item_indent = indent
            body = line[item.end() :]
            item_cited = bool(citations_in(body))
            for sentence in _split(body):
                yield n, sentence, False
            continue
        if item_indent is not None and (indent > item_indent or stripped.startswith("= ")):
            for sentence in _split(stripped.lstrip("= ")):
                yield n, sentence, item_cited
            continue
        item_indent = None
        if stripped.startswith("#"):
            yield from flush()
            continue
        paragraph.append((n, stripped))
    yield from flush()


def _split(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text) if s.strip()]


def _sentences(lines: list[tuple[int, str]]) -> Iterable[tuple[int, str]]:
    """The sentences of a paragraph, each with the line it starts on; a piece holding only
    citations joins the sentence before it (`... calls it. [id]`)."""
    out: list[tuple[int, str]] = []
    for n, line in lines:
        for piece in _split(line):
            cited = citations_in(piece)
            bare = _without(piece, cited) if cited else piece
            for _, _, c in cited[:20]:  # bare citations (a pointer, a path:line) too
                bare = bare.replace(c, "")
            if out and cited and not bare.strip(" []`.,;:()"):
                out[-1] = (out[-1][0], out[-1][1] + " " + piece)
            elif out and not out[-1][1].rstrip().endswith((".", "!", "?", ":")):
                out[-1] = (out[-1][0], out[-1][1] + " " + piece)  # a sentence wrapped
            else:
                out.append((n, piece))
    return out


def verify(answer: str, shown: Mapping[str, Any], exempt: Sequence[str] = ()) -> dict[str, Any]:
    """The verdict on an answer given what its model was shown (module docstring)."""
    items = {str(i["id"]): i for i in shown.get("items") or () if isinstance(i, Mapping)}
    pointers = {str(p["id"]) for p in shown.get("pointers") or () if isinstance(p, Mapping)}
    paths = {str(i.get("path")) for i in items.values() if i.get("path")}
    known = frozenset(items) | frozenset(pointers) | frozenset(paths)
    extra = [re.compile(p) for p in exempt]
    unsupported: list[dict[str, Any]] = []
    unknown: list[dict[str, Any]] = []
    cited: dict[str, int] = {}
    counts = {"unsupported": 0, "unknown_citations": 0, "claims": 0, "sentences": 0}
    seen_unknown: set[tuple[int, str]] = set()
    for n, sentence, inherited in _units(answer):
        counts["sentences"] += 1
        found = citations_in(sentence, known)
        for _, kind, citation in found:
            reason = _unknown(kind, citation, items, pointers, paths)
            if reason is None:
                cited[citation] = cited.get(citation, 0) + 1
                continue
            if (n, citation) in seen_unknown:
                continue
            seen_unknown.add((n, citation))
            counts["unknown_citations"] += 1
            if len(unknown) < MAX_LISTED:
                unknown.append(
                    {"citation": _clip(citation), "kind": kind, "line": n, "reason": reason}
                )
        if any(p.search(sentence) for p in extra) or not is_claim(_without(sentence, found)):
            continue
        counts["claims"] += 1
        if found or inherited:
            continue
        counts["unsupported"] += 1
        if len(unsupported) < MAX_LISTED:
            unsupported.append(
                {
                    "sentence": _clip(sentence.strip()),
                    "line": n,
                    "reason": "claim without a citation",
                }
            )
    unnamed = list(shown.get("unnamed_summaries") or ())
    ok = not counts["unsupported"] and not counts["unknown_citations"] and not unnamed
    return {
        "ok": ok,
        "unsupported": unsupported,
        "unknown_citations": unknown,
        "unnamed_summaries": unnamed,
        "citations": [
            {"citation": _clip(c), "times": t} for c, t in list(cited.items())[:MAX_LISTED]
        ],
        "counts": counts,
        "shown": {
            "items": len(items),
            "pointers": len(pointers),
            "omitted": shown.get("omitted", 0),
        },
    }


def _without(sentence: str, found: list[tuple[int, str, str]]) -> str:
    """The sentence with its bracketed and back-quoted citations taken out (an id is no
    identifier of a claim); one pass over the sentence."""
    if not found:
        return sentence

    def drop(m: re.Match[str]) -> str:
        inner = m.group(1).strip()
        if m.group(0).startswith("`"):
            return " " if _classify(inner) is not None else m.group(0)
        if m.group(2):
            return m.group(0)
        pieces = [p.strip() for p in _PIECE_SPLIT.split(inner)]
        return " " if any(_classify(p) is not None for p in pieces) else m.group(0)

    return _BACKTICK.sub(drop, _BRACKET.sub(drop, sentence))


def _unknown(
    kind: str,
    citation: str,
    items: Mapping[str, Any],
    pointers: set[str],
    paths: set[str],
) -> str | None:
    """Why a citation names nothing shown (None when it names a shown item)."""
    if citation in items:
        return None
    if kind == "pointer":
        pointer = _POINTER.match(citation)
        if pointer and (pointer.group(0) in pointers or pointer.group(0) in items):
            return None
        return "no pointer of that id was shown"
    if kind == "path_line":
        parsed = _path_line(citation)
        path = parsed[0] if parsed else citation
        if path in paths or any(p.endswith("/" + path) for p in paths):
            return None
        return "no evidence of that path was shown"
    if citation in paths:
        return None
    if kind == "memory":
        return "no memory of that id was shown"
    return "no item of that id was shown"
