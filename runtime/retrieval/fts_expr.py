"""FTS5 match expressions as the runtime writes them, parsed once for everything that must
read one outside FTS5: the Postgres index, the admitted-statistics scorer and the memory
stores' scorer.

The grammar is what the search passes and the memory stores write: phrases (quoted, `""`
for a quote, or bare), AND (also implied between neighbours), OR, NOT, parentheses, and a
column filter on the next group, `name : group` or `{name} : group`. The tree:
("or"|"and", [children]), ("not", left, right), ("col", name, child), ("phrase", text).
`phrases` lists the phrases in FTS5's order with the column each is limited to.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

Tree = tuple[Any, ...]

# Parentheses nested deeper than this (the runtime writes three at most) match nothing.
MAX_DEPTH = 64

_TOKEN = re.compile(r'"(?:[^"]|"")*"|\{[^}]*\}|\(|\)|:|[^\s():"{}]+')


def parse(expr: str) -> Tree:
    """The tree of an FTS5 expression (an empty one is ("or", []): it matches nothing).

    Total: any text gives a tree, in time linear in its length; an operator or a column
    filter with nothing after it, or a group nested past MAX_DEPTH, is an empty group."""
    tokens = _TOKEN.findall(expr)
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1] if pos <= len(tokens) else ""

    depth = 0

    def or_() -> Tree:
        items = [and_()]
        while peek() == "OR":
            take()
            items.append(and_())
        return items[0] if len(items) == 1 else ("or", items)

    def and_() -> Tree:
        items = [not_()]
        while peek() not in (None, "OR", ")"):
            if peek() == "AND":
                take()
            items.append(not_())
        return items[0] if len(items) == 1 else ("and", items)

    def not_() -> Tree:
        left = atom()
        while peek() == "NOT":
            take()
            left = ("not", left, atom())
        return left

    def atom() -> Tree:
        nonlocal depth, pos
        tok = take()
        if not tok or tok in (")", ":", "AND", "OR", "NOT"):
            return ("or", [])  # nothing where a phrase should be: it matches nothing
        if tok == "(":
            if depth >= MAX_DEPTH:  # deeper than anything written: skipped, matches nothing
                level = 1
                while level and pos < len(tokens):
                    level += {"(": 1, ")": -1}.get(tokens[pos], 0)
                    pos += 1
                return ("or", [])
            depth += 1
            inner = or_()
            depth -= 1
            if peek() == ")":
                take()
            return inner
        if tok.startswith("{") or peek() == ":":
            if peek() == ":":
                take()
            return ("col", tok.strip("{}").strip(), atom())
        return ("phrase", tok[1:-1].replace('""', '"') if tok.startswith('"') else tok)

    return or_() if tokens else ("or", [])


def phrases(tree: Tree, column: str | None = None) -> Iterator[tuple[str, str | None]]:
    """(text, column filter or None) of each phrase, in FTS5's order (a NOT's right too)."""
    kind = tree[0]
    if kind == "phrase":
        yield tree[1], column
    elif kind == "col":
        yield from phrases(tree[2], tree[1])
    elif kind == "not":
        yield from phrases(tree[1], column)
        yield from phrases(tree[2], column)
    else:
        for child in tree[1]:
            yield from phrases(child, column)
