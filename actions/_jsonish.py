"""Tolerant parsing of model output that should be JSON: code fences, bare keys, single quotes,
trailing commas. Shared by the routers, the dispatcher and the query readers."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_\-]*)\s*:")
_TRAILING = re.compile(r",\s*([}\]])")


def _candidates(text: str) -> list[str]:
    out = [m.group(1) for m in _FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        out.append(text[start : end + 1])
    out.append(text)
    return out


def _single_to_double(text: str) -> str:
    """Swap single-quoted strings for double-quoted ones, leaving double-quoted text alone."""
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif ch == "'":
            j = i + 1
            buf = []
            while j < n and text[j] != "'":
                if text[j] == "\\" and j + 1 < n:
                    buf.append(text[j : j + 2])
                    j += 2
                    continue
                buf.append('\\"' if text[j] == '"' else text[j])
                j += 1
            out.append('"' + "".join(buf) + '"')
            i = j + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def parse(text: Any) -> Any:
    """The JSON value in text, or None when nothing parses. Dicts and lists pass through."""
    if isinstance(text, dict | list):
        return text
    if not isinstance(text, str) or not text.strip():
        return None
    for cand in _candidates(text.strip()):
        for attempt in (
            cand,
            _TRAILING.sub(r"\1", _BARE_KEY.sub(r'\1"\2":', _single_to_double(cand))),
        ):
            try:
                return json.loads(attempt)
            except ValueError:
                continue
    return None


def parse_object(text: Any) -> dict[str, Any] | None:
    """Like parse, but only a JSON object counts."""
    value = parse(text)
    return value if isinstance(value, dict) else None
