"""Canonical JSON bytes for hashing (packs, the ledger), faster where orjson is installed.

Two forms, each defined by what the standard library writes (the reference):
- `sorted_utf8(value)`: sorted keys, no spaces, UTF-8 (`ensure_ascii=False`; lone
  surrogates kept as written): a context pack's body (runtime/context/packs.py).
- `sorted_ascii(value)`: sorted keys, no spaces, ASCII (`\\uXXXX` escapes): ledger entries
  and a model call's prompt hash (runtime/governance/ledger.py).
- `compact_utf8(value)`: keys in their order, no spaces, UTF-8: the pack's prompt hash.

With the optional `fast` extra (orjson) the same bytes come from orjson's encoder, about
ten times faster, whenever they are provably the same; otherwise from `json`. What differs
between the two encoders, and how each difference sends a value to `json`:
- floats under 1e-4 in magnitude (orjson `0.00001`, `1e-7`; json `1e-05`, `1e-07`): the
  output is searched for `0.0000` and for `<digit>e-`;
- NaN and infinities (orjson `null`, json `NaN`): the output read back must equal the value;
- non-ASCII text for `sorted_ascii` (orjson writes UTF-8): the output must be ASCII, and
  hold no DEL (json's ASCII form writes `\u007f`, orjson the byte);
- what orjson refuses (lone surrogates, non-string keys, integers over 64 bits, other
  types) raises, and json decides.
The two searches and the read-back cost about as much as json itself on long texts, so a
list of flat records (messages: string keys; strings, integers, booleans and None as
values, so no float) skips them; other values take them in `sorted_utf8` (a pack) and
`sorted_ascii` (ledger entries: many short fields, where json is slowest); `compact_utf8`
of other values goes to json directly.
Stored hashes never depend on which encoder ran (tests/runtime/test_canonical.py checks
the two differentially, over generated values and every code point).
"""

from __future__ import annotations

import json
from typing import Any

_SORTED_UTF8 = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_SORTED_ASCII = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)
_COMPACT_UTF8 = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)

_UNSET: Any = object()
_orjson: Any = _UNSET  # the module, None when not installed; imported on first use


def _fast() -> Any:
    global _orjson
    if _orjson is _UNSET:
        try:
            import orjson as found
        except ImportError:  # the `fast` extra is optional: json writes the same bytes
            found = None  # type: ignore[assignment]
        _orjson = found
    return _orjson


def use_fast(enabled: bool) -> None:
    """Turn the orjson path on (when installed) or off: the differential tests and
    benchmarks compare both in one process."""
    global _orjson
    _orjson = _UNSET if enabled else None


def reference_sorted_utf8(value: Any) -> bytes:
    """`sorted_utf8` by the standard library alone."""
    return _SORTED_UTF8.encode(value).encode("utf-8", "surrogatepass")


def reference_sorted_ascii(value: Any) -> bytes:
    """`sorted_ascii` by the standard library alone."""
    return _SORTED_ASCII.encode(value).encode()


def reference_compact_utf8(value: Any) -> bytes:
    """`compact_utf8` by the standard library alone."""
    return _COMPACT_UTF8.encode(value).encode("utf-8", "surrogatepass")


def _same(out: bytes, value: Any, orjson: Any) -> bool:
    """Whether orjson's `out` is what json writes for `value` (see the module doc)."""
    if b"0.0000" in out:
        return False
    at = out.find(b"e-")
    while at > 0:
        if 48 <= out[at - 1] <= 57:  # a digit before `e-`: an exponent
            return False
        at = out.find(b"e-", at + 2)
    return bool(orjson.loads(out) == value)


_PLAIN = (str, int, bool, type(None))


def _flat(value: Any) -> bool:
    """A list of dicts with string keys and str, int, bool or None values (no float)."""
    if type(value) is not list:
        return False
    for record in value:
        if type(record) is not dict:
            return False
        for k, v in record.items():
            if type(k) is not str or type(v) not in _PLAIN:
                return False
    return True


def sorted_utf8(value: Any) -> bytes:
    """Canonical JSON: sorted keys, no spaces, UTF-8."""
    orjson = _fast()
    if orjson is not None:
        try:
            out: bytes = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # orjson.JSONEncodeError: a value orjson refuses
            pass
        else:
            if _flat(value) or _same(out, value, orjson):
                return out
    return reference_sorted_utf8(value)


def sorted_ascii(value: Any) -> bytes:
    """Canonical JSON: sorted keys, no spaces, ASCII."""
    orjson = _fast()
    if orjson is not None:
        try:
            out: bytes = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            pass
        else:
            # json's ASCII form escapes DEL (\u007f), which orjson writes as is
            ascii_only = out.isascii() and b"\x7f" not in out
            if ascii_only and (_flat(value) or _same(out, value, orjson)):
                return out
    return reference_sorted_ascii(value)


def compact_utf8(value: Any) -> bytes:
    """JSON with keys in their order, no spaces, UTF-8."""
    orjson = _fast()
    if orjson is not None and _flat(value):
        try:
            return bytes(orjson.dumps(value))
        except TypeError:
            pass
    return reference_compact_utf8(value)
