"""Classify a text as SQL, DOTNET, DOTNET_WITH_SQL or UNKNOWN, with a confidence and reasons.

C# evidence comes from tree-sitter (declarations found, error share of the tree),
T-SQL evidence from the comment- and string-aware scanner. Java, TypeScript,
config and prose have their own tell-tales and come out UNKNOWN.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from classifiers import csharp, tsql
from classifiers.model import LANGUAGE_OF_KIND, Classification

_CS_SIGNALS = [
    ("namespace", re.compile(r"^\s*namespace\s+[\w.]+\s*[;{]?", re.M)),
    (
        "using directive",
        re.compile(
            r"^[ \t]*(global\s+)?using\s+(static\s+)?(\w+\s*=\s*)?(global::)?[\w.]+(<[\w<>, .]*>)?\s*;",
            re.M,
        ),
    ),
    (
        "type declaration",
        re.compile(
            r"\b(public|internal|private|protected|sealed|static|abstract|partial)\s+"
            r"(sealed\s+|static\s+|abstract\s+|partial\s+|readonly\s+)*(class|record|struct|interface|enum)\s+\w+"
        ),
    ),
    (
        "typed member",
        re.compile(
            r"\b(public|private|protected|internal)\s+(static\s+|async\s+|override\s+|virtual\s+|readonly\s+)*"
            r"[\w<>\[\],?. ]+\s+\w+\s*(\(|\{\s*get)"
        ),
    ),
    (
        "attribute",
        re.compile(
            r"^\s*\[(HttpGet|HttpPost|Route|ApiController|Fact|Key|Table|Required|"
            r"Column|Authorize|Test)\b",
            re.M,
        ),
    ),
    ("async/await", re.compile(r"\bawait\s+\w|\bTask<")),
]
# Asked only when no signal above is found: files with nothing but these (AssemblyInfo.cs,
# GlobalSuppressions.cs, Program.cs) are few, and most texts need not be scanned for them.
_CS_FILE_SIGNALS = [
    ("assembly attribute", re.compile(r"^[ \t]*\[assembly:\s*[\w.]+", re.M)),
    (
        # Top-level statements (Program.cs): `var builder = WebApplication.CreateBuilder(args);`,
        # `builder.Services.AddGrpc();`: a PascalCase member chain ending in `);` (Java and
        # JavaScript members are camelCase).
        "top-level statements",
        re.compile(
            r"^[ \t]*(var\s+\w+\s*=\s*[A-Z]\w*|(await\s+)?[a-z_]\w*)(\.[A-Z]\w*)+(<[^>\n]*>)?"
            r"\([^\n]*\)\s*;[ \t]*$",
            re.M,
        ),
    ),
]
_NOT_CS = [
    ("php", re.compile(r"^\s*<\?php\b")),  # `namespace X;` and `use X;` parse as C#
    ("java package", re.compile(r"^\s*package\s+[\w.]+\s*;", re.M)),
    ("java import", re.compile(r"^\s*import\s+(java|javax|org|com)\.", re.M)),
    (
        "java keywords",
        re.compile(r"\bclass\s+\w+(<[^>]*>)?\s+(extends|implements)\b|\)\s*throws\s+\w+|@Override"),
    ),
    (
        "typescript/javascript",
        re.compile(
            r"^\s*(export\s+(default\s+)?(class|function|const|interface)|"
            r"import\s+.*\s+from\s+['\"]|function\s+\w+\s*\(|const\s+\w+\s*=)",
            re.M,
        ),
    ),
    (
        "python",
        re.compile(
            r"^\s*(def\s+\w+\(.*\)\s*(->\s*[\w\[\], .]+)?:|from\s+[\w.]+\s+import\s|import\s+\w+$)",
            re.M,
        ),
    ),
]
# Literals without which a signal's regex cannot match: checking them first (a plain
# substring test) skips the regex on most texts.
_GATES = {
    "namespace": ("namespace",),
    "using directive": ("using",),
    "assembly attribute": ("[assembly:",),
    # Program.cs starts with `var builder = ...` or `await ...`: SQL and prose seldom hold
    # either, and the line-anchored scan is then skipped.
    "top-level statements": ("var ", "await "),
    "type declaration": ("class", "record", "struct", "interface", "enum"),
    "typed member": ("public", "private", "protected", "internal"),
    "attribute": ("[",),
    "async/await": ("await", "Task<"),
    "java keywords": ("extends", "implements", "throws", "@Override"),
    "php": ("<?php",),
    "java package": ("package",),
    "java import": ("import",),
    "typescript/javascript": ("export", "import", "function", "const"),
    "python": ("def", "from", "import"),
}
_CODE_EXT = {".cs": "dotnet", ".csx": "dotnet", ".sql": "sql"}
_OTHER_EXT = {
    ".json",
    ".xml",
    ".yaml",
    ".yml",
    ".md",
    ".txt",
    ".py",
    ".js",
    ".ts",
    ".java",
    ".config",
    ".csproj",
    ".props",
    ".html",
    ".css",
    ".ini",
    ".toml",
}


_DECLS = {
    "class_declaration",
    "interface_declaration",
    "record_declaration",
    "struct_declaration",
    "enum_declaration",
    "method_declaration",
    "constructor_declaration",
    "property_declaration",
    "namespace_declaration",
    "file_scoped_namespace_declaration",
    # A file of `global using` lines, `[assembly: ...]` attributes or top-level statements
    # (Program.cs) declares nothing else.
    "using_directive",
    "global_attribute",
    "global_statement",
}
# Where declarations can sit; bodies (blocks, expressions) are not walked.
_CONTAINERS = {
    "compilation_unit",
    "declaration_list",
    "namespace_declaration",
    "file_scoped_namespace_declaration",
    "class_declaration",
    "interface_declaration",
    "record_declaration",
    "struct_declaration",
    "global_statement",
    "ERROR",
}


def _error_bytes(node: object) -> int:
    total, stack = 0, [node]
    while stack:
        n = stack.pop()
        if n.type == "ERROR" or n.is_missing:  # type: ignore[attr-defined]
            total += n.end_byte - n.start_byte + 1  # type: ignore[attr-defined]
        elif n.has_error:  # type: ignore[attr-defined]
            stack.extend(n.children)  # type: ignore[attr-defined]
    return total


def _cs_parse_evidence(text: str) -> tuple[int, float]:
    """(declarations found, error share) from tree-sitter, wrapping bare members in a class."""
    best = (0, 1.0)
    for candidate in (text, f"class __Snippet__ {{\n{text}\n}}"):
        root = csharp.parse(candidate).root_node
        decls, stack = 0, [root]
        while stack:
            n = stack.pop()
            if n.type in _DECLS:
                decls += 1
            if n.type in _CONTAINERS:
                stack.extend(n.named_children)
        share = _error_bytes(root) / max(1, len(candidate.encode())) if root.has_error else 0.0
        if candidate is not text:
            decls = max(0, decls - 1)  # the wrapper class itself is not evidence
        if (decls, -share) > (best[0], -best[1]):
            best = (decls, share)
        if decls and share < 0.02:
            break
    return best


def _gate(name: str, text: str) -> bool:
    gate = _GATES.get(name)
    return gate is None or any(literal in text for literal in gate)


_GO_LINE = re.compile(r"(?im)^\s*GO\s*$")


def _found(
    signals: list[tuple[str, re.Pattern[str]]], text: str, *, first: bool = False
) -> list[str]:
    """Names of the signals a text shows (substring gate first); first=True stops at one."""
    names: list[str] = []
    for name, rx in signals:
        if _gate(name, text) and rx.search(text):
            names.append(name)
            if first:
                break
    return names


def _parses_as_csharp(text: str) -> tuple[int, float] | None:
    """(declarations, error share) when tree-sitter reads the text as C#, else None."""
    decls, err = _cs_parse_evidence(text)
    return (decls, err) if decls and err < 0.15 else None


def _reads_as_sql(hits: int, go_lines: int, ext: str, text: str) -> bool:
    """Two T-SQL constructs, or one in a .sql file or with GO batch lines, or nothing but
    GO lines and `--` comments (a script template)."""
    if hits == 0:
        return tsql.batch_skeleton(text)
    return hits >= 2 or go_lines > 0 or ext == ".sql"


def language_only(text: str, path: str | None = None) -> str:
    """The language classify() decides, by the same rules on the least evidence.

    No confidence, no reasons, no embedded-SQL count: the first C# signal, the first
    distinct T-SQL constructs. A test holds it equal to classify().language.
    """
    if not text.strip():
        return "unknown"
    ext = PurePath(path).suffix.lower() if path else ""
    if (
        (_found(_CS_SIGNALS, text, first=True) or _found(_CS_FILE_SIGNALS, text, first=True))
        and not _found(_NOT_CS, text, first=True)
        and _parses_as_csharp(text)
    ):
        return "dotnet"
    hits = tsql.sql_evidence(text, stop_at=2)
    go_lines = 1 if hits == 1 and _GO_LINE.search(text) else 0  # only asked when it decides
    return "sql" if _reads_as_sql(hits, go_lines, ext, text) else "unknown"


_ENOUGH_SQL = 5  # constructs that, alone, make confidence 1.0


def classify(text: str, path: str | None = None) -> Classification:
    """Kind, language, confidence and reasons for a source text (path is only a hint)."""
    reasons: list[str] = []
    ext = PurePath(path).suffix.lower() if path else ""
    if not text.strip():
        return Classification("UNKNOWN", "unknown", 1.0, ("empty text",))
    not_cs = _found(_NOT_CS, text)
    cs_hits = _found(_CS_SIGNALS, text) or _found(_CS_FILE_SIGNALS, text)
    if cs_hits and not not_cs:
        parsed = _parses_as_csharp(text)
        if parsed:
            decls, err = parsed
            reasons += [
                f"C#: {', '.join(cs_hits)}",
                f"tree-sitter: {decls} declaration(s), {err:.0%} error bytes",
            ]
            confidence = min(1.0, 0.55 + 0.1 * len(cs_hits) + 0.05 * min(decls, 4) - err)
            if ext in _CODE_EXT and _CODE_EXT[ext] == "dotnet":
                confidence = min(1.0, confidence + 0.1)
            embedded = csharp.embedded_sql_count(text)
            if embedded:
                reasons.append(f"{embedded} embedded SQL string(s) in data-access calls")
                return Classification(
                    "DOTNET_WITH_SQL", "dotnet", round(confidence, 2), tuple(reasons)
                )
            return Classification("DOTNET", "dotnet", round(confidence, 2), tuple(reasons))
    # Only now: C# text needs no T-SQL scan. Five constructs give full confidence, so the
    # count stops there.
    sql_hits = tsql.sql_evidence(text, stop_at=_ENOUGH_SQL)
    go_lines = len(_GO_LINE.findall(text))
    if _reads_as_sql(sql_hits, go_lines, ext, text):
        more = "+" if sql_hits == _ENOUGH_SQL else ""
        reasons.append(
            (
                f"T-SQL: {sql_hits}{more} construct(s)"
                if sql_hits
                else "T-SQL: GO batches and comments"
            )
            + (f", {go_lines} GO batch line(s)" if go_lines else "")
        )
        confidence = min(
            1.0, 0.5 + 0.1 * sql_hits + (0.1 if go_lines else 0) + (0.1 if ext == ".sql" else 0)
        )
        return Classification("SQL", "sql", round(confidence, 2), tuple(reasons))
    if not_cs:
        reasons.append(f"other language: {', '.join(not_cs)}")
    elif ext in _OTHER_EXT:
        reasons.append(f"file type {ext}")
    else:
        reasons.append("no C# or T-SQL evidence")
    return Classification(
        "UNKNOWN", "unknown", 0.9 if not_cs or ext in _OTHER_EXT else 0.7, tuple(reasons)
    )


def language_of(kind: str) -> str:
    """The language of a kind."""
    return LANGUAGE_OF_KIND[kind]
