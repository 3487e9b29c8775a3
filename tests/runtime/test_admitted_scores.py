"""A denied node weighs nothing in a subject's search (issue 28; docs/access.md).

BM25 ranks with statistics: the node count, the mean row length and each phrase's
document count. Over an index holding nodes a subject may not see, those must be the
statistics of the nodes it may see, and the planner's word choices (which words are
selective, which are in half the nodes) must be made over them too; otherwise what a
subject cannot read moves the scores and order of what it can.

The property: over real code (six repositories' files, labelled into seven label sets),
every subject's search returns exactly what the same search returns on an index built
from the nodes that subject may see and nothing else (ids, order, scores, children),
for every golden question. The hidden counts of the access trace stay those of the
searched words (count_hidden).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runtime.retrieval.indexer import index_paths
from runtime.retrieval.node import Scope
from runtime.retrieval.nodestore import SqliteNodeStore, open_store
from runtime.retrieval.search import _BM25

ROOT = Path(__file__).resolve().parents[2]
REPOS = [
    ("wwi", "tests/data/realworld/wwi"),
    ("tsqlt", "tests/data/realworld/tsqlt"),
    ("eshop", "tests/data/realworld/eshop"),
    ("eshoponweb", "tests/data/realworld/eshoponweb"),
    ("cleanarch", "tests/data/realworld/cleanarch"),
    ("sample", "pipelines/sample/eshop"),
    ("code", "tests/data/code"),
]
# By the last letter of the file's stem: every repository gets nodes of every set, and a
# file matching two globs carries both globs' labels (seven label sets in all).
RULES = [
    ("*[a-e].*", ["public", "tenant:a"]),
    ("*[f-j].*", ["internal", "tenant:a"]),
    ("*[k-o].*", ["public", "tenant:b"]),
    ("*[p-s].*", ["internal"]),
    ("*Order*", ["internal"]),
]
EVERY = ("internal", "public", "tenant:a", "tenant:b")
SUBJECTS = {
    "public of tenant a": Scope(allowed_labels=("public", "tenant:a")),
    "internal and public of tenant b": Scope(allowed_labels=("internal", "public", "tenant:b")),
    "anonymous": Scope(),
    "tenant a, one repository": Scope("sample", None, ("internal", "public", "tenant:a")),
    "internal only, one snapshot": Scope(None, "main", ("internal",)),
    "every label (nothing hidden)": Scope(allowed_labels=EVERY),
}


def questions() -> list[str]:
    """Every golden question of tests/data (real questions about the indexed code)."""
    out: list[str] = []
    for name in ("questions", "heldout", "heldout2", "heldout3"):
        out += [c["q"] for c in json.loads((ROOT / f"tests/data/golden/{name}.json").read_text())]
    out += [c["q"] for c in json.loads((ROOT / "tests/data/retrieval/questions.json").read_text())]
    # Names as a person types them (the named and joined passes), and a lone common word.
    out += ["BasketService", "usp_PlaceOrder", "place order", "order", "customer orders"]
    return list(dict.fromkeys(out))


QUESTIONS = questions()
FAST = QUESTIONS[::6]  # the fast subset's share; the slow test runs every question


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> SqliteNodeStore:
    """Every repository indexed into one index, labelled by RULES."""
    path = tmp_path_factory.mktemp("admitted") / "full.db"
    store = open_store(str(path), create=True)
    for repo, root in REPOS:
        index_paths(
            store, [str(ROOT / root)], repository=repo, snapshot="main", label_rules=RULES, jobs=1
        )
    sets = store.conn().execute("SELECT count(DISTINCT labels) FROM nodes").fetchone()[0]
    assert sets == 7  # the fixture is as wide as the docstring says
    return store


def visible(labels_json: str, scope: Scope) -> bool:
    return set(json.loads(labels_json)) <= set(scope.allowed_labels or ())


def admitted_only(full: SqliteNodeStore, scope: Scope, path: Path) -> SqliteNodeStore:
    """A fresh index holding the rows of `full` whose labels the scope admits, and no other:
    the same rows (ids, rowids, full-text columns, edges) written into new tables, so
    FTS5's statistics there are those of the admitted nodes alone."""
    ref = open_store(str(path), create=True)
    keep = [
        r[0]
        for r in full.conn().execute("SELECT rowid, labels FROM nodes ORDER BY rowid")
        if visible(r[1], scope)
    ]
    db = sqlite3.connect(path)
    db.execute("ATTACH DATABASE ? AS f", (full.path,))
    db.execute("CREATE TEMP TABLE keep (rowid INTEGER PRIMARY KEY)")
    db.executemany("INSERT INTO keep VALUES (?)", [(k,) for k in keep])
    with db:
        db.execute("INSERT INTO nodes SELECT * FROM f.nodes WHERE rowid IN keep")
        db.execute("INSERT INTO node_labels SELECT * FROM f.node_labels WHERE node IN keep")
        db.execute(
            "INSERT INTO nodes_fts (rowid, name, body, meta) "
            "SELECT rowid, name, body, meta FROM f.nodes_fts WHERE rowid IN keep ORDER BY rowid"
        )
        db.execute("INSERT INTO edges SELECT * FROM f.edges")
        db.execute("INSERT INTO files SELECT * FROM f.files")
        db.execute(
            "INSERT INTO label_sets SELECT * FROM f.label_sets WHERE token IN "
            "(SELECT DISTINCT l.token FROM f.label_sets l JOIN nodes n ON n.labels = l.labels)"
        )
        db.execute("INSERT INTO nodes_fts (nodes_fts) VALUES ('optimize')")
    db.close()
    return ref


def searched(store: SqliteNodeStore, query: str, scope: Scope, **kw: Any) -> list[Any]:
    hits = store.search(query, scope=scope, top_k=10, **kw)
    return [(h["id"], h["rank"], h["score"], h.get("children")) for h in hits]


def assert_same(full: SqliteNodeStore, ref: SqliteNodeStore, scope: Scope, qs: list[str]):
    differ = []
    for q in qs:
        if searched(full, q, scope) != searched(ref, q, scope):
            differ.append(q)
    assert not differ, f"{len(differ)} of {len(qs)} questions rank differently: {differ[:5]}"
    # A filter and a path prefix narrow the match, never the statistics.
    for q in qs[:8]:
        for kw in ({"filters": {"language": "sql"}}, {"filters": {"path_prefix": "src/"}}):
            assert searched(full, q, scope, **kw) == searched(ref, q, scope, **kw), (q, kw)


@pytest.mark.parametrize("subject", sorted(SUBJECTS))
def test_a_subjects_search_ranks_as_if_denied_nodes_were_not_indexed(full, tmp_path, subject):
    scope = SUBJECTS[subject]
    ref = admitted_only(full, scope, tmp_path / "ref.db")
    assert_same(full, ref, scope, FAST)


@pytest.mark.slow
@pytest.mark.parametrize("subject", sorted(SUBJECTS))
def test_every_golden_question_ranks_as_if_denied_nodes_were_not_indexed(full, tmp_path, subject):
    scope = SUBJECTS[subject]
    ref = admitted_only(full, scope, tmp_path / "ref.db")
    assert_same(full, ref, scope, QUESTIONS)


def test_the_statistics_differ_here_so_the_property_has_teeth(full, tmp_path):
    """Whole-index statistics would rank differently: the fixture can tell right from wrong."""
    scope = SUBJECTS["public of tenant a"]
    ref = admitted_only(full, scope, tmp_path / "ref.db")
    every = Scope(allowed_labels=EVERY)
    full_n = full.conn().execute("SELECT count(*) FROM nodes").fetchone()[0]
    ref_n = ref.conn().execute("SELECT count(*) FROM nodes").fetchone()[0]
    assert ref_n < full_n / 2
    # One phrase's FTS5 score of the same row in each index: the statistics differ.
    sql = (
        "SELECT f.rowid, bm25(nodes_fts, 4.0, 1.0, 0.0) FROM nodes_fts f "
        "WHERE nodes_fts MATCH '\"order\"' ORDER BY f.rowid"
    )
    wide = dict(full.conn().execute(sql).fetchall())
    narrow = dict(ref.conn().execute(sql).fetchall())
    assert narrow and all(abs(wide[r] - s) > 1e-6 for r, s in narrow.items())
    assert every.allowed_labels  # (the full index under every label is its own reference)


@pytest.mark.parametrize("subject", ["public of tenant a", "anonymous", "tenant a, one repository"])
def test_hidden_counts_are_of_the_words_the_subject_searches(full, tmp_path, subject):
    """count_hidden: the nodes the wider scope admits, this one does not, holding a word
    the subject's own search would look for (its words chosen over what it may see)."""
    scope = SUBJECTS[subject]
    wide = Scope(scope.repository, scope.snapshot, EVERY)
    ref = admitted_only(full, scope, tmp_path / "ref.db")
    db = full.conn()
    nodes = {r[0]: r[1:] for r in db.execute("SELECT rowid, labels, repository FROM nodes")}
    counted = 0
    for q in FAST[:20]:
        # The words the subject's search looks for, chosen where only its nodes exist.
        match = ref._selective_any(q, scope)
        rows = db.execute("SELECT rowid FROM nodes_fts WHERE nodes_fts MATCH ?", (match or "x",))
        found = [nodes[r[0]] for r in rows] if match else []
        found = [f for f in found if scope.repository in (None, f[1])]
        seen = sum(1 for f in found if visible(f[0], scope))
        assert full.count_hidden(q, wide=wide, narrow=scope) == len(found) - seen, q
        assert full.count_matches(q, scope=scope) == seen, q
        counted += len(found) - seen
    assert counted  # some question's words are in hidden nodes


def test_half_the_nodes_is_half_the_admitted_nodes(tmp_path):
    """The all-words pass drops a word in half the nodes or more (its BM25 weight is
    nil): half of what the subject may see. "order" is in 5 of the 8 visible nodes and
    in none of the 20 hidden ones, so the subject's all-words pass needs only "reserve"
    and "stock" and finds ReserveStock as well, as on an index of its nodes alone."""
    from runtime.retrieval.node import Node

    store = open_store(str(tmp_path / "i.db"), create=True)
    texts = {
        "ReserveStockForOrder": ("reserve stock for the order", []),
        "ReserveStock": ("reserve stock quantity", []),
        **{f"Order{i}": (f"order line {i}", []) for i in range(5)},
        "Misc": ("misc helper", []),
        **{f"Hidden{i}": (f"hidden words {i}", ["internal"]) for i in range(20)},
    }
    for name, (text, labels) in texts.items():
        n = Node(
            f"r::main::function::{name}",
            "r",
            "main",
            "function",
            name,
            name,
            f"{name}.py",
            "python",
            1,
            2,
            text,
            labels=labels,
        )
        store.replace_file("r", "main", n.path, n.path, [n], {"symbols": [], "deps": []})
    ref = admitted_only(store, Scope(), tmp_path / "ref.db")
    q = "where is stock reserved for an order"
    assert searched(store, q, Scope()) == searched(ref, q, Scope())
    with store._snapshot():
        assert '"order"' not in store._informative_all(q, Scope())
        assert '"order"' in store._informative_all(q, Scope(allowed_labels=("internal",)))


def test_a_rare_admitted_word_ranks_first_though_fts5_ranks_it_last(tmp_path):
    """The ranking walks down FTS5's own order and stops once no row further down can
    enter the top: "beta" is in 405 of 505 nodes (FTS5 weighs it nothing) but in 5 of
    the 105 the subject may see, where it is the rarest word, so those five rank first,
    though FTS5 puts them below the 100 "alpha" nodes."""
    from runtime.retrieval.node import Node

    store = open_store(str(tmp_path / "i.db"), create=True)
    texts = [(f"A{i}", "alpha " * (1 + i % 4) + f"filler{i}", []) for i in range(100)]
    texts += [(f"B{i}", f"beta words{i}", []) for i in range(5)]
    texts += [(f"H{i}", f"beta hidden{i}", ["internal"]) for i in range(400)]
    rows = []
    for name, text, labels in texts:
        rows.append(
            Node(
                f"r::main::function::{name}",
                "r",
                "main",
                "function",
                name,
                name,
                f"{name}.py",
                "python",
                1,
                2,
                text,
                labels=labels,
            )
        )
    store.replace_file("r", "main", "all.py", "1", rows, {"symbols": [], "deps": []})
    ref = admitted_only(store, Scope(), tmp_path / "ref.db")
    with store._snapshot():
        got = store._bm25('"alpha" OR "beta"', Scope(), 40, None)
    with ref._snapshot():
        want = ref._bm25('"alpha" OR "beta"', Scope(), 40, None)
    assert got == want
    assert {h["id"][-2:] for h in got[:5]} == {f"B{i}" for i in range(5)}
    for q in ("alpha beta", "beta", "alpha"):
        assert searched(store, q, Scope()) == searched(ref, q, Scope()), q


def test_the_walk_stops_only_when_no_lower_row_can_rise(tmp_path):
    """Both words weigh more where only the admitted nodes count, "xray" ten times more
    (its nodes are almost all hidden), "yankee" 1.7 times: the five xray nodes, last in
    FTS5's order, rank first once the statistics are the subject's."""
    from runtime.retrieval.node import Node

    store = open_store(str(tmp_path / "i.db"), create=True)
    texts = [(f"Y{i}", "yankee " * (1 + i % 4) + f"filler{i}", []) for i in range(100)]
    texts += [(f"X{i}", f"xray words{i}", []) for i in range(5)]
    texts += [(f"P{i}", f"plain{i}", []) for i in range(195)]
    texts += [(f"HY{i}", f"yankee hidden{i}", ["internal"]) for i in range(300)]
    texts += [(f"HX{i}", f"xray hidden{i}", ["internal"]) for i in range(400)]
    rows = [
        Node(
            f"r::main::function::{name}",
            "r",
            "main",
            "function",
            name,
            name,
            f"{name}.py",
            "python",
            1,
            2,
            text,
            labels=labels,
        )
        for name, text, labels in texts
    ]
    store.replace_file("r", "main", "all.py", "1", rows, {"symbols": [], "deps": []})
    ref = admitted_only(store, Scope(), tmp_path / "ref.db")
    with store._snapshot():
        got = store._bm25('"yankee" OR "xray"', Scope(), 40, None)
    with ref._snapshot():
        want = ref._bm25('"yankee" OR "xray"', Scope(), 40, None)
    assert got == want
    assert {h["id"][-2:] for h in got[:5]} == {f"X{i}" for i in range(5)}


def test_longer_admitted_nodes_soften_the_length_penalty(tmp_path):
    """The hidden nodes are short, so over all nodes the mean length is small and a long
    node is ranked far down; over the admitted nodes alone (long on average) the long
    nodes saying "zulu" three times rank above the short ones saying it once."""
    from runtime.retrieval.node import Node

    store = open_store(str(tmp_path / "i.db"), create=True)
    filler = " ".join(f"w{j}" for j in range(15))
    texts = [(f"S{i}", f"zulu a{i}", []) for i in range(60)]
    texts += [(f"L{i}", f"zulu zulu zulu {filler}", []) for i in range(60)]
    texts += [(f"V{i}", f"other {filler}", []) for i in range(200)]
    texts += [(f"H{i}", "h", ["internal"]) for i in range(3000)]
    rows = [
        Node(
            f"r::main::function::{n}",
            "r",
            "main",
            "function",
            n,
            n,
            "x.py",
            "python",
            1,
            2,
            text,
            labels=labels,
        )
        for n, text, labels in texts
    ]
    store.replace_file("r", "main", "x.py", "1", rows, {"symbols": [], "deps": []})
    ref = admitted_only(store, Scope(), tmp_path / "ref.db")
    with store._snapshot():
        got = store._bm25('"zulu"', Scope(), 40, None)
        first = store.conn().execute(
            f"SELECT rowid FROM nodes_fts WHERE nodes_fts MATCH 'zulu' ORDER BY {_BM25} LIMIT 1"
        )
        assert first.fetchone()[0] == 1  # FTS5 ranks the short S0 first
    with ref._snapshot():
        want = ref._bm25('"zulu"', Scope(), 40, None)
    assert got == want
    assert {h["id"].rsplit(":", 1)[1][0] for h in got} == {"L"}


def test_a_subject_outside_every_set_of_an_emptied_index_gets_no_hits(tmp_path):
    """Label sets outlive their nodes (the set table is never pruned): a subject they do
    not admit searches an index that holds no node at all, or no admitted one."""
    from runtime.retrieval.node import Node

    store = open_store(str(tmp_path / "i.db"), create=True)
    n = Node(
        "r::main::function::F",
        "r",
        "main",
        "function",
        "F",
        "F",
        "f.py",
        "python",
        1,
        2,
        "alpha beta",
        labels=["internal"],
    )
    store.replace_file("r", "main", "f.py", "1", [n], {"symbols": [], "deps": []})
    assert store.search("alpha F", scope=Scope(), top_k=5) == []
    store.replace_file("r", "main", "f.py", "2", [], {"symbols": [], "deps": []})
    assert store.search("alpha F", scope=Scope(), top_k=5) == []
    assert (
        store.count_hidden("alpha", wide=Scope(allowed_labels=("internal",)), narrow=Scope()) == 0
    )


def test_the_caches_stay_bounded_and_a_cleared_cache_ranks_the_same(full, tmp_path, monkeypatch):
    """A server answers many subjects: the figures are kept for at most CACHE_SUBJECTS
    sets of admitted labels a thread, and the per-row counts start over past CACHE_ROWS,
    which changes no ranking."""
    from runtime.retrieval import admitted

    scope = SUBJECTS["public of tenant a"]
    ref = admitted_only(full, scope, tmp_path / "ref.db")
    monkeypatch.setattr(admitted, "CACHE_ROWS", 30)
    fresh = open_store(full.path)
    for q in FAST[:12]:
        assert searched(fresh, q, scope) == searched(ref, q, scope), q
        with fresh._snapshot():
            acc = fresh._admitted(scope)
            # past the bound it starts over: at most one batch (rows x phrases) over it
            assert acc is not None and acc.cached_rows <= 30 + 600
    subjects = [Scope(allowed_labels=(label,)) for label in ("a", "b", "c", "d", "e", "public")]
    for s in subjects:
        fresh.search("order", scope=s, top_k=3)
    with fresh._snapshot():
        kept = [k for k in fresh._stats().admitted if isinstance(k, tuple) and k[0] == "acc"]
    assert len(kept) == admitted.CACHE_SUBJECTS


def test_the_admitted_rows_table_follows_the_index(tmp_path, monkeypatch):
    """After MATERIALISE_AFTER searches the admitted rows rank in a temporary table of their
    own: a node written afterwards (by this connection or another) is ranked, never a
    stale copy, and the table's scores are those of the walk."""
    from runtime.retrieval import search as search_module
    from runtime.retrieval.node import Node
    from runtime.retrieval.nodestore import open_store

    def node(name: str, text: str, labels: list[str]) -> Node:
        return Node(
            f"r::main::procedure::{name}", "r", "main", "procedure", name, name,
            f"{name}.sql", "tsql", 1, 2, text, labels=labels,
        )  # fmt: skip

    path = str(tmp_path / "i.db")
    store = open_store(path, create=True)
    for i in range(6):
        n = node(f"Hr{i}", "basket refund basket payroll", ["hr"])
        store.replace_file("r", "main", n.path, f"h{i}", [n], {"symbols": [], "deps": []})
    for i in range(3):
        n = node(f"Pub{i}", f"basket service number {i}", [])
        store.replace_file("r", "main", n.path, f"p{i}", [n], {"symbols": [], "deps": []})
    public = Scope("r", "main")
    monkeypatch.setattr(search_module, "MATERIALISE_AFTER", 10**9)
    walked = store.search("basket service", scope=public, top_k=10, per_file=0)
    monkeypatch.setattr(search_module, "MATERIALISE_AFTER", 1)
    tabled = store.search("basket service", scope=public, top_k=10, per_file=0)
    assert store._admitted_table(public)  # built, and used above
    assert tabled == walked and {h["id"].rsplit("::", 1)[1] for h in tabled} == {
        "Pub0", "Pub1", "Pub2"
    }  # fmt: skip
    n = node("Pub9", "basket service basket service", [])
    store.replace_file("r", "main", n.path, "p9", [n], {"symbols": [], "deps": []})
    assert store._admitted_table(public) is None  # the copy is of the version before
    after = store.search("basket service", scope=public, top_k=10, per_file=0)
    assert after[0]["id"].endswith("Pub9")
    assert store._admitted_table(public)  # built again for the new version
    other = open_store(path)  # another connection writes
    n = node("Pub8", "basket service basket service basket", [])
    other.replace_file("r", "main", n.path, "p8", [n], {"symbols": [], "deps": []})
    again = store.search("basket service", scope=public, top_k=10, per_file=0)
    assert "r::main::procedure::Pub8" in {h["id"] for h in again}
    monkeypatch.setattr(search_module, "MATERIALISE_AFTER", 10**9)
    fresh = open_store(path).search("basket service", scope=public, top_k=10, per_file=0)
    assert again == fresh  # the table rebuilt for the new version ranks as the walk


def test_no_copy_is_made_of_more_admitted_rows_than_the_cap(tmp_path, monkeypatch):
    from runtime.retrieval import search as search_module
    from runtime.retrieval.node import Node
    from runtime.retrieval.nodestore import open_store

    store = open_store(str(tmp_path / "i.db"), create=True)
    for i, labels in enumerate(([], [], ["hr"])):
        n = Node(f"r::main::procedure::P{i}", "r", "main", "procedure", f"P{i}", f"P{i}",
                 f"P{i}.sql", "tsql", 1, 2, "basket service", labels=labels)  # fmt: skip
        store.replace_file("r", "main", n.path, str(i), [n], {"symbols": [], "deps": []})
    monkeypatch.setattr(search_module, "MATERIALISE_AFTER", 1)
    monkeypatch.setattr(search_module, "MATERIALISE_MAX_ROWS", 1)  # two rows are admitted
    public = Scope("r", "main")
    hits = store.search("basket", scope=public, top_k=5, per_file=0)
    assert store._admitted_table(public) is None and len(hits) == 2
    monkeypatch.setattr(search_module, "MATERIALISE_MAX_ROWS", 2)
    assert store.search("basket", scope=public, top_k=5, per_file=0) == hits
    assert store._admitted_table(public)
