"""The ranking rules of issue 15 item 2 (docs/retrieval.md#one-ranking): the kind a question
asks for, names a question spells out, a type's matching members folded into it, and
tSQLt test procedures as test code."""

from __future__ import annotations

from pathlib import Path

import pytest
from index_support import index_tree

import runtime.retrieval.search as search_module
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.node import Scope
from runtime.retrieval.nodestore import open_store
from runtime.retrieval.query import (
    IRREGULAR,
    asked_kinds,
    name_cover,
    query_terms,
    question_stems,
    word_stem,
)
from runtime.retrieval.search import is_test_node
from runtime.retrieval.words import STOPWORDS

REALWORLD = Path(__file__).resolve().parent.parent / "data" / "realworld"
R = Scope("r", "main")


def _index(tmp_path: Path, files: dict[str, str]):
    return index_tree(tmp_path, files, "r", tmp_path / "i.db")


@pytest.mark.parametrize(
    ("question", "kinds"),
    [
        ("How do I check that a table is empty?", []),  # the table is what it works on
        ("How can I replace a function with a fake in a test?", []),
        ("Which table type passes a list of order lines to a procedure?", ["table", "type"]),
        ("Which user-defined data type is used for flags?", ["user", "type"]),
        ("What columns does the Orders table have?", ["table"]),  # beside a name
        ("Which indexes exist on the Orders table?", ["index", "table"]),
        ("Which repository methods call stored procedures?", ["method"]),
        ("customer lifetime value view", ["view"]),  # a keyword query: every kind word
    ],
)
def test_the_kind_asked_for_is_in_the_head_or_beside_a_name(question, kinds):
    assert asked_kinds(question) == kinds


def test_irregular_past_forms_are_searched_as_their_verb_too():
    terms, _ = query_terms("How are webhooks sent to subscribers?")
    assert '("sent" OR "send")' in terms
    assert word_stem("sent") == word_stem("send") == "send"
    assert name_cover("SendAll", question_stems("what is sent to all")) == (2, 2)
    # A base that is a stop word is not searched ("done" -> "do" would match everything).
    assert "done" not in IRREGULAR and all(b not in STOPWORDS for b in IRREGULAR.values())


def test_stems_and_name_cover():
    assert {word_stem(w) for w in ("fake", "faked", "fakes")} == {"fak"}
    assert word_stem("runs") == word_stem("run") and word_stem("added") == "add"
    stems = question_stems("Which procedure runs all the tests?")
    assert name_cover("RunAll", stems) == (2, 2)
    assert name_cover("Private_RunAll", stems) == (2, 3)
    assert name_cover("Private_GetCursorForRunAll", stems) == (2, 4)  # "for" is no word


@pytest.mark.parametrize(
    ("inflected", "base"),
    [("skipped", "skip"), ("running", "run"), ("stopped", "stop"), ("mapped", "map")],
)
def test_a_doubled_last_letter_before_ed_or_ing_is_undone(inflected, base):
    """A doubled consonant before -ed/-ing is the inflection's, so "skipped" says Skip."""
    assert word_stem(inflected) == word_stem(base) == base
    assert name_cover(f"{base.title()}Test", question_stems(f"a test {inflected}")) == (2, 2)


@pytest.mark.parametrize(
    ("inflected", "base"),
    [("called", "call"), ("passed", "pass"), ("added", "add"), ("buzzed", "buzz")],
)
def test_a_doubled_letter_of_the_verb_itself_stays(inflected, base):
    """ll, ss, zz belong to the verb (Call, Pass, Buzz); so does the dd of a two-letter stem."""
    assert word_stem(inflected) == word_stem(base) == base


RUNNERS = {
    "Source/Run.sql": "\n".join(
        f"CREATE PROCEDURE [tSQLt].[{name}] AS\nBEGIN\n    SELECT 1 AS {name}Result;\nEND;\nGO"
        for name in (
            "Private_GetCursorForRunAll",
            "Private_RunAll",
            "RunAll",
            "RunNew",
            "Private_RunAllTestsNow",
        )
    ),
}


def test_a_name_the_question_spells_ranks_by_the_share_it_says(tmp_path):
    store = _index(tmp_path, RUNNERS)
    with store._snapshot():
        hits = store._spelled("Which procedure runs all the tests?", R, 10, None)
    # RunAll (all of it said) before Private_RunAll (2 of 3), then 3 of 5; 2 of 4 is not
    # most of a name, and RunNew shares one word only.
    assert [h["name"] for h in hits] == ["RunAll", "Private_RunAll", "Private_RunAllTestsNow"]
    assert [h["rank"] for h in hits] == [1, 2, 3]
    with store._snapshot():
        # Identifiers the question writes are the named pass's, not spelled out in words.
        assert store._spelled("Where is RunAll or Private_RunAll?", R, 10, None) == []
    top = store.search("Which procedure runs all the tests?", scope=R, top_k=3, per_file=0)
    assert "RunAll" in [h["name"] for h in top]


def test_spelled_names_find_a_tsqlt_framework_procedure_among_its_tests(tmp_path):
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(REALWORLD / "tsqlt")], repository="tsqlt")
    hits = store.search("How do I stub a record in a test?", scope=Scope("tsqlt"), top_k=5)
    assert hits[0]["id"] == "tsqlt::main::procedure::tSQLt.StubRecord"


CACHE = """namespace Shop.Admin;

public class CachedItems
{
    public void Edit(int id) { _cache.Remove("catalog items cache"); }
    public void Create(int id) { _cache.Remove("catalog items cache"); }
    public void GetById(int id) { _cache.Get("catalog items cache"); }
}

public class ItemsCacheTwo
{
    public void Clear() { _cache.Remove("catalog items cache"); }
    public void Reset() { _cache.Remove("catalog items cache"); }
}

public class Pricing
{
    public decimal Price(int id) { return _cache.Get("catalog items cache"); }
}
"""


def test_several_matching_members_fold_into_their_type(tmp_path):
    store = _index(tmp_path, {"src/Admin/Cache.cs": CACHE})
    hits = store.search("catalog items cache", scope=R, top_k=8, per_file=0)
    ids = [h["id"] for h in hits]
    typ = next(h for h in hits if h["id"] == "r::main::class::Shop.Admin.CachedItems")
    assert sorted(typ["children"]) == [
        "r::main::method::Shop.Admin.CachedItems.Create",
        "r::main::method::Shop.Admin.CachedItems.Edit",
        "r::main::method::Shop.Admin.CachedItems.GetById",
    ]
    assert not [i for i in ids if i.startswith("r::main::method::Shop.Admin.CachedItems.")]
    # Two matching members (MEMBER_FOLD is three) and a lone one stay themselves.
    assert {
        "r::main::method::Shop.Admin.ItemsCacheTwo.Clear",
        "r::main::method::Shop.Admin.ItemsCacheTwo.Reset",
        "r::main::method::Shop.Admin.Pricing.Price",
    } <= set(ids)
    assert not [h for h in hits if h["id"] != typ["id"] and h.get("children")]


def test_fewer_matching_members_than_member_fold_do_not_fold(tmp_path, monkeypatch):
    store = _index(tmp_path, {"src/Admin/Cache.cs": CACHE})
    monkeypatch.setattr(search_module, "MEMBER_FOLD", 4)  # more than any type has matching
    hits = store.search("catalog items cache", scope=R, top_k=8, per_file=0)
    assert "r::main::method::Shop.Admin.CachedItems.Edit" in [h["id"] for h in hits]
    assert not [h for h in hits if h.get("children")]


@pytest.mark.parametrize(
    ("path", "kind", "name", "test"),
    [
        ("Source/Checks.sql", "procedure", "test AddWidget adds a widget", True),
        ("Source/Checks.sql", "procedure", "test_AddWidget_adds", True),
        ("Source/Checks.sql", "procedure", "RunTest", False),
        ("Source/Checks.sql", "table", "TestResult", False),
        ("Tests/WidgetTests.class.sql", "table", "Widget", True),
    ],
)
def test_tsqlt_test_procedures_are_test_code(path, kind, name, test):
    assert is_test_node(path, kind, name) is test


WIDGETS = {
    "Source/Widget.sql": (
        "CREATE PROCEDURE [dbo].[AddWidget] @Name NVARCHAR(50)\nAS\nBEGIN\n"
        "    INSERT dbo.Widgets (Name) VALUES (@Name);\nEND;\nGO\n"
    ),
    # A tSQLt test class outside any test folder: known by its procedures' names.
    "Source/WidgetChecks.sql": (
        "EXEC tSQLt.NewTestClass 'WidgetChecks';\nGO\n"
        "CREATE PROCEDURE [WidgetChecks].[test AddWidget adds a widget to Widgets]\nAS\nBEGIN\n"
        "    EXEC tSQLt.FakeTable 'dbo.Widgets';\n    EXEC dbo.AddWidget @Name = 'widget';\n"
        "    EXEC tSQLt.AssertEqualsTable 'dbo.Widgets', 'dbo.Widgets';\nEND;\nGO\n"
    ),
}


def test_a_tsqlt_test_ranks_after_the_procedure_it_tests(tmp_path):
    store = _index(tmp_path, WIDGETS)
    hits = store.search("add widget", scope=R, top_k=5, per_file=0)
    names = [h["name"] for h in hits]
    assert names.index("AddWidget") < names.index("test AddWidget adds a widget to Widgets")


def test_hybrid_sums_the_reciprocal_ranks_of_both_lists(tmp_path, hashing_embedder):
    """A hybrid hit scores the sum over the BM25 and semantic lists of 1 / (rrf_k + rank);
    each list HEAD_POOL long, cut from a ranking three times deeper (BM25's looser passes
    gated on HEAD_POOL), so it does not depend on top_k."""
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(REALWORLD / "wwi")], repository="wwi", embedder=hashing_embedder)
    scope, k = Scope("wwi"), search_module.HYBRID_RRF_K
    for q in ("Which procedure deletes a city?", "cold room temperatures", "invoice numbers"):
        pool = search_module.HEAD_POOL
        bm25 = store._bm25_ranking(q, scope, None, 0, 3 * pool, pool)[:pool]
        semantic = store._semantic_ranker(q, scope, hashing_embedder, None, 0)(3 * pool)[:pool]
        lexical = {h["id"]: h["rank"] for h in bm25}
        meaning = {h["id"]: h["rank"] for h in semantic}
        hits = store.search(
            q, scope=scope, top_k=5, search_type="hybrid", embedder=hashing_embedder, per_file=0
        )
        assert hits
        for h in hits:
            want = 1.0 / (k + lexical[h["id"]]) if h["id"] in lexical else 0.0
            if h["id"] in meaning:
                want += 1.0 / (k + meaning[h["id"]])
            assert h["score"] == pytest.approx(want, abs=2e-6)
