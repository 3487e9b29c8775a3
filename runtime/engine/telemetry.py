"""OpenTelemetry spans from a run's trace events (the optional `otel` extra; docs/packs.md).

Off unless enabled, and nothing of opentelemetry is imported until it is:

- by the embedding API: `Runner(pipeline, tracer_provider=provider)` (any OpenTelemetry
  tracer provider; only `opentelemetry-api` is needed);
- by the environment: `RUNTIME_OTEL=1`, or `OTEL_EXPORTER_OTLP_ENDPOINT` (or
  `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set. The spans then go through one process-wide
  SDK provider to the OTLP/HTTP exporter, which reads the standard `OTEL_EXPORTER_OTLP_*`
  variables; `OTEL_SERVICE_NAME` names the service (default `step-runtime`).
  `RUNTIME_OTEL=0` or `OTEL_SDK_DISABLED=true` keeps it off whatever else is set.

Enabled without the extra installed is OTEL_NOT_INSTALLED, a bad value of one of these
variables OTEL_SETTING_INVALID: usage errors raised when the engine is built, before any run.

`SpanWriter` is a trace listener, one per run: it turns the run's events into spans after
the fact, with the events' own timestamps, so no action knows about it:

    run {pipeline}            RUN_STARTED or RUN_RESUMED .. RUN_COMPLETED or RUN_FAILED
      step {step id}          its STEP event, or the CATCH or RUN_FAILED that ended it
        chat {model}          MODEL_CALL and SUMMARY_MODEL_CALL (GenAI conventions)
        execute_tool {tool}   MODEL_TOOL_CALL

A call's CONTEXT_BUDGET_DECISION and CONTEXT_PACK events become attributes of its chat span
(the pack's id, each section's tokens, the ids of the decisions that admitted its items, read
from the stored pack when the event does not list them); RETRY and PACK_* warnings become
span events of the step.

Prompt and reply text go on a chat span only when
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`; every string attribute passes
the model layer's secret scrubber first (runtime/models/guard.py), content or not.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from runtime.errors import UsageError

ENABLE_ENV = "RUNTIME_OTEL"
ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOL_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
SCOPE = "step-runtime"
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"0", "false", "no", "off"})
# The capture values of OpenTelemetry's GenAI instrumentations: the span ones turn it on.
_CAPTURE_ON = _ON | {"span_only", "span_and_event"}
_CAPTURE_OFF = _OFF | {"no_content", "event_only"}
_INSTALL = "pip install 'step-runtime[otel]'"
# A run that fails with these never started the step it names: no step span for it.
_BEFORE_STEP = frozenset({"RUN_CANCELLED", "MAX_STEPS_EXCEEDED"})
_MODEL_CALLS = frozenset({"MODEL_CALL", "SUMMARY_MODEL_CALL"})
_PACK_WARNINGS = frozenset({"PACK_BUDGET_OVER", "PACK_COVERAGE_LOW"})
_ENVELOPE = frozenset({"run_id", "seq", "type", "step_id", "ts", "attempt"})


def _flag(environ: Mapping[str, str], name: str, on: frozenset[str], off: frozenset[str]) -> bool:
    """True or False from an environment variable, OTEL_SETTING_INVALID for any other value."""
    value = environ.get(name, "").strip().lower()
    if value in on:
        return True
    if value in off or not value:
        return False
    raise UsageError(
        f"${name} is {environ[name]!r}: expected one of {', '.join(sorted(on | off))}",
        code="OTEL_SETTING_INVALID",
    )


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for spans (RUNTIME_OTEL, an OTLP endpoint)."""
    env = os.environ if environ is None else environ
    if _flag(env, "OTEL_SDK_DISABLED", _ON, _OFF):
        return False
    if env.get(ENABLE_ENV, "").strip():
        return _flag(env, ENABLE_ENV, _ON, _OFF)
    return any(env.get(name, "").strip() for name in ENDPOINT_ENVS)


def capture_content(environ: Mapping[str, str] | None = None) -> bool:
    """Whether prompt and reply text go on chat spans (off unless the variable says so)."""
    env = os.environ if environ is None else environ
    return _flag(env, CAPTURE_ENV, _CAPTURE_ON, _CAPTURE_OFF)


def _not_installed(what: str, exc: ImportError) -> UsageError:
    return UsageError(
        f"OpenTelemetry is enabled ({what}) but {exc.name or 'opentelemetry'} is not "
        f"installed: {_INSTALL}",
        code="OTEL_NOT_INSTALLED",
        hint=f"{_INSTALL}, or unset {ENABLE_ENV} and the OTEL_EXPORTER_OTLP_*ENDPOINT "
        f"variables (or set {ENABLE_ENV}=0).",
    )


_shared: Any = None
_shared_lock = threading.Lock()


def _environment_provider(environ: Mapping[str, str]) -> Any:
    """The process-wide SDK provider exporting over OTLP/HTTP, built on first use."""
    global _shared
    for name in PROTOCOL_ENVS:
        protocol = environ.get(name, "").strip()
        if protocol and protocol != "http/protobuf":
            raise UsageError(
                f"${name} is {protocol!r}: step-runtime exports over OTLP/HTTP only "
                "(http/protobuf)",
                code="OTEL_SETTING_INVALID",
            )
    with _shared_lock:
        if _shared is not None:
            return _shared
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise _not_installed("by the environment", exc) from exc
        named = "OTEL_SERVICE_NAME" in environ or "service.name=" in environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        )
        # The provider flushes at interpreter exit (its atexit hook): a CLI run's spans leave.
        provider = TracerProvider(
            resource=Resource.create({} if named else {"service.name": SCOPE})
        )
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _shared = provider
        return provider


class Telemetry:
    """An engine's span source: a tracer, and a SpanWriter for each run."""

    def __init__(self, provider: Any, capture: bool) -> None:
        self.tracer = provider.get_tracer(SCOPE)
        self.capture = capture

    def writer(self, pipeline: Any, services: Any = None) -> SpanWriter:
        """A listener turning one run's events into spans (services: where its packs are)."""
        from runtime.models.guard import scrubber_for

        scrub = scrubber_for(pipeline.settings)
        return SpanWriter(self.tracer, pipeline, scrub, self.capture, services)


def configure(
    tracer_provider: Any = None, environ: Mapping[str, str] | None = None
) -> Telemetry | None:
    """The engine's Telemetry: from the given provider, else from the environment, else None."""
    env = os.environ if environ is None else environ
    if tracer_provider is None and not enabled(env):
        return None
    capture = capture_content(env)
    if tracer_provider is None:
        tracer_provider = _environment_provider(env)
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise _not_installed("a tracer provider was given", exc) from exc
    return Telemetry(tracer_provider, capture)


# --- events to spans -------------------------------------------------------------------


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _start(event: Mapping[str, Any]) -> float:
    """When what an event records began: its timestamp less its latency, if it has one."""
    latency = event.get("latency_ms")
    return event["ts"] - (latency / 1000 if isinstance(latency, int | float) else 0)


class SpanWriter:
    """A trace listener turning one run's events into a tree of spans (module docstring)."""

    def __init__(
        self, tracer: Any, pipeline: Any, scrub: Any, capture: bool, services: Any = None
    ) -> None:
        from opentelemetry import trace

        self._trace = trace
        self._tracer = tracer
        self._pipeline = str(pipeline.name)
        self._steps = {s.id: s for s in pipeline.steps}
        self._scrub = scrub
        self._capture = capture
        self._services = services
        self._run: Any = None  # the run span
        self._run_ctx: Any = None
        self._run_id = ""
        self._choices: Mapping[str, Any] = {}
        self._events: list[dict[str, Any]] = []  # the step under way's events
        self._mark = 0.0  # when the last step ended (a step after it began no earlier)

    # The listener: events arrive in order, one run on one thread.
    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "STEP":
            self._step(event, event["ts"] - event.get("duration_ms", 0) / 1000)
        elif kind in ("RUN_STARTED", "RUN_RESUMED"):
            self._open(event)
        elif kind == "CATCH":
            self._step(event, None, code=event.get("code"), message=event.get("message"))
        elif kind in ("RUN_COMPLETED", "RUN_FAILED"):
            self._close(event)
        elif event.get("step_id") is not None:
            self._events.append(event)
        elif self._run is not None:  # a run-level event (INBOX_LEFTOVER): a span event
            self._run.add_event(kind.lower(), {}, _ns(event["ts"]))

    def _attrs(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Valid attribute values only (no None, no empty list), strings scrubbed of secrets."""
        out: dict[str, Any] = {}
        for key, value in values.items():
            if value is None or value == []:
                continue
            if isinstance(value, str):
                value = self._scrub.text(value)
            elif isinstance(value, list | tuple):
                value = [self._scrub.text(str(v)) if isinstance(v, str) else v for v in value]
            out[key] = value
        return out

    def _error(self, span: Any, code: Any, message: Any) -> None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attributes(self._attrs({"error.type": code, "step_runtime.error.code": code}))
        text = message if isinstance(message, str) else str(code)
        span.set_status(Status(StatusCode.ERROR, self._scrub.text(text)[:500]))

    def _open(self, event: Mapping[str, Any]) -> None:
        self._run_id = str(event["run_id"])
        choices = event.get("choices")
        self._choices = choices if isinstance(choices, Mapping) else {}
        resumed = event["type"] == "RUN_RESUMED"
        self._run = self._tracer.start_span(
            f"run {self._pipeline}",
            attributes=self._attrs(
                {
                    "step_runtime.run.id": self._run_id,
                    "step_runtime.pipeline": self._pipeline,
                    "step_runtime.run.resumed": resumed,
                    "step_runtime.run.position": event.get("position") if resumed else None,
                }
            ),
            start_time=_ns(event["ts"]),
        )
        self._run_ctx = self._trace.set_span_in_context(self._run)
        self._mark = event["ts"]

    def _close(self, event: Mapping[str, Any]) -> None:
        if self._run is None:
            return
        failed = event["type"] == "RUN_FAILED"
        code = event.get("code")
        if failed and event.get("step_id") is not None and code not in _BEFORE_STEP:
            self._step(event, None, code=code, message=event.get("message"))
        run = self._run
        run.set_attributes(
            self._attrs(
                {
                    "step_runtime.run.status": "failed" if failed else "completed",
                    "step_runtime.run.steps": event.get("steps"),
                    "step_runtime.step.id": event.get("step_id") if failed else None,
                }
            )
        )
        if failed:
            self._error(run, code, event.get("message"))
        run.end(end_time=_ns(event["ts"]))
        self._run = self._run_ctx = None

    def _step(
        self,
        event: Mapping[str, Any],
        began: float | None,
        *,
        code: Any = None,
        message: Any = None,
    ) -> None:
        """The step span of event's step, with a child span for each model and tool call."""
        if self._run is None:
            return
        events, self._events = self._events, []
        step_id = event["step_id"]
        step = self._steps.get(step_id)
        starts = [_start(e) for e in events if e.get("step_id") == step_id]
        if began is not None:
            starts.append(began)
        start = min(starts, default=self._mark)
        retries = sum(1 for e in events if e["type"] == "RETRY")
        attempt = event.get("attempt") or retries + 1
        span = self._tracer.start_span(
            f"step {step_id}",
            context=self._run_ctx,
            attributes=self._attrs(
                {
                    "step_runtime.run.id": self._run_id,
                    "step_runtime.pipeline": self._pipeline,
                    "step_runtime.step.id": step_id,
                    "step_runtime.step.action": event.get("action")
                    or (step.action if step is not None else None),
                    "step_runtime.step.outcome": event.get("outcome")
                    or ("caught" if event["type"] == "CATCH" else "failed" if code else None),
                    "step_runtime.step.next": event.get("next"),
                    "step_runtime.step.attempt": attempt,
                }
            ),
            start_time=_ns(start),
        )
        # The children's context, made only when there are children (most steps have none).
        ctx = self._trace.set_span_in_context(span) if events else None
        decision: Mapping[str, Any] | None = None
        pack: dict[str, Any] = {}
        for e in events:
            kind = e["type"]
            if kind == "CONTEXT_PACK":
                pack = self._pack(e)
            elif kind in _PACK_WARNINGS:
                span.add_event(kind.lower(), self._numbers(e), _ns(e["ts"]))
            elif kind == "CONTEXT_BUDGET_DECISION":
                decision = e
                if e.get("decision") == "reject":
                    span.add_event("context_budget_reject", self._decision(e), _ns(e["ts"]))
                    decision = None
            elif kind in _MODEL_CALLS:
                self._chat(ctx, e, step, decision, pack)
                decision, pack = None, {}  # they hold for the call's first round
            elif kind == "MODEL_TOOL_CALL":
                self._tool(ctx, e)
            elif kind == "RETRY":
                attrs = {"error.type": e.get("code"), "step_runtime.step.attempt": e.get("attempt")}
                span.add_event("retry", self._attrs(attrs), _ns(e["ts"]))
        if code is not None:
            self._error(span, code, message)
        span.end(end_time=_ns(event["ts"]))
        self._mark = event["ts"]

    def _decision(self, e: Mapping[str, Any]) -> dict[str, Any]:
        """The context budget decision's numbers, as attributes."""
        return self._attrs(
            {
                "step_runtime.context.decision": e.get("decision"),
                "step_runtime.context.reason": e.get("reason"),
                "step_runtime.context.prompt_tokens": e.get("prompt_tokens"),
                "step_runtime.context.original_tokens": e.get("original_tokens"),
                "step_runtime.context.budget": e.get("budget"),
                "step_runtime.context.reserve": e.get("reserve"),
                "step_runtime.context.summarised": [str(p) for p in e.get("summarised") or []],
            }
        )

    def _model(self, step: Any, decision: Mapping[str, Any] | None) -> tuple[str | None, Any]:
        """(the model id asked for, its recorded choices) of a model call in step."""
        name = decision.get("model") if decision else None
        if name is None and step is not None:
            name = step.config.get("model")
        if name is None:
            name = self._choices.get("main")
        models = self._choices.get("models")
        entry = models.get(name) if isinstance(models, Mapping) and name else None
        if isinstance(entry, Mapping):
            return entry.get("model") or name, entry
        return name, {}

    def _numbers(self, e: Mapping[str, Any]) -> dict[str, Any]:
        """An event's scalar fields (ids, counts, verdicts) as span event attributes."""
        return self._attrs(
            {
                f"step_runtime.{k}": v
                for k, v in e.items()
                if k not in _ENVELOPE and isinstance(v, str | int | float | bool)
            }
        )

    def _pack(self, e: Mapping[str, Any]) -> dict[str, Any]:
        """The context pack's attributes: id, section tokens, the policy decisions' ids."""
        attrs: dict[str, Any] = {
            "step_runtime.pack.id": e.get("pack_id"),
            "step_runtime.pack.seq": e.get("pack_seq"),
            "step_runtime.pack.prompt_hash": e.get("prompt_hash"),
            "step_runtime.pack.prompt_tokens": e.get("prompt_tokens"),
            "step_runtime.pack.items": e.get("items"),
            "step_runtime.pack.drops": e.get("drops"),
            "step_runtime.pack.coverage": e.get("coverage"),
        }
        sections = e.get("sections")
        if isinstance(sections, Mapping):
            for name, tokens in sections.items():
                attrs[f"step_runtime.pack.section.{name}.tokens"] = tokens
        decisions = e.get("decisions")
        if not isinstance(decisions, list):
            decisions = self._pack_decisions(e)
        attrs["step_runtime.pack.decision_ids"] = [str(d) for d in decisions]
        return self._attrs(attrs)

    def _pack_decisions(self, e: Mapping[str, Any]) -> list[str]:
        """The ids of the decisions that admitted the items of the stored pack e names."""
        store = getattr(self._services, "packs", None) if self._services is not None else None
        find = getattr(store, "packs", None)
        if not callable(find):
            return []
        for pack in find(self._run_id, e.get("step_id")):
            if pack.get("pack_id") != e.get("pack_id"):
                continue
            found = {
                item["decision"]
                for section in pack.get("sections") or ()
                for item in section.get("items") or ()
                if isinstance(item, Mapping) and isinstance(item.get("decision"), str)
            }
            return sorted(found)
        return []

    def _chat(
        self, ctx: Any, e: Mapping[str, Any], step: Any, decision: Any, pack: Mapping[str, Any]
    ) -> None:
        from opentelemetry.trace import SpanKind

        asked, entry = self._model(step, decision)
        if e["type"] == "SUMMARY_MODEL_CALL" or asked is None:  # it names its own model
            asked = e.get("model") or asked
        answered = e.get("model") or asked
        provider = e.get("provider") or entry.get("provider")
        finish = e.get("finish_reason")
        host, port = _server(entry.get("base_url"))
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,  # the older name of gen_ai.provider.name
            "gen_ai.request.model": asked,
            "gen_ai.response.model": answered,
            "gen_ai.usage.input_tokens": e.get("tokens_in"),
            "gen_ai.usage.output_tokens": e.get("tokens_out"),
            "gen_ai.usage.cache_read.input_tokens": e.get("cached_tokens"),
            "gen_ai.response.finish_reasons": [str(finish)] if finish else None,
            "gen_ai.output.type": "json" if e.get("response_format") else None,
            "server.address": host,
            "server.port": port,
            "step_runtime.run.id": self._run_id,
            "step_runtime.step.id": e.get("step_id"),
            "step_runtime.step.attempt": e.get("attempt"),
            "step_runtime.model_call.purpose": "summary"
            if e["type"] == "SUMMARY_MODEL_CALL"
            else None,
            "step_runtime.model_call.prompt_tokens": e.get("prompt_tokens"),
            "step_runtime.model_call.usage_from": e.get("usage_from"),
            "step_runtime.model_call.fidelity": e.get("fidelity"),
        }
        attrs = self._attrs(attrs)
        if decision is not None:
            attrs.update(self._decision(decision))
        attrs.update(pack)
        if self._capture:
            attrs.update(self._content(e))
        span = self._tracer.start_span(
            f"chat {asked}" if asked else "chat",
            context=ctx,
            kind=SpanKind.CLIENT,
            attributes=attrs,
            start_time=_ns(_start(e)),
        )
        span.end(end_time=_ns(e["ts"]))

    def _content(self, e: Mapping[str, Any]) -> dict[str, Any]:
        """gen_ai.input.messages and gen_ai.output.messages, scrubbed (capture is on)."""
        out: dict[str, Any] = {}
        messages = e.get("messages")
        if isinstance(messages, list):
            out["gen_ai.input.messages"] = _json([_message(m) for m in messages])
        reply = e.get("reply")
        if isinstance(reply, str):
            answer: dict[str, Any] = {
                "role": "assistant",
                "parts": [{"type": "text", "content": reply}],
            }
            if e.get("finish_reason"):
                answer["finish_reason"] = e["finish_reason"]
            out["gen_ai.output.messages"] = _json([answer])
        return self._attrs(out)

    def _tool(self, ctx: Any, e: Mapping[str, Any]) -> None:
        from opentelemetry.trace import SpanKind

        tool = e.get("tool")
        span = self._tracer.start_span(
            f"execute_tool {tool}",
            context=ctx,
            kind=SpanKind.INTERNAL,
            attributes=self._attrs(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.id": e.get("call_id"),
                    "step_runtime.run.id": self._run_id,
                    "step_runtime.step.id": e.get("step_id"),
                    "step_runtime.tool.round": e.get("round"),
                    "step_runtime.tool.tokens": e.get("tokens"),
                }
            ),
            start_time=_ns(e["ts"]),
        )
        if e.get("error"):
            self._error(span, e["error"], e.get("message"))
        span.end(end_time=_ns(e["ts"]))


def _server(url: Any) -> tuple[str | None, int | None]:
    """(host, port) of a model's base URL, or (None, None)."""
    if not isinstance(url, str) or not url:
        return None, None
    try:
        parts = urlsplit(url)
        return parts.hostname, parts.port
    except ValueError:  # a malformed port: the host alone
        return urlsplit(url).hostname, None


def _message(m: Any) -> dict[str, Any]:
    """One chat message in the GenAI conventions' form: role and typed parts."""
    if not isinstance(m, Mapping):
        return {"role": "user", "parts": [{"type": "text", "content": str(m)}]}
    parts: list[dict[str, Any]] = []
    content = m.get("content")
    role = m.get("role") or "user"
    if role == "tool":
        parts.append(
            {"type": "tool_call_response", "id": m.get("tool_call_id"), "response": content}
        )
    elif content:
        parts.append({"type": "text", "content": content})
    for call in m.get("tool_calls") or []:
        if isinstance(call, Mapping):
            function = call.get("function")
            fn = function if isinstance(function, Mapping) else call
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": fn.get("name"),
                    "arguments": fn.get("arguments"),
                }
            )
    return {"role": role, "parts": parts}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
