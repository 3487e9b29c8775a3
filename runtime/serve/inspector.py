"""The run inspector: `GET /` and its pages, mounted by the server (`runtime serve`).

Pages are HTML built on the server (runtime/serve/_pages.py) with one small script and one
stylesheet shipped in the package (runtime/_data/inspector/); nothing is fetched from a
network. Every response carries a Content-Security-Policy that allows no inline script and
nothing from another origin, so even markup that slipped through escaping would not run.

Routes:
    GET /                               runs list (?pipeline=&status=)
    GET /inspect/runs/{run_id}          one run
    GET /inspect/api/runs               the runs list as JSON (the list page polls it)
    GET /inspect/api/runs/{run_id}      a run's status and event count (its page polls it)
    GET /inspect/static/{name}          the script and the stylesheet
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol

from runtime.serve._svg import graph_data

__all__ = ["CSP", "RunsReader", "eval_entries", "graph_data", "inspector_routes"]

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STATIC = {"inspector.js": "text/javascript", "inspector.css": "text/css"}
LIMIT = 200  # runs listed


class RunsReader(Protocol):
    """What the inspector reads of the run store (the server's RunsService provides it).

    Every method returns plain data (dicts of JSON values); tests/inspector_support.py
    has a stand-in over a SQLite run store.
    """

    def list_runs(
        self, *, pipeline: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """Runs newest first, as `SqliteRunStore.runs` gives them (run_id, pipeline, status,
        created_at, seconds, steps, error)."""
        ...

    def get_run(self, run_id: str) -> dict[str, Any]:
        """A `list_runs` row plus `inputs` and `output`; RunError RUN_NOT_FOUND when unknown."""
        ...

    def trace(self, run_id: str) -> list[dict[str, Any]]:
        """The run's trace events in order (`SqliteRunStore.events`)."""
        ...

    def packs(self, run_id: str) -> list[dict[str, Any]]:
        """The run's context packs (`SqliteRunStore.packs`); [] when none were recorded."""
        ...

    def graph(self, run_id: str) -> dict[str, Any] | None:
        """`graph_data(pipeline, registry)` of the pipeline the run ran; None: not served."""
        ...

    def eval_reports(self, run_id: str) -> list[dict[str, Any]]:
        """Entries of eval reports that name the run (`eval_entries`); [] when none."""
        ...

    def pipelines(self) -> list[str]:
        """Pipeline names offered by the runs list's filter."""
        ...


def eval_entries(report: Mapping[str, Any], name: str, run_id: str) -> list[dict[str, Any]]:
    """What a `runtime eval` report.json says of one run (docs/eval.md): one entry per row.

    For a RunsService's `eval_reports`: each entry names the report, its pipeline, model and
    verdict, the case and variant the run was, and the run's measures.
    """
    from runtime.eval.report import COST, QUALITY

    out = []
    for row in report.get("runs") or ():
        if not isinstance(row, Mapping) or row.get("run_id") != run_id:
            continue
        out.append(
            {
                "name": f"{name}: case {row.get('case')}, variant {row.get('variant')}",
                "metrics": {m: row.get(m) for m in (*QUALITY, *COST) if m in row},
                "report": name,
                "pipeline": report.get("pipeline"),
                "model": report.get("model"),
                "passed": report.get("passed"),
                "error": row.get("error"),
                "evidence_shown": row.get("evidence_shown"),
            }
        )
    return out


def static_text(name: str) -> str:
    """A file of the inspector's assets, read from the installed package."""
    return (resources.files("step_runtime_data") / "inspector" / name).read_text("utf-8")


def inspector_routes(runs: RunsReader) -> list[BaseRoute]:
    """The inspector's routes over a runs reader, for the server to mount."""
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    from runtime.errors import RunError
    from runtime.serve import _pages

    def html(text: str, status: int = 200) -> Response:
        return HTMLResponse(text, status_code=status, headers=HEADERS)

    def json(data: Any, status: int = 200) -> Response:
        return JSONResponse(data, status_code=status, headers=HEADERS)

    def filters(request: Request) -> tuple[str | None, str | None]:
        pipeline = request.query_params.get("pipeline") or None
        status = request.query_params.get("status") or None
        # an unknown status lists nothing rather than everything
        return pipeline, status

    async def runs_list(request: Request) -> Response:
        pipeline, status = filters(request)
        rows = runs.list_runs(pipeline=pipeline, status=status, limit=LIMIT)
        return html(_pages.runs_page(rows, runs.pipelines(), pipeline, status))

    async def runs_json(request: Request) -> Response:
        pipeline, status = filters(request)
        rows = runs.list_runs(pipeline=pipeline, status=status, limit=LIMIT)
        return json({"runs": [_pages.run_row(r) for r in rows]})

    def found(run_id: str) -> dict[str, Any] | None:
        try:
            return runs.get_run(run_id)
        except RunError as err:
            if err.code == "RUN_NOT_FOUND":
                return None
            raise

    async def run_page(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        run = found(run_id)
        if run is None:
            return html(_pages.not_found(run_id), 404)

        def build() -> str:
            return _pages.run_page(
                run,
                runs.trace(run_id),
                runs.packs(run_id),
                runs.graph(run_id),
                runs.eval_reports(run_id),
            )

        # Reading a long run's trace and drawing it takes a while: off the event loop, so
        # the server keeps answering meanwhile.
        return html(await asyncio.to_thread(build))

    async def run_json(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        run = found(run_id)
        if run is None:
            return json({"error": {"code": "RUN_NOT_FOUND", "message": "no such run"}}, 404)
        events = runs.trace(run_id)
        return json({"run_id": run_id, "status": run.get("status"), "events": len(events)})

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:  # a fixed list: no path reaches the file system
            return Response("not found", status_code=404, headers=HEADERS)
        return Response(static_text(name), media_type=STATIC[name], headers=HEADERS)

    return [
        Route("/", runs_list, methods=["GET"]),
        Route("/inspect/runs/{run_id:path}", run_page, methods=["GET"]),
        Route("/inspect/api/runs", runs_json, methods=["GET"]),
        Route("/inspect/api/runs/{run_id:path}", run_json, methods=["GET"]),
        Route("/inspect/static/{name}", static, methods=["GET"]),
    ]
