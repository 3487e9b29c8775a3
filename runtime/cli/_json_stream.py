"""Reading an `--inputs` file's JSON object a megabyte at a time (issue 25 item 9).

`json.loads` needs the whole file as one text and then builds each value beside it: a
200 MB string input held twice at once (the file's text and the value), and decoding
the file's bytes held the bytes and the text at once before that. This reader decodes
the file in chunks and appends each string value's pieces to one growing string, which
CPython extends in place (`s += piece` on a string nothing else refers to: a `realloc`,
which the C library does by remapping pages for large blocks), so a large string input
is in memory about once while it is read.

Only the top-level object is parsed here; its string values are streamed, every other
value (numbers, literals, nested arrays and objects) is collected as text and given to
`json.loads`, so what is accepted is exactly what `json.loads` accepts: the same escapes,
no raw control characters in strings, NaN and Infinity, the last of duplicate keys.
A file that does not start with `{` is returned as text for the caller's `json.loads`
(it is refused anyway: the inputs must be an object).
"""

from __future__ import annotations

import codecs
import json
import re
from typing import IO, Any

CHUNK = 1 << 20
_WS = re.compile(r"[ \t\n\r]*+")
# A run of string content with complete escapes only (possessive: no backtracking).
_RUN = re.compile(r'(?:[^"\\\x00-\x1f]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*+')
_HIGH_TAIL = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}$")
_STRUCTURE = re.compile(r'["\[\]{}]')
_IN_STRING = re.compile(r'["\\]')
_SCALAR_END = re.compile(r"[ \t\n\r,\]}]")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")


class JsonStreamError(ValueError):
    """Not JSON (the message says what and where, as json.loads's do)."""


class TooDeep(ValueError):
    """Arrays and objects nest deeper than the limit."""


class NotUtf8(ValueError):
    """A byte that is not UTF-8: `offset` and `line` say where, `byte` which."""

    def __init__(self, offset: int, line: int, byte: int) -> None:
        super().__init__(f"byte 0x{byte:02X} at byte {offset} (line {line}) is not UTF-8")
        self.offset, self.line, self.byte = offset, line, byte


class TooLarge(ValueError):
    """More bytes than the limit (a pipe or device, whose size stat cannot tell)."""


class _Reader:
    """The file's text a chunk at a time: `buf[pos:]` is what is unread of the chunk."""

    def __init__(self, fh: IO[bytes], limit: int) -> None:
        self.fh, self.limit = fh, limit
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf, self.pos = "", 0
        self.chars_before = 0  # characters before buf
        self.lines_before = 0  # newlines before buf
        self.col_before = 0  # characters after the last newline before buf
        self.bytes_read, self.newline_bytes = 0, 0
        self.eof = False

    def more(self) -> bool:
        """Read the next chunk onto what is unread; False at the end of the file."""
        while not self.eof:
            raw = self.fh.read(min(CHUNK, self.limit + 1 - self.bytes_read) or 1)
            if self.bytes_read + len(raw) > self.limit:
                raise TooLarge(f"more than {self.limit}")
            final = not raw
            pending = self.decoder.getstate()[0]
            try:
                text = self.decoder.decode(raw, final=final)
            except UnicodeDecodeError as exc:
                data = pending + raw
                offset = self.bytes_read - len(pending) + exc.start
                line = self.newline_bytes + data[: exc.start].count(b"\n") + 1
                raise NotUtf8(offset, line, data[exc.start]) from exc
            self.bytes_read += len(raw)
            self.newline_bytes += raw.count(b"\n")
            self.eof = final
            if text:
                self._advance()
                self.buf = self.buf[self.pos :] + text
                self.pos = 0
                return True
        return False

    def _advance(self) -> None:
        """Account for the consumed part of buf before it is dropped."""
        done = self.pos
        newlines = self.buf.count("\n", 0, done)
        if newlines:
            self.lines_before += newlines
            self.col_before = done - self.buf.rfind("\n", 0, done) - 1
        else:
            self.col_before += done
        self.chars_before += done

    def where(self) -> str:
        """`line L column C (char N)` of the current position, as json.loads says it."""
        at = self.pos
        newlines = self.buf.count("\n", 0, at)
        col = at - self.buf.rfind("\n", 0, at) if newlines else self.col_before + at + 1
        line = self.lines_before + newlines + 1
        return f"line {line} column {col} (char {self.chars_before + at})"

    def error(self, what: str) -> JsonStreamError:
        return JsonStreamError(f"{what}: {self.where()}")

    def peek(self) -> str:
        """The next character after JSON whitespace, or "" at the end of the file."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def need(self, n: int) -> str:
        """At least n characters from pos when the file has them (fewer only at its end)."""
        while len(self.buf) - self.pos < n and self.more():
            pass
        return self.buf[self.pos : self.pos + n]


def read_object(fh: IO[bytes], limit: int, max_depth: int) -> tuple[dict[str, Any] | str, int]:
    """The file's top-level JSON object (or its whole text when it is not an object) and
    the number of bytes read."""
    r = _Reader(fh, limit)
    return _object(r, max_depth), r.bytes_read


def _object(r: _Reader, max_depth: int) -> dict[str, Any] | str:
    first = r.peek()
    if first != "{":
        rest = r.buf[r.pos :]
        r.buf, r.pos = "", 0
        while r.more():
            rest += r.buf
            r.buf, r.pos = "", 0
        return rest
    if max_depth < 1:
        raise TooDeep()
    r.pos += 1
    out: dict[str, Any] = {}
    c = r.peek()
    if c == "}":
        r.pos += 1
    else:
        while True:
            if c != '"':
                raise r.error("Expecting property name enclosed in double quotes")
            key = _string(r)
            if r.peek() != ":":
                raise r.error("Expecting ':' delimiter")
            r.pos += 1
            out[key] = _value(r, r.peek(), max_depth - 1)
            c = r.peek()
            if c == ",":
                r.pos += 1
                c = r.peek()
                continue
            if c == "}":
                r.pos += 1
                break
            raise r.error("Expecting ',' delimiter")
    if r.peek() != "":
        raise r.error("Extra data")
    return out


def _string(r: _Reader) -> str:
    """The string starting at pos (its opening quote), decoded; pos after its closing one.

    A run of valid content (escapes complete) is decoded by json.loads, in C; a run is cut
    before a high surrogate's escape at the end of a chunk, whose low half may follow.
    """
    r.pos += 1
    s = ""  # grows in place: nothing else may refer to it until it is returned
    while True:
        start = r.pos
        end = _RUN.match(r.buf, start).end()  # type: ignore[union-attr]
        if len(r.buf) - end < 12 and not r.eof:  # what follows may be the low half
            high = _HIGH_TAIL.search(r.buf, start, end)
            # An escape only after an even number of backslashes (`\\\\ud800` is not one).
            if high is not None and _backslashes_before(r.buf, high.start(), start) % 2 == 0:
                end = high.start()
        if end > start:
            run = r.buf[start:end]
            s += json.loads('"' + run + '"') if "\\" in run else run
            del run
        r.pos = end
        left = len(r.buf) - end
        if (left == 0 or (r.buf[end] == "\\" and left < 12)) and r.more():
            continue
        if left == 0:
            raise r.error("Unterminated string starting at")
        c = r.buf[end]
        if c == '"':
            r.pos += 1
            return s
        if c != "\\":
            raise r.error("Invalid control character at")
        s += _escape(r)  # one that the run did not take: an error, or a surrogate's half


def _backslashes_before(buf: str, at: int, start: int) -> int:
    """How many backslashes stand right before buf[at], not counting before start."""
    n = at
    while n > start and buf[n - 1] == "\\":
        n -= 1
    return at - n


def _escape(r: _Reader) -> str:
    """The character(s) of the escape at pos; pos after it."""
    head = r.need(2)
    if len(head) < 2:
        raise r.error("Unterminated string starting at")
    kind = head[1]
    if kind != "u":
        if kind not in _ESCAPES:
            raise r.error("Invalid \\escape")
        r.pos += 2
        return _ESCAPES[kind]
    text = r.need(12)
    if not _HEX4.fullmatch(text[2:6]):
        raise r.error("Invalid \\uXXXX escape")
    code = int(text[2:6], 16)
    if 0xD800 <= code <= 0xDBFF and text[6:8] == "\\u" and _HEX4.fullmatch(text[8:12]):
        low = int(text[8:12], 16)
        if 0xDC00 <= low <= 0xDFFF:  # a surrogate pair, as json.loads joins it
            r.pos += 12
            return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00))
    r.pos += 6
    return chr(code)  # a lone surrogate stays one: the caller refuses it (INPUT_INVALID_TEXT)


def _value(r: _Reader, c: str, depth_left: int) -> Any:
    """The value starting at pos, whose first character is c."""
    if c == '"':
        return _string(r)
    if c == "":
        raise r.error("Expecting value")
    where = r.where()
    text = _nested(r, depth_left) if c in "[{" else _scalar(r)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise JsonStreamError(f"{exc} (in the value starting at {where})") from exc


def _scalar(r: _Reader) -> str:
    """A number or literal's text: up to the next delimiter."""
    text = ""
    while True:
        found = _SCALAR_END.search(r.buf, r.pos)
        end = found.start() if found else len(r.buf)
        text += r.buf[r.pos : end]
        r.pos = end
        if found or not r.more():
            if not text:
                raise r.error("Expecting value")
            return text


def _nested(r: _Reader, depth_left: int) -> str:
    """An array or object's text, to its matching bracket (strings skipped whole)."""
    text, depth, in_string, escaped = "", 0, False, False
    while True:
        buf, i, n = r.buf, r.pos, len(r.buf)
        while i < n:
            if in_string:
                if escaped:
                    escaped, i = False, i + 1
                    continue
                found = _IN_STRING.search(buf, i)
                if found is None:
                    i = n
                    break
                i = found.start() + 1
                if buf[i - 1] == "\\":
                    escaped = True
                else:
                    in_string = False
                continue
            found = _STRUCTURE.search(buf, i)
            if found is None:
                i = n
                break
            i = found.start() + 1
            mark = buf[i - 1]
            if mark == '"':
                in_string = True
            elif mark in "[{":
                depth += 1
                if depth > depth_left:
                    raise TooDeep()
            else:
                depth -= 1
                if depth == 0:
                    text += buf[r.pos : i]
                    r.pos = i
                    return text
        text += buf[r.pos : i]
        r.pos = i
        if not r.more():
            return text  # unclosed: json.loads says where
