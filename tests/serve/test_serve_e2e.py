"""Issue 33's "done when": `runtime serve pipelines/code_qa.yaml` on the sample, end to end.

The real command in a subprocess: a streaming chat completion from the openai package
gets the cited answer, the run is in GET /runs and in the inspector, and a server bound
to another address refuses a request without the token (and will not start without one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the serve extra (starlette, uvicorn) is not installed")
pytest.importorskip("openai", reason="the openai package (the dev extra) is not installed")

import httpx
from serve_support import TOKEN, free_port

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "Which stored procedure writes the OrderLines table and who calls it?"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _server(log: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    with log.open("w") as out:  # the child holds its own copy of the file
        return subprocess.Popen(
            [sys.executable, "-m", "runtime", "serve", *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(20)


def _up(proc: subprocess.Popen, url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited {proc.returncode}")
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("the server did not come up")


def test_serve_code_qa_end_to_end(tmp_path):
    import openai

    index, store = str(tmp_path / "index.db"), str(tmp_path / "runs.db")
    sample = str(ROOT / "pipelines" / "sample" / "eshop")
    done = _run("index", sample, "--repository", "eshop", "--index", index)
    assert done.returncode == 0, done.stderr
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    common = ["pipelines/code_qa.yaml", "--store", store, "--index", index, "--model", "extractive"]
    server = _server(tmp_path / "serve.log", *common, "--port", str(port))
    try:
        _up(server, url)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="code_qa", messages=[{"role": "user", "content": QUESTION}], stream=True
            )
        )
        answer = "".join(c.choices[0].delta.content or "" for c in chunks)
        run_id = chunks[0].model_extra["run_id"]
        assert "[eshop::main::procedure::dbo.usp_PlaceOrder]" in answer  # cited
        runs = httpx.get(f"{url}/runs").json()["runs"]
        assert [r["run_id"] for r in runs] == [run_id]
        assert runs[0]["status"] == "completed"
        page = httpx.get(f"{url}/").text
        assert run_id in page
        run_page = httpx.get(f"{url}/inspect/runs/{run_id}").text
        assert 'id="timeline"' in run_page or "timeline" in run_page
        assert "OrderLines" in run_page  # the model call's prompt holds the question
    finally:
        _stop(server)
    # the run is in the same store `runtime runs` reads
    listed = _run("runs", "--store", store, "--json")
    assert listed.returncode == 0 and run_id in listed.stdout

    # bound to another address: no token, no start; with one, a request without it is refused
    refused = _run("serve", *common, "--host", "0.0.0.0", "--port", str(port))
    assert refused.returncode == 2 and "SERVE_TOKEN_MISSING" in refused.stderr
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "guarded.log"
    guarded = _server(
        log, *common, "--host", "0.0.0.0", "--port", str(port), env={"RUNTIME_SERVE_TOKEN": TOKEN}
    )
    try:
        _up(guarded, url)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as err:
            client.chat.completions.create(
                model="code_qa", messages=[{"role": "user", "content": QUESTION}]
            )
        assert err.value.body["code"] == "SERVE_UNAUTHORIZED"
        assert httpx.get(f"{url}/runs").status_code == 401
        good = httpx.get(f"{url}/runs", headers={"Authorization": f"Bearer {TOKEN}"})
        assert good.status_code == 200
    finally:
        _stop(guarded)
    text = log.read_text()
    assert TOKEN not in text and "GET /runs" in text
