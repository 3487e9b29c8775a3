"""Classification and compaction measured on real codebases (not generated text).

Run: python benchmarks/realworld.py [CORPORA]   (default /tmp/corpora)

CORPORA holds one folder per codebase (wwi, aw, tsqlt: T-SQL database projects; eshop,
eshoponweb, cleanarch: ASP.NET solutions; see docs/code-understanding.md for where each
comes from). For every `.sql` and `.cs` file it prints:

- classification accuracy per corpus and language, from the content alone and with the
  path as a hint, and every misclassified file;
- what compaction lost, found by checks written independently of the extractor: every
  column of every table and table type, every parameter of every procedure and function,
  every public member of every C# type (must all be 0);
- the median compaction ratio (tokens before / after) of C# and SQL files of at least 300
  tokens, and of all files.

Exit status 1 when a language of a corpus is below 99% or anything is lost.
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import classifiers
from classifiers import csharp, tsql
from runtime.context.tokens import get_counter
from runtime.retrieval.indexer import decode_source

LANGUAGE = {".sql": "sql", ".cs": "dotnet"}
TARGET = 0.99
MIN_TOKENS = 300

# --- what compaction must keep, found without the extractor ---------------------------

_GO = re.compile(r"(?im)^[ \t]*GO[ \t]*(?:\d+)?[ \t]*\r?$")
_ROUTINE = re.compile(
    r"\bCREATE\s+(?:OR\s+ALTER\s+)?(PROC(?:EDURE)?|FUNCTION|VIEW|TRIGGER)\s+(?P<name>(?:\[[^\]]+\]|\"[^\"]+\"|[\w@#$]+)(?:\s*\.\s*(?:\[[^\]]+\]|\"[^\"]+\"|[\w@#$]+))*)",
    re.I,
)
_TABLE = re.compile(
    r"\bCREATE\s+(?:TABLE\s+(?P<t>[^\s(]+(?:\s*\.\s*[^\s(]+)*)|TYPE\s+(?P<y>[^\s(]+(?:\s*\.\s*[^\s(]+)*)\s+AS\s+TABLE)\s*\(",
    re.I,
)
_ELEMENT_WORDS = {"CONSTRAINT", "PRIMARY", "FOREIGN", "UNIQUE", "CHECK", "INDEX", "PERIOD"}
_BODY_START = re.compile(
    r"\bAS\s+(?:BEGIN|SET|SELECT|DECLARE|INSERT|UPDATE|DELETE|MERGE|IF|WITH|RETURN|EXEC|EXECUTE|"
    r"WHILE|TRUNCATE|EXTERNAL|RAISERROR|THROW|PRINT|CREATE|;|\()",
    re.I,
)


def _name(raw: str) -> str:
    """`[Sales].[Orders]` -> `Orders` (brackets may hold dots)."""
    parts = re.findall(r"\[[^\]]*\]|\"[^\"]*\"|[^.\s\[\"]+", raw)
    return parts[-1].strip('[]"') if parts else raw


def _paren_block(text: str, open_at: int) -> str:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
    return text[open_at + 1 :]


def _split_top(inner: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in inner:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def sql_expectations(text: str) -> list[tuple[str, str, str]]:
    """(what, object, name) every SQL compaction must keep: columns of tables and table
    types outside routine bodies, parameters of procedures and functions."""
    clean = tsql.blank(text)
    out: list[tuple[str, str, str]] = []
    start = 0
    bounds = [m.start() for m in _GO.finditer(clean)] + [len(clean)]
    for end in bounds:
        batch = clean[start:end]
        start = end
        routine = _ROUTINE.search(batch)
        tables = [m for m in _TABLE.finditer(batch) if not routine or m.start() < routine.start()]
        for m in tables:
            obj = _name(m.group("t") or m.group("y"))
            if obj.startswith(("#", "@")):
                continue
            for part in _split_top(_paren_block(batch, m.end() - 1)):
                first = re.match(r"\[[^\]]+\]|\"[^\"]+\"|\S+", part)
                word = first.group(0) if first else ""
                if word.upper() in _ELEMENT_WORDS:
                    continue
                out.append(("column", obj, word.strip('[]"')))
        if routine and routine.group(1).upper().startswith(("PROC", "FUNC")):
            obj = _name(routine.group("name"))
            body = _BODY_START.search(batch, routine.end())
            head = batch[routine.end() : body.start() if body else len(batch)]
            if routine.group(1).upper().startswith("FUNC"):
                head = re.split(r"\bRETURNS\b", head, maxsplit=1, flags=re.I)[0]
            for p in dict.fromkeys(re.findall(r"(@\w+)\s+(?:AS\s+)?[\w\[]", head)):
                out.append(("parameter", obj, p))
    return out


def sql_lost(text: str, compacted: str) -> list[str]:
    """What the compacted text dropped: a column is kept when a line of its table's block
    starts with it; a parameter when its routine's block names it."""
    if compacted == text:  # returned whole (the compact form was not shorter): nothing lost
        return []
    blocks = compacted.split("\nGO")
    lost = []
    for what, obj, name in sql_expectations(text):
        shown = name if re.fullmatch(r"[A-Za-z_][\w@#$]*", name) else f"[{name}]"
        owner = [
            b
            for b in blocks
            if re.search(rf"CREATE\s+(?:OR\s+ALTER\s+)?\w+\s+[^\n]*{re.escape(obj)}", b, re.I)
        ]
        if what == "column":
            ok = any(re.search(rf"(?m)^\s+{re.escape(shown)}\s", b) for b in owner)
        else:
            ok = any(re.search(rf"{re.escape(name)}\b", b) for b in owner)
        if not ok:
            lost.append(f"{what} {obj}.{name}")
    return lost


_CS_MEMBERS = {
    "method_declaration",
    "constructor_declaration",
    "property_declaration",
    "field_declaration",
    "event_field_declaration",
    "event_declaration",
    "indexer_declaration",
    "operator_declaration",
    "conversion_operator_declaration",
    "delegate_declaration",
    "class_declaration",
    "record_declaration",
    "struct_declaration",
    "interface_declaration",
    "enum_declaration",
}


def cs_expectations(text: str) -> list[tuple[str, list[str]]]:
    """(name, parameter names) of every public member and type (interface members count
    as public), from the tree-sitter tree directly."""
    tree = csharp.parser().parse(text.encode("utf-8"))
    out: list[tuple[str, list[str]]] = []
    stack = [(tree.root_node, False)]
    while stack:
        node, in_interface = stack.pop()
        for child in node.named_children:
            t = child.type
            if t in _CS_MEMBERS:
                mods = [c.text.decode() for c in child.named_children if c.type == "modifier"]
                if "public" in mods or (in_interface and "private" not in mods):
                    names: list[str] = []
                    if t in ("field_declaration", "event_field_declaration"):
                        decl = next(
                            c for c in child.named_children if c.type == "variable_declaration"
                        )
                        names = [
                            c.child_by_field_name("name").text.decode()
                            for c in decl.named_children
                            if c.type == "variable_declarator"
                        ]
                    elif t == "indexer_declaration":
                        names = ["this"]
                    elif t in ("operator_declaration", "conversion_operator_declaration"):
                        names = ["operator"]
                    else:
                        names = [child.child_by_field_name("name").text.decode()]
                    plist = child.child_by_field_name("parameters") or next(
                        (
                            c
                            for c in child.named_children
                            if c.type in ("parameter_list", "bracketed_parameter_list")
                        ),
                        None,
                    )
                    params = (
                        [
                            p.child_by_field_name("name").text.decode()
                            for p in plist.named_children
                            if p.type == "parameter" and p.child_by_field_name("name") is not None
                        ]
                        if plist is not None
                        else []
                    )
                    out += [(n, params) for n in names]
            if t in (
                "declaration_list",
                "namespace_declaration",
                "file_scoped_namespace_declaration",
            ) or t.endswith(
                (
                    "class_declaration",
                    "struct_declaration",
                    "record_declaration",
                    "interface_declaration",
                )
            ):
                stack.append(
                    (
                        child,
                        t == "interface_declaration" or (in_interface and t == "declaration_list"),
                    )
                )
    return out


def _word(name: str) -> re.Pattern[str]:
    """name as a whole word (`@event` too)."""
    return re.compile(rf"(?<![\w@]){re.escape(name)}(?![\w])")


def cs_lost(text: str, compacted: str) -> list[str]:
    """Public members whose name and parameter names no line of the skeleton shows."""
    if compacted == text:
        return []
    lines = compacted.split("\n")
    lost = []
    for name, params in cs_expectations(text):
        pattern = _word(name)
        if not any(
            pattern.search(line) and all(_word(p).search(line) for p in params) for line in lines
        ):
            lost.append(f"{name}({', '.join(params)})")
    return lost


# --- the run ---------------------------------------------------------------------------


def main(root: Path) -> int:
    """Print the figures recorded in docs/code-understanding.md; 1 when a target is missed."""
    counter = get_counter()
    stats: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    missed: list[str] = []
    empty: list[str] = []
    lost: list[str] = []
    ratios: dict[str, list[float]] = defaultdict(list)
    checked = {"column": 0, "parameter": 0, "public member": 0}
    corpora = sorted(p for p in root.iterdir() if p.is_dir())
    for corpus in corpora:
        for path in sorted(corpus.rglob("*")):
            want = LANGUAGE.get(path.suffix.lower())
            if want is None or not path.is_file():
                continue
            text, _ = decode_source(path.read_bytes())
            rel = str(path.relative_to(root))
            if text is None or not text.strip():
                empty.append(rel)
                continue
            row = stats[(corpus.name, want)]
            row[0] += 1
            content = classifiers.classify(text).language
            hinted = classifiers.classify(text, rel).language
            row[1] += content == want
            row[2] += hinted == want
            if content != want or hinted != want:
                missed.append(f"{rel}: content {content}, with path {hinted}")
            compacted = classifiers.compact(text, want, counter=counter)
            if want == "sql":
                expected = sql_expectations(text)
                checked["column"] += sum(1 for e in expected if e[0] == "column")
                checked["parameter"] += sum(1 for e in expected if e[0] == "parameter")
                lost += [f"{rel}: {x}" for x in sql_lost(text, compacted)]
            else:
                checked["public member"] += len(cs_expectations(text))
                lost += [f"{rel}: {x}" for x in cs_lost(text, compacted)]
            before = counter.count(text)
            ratio = before / max(1, counter.count(compacted))
            ratios[f"{want} all"].append(ratio)
            if before >= MIN_TOKENS:
                ratios[want].append(ratio)
    ok = True
    print(f"{'corpus':<12} {'language':<8} {'files':>6} {'content only':>13} {'with path':>10}")
    for (corpus_name, lang), (n, content, hinted) in sorted(stats.items()):
        print(f"{corpus_name:<12} {lang:<8} {n:>6} {content / n:>13.1%} {hinted / n:>10.1%}")
        ok &= content / n >= TARGET and hinted / n >= TARGET
    print(f"\nmisclassified ({len(missed)}):")
    for line in missed:
        print(f"  {line}")
    print(f"empty files, not counted ({len(empty)}): {', '.join(empty) or '-'}")
    kinds = {k: sum(1 for x in lost if f": {k} " in x) for k in ("column", "parameter")}
    tables = len({x.rsplit(".", 1)[0] for x in lost if ": column " in x})
    print(
        f"\ncompaction checked: {checked['column']} columns, {checked['parameter']} parameters, "
        f"{checked['public member']} public C# members; lost: {len(lost)} "
        f"({kinds['column']} columns of {tables} tables, {kinds['parameter']} parameters, "
        f"{len(lost) - sum(kinds.values())} public members)"
    )
    for line in lost[:200]:
        print(f"  LOST {line}")
    for key, label in (
        ("dotnet", f"C# files of >= {MIN_TOKENS} tokens"),
        ("sql", f"SQL files of >= {MIN_TOKENS} tokens"),
        ("dotnet all", "all C# files"),
        ("sql all", "all SQL files"),
    ):
        values = ratios[key]
        if values:
            print(
                f"median compaction ratio, {label} ({len(values)}): {statistics.median(values):.1f}x"
            )
    return 0 if ok and not lost else 1


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("corpora", nargs="?", default="/tmp/corpora", help="one folder per codebase")
    root = Path(ap.parse_args().corpora)
    if not root.is_dir():
        ap.error(
            f"{root} is not a folder (one folder per codebase: see docs/code-understanding.md)"
        )
    sys.exit(main(root))
