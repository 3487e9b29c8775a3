"""POST /v1/chat/completions and GET /v1/models: the OpenAI-compatible face of the server.

`model` names a served pipeline; the last message (a user one) is the question, earlier
user and assistant messages are its `history` input ({role, content} turns). A client's
system messages are not passed on: the pipeline's own prompts are its system messages.
The answer streams as the pipeline's answer step streams (call_model's chunks).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from runtime.serve.errors import ServeError, body
from runtime.serve.running import (
    disconnected,
    finish,
    outcome,
    refuse_subject,
    usage,
    watch_disconnect,
)

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from runtime.serve.server import Server


def _text(content: Any, where: str) -> str:
    """A message's content: a string, or OpenAI's list of {type: text, text} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ServeError("SERVE_BAD_REQUEST", f"{where}: only text parts are served")
            if not isinstance(part.get("text"), str):
                raise ServeError("SERVE_BAD_REQUEST", f"{where}: a text part without text")
            parts.append(part["text"])
        return "".join(parts)
    raise ServeError("SERVE_BAD_REQUEST", f"{where}.content must be a string or text parts")


def read_messages(data: dict[str, Any]) -> tuple[str, list[dict[str, str]]]:
    """The question (last message, a user one) and the history turns before it."""
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ServeError("SERVE_BAD_REQUEST", "`messages` must be a non-empty list")
    turns: list[dict[str, str]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ServeError("SERVE_BAD_REQUEST", f"{where} must be an object")
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant"):
            raise ServeError("SERVE_BAD_REQUEST", f"{where}.role must be system, user or assistant")
        text = _text(message.get("content"), where)
        if role in ("user", "assistant"):
            turns.append({"role": role, "content": text})
    if not turns or turns[-1]["role"] != "user" or messages[-1].get("role") != "user":
        raise ServeError("SERVE_BAD_REQUEST", "the last message must be the user's question")
    return turns[-1]["content"], turns[:-1]


async def model_calls(server: Server, run_id: str) -> list[dict[str, Any]]:
    """A run's MODEL_CALL events, read from the store off the event loop."""
    return await asyncio.to_thread(server.service.trace, run_id, type="MODEL_CALL")


async def models(request: Request) -> Response:
    """GET /v1/models: the served pipelines, as OpenAI's model list."""
    from starlette.responses import JSONResponse

    server: Server = request.app.state.server
    data = [
        {"id": name, "object": "model", "created": 0, "owned_by": "step-runtime"}
        for name in sorted(server.runs.served)
    ]
    return JSONResponse({"object": "list", "data": data})


async def completions(request: Request) -> Response:
    """POST /v1/chat/completions: run the pipeline named by `model` on the conversation."""
    from starlette.responses import JSONResponse, StreamingResponse

    server: Server = request.app.state.server
    data = await server.read_json(request)
    refuse_subject(data, "the body")
    served = server.runs.find(data.get("model"))
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise ServeError("SERVE_BAD_REQUEST", "`stream` must be true or false")
    options = data.get("stream_options")
    if options is not None and (
        not isinstance(options, dict)
        or not isinstance(options.get("include_usage", False), bool)
        or set(options) - {"include_usage"}
    ):
        raise ServeError(
            "SERVE_BAD_REQUEST", "`stream_options` must be {include_usage: true|false}"
        )
    with_usage = bool(options and options.get("include_usage"))
    question, history = read_messages(data)
    if not served.takes("question"):
        raise ServeError(
            "SERVE_BAD_REQUEST", f"pipeline {served.name} has no `question` input to chat with"
        )
    inputs: dict[str, Any] = {"question": question}
    if history:
        if not served.takes("history"):
            raise ServeError(
                "SERVE_BAD_REQUEST",
                f"pipeline {served.name} has no `history` input: send only the question",
            )
        inputs["history"] = history
    subject = server.subject_of(request)
    created = int(time.time())
    if not stream:
        run_id, task = server.runs.start(served, inputs, subject)
        result = await watch_disconnect(request, task, server.runs, run_id)
        answer = finish(result, served)
        payload = {
            "id": f"chatcmpl-{run_id}",
            "object": "chat.completion",
            "created": created,
            "model": served.name,
            "run_id": run_id,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage(await model_calls(server, run_id)),
        }
        return JSONResponse(payload, headers={"X-Run-Id": run_id})

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str] = asyncio.Queue()

    def sink(text: str) -> None:  # called on the run's worker thread
        loop.call_soon_threadsafe(queue.put_nowait, text)

    run_id, task = server.runs.start(served, inputs, subject, sink)

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        event = {
            "id": f"chatcmpl-{run_id}",
            "object": "chat.completion.chunk",
            "created": created,
            "model": served.name,
            "run_id": run_id,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        return f"data: {json.dumps(event)}\n\n"

    async def events() -> AsyncIterator[str]:
        streamed = False
        gone = asyncio.ensure_future(disconnected(request))
        getter: asyncio.Future[str] | None = None
        try:
            yield chunk({"role": "assistant", "content": ""})
            while not task.done() or not queue.empty():
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, task, gone}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    streamed = True
                    yield chunk({"content": getter.result()})
                    continue
                getter.cancel()
                if gone.done() and not task.done():
                    return  # the finally below cancels the run
            try:
                answer = finish(outcome(task, run_id), served)
            except ServeError as err:
                yield f"data: {json.dumps(body(err.code, err.message, run_id=run_id))}\n\n"
                yield "data: [DONE]\n\n"
                return
            if not streamed and answer:  # the answer step did not stream (a non-model answer)
                yield chunk({"content": answer})
            yield chunk({}, "stop")
            if with_usage:  # OpenAI's last chunk: no choices, the usage
                event = json.loads(chunk({})[6:])
                event.update(choices=[], usage=usage(await model_calls(server, run_id)))
                yield f"data: {json.dumps(event)}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            gone.cancel()
            if getter is not None:
                getter.cancel()
            if not task.done():  # the client went away mid-stream: its run is cancelled
                server.runs.cancel(run_id, "the client closed the stream")
                await asyncio.wait({task})

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"X-Run-Id": run_id, "Cache-Control": "no-store"},
    )
