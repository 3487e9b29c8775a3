"""Reading `--inputs FILE` and `--input NAME=VALUE` within a size and a nesting limit.

The limits hold before anything large is in memory: the file is checked by `stat` and
read a megabyte at a time up to the limit (a FIFO or `/dev/zero` stops at the limit too;
runtime/cli/_json_stream.py, which holds a large string value about once), and nesting is
counted before `json.loads` sees a nested value, which would otherwise recurse once per
level and end in a RecursionError.

Text that is not valid Unicode is refused here with INPUT_INVALID_TEXT naming the input
and the position (runtime/contract/text.py): a byte of an `--input` value or `--inputs`
file that is not UTF-8, or a lone surrogate a JSON escape decodes to (`"\\ud800"`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import click

from runtime.contract.text import invalid_text, undecodable_bytes
from runtime.errors import InputError

DEFAULT_MAX_BYTES = 1 << 20  # 1 MiB for the file and every --input value together
DEFAULT_MAX_DEPTH = 64  # nested arrays and objects
MAX_BYTES_ENV = "RUNTIME_MAX_INPUT_BYTES"
MAX_DEPTH_ENV = "RUNTIME_MAX_INPUT_DEPTH"

# A JSON string, escapes included; an unclosed one runs to the end, so no match is ever
# retried. Brackets inside strings do not nest. Possessive: a string with millions of
# escapes would otherwise keep a backtracking point for each (266 MiB for a 200 MB input).
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_SAME_BRACKETS = str.maketrans("{}", "[]")


def json_depth(text: str, limit: int) -> int:
    """How deeply arrays and objects nest in a JSON text (0 for a scalar); exact up to
    limit, and some number above limit for a deeper text.

    Linear passes in C, not one Python step per character: strings and everything but
    brackets are dropped, then each pass removes the innermost level (every `[]`), at most
    limit + 1 passes. Unclosed brackets count as levels.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text)).translate(_SAME_BRACKETS)
    if "[" * (limit + 1) in brackets:  # the common bomb, `[[[[...`, without any pass
        return limit + 1
    depth = 0
    while depth <= limit and "[]" in brackets:
        brackets = brackets.replace("[]", "")
        depth += 1
        if "[" * (limit + 1 - depth) in brackets:  # what is left nests too deep already
            return limit + 1
    return depth + brackets.count("[")


def _too_large(what: str, size: int | str, limit: int) -> InputError:
    return InputError(
        f"{what} is {size} bytes, over the {limit}-byte input limit", code="INPUT_TOO_LARGE"
    )


def _not_text(what: str, reason: str, kind: str = "valid Unicode") -> InputError:
    return InputError(f"{what} is not {kind} text: {reason}", code="INPUT_INVALID_TEXT")


def _checked(value: Any, what: str) -> Any:
    """value, unless a string in it (keys too) holds a lone surrogate: INPUT_INVALID_TEXT."""
    problem = invalid_text(value)
    if problem is not None:
        raise _not_text(what, problem)
    return value


def _loads(text: str, what: str, max_depth: int) -> Any:
    if json_depth(text, max_depth) > max_depth:
        raise _too_deep(what, max_depth)
    return json.loads(text)


def _too_deep(what: str, max_depth: int) -> InputError:
    return InputError(
        f"{what} nests arrays and objects more than {max_depth} levels deep "
        "(the input depth limit)",
        code="INPUT_TOO_DEEP",
    )


def _read_inputs_file(path: str, max_bytes: int, max_depth: int) -> tuple[dict[str, Any], int]:
    """The file's object and its size in bytes; streamed, so a large string value is in
    memory about once while it is read (runtime/cli/_json_stream.py)."""
    from runtime.cli import _json_stream as js

    what = f"--inputs {path}"
    size = os.stat(path).st_size
    if size > max_bytes:  # a regular file says its size: refused before any read
        raise _too_large(what, size, max_bytes)
    try:
        with open(path, "rb") as fh:
            data, used = js.read_object(fh, max_bytes, max_depth)
    except js.TooLarge as exc:
        raise _too_large(what, str(exc), max_bytes) from exc
    except js.NotUtf8 as exc:
        raise _not_text(what, str(exc), "UTF-8") from exc
    except js.TooDeep as exc:
        raise _too_deep(what, max_depth) from exc
    except js.JsonStreamError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--inputs") from exc
    if isinstance(data, str):  # not an object: refused below, as json.loads reads it
        try:
            data = _loads(data, what, max_depth)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--inputs") from exc
        if not isinstance(data, dict):
            raise click.BadParameter("must hold a JSON object", param_hint="--inputs")
    return _checked(data, what), used


def parse_inputs(
    pairs: tuple[str, ...],
    inputs_file: str | None,
    declared: Mapping[str, Any] | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> dict[str, Any]:
    """The input variables from an --inputs file and NAME=VALUE pairs (pairs win)."""
    values: dict[str, Any] = {}
    used = 0
    if inputs_file:
        data, used = _read_inputs_file(inputs_file, max_bytes, max_depth)
        values.update(data)
    for pair in pairs:
        name, sep, raw_value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--input")
        for part in (name, raw_value):
            # Python reads argv with surrogateescape: a byte that is not UTF-8 is a surrogate.
            bad = undecodable_bytes(part)
            if bad is not None:
                raise _not_text(f"--input {name!r}", bad, "UTF-8")
            _checked(part, f"--input {name!r}")
        used += len(raw_value.encode("utf-8", "surrogatepass"))
        if used > max_bytes:
            raise _too_large(f"--input {name} (with the inputs before it)", used, max_bytes)
        spec = (declared or {}).get(name)
        if spec is not None and spec.type == "string":
            values[name] = raw_value  # a declared string stays text, even when it looks like JSON
            continue
        try:
            values[name] = _loads(raw_value, f"--input {name}", max_depth)
        except ValueError:
            values[name] = raw_value  # not JSON: the text itself
        _checked(values[name], f"--input {name!r}")
    return values
