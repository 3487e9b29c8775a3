"""Expected evidence and distractors of a case, resolved to node ids of an index.

An evidence entry is a node id, a path glob (a string holding * ? or [, matched against
the node's indexed path), `{id}`, `{path}` or `{kind, name}` (every definition of that
qualified name, `@path` ids included). Each entry resolves to a set of ids: the entry is
found when any of them is. An entry no node matches is EVAL_EVIDENCE_UNKNOWN.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any

from runtime.errors import UsageError
from runtime.eval.cases import Case, is_glob


def _rows(store: Any, scope: Any) -> list[tuple[str, str]]:
    """(id, path) of the nodes of the scope's repository and snapshot."""
    sql, args = "SELECT id, path FROM nodes", []
    where = []
    if scope.repository is not None:
        where.append("repository = ?")
        args.append(scope.repository)
    if scope.snapshot is not None:
        where.append("snapshot = ?")
        args.append(scope.snapshot)
    if where:
        sql += " WHERE " + " AND ".join(where)
    return [(str(r[0]), str(r[1])) for r in store.conn().execute(sql + " ORDER BY id", args)]


def resolve_entry(
    store: Any, scope: Any, entry: Any, rows: list[tuple[str, str]] | None = None
) -> set[str]:
    """The node ids an evidence (or distractor) entry names."""
    if isinstance(entry, dict) and "kind" in entry:
        sql = "SELECT id FROM nodes WHERE kind = ? AND qualified_name = ?"
        args: list[Any] = [entry["kind"], entry["name"]]
        if scope.repository is not None:
            sql += " AND repository = ?"
            args.append(scope.repository)
        return {str(r[0]) for r in store.conn().execute(sql, args)}
    if isinstance(entry, dict):
        entry = entry.get("id") or {"path": entry["path"]}
        if isinstance(entry, dict):
            glob = entry["path"]
            return {
                i
                for i, p in (rows if rows is not None else _rows(store, scope))
                if fnmatch.fnmatchcase(p, glob)
            }
    text = str(entry)
    if is_glob(text):
        return {
            i
            for i, p in (rows if rows is not None else _rows(store, scope))
            if fnmatch.fnmatchcase(p, text)
        }
    found = store.conn().execute("SELECT 1 FROM nodes WHERE id = ?", (text,)).fetchone()
    return {text} if found else set()


def resolve_evidence(
    store: Any, scope: Any, case: Case, *, containing: bool = True
) -> list[set[str]]:
    """One set of node ids per expected evidence entry; an entry matching none is an error.

    containing: each set also holds the nodes whose text holds one of its nodes (a run's
    model that saw the class saw its method); retrieval figures count the nodes alone.
    """
    rows = _rows(store, scope) if any(_needs_rows(e) for e in case.evidence) else None
    out = []
    for entry in case.evidence:
        ids = resolve_entry(store, scope, entry, rows)
        if not ids:
            raise UsageError(
                f"case {case.id!r}: expected evidence {entry!r} matches no node of the index",
                code="EVAL_EVIDENCE_UNKNOWN",
            )
        out.append(ids | containers(store, ids) if containing else ids)
    return out


def containers(store: Any, ids: set[str]) -> set[str]:
    """Nodes whose text holds one of ids (its class, for a method): seeing them is seeing it."""
    out: set[str] = set()
    for nid in sorted(ids):
        row = (
            store.conn()
            .execute(
                "SELECT repository, snapshot, path, start_line, end_line FROM nodes WHERE id = ?",
                (nid,),
            )
            .fetchone()
        )
        if row is None or row[3] is None or row[4] is None:
            continue
        for (cid,) in store.conn().execute(
            "SELECT id FROM nodes WHERE repository = ? AND snapshot = ? AND path = ? "
            "AND start_line <= ? AND end_line >= ? AND id != ? AND kind != 'doc'",
            (row[0], row[1], row[2], row[3], row[4], nid),
        ):
            out.add(str(cid))
    return out


def _needs_rows(entry: Any) -> bool:
    return (isinstance(entry, str) and is_glob(entry)) or (
        isinstance(entry, dict) and "path" in entry
    )


def select_distractors(
    store: Any, scope: Any, case: Case, evidence: Sequence[set[str]], *, pad: int = 0
) -> tuple[list[str], list[str]]:
    """(distractors, padding): the case's distractors, and `pad` more nodes like the evidence.

    `{auto: N}` takes the N nodes most similar to the evidence that are not evidence: a
    BM25 search for the question and the evidence nodes' names, in order, evidence (and
    nodes collapsed under it) left out. Named ones keep their order; none is evidence.
    """
    every = set().union(*evidence) if evidence else set()
    rows = _rows(store, scope) if any(_needs_rows(e) for e in case.distractors) else None
    named: list[str] = []
    auto = 0
    for entry in case.distractors:
        if isinstance(entry, dict) and "auto" in entry:
            auto += int(entry["auto"])
            continue
        ids = resolve_entry(store, scope, entry, rows)
        if not ids:  # a typo would silently run the case without its distractor
            raise UsageError(
                f"case {case.id!r}: distractor {entry!r} matches no node of the index "
                "(a path without * ? [ is read as a node id: write {path: ...})",
                code="EVAL_EVIDENCE_UNKNOWN",
            )
        named += sorted(ids - every)
    named = list(dict.fromkeys(named))
    similar = similar_nodes(store, scope, case.question, every, auto + pad, exclude=set(named))
    return named + similar[:auto], similar[auto:]


def similar_nodes(
    store: Any, scope: Any, question: str, evidence: set[str], n: int, *, exclude: set[str]
) -> list[str]:
    """The n nodes most like the evidence (BM25 for the question and its names), not evidence."""
    if n <= 0:
        return []
    names = []
    if evidence:
        marks = ",".join("?" * len(evidence))
        names = [
            str(r[0])
            for r in store.conn().execute(
                f"SELECT name FROM nodes WHERE id IN ({marks}) ORDER BY id", sorted(evidence)
            )
        ]
    query = " ".join([question, *names])
    hits = store.search(query, scope=scope, top_k=n + len(evidence) + len(exclude) + 10)
    out = []
    for h in hits:
        if h["id"] in evidence or h["id"] in exclude or evidence & set(h.get("children") or ()):
            continue
        out.append(str(h["id"]))
        if len(out) == n:
            break
    return out
