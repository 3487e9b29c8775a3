"""The runs API: POST /runs, GET /runs, GET /runs/{id}, its trace and context, cancel, healthz."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runtime.serve.errors import ServeError, body, status_of
from runtime.serve.running import refuse_subject, watch_disconnect

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from runtime.serve.server import Server

STATUSES = ("running", "interrupted", "completed", "failed")  # a cancelled run: failed
MAX_LIST = 1000


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse(data, status, headers=headers)


def _server(request: Request) -> Server:
    server: Server = request.app.state.server
    return server


async def healthz(request: Request) -> Response:
    """GET /healthz: the server is up; how many runs it has going and may have."""
    runs = _server(request).runs
    return _json({"status": "ok", "active_runs": runs.pool.active, "max_runs": runs.pool.size})


async def create_run(request: Request) -> Response:
    """POST /runs {pipeline, inputs}: start a run (202 + run id); ?wait=true waits for it."""
    server = _server(request)
    data = await server.read_json(request)
    refuse_subject(data, "the body")
    served = server.runs.find(data.get("pipeline"))
    inputs = data.get("inputs", {})
    if not isinstance(inputs, dict):
        raise ServeError("SERVE_BAD_REQUEST", "`inputs` must be an object")
    refuse_subject(inputs, "`inputs`")
    wait = request.query_params.get("wait", "false")
    if wait not in ("true", "false"):
        raise ServeError("SERVE_BAD_REQUEST", "`wait` must be true or false")
    run_id, task = server.runs.start(served, inputs, server.subject_of(request))
    headers = {"X-Run-Id": run_id}
    if wait == "false":
        task.add_done_callback(_retrieve)
        return _json({"run_id": run_id, "status": "running"}, 202, headers)
    result = await watch_disconnect(request, task, server.runs, run_id)  # coded if it failed
    run = server.service.get_run(run_id)
    status = 200 if result.status == "completed" else 500 if result.error is None else None
    if status is None:
        status = status_of(result.error.code)
    return _json({**run, "outputs": result.output}, status, headers)


def _retrieve(task: Any) -> None:
    """A background run's outcome is in the store; read its exception so none is 'lost'."""
    if not task.cancelled():
        task.exception()


def _int(request: Request, name: str, default: int, top: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    if not text.isdigit() or not 1 <= int(text) <= top:
        raise ServeError("SERVE_BAD_REQUEST", f"`{name}` must be a whole number 1..{top}")
    return int(text)


async def list_runs(request: Request) -> Response:
    """GET /runs?pipeline=&status=&limit=: recent runs, newest first."""
    service = _server(request).service
    status = request.query_params.get("status") or None
    if status is not None and status not in STATUSES:
        raise ServeError("SERVE_BAD_REQUEST", f"`status` must be one of {', '.join(STATUSES)}")
    pipeline = request.query_params.get("pipeline") or None
    limit = _int(request, "limit", 50, MAX_LIST)
    return _json({"runs": service.list_runs(pipeline=pipeline, status=status, limit=limit)})


async def get_run(request: Request) -> Response:
    """GET /runs/{id}: status, inputs, output and error."""
    return _json(_server(request).service.get_run(request.path_params["run_id"]))


async def run_trace(request: Request) -> Response:
    """GET /runs/{id}/trace?type=&step=: the run's events."""
    q = request.query_params
    events = _server(request).service.trace(
        request.path_params["run_id"], type=q.get("type") or None, step=q.get("step") or None
    )
    return _json({"events": events})


async def run_context(request: Request) -> Response:
    """GET /runs/{id}/context: the context packs (what each model call saw, what was dropped)."""
    return _json({"packs": _server(request).service.packs(request.path_params["run_id"])})


async def cancel_run(request: Request) -> Response:
    """POST /runs/{id}/cancel: cancel a run this server has going (202); else its state (409)."""
    server = _server(request)
    run_id = request.path_params["run_id"]
    if server.runs.cancel(run_id, "cancelled by POST /runs/{id}/cancel"):
        return _json({"run_id": run_id, "status": "cancelling"}, 202)
    run = server.service.get_run(run_id)  # RUN_NOT_FOUND: 404
    message = f"run {run_id} is not running in this server (it is {run['status']})"
    return _json(
        {**body("SERVE_NOT_RUNNING", message), "run_id": run_id, "status": run["status"]}, 409
    )
