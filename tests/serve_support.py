"""A real `runtime serve` app on uvicorn (127.0.0.1, a free port) over test pipelines.

Pipelines: `echo` answers "echo: QUESTION (N earlier turns)" in one step; `slow` naps in
40 steps of 0.1 s (a run the tests cancel, time out or pile up); `chat` answers with a
call_model step against a scripted OpenAI-compatible server (tests/chat_support.py) that
streams its reply in pieces.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runtime.contract.action import Action

TOKEN = "tok-3f9a1c7e5b2d4a6c8e0f"  # the tests look for it in logs and stores


class Answer(Action):
    """final_answer = "echo: QUESTION (N earlier turns)"."""

    name = "echo_answer"
    runnable = True

    def run(self, ctx: Any) -> None:
        history = ctx.get("history") or []
        ctx.set("final_answer", f"echo: {ctx.get('question')} ({len(history)} earlier turns)")


class Nap(Action):
    """Sleeps 0.1 s (a slow run is many of these: it can be cancelled between them)."""

    name = "nap"
    runnable = True
    entered = threading.Event()

    def run(self, ctx: Any) -> None:
        Nap.entered.set()
        time.sleep(0.1)


def registry() -> Any:
    """The default actions and the test ones."""
    from runtime.contract.registry import Registry, default_registry

    reg = Registry(default_registry().infos())
    reg.register(Answer)
    reg.register(Nap)
    return reg


def write_pipelines(tmp: Path) -> list[str]:
    """echo.yaml, slow.yaml and chat.yaml in tmp."""
    common = (
        "inputs:\n"
        "  question: {type: string}\n"
        "  history: {type: array, default: []}\n"
        "outputs: [final_answer]\n"
    )
    (tmp / "echo.yaml").write_text(
        "name: echo\n" + common + "settings: {entry_step_id: a}\n"
        "steps:\n  - {id: a, action: echo_answer, end: true}\n"
    )
    naps = "".join(f"  - {{id: n{i}, action: nap, next: n{i + 1}}}\n" for i in range(40))
    (tmp / "slow.yaml").write_text(
        "name: slow\n" + common + "settings: {entry_step_id: n0, max_steps: 100}\n"
        "steps:\n" + naps + "  - {id: n40, action: echo_answer, end: true}\n"
    )
    (tmp / "chat.yaml").write_text(
        "name: chat\n" + common + "settings: {entry_step_id: answer}\n"
        "steps:\n"
        "  - id: answer\n"
        "    action: call_model\n"
        "    prompt_key: answer\n"
        "    user_parts:\n"
        "      question: {source: question, template: 'Question: {}'}\n"
        "    next: finish\n"
        "  - {id: finish, action: finalize, source: last_model_response}\n"
    )
    (tmp / "prompts").mkdir(exist_ok=True)
    (tmp / "prompts" / "answer.md").write_text("Answer the question.\n")
    return [str(tmp / n) for n in ("echo.yaml", "slow.yaml", "chat.yaml")]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build(
    tmp: Path,
    *,
    model: str | None = None,
    auth: Any = None,
    limits: Any = None,
) -> Any:
    """The app over the test pipelines and a run store in tmp."""
    from runtime.engine.store import SqliteRunStore
    from runtime.serve.app import build_server, create_app
    from runtime.serve.served import load_served

    store = SqliteRunStore(str(tmp / "runs.db"))
    served = load_served(
        write_pipelines(tmp), store=store, index=None, model=model, registry=registry()
    )
    return create_app(build_server(served, store, auth=auth, limits=limits))


@contextlib.contextmanager
def serving(app: Any, host: str = "127.0.0.1") -> Iterator[str]:
    """uvicorn serving app on host (a free port); yields the URL through 127.0.0.1."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level="info", lifespan="off")
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


def wait_for(check: Any, seconds: float = 20.0) -> Any:
    """Poll check() until it returns something true (a bound, not a timing assert)."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)
