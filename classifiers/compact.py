"""Code-aware compaction: SQL object summaries and C# skeletons that say what they elide.

The result is never longer in tokens than the input (else the input comes back
unchanged) and never a bare header: every elision is stated in the text.
Deterministic: same text, same budget, same output.
"""

from __future__ import annotations

import re
from typing import Any

from classifiers import csharp, tsql
from classifiers.model import Symbol

_VISIBILITY_RANK = {"public": 0, "protected": 1, "internal": 1, "private": 3}


def _counter(counter: Any) -> Any:
    if counter is None:
        from runtime.context.tokens import get_counter

        counter = get_counter()
    return counter


# --- SQL ----------------------------------------------------------------------


def _columns(sym: Symbol) -> list[str]:
    """Every column of a table or table type, one a line: name, type (or computed
    expression), period marker, nullability, key and reference."""
    m = sym.metadata
    pk = set(m.get("primary_key", []))
    fks = {c: fk["references"] for fk in m.get("foreign_keys", []) for c in fk["columns"]}
    lines = []
    for col in m.get("columns", []):
        name = col["name"] if tsql.is_plain_name(col["name"]) else f"[{col['name']}]"
        parts = [name]
        if "computed" in col:
            parts.append(f"AS {col['computed']}")
        else:
            parts.append(col["type"])
            if col.get("generated"):
                parts.append(f"GENERATED ALWAYS AS {col['generated']}")
            if not col.get("nullable"):
                parts.append("NOT NULL")
        if col["name"] in pk:
            parts.append("PRIMARY KEY")
        if col["name"] in fks:
            parts.append(f"REFERENCES {fks[col['name']]}")
        lines.append("    " + " ".join(p for p in parts if p) + ",")
    return lines


def _one_line(text: str, limit: int = 400) -> str:
    """A statement on one line, comments dropped (a `--` comment would swallow the rest)."""
    flat = " ".join(tsql.blank_comments(text).split())
    return flat if len(flat) <= limit else flat[:limit] + " …"


def _header(sym: Symbol) -> list[str]:
    """A routine's header as written up to its AS: every parameter with its type, default,
    OUTPUT and READONLY (comments dropped, one parameter a line as the source has them)."""
    head = tsql.blank_comments(sym.text[: tsql.header_end(sym.text)])
    lines = [" ".join(line.split()) for line in head.split("\n")]
    return [("    " + line if i else line) for i, line in enumerate(lines) if line] or [
        sym.signature
    ]


_STATEMENT_KINDS = (
    "index",
    "sequence",
    "schema",
    "role",
    "user",
    "login",
    "membership",
    "permission",
    "synonym",
    "partition_function",
    "partition_scheme",
    "filegroup",
    "sqlcmd_variable",
    "assembly",
)


def _sql_object(sym: Symbol) -> list[str]:
    m = sym.metadata
    span = sym.end_line - sym.start_line + 1
    if sym.kind == "table":
        return [
            f"CREATE TABLE {sym.qualified_name} (",
            *_columns(sym),
            f")  -- compacted: constraints and defaults elided ({span} lines)",
        ]
    if sym.kind == "type" and m.get("table_type"):
        return [
            f"CREATE TYPE {sym.qualified_name} AS TABLE (",
            *_columns(sym),
            f")  -- compacted: keys and options elided ({span} lines)",
        ]
    if sym.kind in _STATEMENT_KINDS or sym.kind == "type":
        return [_one_line(sym.text)]
    if sym.kind == "xml_schema_collection":
        return [
            f"CREATE XML SCHEMA COLLECTION {sym.qualified_name} AS N'…'  -- schema elided ({span} lines)"
        ]
    if sym.kind == "security_policy":
        lines = [sym.signature]
        lines += [
            f"    -- predicate {p['function']} ON {p['table']}" for p in m.get("predicates", [])
        ]
        return [*lines, f"  -- options elided ({span} lines)"]
    lines = [f"-- script {sym.name}"] if sym.kind == "script" else _header(sym)
    for key, label in (
        ("reads", "reads"),
        ("writes", "writes"),
        ("executes", "executes"),
        ("sequences", "uses sequences"),
        ("tests", "tests"),
    ):
        if m.get(key):
            lines.append(f"  -- {label}: {', '.join(m[key])}")
    if m.get("operations"):
        lines.append(f"  -- operations: {', '.join(m['operations'])}")
    shape = [
        s
        for s, on in (("TRANSACTION", m.get("transaction")), ("TRY/CATCH", m.get("try_catch")))
        if on
    ]
    if shape:
        lines.append(f"  -- shape: {' + '.join(shape)}")
    what = "statements" if sym.kind == "script" else "body"
    lines.append(f"  -- {what} elided ({span} lines)")
    return lines


def compact_sql(text: str) -> str:
    """Headers, parameters, columns and keys, and what each body reads and writes."""
    symbols, _ = tsql.extract(text)
    if not symbols:
        return text
    out = ["-- compacted T-SQL: object headers and body summaries"]
    for sym in symbols:
        out += _sql_object(sym)
        out.append("GO")
    return "\n".join(out)


# --- C# -----------------------------------------------------------------------


def _rank(sym: Symbol) -> int:
    mods = sym.metadata.get("modifiers", [])
    ranks = [_VISIBILITY_RANK[m] for m in mods if m in _VISIBILITY_RANK]
    base = min(ranks) if ranks else 2  # no modifier: private by default for members
    if sym.kind in ("class", "record", "struct", "interface", "enum", "namespace"):
        return -1
    return 0 if sym.metadata.get("in_interface") else base


def _bodiless(text: str) -> bool:
    """Interface and abstract members: a signature ending in `;` with no body."""
    return text.rstrip().endswith(";") and "{" not in text and "=>" not in text


def _enum_members(text: str) -> list[str]:
    """Enum member names (values and attributes dropped)."""
    inner = text[text.find("{") + 1 : text.rfind("}")]
    inner = re.sub(r"//[^\n]*|/\*.*?\*/|\[[^\]]*\]", "", inner, flags=re.S)
    return [m.split("=")[0].strip() for m in inner.split(",") if m.strip()]


def _skeleton_lines(symbols: list[Symbol], keep: set[str], usings: int) -> list[str]:
    lines: list[str] = [f"// {usings} using directive(s) elided"] if usings else []
    open_types: list[str] = []
    elided = 0
    for sym in symbols:
        if sym.kind == "namespace":
            lines.append(f"namespace {sym.qualified_name};")
            continue
        while open_types and not sym.qualified_name.startswith(open_types[-1] + "."):
            open_types.pop()
            lines.append("    " * len(open_types) + "}")
        if sym.qualified_name not in keep:
            elided += 1
            continue
        indent = "    " * len(open_types)
        if sym.doc:
            lines.append(f"{indent}/// {sym.doc}")
        sig = sym.signature
        if sym.kind == "program":
            span = sym.end_line - sym.start_line + 1
            lines.append(f"{indent}// Program.Main: top-level statements, {span} line(s) elided")
        elif sym.kind == "endpoint":
            lines.append(f"{indent}// endpoint {sig}")
        elif sym.kind in ("field", "event"):
            lines.append(indent + sig)
        elif sym.kind in ("class", "record", "struct", "interface", "enum"):
            if sig.endswith(";"):
                lines.append(indent + sig)
            elif sym.kind == "enum":
                lines.append(f"{indent}{sig} {{ {', '.join(_enum_members(sym.text))} }}")
            else:
                lines.append(f"{indent}{sig} {{")
                open_types.append(sym.qualified_name)
                if sym.metadata.get("fields"):
                    lines.append(f"{indent}    // {sym.metadata['fields']} field(s) elided")
        elif sym.kind == "property":
            tail = sym.text.rsplit("}", 1)[-1] if "{" in sym.text else ""
            note = "  // initializer elided" if "=" in tail else ""
            lines.append(indent + sig + ("" if sig.endswith((";", "}")) else ";") + note)
        elif _bodiless(sym.text):
            lines.append(indent + sig + ("" if sig.endswith(";") else ";"))
        else:
            body = sym.end_line - sym.start_line + 1
            lines.append(f"{indent}{sig} {{ /* body elided: {body} line(s) */ }}")
    while open_types:
        open_types.pop()
        lines.append("    " * len(open_types) + "}")
    if elided:
        lines.append(f"// {elided} lower-priority member(s) elided to fit the budget")
    return lines


def compact_dotnet(text: str, budget_tokens: int | None = None, counter: Any = None) -> str:
    """A skeleton: namespace, types, member signatures with their first doc line."""
    symbols, _, usings, _ = csharp.extract(text)
    if not any(s.kind != "namespace" for s in symbols):
        # A member on its own (an indexed method node): parse it inside a throwaway class.
        wrapped, _, _, _ = csharp.extract(f"class __Snippet__ {{\n{text}\n}}")
        symbols = [s for s in wrapped if s.qualified_name != "__Snippet__"]
        for s in symbols:
            s.qualified_name = s.qualified_name.removeprefix("__Snippet__.")
        if not symbols:
            return text
    interfaces = {s.qualified_name for s in symbols if s.kind == "interface"}
    for s in symbols:
        if s.parent in interfaces:
            s.metadata["in_interface"] = True  # interface members are public
    keep = {s.qualified_name for s in symbols}
    out = _skeleton_lines(symbols, keep, len(usings))
    if budget_tokens is not None:
        counter = _counter(counter)
        # Drop the least important first: private before public, constructors, later members.
        dropped: list[str] = []
        order = sorted(
            (s for s in symbols if _rank(s) >= 0),
            key=lambda s: (-_rank(s), s.kind != "constructor", -s.start_line),
        )
        for sym in order:
            if counter.count("\n".join(out)) <= budget_tokens:
                break
            keep.discard(sym.qualified_name)
            dropped.append(sym.qualified_name)
            out = _skeleton_lines(symbols, keep, len(usings))
        for qn in reversed(dropped[:-1]):  # refill: a smaller, more important member may fit
            keep.add(qn)
            trial = _skeleton_lines(symbols, keep, len(usings))
            if counter.count("\n".join(trial)) <= budget_tokens:
                out = trial
            else:
                keep.discard(qn)
    return "\n".join(out)


# --- entry point ------------------------------------------------------------------


def _truncate(text: str, budget: int, counter: Any) -> str:
    total = counter.count(text)
    if total <= budget:
        return text
    marker = f"\n/* … truncated: {total} tokens, kept about {budget} */"
    kept = counter.truncate(text, max(0, budget - counter.count(marker)))
    return kept + marker


def compact(text: str, language: str, budget_tokens: int | None = None, counter: Any = None) -> str:
    """Compact code for a prompt; never longer in tokens than the input."""
    if language == "sql":
        result = compact_sql(text)
    elif language == "dotnet":
        result = compact_dotnet(text, budget_tokens, counter)
    else:
        result = text
    counter = _counter(counter)
    if budget_tokens is not None:
        result = _truncate(result, budget_tokens, counter)
    if result != text and counter.count(result) >= counter.count(text):
        return text
    return result
