"""Runs for the inspector's tests, the server's RunsService over their store, a live server.

`make_runs` runs pipelines/code_qa.yaml on the indexed sample three times: with the offline
extractive model (packs, drops, a cited answer); against a scripted chat server whose
replies are hostile (markup, quotes, terminal escapes) and whose first reply is not JSON,
so the route step is retried; and against a server refusing every request (a failed run). `serve` starts uvicorn on 127.0.0.1 in a thread.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runtime.serve.runs import RunsService

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = str(ROOT / "pipelines" / "code_qa.yaml")
SAMPLE = str(ROOT / "pipelines" / "sample" / "eshop")
QUESTION = "Which stored procedure writes the OrderLines table and who calls it?"
# what a hostile question, document or model reply may hold
HOSTILE = (
    "<script>alert('x')</script> \"quoted\" 'single' <img src=x onerror=alert(2)> "
    "\x1b[31mRED\x1b[0m &amp; </pre></td></table>"
)
HOSTILE_REPLY = f"The answer is {HOSTILE} [eshop::main::procedure::dbo.usp_PlaceOrder]"


class StoreRuns(RunsService):
    """The server's RunsService over a SQLite run store at a path (code_qa served)."""

    def __init__(self, store_path: str, reports: dict[str, Any] | None = None) -> None:
        from runtime.engine.store import SqliteRunStore

        super().__init__(
            SqliteRunStore(store_path, create=False), served=["code_qa"], reports=reports
        )


def make_runs(tmp: Path) -> str:
    """Index the sample and run code_qa three times (`good`, `hostile`, `failed`): the store."""
    from chat_support import Server
    from click.testing import CliRunner

    from runtime.cli import cli

    index, store = str(tmp / "index.db"), str(tmp / "runs.db")
    runner = CliRunner()
    done = runner.invoke(cli, ["index", SAMPLE, "--repository", "eshop", "--index", index])
    assert done.exit_code == 0, done.output
    common = ["exec", PIPELINE, "--store", store, "--index", index]
    done = runner.invoke(
        cli,
        [*common, "--run-id", "good", "--model", "extractive", "--input", f"question={QUESTION}"],
    )
    assert done.exit_code == 0, done.output
    route = json.dumps({"decision": "retrieve", "query": "OrderLines " + HOSTILE})
    check = json.dumps({"decision": "sufficient", "query": "OrderLines"})
    server = Server(["this is not JSON", route, check, HOSTILE_REPLY])
    try:
        done = runner.invoke(
            cli,
            [
                *common,
                "--run-id",
                "hostile",
                "--model",
                f"openai:m@{server.url}",
                "--input",
                f"question=Who writes OrderLines? {HOSTILE}",
            ],
            env={"OPENAI_API_KEY": "sk-test"},
        )
    finally:
        server.close()
    assert done.exit_code == 0, done.output
    # the provider refuses every request: the run fails at its first model call
    server = Server([400] * 4)
    try:
        args = [*common, "--run-id", "failed", "--model", f"openai:m@{server.url}"]
        done = runner.invoke(cli, [*args, "--input", "question=q"], env={"OPENAI_API_KEY": "k"})
    finally:
        server.close()
    assert done.exit_code == 1, done.output
    return store


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(runs: Any) -> Iterator[str]:
    """uvicorn serving the inspector's routes on 127.0.0.1 (a free port); yields its URL."""
    import uvicorn
    from starlette.applications import Starlette

    from runtime.serve.inspector import inspector_routes

    app = Starlette(routes=inspector_routes(runs))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
