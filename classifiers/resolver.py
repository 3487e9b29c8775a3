"""Resolve dependencies by name within a codebase.

SQL names resolve case-insensitively on schema-qualified names (`dbo.Orders`),
then on the bare object name. C# names resolve on simple names; when several
symbols share a name, those in the file's namespace or `using` namespaces win.
A call that still matches several methods (an interface and its implementation)
links to each of them, at most three, so no real caller is dropped.

A name defined in several files (a partial class, a table created by two scripts) is one
candidate, not several: it resolves as a name defined once, and the caller (the indexer)
links the edge to every definition.
"""

from __future__ import annotations

import functools
from collections import defaultdict

from classifiers.model import Dependency, Extraction, ResolvedEdge, Symbol

SQL_EDGES = {
    "ReadsFrom",
    "WritesTo",
    "Executes",
    "FK",
    "On",
    "UsesSql",
    "Uses",
    "Tests",
    "Aliases",
    "StoredOn",
    "History",
    "Principal",
    "MemberOf",
    "Login",
}
_TYPE_KINDS = {"class", "record", "struct", "interface", "enum"}
_MEMBER_KINDS = {"method", "property", "constructor"}
_MAX_TARGETS = 3


@functools.lru_cache(maxsize=16384)
def _enclosing(qualified_name: str) -> frozenset[str]:
    """Every namespace (or type) that encloses a name: `A.B.C.M` -> {A, A.B, A.B.C}."""
    parts = qualified_name.split(".")[:-1]
    return frozenset(".".join(parts[: i + 1]) for i in range(len(parts)))


def resolve(extractions: list[Extraction]) -> list[ResolvedEdge]:
    """Resolved edges for every dependency whose target is a symbol of the codebase."""
    return list(dict.fromkeys(e for edges in resolve_each(extractions) for e in edges))


def resolve_each(extractions: list[Extraction]) -> list[list[ResolvedEdge]]:
    """resolve(), per extraction: the edges whose dependency each one declares (an edge
    may repeat within one list; resolve() removes repeats).

    A qualified name may be defined in several files; which file an edge leaves is known
    only here.
    """
    sql_full: dict[str, list[str]] = defaultdict(list)  # lower-cased name -> its spellings
    sql_bare: dict[str, list[str]] = defaultdict(list)  # bare name -> lower-cased full names
    cs_types: dict[str, list[Symbol]] = defaultdict(list)
    cs_members: dict[str, list[Symbol]] = defaultdict(list)
    cs_seen: set[tuple[str, str]] = set()
    for ex in extractions:
        for s in ex.symbols:
            if s.language == "sql":
                full = s.qualified_name.lower()
                if s.qualified_name not in sql_full[full]:
                    sql_full[full].append(s.qualified_name)
                if "::" in full or full.startswith(("$(", "alter ", "grant ", "deny ", "revoke ")):
                    continue  # schemas, principals, storage, statements: by full name only
                bare = sql_bare[full.split(".")[-1]]
                if full not in bare:
                    bare.append(full)
            elif (s.kind in _TYPE_KINDS or s.kind in _MEMBER_KINDS) and (
                s.kind,
                s.qualified_name,
            ) not in cs_seen:
                # One candidate per qualified name: the parts of a partial class are one type.
                cs_seen.add((s.kind, s.qualified_name))
                pool = cs_types if s.kind in _TYPE_KINDS else cs_members
                pool[s.name].append(s)
    out: list[list[ResolvedEdge]] = []
    # Files repeat the same names under the same usings: resolve each combination once.
    memo: dict[tuple[str, str, frozenset[str]], list[str]] = {}
    for ex in extractions:
        scopes = frozenset(ex.usings) | {
            s.qualified_name for s in ex.symbols if s.kind == "namespace"
        }
        edges: list[ResolvedEdge] = []
        for dep in ex.dependencies:
            key = (dep.edge_type, dep.to_name, scopes)
            found = memo.get(key)
            if found is None:
                found = memo[key] = _targets(dep, scopes, sql_full, sql_bare, cs_types, cs_members)
            for target in found:
                if target != dep.from_qualified_name:
                    edges.append(ResolvedEdge(dep.from_qualified_name, target, dep.edge_type))
        out.append(edges)
    return out


def _targets(
    dep: Dependency,
    scopes: frozenset[str],
    sql_full: dict[str, list[str]],
    sql_bare: dict[str, list[str]],
    cs_types: dict[str, list[Symbol]],
    cs_members: dict[str, list[Symbol]],
) -> list[str]:
    if dep.edge_type in SQL_EDGES:
        # SQL Server names are case-insensitive: every spelling of the name is the object.
        name = dep.to_name.lower()
        if name in sql_full:
            return sql_full[name]
        bare = sql_bare.get(name.split(".")[-1], [])
        return sql_full[bare[0]] if len(bare) == 1 else []
    pool = (
        cs_members.get(dep.to_name, [])
        if dep.edge_type == "Calls"
        else cs_types.get(dep.to_name, [])
    )
    if len(pool) > 1:
        # In scope: declared inside (or below) the file's namespace or one of its usings.
        scoped = [s for s in pool if not _enclosing(s.qualified_name).isdisjoint(scopes)]
        pool = scoped or pool
    return [s.qualified_name for s in pool[:_MAX_TARGETS]]
