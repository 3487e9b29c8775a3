"""The main job end to end: pipelines/code_qa.yaml over the indexed sample codebase."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.cli import cli
from runtime.engine.trace import without_timing

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = str(ROOT / "pipelines" / "code_qa.yaml")
QUESTION = "Which stored procedure writes the OrderLines table and who calls it?"
RETRIEVAL = [
    "history",
    "assemble",
    "route",
    "route_decision",
    "search",
    "expand",
    "fetch",
    "budget",
    "check",
    "check_decision",
    "answer",
    "verify",
    "finish",
]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from click.testing import CliRunner

    path = tmp_path_factory.mktemp("qa") / "index.db"
    result = CliRunner().invoke(
        cli,
        [
            "index",
            str(ROOT / "pipelines" / "sample" / "eshop"),
            "--index",
            str(path),
            "--repository",
            "eshop",
        ],
    )
    assert result.exit_code == 0, result.output
    return str(path)


def run(runner, index, tmp_path, *extra, store: str = "r.db"):
    result = runner.invoke(
        cli,
        [
            "exec",
            PIPELINE,
            "--index",
            index,
            "--store",
            str(tmp_path / store),
            "--input",
            f"question={QUESTION}",
            "--json",
            *extra,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_offline_answer_with_cited_evidence(runner, index, tmp_path):
    out = run(runner, index, tmp_path)
    assert out["status"] == "completed" and out["steps"] == RETRIEVAL
    ids = [b.split("\n")[1] for b in out["state"]["context_blocks"] if b.startswith("--- NODE ---")]
    assert "id: eshop::main::procedure::dbo.usp_PlaceOrder" in ids
    # The caller: the repository method, or its class when several of its members match
    # (they fold into the type, docs/retrieval.md#one-ranking); either holds the call.
    caller = "eshop::main::class::Eshop.Infrastructure.Repositories.OrderRepository"
    assert (
        f"id: {caller}" in ids or f"id: {caller.replace('class', 'method')}.PlaceOrderAsync" in ids
    )
    answer = out["output"]["final_answer"]
    assert answer.startswith("No language model was used")
    assert "dbo.usp_PlaceOrder" in answer and "Sources: [eshop::main::" in answer
    assert 'ExecuteAsync("dbo.usp_PlaceOrder"' in answer  # who calls it, quoted
    # The answer is verified: every citation names a block the answer step was shown.
    verdict, shown = out["state"]["answer_verification"], out["state"]["answer_shown"]
    assert verdict["ok"] is True, verdict
    cited = {c["citation"] for c in verdict["citations"]}
    assert "eshop::main::procedure::dbo.usp_PlaceOrder" in cited
    assert cited <= {i["id"] for i in shown["items"]}
    assert {i["id"] for i in shown["items"]} == {b.split("\n")[1][4:] for b in ids_blocks(out)}


def ids_blocks(out):
    return [b for b in out["state"]["context_blocks"] if b.startswith("--- NODE ---")]


def test_record_then_replay_gives_the_same_run(runner, index, tmp_path):
    cassette = tmp_path / "qa.jsonl"
    first = run(runner, index, tmp_path, "--record", str(cassette), "--run-id", "a")
    assert [json.loads(x)["step_id"] for x in cassette.read_text().splitlines()] == [
        "route",
        "check",
        "answer",
    ]
    # The replay keeps the run id (in a store of its own): each model step's preamble names
    # the run (docs/fidelity.md), so the replayed prompts equal the recorded ones byte for byte.
    second = run(
        runner, index, tmp_path, "--model", f"replay:{cassette}", "--run-id", "a", store="b.db"
    )
    assert second["steps"] == first["steps"] and second["state"] == first["state"]
    traces = []
    for store in ("r.db", "b.db"):
        lines = runner.invoke(
            cli, ["trace", "a", "--store", str(tmp_path / store), "--format", "jsonl"]
        ).stdout.splitlines()
        events = without_timing(json.loads(x) for x in lines)
        # The provider name is the only difference allowed between a live call and its replay
        # (a context pack's id hashes the model name with the pack).
        traces.append(
            [
                {
                    k: v
                    for k, v in e.items()
                    if k
                    not in ("run_id", "provider", "model", "tokens_in", "tokens_out", "pack_id")
                }
                for e in events
            ]
        )
    recorded = [json.loads(x)["request"]["messages"] for x in cassette.read_text().splitlines()]
    sent = [e["messages"] for e in traces[1] if e["type"] == "MODEL_CALL"]
    assert sent == recorded and "\n\n## Run context\n" in sent[0][0]["content"]
    assert traces[0][1:] == traces[1][1:]


def test_same_pipeline_against_an_openai_compatible_server(runner, index, tmp_path, chat_server):
    chat_server.script = [
        {"reply": '{"decision": "retrieve", "query": "OrderLines usp_PlaceOrder"}'},
        {"reply": '{"decision": "sufficient"}'},
        {
            "reply": "dbo.usp_PlaceOrder writes dbo.OrderLines; OrderRepository.PlaceOrderAsync calls it "
            "[eshop::main::procedure::dbo.usp_PlaceOrder]."
        },
    ]
    out = run(runner, index, tmp_path, "--model", f"openai:test-model@{chat_server.url}")
    assert out["steps"] == RETRIEVAL
    assert out["output"]["final_answer"].startswith("dbo.usp_PlaceOrder writes dbo.OrderLines")
    assert out["state"]["retrieval_query"] == "OrderLines usp_PlaceOrder"
    # The reply's one sentence cites a node the answer step was shown: verified.
    verdict = out["state"]["answer_verification"]
    assert verdict["ok"] is True and verdict["citations"] == [
        {"citation": "eshop::main::procedure::dbo.usp_PlaceOrder", "times": 1}
    ]
    answer_request = chat_server.requests[2]["body"]["messages"]
    assert answer_request[0]["role"] == "system" and "<evidence>" in answer_request[-1]["content"]


NO_EVIDENCE = (
    "No language model was used: this answer was assembled offline from the retrieved evidence."
    "\n\nNo evidence in the context matches the question ({}); nothing can be cited."
)


@pytest.mark.parametrize(
    ("question", "query"),
    [
        ("hello", "hello"),
        ("What does the zebra quantum flux capacitor do?", "zebra quantum flux capacitor"),
    ],
)
def test_a_question_without_hits_is_answered_not_failed(runner, index, tmp_path, question, query):
    # manage_context_budget has nothing to append; context_blocks is [] from the state defaults.
    result = runner.invoke(
        cli,
        [
            *("exec", PIPELINE, "--index", index, "--store", str(tmp_path / "r.db")),
            *("--input", f"question={question}", "--json"),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["status"], out["error"]) == ("completed", None)
    assert out["steps"] == [*RETRIEVAL[:-3], "repeat_check", "answer", "verify", "finish"]
    state = out["state"]
    assert (state["retrieval_query"], state["retrieval_hits"]) == (query, [])
    assert (state["context_blocks"], state["node_texts"]) == ([], [])
    assert out["output"] == {"final_answer": NO_EVIDENCE.format(question)}


def test_the_answer_is_shown_the_teams_memories_and_cites_only_the_evidence(runner, tmp_path):
    index = str(tmp_path / "mem" / "index.db")
    sample = ROOT / "pipelines" / "sample"
    for args in (
        ["index", str(sample / "eshop"), "--index", index, "--repository", "eshop"],
        ["memories", "import", str(sample / "eshop-memories.json"), "--index", index],
    ):
        done = runner.invoke(cli, args)
        assert done.exit_code == 0, done.output
    out = run(runner, index, tmp_path, "--run-id", "m")
    assert out["status"] == "completed" and out["steps"] == RETRIEVAL
    record = out["state"]["assembled_context"]
    remembered = [i["id"] for i in record["items"]]
    assert remembered and all(i.startswith("memory:") for i in remembered)
    assert "memory:mem-orders-one-transaction" in remembered  # the seed about OrderLines
    # The answer step was shown them: the pack's memory section lists each, as assembled.
    shown = runner.invoke(
        cli, ["context", "m", "--store", str(tmp_path / "r.db"), "--step", "answer", "--json"]
    )
    assert shown.exit_code == 0, shown.output
    [pack] = json.loads(shown.stdout)
    [memory] = [s for s in pack["sections"] if s["type"] == "memory"]
    assert [i["id"] for i in memory["items"]] == remembered
    assert all(i["source"] == "assembly:memories" and i["labels"] == [] for i in memory["items"])
    # The evidence is still what is cited, and verified; no memory is cited.
    verdict = out["state"]["answer_verification"]
    assert verdict["ok"] is True, verdict
    cited = {c["citation"] for c in verdict["citations"]}
    assert cited and not any(c.startswith("memory:") for c in cited)
