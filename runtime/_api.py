"""The embedding API behind `runtime.load`, `runtime.Runner` and `runtime.RunHandle`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from typing import Any

from runtime.contract.registry import Registry
from runtime.engine import Engine, RunResult
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline
from runtime.format.validation import Report, load_pipeline, validate_paths

EventCallback = Callable[[dict[str, Any]], None]


def load(path: str, *, registry: Registry | None = None) -> Pipeline:
    """Load and validate a pipeline (`file.yaml` or `file.yaml#name`); raise on any error."""
    return load_pipeline(path, registry=registry)


def validate(*paths: str, registry: Registry | None = None) -> Report:
    """Validate files or folders; every diagnostic in one report."""
    return validate_paths(list(paths), registry=registry)


class _EitherEvent(threading.Event):
    """Set when it is set itself or when the caller's cancel event is."""

    def __init__(self, other: threading.Event | None) -> None:
        super().__init__()
        self._other = other
        # Why it was set, when the canceller said (a task cancelled with a message): the
        # run's RUN_FAILED event and error carry it.
        self.reason: str | None = None

    def is_set(self) -> bool:
        """True once either event is set (the engine asks before every step)."""
        return super().is_set() or (self._other is not None and self._other.is_set())


class RunHandle:
    """A run started on a background thread."""

    def __init__(self, target: Callable[[threading.Event], RunResult]) -> None:
        self._cancel = threading.Event()
        self._result: RunResult | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, args=(target,), daemon=True)
        self._thread.start()

    def _main(self, target: Callable[[threading.Event], RunResult]) -> None:
        try:
            self._result = target(self._cancel)
        except BaseException as exc:  # handed to the caller of result()
            self._error = exc

    def cancel(self) -> None:
        """Ask the run to stop before its next step (it fails with RUN_CANCELLED)."""
        self._cancel.set()

    def done(self) -> bool:
        """True once the run has ended."""
        return not self._thread.is_alive()

    def result(self, timeout: float | None = None) -> RunResult:
        """Wait for the run and return its result."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("run still going")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


class Runner:
    """Runs one loaded pipeline many times; safe to share between threads."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        store: Any = None,
        services: Services | None = None,
        registry: Registry | None = None,
        durability: str | None = None,
        tracer_provider: Any = None,
    ) -> None:
        """`durability` ("normal" or "full") overrides settings.durability for stored runs.

        `store`: a run store, or where one is (a SQLite file or postgresql://...).

        `tracer_provider`: an OpenTelemetry tracer provider that gets a span per run, step
        and model call (the `otel` extra; without it the environment decides: docs/packs.md).
        """
        self.pipeline = pipeline
        if isinstance(store, str):  # a file or postgresql://... (issue 34)
            from runtime.engine.stores import open_run_store

            store = open_run_store(store)
        self.engine = Engine(
            pipeline,
            registry=registry,
            services=services,
            store=store,
            durability=durability,
            tracer_provider=tracer_provider,
        )

    def run(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
        on_event: EventCallback | None = None,
        cancel: threading.Event | None = None,
        subject: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Run to completion or failure on this thread (subject: who it answers, docs/access.md)."""
        return self.engine.run(
            inputs,
            run_id=run_id,
            max_steps=max_steps,
            on_event=on_event,
            cancel=cancel,
            subject=subject,
        )

    def start(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
        on_event: EventCallback | None = None,
        subject: Mapping[str, Any] | None = None,
    ) -> RunHandle:
        """Start a run on a background thread; cancel or wait through the handle."""
        return RunHandle(
            lambda cancel: self.run(
                inputs,
                run_id=run_id,
                max_steps=max_steps,
                on_event=on_event,
                cancel=cancel,
                subject=subject,
            )
        )

    async def arun(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
        on_event: EventCallback | None = None,
        cancel: threading.Event | None = None,
        subject: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Run in a worker thread without blocking the event loop.

        Cancelling the awaiting task cancels the run: it ends RUN_CANCELLED before its
        next step, and the CancelledError reaches the caller only once the run has ended
        (so its store holds the final state, and no thread keeps working for nobody).
        """
        from runtime.engine.caller_loop import CALLER_LOOP

        stop = _EitherEvent(cancel)
        # Branch steps schedule their branches on this loop (runtime/engine/caller_loop.py).
        token = CALLER_LOOP.set(asyncio.get_running_loop())
        work = asyncio.ensure_future(
            asyncio.to_thread(
                self.run,
                inputs,
                run_id=run_id,
                max_steps=max_steps,
                on_event=on_event,
                cancel=stop,
                subject=subject,
            )
        )
        CALLER_LOOP.reset(token)  # (the worker thread took a copy of the context)
        try:
            # shield: a cancel must reach the run through `stop`, not abandon its thread.
            return await asyncio.shield(work)
        except asyncio.CancelledError as exc:
            if exc.args and isinstance(exc.args[0], str):
                stop.reason = exc.args[0][:200]
            stop.set()
            await asyncio.wait({work})  # the current step finishes, then RUN_CANCELLED
            if not work.cancelled():
                work.exception()  # retrieved: an error raised meanwhile is not logged as lost
            raise

    def resume(
        self,
        run_id: str,
        *,
        force: bool = False,
        on_event: EventCallback | None = None,
        subject: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Continue a crashed or failed run from the store (a different subject:
        SUBJECT_CHANGED)."""
        return self.engine.resume(run_id, force=force, on_event=on_event, subject=subject)


def remember(
    items: Any,
    *,
    store: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> list[str]:
    """Validate and store memories (a list of memory objects; all or none); their ids.

    store: the memory store file (default $RUNTIME_MEMORIES, else memories.db beside the
    index). Every configured key (settings.models' api_key_env, OPENAI_API_KEY) is stored
    as [redacted].
    """
    from runtime.models.guard import scrubber_for
    from runtime.retrieval.memories import open_memory_store

    target = open_memory_store(store, create=True)
    return list(target.remember(list(items), scrub=scrubber_for(settings or {})))


def record_experience(
    items: Any,
    *,
    store: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> list[str]:
    """Validate and store experiences (a list of experience objects; all or none); their ids."""
    from runtime.models.guard import scrubber_for
    from runtime.retrieval.memories import open_memory_store

    target = open_memory_store(store, create=True)
    return list(target.record_experiences(list(items), scrub=scrubber_for(settings or {})))


def submit(
    pipeline_file: str,
    inputs: Mapping[str, Any] | None = None,
    *,
    store: str | None = None,
    run_id: str | None = None,
    model: str | None = None,
    index: str | None = None,
    subject: Mapping[str, Any] | None = None,
) -> str:
    """Queue a run for the workers of a Postgres store (default $RUNTIME_STORE); its run id.

    model, index: what a worker runs it with (as `runtime exec --model/--index`); subject:
    who it answers (docs/access.md)."""
    from runtime.engine import workers
    from runtime.engine.interpreter import with_subject
    from runtime.engine.store import default_path

    given = dict(with_subject(inputs, subject) or {})
    return workers.submit(
        store or default_path(), pipeline_file, given, run_id, model=model, index=index
    )


def wait(run_id: str, *, store: str | None = None, timeout: float | None = None) -> dict[str, Any]:
    """Block until a submitted run has completed or failed; its row as `runtime runs` lists it."""
    from runtime.engine import workers
    from runtime.engine.store import default_path

    return workers.wait(store or default_path(), run_id, timeout=timeout)
