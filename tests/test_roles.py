"""pipelines/roles.yaml end to end (docs/roles.md): planner, retriever (tools), synthesizer,
verifier, each model call seeing only the fields it declares; offline with the scripted
model, and against an OpenAI-compatible server on 127.0.0.1 that answers by the same rules."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from runtime.cli import cli
from runtime.models.base import ModelConfig, ModelRequest
from runtime.models.scripted import ScriptedProvider
from tests.chat_support import LocalServer, QuietHandler

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = str(ROOT / "pipelines" / "roles.yaml")
QUESTION = "Which stored procedure writes the OrderLines table and who calls it?"
CITED = re.compile(r"\[(eshop::[^\]]+)\]")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from click.testing import CliRunner

    path = tmp_path_factory.mktemp("roles") / "index.db"
    sample = str(ROOT / "pipelines" / "sample" / "eshop")
    result = CliRunner().invoke(
        cli, ["index", sample, "--index", str(path), "--repository", "eshop"]
    )
    assert result.exit_code == 0, result.output
    return str(path)


def run(runner: Any, index: str, tmp_path: Path, model: str) -> tuple[dict[str, Any], list]:
    store = str(tmp_path / "r.db")
    args = ["exec", PIPELINE, "--index", index, "--store", store, "--model", model]
    result = runner.invoke(
        cli, [*args, "--input", f"question={QUESTION}", "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    trace = runner.invoke(cli, ["trace", out["run_id"], "--store", store, "--format", "jsonl"])
    assert trace.exit_code == 0, trace.output
    return out, [json.loads(line) for line in trace.stdout.splitlines()]


def calls_of(events: list[dict[str, Any]], step: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "MODEL_CALL" and e["step_id"] == step]


def check_run(out: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """What done means for roles.yaml (issue 29)."""
    assert out["status"] == "completed"
    assert out["steps"] == [
        "plan",
        "keep_plan",
        "retrieve",
        "draft",
        "keep_draft",
        "verify",
        "finish",
    ]
    plan = json.loads(out["state"]["plan"])
    assert len(plan["queries"]) >= 2
    # The retriever searched in two or more rounds through tools, then expanded and fetched.
    tools = [e for e in events if e["type"] == "MODEL_TOOL_CALL" and e["step_id"] == "retrieve"]
    assert [e["tool"] for e in tools][:2] == ["search_nodes", "search_nodes"]
    assert {e["round"] for e in tools if e["tool"] == "search_nodes"} == {1, 2}
    assert [e["tool"] for e in tools][2:] == ["expand_dependency_tree", "fetch_node_texts"]
    assert all(e["error"] is None and e["tokens"] > 0 for e in tools)  # each with its cost
    # Every tool offered is in the trace, with the tokens of its spec.
    (offered,) = [e for e in events if e["type"] == "TOOLS_OFFERED" and e["step_id"] == "retrieve"]
    assert [t["name"] for t in offered["tools"]] == [
        "search_nodes",
        "expand_dependency_tree",
        "fetch_node_texts",
        "rehydrate",
    ]
    assert all(t["tokens"] > 0 for t in offered["tools"])
    # The answer cites, and every citation names an item the synthesizer was shown.
    answer = out["output"]["final_answer"]
    cited = set(CITED.findall(answer))
    shown = {t["id"] for t in out["state"]["node_texts"]}
    fetched = set(tools[-1]["shown"])
    assert cited and cited <= shown and shown <= fetched
    assert "eshop::main::procedure::dbo.usp_PlaceOrder" in cited
    verification = out["output"]["verification"]
    assert verification["ok"] is True and verification["unknown_citations"] == []
    assert verification["unsupported"] == []
    assert {c["citation"] for c in verification["citations"]} == cited


def test_roles_offline_with_the_scripted_model(runner, index, tmp_path):
    out, events = run(runner, index, tmp_path, "scripted")
    check_run(out, events)


def test_each_role_sees_only_the_fields_it_declares(runner, index, tmp_path):
    out, events = run(runner, index, tmp_path, "scripted")
    node_text = "CREATE OR ALTER PROCEDURE"
    plan_text = out["state"]["plan"]
    (plan,) = calls_of(events, "plan")
    (retrieve,) = calls_of(events, "retrieve")
    (draft,) = calls_of(events, "draft")

    def said(call: dict[str, Any], role: str) -> str:
        return "\n".join(m.get("content") or "" for m in call["messages"] if m["role"] == role)

    # No system message holds a state value: the preamble names the run and the step only.
    for call in (plan, retrieve, draft):
        assert QUESTION not in said(call, "system") and node_text not in said(call, "system")
    # The planner: the question only.
    assert QUESTION in said(plan, "user") and node_text not in json.dumps(plan["messages"])
    # The retriever: question and plan; node texts only through its own tool calls.
    assert QUESTION in said(retrieve, "user") and plan_text in said(retrieve, "user")
    assert node_text not in said(retrieve, "user") and node_text in said(retrieve, "tool")
    # The synthesizer: question and evidence, never the plan.
    assert node_text in said(draft, "user") and '"queries"' not in json.dumps(draft["messages"])
    # The verifier calls no model: verify_answer reads the draft and the record of what the
    # synthesizer was shown (shown_to), never the retriever's tool results.
    assert not calls_of(events, "verify")


class RulesServer(LocalServer):
    """An OpenAI-compatible chat server answering by the scripted model's rules (streamed
    or not, tool calls included): the roles pipeline over real HTTP."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        brain = ScriptedProvider(ModelConfig("rules", "scripted", model="scripted"))
        server = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.json_body()
                server.bodies.append(body)
                fmt = body.get("response_format") or {}
                request = ModelRequest(
                    messages=body["messages"],
                    json_mode=bool(fmt),
                    json_schema=(fmt.get("json_schema") or {}).get("schema"),
                    tools=body.get("tools"),
                )
                reply = brain.complete(request)
                calls = [
                    {
                        "index": i,
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for i, c in enumerate(reply.tool_calls)
                ]
                finish = "tool_calls" if calls else "stop"
                usage = {"prompt_tokens": 100, "completion_tokens": 10}
                self.send_response(200)
                if body.get("stream"):
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    delta = {"tool_calls": calls} if calls else {"content": reply.text}
                    for event in (
                        {"choices": [{"index": 0, "delta": delta}]},
                        {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                        {"choices": [], "usage": usage},
                    ):
                        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
                if calls:
                    message["tool_calls"] = calls
                data = {"choices": [{"message": message, "finish_reason": finish}], "usage": usage}
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps(data).encode())

        self.listen(Handler)
        self.start()


def test_roles_against_an_openai_compatible_server(runner, index, tmp_path):
    server = RulesServer()
    try:
        out, events = run(runner, index, tmp_path, f"openai:m@{server.url}")
    finally:
        server.close()
    check_run(out, events)
    retrieve = [b for b in server.bodies if b.get("tools")]
    names = [t["function"]["name"] for t in retrieve[0]["tools"]]
    assert names == ["search_nodes", "expand_dependency_tree", "fetch_node_texts", "rehydrate"]


def test_the_script_in_docs_models_md_runs(runner, index, tmp_path):
    page = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    section = page[page.index("## The scripted model") :]
    script = section[
        section.index("```yaml\n") + 8 : section.index("```", section.index("```yaml\n") + 8)
    ]
    (tmp_path / "script.yaml").write_text(script)
    out, events = run(runner, index, tmp_path, f"scripted:{tmp_path / 'script.yaml'}")
    assert out["status"] == "completed"
    tools = [
        e["tool"] for e in events if e["type"] == "MODEL_TOOL_CALL" and e["step_id"] == "retrieve"
    ]
    assert tools == ["search_nodes", "fetch_node_texts"]
    (retrieve,) = calls_of(events, "retrieve")
    assert "Fetched the OrderLines table and its writers." in json.dumps(retrieve)
