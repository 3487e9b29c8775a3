"""The search passes over the SQLite node store: named, joined, kind, all-informative and
any-word BM25 passes, semantic search, and hybrid fusion."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runtime.errors import StoreError
from runtime.retrieval import admitted as adm
from runtime.retrieval.node import Scope, label_set_token, meta_token
from runtime.retrieval.query import (
    asked_kinds,
    fts_query,
    kinds_in,
    name_cover,
    named_words,
    query_terms,
    question_stems,
    without_kind_words,
)
from runtime.retrieval.words import WORD, split_identifier

# Nodes the any-word pass ranks at most (see SqliteNodeStore._selective_any).
ANY_PASS_POSTINGS = 4000

# One ranking (docs/retrieval.md#one-ranking): every pass is a ranked list, fused by weighted
# reciprocal rank, score = sum over passes of weight / (FUSION_K + rank in that pass).
# A small k keeps the order inside each pass meaningful (rank 1 is worth 2.5x rank 10 at
# k=5; at the usual k=60, 1.15x), so a pass's best hit is not drowned by hits that
# several weak passes agree on.
FUSION_K = 5
PASS_WEIGHTS = {
    "named": 3.0,  # a name the question writes: the strongest evidence there is
    "joined": 1.0,  # words joined into the identifier they may spell
    "spelled": 1.0,  # a name the question spells out in words (see _spelled)
    "kind": 1.5,  # of a kind the question names, with every informative word (or any)
    "all": 1.0,  # every informative word
    "most": 1.0,  # every informative word but one (questions hold words code never says)
    "any": 1.0,  # any word, BM25 over the rarer words
}

# Kinds that restate a part of their parent (a table's index, key or constraint, which
# names the parent with an `On` edge; a constructor, see _CTOR): they are searched as part
# of the parent and returned as the parent, with `children` listing the ones that matched.
CHILD_KINDS = frozenset(
    {
        "index",
        "key",
        "primary_key",
        "foreign_key",
        "constraint",
        "check_constraint",
        "default_constraint",
        "unique_constraint",
        "column",
        "statistics",
        "constructor",
    }
)

# Members of a type (C#): searched as themselves, but when several of one type match they
# are evidence for the type, which is returned in their place with the members under
# `children` (see _members).
MEMBER_KINDS = frozenset({"method", "property", "field", "event", "operator", "destructor"})
TYPE_KINDS = ("class", "record", "struct", "interface")
# Matching members of one type from which they fold in: two are often one overload pair
# (Save, SaveAsync) or a coincidence of shared words; three make the type the subject.
MEMBER_FOLD = 3
_OVERLOAD = re.compile(r"#\d+$")

# A constructor restates its type (its name is the type's name, and the type's searchable
# text holds its signature): it is searched as part of the type, in the same file.
_CTOR = re.compile(r"\.[^.]+\.ctor(?:#\d+)?$")

# Test code (a file under a `tests` folder, a `*Tests` project or file) ranks at this
# fraction of its score: a question about a feature wants the feature first and its tests
# after it; tests still come first when they match at least twice as well.
TEST_PENALTY = 0.5
_TEST_PART = re.compile(r"(?:^|[/._\- ])(?:[Tt]ests?|\w*[a-z0-9](?:Tests?|_tests?))(?=$|[/._\- ])")


def is_test_path(path: str) -> bool:
    """Whether a file is test code: a folder or file name `test(s)`, `*Tests`, `*_test(s)`."""
    return bool(_TEST_PART.search(path))


def is_test_node(path: str, kind: str, name: str) -> bool:
    """Whether a node is test code: in a test file (is_test_path) or a tSQLt test procedure."""
    # tSQLt runs every procedure of a test class whose name begins with "test" (`[MyTests].
    # [test it adds a row]`): test code wherever its file lies (the classifier's rule too).
    return is_test_path(path) or (kind == "procedure" and name.lower().startswith("test"))


# Hits of one file beyond the per-file cap have their score multiplied by this, once per
# hit of the same file already ranked (see _finish): one file cannot fill the list while
# other files match, yet a script holding a whole database still fills it when nothing
# else does.
FILE_PENALTY = 0.5

# Hybrid search fuses the BM25 and semantic lists by reciprocal rank with this k (the
# `rrf_k` of search_nodes). Small for the same reason as FUSION_K: at the usual 60, a hit
# only the semantic list finds (what BM25 cannot: "empty the shopping cart" -> ClearAsync)
# scores 1/61 and loses to anything both lists hold, however low (2/80 at rank 20).
HYBRID_RRF_K = 5

# The spelled pass (_spelled): name parts a question must say, the nodes whose names it
# reads at most (those whose name holds two of the question's words), and the postings
# budget of the words it looks for.
SPELLED_MIN = 2
SPELLED_CANDIDATES = 5000
SPELLED_POSTINGS = 4000

# The ranking does not depend on top_k (a 5-hit list is the first five of a 10-hit one):
# it is computed to a fixed depth, each pass and search type contributing HEAD_POOL hits,
# and the looser passes (most, any) join while the stricter ones found fewer than
# LOOSE_GATE nodes. A list longer than that first ranking continues, below it, with one
# computed deeper (max(TAIL_POOL, 3 * top_k) hits per list, every pass), without the nodes
# the first one lists (see _layered).
HEAD_POOL = 20
TAIL_POOL = 100
LOOSE_GATE = 5


# The default rule in the full-text match: the visible label sets' tokens (label_set_token)
# OR-ed and required, while there are at most this many; over it, the hidden labels'
# tokens excluded with NOT (exact too, but FTS5 then merges every hidden label's postings:
# +87% on BM25 p50 at 50k nodes with three quarters hidden, against about +5%).
MAX_SET_TOKENS = 64
# Required when no label set is visible: a token no node has (a set token is hex).
NO_SET = "zzqnone"

# Searches by one set of labels that does not admit every label set, on one connection and
# index version, after which the rows it admits are copied into a temporary full-text table
# and ranked there (see _materialise_admitted): a one-off command walks FTS5's order
# (a millisecond or so a search), a long-lived server pays the copy once.
MATERIALISE_AFTER = 16
# Nor when the labels admit more rows than this: each connection that makes a copy holds it
# in SQLite's temporary database (measured: 1.5 KB a row at 50k synthetic nodes, so 200k
# rows about 300 MB, a file deleted with the connection, its pages cached in memory).
MATERIALISE_MAX_ROWS = 200_000
_TABLE_NUMBERS = itertools.count(1)

# BM25 column weights: names count four times the body; the meta column (scope and filter
# tokens, see meta_tokens) not at all. Passed to bm25() directly: ~30% faster than `rank`.
_BM25 = "bm25(nodes_fts, 4.0, 1.0, 0.0)"


def _hit(index: int, nid: str, score: float, path: str, kind: str, name: str) -> dict[str, Any]:
    """One search result as every search type returns it (index 0 is rank 1)."""
    return {
        "id": nid,
        "score": round(score, 6),
        "rank": index + 1,
        "path": path,
        "kind": kind,
        "name": name,
    }


def _layered(
    ranked: Callable[[int, bool], list[dict[str, Any]]], top_k: int
) -> list[dict[str, Any]]:
    """The first top_k hits of ranked(HEAD_POOL, False), continued when it has fewer by
    ranked(deeper pool, True) without what it lists, scored below its last hit.

    ranked(pool, loose) is a whole ranking (every candidate, best first) with each list
    `pool` deep; loose: the looser passes run whatever the stricter ones found. The head
    never depends on top_k, so asking for more hits never reorders the first ones.
    """
    head = ranked(HEAD_POOL, False)
    if len(head) >= top_k:
        return head[:top_k]
    # A node the head folded under a parent is folded in the deeper ranking too (a child's
    # parent does not depend on the pool, and a type's matching members only grow with
    # it): dropping the head's ids drops them. A member the head lists as itself may fold
    # there into a new parent, which then lists only the members not already shown.
    seen = {h["id"] for h in head}
    tail: list[dict[str, Any]] = []
    for h in ranked(max(TAIL_POOL, 3 * top_k), True):
        if len(head) + len(tail) == top_k:
            break
        if h["id"] in seen:
            continue
        kids = [c for c in h.get("children") or () if c not in seen]
        if kids:
            h["children"] = kids
        else:
            h.pop("children", None)
        tail.append(h)
    if head and tail and tail[0]["score"] >= head[-1]["score"]:
        # Shifted, not scaled: keeps the tail's order and gaps whatever the scores' sign.
        shift = tail[0]["score"] - head[-1]["score"] + 1e-6
        for h in tail:
            h["score"] = round(h["score"] - shift, 6)
    out = head + tail
    for i, h in enumerate(out):
        h["rank"] = i + 1
    return out


def _lowered(score: float, factor: float) -> float:
    """score moved down to factor (0..1) of itself: scaled if positive, away from zero if not
    (a cosine may be negative), so the order it makes never rises."""
    return score - abs(score) * (1.0 - factor)


def _demote_tests(
    scores: dict[str, float], info: dict[str, tuple[str, str, str]]
) -> dict[str, float]:
    """Scores with test code's lowered to TEST_PENALTY of themselves (see is_test_path)."""
    return {
        nid: _lowered(s, TEST_PENALTY) if is_test_node(*info[nid]) else s
        for nid, s in scores.items()
    }


def _tests_down(hits: list[dict[str, Any]], pool: int) -> list[dict[str, Any]]:
    """One pass's hits re-ordered with test code's scores lowered (TEST_PENALTY), first pool."""
    for h in hits:
        if is_test_node(h["path"], h["kind"], h["name"]):
            h["score"] = _lowered(h["score"], TEST_PENALTY)
    return sorted(hits, key=lambda h: (-h["score"], h["id"]))[:pool]


def _any(prefix: str, values: Iterable[str]) -> str:
    return "(" + " OR ".join(f"meta:{meta_token(prefix, v)}" for v in values) + ")"


@dataclass
class _Stats:
    """Cached index statistics (see SqliteNodeStore._stats)."""

    version: int
    nodes: int
    repositories: frozenset[str]
    snapshots: frozenset[str]
    labels: frozenset[str]
    # (token, labels) of every label set the index lists; a set whose labels do not read
    # as a list of strings is left out (its nodes are then matched by no visible set).
    label_sets: tuple[tuple[str, frozenset[str]], ...] = ()
    # (term, admitted labels or None for every node) -> (count, cap)
    doc_counts: dict[tuple[str, Any], tuple[int, int]] = field(default_factory=dict)
    # Figures over the nodes some labels admit (see SearchPasses._admitted, _node_count).
    admitted: dict[Any, Any] = field(default_factory=dict)


def _labels_key(scope: Scope) -> tuple[str, ...]:
    """The scope's allowed labels as a cache key (what decides which nodes it admits)."""
    return tuple(sorted(set(scope.allowed_labels or ())))


def _sets(tokens: Sequence[str]) -> str:
    """A match on any of these label-set tokens (none: on no node)."""
    return "(" + (" OR ".join(f"meta:{t}" for t in tokens) or f"meta:{NO_SET}") + ")"


def _read_sets(rows: Iterable[tuple[str, str]]) -> tuple[tuple[str, frozenset[str]], ...]:
    """The `label_sets` rows as (token, labels); unreadable ones left out (hidden), and
    those whose token is not their labels' (an edited row would otherwise admit the nodes
    of a set under other labels than theirs)."""
    out = []
    for token, text in rows:
        if not isinstance(text, str) or token != label_set_token(text):
            continue
        try:
            labels = json.loads(text)
        except ValueError:
            continue
        if isinstance(labels, list) and all(isinstance(x, str) for x in labels):
            out.append((token, frozenset(labels)))
    return tuple(out)


class SearchPasses:
    """The search passes of the SQLite node store (mixed into SqliteNodeStore).

    The store provides the connection (`conn`) and the per-thread cache (`_local`).
    """

    # How a query joins nodes to edges given by id: SQLite's CROSS JOIN keeps the edges
    # first (each node then looked up by its id), where a plain join let the planner read
    # every node of the repository through the scope's index (56 ms at 50k nodes for 32
    # ids). Postgres (which has no CROSS JOIN ... ON) plans it well with a plain JOIN.
    _EDGES_FIRST = "CROSS JOIN"

    if TYPE_CHECKING:
        _local: threading.local

        def conn(self) -> sqlite3.Connection: ...

    # --- reading -------------------------------------------------------------------
    @staticmethod
    def _scope_sql(scope: Scope, alias: str = "n") -> tuple[str, list[Any]]:
        """SQL (and its arguments) keeping the nodes `alias` the scope may see.

        The index is read as its own witness, the most restricted reading winning (docs/
        retrieval.md, "A damaged index"): a node is visible only when its label rows and
        its stored labels (the `labels` column) are both allowed, and when its repository
        and snapshot columns agree with its id. A row deleted from `node_labels`, or a
        node moved into another repository by its column alone, hides the node.
        """
        clauses, args = [], []
        if scope.repository:
            clauses.append(f"{alias}.repository = ?")
            args.append(scope.repository)
        if scope.snapshot:
            clauses.append(f"{alias}.snapshot = ?")
            args.append(scope.snapshot)
        allowed = list(scope.allowed_labels or [])
        marks = ",".join("?" * len(allowed))
        clauses.append(
            f"NOT EXISTS (SELECT 1 FROM node_labels l WHERE l.node = {alias}.rowid"
            + (f" AND l.label NOT IN ({marks}))" if allowed else ")")
        )
        args += allowed
        # The stored labels as well (an unlabelled node's are '[]': one comparison); JSON
        # that does not parse hides the node.
        clauses.append(
            f"({alias}.labels = '[]' OR (json_valid({alias}.labels) AND NOT EXISTS"
            f" (SELECT 1 FROM json_each({alias}.labels) j"
            + (f" WHERE j.value NOT IN ({marks}))))" if allowed else ")))")
        )
        args += allowed
        clauses.append(
            f"substr({alias}.id, 1, length({alias}.repository) + length({alias}.snapshot) + 4)"
            f" = {alias}.repository || '::' || {alias}.snapshot || '::'"
        )
        return " AND ".join(clauses), args

    @staticmethod
    def _filter_sql(filters: dict[str, Any] | None) -> tuple[str, list[Any]]:
        clauses, args = [], []
        for key in ("kind", "language"):
            value = (filters or {}).get(key)
            if value:
                values = [value] if isinstance(value, str) else list(value)
                clauses.append(f"n.{key} IN ({','.join('?' * len(values))})")
                args += values
        prefix = (filters or {}).get("path_prefix")
        if prefix:
            clauses.append("n.path LIKE ? ESCAPE '\\'")
            args.append(prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        return (" AND " + " AND ".join(clauses)) if clauses else "", args

    def bm25(
        self,
        query: str,
        *,
        scope: Scope,
        top_k: int,
        filters: dict[str, Any] | None = None,
        per_file: int = 2,
    ) -> list[dict[str, Any]]:
        """BM25 hits, best first: the passes below fused into one ranking (see _bm25_fused).

        0. nodes named by a word written as a name ("the Orders table", "usp_PlaceOrder");
        1. adjacent words joined, as the identifier they may spell ("place order" -> PlaceOrder);
        2. nodes of a kind the question names ("which stored procedure ..."), with every
           informative word, then with any;
        3. nodes with every informative word; 4. with all but one; 5. with any word.
        Every pass ranks with BM25 inside FTS5 under the same scope and filters. Child
        nodes (a table's indexes) come back as their parent; see _rank for the per-file cap.

        All of it reads one snapshot of the index (see `_snapshot`): the hidden labels
        are read from the statistics and written into each MATCH expression, so a node
        with a new label committed in between would otherwise be matched unfiltered.
        """

        self._materialise_admitted(scope)
        with self._snapshot():
            return _layered(
                lambda pool, loose: self._bm25_ranking(
                    query, scope, filters, per_file, pool, None if loose else LOOSE_GATE
                ),
                top_k,
            )

    def _bm25_ranking(
        self,
        query: str,
        scope: Scope,
        filters: dict[str, Any] | None,
        per_file: int,
        pool: int,
        gate: int | None,
    ) -> list[dict[str, Any]]:
        """The whole BM25 ranking, each pass `pool` deep; the looser passes run while the
        stricter ones found fewer than `gate` nodes (None: always)."""
        scores, info, skipped = self._bm25_fused(query, scope, pool, filters, gate)
        hits = self._rank(scores, info, scope=scope, filters=filters, per_file=per_file)
        if gate is not None and len(hits) < gate and skipped:
            # Folding members into their types left fewer than `gate` things: the looser
            # passes were skipped on the count before folding, so run them.
            scores, info, _ = self._bm25_fused(query, scope, pool, filters, None)
            hits = self._rank(scores, info, scope=scope, filters=filters, per_file=per_file)
        return hits

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction over several statements: each sees the same index.

        SQLite (WAL) fixes a read transaction's snapshot at its first read; the first
        statement here is such a read, before the statistics are checked, so
        `PRAGMA data_version`, the cached label list and every MATCH agree. Inside a
        transaction already open on this connection, that one is the snapshot.
        """
        db = self.conn()
        if db.in_transaction:
            yield
            return
        db.execute("BEGIN")
        try:
            db.execute("SELECT 1 FROM nodes LIMIT 1").fetchall()  # fixes the snapshot now
            yield
        finally:
            db.rollback()  # read-only: ending it is all there is to do

    def _bm25_fused(
        self,
        query: str,
        scope: Scope,
        pool: int,
        filters: dict[str, Any] | None,
        gate: int | None,
    ) -> tuple[dict[str, float], dict[str, tuple[str, str, str]], bool]:
        """(node id -> fused score, node id -> (path, kind, name), whether a looser pass was
        skipped) over every pass that applies; the looser passes run while the stricter
        ones found fewer than `gate` nodes (None: whatever they found).

        Each pass is a ranked list of up to `pool` hits; a node's score is the sum over the
        passes that found it of PASS_WEIGHTS[pass] / (FUSION_K + its rank there). BM25
        scores of different passes are not comparable (an AND of five words scores more
        than any one word), their ranks are.
        """
        lists: list[tuple[str, list[dict[str, Any]]]] = [
            ("named", self._named(query, scope, pool, filters))
        ]

        def ranked(match: str, flt: dict[str, Any] | None) -> list[dict[str, Any]]:
            # Twice the pool, so test code ranked down still leaves `pool` hits.
            return _tests_down(self._bm25(match, scope, 2 * pool, flt), pool)

        lists.append(("spelled", _tests_down(self._spelled(query, scope, 2 * pool, filters), pool)))
        joined = fts_query(query, "joined")
        if joined:
            lists.append(("joined", ranked(joined, filters)))
        kinds = asked_kinds(query)
        if kinds and not (filters or {}).get("kind"):
            by_kind = {**(filters or {}), "kind": kinds}
            # A kind pass already selects the kind: the word naming it would only add noise.
            words = without_kind_words(query)
            hits = ranked(self._informative_all(words, scope), by_kind)
            if len(hits) < pool:
                seen = {h["id"] for h in hits}
                more = ranked(self._selective_any(words, scope), by_kind)
                hits += [h for h in more if h["id"] not in seen][: pool - len(hits)]
            lists.append(("kind", hits))
        every = ranked(self._informative_all(query, scope), filters)
        lists.append(("all", every))
        # The looser passes rank many more nodes (most of the search time) and add noise to a
        # ranking the stricter ones already fill: they run only while those found fewer
        # than `gate` nodes. Skipping one leaves out a list, never reorders the others.
        skipped = False
        if gate is None or len(every) < gate:
            most = self._informative_all(query, scope, missing=1)
            if most:
                lists.append(("most", ranked(most, filters)))
        else:
            skipped = True
        if gate is None or len({h["id"] for _, hits in lists for h in hits}) < gate:
            lists.append(("any", ranked(self._selective_any(query, scope), filters)))
        else:
            skipped = True
        scores: dict[str, float] = {}
        info: dict[str, tuple[str, str, str]] = {}
        for name, hits in lists:
            weight = PASS_WEIGHTS[name]
            for rank, h in enumerate(hits, 1):
                scores[h["id"]] = scores.get(h["id"], 0.0) + weight / (FUSION_K + rank)
                info[h["id"]] = (h["path"], h["kind"], h["name"])
        return scores, info, skipped

    def _parents(
        self, ids: Sequence[str], scope: Scope, filters: dict[str, Any] | None
    ) -> dict[str, tuple[str, str, str, str]]:
        """child id -> (parent id, path, kind, name) of its visible parent within the filters
        (a parent the filters exclude leaves the child as it is).

        An index, key or constraint's parent is what its `On` edge names (a name defined
        twice has two: the one in the child's own file wins, then the first by id); a
        constructor's is the type it constructs, in its own file.
        """
        if not ids:
            return {}
        where, args = self._scope_sql(scope)
        fsql, fargs = self._filter_sql(filters)
        marks = ",".join("?" * len(ids))
        db = self.conn()
        rows = db.execute(
            "SELECT e.from_id, n.id, n.path, n.kind, n.name, c.path FROM edges e "
            f"{self._EDGES_FIRST} nodes n ON n.id = e.to_id {self._EDGES_FIRST} nodes c"
            " ON c.id = e.from_id "
            f"WHERE e.from_id IN ({marks}) AND e.edge_type = 'On' AND {where}{fsql} "
            "ORDER BY e.from_id, n.path != c.path, n.id",
            [*ids, *args, *fargs],
        ).fetchall()
        out: dict[str, tuple[str, str, str, str]] = {}
        for child, pid, path, kind, name, _ in rows:
            if kind not in CHILD_KINDS:
                out.setdefault(child, (pid, path, kind, name))
        ctors = db.execute(
            "SELECT id, repository, snapshot, path, qualified_name FROM nodes "
            f"WHERE id IN ({marks}) AND kind = 'constructor'",
            list(ids),
        ).fetchall()
        where_args = (where + fsql, [*args, *fargs])
        for child, repository, snapshot, path, qualified in ctors:
            owner = _CTOR.sub("", qualified)
            if owner == qualified:
                continue
            found = self._type_in_file(
                (repository, snapshot, path, owner), ("class", "record", "struct"), where_args
            )
            if found:
                out[child] = found
        return out

    def _type_in_file(
        self,
        key: tuple[str, str, str, str],
        kinds: Sequence[str],
        where_args: tuple[str, list[Any]],
    ) -> tuple[str, str, str, str] | None:
        """(id, path, kind, name) of the type of one of kinds named key's qualified name in
        key's repository, snapshot and file, visible under the scope and filters (where_args:
        their SQL and arguments); the first by id, or None."""
        where, args = where_args
        marks = ",".join("?" * len(kinds))
        row = (
            self.conn()
            .execute(
                "SELECT n.id, n.path, n.kind, n.name FROM nodes n WHERE n.repository = ? "
                "AND n.snapshot = ? AND n.path = ? AND n.qualified_name = ? AND n.kind IN "
                f"({marks}) AND {where} ORDER BY n.id LIMIT 1",
                [*key, *kinds, *args],
            )
            .fetchone()
        )
        return (row[0], row[1], row[2], row[3]) if row else None

    def _members(
        self,
        scores: dict[str, float],
        info: dict[str, tuple[str, str, str]],
        scope: Scope,
        filters: dict[str, Any] | None,
    ) -> dict[str, tuple[str, str, str, str]]:
        """member id -> (type id, path, kind, name) for the members that fold into their type.

        A type (class, record, struct, interface) in the member's file whose qualified name
        is the member's without its last part takes the member in when at least MEMBER_FOLD
        of its members are hits: several matching members say the type is the answer ("how
        does X cache items" matches its GetById, Edit and Create), and five hits are then
        five different things. Fewer stay themselves.
        """
        ids = sorted(i for i in scores if info[i][1] in MEMBER_KINDS)
        if not ids:
            return {}
        where, args = self._scope_sql(scope)
        fsql, fargs = self._filter_sql(filters)
        db = self.conn()
        owners: dict[tuple[str, str, str, str], list[str]] = {}
        marks = ",".join("?" * len(ids))
        for nid, repository, snapshot, path, qualified in db.execute(
            "SELECT id, repository, snapshot, path, qualified_name FROM nodes "
            f"WHERE id IN ({marks})",
            ids,
        ).fetchall():
            owner = _OVERLOAD.sub("", qualified).rpartition(".")[0]
            if owner:
                owners.setdefault((repository, snapshot, path, owner), []).append(nid)
        out: dict[str, tuple[str, str, str, str]] = {}
        where_args = (where + fsql, [*args, *fargs])
        for key, members in sorted(owners.items()):
            if len(members) < MEMBER_FOLD:
                continue
            found = self._type_in_file(key, TYPE_KINDS, where_args)
            if found:
                for m in members:
                    out[m] = found
        return out

    def _rank(
        self,
        scores: dict[str, float],
        info: dict[str, tuple[str, str, str]],
        *,
        scope: Scope,
        filters: dict[str, Any] | None,
        per_file: int,
        children: dict[str, list[str]] | None = None,
    ) -> list[dict[str, Any]]:
        """The whole ranking: children folded into their parents, then the per-file cap.

        A parent scores the best of its own score and its matching children's, and lists
        those children (best first) under `children`. Then hits are taken best first;
        a hit whose file already has `per_file` hits above it counts with its score times
        FILE_PENALTY per such hit beyond the cap (per_file 0: no cap). Every taken score
        is the best left, and a penalty only lowers scores, so scores never increase
        down the list.
        """
        kids: dict[str, dict[str, float]] = {
            p: dict.fromkeys(c, 0.0) for p, c in (children or {}).items()
        }
        parents = self._parents(
            sorted(i for i in scores if info[i][1] in CHILD_KINDS), scope, filters
        )
        parents.update(self._members(scores, info, scope, filters))
        # A node another list folded under a parent (hybrid: the semantic list folds three
        # matching members into their type, BM25 found one of them alone) is folded there
        # too: one thing is listed once.
        for pid, kids_of in (children or {}).items():
            for kid in kids_of:
                if kid in scores and kid != pid and kid not in parents and pid in info:
                    parents[kid] = (pid, *info[pid])
        merged: dict[str, float] = {}
        for nid, score in scores.items():
            parent = parents.get(nid)
            if parent is None:
                merged[nid] = max(merged.get(nid, score), score)
                continue
            pid = parent[0]
            info.setdefault(pid, parent[1:])
            merged[pid] = max(merged.get(pid, score), score)
            kids.setdefault(pid, {})[nid] = score
        order = sorted(merged, key=lambda i: (-merged[i], i))
        taken: dict[str, int] = {}
        out: list[dict[str, Any]] = []
        while order:
            best, best_score = 0, float("-inf")
            for k, nid in enumerate(order):
                score = merged[nid]
                if score <= best_score:
                    break  # sorted: no later hit can beat the best so far
                over = taken.get(info[nid][0], 0) - per_file + 1 if per_file else 0
                if over > 0:
                    score = _lowered(score, FILE_PENALTY**over)
                if score > best_score:
                    best, best_score = k, score
            nid = order.pop(best)
            path = info[nid][0]
            taken[path] = taken.get(path, 0) + 1
            hit = _hit(len(out), nid, best_score, *info[nid])
            if kids.get(nid):
                hit["children"] = sorted(kids[nid], key=lambda c: (-kids[nid][c], c))
            out.append(hit)
        return out

    def _named(
        self, query: str, scope: Scope, limit: int, filters: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        """Visible nodes whose name is a word of the query written as a name.

        Those of a kind the query names come first, then by the BM25 of their own name.
        """
        names = named_words(query)
        if not names:
            return []
        where, args = self._scope_sql(scope)
        fsql, fargs = self._filter_sql(filters)
        marks = ",".join("?" * len(names))
        rows = (
            self.conn()
            .execute(
                # INDEXED BY: without statistics the planner would scan the scope's index.
                f"SELECT n.rowid, n.id, n.path, n.kind, n.name FROM nodes n INDEXED BY nodes_name "
                f"WHERE n.name COLLATE NOCASE IN ({marks}) AND {where}{fsql}",
                [*names, *args, *fargs],
            )
            .fetchall()
        )
        if not rows:
            return []
        # Each node's score is the BM25 of its own name (as one joined identifier word),
        # looked up by rowid: scoring the whole question would rank every node its common
        # words match. Many same-named nodes (`Id`) are cut to the first 64 by id.
        rows = sorted(rows, key=lambda r: r[1])[:64]
        scores: dict[int, float] = {}
        acc = self._admitted(scope)
        fts = "nodes_fts" if acc is None else self._admitted_table(scope)
        for r in rows:
            word = "".join(split_identifier(r[4])) or r[4].lower()
            if acc is not None and fts is None:  # the admitted statistics (without it: 0.0)
                scores[r[0]] = self._admitted_scores(acc, f'"{word}"', [r[0]])[r[0]]
                continue
            found = (
                self.conn()
                .execute(
                    f"SELECT bm25({fts}, 4.0, 1.0, 0.0) FROM {fts} WHERE {fts} MATCH ?"
                    " AND rowid = ?",
                    (f'"{word}"', r[0]),
                )
                .fetchone()
            )
            scores[r[0]] = found[0] if found else 0.0
        kinds = kinds_in(query)
        rows.sort(key=lambda r: (r[3] not in kinds, scores.get(r[0], 0.0), r[1]))
        return [_hit(i, r[1], -scores.get(r[0], 0.0), *r[2:5]) for i, r in enumerate(rows[:limit])]

    def _spelled(
        self, query: str, scope: Scope, limit: int, filters: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        """Nodes whose own name the question spells out in words, best covered first.

        A name is its author's summary of the code: `AssertEmptyTable` for "check that a
        table is empty", `NewTestClass` for "create a new test class". A node qualifies
        when the question says at least SPELLED_MIN of its name's parts and more than half
        of them; it ranks by the share of its name the question says (`RunAll` before
        `Private_RunAll`), then by how many parts, then by id. One-word names never
        qualify: one shared word is what every other pass already weighs. Candidates are
        nodes whose names hold two of the question's words (at most SPELLED_CANDIDATES),
        the commonest words left out within a postings budget.
        """
        # Plain words only: an identifier the question writes is the named pass's.
        plain = " ".join(w for w in WORD.findall(query) if len(split_identifier(w)) == 1)
        terms, _ = query_terms(plain)
        if len(terms) < SPELLED_MIN:
            return []
        # Matching costs time per node holding a word: the words are taken rarest first
        # while their nodes add up to at most SPELLED_POSTINGS (as in _selective_any).
        stats = self._stats()
        counted = sorted((self._doc_count(stats, t, SPELLED_POSTINGS, scope), t) for t in terms)
        kept: list[str] = []
        total = 0
        for df, term in counted:
            if total + df > SPELLED_POSTINGS:
                break
            kept.append(term)
            total += df
        if len(kept) < SPELLED_MIN:
            return []
        stems = question_stems(query)
        pairs = " OR ".join(f"({a} AND {b})" for i, a in enumerate(kept) for b in kept[i + 1 :])
        need, hidden = self._meta_match(scope, filters)
        expr = f"(name : ({pairs}))" + (f" AND {need}" if need else "")
        if hidden:
            expr = f"({expr}) NOT {hidden}"
        prefix = (filters or {}).get("path_prefix") or ""
        # Unranked: BM25 over every match costs three times the match itself, and the
        # order here is the names' cover, not BM25.
        where, args = self._scope_sql(scope)  # checked again, as in _bm25
        rows = (
            self.conn()
            .execute(
                "SELECT n.id, n.path, n.kind, n.name FROM (SELECT rowid FROM nodes_fts"
                " WHERE nodes_fts MATCH ? LIMIT ?) f "
                f"JOIN nodes n ON n.rowid = f.rowid WHERE {where}",
                (expr, SPELLED_CANDIDATES, *args),
            )
            .fetchall()
        )
        ranked = []
        for nid, path, kind, name in rows:
            said, parts = name_cover(name, stems)
            if said >= SPELLED_MIN and 2 * said > parts and path.startswith(prefix):
                ranked.append((-said / parts, -said, nid, path, kind, name))
        ranked.sort(key=lambda r: r[:3])
        # The order is the ranking (scores count down); _tests_down halves test code's.
        return [_hit(i, r[2], float(len(ranked) - i), *r[3:]) for i, r in enumerate(ranked[:limit])]

    def _selective_any(self, query: str, scope: Scope) -> str:
        """The any-word expression over the most selective words, within a postings budget.

        Ranking costs about a microsecond per matching node, so the words are taken rarest
        first while their nodes add up to at most ANY_PASS_POSTINGS (the rarest word is
        always taken). The words left out are the commonest, whose BM25 weight is lowest;
        they still count in the all-words pass. Adjacent-word joins are always kept.
        Rarity is counted over the nodes the scope's labels admit (see _doc_count).
        """
        terms, pairs = query_terms(query)
        if not terms:
            return " OR ".join(pairs)
        stats = self._stats()
        counted = sorted((self._doc_count(stats, t, ANY_PASS_POSTINGS, scope), t) for t in terms)
        kept: list[str] = []
        total = 0
        for df, term in counted:
            if kept and total + df > ANY_PASS_POSTINGS:
                break
            kept.append(term)
            total += df
        return " OR ".join(kept + pairs)

    def _informative_all(self, query: str, scope: Scope, missing: int = 0) -> str:
        """The all-words expression without the words in half the nodes or more.

        FTS5's BM25 gives such a word no weight (its idf is clamped), so requiring it only
        drops nodes: "how is stock reserved for an order" in a codebase about orders must
        still find ReserveAsync, which never says "order". If every word is that common,
        all are required. missing=1: every word but any one ("" under three words), since
        a question holds words its answer never says ("how is X moved"). Words and nodes
        are counted over the nodes the scope's labels admit.
        """
        terms, _ = query_terms(query)
        stats = self._stats()
        nodes = self._node_count(stats, scope)
        half = nodes // 2
        kept = [t for t in terms if 2 * self._doc_count(stats, t, half, scope) < nodes]
        kept = kept or terms
        if not missing:
            return " AND ".join(kept)
        if len(kept) < 3:
            return ""
        return " OR ".join(
            "(" + " AND ".join(t for j, t in enumerate(kept) if j != i) + ")"
            for i in range(len(kept))
        )

    def _doc_count(self, stats: _Stats, term: str, cap: int, scope: Scope) -> int:
        """Nodes matching one term among those the scope's labels admit (in any repository
        or snapshot), counted up to cap + 1 (cached until the index changes)."""
        acc = self._admitted(scope, lengths=False)
        key = (term, None if acc is None else _labels_key(scope))
        found, counted_to = stats.doc_counts.get(key, (-1, -1))
        if found < 0 or (found > counted_to and cap > counted_to):  # unknown, or cut short
            # In the admitted rows' own table when there is one (every row of it admitted).
            fts = None if acc is None else self._admitted_table(scope)
            expr = term if acc is None or fts else acc.within(term)
            fts = fts or "nodes_fts"
            sql = f"SELECT count(*) FROM (SELECT rowid FROM {fts} WHERE {fts} MATCH ? LIMIT ?)"
            found = self.conn().execute(sql, (expr, cap + 1)).fetchone()[0]
            stats.doc_counts[key] = (found, cap)
        return int(min(found, cap + 1))

    def _admits_all(self, scope: Scope) -> bool:
        """Whether the scope's labels admit every label set of the index (FTS5's own
        statistics are then the admitted ones)."""
        stats = self._stats()
        held = stats.labels.union(*(labels for _, labels in stats.label_sets))
        return held <= set(scope.allowed_labels or ())

    def _node_count(self, stats: _Stats, scope: Scope) -> int:
        """Nodes the scope's labels admit, in any repository or snapshot (cached)."""
        if self._admits_all(scope):
            return stats.nodes
        key = ("nodes", _labels_key(scope))
        if key not in stats.admitted:
            where, args = self._scope_sql(Scope(allowed_labels=scope.allowed_labels))
            found = self.conn().execute(f"SELECT count(*) FROM nodes n WHERE {where}", args)
            stats.admitted[key] = int(found.fetchone()[0])
        return int(stats.admitted[key])

    def _materialise_admitted(self, scope: Scope) -> None:
        """Count a search by labels that do not admit every set; at the MATERIALISE_AFTER-th
        on this connection and index version, copy the rows they admit into a temporary
        full-text table, so later searches rank there with FTS5's own bm25() (its
        statistics are then the admitted rows', exactly) instead of walking.

        Built outside a search's read transaction (which ends in a rollback), and only
        when the connection has none open; a table built for another index version is
        never used (see _admitted_table). In the connection's temporary database: gone
        with the connection, never part of the index.
        """
        if self._admits_all(scope):
            return
        db = self.conn()
        stats = self._stats()
        key = _labels_key(scope)
        tables: dict[Any, Any] = self._local.__dict__.setdefault("admitted_tables", {})
        entry = tables.get(key)
        if entry is None or entry["stats"] is not stats:
            if entry is not None and entry["name"]:
                db.execute(f"DROP TABLE IF EXISTS temp.{entry['name']}")
            entry = tables[key] = {"stats": stats, "uses": 0, "name": None}
        entry["uses"] += 1
        if entry["name"] or entry["uses"] < MATERIALISE_AFTER or db.in_transaction:
            return
        acc = self._admitted(scope)
        if acc is None:
            return
        lengths = self._lengths(stats)
        rowids = [(r,) for r, token in lengths.tokens.items() if token in acc.visible]
        if len(rowids) > MATERIALISE_MAX_ROWS:
            return  # the walk goes on: exact too, only slower
        made = [k for k, e in tables.items() if e["name"] and k != key]
        for old in made[: max(0, len(made) - adm.CACHE_SUBJECTS + 1)]:
            db.execute(f"DROP TABLE IF EXISTS temp.{tables[old]['name']}")
            tables[old]["name"] = None
        name = f"admitted_fts_{next(_TABLE_NUMBERS)}"
        (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'nodes_fts'").fetchone()
        db.execute(sql.replace("nodes_fts", f"temp.{name}", 1))
        db.execute("CREATE TEMP TABLE IF NOT EXISTS admitted_rows (id INTEGER PRIMARY KEY)")
        db.execute("DELETE FROM temp.admitted_rows")
        db.executemany("INSERT INTO temp.admitted_rows (id) VALUES (?)", rowids)
        db.execute(
            f"INSERT INTO temp.{name} (rowid, name, body, meta) SELECT f.rowid, f.name,"
            " f.body, f.meta FROM nodes_fts f JOIN temp.admitted_rows a ON a.id = f.rowid"
        )
        db.execute("DELETE FROM temp.admitted_rows")
        db.commit()
        entry["name"] = name

    def _admitted_table(self, scope: Scope) -> str | None:
        """The temporary full-text table of the rows the scope's labels admit, when one
        was built for the index version this search reads, else None."""
        tables = self._local.__dict__.get("admitted_tables") or {}
        entry = tables.get(_labels_key(scope))
        if entry is None or entry["stats"] is not self._stats() or not entry["name"]:
            return None
        return str(entry["name"])

    def _admitted(self, scope: Scope, *, lengths: bool = True) -> adm.Admitted | None:
        """The statistics of the nodes the scope's labels admit, in any repository or
        snapshot (None: it admits every node, and FTS5's own are exact).

        lengths=False: only the restriction is wanted (no row lengths are read).
        """
        if self._admits_all(scope):
            return None
        stats = self._stats()
        key = ("acc", _labels_key(scope))
        acc: adm.Admitted | None = stats.admitted.get(key)
        if acc is None:
            need, hidden = self._meta_match(Scope(allowed_labels=scope.allowed_labels), None)
            allowed = set(scope.allowed_labels or ())
            visible = frozenset(t for t, ls in stats.label_sets if ls <= allowed)
            acc = adm.Admitted(hidden or need, bool(hidden), visible, -1, -1)
            held = [k for k in stats.admitted if isinstance(k, tuple) and k[0] == "acc"]
            for old in held[: max(0, len(held) - adm.CACHE_SUBJECTS + 1)]:
                del stats.admitted[old]
            stats.admitted[key] = acc
        if lengths and acc.nodes < 0:
            read = self._lengths(stats)
            seen = [read.sets.get(t, (0, 0)) for t in acc.visible]
            acc.nodes = sum(n for n, _ in seen)
            acc.tokens = sum(t for _, t in seen)
        return acc

    def _lengths(self, stats: _Stats) -> adm.Lengths:
        """Every full-text row's length and label set (read once per index version)."""
        found: adm.Lengths | None = stats.admitted.get("lengths")
        if found is None:
            rows = self.conn().execute(
                "SELECT d.id, d.sz, n.labels FROM nodes_fts_docsize d "
                "LEFT JOIN nodes n ON n.rowid = d.id"
            )
            found = stats.admitted["lengths"] = adm.Lengths.read(rows)
        return found

    def _phrase_count(self, acc: adm.Admitted, text: str, column: str | None) -> int:
        """Admitted rows holding a phrase, counted in the full-text index by the admitted
        set tokens (cached until the index changes).

        At most the admitted node count, which is made from the nodes' stored labels: on
        an index whose meta column was edited to claim a visible set for a hidden node,
        the two may disagree (the node stays hidden; its words may weigh).
        """
        key = (text, column)
        if key not in acc.counts:
            found = self.conn().execute(
                "SELECT count(*) FROM nodes_fts WHERE nodes_fts MATCH ?",
                (acc.within(adm.phrase_query(text, column)),),
            )
            acc.counts[key] = min(int(found.fetchone()[0]), acc.nodes)
        return acc.counts[key]

    def _row_hits(
        self, acc: adm.Admitted, found: list[tuple[str, str | None]], rowids: Sequence[int]
    ) -> list[dict[int, float]]:
        """Per phrase, rowid -> its weighted hits in each of rowids (adm.ABSENT: not held):
        the rows not read yet are copied into an in-memory FTS5 table (adm.Scratch) and
        each phrase's one-phrase bm25() there read back as an exact count."""
        keys = list(dict.fromkeys(found))
        missing = sorted({r for k in keys for r in rowids if r not in acc.hits.get(k, {})})
        if missing:
            if acc.cached_rows > adm.CACHE_ROWS:
                acc.hits.clear()
                acc.cached_rows = 0
                missing = sorted(set(rowids))
            texts: list[tuple[int, str, str, str]] = []
            db = self.conn()
            for start in range(0, len(missing), 500):
                chunk = missing[start : start + 500]
                # FTS5's content table (rowid IN on the virtual table scans all of it).
                texts += db.execute(
                    "SELECT id, c0, c1, c2 FROM nodes_fts_content "
                    f"WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
            scratch: adm.Scratch | None = getattr(self._local, "scratch", None)
            if scratch is None:
                scratch = self._local.scratch = adm.Scratch()
            for key, got in scratch.hits(texts, keys).items():
                acc.hits.setdefault(key, {}).update(got)
                acc.cached_rows += len(got)
        return [acc.hits.get(k, {}) for k in found]

    def _admitted_scores(
        self, acc: adm.Admitted, match: str, rowids: Sequence[int]
    ) -> dict[int, float]:
        """rowid -> FTS5's bm25() of match (negative, as FTS5 returns it) over the admitted
        statistics: the score an index of the admitted nodes alone would give."""
        if not rowids or not acc.nodes or not acc.tokens:  # no admitted row: damaged at most
            return dict.fromkeys(rowids, 0.0)
        tree, found = adm.parse(match)
        weights = [adm.idf(acc.nodes, self._phrase_count(acc, t, c)) for t, c in found]
        hits = self._row_hits(acc, found, rowids)
        avgdl = acc.avgdl
        lengths = self._lengths(self._stats()).rows
        out: dict[int, float] = {}
        for rowid in rowids:
            length = float(lengths.get(rowid, 0))
            held = {i for i, h in enumerate(hits) if h.get(rowid, adm.ABSENT) != adm.ABSENT}
            score = 0.0
            # in the phrases' order, as FTS5 adds them (a phrase not counted adds 0.0)
            for i in sorted(adm.counted(tree, held.__contains__) or ()):
                score += adm.term(weights[i], hits[i][rowid], length, avgdl)
            out[rowid] = -1.0 * score
        return out

    def _top_admitted(
        self, acc: adm.Admitted, match: str, expr: str, want: int
    ) -> tuple[list[int], dict[int, float], bool]:
        """(the first `want` matches of expr by admitted score then rowid, rowid -> score
        (negative), whether every match was scored).

        Walks down FTS5's own order (whole-table bm25(), computed in C) and scores the rows
        it passes exactly, until no row further down can enter (adm.ceiling bounds the
        admitted score of a row by its FTS5 score).
        """
        stats = self._stats()
        whole = self._lengths(stats)
        _, found = adm.parse(match)
        phrases: list[tuple[float, float]] = []  # (admitted / whole-table IDF, admitted IDF)
        for text, column in found:
            mine = adm.idf(acc.nodes, self._phrase_count(acc, text, column))
            key = ("whole", text, column)
            if key not in stats.admitted:
                count = self.conn().execute(
                    "SELECT count(*) FROM nodes_fts WHERE nodes_fts MATCH ?",
                    (adm.phrase_query(text, column),),
                )
                stats.admitted[key] = int(count.fetchone()[0])
            theirs = adm.idf(whole.total_rows, stats.admitted[key])
            phrases.append((mine / theirs, mine))
        phrases.sort()
        mean = whole.total_tokens / whole.total_rows if whole.total_tokens else 0.0
        rho = max(1.0, acc.avgdl / mean) if mean else 1.0
        scores: dict[int, float] = {}
        limit = max(2 * want, 32)
        while True:
            rows = (
                self.conn()
                .execute(
                    f"SELECT rowid, {_BM25} AS score FROM nodes_fts WHERE nodes_fts MATCH ? "
                    "ORDER BY score, rowid LIMIT ?",
                    (expr, limit),
                )
                .fetchall()
            )
            scores.update(
                self._admitted_scores(acc, match, [r for r, _ in rows if r not in scores])
            )
            order = sorted(scores, key=lambda r: (scores[r], r))
            if len(rows) < limit:
                return order, scores, True
            # Float slack on the bound: the scores compared are computed, not exact.
            bound = adm.ceiling(phrases, rho, -rows[-1][1]) * (1 + 1e-9) + 1e-12
            if len(order) >= want and -scores[order[want - 1]] > bound:
                return order[:want], scores, False
            limit *= 4

    def scope_names(self) -> tuple[frozenset[str], frozenset[str]]:
        """(repositories, snapshots) the index holds (cached with its statistics)."""
        stats = self._stats()
        return stats.repositories, stats.snapshots

    def _stats(self) -> _Stats:
        """Index-wide facts the query planner needs, recomputed only after the index changed.

        `PRAGMA data_version` moves when another connection commits; this connection's own
        writes drop the cache in `_write`.
        """
        db = self.conn()
        version = db.execute("PRAGMA data_version").fetchone()[0]
        stats: _Stats | None = getattr(self._local, "stats", None)
        if stats is not None and stats.version == version:
            return stats
        stats = _Stats(
            version=version,
            nodes=db.execute("SELECT count(*) FROM nodes").fetchone()[0],
            repositories=frozenset(
                r[0] for r in db.execute("SELECT DISTINCT repository FROM nodes")
            ),
            snapshots=frozenset(r[0] for r in db.execute("SELECT DISTINCT snapshot FROM nodes")),
            labels=frozenset(r[0] for r in db.execute("SELECT DISTINCT label FROM node_labels")),
            label_sets=_read_sets(
                db.execute("SELECT token, labels FROM label_sets ORDER BY token")
            ),
        )
        self._local.stats = stats
        return stats

    def _meta_match(self, scope: Scope, filters: dict[str, Any] | None) -> tuple[str, str]:
        """(required tokens, forbidden tokens) expressing scope and kind/language filters."""
        need = self._meta_need(scope, filters)
        stats = self._stats()
        allowed = set(scope.allowed_labels or ())
        held = stats.labels.union(*(labels for _, labels in stats.label_sets))
        if held <= allowed:
            return " AND ".join(need), ""  # nothing to hide
        visible = [token for token, labels in stats.label_sets if labels <= allowed]
        if len(visible) > MAX_SET_TOKENS:
            return " AND ".join(need), _any("l", sorted(held - allowed))
        need.append(_sets(visible))
        return " AND ".join(need), ""

    def _meta_need(self, scope: Scope, filters: dict[str, Any] | None) -> list[str]:
        """Required tokens for the scope's repository and snapshot and the filters."""
        need: list[str] = []
        stats = self._stats()
        # A constraint every node satisfies only slows FTS5 down: skip it, it excludes nothing.
        for value, present, prefix in (
            (scope.repository, stats.repositories, "r"),
            (scope.snapshot, stats.snapshots, "s"),
        ):
            if value and present != {value}:
                need.append(_any(prefix, [value]))  # absent values stay: nothing matches
        for key, prefix in (("kind", "k"), ("language", "g")):
            value = (filters or {}).get(key)
            if value:
                need.append(_any(prefix, [value] if isinstance(value, str) else value))
        return need

    def _bm25(
        self, match: str, scope: Scope, top_k: int, filters: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        """One ranked FTS5 query with scope and filters applied inside the index."""
        if not match:
            return []
        need, hidden = self._meta_match(scope, filters)
        expr = f"({match})" + (f" AND {need}" if need else "")
        if hidden:
            expr = f"({expr}) NOT {hidden}"
        prefix = (filters or {}).get("path_prefix")
        # The meta tokens only narrow the match: the rows found are checked against the
        # scope again, so a label token missing from the full-text index hides nothing
        # the tables hide.
        where, args = self._scope_sql(scope)
        acc = self._admitted(scope)
        fts = "nodes_fts"
        if acc is not None:
            fts = self._admitted_table(scope) or ""
            if not fts:
                return self._bm25_admitted(acc, match, expr, (where, args), top_k, prefix)
            # Every row of that table is admitted: the scope and filters' tokens suffice.
            need = " AND ".join(self._meta_need(scope, filters))
            expr = f"({match})" + (f" AND {need}" if need else "")
        db = self.conn()
        window = top_k if not prefix else max(top_k * 8, 64)
        while True:  # only a path prefix is applied after ranking; the window grows until exact
            # Ties in the window by rowid: the order _bm25_admitted keeps too.
            rows = db.execute(
                f"SELECT n.id, f.score, n.path, n.kind, n.name FROM (SELECT rowid,"
                f" bm25({fts}, 4.0, 1.0, 0.0) AS score FROM {fts} WHERE {fts} MATCH ?"
                " ORDER BY score, rowid LIMIT ?) f "
                "JOIN nodes n ON n.rowid = f.rowid "
                "WHERE (? IS NULL OR substr(n.path, 1, length(?)) = ?) "
                f"AND {where} ORDER BY f.score, n.id LIMIT ?",
                [expr, window, prefix, prefix, prefix, *args, top_k],
            ).fetchall()
            if len(rows) >= top_k or not prefix:
                break
            matched = db.execute(
                f"SELECT count(*) FROM (SELECT rowid FROM {fts} WHERE {fts} MATCH ? LIMIT ?)",
                (expr, window),
            ).fetchone()[0]
            if matched < window:
                break
            window *= 8
        return [_hit(i, r[0], -r[1], *r[2:5]) for i, r in enumerate(rows)]

    def _bm25_admitted(
        self,
        acc: adm.Admitted,
        match: str,
        expr: str,
        where_args: tuple[str, list[Any]],
        top_k: int,
        prefix: str | None,
    ) -> list[dict[str, Any]]:
        """_bm25 for a scope that does not admit every node: the matches ranked by their
        admitted scores (see _top_admitted), then the same window, scope check and path
        prefix as FTS5's ranking gets."""
        db = self.conn()
        where, args = where_args
        window = top_k if not prefix else max(top_k * 8, 64)
        while True:
            head, scores, every = self._top_admitted(acc, match, expr, window)
            head = head[:window]
            rows: list[tuple[Any, ...]] = []
            for start in range(0, len(head), 500):
                chunk = head[start : start + 500]
                # CROSS JOIN: looked up by rowid (the planner would rather scan the
                # scope's repository through its index).
                rows += db.execute(
                    "SELECT n.rowid, n.id, n.path, n.kind, n.name FROM (VALUES "
                    f"{','.join(['(?)'] * len(chunk))}) v CROSS JOIN nodes n "
                    "ON n.rowid = v.column1 "
                    "WHERE (? IS NULL OR substr(n.path, 1, length(?)) = ?) "
                    f"AND {where}",
                    [*chunk, prefix, prefix, prefix, *args],
                ).fetchall()
            if len(rows) >= top_k or not prefix or (every and len(head) < window):
                break
            window *= 8
        rows.sort(key=lambda r: (scores[r[0]], r[1]))
        return [_hit(i, r[1], -scores[r[0]], *r[2:5]) for i, r in enumerate(rows[:top_k])]

    def count_matches(self, query: str, *, scope: Scope, cap: int = 1000) -> int:
        """Nodes the scope may see that hold any searched word of query, up to cap + 1.

        Counted in the full-text index alone, from its scope and label tokens (no row is
        read out): what the access trace reports as the candidates a rule hid is this
        count under the wider scope minus this one. The tokens only narrow a search's
        match (its rows are checked against the tables); for a count they are enough.
        """
        return self._count(self._selective_any(query, scope), scope, cap)

    def _count(self, match: str, scope: Scope, cap: int) -> int:
        """Nodes the scope may see that match, up to cap + 1 (full-text tokens alone)."""
        if not match:
            return 0
        need, hidden = self._meta_match(scope, None)
        expr = f"({match})" + (f" AND {need}" if need else "")
        if hidden:
            expr = f"({expr}) NOT {hidden}"
        row = (
            self.conn()
            .execute(
                "SELECT count(*) FROM (SELECT rowid FROM nodes_fts WHERE nodes_fts MATCH ? "
                "LIMIT ?)",
                [expr, cap + 1],
            )
            .fetchone()
        )
        return int(row[0])

    def count_hidden(self, query: str, *, wide: Scope, narrow: Scope, cap: int = 1000) -> int:
        """Nodes `wide` may see and `narrow` may not that hold any searched word, up to
        cap + 1: what the access trace reports as hidden by the default rule.

        One full-text count over the label sets only `wide` admits (no row is read out);
        scopes that differ in more than their labels, or too many sets, are counted as
        the matches under wide minus those under narrow. The words are those narrow's own
        search looks for (chosen over the nodes it may see, see _selective_any).
        """
        stats = self._stats()
        inside, outside = set(wide.allowed_labels or ()), set(narrow.allowed_labels or ())
        hidden = [t for t, ls in stats.label_sets if ls <= inside and not ls <= outside]
        same = (wide.repository, wide.snapshot) == (narrow.repository, narrow.snapshot)
        match = self._selective_any(query, narrow)
        if not same or len(hidden) > MAX_SET_TOKENS:
            return max(0, self._count(match, wide, cap) - self._count(match, narrow, cap))
        if not match or not hidden:
            return 0
        need = [*self._meta_need(wide, None), _sets(hidden)]
        row = (
            self.conn()
            .execute(
                "SELECT count(*) FROM (SELECT rowid FROM nodes_fts WHERE nodes_fts MATCH ? "
                "LIMIT ?)",
                [f"({match}) AND " + " AND ".join(need), cap + 1],
            )
            .fetchone()
        )
        return int(row[0])

    def semantic(
        self,
        query: str,
        *,
        scope: Scope,
        top_k: int,
        embedder: Any,
        filters: dict[str, Any] | None = None,
        per_file: int = 2,
    ) -> list[dict[str, Any]]:
        """Cosine-similarity hits over stored vectors of the embedder's model (children
        folded into parents and the per-file cap as for BM25)."""
        with self._snapshot():
            ranker = self._semantic_ranker(query, scope, embedder, filters, per_file)
            return _layered(lambda pool, _loose: ranker(pool), top_k)

    def _semantic_ranker(
        self,
        query: str,
        scope: Scope,
        embedder: Any,
        filters: dict[str, Any] | None,
        per_file: int,
    ) -> Callable[[int], list[dict[str, Any]]]:
        """pool -> the whole semantic ranking of the `pool` nearest vectors (read once).

        A scope whose nodes have no vector of the embedder (and its vector text) is
        EMBEDDINGS_MISSING, not an empty list: that would look like "nothing matches".
        """
        from runtime.retrieval.embeddings import cosine_top, vector_model

        model = vector_model(embedder)
        where, args = self._scope_sql(scope)
        fsql, fargs = self._filter_sql(filters)
        rows = (
            self.conn()
            .execute(
                "SELECT n.id, v.vector, n.path, n.kind, n.name FROM vectors v "
                f"JOIN nodes n ON n.rowid = v.node WHERE v.model = ? AND {where}{fsql}",
                [model, *args, *fargs],
            )
            .fetchall()
        )
        if not rows:
            # No vector in scope: no hits only when there is no node either; nodes without
            # vectors would otherwise read as "nothing matches".
            found = self.conn().execute(
                f"SELECT count(*) FROM nodes n WHERE {where}{fsql}", [*args, *fargs]
            )
            nodes = found.fetchone()[0]
            if nodes:
                raise StoreError(
                    f"none of the {nodes} node(s) in scope has an {embedder.name} vector "
                    f"(vector text {model.partition('#')[2]!r}) for semantic search",
                    code="EMBEDDINGS_MISSING",
                )
            return lambda pool: []
        [qvec] = embedder.embed([query])
        vectors = [r[1] for r in rows]

        def ranked(pool: int) -> list[dict[str, Any]]:
            best = cosine_top(qvec, vectors, pool)
            info = {rows[i][0]: (rows[i][2], rows[i][3], rows[i][4]) for i, _ in best}
            scores = _demote_tests({rows[i][0]: s for i, s in best}, info)
            return self._rank(scores, info, scope=scope, filters=filters, per_file=per_file)

        return ranked

    def search(
        self,
        query: str,
        *,
        scope: Scope,
        top_k: int,
        search_type: str = "bm25",
        filters: dict[str, Any] | None = None,
        rrf_k: int = HYBRID_RRF_K,
        embedder: Any = None,
        per_file: int = 2,
    ) -> list[dict[str, Any]]:
        """BM25, semantic, or hybrid (their ranks fused by weighted reciprocal rank fusion).

        per_file: hits of one file before the rest of its hits are ranked down (0: no cap).
        """
        if search_type == "bm25":
            return self.bm25(query, scope=scope, top_k=top_k, filters=filters, per_file=per_file)
        if embedder is None:
            from runtime.retrieval.embeddings import default_embedder

            embedder = default_embedder()
        if search_type == "semantic":
            return self.semantic(
                query,
                scope=scope,
                top_k=top_k,
                embedder=embedder,
                filters=filters,
                per_file=per_file,
            )

        def ranked(pool: int, loose: bool) -> list[dict[str, Any]]:
            # Each list is `pool` long, cut from a ranking three times deeper (what folding
            # and the looser passes need to fill it), uncapped: the cap applies once, to
            # the fused ranking. BM25's looser passes join while its stricter ones found
            # fewer than `pool` nodes, as hybrid built its BM25 list before the ranking
            # stopped following top_k (gated at LOOSE_GATE, it answered one held-out
            # question fewer). The two lists weigh the same: over the 138 golden questions
            # each alone answers about three in four, so neither rank is better evidence.
            lexical = self._bm25_ranking(
                query, scope, filters, 0, 3 * pool, None if loose else pool
            )
            fused: dict[str, float] = {}
            info: dict[str, tuple[str, str, str]] = {}
            children: dict[str, list[str]] = {}
            for hits in (lexical[:pool], semantic(3 * pool)[:pool]):
                for rank, h in enumerate(hits, 1):
                    fused[h["id"]] = fused.get(h["id"], 0.0) + 1.0 / (rrf_k + rank)
                    info[h["id"]] = (h["path"], h["kind"], h["name"])
                    if h.get("children"):
                        children[h["id"]] = list(
                            dict.fromkeys(children.get(h["id"], []) + h["children"])
                        )
            return self._rank(
                fused, info, scope=scope, filters=filters, per_file=per_file, children=children
            )

        with self._snapshot():
            semantic = self._semantic_ranker(query, scope, embedder, filters, 0)
            return _layered(ranked, top_k)
