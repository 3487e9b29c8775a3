"""The served pipelines and the runs the server has going (start, stream, cancel, deadline).

Runs go through the embedding API (runtime._api.Runner.arun), so they land in the same run
store as `runtime exec` and end RUN_CANCELLED there when the server cancels them.
"""

from __future__ import annotations

import asyncio
import contextvars
import difflib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime.serve.errors import ServeError
from runtime.serve.limits import Limits, Pool

# The chunk sink of the run on this thread: Runner.arun runs the engine in a worker thread
# that copies the caller's context, so each run's model chunks reach its own request.
_SINK: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "serve_chunk_sink", default=None
)


def _on_chunk(text: str) -> None:
    sink = _SINK.get()
    if sink is not None:
        sink(text)


@dataclass
class Served:
    """One served pipeline: its name, the loaded pipeline and its runner."""

    name: str
    pipeline: Any
    runner: Any

    def answer_key(self) -> str:
        """The output that holds the answer: final_answer, else the first output."""
        outputs = list(self.pipeline.outputs or ())
        return "final_answer" if "final_answer" in outputs or not outputs else outputs[0]

    def takes(self, name: str) -> bool:
        """True when the pipeline declares this input (or accepts any)."""
        inputs = self.pipeline.inputs
        return inputs is None or name in inputs


def load_served(
    paths: list[str],
    *,
    store: Any,
    index: str | None,
    model: str | None,
    registry: Any = None,
) -> dict[str, Served]:
    """Load and validate every PIPELINE argument; one Runner each over the shared store."""
    from runtime._api import Runner, load
    from runtime.engine.services import Services

    served: dict[str, Served] = {}
    for path in paths:
        pipeline = load(path, registry=registry)
        if pipeline.name in served:
            raise ServeError("SERVE_BAD_REQUEST", f"two served pipelines are named {pipeline.name}")
        services = Services(
            settings=pipeline.settings,
            index_path=index,
            model_spec=model,
            base_dir=str(pipeline.base_dir),
            on_model_chunk=_on_chunk,
        )
        runner = Runner(pipeline, store=store, services=services, registry=registry)
        served[pipeline.name] = Served(pipeline.name, pipeline, runner)
    return served


class Runs:
    """Starts runs within the pool and the deadline, and cancels them."""

    def __init__(self, served: Mapping[str, Served], limits: Limits) -> None:
        self.served = served
        self.limits = limits
        self.pool = Pool(limits.max_runs, limits.retry_after)
        self.active: dict[str, asyncio.Task[Any]] = {}
        self.ended_by_deadline: set[str] = set()

    def find(self, model: Any) -> Served:
        """The served pipeline of this name (unknown: SERVE_UNKNOWN_MODEL with a did-you-mean)."""
        if not isinstance(model, str) or not model:
            raise ServeError("SERVE_BAD_REQUEST", "`model` must name a served pipeline")
        if model in self.served:
            return self.served[model]
        close = difflib.get_close_matches(model, list(self.served), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ServeError(
            "SERVE_UNKNOWN_MODEL",
            f"no served pipeline is named {model[:200]!r} (served: {', '.join(sorted(self.served))})"
            + hint,
        )

    def start(
        self,
        served: Served,
        inputs: Mapping[str, Any],
        subject: Mapping[str, Any] | None,
        sink: Callable[[str], None] | None = None,
    ) -> tuple[str, asyncio.Task[Any]]:
        """Check the inputs (a coded InputError: 400), take a pool slot (or SERVE_BUSY) and
        start the run as a task: (run id, task)."""
        from runtime.engine.state import apply_inputs

        apply_inputs(served.pipeline, inputs)  # refused before a run exists, as `runtime exec`
        self.pool.acquire()
        run_id = uuid.uuid4().hex[:12]
        token = _SINK.set(sink)
        try:
            task = asyncio.ensure_future(self._run(served, inputs, subject, run_id))
        finally:
            _SINK.reset(token)
        self.active[run_id] = task
        return run_id, task

    async def _run(
        self,
        served: Served,
        inputs: Mapping[str, Any],
        subject: Mapping[str, Any] | None,
        run_id: str,
    ) -> Any:
        work = asyncio.ensure_future(served.runner.arun(inputs, run_id=run_id, subject=subject))
        try:
            done, _ = await asyncio.wait({work}, timeout=self.limits.deadline)
            if not done:
                work.cancel(f"the server's deadline of {self.limits.deadline:g} s passed")
                await asyncio.wait({work})
                if not work.cancelled() and work.exception() is None:
                    return work.result()  # it ended just as the deadline passed
                raise TimeoutError
            return work.result()
        except asyncio.CancelledError as exc:
            if not work.done():  # this task was cancelled: the run is, with the reason given
                work.cancel(exc.args[0] if exc.args else None)
                await asyncio.wait({work})
            raise
        except TimeoutError:
            self.ended_by_deadline.add(run_id)
            raise ServeError(
                "SERVE_DEADLINE",
                f"run {run_id} passed the server's deadline of {self.limits.deadline:g} s "
                "and was cancelled",
                headers={"X-Run-Id": run_id},
            ) from None
        finally:
            self.active.pop(run_id, None)
            self.pool.release()

    def cancel(self, run_id: str, reason: str) -> bool:
        """Cancel a run this server has going, saying why (its RUN_FAILED event and error
        carry the reason); False when it has none by this id."""
        task = self.active.get(run_id)
        if task is None:
            return False
        task.cancel(reason)
        return True
