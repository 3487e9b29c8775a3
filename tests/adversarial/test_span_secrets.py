"""No configured secret reaches an OpenTelemetry span, with prompt and reply capture on.

A question quoting the key (literally and in the escapes a reader turns back into it), a
reply echoing it, and an error message holding another model's key: every attribute, span
event and status of every span is searched for any form of either key.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import runtime
from runtime.contract.action import Action, Outcome
from runtime.contract.registry import Registry
from runtime.engine import Engine, telemetry
from runtime.engine.services import Services
from runtime.errors import RunError
from runtime.format.pipeline import Pipeline
from runtime.net.secrets import REDACTED, Scrubber

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-live-span-3c9a7f21d0"
OTHER = "sk-other-span-8e1b44c7a2"  # the key of another model in settings.models
FORMS = (
    KEY,
    json.dumps(KEY).replace("s", "\\u0073")[1:-1],
    urllib.parse.quote(KEY, safe="").replace("-", "%2D"),
    base64.b64encode(KEY.encode()).decode(),
)


@pytest.fixture
def spans(monkeypatch):
    for name in ("RUNTIME_OTEL", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(telemetry.CAPTURE_ENV, "true")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OTHER_MODEL_KEY", OTHER)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def strings(span: Any) -> list[str]:
    """Every string a span carries: attributes, event names and attributes, status."""
    out = [span.name, span.status.description or ""]
    blobs = [dict(span.attributes)] + [dict(e.attributes) | {"": e.name} for e in span.events]
    for blob in blobs:
        for v in blob.values():
            out += [x for x in (v if isinstance(v, tuple | list) else [v]) if isinstance(x, str)]
    return out


def leaks(exported: Any) -> list[str]:
    found = Scrubber([KEY, OTHER]).found
    return [f"{s.name}: {text[:120]}" for s in exported for text in strings(s) if found(text)]


def test_a_key_in_the_prompt_and_reply_reaches_no_span(spans, sample_index):
    provider, exporter = spans
    question = "Who writes OrderLines? My key is " + " and ".join(FORMS)
    pipeline = runtime.load(str(ROOT / "pipelines" / "code_qa.yaml"))
    services = Services(
        settings=pipeline.settings, node_store=sample_index, base_dir=str(pipeline.base_dir)
    )
    runner = runtime.Runner(pipeline, services=services, tracer_provider=provider)
    result = runner.run({"question": question})
    assert result.status == "completed", result.error
    exported = exporter.get_finished_spans()
    chats = [s for s in exported if s.name.startswith("chat ")]
    assert chats and all("gen_ai.input.messages" in s.attributes for s in chats)
    assert leaks(exported) == []
    # The prompt is there, the key replaced: capture is on and nothing was dropped whole.
    sent = [s.attributes["gen_ai.input.messages"] for s in chats]
    assert all("OrderLines" in m and REDACTED in m for m in sent)


class Leaky(Action):
    """Fails with a message quoting the key in settings.models."""

    name = "leaky"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        raise RunError(f"upstream said: bad key {OTHER} / {FORMS[3]}", code="MODEL_AUTH_ERROR")


def test_a_key_in_an_error_reaches_no_span(spans):
    provider, exporter = spans
    pipeline = Pipeline.from_dict(
        {
            "name": "p",
            "settings": {
                "entry_step_id": "a",
                "models": {
                    "m": {"provider": "openai", "model": "x", "api_key_env": "OTHER_MODEL_KEY"}
                },
            },
            "steps": [
                {"id": "a", "action": "leaky", "catch": {"ALL": "b"}},
                {"id": "b", "action": "leaky", "end": True},
            ],
        }
    )
    engine = Engine(pipeline, registry=Registry.from_classes(Leaky), tracer_provider=provider)
    assert engine.run().status == "failed"
    exported = exporter.get_finished_spans()
    assert {s.name for s in exported} == {"run p", "step a", "step b"}
    assert [
        (s.name, s.status.description)
        for s in exported
        if REDACTED not in (s.status.description or "")
    ] == []
    assert leaks(exported) == []
