"""Text that PostgreSQL cannot hold, held anyway: NUL characters in text columns.

A Postgres text value cannot contain U+0000; SQLite's can, and the stores promise the same
behaviour on both (issue 34). A question, a model reply or a summarised original holding a
NUL would otherwise fail a run on Postgres only. So every string sent to Postgres through a
connection `install` prepared is escaped, and every text value read back unescaped: NUL as
ESC + "0", ESC itself as ESC + "e", where ESC is U+10FFFD (a private-use code point of the
last plane). The mapping is a bijection over all strings, so any text round-trips exactly;
only values holding NUL or ESC are stored differently from their Python form, and SQL that
measures or slices such a value (length, substr) sees the escaped form: no store query does
that on free text. `unescape_bytes` undoes it on raw UTF-8 bytes (the ledger's verify reads
text as bytes). Imports psycopg only inside `install`.
"""

from __future__ import annotations

import re
from typing import Any

ESC = "\U0010fffd"
_ESC_BYTES = ESC.encode("utf-8")
_OUT = re.compile("[\x00\U0010fffd]")
_IN = re.compile("\U0010fffd([0e])")
_IN_BYTES = re.compile(re.escape(_ESC_BYTES) + b"([0e])")


def escape(text: str) -> str:
    """text as it is stored: NUL and ESC written as ESC sequences."""
    if "\x00" not in text and ESC not in text:
        return text
    return _OUT.sub(lambda m: ESC + ("0" if m.group() == "\x00" else "e"), text)


def unescape(text: str) -> str:
    """The text `escape` stored."""
    if ESC not in text:
        return text
    return _IN.sub(lambda m: "\x00" if m.group(1) == "0" else ESC, text)


def unescape_bytes(data: bytes) -> bytes:
    """The UTF-8 bytes of the text `escape` stored, from the stored UTF-8 bytes."""
    if _ESC_BYTES not in data:
        return data
    return _IN_BYTES.sub(lambda m: b"\x00" if m.group(1) == b"0" else _ESC_BYTES, data)


def install(conn: Any) -> None:
    """Make one psycopg connection escape every str it sends and unescape text it reads."""
    from psycopg.types.string import StrDumperUnknown, TextLoader

    class _Dumper(StrDumperUnknown):
        def dump(self, obj: str) -> Any:
            return super().dump(escape(obj))

    class _Loader(TextLoader):
        def load(self, data: Any) -> Any:
            value = super().load(data)
            return unescape(value) if isinstance(value, str) else value

    conn.adapters.register_dumper(str, _Dumper)
    for name in ("text", "varchar", "bpchar", "name"):
        conn.adapters.register_loader(name, _Loader)
