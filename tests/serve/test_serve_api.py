"""`runtime serve` over real HTTP: chat completions (openai package), the runs API, limits."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette", reason="the serve extra (starlette, uvicorn) is not installed")
pytest.importorskip("openai", reason="the openai package (the dev extra) is not installed")

import httpx
from serve_support import build, serving, wait_for

from runtime.serve.limits import Limits


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    app = build(tmp_path_factory.mktemp("serve"), model="extractive")
    with serving(app) as url:
        yield url


def client(url: str, key: str = "unused"):
    import openai

    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


CONVERSATION = [
    {"role": "system", "content": "You are a pirate."},
    {"role": "user", "content": "first question"},
    {"role": "assistant", "content": "first answer"},
    {"role": "user", "content": "where is OrderLines written?"},
]


def test_chat_completion_with_the_openai_package(url):
    done = client(url).chat.completions.with_raw_response.create(
        model="echo", messages=CONVERSATION
    )
    reply = done.parse()
    # the last user message is the question; the two turns before it are its history
    # (the client's system message is not a turn)
    assert (
        reply.choices[0].message.content == "echo: where is OrderLines written? (2 earlier turns)"
    )
    run_id = done.headers["x-run-id"]
    assert reply.model_extra["run_id"] == run_id
    run = httpx.get(f"{url}/runs/{run_id}").json()
    assert run["status"] == "completed"
    assert run["inputs"]["history"] == [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
    ]


def test_streaming_chat_completion_ends_in_done(url):
    stream = client(url).chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "hello"}], stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "echo: hello (0 earlier turns)"
    assert chunks[-1].choices[0].finish_reason == "stop"
    run_id = chunks[0].model_extra["run_id"]
    assert httpx.get(f"{url}/runs/{run_id}").json()["status"] == "completed"
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json={"model": "echo", "stream": True, "messages": [{"role": "user", "content": "x"}]},
    ) as raw:
        assert raw.headers["x-run-id"]
        lines = [ln for ln in raw.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    assert all(ln.startswith("data: ") for ln in lines)


def test_models_lists_the_served_pipelines(url):
    assert [m.id for m in client(url).models.list()] == ["chat", "echo", "slow"]


def test_unknown_model_is_404_with_a_did_you_mean(url):
    import openai

    with pytest.raises(openai.NotFoundError) as err:
        client(url).chat.completions.create(model="ecko", messages=CONVERSATION)
    assert err.value.body["code"] == "SERVE_UNKNOWN_MODEL"
    assert "did you mean 'echo'?" in err.value.body["message"]


def test_runs_api_start_wait_list_get_trace(url):
    started = httpx.post(f"{url}/runs", json={"pipeline": "echo", "inputs": {"question": "a"}})
    assert started.status_code == 202
    run_id = started.json()["run_id"]
    assert started.headers["x-run-id"] == run_id
    wait_for(lambda: httpx.get(f"{url}/runs/{run_id}").json()["status"] == "completed")
    waited = httpx.post(
        f"{url}/runs?wait=true", json={"pipeline": "echo", "inputs": {"question": "b"}}
    )
    assert waited.status_code == 200
    assert waited.json()["status"] == "completed"
    assert waited.json()["outputs"] == {"final_answer": "echo: b (0 earlier turns)"}
    listed = httpx.get(f"{url}/runs", params={"pipeline": "echo"}).json()["runs"]
    ids = [r["run_id"] for r in listed]
    assert run_id in ids and waited.json()["run_id"] in ids
    assert httpx.get(f"{url}/runs", params={"pipeline": "slow"}).json()["runs"] == [] or all(
        r["pipeline"] == "slow" for r in httpx.get(f"{url}/runs?pipeline=slow").json()["runs"]
    )
    failed = httpx.get(f"{url}/runs", params={"status": "failed"}).json()["runs"]
    assert run_id not in [r["run_id"] for r in failed]
    events = httpx.get(f"{url}/runs/{run_id}/trace").json()["events"]
    types = [e["type"] for e in events]
    assert "RUN_STARTED" in types and len(set(types)) > 1
    only = httpx.get(f"{url}/runs/{run_id}/trace", params={"type": "RUN_STARTED"}).json()
    assert [e["type"] for e in only["events"]] == ["RUN_STARTED"]
    steps = httpx.get(f"{url}/runs/{run_id}/trace", params={"step": "a"}).json()["events"]
    assert steps and all(e["step_id"] == "a" for e in steps)
    assert httpx.get(f"{url}/runs/{run_id}/context").json() == {"packs": []}


def test_unknown_run_is_404_coded(url):
    for path in ("/runs/nope", "/runs/nope/trace", "/runs/nope/context"):
        got = httpx.get(url + path)
        assert got.status_code == 404
        assert got.json()["error"]["code"] == "RUN_NOT_FOUND"
    got = httpx.post(f"{url}/runs/nope/cancel")
    assert (got.status_code, got.json()["error"]["code"]) == (404, "RUN_NOT_FOUND")


def test_bad_filters_and_bodies_are_400_coded(url):
    got = httpx.get(f"{url}/runs", params={"status": "bogus"})
    assert (got.status_code, got.json()["error"]["code"]) == (400, "SERVE_BAD_REQUEST")
    got = httpx.post(f"{url}/runs", content=b"{not json")
    assert (got.status_code, got.json()["error"]["code"]) == (400, "SERVE_BAD_REQUEST")
    before = httpx.get(f"{url}/runs").json()["runs"]
    for inputs in ({"question": "q", "nope": 1}, {"question": 3}, {}):
        got = httpx.post(f"{url}/runs", json={"pipeline": "echo", "inputs": inputs})
        # checked before a run exists, as `runtime exec` does
        assert got.status_code == 400 and got.json()["error"]["code"].startswith("INPUT_")
    assert httpx.get(f"{url}/runs").json()["runs"] == before
    got = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "echo", "messages": [{"role": "assistant", "content": "x"}]},
    )
    assert (got.status_code, got.json()["error"]["code"]) == (400, "SERVE_BAD_REQUEST")


def test_a_subject_in_the_body_is_refused(url):
    for body in (
        {"pipeline": "echo", "inputs": {"question": "q", "subject": {"id": "admin"}}},
        {"pipeline": "echo", "subject": {"id": "admin"}, "inputs": {"question": "q"}},
    ):
        got = httpx.post(f"{url}/runs?wait=true", json=body)
        assert (got.status_code, got.json()["error"]["code"]) == (400, "SERVE_SUBJECT_IN_BODY")
    got = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "echo", "subject": {"id": "admin"}, "messages": CONVERSATION},
    )
    assert (got.status_code, got.json()["error"]["code"]) == (400, "SERVE_SUBJECT_IN_BODY")


def test_openapi_document_is_valid_and_names_every_route(url):
    from openapi_spec_validator import validate

    doc = httpx.get(f"{url}/openapi.json").json()
    validate(doc)
    from starlette.routing import Route

    app_routes = {
        (r.path.replace(":path}", "}"), m.lower())
        for r in build_routes()
        if isinstance(r, Route)
        for m in (r.methods or ()) - {"HEAD"}
    }
    documented = {(p, m) for p, ops in doc["paths"].items() for m in ops}
    assert app_routes <= documented, app_routes - documented


def build_routes():
    import tempfile
    from pathlib import Path

    return build(Path(tempfile.mkdtemp())).routes


def test_oversized_body_is_413_coded(tmp_path):
    app = build(tmp_path, limits=Limits(max_body_bytes=2000))
    with serving(app) as url:
        big = {"model": "echo", "messages": [{"role": "user", "content": "x" * 5000}]}
        got = httpx.post(f"{url}/v1/chat/completions", json=big)
        assert (got.status_code, got.json()["error"]["code"]) == (413, "SERVE_BODY_TOO_LARGE")

        def chunked():  # no Content-Length: counted as it arrives
            data = json.dumps(big).encode()
            for i in range(0, len(data), 500):
                yield data[i : i + 500]

        got = httpx.post(f"{url}/runs", content=chunked())
        assert (got.status_code, got.json()["error"]["code"]) == (413, "SERVE_BODY_TOO_LARGE")
        small = {"model": "echo", "messages": [{"role": "user", "content": "x" * 1000}]}
        assert httpx.post(f"{url}/v1/chat/completions", json=small).status_code == 200


def test_over_the_pool_is_429_with_retry_after(tmp_path):
    app = build(tmp_path, limits=Limits(max_runs=2, retry_after=3))
    with serving(app) as url:
        ids = []
        for _ in range(2):
            got = httpx.post(f"{url}/runs", json={"pipeline": "slow", "inputs": {"question": "q"}})
            assert got.status_code == 202
            ids.append(got.json()["run_id"])
        over = httpx.post(f"{url}/runs", json={"pipeline": "echo", "inputs": {"question": "q"}})
        assert over.status_code == 429
        assert over.headers["retry-after"] == "3"
        assert over.json()["error"]["code"] == "SERVE_BUSY"
        chat = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "echo", "messages": [{"role": "user", "content": "q"}]},
        )
        assert chat.status_code == 429
        assert httpx.get(f"{url}/healthz").json()["active_runs"] == 2
        for run_id in ids:  # a cancel frees the slot
            assert httpx.post(f"{url}/runs/{run_id}/cancel").status_code == 202
        for run_id in ids:
            run = wait_for(
                lambda r=run_id: (
                    (x := httpx.get(f"{url}/runs/{r}").json())["status"] == "failed" and x
                )
            )
            assert run["error"]["code"] == "RUN_CANCELLED"
            # the trace says who cancelled it
            assert "cancelled by POST /runs/{id}/cancel" in run["error"]["message"]
        wait_for(lambda: httpx.get(f"{url}/healthz").json()["active_runs"] == 0)
        again = httpx.post(
            f"{url}/runs?wait=true", json={"pipeline": "echo", "inputs": {"question": "q"}}
        )
        assert again.status_code == 200
        done = httpx.post(f"{url}/runs/{ids[0]}/cancel")
        assert (done.status_code, done.json()["error"]["code"]) == (409, "SERVE_NOT_RUNNING")


def test_concurrent_chat_requests_over_the_pool_get_429(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    app = build(tmp_path, limits=Limits(max_runs=2))
    with serving(app) as url:
        body = {"model": "slow", "messages": [{"role": "user", "content": "q"}]}
        with ThreadPoolExecutor(5) as pool:
            got = list(
                pool.map(
                    lambda _: httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60),
                    range(5),
                )
            )
    statuses = sorted(g.status_code for g in got)
    assert statuses.count(200) >= 2 and 429 in statuses
    assert set(statuses) <= {200, 429}
    for g in got:
        if g.status_code == 429:
            assert g.headers["retry-after"] and g.json()["error"]["code"] == "SERVE_BUSY"


def test_a_run_over_the_deadline_is_cancelled_504(tmp_path):
    app = build(tmp_path, limits=Limits(deadline=0.3))
    with serving(app) as url:
        got = httpx.post(
            f"{url}/runs?wait=true", json={"pipeline": "slow", "inputs": {"question": "q"}}
        )
        assert (got.status_code, got.json()["error"]["code"]) == (504, "SERVE_DEADLINE")
        run = httpx.get(f"{url}/runs/{got.headers['x-run-id']}").json()
        assert run["status"] == "failed" and run["error"]["code"] == "RUN_CANCELLED"
        assert "the server's deadline of 0.3 s passed" in run["error"]["message"]
        chat = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "slow", "messages": [{"role": "user", "content": "q"}]},
        )
        assert (chat.status_code, chat.json()["error"]["code"]) == (504, "SERVE_DEADLINE")
        events = httpx.get(f"{url}/runs/{chat.headers['x-run-id']}/trace").json()["events"]
        assert (events[-1]["type"], events[-1]["code"]) == ("RUN_FAILED", "RUN_CANCELLED")


def _cancelled_by_disconnect(url: str, why: str = "the client disconnected") -> None:
    # the connection was closed mid-run: the newest slow run ends cancelled, traced
    run_id = httpx.get(f"{url}/runs", params={"pipeline": "slow"}).json()["runs"][0]["run_id"]
    run = wait_for(
        lambda: (r := httpx.get(f"{url}/runs/{run_id}").json())["status"] != "running" and r
    )
    assert run["status"] == "failed" and run["error"]["code"] == "RUN_CANCELLED"
    assert run["steps"] < 40
    events = httpx.get(f"{url}/runs/{run_id}/trace").json()["events"]
    assert (events[-1]["type"], events[-1]["code"]) == ("RUN_FAILED", "RUN_CANCELLED")
    assert why in events[-1]["message"]


def test_a_streaming_client_that_disconnects_cancels_its_run(tmp_path):
    from serve_support import Nap

    with serving(build(tmp_path)) as url:
        Nap.entered.clear()
        body = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "q"}]}
        with (
            httpx.Client(timeout=60) as c,
            c.stream("POST", f"{url}/v1/chat/completions", json=body) as got,
        ):
            lines = got.iter_lines()  # kept: a dropped iterator closes the connection
            assert next(lines).startswith("data: ")  # the first chunk: the run is going
            assert Nap.entered.wait(10)
        _cancelled_by_disconnect(url, "the client closed the stream")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "slow", "messages": [{"role": "user", "content": "q"}]}),
        ("/runs?wait=true", {"pipeline": "slow", "inputs": {"question": "q"}}),
    ],
)
def test_a_waiting_client_that_disconnects_cancels_its_run(tmp_path, path, body):
    import socket
    from urllib.parse import urlsplit

    from serve_support import Nap

    with serving(build(tmp_path)) as url:
        Nap.entered.clear()
        data = json.dumps(body).encode()
        port = urlsplit(url).port
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n".encode()
                + data
            )
            assert Nap.entered.wait(10)  # the run is going; no response yet
        _cancelled_by_disconnect(url)


def test_the_answer_streams_from_the_model_step(tmp_path, monkeypatch):
    from chat_support import Server

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    upstream = Server(["The answer [eshop::main::table::dbo.OrderLines]", "second reply"])
    try:
        app = build(tmp_path, model=f"openai:m@{upstream.url}")
        with serving(app) as url:
            stream = client(url).chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "who writes it?"}], stream=True
            )
            chunks = list(stream)
            pieces = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
            # the model's streamed delta is passed on once, not again at the end
            assert pieces == ["The answer [eshop::main::table::dbo.OrderLines]"]
            assert upstream.bodies[0]["stream"] is True
            assert "Question: who writes it?" in json.dumps(upstream.bodies[0]["messages"])
            reply = client(url).chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "again"}]
            )
            assert reply.choices[0].message.content == "second reply"
    finally:
        upstream.close()


def test_usage_is_the_runs_model_calls_plain_and_streamed(tmp_path, monkeypatch):
    """`usage` sums the run's MODEL_CALL events (the prompt as the runtime counted it, the
    completion as the server reported it); a stream gives it in a last chunk when asked."""
    from chat_support import Server

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    upstream = Server(["first reply", "second reply"])
    try:
        app = build(tmp_path, model=f"openai:m@{upstream.url}")
        with serving(app) as url:
            reply = client(url).chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "who writes it?"}]
            )
            run_id = reply.model_extra["run_id"]
            calls = [
                e
                for e in httpx.get(f"{url}/runs/{run_id}/trace").json()["events"]
                if e["type"] == "MODEL_CALL"
            ]
            prompt = sum(e["prompt_tokens"] for e in calls)
            completion = sum(e["tokens_out"] for e in calls)
            assert len(calls) == 1 and prompt > 20
            assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (
                prompt,
                completion,
            )
            assert reply.usage.total_tokens == prompt + completion
            stream = client(url).chat.completions.create(
                model="chat",
                messages=[{"role": "user", "content": "who writes it?"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = list(stream)
            streamed = [
                e
                for e in httpx.get(f"{url}/runs/{chunks[-1].model_extra['run_id']}/trace").json()[
                    "events"
                ]
                if e["type"] == "MODEL_CALL"
            ]
            # its own run's calls (the preamble names the run: another id, other tokens)
            assert chunks[-1].choices == []
            assert chunks[-1].usage.prompt_tokens == sum(e["prompt_tokens"] for e in streamed)
            assert chunks[-1].usage.completion_tokens == sum(e["tokens_out"] for e in streamed)
            assert all(c.usage is None for c in chunks[:-1])
            bad = httpx.post(
                f"{url}/v1/chat/completions",
                json={
                    "model": "chat",
                    "stream": True,
                    "stream_options": {"include_usage": "yes"},
                    "messages": [{"role": "user", "content": "q"}],
                },
            )
            assert (bad.status_code, bad.json()["error"]["code"]) == (400, "SERVE_BAD_REQUEST")
    finally:
        upstream.close()
