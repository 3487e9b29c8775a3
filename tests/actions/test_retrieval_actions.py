"""search_nodes, expand_dependency_tree, fetch_node_texts, manage_context_budget: the scenarios
of specs/actions.md, run through the engine on the indexed sample codebase."""

from __future__ import annotations

from typing import Any

import pytest

from actions.fetch_node_texts import FetchNodeTexts
from runtime.context.blocks import block_id, format_block
from runtime.contract.registry import default_registry
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline
from runtime.format.source import SourceMap
from runtime.format.validation import check_pipeline
from runtime.retrieval.node import Scope

END = {"id": "end", "action": "finalize", "source": "retrieval_query"}
SCOPE = {"repository": "eshop", "snapshot": "main"}


def run(store, steps, inputs=None, **settings: Any):
    settings = {"entry_step_id": steps[0]["id"], **settings}
    p = Pipeline.from_dict({"settings": settings, "steps": [*steps, END]})
    services = Services(settings=settings, node_store=store)
    return Engine(p, services=services).run({"retrieval_query": "x", **(inputs or {})}, run_id="t")


def search(**kw: Any) -> dict[str, Any]:
    return {"id": "s", "action": "search_nodes", "next": "end", **kw}


# --- search_nodes ---------------------------------------------------------------


def test_query_from_variable_writes_the_retrieval_state(sample_index):
    r = run(sample_index, [search(query_from="q", top_k=3)], {"q": "usp_CancelOrder", **SCOPE})
    s = r.state
    assert s["retrieval_seed_nodes"][0] == "eshop::main::procedure::dbo.usp_CancelOrder"
    assert [h["rank"] for h in s["retrieval_hits"]] == [1, 2, 3]
    assert (s["retrieval_query"], s["retrieval_mode"]) == ("usp_CancelOrder", "bm25")
    assert s["retrieval_queries_asked"] == ["usp_CancelOrder"]


def test_default_source_is_the_model_reply_json_or_text(sample_index):
    r = run(
        sample_index, [search()], {"last_model_response": '{"query": "BasketService", "top_k": 1}'}
    )
    assert (
        r.state["retrieval_query"] == "BasketService" and len(r.state["retrieval_seed_nodes"]) == 8
    )
    r = run(sample_index, [search()], {"last_model_response": "payment capture"})
    assert r.state["retrieval_query"] == "payment capture"


def test_payload_may_only_lower_top_k(sample_index):
    step = search(top_k=4, allow_top_k_from_payload=True)
    low = run(sample_index, [step], {"last_model_response": '{"query": "order", "top_k": 2}'})
    high = run(sample_index, [step], {"last_model_response": '{"query": "order", "top_k": 50}'})
    assert (
        len(low.state["retrieval_seed_nodes"]) == 2 and len(high.state["retrieval_seed_nodes"]) == 4
    )


def test_model_filters_narrow_but_never_widen_security(sample_index):
    reply = (
        '{"query": "usp_CapturePayment payments orders", "filters": {"language": "sql", '
        '"repository": "other", "allowed_labels": ["confidential"]}}'
    )
    r = run(sample_index, [search(top_k=10)], {"last_model_response": reply, **SCOPE})
    ids = r.state["retrieval_seed_nodes"]
    assert "eshop::main::procedure::dbo.usp_CapturePayment" not in ids  # the label stays hidden
    assert ids and all(i.startswith("eshop::main::") for i in ids)  # the repository stays eshop
    nodes = sample_index.get_nodes(ids, scope=Scope())
    assert {n.language for n in nodes.values()} == {"sql"}  # the language filter narrowed
    [ev] = [e for e in r.events if e["type"] == "SEARCH"]
    assert sorted(ev["ignored_model_filters"]) == ["allowed_labels", "repository"]
    # The model's filter applied to that search only: the next search sees C# again.
    two = run(
        sample_index,
        [search(next="s2"), search(id="s2", query_from="q2")],
        {"last_model_response": reply, "q2": "OrderService", **SCOPE},
    )
    assert any("::class::" in i for i in two.state["retrieval_seed_nodes"])
    allowed = run(
        sample_index,
        [search(query_from="q")],
        {"q": "usp_CapturePayment", "allowed_labels": ["confidential"]},
    )
    assert "eshop::main::procedure::dbo.usp_CapturePayment" in allowed.state["retrieval_seed_nodes"]


def test_static_filters_and_model_narrowing_intersect(sample_index):
    step = search(top_k=10, filters={"language": ["sql", "dotnet"]})
    r = run(
        sample_index,
        [step],
        {"last_model_response": '{"query": "orders", "filters": {"language": "sql"}}'},
    )
    assert all(i.split("::")[2] not in ("class", "method") for i in r.state["retrieval_seed_nodes"])


def test_clears_previous_retrieval_but_not_context(sample_index):
    r = run(
        sample_index,
        [search(query_from="q")],
        {
            "q": "zzzqqq",
            "graph_edges": [{"a": 1}],
            "node_texts": [{"id": "old"}],
            "context_blocks": ["kept"],
            "retrieval_hits": [{"id": "old"}],
        },
    )
    s = r.state
    assert s["graph_edges"] == [] and s["node_texts"] == [] and s["retrieval_hits"] == []
    assert s["context_blocks"] == ["kept"]


def test_queries_asked_appends_only_new_normalized_queries(sample_index):
    r = run(
        sample_index,
        [search(query_from="q")],
        {"q": "Orders  table!", "retrieval_queries_asked": ["orders table"]},
    )
    assert r.state["retrieval_queries_asked"] == ["orders table"]


@pytest.mark.parametrize(
    "inputs,settings,code,mode",
    [
        ({"q": "   "}, {}, "QUERY_EMPTY", None),
        ({"last_model_response": '{"query": "x", "search_type": "bm25"}'}, {}, None, "bm25"),
        ({"last_model_response": '{"query": "x"}'}, {"search_type": "bm25"}, None, "bm25"),
        ({"last_model_response": '{"query": "x"}'}, {}, "SEARCH_TYPE_UNRESOLVED", None),
    ],
)
def test_auto_search_type_and_empty_query(sample_index, inputs, settings, code, mode):
    step = search(search_type="auto", **({"query_from": "q"} if "q" in inputs else {}))
    r = run(sample_index, [step], inputs, **settings)
    if code:
        assert (r.error.code, r.error.step_id) == (code, "s")
    else:
        assert r.state["retrieval_mode"] == mode


# --- expand_dependency_tree --------------------------------------------------------


def expand(**kw: Any) -> dict[str, Any]:
    return {"id": "e", "action": "expand_dependency_tree", "next": "end", **kw}


PLACE = "eshop::main::method::Eshop.Infrastructure.Repositories.OrderRepository.PlaceOrderAsync"
PROC = "eshop::main::procedure::dbo.usp_PlaceOrder"


def test_no_seeds_is_a_noop(sample_index):
    r = run(sample_index, [expand()], {"x": 1})
    assert r.state["graph_debug"]["reason"] == "no_seeds" and r.state["graph_expanded_nodes"] == []


def test_bfs_seeds_first_then_discovered(sample_index):
    r = run(sample_index, [expand(max_depth=2)], {"retrieval_seed_nodes": [PLACE]})
    order = r.state["graph_expanded_nodes"]
    lines = "eshop::main::table::dbo.OrderLines"
    assert order[0] == PLACE and order.index(PROC) < order.index(lines)  # depth 1 before depth 2
    assert r.state["graph_debug"]["depth_reached"] == 2
    assert {"from_id": PLACE, "to_id": PROC, "edge_type": "UsesSql"} in r.state["graph_edges"]
    assert r.state["graph_seed_nodes"] == [PLACE]


def test_max_nodes_truncates_and_allowlist_and_direction(sample_index):
    r = run(sample_index, [expand(max_depth=3, max_nodes=3)], {"retrieval_seed_nodes": [PLACE]})
    assert len(r.state["graph_expanded_nodes"]) == 3 and r.state["graph_debug"]["truncated"] is True
    only_fk = run(
        sample_index,
        [expand(edge_allowlist=["FK"])],
        {"retrieval_seed_nodes": ["eshop::main::table::dbo.OrderLines"]},
    )
    assert {e["edge_type"] for e in only_fk.state["graph_edges"]} == {"FK"}
    callers = run(
        sample_index, [expand(direction="in", max_depth=1)], {"retrieval_seed_nodes": [PROC]}
    )
    assert PLACE in callers.state["graph_expanded_nodes"]


def test_hidden_nodes_are_neither_returned_nor_walked_through(sample_index):
    capture = (
        "eshop::main::method::Eshop.Infrastructure.Repositories.PaymentRepository.CaptureAsync"
    )
    r = run(sample_index, [expand(max_depth=3)], {"retrieval_seed_nodes": [capture], **SCOPE})
    assert "eshop::main::procedure::dbo.usp_CapturePayment" not in r.state["graph_expanded_nodes"]
    assert (
        "eshop::main::table::dbo.Payments" not in r.state["graph_expanded_nodes"]
    )  # only via the proc
    seen = run(
        sample_index,
        [expand(max_depth=3)],
        {"retrieval_seed_nodes": [capture], **SCOPE, "allowed_labels": ["confidential"]},
    )
    assert "eshop::main::table::dbo.Payments" in seen.state["graph_expanded_nodes"]


# --- fetch_node_texts ----------------------------------------------------------------


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("seed_first", ["s1", "s2", "a", "c", "b"]),
        ("graph_first", ["s1", "a", "b", "s2", "c"]),
        ("balanced", ["s1", "a", "s2", "c", "b"]),
    ],
)
def test_prioritization_orders(mode, expected):
    depth = {"s1": 0, "s2": 0, "a": 1, "b": 2, "c": 1}
    root = {"s1": "s1", "s2": "s2", "a": "s1", "b": "s1", "c": "s2"}
    assert FetchNodeTexts.order(mode, ["s1", "s2"], ["b", "a", "c"], depth, root) == expected


def fetch(**kw: Any) -> dict[str, Any]:
    return {"id": "f", "action": "fetch_node_texts", "next": "end", **kw}


GRAPH = {
    "retrieval_seed_nodes": [PLACE],
    "graph_expanded_nodes": [PLACE, PROC],
    "graph_edges": [{"from_id": PLACE, "to_id": PROC, "edge_type": "UsesSql"}],
}


def test_items_and_debug(sample_index):
    r = run(sample_index, [fetch(budget_tokens=5000)], GRAPH)
    items = r.state["node_texts"]
    assert [i["id"] for i in items] == [PLACE, PROC]
    assert (
        items[1]["is_seed"] is False and items[1]["depth"] == 1 and items[1]["parent_id"] == PLACE
    )
    assert (
        items[1]["language"] == "sql"
        and items[1]["path"] == "Database/Procedures/usp_PlaceOrder.sql"
    )
    dbg = r.state["fetch_debug"]
    assert (dbg["mode"], dbg["mode_source"], dbg["budget"], dbg["included"]) == (
        "balanced",
        "yaml",
        5000,
        2,
    )


def test_atomic_skip_goes_on_scanning(sample_index):
    small = "eshop::main::method::Eshop.Core.Interfaces.IOrderRepository.CancelAsync"
    inputs = {"retrieval_seed_nodes": [PROC, small], "graph_expanded_nodes": [], "graph_edges": []}
    r = run(sample_index, [fetch(budget_tokens=120)], inputs)
    assert [i["id"] for i in r.state["node_texts"]] == [small]
    reasons = {c["id"]: c.get("reason") for c in r.state["fetch_debug"]["candidates"]}
    assert reasons[PROC] == "over_budget"


def test_default_budget_is_70_percent_and_chars_budget(sample_index):
    r = run(sample_index, [fetch()], GRAPH, max_context_tokens=1000)
    assert r.state["fetch_debug"]["budget"] == 700
    r = run(sample_index, [fetch(max_chars=200000)], GRAPH)
    assert r.state["fetch_debug"]["unit"] == "chars"


def test_inbox_overrides_mode_and_invalid_mode_fails(sample_index):
    send = {
        "id": "d",
        "action": "inbox_dispatcher",
        "next": "f",
        "rules": {"f": {"topic": "tune", "allow_keys": ["prioritization_mode"]}},
    }
    ok = run(
        sample_index,
        [send, fetch(budget_tokens=5000)],
        {
            **GRAPH,
            "last_model_response": '{"dispatch": [{"target": "f", "payload": '
            '{"prioritization_mode": "seed_first"}}]}',
        },
    )
    assert (ok.state["fetch_debug"]["mode"], ok.state["fetch_debug"]["mode_source"]) == (
        "seed_first",
        "inbox",
    )
    bad = run(
        sample_index,
        [send, fetch(budget_tokens=5000)],
        {
            **GRAPH,
            "last_model_response": '{"dispatch": [{"target": "f", "payload": '
            '{"prioritization_mode": "random"}}]}',
        },
    )
    assert (bad.error.code, bad.error.step_id) == ("PRIORITIZATION_MODE_INVALID", "f")


def test_metadata_lines_and_security_aggregates_from_included_only(sample_index):
    capture = "eshop::main::procedure::dbo.usp_CapturePayment"
    inputs = {
        "retrieval_seed_nodes": [PROC, capture],
        "graph_expanded_nodes": [],
        "graph_edges": [],
        "allowed_labels": ["confidential"],
    }
    r = run(
        sample_index,
        [
            fetch(
                budget_tokens=5000, include_metadata_in_context=True, metadata_fields=["signature"]
            )
        ],
        inputs,
    )
    assert r.state["security_labels"] == ["confidential"]
    assert r.state["security_classification"] == "confidential"
    assert r.state["node_texts"][0]["metadata"] == {
        "signature": r.state["node_texts"][0]["metadata"]["signature"]
    }
    # A budget with room for PROC only: the confidential procedure after it is skipped, and
    # its label does not count.
    cost = {c["id"]: c["cost"] for c in r.state["fetch_debug"]["candidates"]}
    assert cost[PROC] < cost[PROC] + cost[capture] <= 5000
    only = fetch(
        budget_tokens=cost[PROC], include_metadata_in_context=True, metadata_fields=["signature"]
    )
    skipped = run(sample_index, [only], inputs)
    assert [i["id"] for i in skipped.state["node_texts"]] == [PROC]
    assert [(c["id"], c["decision"]) for c in skipped.state["fetch_debug"]["candidates"]] == [
        (PROC, "include"),
        (capture, "skip"),
    ]
    assert skipped.state["security_labels"] == []
    assert skipped.state["security_classification"] is None
    hidden = run(sample_index, [fetch(budget_tokens=5000)], {**inputs, "allowed_labels": None})
    assert hidden.state["security_labels"] == [] and hidden.state["fetch_debug"]["missing"] == 1


def test_budget_options_are_validated():
    reg = default_registry()
    data = {
        "settings": {"entry_step_id": "f"},
        "steps": [fetch(max_chars=10, budget_tokens=5), fetch(id="g"), END],
    }
    codes = {d.code for d in check_pipeline(data, SourceMap(data, "p.yaml"), reg)}
    assert {"BUDGET_OPTIONS_EXCLUSIVE", "BUDGET_SETTING_MISSING"} <= codes


# --- manage_context_budget ----------------------------------------------------------------


def node(nid: str, text: str, language: str = "unknown") -> dict[str, Any]:
    return {"id": nid, "path": f"{nid}.txt", "language": language, "text": text}


def budget(**kw: Any) -> dict[str, Any]:
    return {"id": "b", "action": "manage_context_budget", "on_ok": "end", "on_over": "over", **kw}


OVER = {"id": "over", "action": "finalize", "source": "retrieval_query"}
SQL = (
    Path_ := __import__("pathlib").Path(__file__).resolve().parent.parent.parent
    / "pipelines/sample/eshop/Database/Procedures/usp_PlaceOrder.sql"
).read_text()


def test_all_fit_appends_clears_and_marks_batches(sample_index):
    steps = [budget(divide_new_content="=== new ==="), OVER]
    r = run(
        sample_index,
        steps,
        {
            "node_texts": [node("a", "alpha"), node("b", "beta")],
            "context_blocks": ["=== new ===", format_block(node("z", "old"))],
        },
        max_context_tokens=1000,
    )
    blocks = r.state["context_blocks"]
    assert [block_id(b) for b in blocks] == ["z", None, "a", "b"] and blocks[1] == "=== new ==="
    assert blocks.count("=== new ===") == 1 and r.state["node_texts"] == []
    assert r.steps[-1] == "end"
    [ev] = [e for e in r.events if e["type"] == "MANAGE_CONTEXT_BUDGET"]
    assert ev["decision"] == "ok" and [n["id"] for n in ev["nodes"]] == ["a", "b"]


def test_nothing_appended_when_one_does_not_fit(sample_index):
    incoming = [node("a", "short"), node("b", "word " * 300)]
    r = run(
        sample_index,
        [budget(), OVER],
        {"node_texts": incoming, "context_blocks": ["x " * 250]},
        max_context_tokens=400,
    )
    assert r.steps[-1] == "over" and r.state["context_blocks"] == ["x " * 250]
    assert r.state["node_texts"] == incoming


def test_misconfiguration_when_incoming_alone_cannot_fit(sample_index):
    r = run(
        sample_index,
        [budget(), OVER],
        {"node_texts": [node("a", "word " * 500)]},
        max_context_tokens=100,
    )
    assert (r.error.code, r.error.step_id) == ("PIPELINE_BUDGET_MISCONFIG", "b")


def test_duplicates_are_not_appended_twice(sample_index):
    r = run(
        sample_index,
        [budget(), OVER],
        {"node_texts": [node("z", "again")], "context_blocks": [format_block(node("z", "old"))]},
        max_context_tokens=1000,
    )
    assert len(r.state["context_blocks"]) == 1


def test_always_and_threshold_policies_compact_sql(sample_index):
    rules = {"rules": [{"language": "sql", "policy": "always"}]}
    r = run(
        sample_index,
        [budget(compact_code=rules), OVER],
        {"node_texts": [node("p", SQL, "sql")]},
        max_context_tokens=5000,
    )
    [block] = r.state["context_blocks"]
    assert "compact: true" in block and "body elided" in block
    th = {"rules": [{"language": "sql", "policy": "threshold", "threshold": 0.9}]}
    kept = run(
        sample_index,
        [budget(compact_code=th), OVER],
        {"node_texts": [node("p", SQL, "sql")]},
        max_context_tokens=5000,
    )
    assert "compact: false" in kept.state["context_blocks"][0]
    th = {"rules": [{"language": "sql", "policy": "threshold", "threshold": 0.3}]}
    squeezed = run(
        sample_index,
        [budget(compact_code=th), OVER],
        {"node_texts": [node("p", SQL, "sql")]},
        max_context_tokens=1000,
    )
    assert "compact: true" in squeezed.state["context_blocks"][0]


def test_demand_compaction_loop_requeues_unspent_demand(sample_index):
    steps = [
        {
            "id": "ask",
            "action": "inbox_dispatcher",
            "source": "req",
            "next": "b",
            "rules": {"b": {"topic": "compact_code", "allow_keys": ["why"]}},
        },
        budget(
            compact_code={
                "rules": [{"language": "sql", "policy": "demand", "inbox_key": "compact_code"}]
            }
        ),
        OVER,
    ]
    req = {"dispatch": [{"target": "b", "payload": {"why": "over"}}]}
    ok = run(
        sample_index,
        steps,
        {"req": req, "node_texts": [node("p", SQL, "sql")]},
        max_context_tokens=600,
    )
    assert "compact: true" in ok.state["context_blocks"][0] and ok.steps[-1] == "end"
    over = run(
        sample_index,
        steps,
        {"req": req, "node_texts": [node("p", SQL, "sql")], "context_blocks": ["y " * 580]},
        max_context_tokens=600,
    )
    assert over.steps[-1] == "over"
    requeued = [
        e["message"] for e in over.events if e["type"] == "INBOX_ENQUEUE" and e["step_id"] == "b"
    ]
    assert [(m["topic"], m["attempt"], m["payload"]) for m in requeued] == [
        ("compact_code", 2, {"why": "over"})
    ]


def test_rule_validation():
    reg = default_registry()
    rules = [
        {"language": "sql", "policy": "threshold"},
        {"language": "sql", "policy": "threshold", "threshold": 1.5},
        {"language": "dotnet", "policy": "demand"},
    ]
    data = {
        "settings": {"entry_step_id": "b"},
        "steps": [budget(compact_code={"rules": rules}, on_over="end"), END],
    }
    found = [(d.code, d.path) for d in check_pipeline(data, SourceMap(data, "p.yaml"), reg)]
    assert ("COMPACTION_RULE_INVALID", "$.steps[0].compact_code.rules[0]") in found
    assert ("COMPACTION_RULE_INVALID", "$.steps[0].compact_code.rules[1].threshold") in found
    assert ("COMPACTION_RULE_INVALID", "$.steps[0].compact_code.rules[2]") in found
    assert ("BUDGET_SETTING_MISSING", "$.steps[0].action") in found
