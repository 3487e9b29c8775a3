"""OpenTelemetry spans (runtime/engine/telemetry.py): the span tree of a run, GenAI attributes,
content off by default, and the coded errors when it is enabled but cannot work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import runtime
from runtime.contract.action import Action, Outcome
from runtime.contract.registry import Registry
from runtime.engine import Engine, telemetry
from runtime.engine.services import Services
from runtime.errors import ModelTimeoutError, RunError, UsageError
from runtime.format.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[2]
CODE_QA = str(ROOT / "pipelines" / "code_qa.yaml")
QUESTION = "Which stored procedure writes the OrderLines table and who calls it?"
CODE_QA_STEPS = [
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
OTEL_VARS = (
    "RUNTIME_OTEL",
    "OTEL_SDK_DISABLED",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    telemetry.CAPTURE_ENV,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No OpenTelemetry variable of the caller's shell leaks in."""
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)


def memory() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def run_code_qa(index: Any, question: str = QUESTION) -> tuple[Any, list[Any]]:
    provider, exporter = memory()
    pipeline = runtime.load(CODE_QA)
    services = Services(
        settings=pipeline.settings, node_store=index, base_dir=str(pipeline.base_dir)
    )
    result = runtime.Runner(pipeline, services=services, tracer_provider=provider).run(
        {"question": question}
    )
    assert result.status == "completed", result.error
    return result, list(exporter.get_finished_spans())


def by_name(spans: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


def test_a_code_qa_run_is_one_trace_run_then_steps_then_model_calls(sample_index):
    result, spans = run_code_qa(sample_index)
    names = by_name(spans)
    (run,) = names["run code_qa"]
    assert run.parent is None
    assert {s.context.trace_id for s in spans} == {run.context.trace_id}
    steps = sorted((s for s in spans if s.name.startswith("step ")), key=lambda s: s.start_time)
    assert [s.name for s in steps] == [f"step {i}" for i in CODE_QA_STEPS]
    assert all(s.parent.span_id == run.context.span_id for s in steps)
    # One chat span per model call, under the step that made it.
    chats = names["chat extractive"]
    parents = {s.context.span_id: s.name for s in steps}
    assert sorted(parents[c.parent.span_id] for c in chats) == [
        "step answer",
        "step check",
        "step route",
    ]
    assert len(spans) == 1 + len(CODE_QA_STEPS) + 3
    assert all(c.kind is SpanKind.CLIENT for c in chats)
    # Children lie inside their parents.
    spans_by_id = {s.context.span_id: s for s in spans}
    for s in spans:
        if s.parent is not None:
            parent = spans_by_id[s.parent.span_id]
            assert parent.start_time <= s.start_time <= s.end_time <= parent.end_time
    assert run.attributes["step_runtime.run.id"] == result.run_id
    assert run.attributes["step_runtime.run.status"] == "completed"
    assert run.attributes["step_runtime.run.steps"] == len(CODE_QA_STEPS)
    assert run.status.status_code is StatusCode.UNSET


def test_step_spans_carry_run_step_action_outcome_and_attempt(sample_index):
    result, spans = run_code_qa(sample_index)
    (step,) = by_name(spans)["step route_decision"]
    assert dict(step.attributes) == {
        "step_runtime.run.id": result.run_id,
        "step_runtime.pipeline": "code_qa",
        "step_runtime.step.id": "route_decision",
        "step_runtime.step.action": "json_decision_router",
        "step_runtime.step.outcome": "route retrieve",
        "step_runtime.step.next": "search",
        "step_runtime.step.attempt": 1,
    }


def test_model_calls_follow_the_genai_conventions(sample_index):
    result, spans = run_code_qa(sample_index)
    chats = {
        s.attributes["step_runtime.step.id"]: s.attributes
        for s in by_name(spans)["chat extractive"]
    }
    answer = chats["answer"]
    # The counts are the trace's MODEL_CALL events' (the run keeps its events: no store).
    calls = {e["step_id"]: e for e in result.events if e["type"] == "MODEL_CALL"}
    for step_id, a in chats.items():
        assert a["gen_ai.usage.input_tokens"] == calls[step_id]["tokens_in"]
        assert a["gen_ai.usage.output_tokens"] == calls[step_id]["tokens_out"]
    assert answer["gen_ai.operation.name"] == "chat"
    assert answer["gen_ai.provider.name"] == answer["gen_ai.system"] == "extractive"
    assert answer["gen_ai.request.model"] == answer["gen_ai.response.model"] == "extractive"
    assert answer["gen_ai.usage.input_tokens"] > 2000
    assert answer["gen_ai.usage.output_tokens"] > 100
    assert tuple(answer["gen_ai.response.finish_reasons"]) == ("stop",)
    # The context budget decision of the call rides on its span.
    assert answer["step_runtime.context.decision"] == "ok"
    assert answer["step_runtime.context.budget"] > 0
    assert (
        answer["step_runtime.model_call.prompt_tokens"]
        == answer["step_runtime.context.prompt_tokens"]
    )
    assert chats["route"]["gen_ai.usage.output_tokens"] < answer["gen_ai.usage.output_tokens"]
    # ... and its context pack: id, section tokens, the decisions that admitted its items.
    assert answer["step_runtime.pack.id"].startswith("pk_")
    assert answer["step_runtime.pack.section.knowledge.tokens"] > 1000
    assert answer["step_runtime.pack.section.policy.tokens"] > 0
    assert len(answer["step_runtime.pack.decision_ids"]) >= 1
    assert len({c["step_runtime.pack.id"] for c in chats.values()}) == 3


def test_prompt_and_reply_text_are_off_by_default(sample_index):
    _result, spans = run_code_qa(sample_index)
    for s in spans:
        assert not any(
            k in s.attributes for k in ("gen_ai.input.messages", "gen_ai.output.messages")
        )
        assert "OrderLines" not in json.dumps(dict(s.attributes), default=str)


def test_content_capture_puts_the_messages_in_genai_form(sample_index, monkeypatch):
    monkeypatch.setenv(telemetry.CAPTURE_ENV, "true")
    _result, spans = run_code_qa(sample_index)
    (route,) = [
        s
        for s in by_name(spans)["chat extractive"]
        if s.attributes["step_runtime.step.id"] == "route"
    ]
    sent = json.loads(route.attributes["gen_ai.input.messages"])
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[1]["parts"][0]["type"] == "text"
    assert QUESTION in sent[1]["parts"][0]["content"]
    (reply,) = json.loads(route.attributes["gen_ai.output.messages"])
    assert reply["role"] == "assistant" and reply["finish_reason"] == "stop"
    assert json.loads(reply["parts"][0]["content"])["decision"] == "retrieve"


# --- failures, retries and catches, with test-only actions ------------------------------


class Flaky(Action):
    """Times out until attempt `ok_at`; with `fail`, raises RunError(fail) carrying `say`."""

    name = "flaky"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        if "fail" in ctx.step:
            raise RunError(str(ctx.step.get("say", "broken")), code=ctx.step["fail"])
        if ctx.attempt < ctx.step.get("ok_at", 1):
            raise ModelTimeoutError("slow")
        return None


class Noop(Action):
    name = "noop"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        return None


def engine(steps: list[dict[str, Any]], provider: Any) -> Engine:
    pipeline = Pipeline.from_dict(
        {"name": "p", "settings": {"entry_step_id": steps[0]["id"]}, "steps": steps}
    )
    return Engine(
        pipeline,
        registry=Registry.from_classes(Flaky, Noop),
        sleep=lambda _s: None,
        tracer_provider=provider,
    )


def test_a_retried_step_is_one_span_with_its_attempt_and_retry_events():
    provider, exporter = memory()
    steps = [
        {"id": "a", "action": "flaky", "ok_at": 3, "retry": {"max_attempts": 3}, "next": "b"},
        {"id": "b", "action": "noop", "end": True},
    ]
    assert engine(steps, provider).run().status == "completed"
    (a,) = by_name(list(exporter.get_finished_spans()))["step a"]
    assert a.attributes["step_runtime.step.attempt"] == 3
    assert [(e.name, e.attributes["error.type"]) for e in a.events] == [
        ("retry", "MODEL_TIMEOUT"),
        ("retry", "MODEL_TIMEOUT"),
    ]


def test_a_caught_step_and_a_failed_run_carry_the_error_code():
    provider, exporter = memory()
    steps = [
        {"id": "a", "action": "flaky", "fail": "VARIABLE_MISSING", "catch": {"ALL": "b"}},
        {"id": "b", "action": "flaky", "fail": "STATE_PROTECTED", "end": True},
    ]
    result = engine(steps, provider).run()
    assert result.status == "failed"
    spans = by_name(list(exporter.get_finished_spans()))
    (a,), (b,), (run,) = spans["step a"], spans["step b"], spans["run p"]
    assert a.attributes["step_runtime.step.outcome"] == "caught"
    assert a.attributes["step_runtime.error.code"] == a.attributes["error.type"]
    assert a.attributes["error.type"] == "VARIABLE_MISSING"
    assert a.status.status_code is StatusCode.ERROR
    assert b.attributes["error.type"] == "STATE_PROTECTED"
    assert b.parent.span_id == run.context.span_id
    assert run.attributes["error.type"] == "STATE_PROTECTED"
    assert run.attributes["step_runtime.run.status"] == "failed"
    assert run.attributes["step_runtime.step.id"] == "b"
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "broken"


def test_a_run_stopped_before_a_step_has_no_span_for_that_step():
    provider, exporter = memory()
    steps = [{"id": "a", "action": "noop", "next": "a"}]
    result = engine(steps, provider).run(max_steps=2)
    assert result.error.code == "MAX_STEPS_EXCEEDED"
    names = [s.name for s in exporter.get_finished_spans()]
    assert sorted(names) == ["run p", "step a", "step a"]


def test_off_without_a_provider_or_the_environment():
    provider, exporter = memory()
    e = engine([{"id": "a", "action": "noop", "end": True}], None)
    assert e.telemetry is None
    assert e.run().status == "completed"
    assert exporter.get_finished_spans() == ()
    assert provider is not None


# --- enabling by the environment, and its errors ----------------------------------------


@pytest.mark.parametrize(
    "env,expected",
    [
        ({}, False),
        ({"RUNTIME_OTEL": "1"}, True),
        ({"RUNTIME_OTEL": "true"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "RUNTIME_OTEL": "0"}, False),
        ({"RUNTIME_OTEL": "1", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
    ],
)
def test_the_environment_decides_when_no_provider_is_given(env, expected):
    assert telemetry.enabled(env) is expected


@pytest.mark.parametrize(
    "env,name",
    [
        ({"RUNTIME_OTEL": "maybe"}, "RUNTIME_OTEL"),
        ({"OTEL_SDK_DISABLED": "sometimes"}, "OTEL_SDK_DISABLED"),
        ({"RUNTIME_OTEL": "1", telemetry.CAPTURE_ENV: "yes please"}, telemetry.CAPTURE_ENV),
        (
            {"RUNTIME_OTEL": "1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
    ],
)
def test_a_bad_setting_is_a_coded_usage_error_naming_the_variable(env, name):
    with pytest.raises(UsageError) as caught:
        telemetry.configure(None, env)
    assert caught.value.code == "OTEL_SETTING_INVALID"
    assert f"${name}" in caught.value.message
    assert caught.value.exit_code == 2


@pytest.fixture
def without_otel(monkeypatch):
    """As if the `otel` extra were not installed: importing opentelemetry fails."""
    monkeypatch.setattr(telemetry, "_shared", None)
    for name in list(sys.modules):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)


def test_enabled_without_the_extra_is_a_coded_usage_error(without_otel):
    with pytest.raises(UsageError) as caught:
        telemetry.configure(None, {"RUNTIME_OTEL": "1"})
    assert caught.value.code == "OTEL_NOT_INSTALLED"
    assert "step-runtime[otel]" in caught.value.message
    with pytest.raises(UsageError) as given:
        telemetry.configure(object(), {})
    assert given.value.code == "OTEL_NOT_INSTALLED"


def test_exec_enabled_without_the_extra_exits_2_with_the_code_not_a_traceback(
    without_otel, monkeypatch, tmp_path
):
    from runtime.cli import cli

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    args = ["exec", CODE_QA, "--input", f"question={QUESTION}", "--json"]
    args += ["--store", str(tmp_path / "r.db"), "--index", str(tmp_path / "none.db")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "OTEL_NOT_INSTALLED" in result.stderr
    assert "step-runtime[otel]" in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""  # no run was started


def test_a_run_with_telemetry_off_imports_no_opentelemetry(tmp_path):
    probe = (
        "import sys, runtime\n"
        "from runtime.engine import Engine\n"
        f"p = runtime.load({CODE_QA!r})\n"
        "e = Engine(p)\n"
        "assert e.telemetry is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RUNTIME_OTEL" and not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --- context packs: CONTEXT_PACK events as attributes of the call they describe ---------


class PackStore:
    """The run store's pack API, holding one pack."""

    def __init__(self, pack: dict[str, Any]) -> None:
        self.pack = pack

    def packs(self, run_id: str, step_id: str | None = None) -> list[dict[str, Any]]:
        return [self.pack] if (run_id, step_id) == ("r1", self.pack["step_id"]) else []


def feed(events: list[dict[str, Any]], services: Any = None, capture: bool = False) -> list[Any]:
    """The spans a SpanWriter makes of events (a one-step pipeline `ask`)."""
    provider, exporter = memory()
    pipeline = Pipeline.from_dict(
        {"name": "p", "settings": {"entry_step_id": "ask"}, "steps": [{"id": "ask", "end": True}]}
    )
    writer = telemetry.Telemetry(provider, capture=capture).writer(pipeline, services)
    for seq, e in enumerate(events, 1):
        writer({"run_id": "r1", "seq": seq, "ts": 100.0 + seq, "step_id": "ask", **e})
    return list(exporter.get_finished_spans())


PACK_EVENT = {
    "type": "CONTEXT_PACK",
    "pack_id": "pk_0123456789abcdef",
    "pack_seq": 1,
    "model": "m",
    "prompt_hash": "sha256:00",
    "prompt_tokens": 900,
    "sections": {"policy": 100, "knowledge": 700, "user": 100},
    "items": 9,
    "drops": 2,
    "coverage": 1.0,
}
CALL = {"type": "MODEL_CALL", "model": "m", "provider": "openai", "tokens_in": 900, "tokens_out": 5}


def run_events(*step_events: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "RUN_STARTED", "step_id": None, "pipeline": "p", "choices": {}},
        *step_events,
        {"type": "STEP", "action": "call_model", "outcome": "end", "attempt": 1, "duration_ms": 1},
        {"type": "RUN_COMPLETED", "step_id": None, "steps": 1},
    ]


def test_a_context_pack_rides_on_the_first_chat_span_of_its_call():
    pack = {**PACK_EVENT, "decisions": ["scope:eshop/main/public", "policy:42"]}
    over = {"type": "PACK_BUDGET_OVER", "pack_id": pack["pack_id"], "section": "knowledge"}
    decision = {"type": "CONTEXT_BUDGET_DECISION", "model": "m", "decision": "ok", "budget": 1000}
    spans = feed(run_events(decision, pack, over, CALL, CALL))
    first, second = sorted((s for s in spans if s.name == "chat m"), key=lambda s: s.start_time)
    a = first.attributes
    assert a["step_runtime.pack.id"] == "pk_0123456789abcdef"
    assert a["step_runtime.pack.section.knowledge.tokens"] == 700
    assert a["step_runtime.pack.section.policy.tokens"] == 100
    assert tuple(a["step_runtime.pack.decision_ids"]) == ("scope:eshop/main/public", "policy:42")
    assert (a["step_runtime.pack.items"], a["step_runtime.pack.drops"]) == (9, 2)
    assert a["step_runtime.context.budget"] == 1000
    # A tool round's next call is not described by the pack or the decision again.
    assert not any(
        k.startswith(("step_runtime.pack.", "step_runtime.context.")) for k in second.attributes
    )
    (step,) = [s for s in spans if s.name == "step ask"]
    (event,) = step.events
    assert event.name == "pack_budget_over"
    assert event.attributes["step_runtime.section"] == "knowledge"


def test_pack_decision_ids_are_read_from_the_stored_pack_when_the_event_has_none():
    item = {"id": "n1", "decision": "scope:eshop/main/public"}
    others = [{"id": f"m{i}", "decision": f"policy:{i}"} for i in (7, 3, 9, 1, 5)]
    stored = {
        "pack_id": PACK_EVENT["pack_id"],
        "step_id": "ask",
        "sections": [
            {"type": "knowledge", "items": [item, {**item, "id": "n2"}, *others]},
            {"type": "policy", "items": [{"id": "sys", "decision": "admit:system"}]},
            {"type": "user", "items": [{"id": "q"}]},
        ],
    }
    services = type("S", (), {"packs": PackStore(stored)})()
    spans = feed(run_events(PACK_EVENT, CALL), services)
    (chat,) = [s for s in spans if s.name == "chat m"]
    assert tuple(chat.attributes["step_runtime.pack.decision_ids"]) == (
        "admit:system",
        *(f"policy:{i}" for i in (1, 3, 5, 7, 9)),
        "scope:eshop/main/public",
    )
    # Another pack id in the store: none found, none claimed.
    stored["pack_id"] = "pk_other"
    (chat,) = [s for s in feed(run_events(PACK_EVENT, CALL), services) if s.name == "chat m"]
    assert "step_runtime.pack.decision_ids" not in chat.attributes


class Gate(Action):
    """Fails while `Gate.closed` is set."""

    name = "gate"
    runnable = True
    closed = True

    def run(self, ctx: Any) -> Outcome | None:
        if Gate.closed:
            raise RunError("closed", code="VARIABLE_MISSING")
        return None


def test_a_resumed_run_is_a_new_trace_that_says_where_it_resumed(tmp_path):
    from runtime.engine.store import SqliteRunStore

    provider, exporter = memory()
    pipeline = Pipeline.from_dict(
        {
            "name": "p",
            "settings": {"entry_step_id": "a"},
            "steps": [
                {"id": "a", "action": "noop", "next": "b"},
                {"id": "b", "action": "gate", "end": True},
            ],
        }
    )
    store = SqliteRunStore(str(tmp_path / "r.db"))

    def engine() -> Engine:
        reg = Registry.from_classes(Noop, Gate)
        return Engine(pipeline, registry=reg, store=store, tracer_provider=provider)

    Gate.closed = True
    assert engine().run(run_id="r").status == "failed"
    Gate.closed = False
    assert engine().resume("r").status == "completed"
    runs = sorted(
        (s for s in exporter.get_finished_spans() if s.name == "run p"), key=lambda s: s.start_time
    )
    assert [r.attributes["step_runtime.run.resumed"] for r in runs] == [False, True]
    assert runs[1].attributes["step_runtime.run.position"] == "b"
    assert runs[0].context.trace_id != runs[1].context.trace_id
    second = [s.name for s in exporter.get_finished_spans() if s.parent == runs[1].context]
    assert second == ["step b"]
    assert runs[1].attributes["step_runtime.run.id"] == "r"


def test_tool_calls_and_summary_calls_are_spans_of_their_own():
    tool_turn = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "function": {"name": "rehydrate", "arguments": '{"pointer_id": "p"}'}}
        ],
    }
    answered = {"role": "tool", "tool_call_id": "c1", "content": "the original"}
    events = run_events(
        {"type": "SUMMARY_MODEL_CALL", "model": "small", "tokens_in": 50, "tokens_out": 9},
        {**CALL, "messages": [{"role": "user", "content": "q"}], "reply": ""},
        {"type": "MODEL_TOOL_CALL", "round": 1, "tool": "rehydrate", "call_id": "c1", "tokens": 7},
        {"type": "MODEL_TOOL_CALL", "round": 1, "tool": "nope", "call_id": "c2", "tokens": 0}
        | {"error": "TOOL_UNKNOWN", "message": "no tool 'nope' is offered"},
        {**CALL, "messages": [{"role": "user", "content": "q"}, tool_turn, answered]},
    )
    spans = feed(events, capture=True)
    names = by_name(spans)
    (summary,) = names["chat small"]
    assert summary.attributes["step_runtime.model_call.purpose"] == "summary"
    assert summary.attributes["gen_ai.usage.output_tokens"] == 9
    (ok,) = names["execute_tool rehydrate"]
    assert ok.attributes["gen_ai.operation.name"] == "execute_tool"
    assert ok.attributes["gen_ai.tool.call.id"] == "c1"
    assert ok.status.status_code is StatusCode.UNSET
    (refused,) = names["execute_tool nope"]
    assert refused.attributes["error.type"] == "TOOL_UNKNOWN"
    assert refused.status.status_code is StatusCode.ERROR
    (step,) = names["step ask"]
    assert {s.parent.span_id for s in spans if s is not step and s.name != "run p"} == {
        step.context.span_id
    }
    second = max(names["chat m"], key=lambda s: s.start_time)
    sent = json.loads(second.attributes["gen_ai.input.messages"])
    assert sent[1] == {
        "role": "assistant",
        "parts": [
            {
                "type": "tool_call",
                "id": "c1",
                "name": "rehydrate",
                "arguments": '{"pointer_id": "p"}',
            }
        ],
    }
    assert sent[2] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "c1", "response": "the original"}],
    }


def test_spans_keep_the_events_times_and_a_rejected_prompt_is_a_step_event():
    reject = {"type": "CONTEXT_BUDGET_DECISION", "decision": "reject", "deficit": 12, "budget": 9}
    call = {**CALL, "latency_ms": 500}
    spans = by_name(feed(run_events(reject, call)))
    # run_events' ts: RUN_STARTED 101, the decision 102, the call 103, STEP 104 (1 ms long).
    (run,), (step,), (chat,) = spans["run p"], spans["step ask"], spans["chat m"]
    assert (run.start_time, run.end_time) == (101 * 10**9, 105 * 10**9)
    assert (chat.start_time, chat.end_time) == (102_500_000_000, 103 * 10**9)
    # The step began with the earliest of its events' starts (or its last attempt's).
    assert (step.start_time, step.end_time) == (102 * 10**9, 104 * 10**9)
    (event,) = step.events
    assert event.name == "context_budget_reject"
    assert event.attributes["step_runtime.context.decision"] == "reject"
    assert "step_runtime.context.decision" not in chat.attributes


def test_a_step_that_failed_every_attempt_says_how_many_it_made():
    provider, exporter = memory()
    steps = [
        {
            "id": "a",
            "action": "flaky",
            "ok_at": 9,
            "retry": {"max_attempts": 3},
            "catch": {"ALL": "b"},
        },
        {"id": "b", "action": "noop", "end": True},
    ]
    assert engine(steps, provider).run().status == "completed"
    (a,) = by_name(list(exporter.get_finished_spans()))["step a"]
    assert a.attributes["step_runtime.step.attempt"] == 3
    assert a.attributes["error.type"] == "MODEL_TIMEOUT"
