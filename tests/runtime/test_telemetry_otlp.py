"""A real OTLP/HTTP receiver on 127.0.0.1: `runtime exec` of code_qa, enabled by the environment
alone, sends the run's spans with GenAI attributes, decoded here with the official proto package.

No collector installs from the package registries here (the Python "collector" wrappers
download a Go binary), so the receiver is this test's: it answers POST /v1/traces as a
collector does and keeps every decoded ExportTraceServiceRequest.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "Which stored procedure writes the OrderLines table and who calls it?"


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1 (protobuf bodies, gzip or not)."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                owner.paths.append(self.path)
                owner.requests.append(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[tuple[dict[str, Any], str, Any]]:
        """(resource attributes, scope name, span) of every span received."""
        out = []
        for request in self.requests:
            for rs in request.resource_spans:
                resource = {a.key: value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    out += [(resource, ss.scope.name, span) for span in ss.spans]
        return out


def value(v: Any) -> Any:
    """An OTLP AnyValue as Python."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attrs(span: Any) -> dict[str, Any]:
    return {a.key: value(a.value) for a in span.attributes}


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def exec_code_qa(index: Any, folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`runtime exec` of code_qa in a child process, with env added to a clean environment."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("OTEL_") and k not in ("RUNTIME_OTEL", "RUNTIME_STORE", "RUNTIME_INDEX")
    }
    args = ["exec", str(ROOT / "pipelines" / "code_qa.yaml"), "--input", f"question={QUESTION}"]
    args += ["--index", index.path, "--store", str(folder / "r.db"), "--json"]
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_exec_sends_the_runs_spans_to_an_otlp_http_receiver(receiver, sample_index, tmp_path):
    done = exec_code_qa(
        sample_index,
        tmp_path,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
        OTEL_SERVICE_NAME="qa-bot",
    )
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    # The process flushed its spans on exit: they are here once it has ended.
    assert set(receiver.paths) == {"/v1/traces"}
    got = receiver.spans()
    assert {(r["service.name"], scope) for r, scope, _ in got} == {("qa-bot", "step-runtime")}
    spans = {s.name: s for _r, _scope, s in got if not s.name.startswith("step ")}
    run = spans["run code_qa"]
    assert attrs(run)["step_runtime.run.id"] == run_id
    assert run.parent_span_id == b""
    steps = [s for _r, _scope, s in got if s.name.startswith("step ")]
    assert len(steps) == 13  # code_qa's steps, verify_answer's and assemble's included
    assert {s.parent_span_id for s in steps} == {run.span_id}
    assert {s.trace_id for _r, _scope, s in got} == {run.trace_id}
    chats = [s for _r, _scope, s in got if s.name == "chat extractive"]
    assert len(chats) == 3
    step_ids = {s.span_id: attrs(s)["step_runtime.step.id"] for s in steps}
    assert sorted(step_ids[c.parent_span_id] for c in chats) == ["answer", "check", "route"]
    for chat in chats:
        a = attrs(chat)
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "extractive"
        assert a["gen_ai.provider.name"] == "extractive"
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert a["gen_ai.response.finish_reasons"] == ["stop"]
        assert "gen_ai.input.messages" not in a  # content is off by default
        assert a["step_runtime.pack.id"].startswith("pk_")


@pytest.mark.slow
def test_a_receiver_that_is_down_does_not_fail_the_run_and_says_so(sample_index, tmp_path):
    """The spans are lost, not the run: the exporter retries until its timeout at exit and
    writes on stderr that it could not export (about 2 s here, with a 1 s timeout)."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = exec_code_qa(
        sample_index,
        tmp_path,
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
        OTEL_EXPORTER_OTLP_TIMEOUT="1",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert "Failed to export" in done.stderr
