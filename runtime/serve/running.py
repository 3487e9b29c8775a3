"""What the request handlers share about a run: its outcome, a disconnect, the body's subject."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from runtime.errors import StepRuntimeError
from runtime.serve.errors import ServeError

if TYPE_CHECKING:
    from starlette.requests import Request

    from runtime.serve.served import Runs, Served


def refuse_subject(data: Any, where: str) -> None:
    """A body naming `subject` is refused: the server's caller mapping alone decides it."""
    if isinstance(data, dict) and "subject" in data:
        raise ServeError(
            "SERVE_SUBJECT_IN_BODY",
            f"{where} names a `subject`; a run's subject comes only from the server's mapping "
            "of authenticated callers (runtime serve --subjects)",
        )


async def disconnected(request: Request) -> None:
    """Return once the client has gone (an http.disconnect after the body was read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def watch_disconnect(
    request: Request, task: asyncio.Task[Any], runs: Runs, run_id: str
) -> Any:
    """Wait for the run; a client that disconnects first cancels it (it ends RUN_CANCELLED)."""
    gone = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not task.done():
        runs.cancel(run_id, "the client disconnected before the run ended")
        await asyncio.wait({task})
    return outcome(task, run_id)


def outcome(task: asyncio.Task[Any], run_id: str = "") -> Any:
    """The RunResult of an ended run task; a deadline or a cancel raised as ServeError."""
    headers = {"X-Run-Id": run_id} if run_id else {}
    if task.cancelled():
        raise ServeError("RUN_CANCELLED", f"run {run_id} was cancelled", headers=headers)
    exc = task.exception()
    if isinstance(exc, ServeError):
        raise exc
    if isinstance(exc, StepRuntimeError):
        raise ServeError(exc.code, exc.message, headers=headers)
    if exc is not None:
        raise exc
    return task.result()


def finish(result: Any, served: Served) -> str:
    """The answer of a completed run; a failed run's coded error as ServeError."""
    if result.status != "completed":
        error = result.error
        code = error.code if error is not None else "RUN_CANCELLED"
        message = error.message if error is not None else f"the run ended {result.status}"
        raise ServeError(
            code, f"run {result.run_id}: {message}", headers={"X-Run-Id": result.run_id}
        )
    answer = result.output.get(served.answer_key())
    return answer if isinstance(answer, str) else "" if answer is None else str(answer)


def usage(events: list[dict[str, Any]]) -> dict[str, int]:
    """OpenAI's `usage` of a run from its trace: over its model calls, the prompt tokens as
    the runtime counted them with each model's tokenizer (every tool round's request), the
    completion tokens as the server reported them."""
    prompt = completion = 0
    for event in events:
        if event.get("type") != "MODEL_CALL":
            continue
        rounds = event.get("round_prompt_tokens")
        if isinstance(rounds, list) and rounds:
            prompt += sum(int(n) for n in rounds if isinstance(n, int))
        elif isinstance(event.get("prompt_tokens"), int):
            prompt += event["prompt_tokens"]
        if isinstance(event.get("tokens_out"), int):
            completion += event["tokens_out"]
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
