"""RunsService: the server's small read API over the run store (runs API and inspector).

Every method returns plain dicts and lists (JSON-ready). An unknown run id raises the
store's RunError with code RUN_NOT_FOUND.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from runtime.errors import RunError, StepRuntimeError


class RunsService:
    """Read runs from one run store: list, one run, trace, packs, graph, eval reports."""

    def __init__(
        self,
        store: Any,
        *,
        served: Iterable[str] = (),
        reports: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """`store`: a run store; `served`: the pipeline names the server serves.

        `reports`: eval reports (name -> a `runtime eval` report.json's content).
        """
        self.store = store
        self.served = sorted(set(served))
        self.reports = dict(reports or {})

    @classmethod
    def with_report_files(
        cls, store: Any, served: Iterable[str], files: Iterable[str]
    ) -> RunsService:
        """A service whose eval reports are read from report.json files."""
        reports = {str(Path(f)): json.loads(Path(f).read_text("utf-8")) for f in files}
        return cls(store, served=served, reports=reports)

    def list_runs(
        self, *, pipeline: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """Recent runs, newest first (run_id, pipeline, status, created_at, seconds, steps, error)."""
        rows: list[dict[str, Any]] = self.store.runs(limit, status=status, pipeline=pipeline)
        return rows

    def get_run(self, run_id: str) -> dict[str, Any]:
        """One run: its list row plus inputs, output (the pipeline's outputs) and error."""
        loaded = self.store.load(run_id)  # RUN_NOT_FOUND for an unknown id
        row = self._row(run_id)
        variables = loaded.get("variables") or {}
        outputs = self._outputs(run_id)
        output = {k: variables.get(k) for k in outputs} if outputs else {}
        return {
            **row,
            "inputs": loaded.get("inputs"),
            "output": variables.get("final_answer") if "final_answer" in variables else output,
            "outputs": output,
        }

    def _row(self, run_id: str) -> dict[str, Any]:
        for row in self.store.runs(1, run_id=run_id):  # one row, by its key
            return dict(row)
        raise RunError(f"no run {run_id!r} in the store", code="RUN_NOT_FOUND")

    def _outputs(self, run_id: str) -> list[str]:
        try:
            pipeline = self._pipeline(run_id)
        except (
            StepRuntimeError,
            OSError,
        ):  # a run whose file moved still shows; its outputs are then unknown
            return []
        return list(pipeline.outputs or ())

    def _pipeline(self, run_id: str) -> Any:
        from runtime.format.validation import load_pipeline

        return load_pipeline(self.store.run_file(run_id), for_execution=False)

    def trace(
        self, run_id: str, *, type: str | None = None, step: str | None = None
    ) -> list[dict[str, Any]]:
        """A run's trace events in order; only those of this type and step when given."""
        self.store.load(run_id)  # RUN_NOT_FOUND for an unknown id
        events: list[dict[str, Any]] = self.store.events(run_id)
        return [
            e
            for e in events
            if (type is None or e.get("type") == type)
            and (step is None or e.get("step_id") == step)
        ]

    def packs(self, run_id: str) -> list[dict[str, Any]]:
        """The run's context packs, one per model call (what the model saw and what was dropped)."""
        self.store.load(run_id)
        packs: list[dict[str, Any]] = self.store.packs(run_id)
        return packs

    def graph(self, run_id: str) -> dict[str, Any] | None:
        """The run's pipeline graph (nodes and edges, runtime/serve/_svg.py), or None."""
        from runtime.contract.registry import default_registry
        from runtime.serve._svg import graph_data

        try:
            pipeline = self._pipeline(run_id)
        except (
            StepRuntimeError,
            OSError,
        ):  # the pipeline file is gone or no longer loads: no graph, said so
            return None
        data: dict[str, Any] = graph_data(pipeline, default_registry())
        return data

    def mermaid(self, run_id: str) -> str | None:
        """The run's pipeline graph as Mermaid text (as `runtime graph`), or None."""
        from runtime.contract.registry import default_registry
        from runtime.format.graph import to_mermaid

        try:
            return to_mermaid(self._pipeline(run_id), default_registry())
        except (
            StepRuntimeError,
            OSError,
        ):  # as graph(): a pipeline that no longer loads has no graph
            return None

    def eval_reports(self, run_id: str) -> list[dict[str, Any]]:
        """The eval reports' entries that name this run (runtime/serve/inspector.eval_entries)."""
        from runtime.serve.inspector import eval_entries

        return [e for name, r in self.reports.items() for e in eval_entries(r, name, run_id)]

    def pipelines(self) -> list[str]:
        """The pipeline names: those served and those with runs in the store."""
        stored = {str(r["pipeline"]) for r in self.store.runs(1_000_000)}
        return sorted(stored | set(self.served))
