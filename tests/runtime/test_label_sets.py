"""The default rule as label sets in the full-text match (issue 28; docs/access.md).

Every node's full-text row carries one hidden token naming its whole label set, and the
index lists the sets it holds (`label_sets`). A search under the rule matches only the
tokens of the sets within the visible labels, so FTS5 ranks visible nodes only: hidden
ones never take a place in the ranked window, whatever they score. An index of the
layout before (3) is refused by readers and migrated in place by the indexer.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from runtime.errors import StoreError
from runtime.retrieval.node import Node, Scope, label_set_token
from runtime.retrieval.nodestore import INDEX_FORMAT, open_store

SETS = {
    "Plain": [],
    "Pub": ["public"],
    "PubA": ["public", "tenant:a"],
    "IntA": ["internal", "tenant:a"],
    "PubB": ["public", "tenant:b"],
    "IntB": ["internal", "tenant:b"],
}
VISIBLE_TO_A_PUBLIC = {"Plain", "Pub", "PubA"}


def node(name: str, text: str, labels: list[str]) -> Node:
    return Node(
        f"r::main::procedure::{name}",
        "r",
        "main",
        "procedure",
        name,
        name,
        f"{name}.sql",
        "tsql",
        1,
        2,
        text,
        labels=labels,
    )


def build(path) -> object:
    store = open_store(str(path), create=True)
    # The hidden nodes say "refund" five times: under BM25 each outranks every visible one.
    for name, labels in SETS.items():
        loud = sorted(set(labels)) not in ([], ["public"], ["public", "tenant:a"])
        for i in range(6 if loud else 2):
            text = "refund " * (5 if loud else 1) + f"ledger words {i}"
            n = node(f"{name}{i}", text, labels)
            store.replace_file("r", "main", n.path, n.path, [n], {"symbols": [], "deps": []})
    return store


def names(hits) -> set[str]:
    return {h["id"].rsplit("::", 1)[1].rstrip("0123456789") for h in hits}


def test_a_search_ranks_only_the_visible_label_sets(tmp_path):
    store = build(tmp_path / "i.db")
    scope = Scope("r", "main", ("public", "tenant:a"))
    hits = store.search("refund", scope=scope, top_k=6, per_file=0)
    # The six visible nodes fill top_k although 18 hidden ones rank above them in BM25.
    assert len(hits) == 6 and names(hits) == VISIBLE_TO_A_PUBLIC
    assert store.count_matches("refund", scope=scope) == 6
    every = Scope("r", "main", ("internal", "public", "tenant:a", "tenant:b"))
    assert store.count_matches("refund", scope=every) == 24
    assert names(store.search("refund", scope=every, top_k=40, per_file=0)) == set(SETS)
    # Unlabelled only, and a scope whose labels no set fits within but the empty one.
    assert names(store.search("refund", scope=Scope("r", "main"), top_k=9, per_file=0)) == {"Plain"}
    internal_a = Scope("r", "main", ("internal", "tenant:a"))
    assert names(store.search("refund", scope=internal_a, top_k=20, per_file=0)) == {
        "Plain",
        "IntA",
    }


def test_the_index_lists_each_label_set_once_with_its_token(tmp_path):
    store = build(tmp_path / "i.db")
    rows = dict(store.conn().execute("SELECT token, labels FROM label_sets"))
    stored = [json.dumps(sorted(v)) for v in SETS.values()]
    assert rows == {label_set_token(labels): labels for labels in stored}
    meta = (
        store.conn()
        .execute(
            "SELECT f.meta FROM nodes_fts f JOIN nodes n ON n.rowid = f.rowid WHERE n.name = 'IntB0'"
        )
        .fetchone()[0]
    )
    assert label_set_token('["internal", "tenant:b"]') in meta.split()
    assert label_set_token("[]") not in meta.split()


def _as_layout_3(path) -> None:
    """Make the index what the layout before wrote: no set tokens, no set table."""
    db = sqlite3.connect(path)
    with db:
        for (token,) in db.execute("SELECT token FROM label_sets").fetchall():
            db.execute("UPDATE nodes_fts SET meta = replace(meta, ?, '')", (" " + token,))
        db.execute("DROP TABLE label_sets")
        db.execute("PRAGMA user_version = 3")
    db.close()


def test_an_index_of_layout_3_is_refused_by_readers_and_migrated_by_the_indexer(tmp_path):
    path = tmp_path / "i.db"
    build(path).conn().close()
    _as_layout_3(path)
    with pytest.raises(StoreError) as info:
        open_store(str(path))
    assert info.value.code == "INDEX_FORMAT" and "runtime index" in str(info.value)
    writer = open_store(str(path), create=True)
    assert not writer.rebuilt  # migrated in place: nothing to index again
    assert writer.counts()["nodes"] == 24
    reader = open_store(str(path))
    assert reader.conn().execute("PRAGMA user_version").fetchone()[0] == INDEX_FORMAT == 4
    scope = Scope("r", "main", ("public", "tenant:a"))
    hits = reader.search("refund", scope=scope, top_k=6, per_file=0)
    assert len(hits) == 6 and names(hits) == VISIBLE_TO_A_PUBLIC


def test_a_set_token_swapped_for_a_visible_one_hides_nothing_more(tmp_path):
    store = build(tmp_path / "i.db")
    store.conn().close()
    db = sqlite3.connect(tmp_path / "i.db")
    with db:  # every hidden node's row now claims the unlabelled set
        for labels in ('["internal", "tenant:a"]', '["public", "tenant:b"]'):
            db.execute(
                "UPDATE nodes_fts SET meta = replace(meta, ?, ?)",
                (label_set_token(labels), label_set_token("[]")),
            )
        db.execute("UPDATE label_sets SET labels = '[]' WHERE labels LIKE '%internal%'")
    db.close()
    reader = open_store(str(tmp_path / "i.db"))
    scope = Scope("r", "main", ("public", "tenant:a"))
    hits = reader.search("refund", scope=scope, top_k=40, per_file=0)
    assert names(hits) == VISIBLE_TO_A_PUBLIC
    assert (
        set(reader.get_nodes([f"r::main::procedure::IntA{i}" for i in range(6)], scope=scope))
        == set()
    )


def test_what_the_rule_hid_is_counted_in_one_match_over_the_sets_only_the_wider_scope_admits(
    tmp_path,
):
    store = build(tmp_path / "i.db")
    every = Scope("r", "main", ("internal", "public", "tenant:a", "tenant:b"))
    public_a = Scope("r", "main", ("public", "tenant:a"))
    internal_a = Scope("r", "main", ("internal", "tenant:a"))
    assert store.count_hidden("refund", wide=every, narrow=public_a) == 18
    assert (
        store.count_hidden("refund", wide=every, narrow=internal_a) == 16
    )  # Pub, PubA, PubB, IntB
    assert store.count_hidden("refund", wide=public_a, narrow=Scope("r", "main")) == 4
    assert store.count_hidden("refund", wide=public_a, narrow=public_a) == 0
    assert store.count_hidden("refund", wide=every, narrow=public_a, cap=5) == 6
    # Another snapshot: counted as the difference of two counts (none here).
    assert store.count_hidden("refund", wide=every, narrow=Scope("r", "other")) == 24
