"""The server: the app factory that puts chat, the runs API and the inspector together.

`create_app(server)` builds a Starlette app; `Server` holds what requests share (the runs
going, the read API over the run store, auth, limits). runtime/cli/serve.py runs it on uvicorn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runtime.errors import StepRuntimeError
from runtime.serve.auth import Auth
from runtime.serve.errors import ServeError, body, response
from runtime.serve.limits import Limits
from runtime.serve.runs import RunsService
from runtime.serve.served import Runs, Served
from runtime.serve.server import Server

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request

OPEN_PATHS = ("/healthz",)  # answered without a token (they tell nothing of runs)


def build_server(
    served: Mapping[str, Served],
    store: Any,
    *,
    auth: Auth | None = None,
    limits: Limits | None = None,
    reports: Mapping[str, Mapping[str, Any]] | None = None,
) -> Server:
    """A Server over loaded pipelines and their shared run store."""
    limits = limits or Limits()
    return Server(
        runs=Runs(served, limits),
        service=RunsService(store, served=list(served), reports=reports),
        auth=auth or Auth(),
        limits=limits,
    )


class _Guard:
    """ASGI middleware: the bearer token (when required) and a declared body over the limit."""

    def __init__(self, app: Any, server: Server) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = None
        if self.server.auth.required and scope["path"] not in OPEN_PATHS:
            caller = self.server.auth.caller(headers.get("authorization"))
            if caller is None:
                refusal = ServeError(
                    "SERVE_UNAUTHORIZED",
                    "this server needs `Authorization: Bearer TOKEN` with a token it knows",
                    headers={"WWW-Authenticate": "Bearer"},
                )
            else:
                scope.setdefault("state", {})["caller"] = caller
        declared = headers.get("content-length", "")
        limit = self.server.limits.max_body_bytes
        if refusal is None and declared.isdigit() and int(declared) > limit:
            refusal = ServeError("SERVE_BODY_TOO_LARGE", f"the request body is over {limit} bytes")
        if refusal is not None:
            await response(refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(server: Server) -> Starlette:
    """The ASGI app: /v1 chat, the runs API, /healthz, /openapi.json and the inspector."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from runtime.serve import api, chat
    from runtime.serve.inspector import inspector_routes
    from runtime.serve.openapi import document

    async def openapi(request: Request) -> JSONResponse:
        return JSONResponse(document())

    routes = [
        Route("/v1/chat/completions", chat.completions, methods=["POST"]),
        Route("/v1/models", chat.models, methods=["GET"]),
        Route("/runs", api.create_run, methods=["POST"]),
        Route("/runs", api.list_runs, methods=["GET"]),
        Route("/runs/{run_id}/trace", api.run_trace, methods=["GET"]),
        Route("/runs/{run_id}/context", api.run_context, methods=["GET"]),
        Route("/runs/{run_id}/cancel", api.cancel_run, methods=["POST"]),
        Route("/runs/{run_id}", api.get_run, methods=["GET"]),
        Route("/healthz", api.healthz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        *inspector_routes(server.service),
    ]

    async def on_serve_error(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, ServeError)
        return response(exc)

    async def on_runtime_error(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, StepRuntimeError)
        return response(exc)

    async def on_http(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, HTTPException)
        code = "SERVE_NOT_FOUND" if exc.status_code in (404, 405) else "SERVE_BAD_REQUEST"
        return JSONResponse(body(code, str(exc.detail)), exc.status_code)

    async def on_other(request: Request, exc: Exception) -> Any:
        # a bug of the server: coded, without the traceback (uvicorn's log has it)
        return JSONResponse(body("SERVE_INTERNAL", f"internal error: {type(exc).__name__}"), 500)

    app = Starlette(
        routes=routes,
        middleware=[Middleware(_Guard, server=server)],
        exception_handlers={
            ServeError: on_serve_error,
            StepRuntimeError: on_runtime_error,
            HTTPException: on_http,
            Exception: on_other,
        },
    )
    app.state.server = server
    return app
