"""The one tolerant reader of model replies that should be JSON.

Used by `call_model` (`json: true`), `json_decision_router`, `inbox_dispatcher`,
`search_nodes` and `repeat_query_guard`. The rules, in order (docs/actions/call_model.md):

1. A reply that is strict JSON is taken as it is (any JSON value).
2. Reasoning blocks are dropped: `<think>...</think>` (also `<thinking>`, `<reasoning>`),
   everything before a closing tag whose opening tag the chat template sent, and an
   unclosed block to the end of the reply (an unfinished thought is no answer).
3. Code fences (```json ... ```) and prose around the object are passed over.
4. The first balanced `{...}` that reads as an object wins: braces inside strings and
   comments do not count. An object that never closes (a reply cut off) is no object.
5. That span is read strictly, else repaired with the maintained `json-repair` library:
   Python literals (True, False, None), single quotes, bare keys, `//` and `/* */`
   comments, trailing commas, missing commas. The result must be a JSON object with
   finite numbers, or the reply does not parse.

`json-repair` alone is not used on the whole reply: given two objects it returns a list
(or keeps the last), and it would turn a reasoning block into data.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

_BLOCK = re.compile(r"<(think|thinking|reasoning)\b[^>]*>.*?</\1\s*>", re.I | re.S)
_OPEN = re.compile(r"<(?:think|thinking|reasoning)\b[^>]*>", re.I)
_CLOSE = re.compile(r"</(?:think|thinking|reasoning)\s*>", re.I)


@dataclass(frozen=True)
class Reply:
    """What a reply parsed to: `ok`, the value, what had to be done, or why it failed."""

    ok: bool
    value: Any = None
    notes: tuple[str, ...] = ()  # "think", "fence", "extracted", "repaired"
    error: str = ""


def strip_reasoning(text: str) -> tuple[str, bool]:
    """The reply without reasoning blocks, and whether any was removed."""
    out = _BLOCK.sub("", text)
    closes = list(_CLOSE.finditer(out))
    if closes:  # the template opened the block, the model only closed it
        out = out[closes[-1].end() :]
    opened = _OPEN.search(out)
    if opened:  # never closed: the rest is unfinished reasoning
        out = out[: opened.start()]
    return out, out != text


def _skip_string(text: str, i: int, quote: str) -> int:
    """Index just past the string starting at text[i] (or len(text) if it never ends)."""
    j = i + 1
    n = len(text)
    while j < n:
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == quote:
            return j + 1
        if quote == "'" and ch == "\n":  # an apostrophe in prose, not a string
            return i + 1
        j += 1
    return n if quote == '"' else i + 1


def _skip_comment(text: str, i: int) -> int:
    """Index just past a // or /* */ comment starting at text[i], or i when there is none."""
    if text.startswith("//", i):
        end = text.find("\n", i)
        return len(text) if end == -1 else end + 1
    if text.startswith("/*", i):
        end = text.find("*/", i + 2)
        return len(text) if end == -1 else end + 2
    return i


def balanced_objects(text: str) -> list[str]:
    """Every top-level balanced `{...}` span, in order; strings and comments are skipped."""
    spans: list[str] = []
    i, n = 0, len(text)
    while i < n:
        start = text.find("{", i)
        if start == -1:
            break
        depth, j, prev = 0, start, "{"
        end = -1
        while j < n:
            ch = text[j]
            if ch == '"' or (ch == "'" and prev in "{[,:"):
                j = _skip_string(text, j, ch)
                prev = "v"
                continue
            skipped = _skip_comment(text, j)
            if skipped != j:
                j = skipped
                continue
            if ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth == 0:
                    end = j + 1
                    break
            if not ch.isspace():
                prev = ch
            j += 1
        if end == -1:
            break  # never closes: no object here or after (its text runs to the end)
        spans.append(text[start:end])
        i = end
    return spans


def _no_constant(name: str) -> Any:
    """NaN and infinities are no JSON: a reply holding them is repaired or refused."""
    raise ValueError(f"{name} is not JSON")


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _object(span: str) -> tuple[dict[str, Any] | None, bool]:
    """The object a span holds, and whether it needed repair."""
    try:
        value = json.loads(span, parse_constant=_no_constant)
        repaired = False
    except ValueError:
        import json_repair  # imported on first need: it costs 0.1 s

        try:
            value = json_repair.loads(span, skip_json_loads=True)
        except Exception:  # the library's own failure is "does not parse", nothing more
            return None, False
        repaired = True
    if not isinstance(value, dict) or not _finite(value):
        return None, False
    return value, repaired


def read(text: Any) -> Reply:
    """Read a model reply by the rules in the module docstring."""
    if isinstance(text, dict | list):
        return Reply(True, text)
    if not isinstance(text, str) or not text.strip():
        return Reply(False, error="the reply is empty")
    try:
        value = json.loads(text, parse_constant=_no_constant)
        if _finite(value):
            return Reply(True, value)
    except ValueError:
        pass
    notes: list[str] = []
    body, thought = strip_reasoning(text)
    if thought:
        notes.append("think")
        if not body.strip():
            return Reply(False, notes=tuple(notes), error="the reply holds only reasoning")
    # Fence markers lie outside any object, so the scan passes over them; a fence inside a
    # JSON string (an answer quoting code) is part of that string, as it should be.
    spans = balanced_objects(body)
    for span in spans:
        value, repaired = _object(span)
        if value is None:
            continue
        rest = body.replace(span, "", 1)
        if "```" in rest:
            notes.append("fence")
        if rest.replace("```json", "").replace("```", "").strip():
            notes.append("extracted")
        if repaired:
            notes.append("repaired")
        return Reply(True, value, tuple(notes))
    if not spans and "{" in body:
        return Reply(False, notes=tuple(notes), error="a JSON object that never closes")
    return Reply(False, notes=tuple(notes), error="no JSON object")


def parse(text: Any) -> Any:
    """The JSON value in a reply, or None when nothing parses. Dicts and lists pass through."""
    reply = read(text)
    return reply.value if reply.ok else None


def parse_object(text: Any) -> dict[str, Any] | None:
    """Like parse, but only a JSON object counts."""
    value = parse(text)
    return value if isinstance(value, dict) else None
