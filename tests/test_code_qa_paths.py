"""pipelines/code_qa.yaml: every route through the shipped pipeline, model replies scripted.

tests/test_code_qa.py runs the straight route (retrieve once, sufficient, answer). These
tests take the others: the direct answer, unknown decisions, a second retrieval round,
a repeated query, the retrieval bound, C# compacted on demand when a batch is over the
global budget, and new evidence dropped when compaction cannot make it fit. Each runs the
real pipeline file (runtime.load + runtime.Runner, or `runtime exec`) over a real index,
with the replies of `route` and `check` replayed from a cassette or served over HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import runtime
from runtime.cli import cli

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = ROOT / "pipelines" / "code_qa.yaml"
QUESTION = "Which stored procedure writes the OrderLines table and who calls it?"
MARKER = "=== new evidence ==="
PREFIX = "eshop::main::"

HEAD = ["history", "assemble", "route", "route_decision"]
ROUND = ["search", "expand", "fetch", "budget"]
CHECK = ["check", "check_decision"]
MORE = ["repeat_check", "retrieve_guard"]
END = ["answer", "verify", "finish"]


@pytest.fixture(scope="module")
def code_qa():
    return runtime.load(str(PIPELINE))


def replies(**by_step: list) -> list[tuple[str, str]]:
    """Cassette lines, step by step: JSON for route/check, text for answers."""
    out = []
    for step, items in by_step.items():
        for item in items:
            out.append((step, item if isinstance(item, str) else json.dumps(item)))
    return out


def run(code_qa, index, tmp_path, lines, **inputs):
    """The shipped pipeline over an index (a path or an open store), replies from a cassette."""
    cassette = tmp_path / "replies.jsonl"
    cassette.write_text(
        "".join(json.dumps({"step_id": s, "response": r}) + "\n" for s, r in lines),
        encoding="utf-8",
    )
    where = {"index_path": index} if isinstance(index, str) else {"node_store": index}
    services = runtime.Services(
        settings=code_qa.settings,
        **where,
        model_spec=f"replay:{cassette}",
        base_dir=str(code_qa.base_dir),
    )
    result = runtime.Runner(code_qa, services=services).run({"question": QUESTION, **inputs})
    assert result.status == "completed", result.error
    return result


def events(result, kind, step=None):
    """Trace events of one type (optionally of one step), without run_id/seq/ts/attempt."""
    return [
        {k: v for k, v in e.items() if k not in ("run_id", "seq", "ts", "attempt", "type")}
        for e in result.events
        if e["type"] == kind and (step is None or e["step_id"] == step)
    ]


def outcomes(result, step):
    return [e["outcome"] for e in events(result, "STEP", step)]


def ids(blocks):
    """The node ids of context blocks; the batch marker stays as itself."""
    return [
        b.split("\n")[1].removeprefix("id: ") if b.startswith("--- NODE ---") else b for b in blocks
    ]


def model_input(result, step):
    """The user message the last call of a call_model step sent."""
    return events(result, "MODEL_CALL", step)[-1]["messages"][-1]["content"]


# --- routes over the sample codebase ------------------------------------------------


def test_small_talk_is_answered_directly_without_retrieval(runner, tmp_path, chat_server):
    chat_server.script = [
        {"reply": '{"decision": "answer"}'},
        {"reply": "Hello! Ask me about the eshop code."},
    ]
    history = [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello, how can I help?"},
    ]
    done = runner.invoke(
        cli,
        [
            "exec",
            str(PIPELINE),
            "--index",
            str(tmp_path / "none.db"),  # never opened: this route does not search
            "--store",
            str(tmp_path / "runs.db"),
            "--model",
            f"openai:test-model@{chat_server.url}",
            "--input",
            "question=Thanks, who are you?",
            "--input",
            f"history={json.dumps(history)}",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert out["steps"] == [*HEAD, "answer_direct", "finish"]
    assert out["output"] == {"final_answer": "Hello! Ask me about the eshop code."}
    assert out["state"]["last_model_response"] == "Hello! Ask me about the eshop code."
    assert "retrieval_query" not in out["state"]
    # Only the state defaults (docs/format.md), never written: no retrieval ran.
    assert out["state"]["context_blocks"] == [] and out["state"]["node_texts"] == []
    assert len(chat_server.requests) == 2
    direct = chat_server.requests[1]["body"]["messages"]
    system = (ROOT / "pipelines" / "prompts" / "code_qa" / "direct.md").read_text().strip()
    # A fresh conversation in the default fidelity (compact): the prompt file, a blank line,
    # then the run's preamble (docs/fidelity.md; its content is tested in test_fidelity.py).
    prompt, _, preamble = direct[0]["content"].partition("\n\n## Run context\n")
    assert prompt == system and preamble.startswith("- pipeline: code_qa (")
    assert preamble.endswith("\n- current step: answer_direct (step 5)")
    assert direct[1:] == [
        *history,
        {"role": "user", "content": "Thanks, who are you?"},
    ]
    assert not (tmp_path / "none.db").exists()


def test_decisions_the_routers_do_not_know_take_on_other(code_qa, sample_index, tmp_path):
    result = run(
        code_qa,
        sample_index,
        tmp_path,
        replies(
            route=[{"decision": "lookup", "query": "usp_PlaceOrder"}],
            check=[{"decision": "unsure"}],
            answer=["usp_PlaceOrder writes OrderLines."],
        ),
    )
    assert result.steps == [*HEAD, *ROUND, *CHECK, *END]
    assert outcomes(result, "route_decision") == ["other"]  # on_other: search anyway
    assert outcomes(result, "check_decision") == ["other"]  # on_other: answer
    assert events(result, "ROUTE") == [
        {"step_id": "route_decision", "decision": "lookup", "matched": None},
        {"step_id": "check_decision", "decision": "unsure", "matched": None},
    ]
    # The router took the decision out of the reply; the query reached the search.
    assert [e["query"] for e in events(result, "SEARCH")] == ["usp_PlaceOrder"]
    assert result.state["retrieval_queries_asked"] == ["usp_PlaceOrder"]
    assert result.output == {"final_answer": "usp_PlaceOrder writes OrderLines."}


def test_retrieve_more_searches_again_and_appends_a_marked_batch(code_qa, sample_index, tmp_path):
    result = run(
        code_qa,
        sample_index,
        tmp_path,
        replies(
            route=[{"decision": "retrieve", "query": "OrderLines usp_PlaceOrder"}],
            check=[
                {"decision": "retrieve_more", "query": "BasketController"},
                {"decision": "sufficient"},
            ],
            answer=["Cited answer."],
        ),
    )
    assert result.steps == [*HEAD, *ROUND, *CHECK, *MORE, *ROUND, *CHECK, *END]
    assert events(result, "REPEAT_QUERY_GUARD") == [
        {"step_id": "repeat_check", "query": "basketcontroller", "repeat": False}
    ]
    assert events(result, "LOOP_GUARD") == [
        {"step_id": "retrieve_guard", "count": 1, "limit": 2, "decision": "allow"}
    ]
    # The check's query, rewritten without its decision, is what the second search used.
    assert [e["query"] for e in events(result, "SEARCH")] == [
        "OrderLines usp_PlaceOrder",
        "BasketController",
    ]
    state = result.state
    assert state["retrieval_queries_asked"] == ["OrderLines usp_PlaceOrder", "BasketController"]
    assert state["retrieval_query"] == "BasketController"
    first, second = ([n["id"] for n in e["nodes"]] for e in events(result, "MANAGE_CONTEXT_BUDGET"))
    assert PREFIX + "procedure::dbo.usp_PlaceOrder" in first
    assert PREFIX + "class::Eshop.Api.Controllers.BasketController" in second
    assert not set(first) & set(second)
    # One marker, in front of the newest batch only; the first batch keeps its order.
    assert ids(state["context_blocks"]) == [*first, MARKER, *second]
    assert (len(first), len(second)) == (12, 12)
    assert state["node_texts"] == []
    # The answer saw both batches.
    evidence = model_input(result, "answer")
    assert evidence.count("--- NODE ---") == 24
    assert "id: " + PREFIX + "class::Eshop.Api.Controllers.BasketController\n" in evidence


def test_a_query_already_asked_goes_straight_to_the_answer(code_qa, sample_index, tmp_path):
    result = run(
        code_qa,
        sample_index,
        tmp_path,
        replies(
            route=[{"decision": "retrieve", "query": "OrderLines usp_PlaceOrder"}],
            check=[{"decision": "retrieve_more", "query": "orderlines,  USP_PlaceOrder?"}],
            answer=["Answer from the first batch."],
        ),
    )
    assert result.steps == [*HEAD, *ROUND, *CHECK, "repeat_check", *END]
    assert outcomes(result, "repeat_check") == ["repeat"]
    assert events(result, "REPEAT_QUERY_GUARD") == [
        {"step_id": "repeat_check", "query": "orderlines usp_placeorder", "repeat": True}
    ]
    assert len(events(result, "SEARCH")) == 1
    assert events(result, "LOOP_GUARD") == []
    assert result.state["retrieval_queries_asked"] == ["OrderLines usp_PlaceOrder"]
    assert result.output == {"final_answer": "Answer from the first batch."}


def test_extra_retrieval_rounds_stop_at_max_turn_loops(code_qa, sample_index, tmp_path):
    queries = ["OrderLines usp_PlaceOrder", "BasketController", "payment capture", "customer"]
    result = run(
        code_qa,
        sample_index,
        tmp_path,
        replies(
            route=[{"decision": "retrieve", "query": queries[0]}],
            check=[{"decision": "retrieve_more", "query": q} for q in queries[1:]],
            answer=["Enough."],
        ),
    )
    loop = [*ROUND, *CHECK, *MORE]
    assert result.steps == [*HEAD, *loop, *loop, *loop, *END]
    assert events(result, "LOOP_GUARD") == [
        {"step_id": "retrieve_guard", "count": 1, "limit": 2, "decision": "allow"},
        {"step_id": "retrieve_guard", "count": 2, "limit": 2, "decision": "allow"},
        {"step_id": "retrieve_guard", "count": 2, "limit": 2, "decision": "deny"},
    ]
    assert [e["query"] for e in events(result, "SEARCH")] == queries[:3]
    assert result.state["retrieval_queries_asked"] == queries[:3]
    assert [e["decision"] for e in events(result, "MANAGE_CONTEXT_BUDGET")] == ["ok"] * 3
    assert ids(result.state["context_blocks"]).count(MARKER) == 1


# --- the global budget: a codebase whose evidence fills it ------------------------
#
# A retrieval round brings at most evidence_budget_tokens (3,000) into a 6,000-token
# context, and retrieve_guard allows two extra rounds: the third batch is the one that
# can overflow. Two runbooks fill the context to 5,394 tokens; the third batch is either
# C# (which shrinks to a skeleton on demand) or more Markdown (which nothing compacts).


def _runbook(topic: str, sections: int) -> str:
    """Markdown with `sections` chunks of about 460 tokens each, all about `topic`."""
    out = []
    for s in range(1, sections + 1):
        out.append(f"## {topic.title()} step {s}\n")
        for p in range(13):
            out.append(
                f"The {topic} job, step {s} part {p}, reconciles card batches with bank "
                "statements, retries failed transfers twice and reports totals to the finance channel.\n"
            )
    return "\n".join(out)


LEDGER_CS = """namespace Acme.Billing
{
    /// <summary>Posts settled amounts to the general ledger.</summary>
    public class LedgerPoster
    {
        private readonly IDbConnection _db;

        public LedgerPoster(IDbConnection db) { _db = db; }

%s
    }
}
"""

LEDGER_METHOD = """        public int PostTranche%(n)d(int amount)
        {
            var total = 0;
%(lines)s
            _db.Execute("EXEC dbo.usp_PostLedger @Amount", new { Amount = total });
            return total;
        }
"""

LEDGER_SQL = """CREATE PROCEDURE dbo.usp_PostLedger
    @Amount DECIMAL(18, 2)
AS
BEGIN
    SET NOCOUNT ON;
    BEGIN TRANSACTION;
    INSERT INTO dbo.LedgerEntries (Amount, PostedAt) VALUES (@Amount, SYSUTCDATETIME());
    UPDATE dbo.LedgerTotals SET Balance = Balance + @Amount WHERE Id = 1;
    COMMIT TRANSACTION;
END
"""


@pytest.fixture(scope="module")
def billing(tmp_path_factory):
    """Runbooks of ~2,700 tokens, a C# ledger poster and its procedure, indexed by the CLI."""
    from click.testing import CliRunner

    src = tmp_path_factory.mktemp("billing")
    (src / "docs").mkdir()
    (src / "docs" / "settlement.md").write_text(_runbook("settlement", 6))
    (src / "docs" / "refunds.md").write_text(_runbook("refund", 6))
    (src / "docs" / "chargebacks.md").write_text(_runbook("chargeback", 3))
    methods = "\n".join(
        LEDGER_METHOD
        % {
            "n": n,
            "lines": "\n".join(
                f"            total += amount * {k + 1}; // tranche {k}" for k in range(8)
            ),
        }
        for n in range(3)
    )
    (src / "LedgerPoster.cs").write_text(LEDGER_CS % methods)
    (src / "usp_PostLedger.sql").write_text(LEDGER_SQL)
    index = src / "index.db"
    done = CliRunner().invoke(
        cli, ["index", str(src), "--index", str(index), "--repository", "acme", "--jobs", "1"]
    )
    assert done.exit_code == 0, done.output
    return str(index)


def test_a_batch_over_the_budget_is_compacted_on_demand(code_qa, billing, tmp_path):
    from runtime.context.tokens import get_counter

    result = run(
        code_qa,
        billing,
        tmp_path,
        replies(
            route=[{"decision": "retrieve", "query": "settlement"}],
            check=[
                {"decision": "retrieve_more", "query": "refund"},
                {"decision": "retrieve_more", "query": "ledger"},
                {"decision": "sufficient"},
            ],
            answer=["LedgerPoster calls dbo.usp_PostLedger."],
        ),
    )
    loop = [*ROUND, *CHECK, *MORE]
    compaction = ["compaction_guard", "request_compaction", "dispatch_compaction", "budget"]
    assert result.steps == [*HEAD, *loop, *loop, *ROUND, *compaction, *CHECK, *END]
    assert outcomes(result, "budget") == ["ok", "ok", "over", "ok"]
    assert events(result, "LOOP_GUARD", "compaction_guard") == [
        {"step_id": "compaction_guard", "count": 1, "limit": 2, "decision": "allow"}
    ]
    assert events(result, "INBOX_DISPATCH") == [
        {"step_id": "dispatch_compaction", "sent": 1, "dropped": []}
    ]
    budgets = events(result, "MANAGE_CONTEXT_BUDGET")
    assert [(b["decision"], b["demand"]) for b in budgets] == [
        ("ok", []),
        ("ok", []),
        ("over", []),
        ("ok", ["compact_code"]),
    ]
    # The constructor is searched as part of its class (docs/retrieval.md, one ranking).
    ledger = ["procedure::dbo.usp_PostLedger", "class::Acme.Billing.LedgerPoster"]
    ledger += [f"method::Acme.Billing.LedgerPoster.PostTranche{n}" for n in range(3)]
    # First try: SQL is compacted past 70% of the budget, C# waits for the demand.
    # Second try, with the demand: C# too.
    # (The methods come folded under their class when three match, MEMBER_FOLD, and reach
    # the context through the graph: the same nodes, the class no longer first of them.)
    got = [(n["id"], n["policy"], n["compacted"]) for n in budgets[2]["nodes"]]
    assert got[0] == ("acme::main::" + ledger[0], "threshold", True)
    assert sorted(got[1:]) == sorted(("acme::main::" + x, "demand", False) for x in ledger[1:])
    assert [n["compacted"] for n in budgets[3]["nodes"]] == [True, True, True, True, True]
    state = result.state
    settlement = [f"acme::main::doc::docs/settlement.md#Settlement step {s}" for s in range(1, 7)]
    refunds = [f"acme::main::doc::docs/refunds.md#Refund step {s}" for s in range(1, 7)]
    kept_ids = ids(state["context_blocks"])
    assert kept_ids[:-4] == [*settlement, *refunds, MARKER, "acme::main::" + ledger[0]]
    assert sorted(kept_ids[-4:]) == sorted("acme::main::" + x for x in ledger[1:])
    assert [b.split("\n")[4] for b in state["context_blocks"][-5:]] == ["compact: true"] * 5
    assert state["node_texts"] == []
    counter = get_counter("cl100k_base")
    kept = counter.count_joined(state["context_blocks"], "\n\n")
    assert kept == budgets[3]["total_tokens"] and kept <= 6000 < budgets[2]["total_tokens"]
    assert model_input(result, "answer").count("compact: true") == 5


def test_a_batch_compaction_cannot_fit_is_dropped(code_qa, billing, tmp_path):
    result = run(
        code_qa,
        billing,
        tmp_path,
        replies(
            route=[{"decision": "retrieve", "query": "settlement"}],
            check=[
                {"decision": "retrieve_more", "query": "refund"},
                {"decision": "retrieve_more", "query": "chargeback"},
                {"decision": "sufficient"},
            ],
            answer=["From the runbooks."],
        ),
    )
    loop = [*ROUND, *CHECK, *MORE]
    retry = ["compaction_guard", "request_compaction", "dispatch_compaction", "budget"]
    assert result.steps == [
        *HEAD,
        *loop,
        *loop,
        *ROUND,
        *retry,
        *retry,
        "compaction_guard",
        "drop_new_evidence",
        *CHECK,
        *END,
    ]
    assert outcomes(result, "budget") == ["ok", "ok", "over", "over", "over"]
    assert events(result, "LOOP_GUARD", "compaction_guard") == [
        {"step_id": "compaction_guard", "count": 1, "limit": 2, "decision": "allow"},
        {"step_id": "compaction_guard", "count": 2, "limit": 2, "decision": "allow"},
        {"step_id": "compaction_guard", "count": 2, "limit": 2, "decision": "deny"},
    ]
    assert (
        events(result, "INBOX_DISPATCH")
        == [{"step_id": "dispatch_compaction", "sent": 1, "dropped": []}] * 2
    )
    budgets = events(result, "MANAGE_CONTEXT_BUDGET")
    assert [b["demand"] for b in budgets] == [[], [], [], ["compact_code"], ["compact_code"]]
    # Markdown has no compaction rule: every retry is the same size.
    assert len({b["total_tokens"] for b in budgets[2:]}) == 1
    state = result.state
    settlement = [f"acme::main::doc::docs/settlement.md#Settlement step {s}" for s in range(1, 7)]
    refunds = [f"acme::main::doc::docs/refunds.md#Refund step {s}" for s in range(1, 7)]
    assert ids(state["context_blocks"]) == [*settlement, MARKER, *refunds]
    assert state["node_texts"] == []  # drop_new_evidence cleared the batch that did not fit
    evidence = model_input(result, "answer")
    assert "chargeback" not in evidence and evidence.count("--- NODE ---") == 12
    assert result.output == {"final_answer": "From the runbooks."}
