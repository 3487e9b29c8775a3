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
    rf"\bUPDATE\s+(?P<alias>{NAME})\s+SET\b.*?\bFROM\s+(?P<name>{QNAME})\s+"
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
_SQL_EVIDENCE = re.compile(
    r"\b(CREATE\s+(OR\s+ALTER\s+)?(PROC(EDURE)?|TABLE|VIEW|FUNCTION|TRIGGER|(UNIQUE\s+)?"
    r"(NON)?(CLUSTERED\s+)?INDEX)\s+[\w\[#]|"
    r"ALTER\s+(TABLE|PROC(EDURE)?)\s+[\w\[]|SELECT\s+(TOP\s*\(?\s*\w+\)?\s+)?[\w\*\[@(][^;]{0,400}?\bFROM\s+[\w\[@#]|"
    r"SELECT\s+@@\w+|SELECT\s+@\w+\s*=|SELECT\s+\[?\w+\]?\.\w+\s*\(|"
    r"INSERT\s+INTO\s+[\w\[@#]|UPDATE\s+[\w\[\].]+\s+SET\s+[\w\[]|DELETE\s+(\w+\s+)?FROM\s+[\w\[]|"
    r"BEGIN\s+TRAN(SACTION)?\b|DECLARE\s+@\w+|SET\s+NOCOUNT\s+ON|"
    r"EXEC(UTE)?\s+(\[?\w+\]?\.\[?\w+|sp_\w+|usp_\w+)|RAISERROR\s*\(|THROW\s+\d+\s*,|BEGIN\s+TRY\b|"
    r"PRIMARY\s+KEY\s*(CLUSTERED|NONCLUSTERED|\()|FOREIGN\s+KEY\s*\(|N?VARCHAR\s*\(\s*(\d+|MAX)\s*\)|"
    r"DROP\s+(TABLE|INDEX|PROC(EDURE)?|VIEW)\s+[\w\[]|TRUNCATE\s+TABLE\s+[\w\[])",
    re.S,
)


_DOT = re.compile(r"\s*\.\s*")
_BEGIN_TRAN = re.compile(r"\bBEGIN\s+TRAN(SACTION)?\b", re.I)
_BEGIN_TRY = re.compile(r"\bBEGIN\s+TRY\b", re.I)
_LEX = re.compile(r"--[^\n]*|/\*.*?(?:\*/|\Z)|'(?:[^']|'')*(?:'|\Z)", re.S)


def _spaces(chunk: str) -> str:
    if "\n" not in chunk:
        return " " * len(chunk)
    return "\n".join(" " * len(part) for part in chunk.split("\n"))


def _blank_match(m: re.Match[str]) -> str:
    tok = m.group(0)
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


@functools.lru_cache(maxsize=8192)
def normalize(name: str) -> str:
    """`[dbo].[Orders]`, `dbo.Orders`, `Orders` -> `dbo.Orders`; 3-part names keep the last two."""
    parts = [p.strip().strip('[]"') for p in _DOT.split(name.strip())]
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


def sql_evidence(text: str, stop_at: int = 0) -> int:
    """Number of distinct T-SQL constructs found outside comments and strings.

    stop_at: stop counting once that many are found (0: count them all).
    """
    seen: set[str] = set()
    for m in _SQL_EVIDENCE.finditer(upper_ascii(blank(text))):
        seen.add(m.group(0).split(None, 1)[0])
        if len(seen) == stop_at:
            break
    return len(seen)


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


_COLUMN = re.compile(
    rf"^\s*(?P<name>{NAME})\s+(?P<type>[A-Za-z_]\w*(?:\s*\([^)]*\))?)(?P<rest>[^\n]*)", re.M
)
_PK_CONSTRAINT = re.compile(r"PRIMARY\s+KEY(?:\s+(?:NON)?CLUSTERED)?\s*\((?P<cols>[^)]*)\)", re.I)
_FK_CONSTRAINT = re.compile(
    rf"FOREIGN\s+KEY\s*\((?P<cols>[^)]*)\)\s*REFERENCES\s+(?P<ref>{QNAME})"
    rf"\s*\((?P<refcols>[^)]*)\)",
    re.I,
)
_NOT_COLUMNS = {"constraint", "primary", "foreign", "unique", "check", "index", "period"}


def _col(spec: str) -> str:
    """`[Id] ASC` -> `Id`."""
    return spec.split()[0].strip('[]"')


def table_columns(body: str) -> dict[str, object]:
    """Columns (name, type, nullable, pk), primary key and foreign keys of a CREATE TABLE."""
    clean = blank(body)
    start = clean.find("(")
    inner = clean[start + 1 : clean.rfind(")")] if start != -1 else ""
    columns, pk, fks = [], [], []
    for m in _COLUMN.finditer(inner):
        name = m.group("name").strip('[]"')
        if name.lower() in _NOT_COLUMNS:
            continue
        rest = m.group("rest")
        col = {
            "name": name,
            "type": m.group("type").upper().replace(" ", ""),
            "nullable": "NOT NULL" not in rest.upper(),
        }
        if re.search(r"PRIMARY\s+KEY", rest, re.I):
            col["pk"] = True
            pk.append(name)
        ref = _FK.search(rest)
        if ref:
            fks.append({"columns": [name], "references": normalize(ref.group("name"))})
        columns.append(col)
    for m in _PK_CONSTRAINT.finditer(inner):
        pk += [_col(c) for c in m.group("cols").split(",") if c.strip()]
    for col in columns:  # a key declared by a table constraint marks its columns too
        if col["name"] in pk:
            col["pk"] = True
    for m in _FK_CONSTRAINT.finditer(inner):
        fks.append(
            {
                "columns": [_col(c) for c in m.group("cols").split(",") if c.strip()],
                "references": normalize(m.group("ref")),
            }
        )
    unique_fks = list({(tuple(f["columns"]), f["references"]): f for f in fks}.values())
    return {"columns": columns, "primary_key": list(dict.fromkeys(pk)), "foreign_keys": unique_fks}


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


def _header_end(body: str) -> int:
    """Offset of the AS that starts a routine's body (`@p AS INT` is a parameter)."""
    clean = blank(body)
    for m in _AS.finditer(clean):
        if not _word_before(clean, m.start()).startswith("@"):
            return m.start()
    return 0


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


def extract(text: str) -> tuple[list[Symbol], list[Dependency]]:
    """SQL objects defined in a script and what each reads, writes, executes and references."""
    symbols: list[Symbol] = []
    deps: list[Dependency] = []
    clean_all = blank(text)
    for start, batch in batches(text):
        clean = clean_all[start : start + len(batch)]
        for m in _CREATE.finditer(clean):
            raw_kind = m.group("kind").lower().split()[-1]
            kind = "index" if raw_kind == "index" else _KIND.get(raw_kind, raw_kind)
            if not is_object_name(m.group("name")):
                continue  # CREATE TABLE #temp
            qn = normalize(m.group("name"))
            if kind == "table" and m.group(0).upper().startswith("ALTER"):
                clause = clean[m.end() : m.end() + _stmt_len(clean, m.end())]
                _alter_table(qn, clause, _line(text, start + m.start()), symbols, deps)
                continue
            # An object's text runs to the next definition in this batch (usually the batch end).
            nxt = _CREATE.search(clean, m.end())
            end = (
                nxt.start()
                if nxt and kind in ("table", "index", "sequence", "type")
                else len(batch)
            )
            body = batch[m.start() : end].rstrip()
            line = _line(text, start + m.start())
            header = body[: _header_end(body)] if kind in _ROUTINES else ""
            sym = Symbol(
                kind=kind,
                name=qn.split(".")[-1],
                qualified_name=qn,
                language="sql",
                start_line=line,
                end_line=line + body.count("\n"),
                text=body,
                signature=" ".join((header or body.split("\n", 1)[0]).split())[:300],
                doc=doc_before(text, start + m.start()),
            )
            if kind == "index":
                on = _INDEX_ON.search(clean, m.end())
                table = normalize(on.group("table")) if on else ""
                sym.qualified_name = f"{table}.{qn.split('.')[-1]}" if table else qn
                if table:
                    deps.append(Dependency(sym.qualified_name, table, "On", line))
            elif kind == "table":
                sym.metadata.update(table_columns(body))
                for fk in sym.metadata["foreign_keys"]:
                    deps.append(Dependency(qn, fk["references"], "FK", line))
            else:
                if kind in ("procedure", "function"):
                    sym.metadata["parameters"] = [
                        {
                            "name": p[0],
                            "type": _TYPE_NOISE.sub("", p[1]).upper(),
                            "output": bool(p[3]),
                        }
                        for p in _PARAMS.findall(header or "")
                    ]
                # The body after the header: a trigger's `AFTER INSERT, UPDATE` is not DML.
                refs = references(body[len(header) if header else m.end() - m.start() :])
                if kind == "trigger":
                    on = _INDEX_ON.search(clean, m.end())
                    if on:
                        deps.append(Dependency(qn, normalize(on.group("table")), "On", line))
                        refs.reads = [r for r in refs.reads if r != normalize(on.group("table"))]
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
                deps += [Dependency(qn, r, "ReadsFrom", line) for r in refs.reads if r != qn]
                deps += [Dependency(qn, w, "WritesTo", line) for w in refs.writes if w != qn]
                deps += [Dependency(qn, e, "Executes", line) for e in refs.executes if e != qn]
            symbols.append(sym)
    return symbols, list(dict.fromkeys(deps))
