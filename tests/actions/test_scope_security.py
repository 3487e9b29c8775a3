"""The security scope of retrieval: repository, snapshot and allowed labels come from the
run's inputs within what settings pin, and no model output, filter or graph walk widens
them. (Hostile scope values, and inputs that try to widen a pinned scope, are in
tests/adversarial/test_scope_widening.py.)

The index here holds the sample codebase three times (repository `eshop` snapshots `main`
and `v2`, repository `other` snapshot `main`) with four label levels on different files,
so that dropping any part of the scope shows in the results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import runtime

SAMPLE_ROOT = Path(__file__).resolve().parents[2] / "pipelines" / "sample" / "eshop"
LABEL_RULES = [
    ("Database/Procedures/usp_CapturePayment.sql", ["confidential"]),
    ("Database/Procedures/usp_CancelOrder.sql", ["secret"]),
    ("Database/Views/vw_CustomerLifetimeValue.sql", ["confidential", "pii"]),
    ("Database/Functions/fn_AvailableStock.sql", ["internal"]),
    ("Database/Triggers/trg_Orders_Audit.sql", ["pii"]),
]
COPIES = (("eshop", "main"), ("other", "main"), ("eshop", "v2"))


def nid(kind: str, name: str, repository: str = "eshop", snapshot: str = "main") -> str:
    return f"{repository}::{snapshot}::{kind}::{name}"


CAPTURE = nid("procedure", "dbo.usp_CapturePayment")  # confidential
CANCEL = nid("procedure", "dbo.usp_CancelOrder")  # secret
VIEW = nid("view", "dbo.vw_CustomerLifetimeValue")  # confidential + pii
STOCK = nid("function", "dbo.fn_AvailableStock")  # internal
AUDIT = nid("trigger", "dbo.trg_Orders_Audit")  # pii
PLACE_PROC = nid("procedure", "dbo.usp_PlaceOrder")  # unlabelled
LOG_EVENT = nid("procedure", "dbo.usp_LogEvent")
PLACE_METHOD = nid("method", "Eshop.Infrastructure.Repositories.OrderRepository.PlaceOrderAsync")
CANCEL_METHOD = nid("method", "Eshop.Infrastructure.Repositories.OrderRepository.CancelAsync")
CAPTURE_METHOD = nid("method", "Eshop.Infrastructure.Repositories.PaymentRepository.CaptureAsync")
PAYMENTS = nid("table", "dbo.Payments")
SQL_KINDS = {"procedure", "table", "view", "function", "trigger", "index", "sequence"}

END = {"id": "end", "action": "finalize", "source": "retrieval_query"}


@pytest.fixture(scope="module")
def index(tmp_path_factory, hashing_embedder):
    """Three copies of the sample, labelled, with hashing vectors for semantic search."""
    from runtime.retrieval.indexer import index_paths
    from runtime.retrieval.nodestore import open_store

    store = open_store(str(tmp_path_factory.mktemp("scope") / "index.db"), create=True)
    for repository, snapshot in COPIES:
        index_paths(
            store,
            [str(SAMPLE_ROOT)],
            repository=repository,
            snapshot=snapshot,
            label_rules=LABEL_RULES,
            embedder=hashing_embedder,
            jobs=1,
        )
    return store


def run(store, steps, inputs=None, **settings: Any) -> Any:
    settings = {"entry_step_id": steps[0]["id"], **settings}
    pipeline = runtime.Pipeline.from_dict({"settings": settings, "steps": [*steps, END]})
    services = runtime.Services(settings=settings, node_store=store)
    runner = runtime.Runner(pipeline, services=services)
    return runner.run({"retrieval_query": "x", **(inputs or {})}, run_id="t")


def search(**kw: Any) -> dict[str, Any]:
    return {"id": "s", "action": "search_nodes", "next": "end", "query_from": "q", **kw}


def expand(**kw: Any) -> dict[str, Any]:
    return {"id": "e", "action": "expand_dependency_tree", "next": "end", **kw}


def fetch(**kw: Any) -> dict[str, Any]:
    return {"id": "f", "action": "fetch_node_texts", "next": "end", **kw}


def found(store, query: str, top_k: int = 10, step: dict | None = None, **inputs: Any) -> list:
    r = run(store, [search(top_k=top_k, **(step or {}))], {"q": query, **inputs})
    assert r.error is None, r.error
    return r.state["retrieval_seed_nodes"]


def search_event(result: Any) -> dict[str, Any]:
    [event] = [e for e in result.events if e["type"] == "SEARCH"]
    return event


def copies(ids: list[str]) -> set[tuple[str, str]]:
    """The (repository, snapshot) pairs the ids come from."""
    return {tuple(i.split("::")[:2]) for i in ids}


def kinds(ids: list[str]) -> set[str]:
    return {i.split("::")[2] for i in ids}


# --- repository and snapshot ------------------------------------------------------------


@pytest.mark.parametrize("repository,snapshot", COPIES)
def test_search_returns_only_the_scopes_repository_and_snapshot(index, repository, snapshot):
    scope = {"repository": repository, "snapshot": snapshot}
    ranked = found(index, "capture payment", top_k=10, **scope)  # the BM25 word passes
    assert len(ranked) == 10 and copies(ranked) == {(repository, snapshot)}
    named = found(index, "usp_PlaceOrder", top_k=1, **scope)  # the named-identifier pass
    assert named == [nid("procedure", "dbo.usp_PlaceOrder", repository, snapshot)]


def test_semantic_and_hybrid_search_stay_in_scope(index, hashing_by_default):
    scope = {"repository": "other", "snapshot": "main"}
    for mode in ("semantic", "hybrid"):
        hits = found(index, "capture payment", 10, {"search_type": mode}, **scope)
        assert len(hits) == 10 and copies(hits) == {("other", "main")}, mode
        # Only the two labelled procedures lie under this prefix: hidden without labels ...
        narrow = {"search_type": mode, "filters": {"path_prefix": "Database/Procedures/usp_C"}}
        assert found(index, "capture payment cancel order", 10, narrow, **scope) == []
        # ... and found, in this repository only, when their labels are allowed.
        shown = found(
            index,
            "capture payment cancel order",
            10,
            narrow,
            **scope,
            allowed_labels=["confidential", "secret"],
        )
        assert sorted(shown) == [
            nid("procedure", "dbo.usp_CancelOrder", "other"),
            nid("procedure", "dbo.usp_CapturePayment", "other"),
        ], mode


@pytest.mark.parametrize(
    "scope,expected",
    [
        ({"snapshot": "main"}, {("eshop", "main"), ("other", "main")}),
        ({"repository": "eshop"}, {("eshop", "main"), ("eshop", "v2")}),
        ({}, set(COPIES)),
    ],
)
def test_absent_repository_or_snapshot_means_all_of_them(index, scope, expected):
    inputs = {**scope, "allowed_labels": ["secret"]}
    ids = found(index, "usp_CancelOrder", top_k=len(expected), **inputs)
    assert sorted(ids) == sorted(
        nid("procedure", "dbo.usp_CancelOrder", *pair) for pair in expected
    )
    r = run(index, [search(top_k=1)], {"q": "usp_CancelOrder", **inputs})
    assert search_event(r)["scope"] == {
        "repository": scope.get("repository"),
        "snapshot": scope.get("snapshot"),
        "allowed_labels": ["secret"],
    }


@pytest.mark.parametrize("scope", [{"repository": "nope"}, {"snapshot": "v3"}])
def test_a_repository_or_snapshot_not_indexed_finds_nothing(index, scope):
    for query in ("usp_CancelOrder", "capture payment"):
        assert found(index, query, top_k=5, **scope) == []


# --- allowed labels ---------------------------------------------------------------------

LABELLED = {
    CAPTURE: {"confidential"},
    CANCEL: {"secret"},
    VIEW: {"confidential", "pii"},
    STOCK: {"internal"},
}
# Queries that rank each labelled node first when it is visible, without a name in them
# (so only the BM25 word passes find it), and one naming them all (the named pass).
WORD_QUERIES = {
    CAPTURE: "capture payment",
    CANCEL: "cancel order",
    VIEW: "customer lifetime value",
    STOCK: "available stock",
}
NAMED_QUERY = "usp_CapturePayment usp_CancelOrder vw_CustomerLifetimeValue fn_AvailableStock"


@pytest.mark.parametrize(
    "allowed",
    [
        None,
        [],
        ["confidential"],
        ["pii"],
        ["confidential", "pii"],
        ["secret"],
        ["internal", "confidential", "pii", "secret"],
    ],
)
def test_a_labelled_node_is_visible_only_when_all_its_labels_are_allowed(index, allowed):
    scope = {"repository": "eshop", "snapshot": "main", "allowed_labels": allowed}
    expected = {n for n, labels in LABELLED.items() if labels <= set(allowed or ())}
    by_words = {n for n, q in WORD_QUERIES.items() if n in found(index, q, top_k=10, **scope)}
    assert by_words == expected
    named = found(index, NAMED_QUERY, top_k=8, **scope)
    assert set(named) & set(LABELLED) == expected
    assert copies(named) == {("eshop", "main")}


@pytest.mark.parametrize(
    "step,bad",
    [
        (search(top_k=3), "confidential"),
        (search(top_k=3), ["confidential", 3]),
        (search(top_k=3), {"confidential": True}),
        (expand(), "secret"),
        (fetch(budget_tokens=1000), "secret"),
    ],
)
def test_malformed_allowed_labels_is_a_coded_error(index, step, bad):
    inputs = {"q": "orders", "retrieval_seed_nodes": [PLACE_PROC], "allowed_labels": bad}
    r = run(index, [step], inputs)
    assert (r.error.code, r.error.step_id) == ("VARIABLE_TYPE", step["id"])


# --- where the scope comes from ---------------------------------------------------------

SETTINGS_SCOPE = {"repository": "other", "snapshot": "main", "allowed_labels": ["secret"]}
# A run without a subject is anonymous: pinned labels are a ceiling, never a grant
# (docs/access.md); a subject cleared for the label sees it within the pin.
ANONYMOUS = SETTINGS_SCOPE | {"allowed_labels": []}
CLEARED = {"subject": {"clearance": ["secret", "public"]}}


@pytest.mark.parametrize(
    "inputs,scope",
    [
        ({}, ANONYMOUS),
        (CLEARED, SETTINGS_SCOPE),
        (
            {"repository": None, "snapshot": None, "allowed_labels": None},
            ANONYMOUS,
        ),
        (
            {"repository": "other", "snapshot": "main", "allowed_labels": []},
            {"repository": "other", "snapshot": "main", "allowed_labels": []},
        ),
        ({"repository": "other"}, ANONYMOUS),
        ({"repository": "other", **CLEARED}, SETTINGS_SCOPE),
        ({"allowed_labels": ["secret", "secret"]}, SETTINGS_SCOPE),
    ],
)
def test_run_inputs_narrow_what_settings_pin(index, inputs, scope):
    r = run(index, [search(top_k=1)], {"q": "usp_CancelOrder", **inputs}, **SETTINGS_SCOPE)
    assert search_event(r)["scope"] == scope
    visible = "secret" in scope["allowed_labels"]
    expected = (
        nid("procedure", "dbo.usp_CancelOrder", scope["repository"], scope["snapshot"])
        if visible
        else nid(
            "method",
            "Eshop.Infrastructure.Repositories.OrderRepository.CancelAsync",
            scope["repository"],
            scope["snapshot"],
        )
    )
    assert r.state["retrieval_seed_nodes"] == [expected]


def test_state_written_during_the_run_does_not_change_the_scope(index):
    widen = {
        "id": "w",
        "action": "set_variables",
        "next": "s",
        "rules": [
            {"set": "allowed_labels", "value": ["secret"]},
            {"set": "repository", "value": "other"},
        ],
    }
    r = run(
        index,
        [widen, search(top_k=1)],
        {"q": "usp_CancelOrder", "repository": "eshop", "snapshot": "main"},
    )
    assert r.state["allowed_labels"] == ["secret"]  # the variable is there ...
    assert r.state["retrieval_seed_nodes"] == [CANCEL_METHOD]  # ... but not in the scope
    assert search_event(r)["scope"] == {
        "repository": "eshop",
        "snapshot": "main",
        "allowed_labels": [],
    }


# --- model filters only narrow ----------------------------------------------------------


@pytest.mark.parametrize(
    "static,model,effective,ignored",
    [
        (
            {"path_prefix": "Database/"},
            {"path_prefix": "src/"},
            {"path_prefix": "Database/"},
            ["path_prefix"],
        ),
        (
            {"path_prefix": "Database/"},
            {"path_prefix": ""},
            {"path_prefix": "Database/"},
            ["path_prefix"],
        ),
        (
            {"path_prefix": "Database/"},
            {"path_prefix": 3},
            {"path_prefix": "Database/"},
            ["path_prefix"],
        ),
        (
            {"path_prefix": "Database/"},
            {"path_prefix": "Database/Procedures/"},
            {"path_prefix": "Database/Procedures/"},
            [],
        ),
        ({}, {"path_prefix": "Database/Tables/"}, {"path_prefix": "Database/Tables/"}, []),
        (
            {"kind": ["procedure", "table"]},
            {"kind": "class"},
            {"kind": ["procedure", "table"]},
            ["kind"],
        ),
        ({"kind": ["procedure", "table"]}, {"kind": ["table", "class"]}, {"kind": ["table"]}, []),
        ({"kind": "procedure"}, {"kind": ["procedure", "class"]}, {"kind": ["procedure"]}, []),
        ({"kind": "procedure"}, {"kind": 7}, {"kind": "procedure"}, ["kind"]),
        ({}, {"kind": "class"}, {"kind": ["class"]}, []),
        ({"language": "sql"}, {"language": "dotnet"}, {"language": "sql"}, ["language"]),
        (
            {"language": ["sql", "dotnet"]},
            {"language": ["dotnet", "markdown"]},
            {"language": ["dotnet"]},
            [],
        ),
        # Whatever else a model sends is ignored, never a crash of the step.
        ({}, {"kind": 7}, {}, ["kind"]),
        ({}, {"kind": [["procedure"], {"a": 1}]}, {}, ["kind"]),
        ({}, {"kind": ["procedure", 3]}, {"kind": ["procedure"]}, []),
        ({"language": "sql"}, {"language": [{"a": 1}]}, {"language": "sql"}, ["language"]),
        (
            {"language": "sql"},
            {"repository": "other", "snapshot": "v2", "allowed_labels": ["secret"], "tenant": "t"},
            {"language": "sql"},
            ["allowed_labels", "repository", "snapshot", "tenant"],
        ),
    ],
)
def test_model_filters_only_narrow_the_steps_filters(index, static, model, effective, ignored):
    scope = {"repository": "eshop", "snapshot": "main"}
    reply = json.dumps({"query": "order payment stock customer", "filters": model})
    step = {"id": "s", "action": "search_nodes", "next": "end", "top_k": 10, "filters": static}
    r = run(index, [step], {"last_model_response": reply, **scope})
    event = search_event(r)
    assert event["filters"] == effective
    assert sorted(event["ignored_model_filters"]) == ignored
    assert event["scope"] == {**scope, "allowed_labels": []}
    # The results are exactly those of a search with the effective filters set statically.
    same = found(index, "order payment stock customer", 10, {"filters": effective}, **scope)
    assert same, "the comparison must not be vacuous"
    assert r.state["retrieval_seed_nodes"] == same


# --- expand_dependency_tree -------------------------------------------------------------


def test_hidden_seeds_are_neither_returned_nor_expanded(index):
    r = run(
        index,
        [expand(max_depth=1)],
        {"retrieval_seed_nodes": [CANCEL, PLACE_PROC], "allowed_labels": ["confidential"]},
    )
    s = r.state
    assert s["graph_seed_nodes"] == [PLACE_PROC]
    assert s["graph_expanded_nodes"] == [
        PLACE_PROC,
        LOG_EVENT,
        nid("table", "dbo.Customers"),
        nid("table", "dbo.Inventory"),
        nid("table", "dbo.OrderLines"),
        nid("type", "dbo.OrderLineType"),  # its table-valued parameter's type
        nid("table", "dbo.Orders"),
    ]
    assert all(CANCEL not in (e["from_id"], e["to_id"]) for e in s["graph_edges"])
    assert (s["graph_debug"]["seeds"], s["graph_debug"]["expanded"]) == (1, 6)


@pytest.mark.parametrize(
    "seed,direction,allowed,expected",
    [
        (CANCEL_METHOD, "out", ["confidential"], [CANCEL_METHOD]),
        (
            CANCEL_METHOD,
            "out",
            ["secret"],
            [
                CANCEL_METHOD,
                CANCEL,
                LOG_EVENT,
                nid("table", "dbo.Inventory"),
                nid("table", "dbo.OrderLines"),
                nid("table", "dbo.Orders"),
            ],
        ),
        (PAYMENTS, "in", None, [PAYMENTS]),
        (PAYMENTS, "in", ["confidential"], [PAYMENTS, CAPTURE, CAPTURE_METHOD]),
        (LOG_EVENT, "in", ["confidential"], [LOG_EVENT, PLACE_PROC, PLACE_METHOD]),
        (
            nid("table", "dbo.EventLog"),
            "both",
            ["confidential"],
            [nid("table", "dbo.EventLog"), LOG_EVENT, PLACE_PROC],
        ),
    ],
)
def test_expansion_never_walks_through_a_hidden_node(index, seed, direction, allowed, expected):
    inputs = {"retrieval_seed_nodes": [seed], "allowed_labels": allowed}
    r = run(index, [expand(max_depth=2, direction=direction)], inputs)
    assert r.state["graph_expanded_nodes"] == expected
    for edge in r.state["graph_edges"]:
        assert edge["from_id"] in expected and edge["to_id"] in expected


def test_expansion_stays_in_the_scopes_repository(index):
    other_place = nid(
        "method", "Eshop.Infrastructure.Repositories.OrderRepository.PlaceOrderAsync", "other"
    )
    scope = {"repository": "other", "snapshot": "main"}
    r = run(index, [expand(max_depth=1)], {"retrieval_seed_nodes": [PLACE_METHOD], **scope})
    assert r.state["graph_expanded_nodes"] == [] and r.state["graph_seed_nodes"] == []
    assert r.state["graph_debug"]["seeds"] == 0
    r = run(
        index, [expand(max_depth=1)], {"retrieval_seed_nodes": [PLACE_METHOD, other_place], **scope}
    )
    assert r.state["graph_seed_nodes"] == [other_place]
    assert copies(r.state["graph_expanded_nodes"]) == {("other", "main")}
    assert nid("procedure", "dbo.usp_PlaceOrder", "other") in r.state["graph_expanded_nodes"]


# --- fetch_node_texts -------------------------------------------------------------------


def fetched(store, seeds: list[str], budget: int = 20000, **inputs: Any) -> Any:
    state = {"retrieval_seed_nodes": seeds, "graph_expanded_nodes": [], "graph_edges": []}
    r = run(
        store, [fetch(budget_tokens=budget, prioritization_mode="seed_first")], {**state, **inputs}
    )
    assert r.error is None, r.error
    return r.state


ALL_LABELS = ["internal", "confidential", "pii", "secret"]


@pytest.mark.parametrize(
    "seeds,labels,classification",
    [
        ([STOCK, CAPTURE], ["confidential", "internal"], "confidential"),
        ([CAPTURE, STOCK], ["confidential", "internal"], "confidential"),
        ([CAPTURE, CANCEL, PLACE_PROC], ["confidential", "secret"], "secret"),
        ([CANCEL, STOCK], ["internal", "secret"], "secret"),
        ([VIEW], ["confidential", "pii"], "confidential"),
        ([AUDIT], ["pii"], None),
        ([PLACE_PROC], [], None),
    ],
)
def test_security_aggregates_report_the_highest_classification(
    index, seeds, labels, classification
):
    s = fetched(index, seeds, allowed_labels=ALL_LABELS)
    assert [i["id"] for i in s["node_texts"]] == seeds
    assert s["security_labels"] == labels
    assert s["security_classification"] == classification


def test_security_aggregates_count_only_included_nodes(index):
    # The secret procedure does not fit the budget; the small internal function does.
    s = fetched(index, [CANCEL, STOCK], budget=150, allowed_labels=ALL_LABELS)
    assert [i["id"] for i in s["node_texts"]] == [STOCK]
    reasons = {c["id"]: c.get("reason") for c in s["fetch_debug"]["candidates"]}
    assert reasons[CANCEL] == "over_budget"
    assert (s["security_labels"], s["security_classification"]) == (["internal"], "internal")
    # Hidden (not allowed) nodes are not fetched and add nothing either.
    s = fetched(index, [CANCEL, VIEW, STOCK], allowed_labels=["internal", "confidential"])
    assert [i["id"] for i in s["node_texts"]] == [STOCK]
    assert s["fetch_debug"]["missing"] == 2
    assert (s["security_labels"], s["security_classification"]) == (["internal"], "internal")


def test_fetch_materialises_only_nodes_in_scope(index):
    seeds = [
        nid("procedure", "dbo.usp_PlaceOrder", "eshop", "v2"),
        nid("procedure", "dbo.usp_PlaceOrder", "other", "main"),
        PLACE_PROC,
    ]
    s = fetched(index, seeds, repository="eshop", snapshot="main")
    assert [i["id"] for i in s["node_texts"]] == [PLACE_PROC]
    assert s["fetch_debug"]["missing"] == 2
    decisions = [(c["id"], c["decision"], c.get("reason")) for c in s["fetch_debug"]["candidates"]]
    assert decisions == [
        (seeds[0], "skip", "missing_or_not_visible"),
        (seeds[1], "skip", "missing_or_not_visible"),
        (PLACE_PROC, "include", None),
    ]
