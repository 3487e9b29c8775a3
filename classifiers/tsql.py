"""T-SQL: a comment- and string-aware scanner, `GO` batches, object definitions and references.

No full parser: T-SQL grammars choke on real procedures (see DEPENDENCIES.md), so
the scanner blanks comments and string literals (keeping offsets), splits batches
on `GO` lines and reads definitions and table references with patterns over the
blanked text. Temp tables (#t), table variables (@t) and CTE names are not objects.
"""

from __future__ import annotations

import bisect
import functools
import re
import string
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from classifiers.model import Dependency, Symbol

_GO = re.compile(r"(?im)^[ \t]*GO[ \t]*(?:\d+)?[ \t]*(?:--[^\n]*)?\r?$")  # CRLF scripts too
NAME = r"(?:\[[^\]]+\]|\"[^\"]+\"|[A-Za-z_#@][\w#@$]*)"
QNAME = rf"{NAME}(?:\s*\.\s*{NAME}){{0,3}}"
_CREATE = re.compile(
    rf"\b(?:CREATE(?:\s+OR\s+ALTER)?|ALTER)\s+"
    rf"(?P<kind>PROC(?:EDURE)?|FUNCTION|VIEW|TABLE|TRIGGER|SEQUENCE|TYPE|"
    rf"(?:UNIQUE\s+)?(?:(?:NON)?CLUSTERED\s+)?INDEX)\s+(?P<name>{QNAME})",
    re.I,
)
_INDEX_ON = re.compile(rf"\bON\s+(?P<table>{QNAME})", re.I)
# The patterns from here to _ALIAS_TARGET, and _SQL_EVIDENCE, run on upper_ascii() text:
# keywords are matched case-sensitively (twice as fast as re.I), names read back at the
# same offsets from the original.
_READS = re.compile(rf"\b(?:FROM|JOIN|APPLY)\s+(?P<name>{QNAME})")
_TOP = r"(?:TOP\s*\([^()]*\)\s*(?:PERCENT\s+)?)?"  # UPDATE TOP (10) t, DELETE TOP (5) FROM t
_WRITES = re.compile(
    rf"\b(?:INSERT\s+{_TOP}(?:INTO\s+)?|UPDATE\s+{_TOP}|DELETE\s+{_TOP}(?:FROM\s+)?|"
    rf"MERGE\s+{_TOP}(?:INTO\s+)?|TRUNCATE\s+TABLE\s+)(?P<name>{QNAME})"
)
# DELETE FROM t: the FROM names the table written, not one read.
_DELETE_FROM = re.compile(rf"\bDELETE\s+{_TOP}(?=FROM\b)")
_EXEC = re.compile(rf"\bEXEC(?:UTE)?\s+(?:@\w+\s*=\s*)?(?P<name>{QNAME})")
# Tried only where a name can start (not inside a word): the same matches, fewer attempts.
_FUNC_CALL = re.compile(rf"(?<![\w#@$])(?P<name>{NAME}\s*\.\s*{NAME})\s*\(")
_CTE = re.compile(rf"(?:\bWITH|,)\s*(?P<name>{NAME})\s*(?:\([^()]*\))?\s+AS\s*\(")
_FK = re.compile(rf"\bREFERENCES\s+(?P<name>{QNAME})", re.I)
_ALIAS_TARGET = re.compile(
    # Within the statement: `.*?` ran to the end of the text for every UPDATE without a
    # FROM (quadratic on seed scripts of thousands of UPDATEs).
    rf"\bUPDATE\s+(?P<alias>{NAME})\s+SET\b[^;]{{0,8000}}?\bFROM\s+(?P<name>{QNAME})\s+"
    rf"(?:AS\s+)?(?P=alias)\b",
    re.S,
)
_DELETE_ALIAS = re.compile(
    rf"\bDELETE\s+{_TOP}(?P<alias>{NAME})\s+FROM\s+(?P<name>{QNAME})\s+(?:AS\s+)?(?P=alias)\b"
)
_KEYWORDS_TEXT = (
    "select where set values output inserted deleted openjson string_split as on with top "
    "into dbo sys information_schema exists not case when then else end lateral ( table "
    "openrowset sp_executesql"
)
_KEYWORDS = set(_KEYWORDS_TEXT.split())
_DML_WORD = {
    op: re.compile(rf"\b{op}\b")
    for op in ("SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE")
}
_AS_PAREN = re.compile(r"\bAS\s*\(")
_BUILTIN_TEXT = (
    "ISNULL COALESCE DATEADD DATEDIFF GETDATE SYSDATETIME NEWID OBJECT_ID SCHEMA_NAME QUOTENAME "
    "SERVERPROPERTY PARSENAME SUSER_NAME SUSER_SNAME SCOPE_IDENTITY CERT_ID DB_NAME"
)
_BUILTIN_NAMES = frozenset(_BUILTIN_TEXT.split())  # built-in functions: one construct
# T-SQL constructs: each counts once, by its first word (see _evidence_key).
_EVIDENCE_FORMS = [
    r"CREATE\s+(OR\s+ALTER\s+)?(PROC(EDURE)?|TABLE|VIEW|FUNCTION|TRIGGER|(UNIQUE\s+)?"
    r"(NON)?(CLUSTERED\s+)?INDEX)\s+[\w\[#]",
    r"ALTER\s+(TABLE|PROC(EDURE)?)\s+[\w\[]",
    r"SELECT\s+(TOP\s*\(?\s*\w+\)?\s+)?[\w\*\[@(][^;]{0,400}?\bFROM\s+[\w\[@#]",
    r"SELECT\s+@@\w+",
    r"SELECT\s+@\w+\s*=",
    r"SELECT\s+\[?\w+\]?\.\w+\s*\(",
    r"SELECT\s+CASE\b",
    r"SELECT\s+[\w@'(\[][^;\n]{0,200}?\s+AS\s+\[",
    r"INSERT\s+INTO\s+[\w\[@#]",
    r"UPDATE\s+[\w\[\].]+\s+SET\s+[\w\[]",
    r"DELETE\s+(\w+\s+)?FROM\s+[\w\[]",
    r"DELETE\s+[\w\[\].]+\s+WHERE\s+[\w\[@]",
    r"BEGIN\s+TRAN(SACTION)?\b",
    r"BEGIN\s+TRY\b",
    r"DECLARE\s+@\w+",
    r"SET\s+(NOCOUNT|ANSI_NULLS|QUOTED_IDENTIFIER|XACT_ABORT|ANSI_PADDING|ANSI_WARNINGS|"
    r"IDENTITY_INSERT|ARITHABORT|NOEXEC|DATEFORMAT|TRANSACTION\s+ISOLATION)\s+\w",
    r"EXEC(UTE)?\s+(\[?\w+\]?\.\[?\w+|U?SP_\w+|AS\s+(LOGIN|USER|OWNER|CALLER|SELF)\b)",
    r"RAISERROR\s*\(",
    r"THROW\s+\d+\s*,",
    r"PRINT\s+(N?'|@\w)",
    r"IF\s+(NOT\s+)?EXISTS\s*\(\s*SELECT\b",
    r"PRIMARY\s+KEY\s*(CLUSTERED|NONCLUSTERED|\()",
    r"FOREIGN\s+KEY\s*\(",
    r"NVARCHAR\s*\(\s*(\d+|MAX)\s*\)",
    r"VARCHAR\s*\(\s*(\d+|MAX)\s*\)",
    r"CREATE\s+(SEQUENCE|SYNONYM|PARTITION\s+(FUNCTION|SCHEME)|XML\s+SCHEMA\s+COLLECTION|"
    r"SECURITY\s+POLICY|CERTIFICATE|ASSEMBLY)\s+[\w\[]",
    r"CREATE\s+(SCHEMA|ROLE|USER|LOGIN|TYPE|DATABASE)\s+\[",
    r"ALTER\s+(SCHEMA|ROLE|USER|LOGIN|DATABASE)\s+\[",
    r"DROP\s+(SCHEMA|ROLE|USER|LOGIN|TYPE|DATABASE)\s+\[",
    r"DROP\s+(TABLE|INDEX|PROC(EDURE)?|VIEW|FUNCTION|TRIGGER|SYNONYM|SEQUENCE|CERTIFICATE)\s+"
    r"(IF\s+EXISTS\s+)?[\w\[]",
    r"BACKUP\s+CERTIFICATE\s+[\w\[]",
    r"TRUNCATE\s+TABLE\s+[\w\[]",
    r"@@(VERSION|ROWCOUNT|ERROR|IDENTITY|TRANCOUNT|SPID)\b",
    r"FOR\s+(XML|JSON)\s+(PATH|AUTO|RAW|EXPLICIT)\b",
    r"CROSS\s+APPLY\s",
    r"OUTER\s+APPLY\s",
    r"OVER\s*\(\s*(PARTITION|ORDER)\s+BY\b",
] + [rf"{name}\s*\(" for name in sorted(_BUILTIN_NAMES)]


def _by_first_letter(forms: list[str]) -> str:
    """One alternation per first letter (`C(?:REATE...|ROSS...)`): the regex engine tests a
    letter per branch at each word start instead of every form (3x faster)."""
    groups: dict[str, list[str]] = {}
    for form in forms:
        groups.setdefault(form[0], []).append(form[1:])
    return "|".join(f"{re.escape(k)}(?:{'|'.join(v)})" for k, v in groups.items())


_SQL_EVIDENCE = re.compile(rf"\b(?:{_by_first_letter(_EVIDENCE_FORMS)})", re.S)
# Line-anchored forms: `USE [db]` alone on its line, sqlcmd commands (`:r`, `:setvar`).
_LINE_EVIDENCE = re.compile(
    r"(?m)^[ \t]*(?:USE\s+(?:\[[^\]\n]+\]|\w+)[ \t]*;?[ \t]*$|:(?:R|ON\s+ERROR|OUT|EXIT|CONNECT|SETVAR)\b)"
)
# Whole statements, each a run of keywords in T-SQL's grammar order from the start of a
# line: one is proof enough (a sequence, schema, role or grant file holds nothing else).
# Counted as two constructs. Prose does not put `AS INT START WITH` after a name.
_PERMISSION = (
    r"(?:SELECT|INSERT|UPDATE|DELETE|EXEC(?:UTE)?|REFERENCES|ALTER|CONTROL|CONNECT|IMPERSONATE|"
    r"VIEW|TAKE|CREATE|SHOWPLAN|ALL|UNMASK|BACKUP|AUTHENTICATE|SUBSCRIBE|ADMINISTER|KILL)"
    r"(?:\s+[A-Z_]+){0,3}?(?:\s*\([^()]*\))?"
)
_STATEMENT = re.compile(
    rf"(?m)^[ \t]*(?:"
    rf"CREATE\s+SEQUENCE\s+{QNAME}\s+(?:AS\s+{QNAME}\s+)?(?:START\s+WITH|INCREMENT\s+BY|MINVALUE)"
    rf"|CREATE\s+(?:SCHEMA|ROLE)\s+{NAME}\s+AUTHORIZATION\s+{NAME}"
    rf"|CREATE\s+USER\s+{NAME}\s+(?:(?:FOR|FROM|WITHOUT)\s+LOGIN|WITH\s+DEFAULT_SCHEMA)"
    rf"|CREATE\s+LOGIN\s+{NAME}\s+(?:WITH\s+PASSWORD|FROM\s+(?:WINDOWS|CERTIFICATE|EXTERNAL))"
    rf"|CREATE\s+TYPE\s+{QNAME}\s+(?:AS\s+TABLE\s*\(|FROM\s+\w+)"
    rf"|CREATE\s+PARTITION\s+FUNCTION\s+{NAME}\s*\(\s*\w+(?:\s*\([^()]*\))?\s*\)\s*AS\s+RANGE"
    rf"|CREATE\s+PARTITION\s+SCHEME\s+{NAME}\s+AS\s+PARTITION\s+{NAME}"
    rf"|ALTER\s+DATABASE\s+{NAME}\s+(?:(?:ADD|MODIFY|REMOVE)\s+(?:FILEGROUP|FILE|LOG\s+FILE)|SET)\s"
    rf"|ALTER\s+ROLE\s+{NAME}\s+(?:ADD|DROP)\s+MEMBER\s+{NAME}"
    rf"|ALTER\s+AUTHORIZATION\s+ON\s+(?:\w+\s*::\s*)?{QNAME}\s+TO\s"
    rf"|(?:GRANT|DENY|REVOKE)\s+{_PERMISSION}(?:\s*,\s*{_PERMISSION})*\s+"
    rf"(?:ON\s+(?:[A-Z]+(?:\s+[A-Z]+)*\s*::\s*)?{QNAME}\s+)?(?:TO|FROM)\s+{NAME}"
    rf"|CREATE\s+(?:OR\s+ALTER\s+)?PROC(?:EDURE)?\s+{QNAME}\s*(?:;\s*\d+\s*)?\(?\s*@\w+\s+(?:AS\s+)?[\w\[]"
    rf"|CREATE\s+(?:OR\s+ALTER\s+)?PROC(?:EDURE)?\s+{QNAME}\s+(?:WITH\s+[\w\s,]{{1,80}}?\s+)?AS\s+"
    rf"(?:BEGIN|SET|SELECT|DECLARE|INSERT|UPDATE|DELETE|MERGE|EXEC|IF|WITH|RETURN|EXTERNAL\s+NAME)\b"
    rf"|CREATE\s+(?:OR\s+ALTER\s+)?FUNCTION\s+{QNAME}\s*\(\s*(?:@\w+[^()]*(?:\([^()]*\)[^()]*)*)?\)\s*RETURNS\b"
    rf"|CREATE\s+(?:OR\s+ALTER\s+)?VIEW\s+{QNAME}\s*(?:\([^()]*\)\s*)?(?:WITH\s+\w+(?:\s*,\s*\w+)*\s+)?"
    rf"AS\s+(?:SELECT|WITH)\b"
    rf"|CREATE\s+(?:OR\s+ALTER\s+)?TRIGGER\s+{QNAME}\s+ON\s+{QNAME}\s+(?:WITH\s+[\w\s,]{{1,80}}?\s+)?"
    rf"(?:AFTER|FOR|INSTEAD\s+OF)\b"
    rf"|CREATE\s+TABLE\s+{QNAME}\s*\(\s*{NAME}\s+(?:{QNAME}|AS\s*\()"
    rf"|CREATE\s+SYNONYM\s+{QNAME}\s+FOR\s+{QNAME}"
    rf"|CREATE\s+XML\s+SCHEMA\s+COLLECTION\s+{QNAME}\s+AS\b"
    rf"|CREATE\s+SECURITY\s+POLICY\s+{QNAME}\s+ADD\s+(?:FILTER|BLOCK)\s+PREDICATE"
    rf"|INSERT\s+(?:INTO\s+)?{QNAME}\s*\([^()]*\)\s*(?:VALUES|SELECT|OUTPUT|EXEC)\b"
    rf"|MERGE\s+(?:TOP\s*\([^()]*\)\s*)?(?:INTO\s+)?{QNAME}\s+(?:AS\s+)?{NAME}\s+USING\b"
    rf"|CREATE\s+ASSEMBLY\s+{NAME}\s+(?:AUTHORIZATION\s+{NAME}\s+)?FROM\s"
    rf"|CREATE\s+CERTIFICATE\s+{NAME}\s+(?:ENCRYPTION\s+BY|FROM|WITH\s+SUBJECT)\b"
    rf"|EXEC(?:UTE)?\s+{NAME}\s*\.\s*{NAME}[ \t]*(?:;|$|@\w+\s*=|N?')"
    rf"|:SETVAR\s+\w+"
    rf")"
)


_DOT = re.compile(r"\s*\.\s*")
_BEGIN_TRAN = re.compile(r"\bBEGIN\s+TRAN(SACTION)?\b", re.I)
_BEGIN_TRY = re.compile(r"\bBEGIN\s+TRY\b", re.I)
# A bracketed name may hold a quote or `--` (`[test it doesn't fail]`): it is a name, kept.
_LEX = re.compile(
    r"--[^\n]*|/\*.*?(?:\*/|\Z)|'(?:[^']|'')*(?:'|\Z)|\[(?=[^\]\n]*(?:'|--|/\*))[^\]\n]*\]", re.S
)


def _spaces(chunk: str) -> str:
    if "\n" not in chunk:
        return " " * len(chunk)
    return "\n".join(" " * len(part) for part in chunk.split("\n"))


def _blank_match(m: re.Match[str]) -> str:
    tok = m.group(0)
    if tok[0] == "[":
        return tok
    if tok[0] == "'":
        return "'" + _spaces(tok[1:-1]) + ("'" if len(tok) > 1 and tok.endswith("'") else " ")
    return _spaces(tok)


@functools.lru_cache(maxsize=256)
def blank(text: str) -> str:
    """Comments and string literals replaced by spaces (offsets and newlines kept).

    One regex pass: at each position the earliest of a line comment, a block comment
    or a string wins, so `--` inside a string is text and a quote inside a comment is
    comment. Nested block comments (legal in T-SQL, rare) are followed to their end.
    """
    if "/*" in text and _has_nested(text):
        return _blank_nested(text)
    return _LEX.sub(_blank_match, text)


def _has_nested(text: str) -> bool:
    return any("/*" in m.group(0)[2:] for m in re.finditer(r"/\*.*?\*/", text, re.S))


def _blank_nested(text: str) -> str:
    """The character scanner, for texts with nested block comments."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        two = text[i : i + 2]
        if two == "--":
            j = text.find("\n", i)
            j = n if j == -1 else j
            out[i:j] = " " * (j - i)
            i = j
        elif two == "/*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text[j : j + 2] == "/*":
                    depth, j = depth + 1, j + 2
                elif text[j : j + 2] == "*/":
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out[i:j] = [c if c == "\n" else " " for c in text[i:j]]
            i = j
        elif text[i] == "'":
            j = i + 1
            while j < n and not (text[j] == "'" and text[j + 1 : j + 2] != "'"):
                j += 2 if text[j] == "'" else 1
            out[i + 1 : j] = [c if c == "\n" else " " for c in text[i + 1 : j]]
            i = j + 1
        else:
            i += 1
    return "".join(out)


def batches(text: str) -> list[tuple[int, str]]:
    """(start offset, text) of each batch between `GO` lines (GO inside comments is ignored)."""
    clean = blank(text)
    out, start = [], 0
    for m in _GO.finditer(clean):
        out.append((start, text[start : m.start()]))
        start = m.end()
    out.append((start, text[start:]))
    return [(s, b) for s, b in out if b.strip()]


_RULE = re.compile(r"^[\s\-=*/#~_.]*$")


def doc_before(text: str, offset: int) -> str:
    """The comment right above a definition: its `Description:` line, else its lines joined.

    `--` lines or one `/* */` block, directly above (no blank line between), as SQL
    headers document procedures; rulers (`-- =====`) are skipped.
    """
    above = text[max(0, offset - 4000) : offset].rstrip(" \t").split("\n")  # not the whole file
    if above and not above[-1].strip():
        above.pop()  # the line break ending the comment
    lines: list[str] = []
    if above and above[-1].rstrip().endswith("*/"):
        start = text.rfind("/*", 0, offset)
        lines = text[start + 2 : text.rfind("*/", 0, offset)].split("\n")
    else:
        while above and above[-1].lstrip().startswith("--"):
            lines.insert(0, above.pop().lstrip()[2:])
    cleaned = [line.strip(" \t\r-*=#/") for line in lines if not _RULE.match(line)]
    cleaned = [line for line in cleaned if line]
    for line in cleaned:
        if line.lower().startswith("description:"):
            return line.split(":", 1)[1].strip()[:300]
    return " ".join(cleaned)[:300]


# One part of a dotted name: a bracketed or quoted part may itself hold dots.
_NAME_PART = re.compile(r'\[[^\]]*\]|"[^"]*"|[^.\["]+')


@functools.lru_cache(maxsize=8192)
def normalize(name: str) -> str:
    """`[dbo].[Orders]`, `dbo.Orders`, `Orders` -> `dbo.Orders`; 3-part names keep the last two."""
    parts = [p.strip().strip('[]"') for p in _NAME_PART.findall(name.strip())]
    parts = [p for p in parts if p]
    if len(parts) == 1:
        parts = ["dbo", parts[0]]
    return ".".join(parts[-2:])


def is_object_name(name: str) -> bool:
    """False for temp tables, table variables, keywords and parameters."""
    bare = name.strip().strip('[]"')
    return bool(bare) and bare[0] not in "#@(" and bare.lower() not in _KEYWORDS


_UPPER = str.maketrans(string.ascii_lowercase, string.ascii_uppercase)


def upper_ascii(text: str) -> str:
    """ASCII letters upper-cased, nothing else touched: offsets stay those of text."""
    return text.translate(_UPPER)


_KEY = re.compile(r"[A-Z_@:]+")
_DOUBLE_QUOTED = re.compile(r'"[^"\n]*"')


def _blank_quoted(m: re.Match[str]) -> str:
    return '"' + " " * (len(m.group(0)) - 2) + '"'


def _evidence_key(found: str) -> str:
    """What a construct counts as: its first word (`CREATE`, `SELECT`, `@@`, `:`); every
    built-in function call is one construct, not one per function."""
    m = _KEY.match(found.lstrip())
    word = m.group(0) if m else found.strip()[:1]
    if word in _BUILTIN_NAMES:
        return "builtin"
    if word.startswith(":"):
        return ":"  # SQLCMD commands (:r, :setvar, :on error) are one construct
    return "@@" if word.startswith("@@") else word


def sql_evidence(text: str, stop_at: int = 0) -> int:
    """Number of distinct T-SQL constructs found outside comments and strings.

    stop_at: stop counting once that many are found (0: count them all).
    """
    clean = blank(text)
    if '"' in clean:
        # T-SQL quotes names, not text, in double quotes: SQL inside another language's
        # "string" (Python, Java, PowerShell, JavaScript) is not evidence of a T-SQL file.
        clean = _DOUBLE_QUOTED.sub(_blank_quoted, clean)
    up = upper_ascii(clean)
    seen: set[str] = set()
    for pattern in (_SQL_EVIDENCE, _LINE_EVIDENCE):
        for m in pattern.finditer(up):
            seen.add(_evidence_key(m.group(0)))
            if len(seen) == stop_at:
                return len(seen)
    if len(seen) < 2 and _STATEMENT.search(up):
        # One whole statement is proof enough: a sequence, schema, role or grant file
        # holds nothing else. It counts as two constructs.
        seen.update(("statement", "statement:2"))
    return len(seen) if not stop_at else min(len(seen), stop_at)


_SQL_COMMENT_LINE = re.compile(r"(?m)^[ \t]*--")


def batch_skeleton(text: str) -> bool:
    """A script of `GO` lines and `--` comments only (a template SSDT and sqlcmd accept)."""
    if not _SQL_COMMENT_LINE.search(text):
        return False
    code = _GO.sub("", blank(text))
    return not code.strip() and _GO.search(blank(text)) is not None


def _line(text: str, offset: int) -> int:
    """1-based line of an offset (by bisection: counting from the start for every object
    of a long script was quadratic: 3.8 of 6.4 s on a 6.8 MB script)."""
    return bisect.bisect_left(_newlines(text), offset) + 1


@functools.lru_cache(maxsize=4)
def _newlines(text: str) -> list[int]:
    return [m.start() for m in re.finditer("\n", text)]


@dataclass
class SqlRefs:
    """Tables read and written, procedures executed, DML and control shape of a body."""

    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    executes: list[str] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)
    transaction: bool = False
    try_catch: bool = False


_NOT_CALL_CONTEXT_TEXT = (
    "INTO UPDATE FROM JOIN TABLE REFERENCES EXEC EXECUTE MERGE ON APPLY PROCEDURE PROC "
    "VIEW FUNCTION TRIGGER TYPE INDEX KEY DELETE INSERT"
)
_NOT_CALL_CONTEXT = set(_NOT_CALL_CONTEXT_TEXT.split())


def _word_before(text: str, offset: int) -> str:
    words = text[max(0, offset - 40) : offset].split()
    return words[-1].upper() if words else ""


_XML_METHODS = {"value", "query", "exist", "modify", "nodes"}


def _xml_method(name: str) -> bool:
    """`@data.value(...)`, `[Demographics].exist(...)`: a method of an xml value, no object."""
    return name.lstrip().startswith("@") or bare(name.rsplit(".", 1)[-1]).lower() in _XML_METHODS


def references(body: str) -> SqlRefs:
    """References in a body (comments/strings blanked); CTEs and temp objects excluded."""
    clean = blank(body)
    # Keywords are matched in an upper-cased copy (same offsets) by case-sensitive patterns,
    # twice as fast as re.I; names are read from the original text at the same offsets.
    up = upper_ascii(clean)

    def name_of(m: re.Match[str], group: str = "name") -> str:
        return clean[m.start(group) : m.end(group)]

    # Every CTE has `AS (`: without one, the comma-by-comma CTE scan is skipped.
    ctes = {normalize(name_of(m)) for m in _CTE.finditer(up)} if _AS_PAREN.search(up) else set()
    aliases = {
        name_of(m, "alias").lower(): normalize(name_of(m))
        for pattern in (_ALIAS_TARGET, _DELETE_ALIAS)
        for m in pattern.finditer(up)
    }
    deleted_from = {m.end() for m in _DELETE_FROM.finditer(up)}

    def collect(pattern: re.Pattern[str]) -> list[str]:
        seen: list[str] = []
        for m in pattern.finditer(up):
            raw = name_of(m)
            if not is_object_name(raw):
                continue
            if pattern is _READS and m.start() in deleted_from:
                continue
            name = aliases.get(raw.strip("[]").lower(), normalize(raw))
            if name not in ctes and name not in seen:
                seen.append(name)
        return seen

    calls = [
        normalize(m.group("name"))
        for m in _FUNC_CALL.finditer(clean)
        if _word_before(clean, m.start()) not in _NOT_CALL_CONTEXT
        and not _xml_method(m.group("name"))
    ]
    refs = SqlRefs(
        reads=collect(_READS),
        writes=collect(_WRITES),
        executes=list(dict.fromkeys(collect(_EXEC) + calls)),
    )
    refs.reads = [r for r in refs.reads if r not in refs.executes]
    refs.operations = sorted(op for op, rx in _DML_WORD.items() if op in up and rx.search(up))
    refs.transaction = bool(_BEGIN_TRAN.search(clean))
    refs.try_catch = bool(_BEGIN_TRY.search(clean))
    return refs


# --- tables and table types: columns, keys, what they use, where they are stored ---------

_PK_CONSTRAINT = re.compile(r"PRIMARY\s+KEY(?:\s+(?:NON)?CLUSTERED)?\s*\((?P<cols>[^)]*)\)", re.I)
_FK_CONSTRAINT = re.compile(
    rf"FOREIGN\s+KEY\s*\((?P<cols>[^)]*)\)\s*REFERENCES\s+(?P<ref>{QNAME})"
    rf"\s*\((?P<refcols>[^)]*)\)",
    re.I,
)
# Table elements that are not columns.
_NOT_COLUMNS = {"constraint", "primary", "foreign", "unique", "check", "index", "period"}
_COLUMN_HEAD = re.compile(rf"\s*(?P<name>{NAME})(?P<rest>.*)", re.S)
_COLUMN_TYPE = re.compile(
    rf"\s*(?P<type>(?:{NAME}\s*\.\s*)?{NAME})(?P<args>\s*\((?:[^()]|\([^()]*\))*\))?", re.S
)
_COMPUTED = re.compile(r"\s*AS\b\s*(?P<expr>.*?)\s*(?:\bPERSISTED\b.*)?$", re.S | re.I)
_GENERATED = re.compile(
    r"\bGENERATED\s+ALWAYS\s+AS\s+(?P<what>ROW|TRANSACTION_ID|SEQUENCE_NUMBER)\s+(?P<end>START|END)",
    re.I,
)
_NOT_NULL = re.compile(r"\bNOT\s+NULL\b", re.I)
_PRIMARY_KEY = re.compile(r"\bPRIMARY\s+KEY\b", re.I)
_NEXT_VALUE = re.compile(rf"\bNEXT\s+VALUE\s+FOR\s+(?P<name>{QNAME})", re.I)
_XML_TYPED = re.compile(rf"\(\s*(?:(?:CONTENT|DOCUMENT)\s+)?(?P<name>{QNAME})\s*\)", re.I)
_STORED_ON = re.compile(
    rf"^\s*(?:WITH\s*\((?:[^()]|\([^()]*\))*\)\s*)?ON\s+(?P<name>{NAME})\s*(?P<part>\()?", re.I
)
_CONSTRAINT_ON = re.compile(
    rf"\)\s*(?:WITH\s*\((?:[^()]|\([^()]*\))*\)\s*)?ON\s+(?P<name>{NAME})\s*(?P<part>\()?", re.I
)
_HISTORY = re.compile(rf"\bHISTORY_TABLE\s*=\s*(?P<name>{QNAME})", re.I)
_PARENS = re.compile(r"[()]")
# SQL Server's own types: any other type name is user-defined (an alias or table type).
_BUILTIN_TYPES_TEXT = (
    "bigint int smallint tinyint bit decimal numeric dec money smallmoney float real date "
    "datetime datetime2 datetimeoffset smalldatetime time char varchar nchar nvarchar text "
    "ntext binary varbinary image uniqueidentifier xml sql_variant hierarchyid geography "
    "geometry sysname rowversion timestamp cursor table json vector integer character"
)
BUILTIN_TYPES = frozenset(_BUILTIN_TYPES_TEXT.split())


def _closing_paren(clean: str, open_at: int) -> int:
    """Offset of the parenthesis closing the one at open_at (the end when unbalanced)."""
    depth = 0
    for m in _PARENS.finditer(clean, open_at):
        depth += 1 if m.group(0) == "(" else -1
        if depth == 0:
            return m.start()
    return len(clean)


def top_level_parts(inner: str) -> list[tuple[int, str]]:
    """(offset, text) of the comma-separated parts of a list, at parenthesis depth 0."""
    parts: list[tuple[int, str]] = []
    depth, start = 0, 0
    for m in re.finditer(r"[(),]", inner):
        ch = m.group(0)
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0:
            parts.append((start, inner[start : m.start()]))
            start = m.end()
    parts.append((start, inner[start:]))
    return [(offset, part) for offset, part in parts if part.strip()]


def sql_type(name: str, args: str = "") -> tuple[str, str | None]:
    """(the type as shown, the user-defined type it names or None).

    Built-in types are upper-cased without spaces (`DECIMAL(18,2)`, `[sys].[geography]` ->
    `GEOGRAPHY`); a user-defined one keeps its spelling, schema-qualified (`dbo.Name`).
    """
    parts = [p.strip().strip('[]"') for p in _NAME_PART.findall(name.strip()) if p.strip()]
    base = parts[-1]
    builtin = base.lower() in BUILTIN_TYPES and (len(parts) == 1 or parts[-2].lower() == "sys")
    if builtin:
        if base.lower() == "xml" and args:
            typed = _XML_TYPED.search(args)
            if typed:  # XML(CONTENT Sales.OrderSchema): typed by a schema collection
                collection = normalize(typed.group("name"))
                return f"XML({collection})", collection
        return base.upper() + re.sub(r"\s+", "", args).upper(), None
    user = normalize(name)
    return user + re.sub(r"\s+", "", args), user


def _table_shape(body: str) -> tuple[dict[str, Any], list[str], list[tuple[str, str]]]:
    """(columns/keys metadata, names it uses, (edge, name) of its storage and history).

    The column list is split at top-level commas: every element that is not a constraint,
    index or period is a column, whatever its type (schema-qualified, user-defined,
    computed, period columns). Uses: user-defined column types, XML schema collections,
    sequences in defaults.
    """
    clean = blank(body)
    start = clean.find("(")
    meta: dict[str, Any] = {"columns": [], "primary_key": [], "foreign_keys": []}
    if start == -1:
        return meta, [], []
    end = _closing_paren(clean, start)
    inner = clean[start + 1 : end]
    columns: list[dict[str, Any]] = []
    pk: list[str] = []
    fks: list[dict[str, Any]] = []
    uses: list[str] = []
    storage: list[tuple[str, str]] = []
    original = body[start + 1 : end]
    for offset, part in top_level_parts(inner):
        head = _COLUMN_HEAD.match(part)
        if head is None:
            continue
        first = head.group("name")
        if first.lower() in _NOT_COLUMNS:
            placed = _CONSTRAINT_ON.search(part)
            if placed:  # a key stored on a partition scheme or filegroup: so is the table
                storage.append(_storage(placed))
            for m in _PK_CONSTRAINT.finditer(part):
                pk += [_col(c) for c in m.group("cols").split(",") if c.strip()]
            for m in _FK_CONSTRAINT.finditer(part):
                fks.append(
                    {
                        "columns": [_col(c) for c in m.group("cols").split(",") if c.strip()],
                        "references": normalize(m.group("ref")),
                    }
                )
            continue
        name = first.strip('[]"')
        rest = head.group("rest")
        col: dict[str, Any] = {"name": name}
        computed = _COMPUTED.match(rest)
        if computed:  # the expression as written: its string literals are part of it
            expr = original[offset + head.start("rest") :][
                computed.start("expr") : computed.end("expr")
            ]
            col["type"] = ""
            col["computed"] = " ".join(blank_comments(expr).split())[:300]
        else:
            typed = _COLUMN_TYPE.match(rest)
            if typed is None:  # a bare name: not valid T-SQL, kept so no column is lost
                col["type"] = ""
            else:
                shown, user = sql_type(typed.group("type"), typed.group("args") or "")
                col["type"] = shown
                if user:
                    uses.append(user)
                rest = rest[typed.end() :]
            col["nullable"] = not _NOT_NULL.search(rest)
            generated = _GENERATED.search(rest)
            if generated:
                col["generated"] = f"{generated.group('what')} {generated.group('end')}".upper()
        if _PRIMARY_KEY.search(rest):
            col["pk"] = True
            pk.append(name)
        ref = _FK.search(rest)
        if ref:
            fks.append({"columns": [name], "references": normalize(ref.group("name"))})
        uses += [normalize(m.group("name")) for m in _NEXT_VALUE.finditer(rest)]
        columns.append(col)
    for col in columns:  # a key declared by a table constraint marks its columns too
        if col["name"] in pk:
            col["pk"] = True
    meta["columns"] = columns
    meta["primary_key"] = list(dict.fromkeys(pk))
    meta["foreign_keys"] = list({(tuple(f["columns"]), f["references"]): f for f in fks}.values())
    after = clean[end + 1 :]
    on = _STORED_ON.match(after)
    if on:
        storage.insert(0, _storage(on))
    history = _HISTORY.search(after)
    if history:
        storage.append(("History", normalize(history.group("name"))))
    return meta, list(dict.fromkeys(uses)), [s for s in dict.fromkeys(storage) if s[1]]


def _storage(on: re.Match[str]) -> tuple[str, str]:
    """("StoredOn", the partition scheme or filegroup) of an `ON x [(column)]` clause; the
    default filegroup is no node ("")."""
    name = on.group("name").strip('[]"')
    if name.upper() in ("PRIMARY", "DEFAULT"):
        return "StoredOn", ""
    return "StoredOn", f"PARTITION SCHEME::{name}" if on.group("part") else f"FILEGROUP::{name}"


def _col(spec: str) -> str:
    """`[Id] ASC` -> `Id`."""
    return spec.split()[0].strip('[]"')


def table_columns(body: str) -> dict[str, object]:
    """Columns (name, type, nullable, pk; computed and period columns marked), primary key and
    foreign keys of a CREATE TABLE or CREATE TYPE ... AS TABLE."""
    return _table_shape(body)[0]


# --- routines: headers and parameters ---------------------------------------------------

_OBJECTS = ("procedure", "function", "view", "table", "trigger", "sequence", "type")
_KIND = {"proc": "procedure"} | {k: k for k in _OBJECTS}
_PARAMS = re.compile(
    rf"(@\w+)\s+(?:AS\s+)?((?:{NAME}\s*\.\s*)?[A-Za-z_\[]\w*\]?(?:\s*\([^)]*\))?)"
    r"(\s*=\s*(?:N?'[^']*'|[^,\s]+))?"
    r"(\s+OUT(?:PUT)?\b)?",
    re.I,
)
# A parameter's type without brackets or spaces: `[dbo].[LineList]`, `DECIMAL(18, 2)`.
_TYPE_NOISE = re.compile(r"[\s\[\]]")
_ROUTINES = ("procedure", "function", "view", "trigger")
_AS = re.compile(r"\bAS\b", re.I)
_RETURNS = re.compile(r"\bRETURNS\b", re.I)
_RETURNS_SHAPE = re.compile(
    rf"\bRETURNS\s+(?:(?P<var>@\w+)\s+)?(?P<type>TABLE\b|{QNAME}(?:\s*\([^()]*\))?)", re.I
)
_TEST_API = re.compile(
    r"\btSQLt\s*\.\s*(?:FakeTable|SpyProcedure|FakeFunction|ApplyConstraint|ApplyTrigger|"
    r"RemoveObject|AssertObjectExists|AssertObjectDoesNotExist|AssertEmptyTable)\s+"
    r"(?:@\w+\s*=\s*)?N?'(?P<name>[^']+)'",
    re.I,
)
_SQLCMD_VAR = re.compile(r"\$\((?P<name>\w+)\)")


_PARAM_BEFORE = re.compile(r"@\w+\s*$")


def header_end(body: str) -> int:
    """Offset of the AS that starts a routine's body (`@p AS INT` is a parameter, `WITH
    EXECUTE AS OWNER` an option)."""
    clean = blank(body)
    for m in _AS.finditer(clean):
        before = clean[max(0, m.start() - 80) : m.start()]
        if not _PARAM_BEFORE.search(before) and _word_before(clean, m.start()) not in (
            "EXECUTE",
            "EXEC",
        ):
            return m.start()
    return 0


def _params_region(kind: str, header: str) -> str:
    """Where a routine's parameters are: a function's stop at RETURNS (`RETURNS @t TABLE`
    declares its result, not a parameter)."""
    if kind == "function":
        returns = _RETURNS.search(blank(header))
        return header[: returns.start()] if returns else header
    return header


def _parameters(kind: str, header: str) -> list[tuple[str, ...]]:
    """(name, type as written, default, output) of each parameter of a routine."""
    return [tuple(p) for p in _PARAMS.findall(_params_region(kind, header))]


def _user_type(raw: str) -> str | None:
    """The user-defined type a parameter's type names, if it is one."""
    return sql_type(re.sub(r"\s*\(.*", "", raw, flags=re.S))[1]


def _function_shape(header: str) -> dict[str, str]:
    """A function's kind (scalar, inline or multi-statement table-valued) and return type."""
    m = _RETURNS_SHAPE.search(blank(header))
    if m is None:
        return {}
    if m.group("var"):
        return {"function_type": "multi_statement", "returns": "TABLE"}
    if m.group("type").upper() == "TABLE":
        return {"function_type": "inline", "returns": "TABLE"}
    return {"function_type": "scalar", "returns": _TYPE_NOISE.sub("", m.group("type")).upper()}


def _stmt_len(clean: str, at: int) -> int:
    nxt = _CREATE.search(clean, at)
    return (nxt.start() if nxt else len(clean)) - at


def _alter_table(
    qn: str, clause: str, line: int, symbols: list[Symbol], deps: list[Dependency]
) -> None:
    """ALTER TABLE ... ADD ... FOREIGN KEY: an FK of the table, not a new object."""
    for m in _FK_CONSTRAINT.finditer(clause):
        ref = normalize(m.group("ref"))
        fk = {"columns": [_col(c) for c in m.group("cols").split(",")], "references": ref}
        deps.append(Dependency(qn, ref, "FK", line))
        for sym in symbols:
            if sym.qualified_name == qn and sym.kind == "table":
                sym.metadata.setdefault("foreign_keys", []).append(fk)


# --- database-level objects, security and deployment statements -------------------------

# Matched in upper_ascii(blank(batch)); names are read back from the blanked batch.
_PRINCIPALS = rf"{NAME}(?:\s*,\s*{NAME})*"
# Grouped by first keyword (`CREATE (?:SCHEMA|ROLE|...)`): the engine tries one keyword per
# word start, not every alternative (this pattern runs over every script).
_DEFINE = re.compile(
    r"\b(?:CREATE\s+(?:"
    rf"SCHEMA\s+(?P<schema>{NAME})(?:\s+AUTHORIZATION\s+(?P<schema_owner>{NAME}))?"
    rf"|(?:APPLICATION\s+)?ROLE\s+(?P<role>{NAME})(?:\s+AUTHORIZATION\s+(?P<role_owner>{NAME}))?"
    rf"|USER\s+(?P<user>{NAME})(?:\s+(?:FOR|FROM)\s+LOGIN\s+(?P<user_login>{NAME}))?"
    rf"(?:\s+WITHOUT\s+LOGIN)?(?:\s+WITH\s+DEFAULT_SCHEMA\s*=\s*(?P<user_schema>{NAME}))?"
    rf"|LOGIN\s+(?P<login>{NAME})"
    rf"|SYNONYM\s+(?P<synonym>{QNAME})\s+FOR\s+(?P<synonym_for>{QNAME})"
    rf"|PARTITION\s+FUNCTION\s+(?P<pfunction>{NAME})\s*\((?P<pf_type>[^()]*(?:\([^()]*\))?)\)"
    rf"\s*AS\s+RANGE(?:\s+(?P<pf_range>LEFT|RIGHT))?"
    rf"|PARTITION\s+SCHEME\s+(?P<pscheme>{NAME})\s+AS\s+PARTITION\s+(?P<ps_function>{NAME})"
    rf"(?:\s+ALL)?\s+TO\s*\((?P<ps_groups>[^()]*)\)"
    rf"|XML\s+SCHEMA\s+COLLECTION\s+(?P<xml>{QNAME})"
    rf"|SECURITY\s+POLICY\s+(?P<policy>{QNAME})"
    rf"|ASSEMBLY\s+(?P<assembly>{NAME})"
    r")|ALTER\s+(?:"
    rf"ROLE\s+(?P<member_role>{NAME})\s+ADD\s+MEMBER\s+(?P<member>{NAME})"
    rf"|DATABASE\s+(?:{NAME}|CURRENT)\s+ADD\s+FILEGROUP\s+(?P<filegroup>{NAME})"
    rf"(?:\s+CONTAINS\s+(?P<fg_contains>\w+))?"
    rf")|(?P<action>GRANT|DENY|REVOKE)\s+(?:GRANT\s+OPTION\s+FOR\s+)?(?P<permissions>[A-Z_][^;\n]*?)"
    rf"(?:\s+ON\s+(?:(?P<class>[A-Z][A-Z ]*?)\s*::\s*)?(?P<securable>{QNAME}))?"
    rf"\s+(?:TO|FROM)\s+(?P<principals>{_PRINCIPALS})"
    r"|EXEC(?:UTE)?\s+(?:"
    rf"(?:\[?TSQLT\]?\s*\.\s*)\[?NEWTESTCLASS\]?\s+(?:@CLASSNAME\s*=\s*)?N?(?P<test_class>'[^']*')"
    rf"|(?:SYS\s*\.\s*)?SP_ADDROLEMEMBER\s+(?:@ROLENAME\s*=\s*)?N?(?P<sp_role>'[^']*')"
    rf"\s*,\s*(?:@MEMBERNAME\s*=\s*)?N?(?P<sp_member>'[^']*')"
    r"))"
    rf"|(?m:^[ \t]*:SETVAR\s+(?P<setvar>\w+))"
)
# A word each _DEFINE alternative needs: without any, the batch is not scanned for them.
_DEFINE_WORDS = (
    "SCHEMA",
    "ROLE",
    "USER",
    "LOGIN",
    "SYNONYM",
    "PARTITION",
    "ASSEMBLY",
    "FILEGROUP",
    "GRANT",
    "DENY",
    "REVOKE",
    "NEWTESTCLASS",
    "SP_ADDROLEMEMBER",
    ":SETVAR",
)
_POLICY_PREDICATE = re.compile(
    rf"\bADD\s+(?:FILTER|BLOCK)\s+PREDICATE\s+(?P<function>{QNAME})\s*\([^()]*\)\s+ON\s+(?P<table>{QNAME})",
    re.I,
)
# Securable classes whose names are not schema-scoped objects: the node is CLASS::name.
_CLASS_NODES = {"SCHEMA", "ROLE", "USER", "LOGIN", "APPLICATION ROLE"}
# A principal named in GRANT ... TO x may be a user or a role: an edge goes to each,
# and only the one that exists resolves.
_PRINCIPAL_KINDS = ("USER", "ROLE")
# Qualified names of non-object nodes, by kind (T-SQL's own securable-class notation).
CLASS_OF_KIND = {
    "schema": "SCHEMA",
    "role": "ROLE",
    "user": "USER",
    "login": "LOGIN",
    "filegroup": "FILEGROUP",
    "partition_function": "PARTITION FUNCTION",
    "partition_scheme": "PARTITION SCHEME",
    "assembly": "ASSEMBLY",
    "script": "SCRIPT",
}
_STATEMENT_END = re.compile(r";|\n[ \t]*\n")


_PLAIN_NAME = re.compile(r"[A-Za-z_][\w@#$]*")


def is_plain_name(name: str) -> bool:
    """A name that needs no brackets (`Total`, not `Unit Price`)."""
    return bool(_PLAIN_NAME.fullmatch(name))


def last_part(name: str) -> str:
    """`[Sales].[Orders]` -> `Orders` (a bracketed part may hold dots)."""
    parts = [p for p in _NAME_PART.findall(name.strip()) if p.strip()]
    return bare(parts[-1]) if parts else bare(name)


def bare(name: str) -> str:
    """`[Far West Sales]` -> `Far West Sales`."""
    return name.strip().strip('[]"')


def class_name(kind: str, name: str) -> str:
    """The qualified name of a non-object node: `SCHEMA::Sales`, `ROLE::Far West Sales`."""
    return f"{CLASS_OF_KIND[kind]}::{bare(name)}"


def _literal(quoted: str) -> str:
    """The text of a `'...'` literal."""
    return quoted.strip()[1:-1].replace("''", "'") if quoted.strip().startswith("'") else quoted


def _securable(klass: str | None, name: str) -> str | None:
    """The node a GRANT's `ON [CLASS::]name` names (None for the database and the like)."""
    klass = " ".join((klass or "OBJECT").split()).upper()
    if klass in ("OBJECT", "TYPE", "XML SCHEMA COLLECTION"):
        return normalize(name)
    if klass == "APPLICATION ROLE":
        klass = "ROLE"
    if klass in ("SCHEMA", "ROLE", "USER", "LOGIN", "ASSEMBLY"):
        return f"{klass}::{bare(name)}"
    return None


class _Builder:
    """Symbols and dependencies of one script, in source order."""

    def __init__(self, text: str, path: str | None) -> None:
        self.text = text
        self.path = path
        self.symbols: list[Symbol] = []
        self.deps: list[Dependency] = []

    def symbol(
        self,
        kind: str,
        name: str,
        qn: str,
        at: int,
        body: str,
        signature: str,
        metadata: dict[str, Any] | None = None,
    ) -> Symbol:
        line = _line(self.text, at)
        sym = Symbol(
            kind=kind,
            name=name,
            qualified_name=qn,
            language="sql",
            start_line=line,
            end_line=line + body.count("\n"),
            text=body,
            signature=" ".join(signature.split())[:300],
            doc=doc_before(self.text, at),
            metadata=metadata or {},
        )
        self.symbols.append(sym)
        return sym

    def dep(self, source: str, target: str | None, edge: str, line: int) -> None:
        if target and target != source:
            self.deps.append(Dependency(source, target, edge, line))


def _statement(clean: str, start: int, end_at: int) -> int:
    """Where a one-statement definition ends: its `;`, a blank line, or end_at."""
    m = _STATEMENT_END.search(clean, start, end_at)
    return m.start() + (1 if m and m.group(0) == ";" else 0) if m else end_at


def _define(b: _Builder, m: re.Match[str], clean: str, batch: str, offset: int, limit: int) -> None:
    """A schema, principal, permission, synonym, storage or sqlcmd definition."""

    def raw(group: str) -> str:  # the text at a group's offsets, in its own case
        return clean[m.start(group) : m.end(group)]

    def lit(group: str) -> str:  # a blanked literal, read back from the original
        return _literal(batch[m.start(group) : m.end(group)])

    end = _statement(clean, m.end(), limit)
    body = batch[m.start() : end].rstrip()
    meta: dict[str, Any]
    at = offset + m.start()
    line = _line(b.text, at)
    group = m.lastgroup or ""
    if m.group("schema"):
        meta = {"owner": bare(raw("schema_owner"))} if m.group("schema_owner") else {}
        b.symbol(
            "schema", bare(raw("schema")), class_name("schema", raw("schema")), at, body, body, meta
        )
    elif m.group("test_class"):
        name = lit("test_class")
        b.symbol("schema", name, class_name("schema", name), at, body, body, {"test_class": True})
    elif m.group("role"):
        meta = {"owner": bare(raw("role_owner"))} if m.group("role_owner") else {}
        b.symbol("role", bare(raw("role")), class_name("role", raw("role")), at, body, body, meta)
    elif m.group("user"):
        qn = class_name("user", raw("user"))
        meta = {}
        if m.group("user_login"):
            meta["login"] = bare(raw("user_login"))
            b.dep(qn, class_name("login", raw("user_login")), "Login", line)
        if m.group("user_schema"):
            meta["default_schema"] = bare(raw("user_schema"))
        b.symbol("user", bare(raw("user")), qn, at, body, body, meta)
    elif m.group("login"):
        b.symbol("login", bare(raw("login")), class_name("login", raw("login")), at, body, body)
    elif m.group("member") or m.group("sp_role"):
        role, member = (
            (bare(raw("member_role")), bare(raw("member")))
            if m.group("member")
            else (lit("sp_role"), lit("sp_member"))
        )
        qn = f"ALTER ROLE {role} ADD MEMBER {member}"
        b.symbol(
            "membership", f"{member} in {role}", qn, at, body, qn, {"role": role, "member": member}
        )
        b.dep(qn, f"ROLE::{role}", "MemberOf", line)
        for kind in _PRINCIPAL_KINDS:
            b.dep(qn, f"{kind}::{member}", "Principal", line)
    elif m.group("action"):
        permissions = [" ".join(p.split()) for p in raw("permissions").split(",")]
        principals = [bare(p) for p in raw("principals").split(",")]
        klass = m.group("class")
        securable = raw("securable") if m.group("securable") else None
        target = _securable(klass, securable) if securable else None
        on = (
            f" ON {' '.join(klass.split()) + '::' if klass else ''}{bare_qname(securable)}"
            if securable
            else ""
        )
        qn = (
            f"{m.group('action')} {', '.join(permissions)}{on} "
            f"{'FROM' if m.group('action') == 'REVOKE' else 'TO'} {', '.join(principals)}"
        )
        meta = {
            "action": m.group("action"),
            "permissions": permissions,
            "securable": target or (bare_qname(securable) if securable else "DATABASE"),
            "principals": principals,
        }
        b.symbol("permission", qn, qn, at, body, qn, meta)
        b.dep(qn, target, "On", line)
        for principal in principals:
            for kind in _PRINCIPAL_KINDS:
                b.dep(qn, f"{kind}::{principal}", "Principal", line)
    elif m.group("synonym"):
        qn, target = normalize(raw("synonym")), normalize(raw("synonym_for"))
        b.symbol("synonym", last_part(raw("synonym")), qn, at, body, body, {"target": target})
        b.dep(qn, target, "Aliases", line)
    elif m.group("pfunction"):
        name = bare(raw("pfunction"))
        meta = {"input_type": _TYPE_NOISE.sub("", raw("pf_type")).upper()}
        if m.group("pf_range"):
            meta["range"] = m.group("pf_range")
        b.symbol(
            "partition_function", name, class_name("partition_function", name), at, body, body, meta
        )
    elif m.group("pscheme"):
        name = bare(raw("pscheme"))
        qn = class_name("partition_scheme", name)
        groups = list(dict.fromkeys(bare(g) for g in raw("ps_groups").split(",") if g.strip()))
        meta = {"function": bare(raw("ps_function")), "filegroups": groups}
        b.symbol("partition_scheme", name, qn, at, body, body, meta)
        b.dep(qn, class_name("partition_function", raw("ps_function")), "Uses", line)
        for g in groups:
            if g.upper() != "PRIMARY":
                b.dep(qn, class_name("filegroup", g), "StoredOn", line)
    elif m.group("filegroup"):
        name = bare(raw("filegroup"))
        meta = {"contains": m.group("fg_contains")} if m.group("fg_contains") else {}
        b.symbol("filegroup", name, class_name("filegroup", name), at, body, body, meta)
    elif m.group("xml"):
        qn = normalize(raw("xml"))
        header = body.split("\n", 1)[0]
        b.symbol("xml_schema_collection", last_part(raw("xml")), qn, at, body, header)
    elif m.group("policy"):
        qn = normalize(raw("policy"))
        policy_end = len(clean) if limit == len(clean) else limit
        body = batch[m.start() : policy_end].rstrip()
        sym = b.symbol(
            "security_policy", last_part(raw("policy")), qn, at, body, body.split("\n", 1)[0]
        )
        predicates = list(_POLICY_PREDICATE.finditer(clean, m.end(), policy_end))
        sym.metadata["predicates"] = [
            {"function": normalize(p.group("function")), "table": normalize(p.group("table"))}
            for p in predicates
        ]
        for p in predicates:
            b.dep(qn, normalize(p.group("function")), "Executes", line)
            b.dep(qn, normalize(p.group("table")), "On", line)
    elif m.group("assembly"):
        name = bare(raw("assembly"))
        b.symbol(
            "assembly", name, class_name("assembly", name), at, body, body.split("\n", 1)[0][:200]
        )
    elif m.group("setvar"):
        name = m.group("setvar")
        value = batch[
            m.end() : batch.find("\n", m.end()) if "\n" in batch[m.end() :] else len(batch)
        ]
        line_text = batch[m.start() : m.end()] + value
        b.symbol(
            "sqlcmd_variable",
            clean[m.start("setvar") : m.end("setvar")],
            f"$({clean[m.start('setvar') : m.end('setvar')]})",
            at,
            line_text.strip(),
            line_text.strip(),
            {"value": value.strip().strip('"')},
        )
    else:  # pragma: no cover - every alternative has a named group
        raise AssertionError(group)


def bare_qname(name: str | None) -> str:
    """`[Sales].[Orders]` -> `Sales.Orders` (as written, no default schema added)."""
    if not name:
        return ""
    return ".".join(bare(p) for p in _NAME_PART.findall(name.strip()) if p.strip())


_SYSTEM_PROC = re.compile(r"^(?:sys\.|dbo\.(?:sp|xp)_)", re.I)


def _is_system(name: str) -> bool:
    """sys.* objects and sp_/xp_ system procedures are no part of the codebase."""
    return bool(_SYSTEM_PROC.match(name))


_EXTENDED_PROPERTY = re.compile(
    r"\bEXEC(?:UTE)?\s+(?:\[?SYS\]?\s*\.\s*)?\[?SP_ADDEXTENDEDPROPERTY\]?\b", re.I
)
_ARGUMENT = re.compile(r"(?:@(?P<key>\w+)\s*=\s*)?(?:N?'(?P<s>(?:[^']|'')*)'|(?P<v>[\w.]+))", re.S)
_PROPERTY_KEYS = (
    "name",
    "value",
    "level0type",
    "level0name",
    "level1type",
    "level1name",
    "level2type",
    "level2name",
)


def _extended_properties(text: str, clean: str) -> list[dict[str, str]]:
    """`sp_addextendedproperty` calls: their name, value and level names (keyword or positional)."""
    found = []
    for m in _EXTENDED_PROPERTY.finditer(clean):
        end = _STATEMENT_END.search(clean, m.end())
        nxt = _EXTENDED_PROPERTY.search(clean, m.end())
        stop = min(end.start() if end else len(clean), nxt.start() if nxt else len(clean))
        args: dict[str, str] = {}
        for position, a in enumerate(_ARGUMENT.finditer(text, m.end(), stop)):
            value = (
                (a.group("s") or "").replace("''", "'")
                if a.group("s") is not None
                else a.group("v")
            )
            key = a.group("key").lower() if a.group("key") else None
            if key is None and position < len(_PROPERTY_KEYS):
                key = _PROPERTY_KEYS[position]
            if key:
                args[key] = "" if value is None or value.upper() == "NULL" else value
        found.append(args)
    return found


def _describe(b: _Builder, clean: str) -> None:
    """MS_Description / Description extended properties: an object's doc, a column's
    description (SSDT projects keep them next to the object)."""
    if "extendedproperty" not in clean.lower():
        return
    by_name = {s.qualified_name.lower(): s for s in b.symbols}
    for prop in _extended_properties(b.text, clean):
        if prop.get("name", "").lower() not in ("ms_description", "description"):
            continue
        value = " ".join(prop.get("value", "").split())[:300]
        if prop.get("level1name") and prop.get("level0type", "").upper() == "SCHEMA":
            sym = by_name.get(f"{prop.get('level0name', '')}.{prop['level1name']}".lower())
        elif prop.get("level0type", "").upper() == "SCHEMA":
            sym = by_name.get(f"schema::{prop.get('level0name', '')}".lower())
        else:
            sym = None
        if sym is None or not value:
            continue
        level2 = prop.get("level2type", "").upper()
        if level2 == "COLUMN":
            for col in sym.metadata.get("columns", []):
                if col["name"].lower() == prop.get("level2name", "").lower():
                    col["description"] = value
            continue
        if level2 == "TRIGGER":  # a trigger is named in its table's schema
            schema = sym.qualified_name.split(".")[0]
            sym = by_name.get(f"{schema}.{prop.get('level2name', '')}".lower())
        elif level2:  # an index or constraint of the table: its own node, if any
            sym = by_name.get(f"{sym.qualified_name}.{prop.get('level2name', '')}".lower())
        if sym is not None and not sym.doc:
            sym.doc = value


def extract(text: str, path: str | None = None) -> tuple[list[Symbol], list[Dependency]]:
    """SQL objects defined in a script and what each reads, writes, executes and references.

    Objects: tables, views, procedures, functions, triggers, indexes, sequences, types,
    synonyms, XML schema collections, security policies, schemas (tSQLt test classes too),
    roles, users, logins, role memberships, permissions, partition functions and schemes,
    filegroups, assemblies, sqlcmd variables, and one `script` node for the statements of
    a file outside any object (post-deployment and seed scripts: PRINT, INSERT, MERGE).
    path names that script node.
    """
    b = _Builder(text, path)
    clean_all = blank(text)
    loose: list[tuple[int, str]] = []  # batches that define nothing
    for start, batch in batches(text):
        clean = clean_all[start : start + len(batch)]
        up = upper_ascii(clean)
        found = [(m.start(), "create", m) for m in _CREATE.finditer(clean)]
        if any(word in up for word in _DEFINE_WORDS):  # most batches define none of these
            found += [(m.start(), "define", m) for m in _DEFINE.finditer(up)]
        found.sort(key=lambda item: item[0])
        defined = False
        routine_at = -1  # a procedure, view, function or trigger runs to the end of its batch
        for index, (at, what, m) in enumerate(found):
            if routine_at >= 0:
                break
            limit = found[index + 1][0] if index + 1 < len(found) else len(batch)
            if what == "define":
                _define(b, m, clean, batch, start, limit)
                defined = True
                continue
            raw_kind = m.group("kind").lower().split()[-1]
            kind = "index" if raw_kind == "index" else _KIND.get(raw_kind, raw_kind)
            if not is_object_name(m.group("name")) and not (
                kind == "procedure" and bare(m.group("name")).startswith("#")
            ):
                continue  # CREATE TABLE #temp (a temporary procedure is code: kept)
            defined = True
            if kind in _ROUTINES:
                routine_at = at
            _object(b, m, kind, clean, batch, start, limit)
        if not defined and batch.strip():
            loose.append((start, batch))
    if loose:
        _script(b, loose, bool(b.symbols))
    _sqlcmd_uses(b)
    _describe(b, clean_all)
    return b.symbols, list(dict.fromkeys(b.deps))


def _object(
    b: _Builder, m: re.Match[str], kind: str, clean: str, batch: str, start: int, limit: int
) -> None:
    """A CREATE (or ALTER) of a table, view, routine, trigger, index, sequence or type.

    limit: where the next definition in the batch starts.
    """
    temporary = bare(m.group("name")).startswith("#")
    qn = bare(m.group("name")) if temporary else normalize(m.group("name"))
    line = _line(b.text, start + m.start())
    if kind == "table" and m.group(0).upper().startswith("ALTER"):
        clause = clean[m.end() : m.end() + _stmt_len(clean, m.end())]
        _alter_table(qn, clause, line, b.symbols, b.deps)
        return
    # A table, index, sequence or type runs to the next definition in the batch; a routine
    # to the batch end (T-SQL makes it the batch's only statement).
    end = limit if kind in ("table", "index", "sequence", "type") else len(batch)
    body = batch[m.start() : end].rstrip()
    header = body[: header_end(body)] if kind in _ROUTINES else ""
    sym = b.symbol(
        kind,
        last_part(m.group("name")),
        qn,
        start + m.start(),
        body,
        header or body.split("\n", 1)[0],
    )
    if kind == "index":
        on = _INDEX_ON.search(clean, m.end())
        table = normalize(on.group("table")) if on else ""
        sym.qualified_name = f"{table}.{sym.name}" if table else qn
        if on is not None and table:
            b.dep(sym.qualified_name, table, "On", line)
            placed = _CONSTRAINT_ON.match(clean, _closing_paren(clean, clean.find("(", on.end())))
            if placed and "(" in clean[on.end() : limit]:
                edge, target = _storage(placed)
                b.dep(sym.qualified_name, target, edge, line)
        return
    if kind == "table" or (kind == "type" and _TABLE_TYPE.match(upper_ascii(clean), m.end())):
        meta, uses, storage = _table_shape(body)
        sym.metadata.update(meta)
        if kind == "type":
            sym.metadata["table_type"] = True
        for fk in meta["foreign_keys"]:
            b.dep(qn, fk["references"], "FK", line)
        for name in uses:
            b.dep(qn, name, "Uses", line)
        for edge, name in storage:
            b.dep(qn, name, edge, line)
        return
    if kind == "type":
        alias = _ALIAS_TYPE.match(clean, m.end())
        if alias:
            shown, _ = sql_type(alias.group("type"), alias.group("args") or "")
            sym.metadata.update(
                {"base_type": shown, "nullable": not _NOT_NULL.search(alias.group("rest") or "")}
            )
        return
    if kind == "sequence":
        seq = _SEQUENCE_SHAPE.search(upper_ascii(body))
        if seq and seq.group("type"):
            sym.metadata["type"] = _TYPE_NOISE.sub("", seq.group("type"))
        return
    if kind in ("procedure", "function"):
        params = _parameters(kind, header)
        sym.metadata["parameters"] = [
            {"name": p[0], "type": _TYPE_NOISE.sub("", p[1]).upper(), "output": bool(p[3])}
            for p in params
        ]
        for p in params:  # a table-valued or alias-typed parameter uses its type
            b.dep(qn, _user_type(p[1]), "Uses", line)
        if kind == "function":
            sym.metadata.update(_function_shape(header))
    # The body after the header: a trigger's `AFTER INSERT, UPDATE` is not DML.
    refs = references(body[len(header) if header else m.end() - m.start() :])
    if kind == "trigger":
        on = _INDEX_ON.search(clean, m.end())
        if on and on.group("table").upper() not in ("DATABASE", "ALL"):
            table = normalize(on.group("table"))
            b.dep(qn, table, "On", line)
            refs.reads = [r for r in refs.reads if r != table]
    sym.metadata.update(
        {
            "reads": refs.reads,
            "writes": refs.writes,
            "executes": refs.executes,
            "operations": refs.operations,
            "transaction": refs.transaction,
            "try_catch": refs.try_catch,
        }
    )
    body_up = upper_ascii(body)  # substring gates: most bodies use no sequence, no tSQLt
    sequences: list[str] = []
    tested: list[str] = []
    if "NEXT" in body_up:
        found = _NEXT_VALUE.finditer(blank(body))
        sequences = list(dict.fromkeys(normalize(s.group("name")) for s in found))
    if "TSQLT" in body_up:
        tests = _TEST_API.finditer(blank_comments(body))
        tested = list(dict.fromkeys(normalize(t.group("name")) for t in tests))
    if sequences:
        sym.metadata["sequences"] = sequences
    if tested:
        sym.metadata["tests"] = tested
    if kind == "procedure" and sym.name.lower().startswith("test") and "." in qn:
        sym.metadata["test"] = True  # tSQLt: a `test...` procedure of a test class
    b.deps += [Dependency(qn, r, "ReadsFrom", line) for r in refs.reads if r != qn]
    b.deps += [Dependency(qn, w, "WritesTo", line) for w in refs.writes if w != qn]
    b.deps += [Dependency(qn, e, "Executes", line) for e in refs.executes if e != qn]
    b.deps += [Dependency(qn, s, "Uses", line) for s in sequences]
    b.deps += [Dependency(qn, t, "Tests", line) for t in tested if t != qn]


_TABLE_TYPE = re.compile(r"\s+AS\s+TABLE\b")
_ALIAS_TYPE = re.compile(
    rf"\s+FROM\s+(?P<type>(?:{NAME}\s*\.\s*)?{NAME})(?P<args>\s*\([^()]*\))?(?P<rest>\s+(?:NOT\s+)?NULL)?",
    re.I,
)
_SEQUENCE_SHAPE = re.compile(rf"\bAS\s+(?P<type>{QNAME})")


def blank_comments(text: str) -> str:
    """Comments replaced by spaces, string literals kept (tSQLt names objects in strings)."""
    return _LEX.sub(lambda m: m.group(0) if m.group(0)[0] in "'[" else _spaces(m.group(0)), text)


def _script(b: _Builder, loose: list[tuple[int, str]], has_objects: bool) -> None:
    """One `script` node for the batches of a file outside any object (deployment, seed and
    test-run scripts). Beside objects, only batches that touch tables or procedures count."""
    if has_objects:  # beside objects, a batch that runs no DML or procedure is boilerplate
        loose = [(s, bt) for s, bt in loose if _DOES_WORK.search(upper_ascii(blank(bt)))]
        if not loose:
            return
    if has_objects:
        refs = [(start, batch, references(batch)) for start, batch in loose]
        refs = [
            (s, bt, r)
            for s, bt, r in refs
            if r.reads or r.writes or any(not _is_system(e) for e in r.executes)
        ]
        if not refs:
            return
        loose = [(s, bt) for s, bt, _ in refs]
    text = "\nGO\n".join(batch.strip("\n") for _, batch in loose)
    if not has_objects:  # one scan of the whole script, not one per batch
        refs = [(loose[0][0], text, references(text))]
    first, last = loose[0], loose[-1]
    name = PurePath(b.path).stem if b.path else "script"
    qn = f"SCRIPT::{b.path}" if b.path else "SCRIPT::script"
    reads = list(dict.fromkeys(n for _, _, r in refs for n in r.reads))
    writes = list(dict.fromkeys(n for _, _, r in refs for n in r.writes))
    executes = list(dict.fromkeys(n for _, _, r in refs for n in r.executes if not _is_system(n)))
    ops = sorted({op for _, _, r in refs for op in r.operations})
    code_lines = [
        ln.strip() for ln in blank_comments(text).split("\n") if ln.strip() and not _GO.match(ln)
    ]
    sym = b.symbol(
        "script",
        name,
        qn,
        first[0] + (len(first[1]) - len(first[1].lstrip("\n"))),
        text,
        code_lines[0] if code_lines else name,
        {
            "reads": reads,
            "writes": writes,
            "executes": executes,
            "operations": ops,
            "transaction": any(r.transaction for _, _, r in refs),
            "try_catch": any(r.try_catch for _, _, r in refs),
        },
    )
    sym.end_line = _line(b.text, last[0] + len(last[1].rstrip()))
    line = sym.start_line
    b.deps += [Dependency(qn, r, "ReadsFrom", line) for r in reads]
    b.deps += [Dependency(qn, w, "WritesTo", line) for w in writes]
    b.deps += [Dependency(qn, e, "Executes", line) for e in executes]


_DOES_WORK = re.compile(r"\b(?:SELECT|INSERT|UPDATE|DELETE|MERGE|TRUNCATE|EXEC(?:UTE)?)\b")


def _sqlcmd_uses(b: _Builder) -> None:
    """`$(DatabaseName)` in an object: the object uses that sqlcmd variable."""
    if "$(" not in b.text:
        return
    for sym in b.symbols:
        if sym.kind == "sqlcmd_variable" or "$(" not in sym.text:
            continue
        # sqlcmd substitutes inside strings too (`IF '$(DatabaseName)' = ...`), not in comments.
        code = blank_comments(sym.text)
        names = list(dict.fromkeys(m.group("name") for m in _SQLCMD_VAR.finditer(code)))
        if names:
            sym.metadata["sqlcmd_variables"] = names
            b.deps += [
                Dependency(sym.qualified_name, f"$({n})", "Uses", sym.start_line) for n in names
            ]
