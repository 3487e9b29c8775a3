"""Large strings of a run's inputs and variables stored once, by content (issue 25 item 9).

A `run_inputs` or `run_vars` row holds the JSON text of a value. A string of BIG
characters or more inside it is not written into that text: it is stored once in the
run store's content-addressed chunks (the `originals` tables, keyed by the sha256 of its
UTF-8, shared with the pointers' originals) and the row holds a small reference.

A row with references starts with PREFIX, which no `json.dumps` text starts with (those
start with one of `{["-0-9tfnNI`), so a row without it is plain JSON, read as before,
and every row written before this (m013) still is. Inside a row with the prefix, a
reference is the object `{REF: [sha256, chars]}`; a value's own object that has the key
REF or ESC is written as `{ESC: {...}}`, so no user object is ever read as a reference.
A row with no large string is written exactly as before (same text, same digest).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

BIG = 65_536  # characters: a string this long or longer is stored by content
PREFIX = "blobs:"
REF = "\u0000blob"
ESC = "\u0000esc"
_STEP = 1 << 20  # characters hashed at a time: no whole encoded copy


def sha256_of(text: str) -> str:
    """The sha256 of text's UTF-8, a megabyte at a time (a pointer's original has the same)."""
    digest = hashlib.sha256()
    for at in range(0, len(text), _STEP):
        digest.update(text[at : at + _STEP].encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _has_big(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) >= BIG
    if isinstance(value, dict):
        return any(_has_big(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_big(v) for v in value)
    return False


def dumps(value: Any, *, sort_keys: bool = False) -> tuple[str, dict[str, str]]:
    """(row text, {sha256: text} of the large strings it references, none when it has none)."""
    if not _has_big(value):
        return json.dumps(value, sort_keys=sort_keys), {}
    found: dict[str, str] = {}
    seen: dict[int, str] = {}  # id of a string already hashed -> its sha256

    def enc(v: Any) -> Any:
        if isinstance(v, str):
            if len(v) < BIG:
                return v
            sha = seen.get(id(v))
            if sha is None:
                sha = seen[id(v)] = sha256_of(v)
                found[sha] = v
            return {REF: [sha, len(v)]}
        if isinstance(v, dict):
            out = {k: enc(x) for k, x in v.items()}
            return {ESC: out} if (REF in v or ESC in v) else out
        if isinstance(v, (list, tuple)):
            return [enc(x) for x in v]
        return v

    return PREFIX + json.dumps(enc(value), sort_keys=sort_keys), found


def refs(text: str) -> set[str]:
    """The sha256 of every large string a row text references."""
    if not text.startswith(PREFIX):
        return set()
    out: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            if len(v) == 1 and REF in v:
                out.add(str(v[REF][0]))
                return
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(json.loads(text[len(PREFIX) :]))
    return out


def loads(text: str, blob: Callable[[str, int], str]) -> Any:
    """A row text's value; blob(sha256, chars) reads a referenced string (checked).

    A reference that is not a [sha256, chars] pair is ValueError (a damaged row).
    """
    if not text.startswith(PREFIX):
        return json.loads(text)

    def dec(v: Any) -> Any:
        if isinstance(v, dict):
            if len(v) == 1 and REF in v:
                ref = v[REF]
                if not (
                    isinstance(ref, list)
                    and len(ref) == 2
                    and isinstance(ref[0], str)
                    and isinstance(ref[1], int)
                ):
                    raise ValueError(f"a stored value's reference is not one: {ref!r}")
                return blob(ref[0], ref[1])
            if len(v) == 1 and ESC in v and isinstance(v[ESC], dict):
                return {k: dec(x) for k, x in v[ESC].items()}
            return {k: dec(x) for k, x in v.items()}
        if isinstance(v, list):
            return [dec(x) for x in v]
        return v

    return dec(json.loads(text[len(PREFIX) :]))
