"""One ranking: fused passes with scores that never rise down the list, child nodes folded
into their parent, the per-file cap, test code after the code it tests, kind words."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_support import index_tree

from runtime.retrieval import search as search_module
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.node import Scope
from runtime.retrieval.nodestore import open_store
from runtime.retrieval.query import KIND_WORDS, kinds_in, query_terms
from runtime.retrieval.search import is_test_path

SHOP = Scope("shop", "main")
REALWORLD = Path(__file__).resolve().parent.parent / "data" / "realworld"

# A database project laid out as SSDT does: one table per file with its keys and indexes,
# and a procedure that writes the table.
ORDERS = """CREATE TABLE [Sales].[Orders] (
    [OrderID] INT NOT NULL,
    [CustomerID] INT NOT NULL,
    [SalespersonPersonID] INT NOT NULL,
    [ContactPersonID] INT NOT NULL,
    [PickedByPersonID] INT NULL,
    [BackorderOrderID] INT NULL,
    CONSTRAINT [PK_Sales_Orders] PRIMARY KEY CLUSTERED ([OrderID] ASC)
);
GO
CREATE NONCLUSTERED INDEX [FK_Sales_Orders_CustomerID] ON [Sales].[Orders]([CustomerID] ASC);
GO
CREATE NONCLUSTERED INDEX [FK_Sales_Orders_SalespersonPersonID] ON [Sales].[Orders]([SalespersonPersonID] ASC);
GO
CREATE NONCLUSTERED INDEX [FK_Sales_Orders_ContactPersonID] ON [Sales].[Orders]([ContactPersonID] ASC);
GO
CREATE NONCLUSTERED INDEX [FK_Sales_Orders_PickedByPersonID] ON [Sales].[Orders]([PickedByPersonID] ASC);
GO
CREATE NONCLUSTERED INDEX [FK_Sales_Orders_BackorderOrderID] ON [Sales].[Orders]([BackorderOrderID] ASC);
GO
"""

PLACE = """CREATE PROCEDURE [Website].[PlaceOrder] @CustomerID INT
AS
BEGIN
    INSERT Sales.Orders (CustomerID, SalespersonPersonID, ContactPersonID)
    VALUES (@CustomerID, 1, 1);
END;
GO
"""

# One SQL file of eight procedures that all say "invoice", one C# file that says it once.
# (Procedures: a C# type's matching methods fold into the type, see MEMBER_FOLD, and the
# per-file cap is about different things of one file.)
INVOICES = "".join(
    f"-- Writes invoice part {i} of the invoice.\n"
    f"CREATE PROCEDURE [Billing].[InvoiceWriter{i}] @InvoiceID INT\nAS\n"
    f"BEGIN\n    SELECT @InvoiceID AS InvoiceID, {i} AS Part;\nEND;\nGO\n"
    for i in range(8)
)

MAILER = """namespace Shop.Mail;

public class Mailer
{
    /// <summary>Sends an invoice by mail.</summary>
    public void Send(string to) { }
}
"""

FEATURE = """namespace Shop.Core;

public class PriceCalculator
{
    /// <summary>Computes the discount for a customer.</summary>
    public decimal Discount(decimal total) { return total * 0.1m; }
}
"""

FEATURE_TEST = """namespace Shop.Tests;

public class PriceCalculatorTests
{
    /// <summary>The discount for a customer is computed on the total.</summary>
    public void DiscountForCustomerIsComputed() { }
}
"""


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """An index of a small database project and a small C# solution with tests."""
    root = tmp_path_factory.mktemp("shop")
    files = {
        "Database/Sales/Tables/Orders.sql": ORDERS,
        "Database/Website/Stored Procedures/PlaceOrder.sql": PLACE,
        "Database/Billing/InvoiceWriter.sql": INVOICES,
        "src/Mail/Mailer.cs": MAILER,
        "src/Core/PriceCalculator.cs": FEATURE,
        "tests/Core.Tests/PriceCalculatorTests.cs": FEATURE_TEST,
    }
    return index_tree(root, files, "shop", root / "index.db")


def test_indexes_are_returned_as_their_table_so_five_hits_are_five_things(shop):
    hits = shop.search("orders customer salesperson contact person", scope=SHOP, top_k=5)
    ids = [h["id"] for h in hits]
    assert len(ids) == len(set(ids))
    assert not [h for h in hits if h["kind"] == "index"]
    table = next(h for h in hits if h["id"] == "shop::main::table::Sales.Orders")
    # The indexes that matched are listed under the table, best first.
    assert "shop::main::index::Sales.Orders.FK_Sales_Orders_CustomerID" in table["children"]
    assert all(c.startswith("shop::main::index::Sales.Orders.") for c in table["children"])
    assert "shop::main::procedure::Website.PlaceOrder" in ids


def test_a_question_about_one_index_finds_its_table_with_that_index(shop):
    hits = shop.search("Which index covers PickedByPersonID?", scope=SHOP, top_k=5)
    assert hits[0]["id"] == "shop::main::table::Sales.Orders"
    assert (
        hits[0]["children"][0] == "shop::main::index::Sales.Orders.FK_Sales_Orders_PickedByPersonID"
    )


def test_a_kind_filter_on_the_child_kind_returns_the_children_themselves(shop):
    hits = shop.search(
        "orders customer", scope=SHOP, top_k=5, filters={"kind": "index"}, per_file=0
    )
    assert hits and all(h["kind"] == "index" for h in hits)
    assert all("children" not in h for h in hits)


def test_one_file_fills_at_most_per_file_places_before_other_files_match(shop):
    hits = shop.search("invoice", scope=SHOP, top_k=4)
    paths = [h["path"] for h in hits]
    # Exactly two of the writer's methods (the cap), then the mailer, which says "invoice"
    # once, then the writer again.
    assert paths[:2] == ["Database/Billing/InvoiceWriter.sql"] * 2
    assert paths[2] == "src/Mail/Mailer.cs"
    one = shop.search("invoice", scope=SHOP, top_k=4, per_file=1)
    assert "src/Mail/Mailer.cs" in [h["path"] for h in one][:3]
    uncapped = shop.search("invoice", scope=SHOP, top_k=4, per_file=0)
    assert [h["path"] for h in uncapped] == ["Database/Billing/InvoiceWriter.sql"] * 4


def test_a_file_alone_still_fills_the_list(shop):
    # Only the writer says "part": the cap ranks its hits down, it does not drop them.
    hits = shop.search(
        "invoice part", scope=SHOP, top_k=5, filters={"path_prefix": "Database/Billing"}
    )
    assert len(hits) == 5
    assert {h["path"] for h in hits} == {"Database/Billing/InvoiceWriter.sql"}


def test_the_capped_score_is_the_penalty_times_the_fused_score(shop):
    # The same top_k: which passes run depends on it.
    capped = shop.search("invoice", scope=SHOP, top_k=12)
    uncapped = {
        h["id"]: h["score"] for h in shop.search("invoice", scope=SHOP, top_k=12, per_file=0)
    }
    seen: dict[str, int] = {}
    for h in capped:
        over = seen.get(h["path"], 0) - 2 + 1
        factor = search_module.FILE_PENALTY**over if over > 0 else 1.0
        assert h["score"] == pytest.approx(uncapped[h["id"]] * factor, abs=2e-6)
        seen[h["path"]] = seen.get(h["path"], 0) + 1
    assert len(capped) == len(uncapped) >= 9


def test_test_code_ranks_after_the_code_it_tests(shop):
    # One word: both match it alike (the spelled pass, which reads "discount for a customer"
    # in the test's name, is not what this pins).
    hits = shop.search("discount", scope=SHOP, top_k=4, per_file=0)
    # Each method comes back as itself or folded into its class (which matches too).
    ids = [[h["id"], *h.get("children", [])] for h in hits]
    feature = "shop::main::method::Shop.Core.PriceCalculator.Discount"
    tested = "shop::main::method::Shop.Tests.PriceCalculatorTests.DiscountForCustomerIsComputed"
    at = {node: next(i for i, held in enumerate(ids) if node in held) for node in (feature, tested)}
    assert at[feature] < at[tested]


@pytest.mark.parametrize(
    ("path", "test"),
    [
        ("tests/UnitTests/BasketTests.cs", True),
        ("src/Basket.UnitTests/Model.cs", True),
        ("Tests/AssertEqualsTableTests.class.sql", True),
        ("Examples/Tests.sql", True),
        ("app/test_basket.py", True),
        ("src/Contest/Entry.cs", False),
        ("src/Latest/Feed.cs", False),
        ("src/Services/BasketService.cs", False),
        ("src/Web/Attestation.cs", False),
    ],
)
def test_test_paths(path, test):
    assert is_test_path(path) is test


def test_the_constructor_is_folded_into_its_class(sample_index):
    hits = sample_index.search("BasketService", scope=Scope("eshop", "main"), top_k=5)
    assert not [h for h in hits if h["kind"] == "constructor"]
    [cls] = [h for h in hits if h["id"] == "eshop::main::class::Eshop.Core.Services.BasketService"]
    # The constructor, and the members that matched too (MEMBER_FOLD), are under it.
    assert (
        "eshop::main::constructor::Eshop.Core.Services.BasketService.BasketService.ctor"
        in cls["children"]
    )
    assert all("::Eshop.Core.Services.BasketService." in c for c in cls["children"])


def _questions(seed: int, n: int) -> list[str]:
    """Questions made of words, names and kind words of the sample codebase."""
    rng = random.Random(seed)
    words = [
        "order", "orders", "basket", "stock", "payment", "captured", "customer", "placed",
        "cancel", "invoice", "total", "line", "audit", "table", "procedure", "which", "how",
        "where", "is", "the", "of", "BasketService", "usp_PlaceOrder", "OrderLines",
        "index", "view", "class", "method", "runs", "added", "sequence", "trigger",
    ]  # fmt: skip
    return [" ".join(rng.choices(words, k=rng.randint(1, 7))) for _ in range(n)]


def _assert_one_ranking(hits: list[dict], top_k: int) -> None:
    assert len(hits) <= top_k
    assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
    assert len({h["id"] for h in hits}) == len(hits)
    scores = [h["score"] for h in hits]
    assert all(a >= b for a, b in itertools.pairwise(scores)), scores
    children = [c for h in hits for c in h.get("children", [])]
    assert not set(children) & {h["id"] for h in hits}


@pytest.mark.parametrize("per_file", [0, 1, 2])
@pytest.mark.parametrize("top_k", [1, 5, 8])
def test_scores_never_rise_down_any_bm25_list(sample_index, per_file, top_k):
    for q in _questions(per_file * 10 + top_k, 60):
        hits = sample_index.search(q, scope=Scope("eshop", "main"), top_k=top_k, per_file=per_file)
        _assert_one_ranking(hits, top_k)


@pytest.mark.parametrize("kind", ["semantic", "hybrid"])
def test_scores_never_rise_down_semantic_and_hybrid_lists(tmp_path, hashing_embedder, kind):
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(REALWORLD / "wwi")], repository="wwi", embedder=hashing_embedder)
    for q in _questions(7, 40):
        hits = store.search(
            q, scope=Scope("wwi"), top_k=5, search_type=kind, embedder=hashing_embedder
        )
        _assert_one_ranking(hits, 5)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    query=st.text(alphabet=st.sampled_from("abcdeilnorstuABCOPS_ ."), min_size=1, max_size=40),
    top_k=st.integers(1, 12),
    per_file=st.integers(0, 3),
)
def test_scores_never_rise_for_any_text(sample_index, query, top_k, per_file):
    hits = sample_index.search(query, scope=Scope("eshop", "main"), top_k=top_k, per_file=per_file)
    _assert_one_ranking(hits, top_k)


@pytest.mark.parametrize(
    ("question", "kinds"),
    [
        ("Which sequence numbers invoices?", ["sequence"]),
        ("What synonyms point at other databases?", ["synonym"]),
        ("Which roles and users exist?", ["role", "user"]),
        ("Who can log in: which logins?", ["login"]),
        ("Which schema owns the tables?", ["schema", "table"]),
        ("Which table type holds order lines?", ["table", "type"]),
        ("How is the fact table partitioned?", ["table", "partition_function", "partition_scheme"]),
        (
            "Which partition function splits by date?",
            ["partition_function", "partition_scheme", "function"],
        ),
        ("Which filegroup holds memory-optimized data?", ["filegroup"]),
        ("What permissions does the web API get?", ["permission"]),
        ("Which grants exist?", ["permission"]),
        ("What trigger audits orders?", ["trigger"]),
        ("Which security policy filters customers?", ["security_policy"]),
        ("Which endpoint deletes an item?", ["endpoint", "method"]),
        ("Which records describe events?", ["record"]),
    ],
)
def test_kind_words_name_every_object_kind(question, kinds):
    assert kinds_in(question) == kinds


def test_every_kind_word_names_real_kinds():
    assert all(isinstance(v, tuple) and v for v in KIND_WORDS.values())


def test_user_and_type_still_join_with_their_neighbour():
    _, pairs = query_terms("user name type name")
    assert '"username"' in pairs and '"typename"' in pairs
    _, pairs = query_terms("stored procedure table type")
    assert pairs == []


def test_a_verb_before_a_noun_is_also_joined_without_its_s():
    _, pairs = query_terms("which procedure runs all tests")
    assert '"runsall"' in pairs and '"runall"' in pairs
    _, pairs = query_terms("process data")  # "ss" is not a plural
    assert pairs == ['"processdata"']


def test_a_doubled_letter_base_is_searched_for_an_ed_word():
    terms, _ = query_terms("item added")
    assert '("added" OR "add")' in terms
    terms, _ = query_terms("order created")
    assert '"created"' in terms


def test_a_sequence_question_finds_the_sequence_on_real_code(tmp_path):
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(REALWORLD / "wwi")], repository="wwi")
    hits = store.search(
        "Which partition scheme splits transaction dates?", scope=Scope("wwi"), top_k=3
    )
    assert hits[0]["kind"] in ("partition_scheme", "partition_function")
    assert "TransactionDate" in hits[0]["name"]


def test_search_nodes_passes_the_cap_and_reports_children(shop):
    """Through the engine: `per_file` reaches the store, `children` reach retrieval_hits."""
    from runtime.engine import Engine
    from runtime.engine.services import Services
    from runtime.format.pipeline import Pipeline

    def run(query: str, **step):
        settings = {"entry_step_id": "s"}
        steps = [
            {"id": "s", "action": "search_nodes", "query_from": "q", "next": "end", **step},
            {"id": "end", "action": "finalize", "source": "retrieval_query"},
        ]
        engine = Engine(
            Pipeline.from_dict({"settings": settings, "steps": steps}),
            services=Services(settings=settings, node_store=shop),
        )
        inputs = {"q": query, "repository": "shop", "snapshot": "main"}
        return engine.run(inputs, run_id="r").state

    capped = run("invoice", top_k=3)["retrieval_seed_nodes"]
    assert ["InvoiceWriter" in n for n in capped] == [True, True, False]
    uncapped = run("invoice", top_k=3, per_file=0)["retrieval_seed_nodes"]
    assert all("InvoiceWriter" in n for n in uncapped)
    hits = run("Which index covers PickedByPersonID?", top_k=3)["retrieval_hits"]
    assert hits[0]["id"] == "shop::main::table::Sales.Orders"
    assert hits[0]["children"][0].endswith("FK_Sales_Orders_PickedByPersonID")
    # `decision`: the access decision that admitted the hit (docs/access.md).
    assert all(set(h) <= {"id", "score", "rank", "children", "decision"} for h in hits)


def test_runtime_search_shows_children_and_takes_the_cap(runner, shop):
    from runtime.cli import cli

    args = ["search", "--index", shop.path, "--repository", "shop", "--top-k", "3"]
    shown = runner.invoke(cli, [*args, "Which index covers PickedByPersonID?"])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert "Orders" in lines[0]
    assert lines[1].strip() == "+ shop::main::index::Sales.Orders.FK_Sales_Orders_PickedByPersonID"
    capped = runner.invoke(cli, [*args, "invoice", "--json"])
    uncapped = runner.invoke(cli, [*args, "invoice", "--per-file", "0", "--json"])
    paths = [[h["path"] for h in json.loads(r.output)["hits"]] for r in (capped, uncapped)]
    assert paths[0].count("Database/Billing/InvoiceWriter.sql") == 2
    assert paths[1].count("Database/Billing/InvoiceWriter.sql") == 3


# Asked-for lengths up to where the deeper ranking's pool (TAIL_POOL) stops depending on them.
PREFIX_LENGTHS = (1, 3, 5, 8, 10, 20, 33)


def _assert_prefixes(search, q: str) -> None:
    """Every shorter list is the start of the longest: same nodes, scores, children."""
    longest = search(q, PREFIX_LENGTHS[-1])
    _assert_one_ranking(longest, PREFIX_LENGTHS[-1])
    for k in PREFIX_LENGTHS[:-1]:
        assert search(q, k) == longest[:k], (q, k)


@pytest.mark.parametrize(
    "per_file", [pytest.param(0, marks=[pytest.mark.slow, pytest.mark.pins]), 2]
)
def test_a_shorter_bm25_list_is_the_start_of_a_longer_one(sample_index, per_file):
    """top_k cuts the ranking, never changes it: the passes and pools do not depend on it."""
    scope = Scope("eshop", "main")
    longer = 0
    for q in _questions(40 + per_file, 30):
        _assert_prefixes(
            lambda q, k: sample_index.search(q, scope=scope, top_k=k, per_file=per_file), q
        )
        longer += len(sample_index.search(q, scope=scope, top_k=33, per_file=per_file)) > 20
    assert longer >= 10  # lists that reach past the first ranking's pool are tried too


@pytest.mark.parametrize("kind", ["semantic", "hybrid"])
def test_a_shorter_semantic_or_hybrid_list_is_the_start_of_a_longer_one(
    tmp_path, hashing_embedder, kind
):
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(REALWORLD / "wwi")], repository="wwi", embedder=hashing_embedder)
    for q in _questions(11, 15):
        _assert_prefixes(
            lambda q, k: store.search(
                q, scope=Scope("wwi"), top_k=k, search_type=kind, embedder=hashing_embedder
            ),
            q,
        )


def test_a_list_longer_than_the_first_ranking_continues_below_it(sample_index, monkeypatch):
    """Past the first ranking the list goes on with a deeper one: no repeats, lower scores."""
    scope = Scope("eshop", "main")
    monkeypatch.setattr(search_module, "HEAD_POOL", 2)  # a first ranking of a few hits
    q = "order basket stock payment customer"
    head = sample_index._bm25_ranking(q, scope, None, 2, 2, search_module.LOOSE_GATE)
    hits = sample_index.search(q, scope=scope, top_k=20)
    _assert_one_ranking(hits, 20)
    assert 0 < len(head) < len(hits) == 20
    assert hits[: len(head)] == head
    listed = {h["id"] for h in head} | {c for h in head for c in h.get("children", ())}
    tail = hits[len(head) :]
    assert not listed & ({h["id"] for h in tail} | {c for h in tail for c in h.get("children", ())})
    assert tail[0]["score"] < head[-1]["score"]


# A zoo of small C# files: `filler` classes that share no word with the questions below
# (so "quokka" and "wombat" stay rare, informative words), and the classes each test needs.
def _zoo(tmp_path: Path, files: dict[str, str]) -> object:
    fillers = {
        f"Filler{i}.cs": f"namespace Zoo;\npublic class Filler{i}\n{{\n    public int Count{i}() => {i};\n}}\n"
        for i in range(24)
    }
    return index_tree(tmp_path / "zoo", {**fillers, **files}, "zoo", tmp_path / "zoo.db")


def _plain(name: str, body: str) -> str:
    return (
        f"namespace Zoo;\npublic class {name}\n{{\n    // {body}\n    public void Run() {{ }}\n}}\n"
    )


@pytest.mark.parametrize("every", [search_module.LOOSE_GATE - 1, search_module.LOOSE_GATE])
def test_the_looser_passes_join_only_below_the_gate(tmp_path, every):
    """LOOSE_GATE nodes with every word keep a node with two of the three out of the first
    ranking; one fewer lets it in (the most-words and any-word passes run)."""
    files = {f"Pen{i}.cs": _plain(f"Pen{i}", "quokka wombat numbat") for i in range(every)}
    files["Burrow.cs"] = _plain("Burrow", "quokka wombat")
    store = _zoo(tmp_path, files)
    gate = search_module.LOOSE_GATE
    scores, info, _ = store._bm25_fused(
        "quokka wombat numbat", Scope("zoo"), search_module.HEAD_POOL, None, gate
    )
    assert any(info[i][2] == "Burrow" for i in scores) == (every < gate)


def test_folding_below_the_gate_lets_the_looser_passes_in(tmp_path):
    """Five matching methods fold into one class: fewer things than the gate, so the first
    ranking runs the looser passes too and lists the class that says one of the words."""
    methods = "\n".join(f"    public void Feed{i}() {{ /* quokka wombat */ }}" for i in range(5))
    files = {
        "Aviary.cs": f"namespace Zoo;\npublic class Aviary\n{{\n{methods}\n}}\n",
        "Burrow.cs": _plain("Burrow", "quokka"),
    }
    store = _zoo(tmp_path, files)
    ranking = store._bm25_ranking(
        "quokka wombat", Scope("zoo"), None, 2, search_module.HEAD_POOL, search_module.LOOSE_GATE
    )
    assert [h["name"] for h in ranking[:1]] == ["Aviary"]
    assert len(ranking[0]["children"]) == 5
    assert "Burrow" in [h["name"] for h in ranking]


def test_a_member_shown_first_is_not_shown_again_under_its_type(tmp_path, monkeypatch):
    """A first ranking one hit deep lists one method as itself; the deeper continuation folds
    the three into their class, which then lists only the two not shown yet."""
    monkeypatch.setattr(search_module, "HEAD_POOL", 1)
    methods = "\n".join(
        [
            "    public void PostAlpha() { /* quokka quokka */ }",
            "    public void PostBeta() { /* quokka */ }",
            "    public void PostGamma() { /* quokka */ }",
        ]
    )
    filler = "\n".join(f"    // ledger line {i} with words nobody asks about" for i in range(30))
    files = {"Ledger.cs": f"namespace Zoo;\npublic class Ledger\n{{\n{filler}\n{methods}\n}}\n"}
    store = _zoo(tmp_path, files)
    hits = store.search("quokka", scope=Scope("zoo"), top_k=5)
    _assert_one_ranking(hits, 5)
    assert [h["name"] for h in hits] == ["PostAlpha", "Ledger"]
    assert sorted(hits[1]["children"]) == [
        "zoo::main::method::Zoo.Ledger.PostBeta",
        "zoo::main::method::Zoo.Ledger.PostGamma",
    ]
