r"""Text that is not valid Unicode is refused where it enters, naming where and the position.

A Python string can hold a lone surrogate (U+D800-U+DFFF): JSON's `"\ud800"` decodes to
one, and so does an undecodable byte of a command-line argument (Python reads argv with
`surrogateescape`: byte 0xFF becomes U+DCFF). No UTF-8 text can hold it, so it fails
later and far away: when a part is counted or summarised, when a run is printed as JSON,
when a store writes it. The policy (docs/guarantees.md) is one: refuse it at the boundary
with a coded error that names the input, field or file and the position; never replace
it silently. The boundaries: `--input`/`--inputs` and the embedding API's inputs
(INPUT_INVALID_TEXT), model replies (MODEL_PROVIDER_ERROR), indexed files (reported as not
indexed), a tool's arguments (answered to the model).
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_at(text: str) -> int:
    """Index of the first lone surrogate in text, or -1 (a valid string's is -1)."""
    if text.isascii():
        return -1
    found = _SURROGATE.search(text)
    return -1 if found is None else found.start()


def describe(text: str, index: int, *, before: int = 0) -> str:
    """`a lone surrogate U+D800 at character 4` for the surrogate at text[index] (counted
    from `before` characters earlier: a piece of a longer text)."""
    return f"a lone surrogate U+{ord(text[index]):04X} at character {before + index}"


def invalid_text(value: Any, path: str = "") -> str | None:
    """Where the first string of JSON-like data (keys included) is not valid Unicode, or None.

    The answer reads `at ['a'][0]: a lone surrogate U+D800 at character 4` (no path for a
    bare string). Nesting is walked with an explicit stack: deep data is no RecursionError.
    """
    # (item, its container's path, its key or index): a path is spelt out only for a
    # container or a bad string, not for every string and number (this runs on every write).
    stack: list[tuple[Any, str, Any]] = [(value, path, _TOP)]
    while stack:
        item, outer, key = stack.pop()
        if isinstance(item, str):
            index = surrogate_at(item)
            if index >= 0:
                where = _path(outer, key)
                return (f"at {where}: " if where else "") + describe(item, index)
        elif isinstance(item, dict):
            where = _path(outer, key)
            pending = []
            for name, inner in item.items():
                if isinstance(name, str) and surrogate_at(name) >= 0:
                    return f"a key at {where or 'the top'}: {describe(name, surrogate_at(name))}"
                if _may_hold(inner):
                    pending.append((inner, where, name))
            stack.extend(reversed(pending))
        elif isinstance(item, list | tuple):
            where = _path(outer, key)
            stack.extend(
                reversed([(inner, where, i) for i, inner in enumerate(item) if _may_hold(inner)])
            )
    return None


_TOP = object()  # the key of the value invalid_text was given


def _may_hold(item: Any) -> bool:
    """Whether item may hold a lone surrogate (an ASCII string or a number cannot)."""
    if type(item) is str:
        return not item.isascii()
    return isinstance(item, str | dict | list | tuple)


def _path(outer: str, key: Any) -> str:
    return outer if key is _TOP else f"{outer}[{key!r}]"


def undecodable_bytes(text: str) -> str | None:
    """For a command-line argument (read with surrogateescape): the first byte that is not
    UTF-8, as `byte 0xFF at byte 3`, or None when text holds none."""
    index = surrogate_at(text)
    if index < 0:
        return None
    code = ord(text[index])
    if not 0xDC80 <= code <= 0xDCFF:
        return None  # a surrogate of another origin: described as one
    offset = len(text[:index].encode("utf-8", "surrogateescape"))
    return f"byte 0x{code - 0xDC00:02X} at byte {offset} is not UTF-8"
