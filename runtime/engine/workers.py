"""Workers (issue 34): runs queued in Postgres and executed by `runtime worker` processes.

The queue is procrastinate's (docs/scale-out.md says why): `submit` records the run in
the store (`run_submissions`, listed `queued`) and defers one job naming it; a worker
process runs procrastinate's worker with N concurrent jobs, sending a heartbeat every
LEASE/4 seconds. A periodic job (every second, on any worker) hands the jobs of workers
silent for LEASE seconds back to the queue; the worker that takes one up takes the run's
lease (its epoch goes up: runtime/engine/pgstore.py) and resumes the run from its last
checkpoint. The lease is a fencing token: a worker paused past it (SIGSTOP) and woken has
every write of the run refused (STORE_LEASE_LOST), so a run is never written by two
workers at once.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from typing import Any

from runtime.errors import RunError, StoreError
from runtime.net import pgpool

LEASE_ENV = "RUNTIME_WORKER_LEASE"
QUEUE = "runs"
TASK = "runtime.execute_run"
# pg_advisory_xact_lock key for installing the queue's schema (another than the store's)
SCHEMA_LOCK = 0x5352_5175_6575_6531


def lease_seconds() -> float:
    """Seconds without a heartbeat after which a worker's runs go to another ($RUNTIME_WORKER_LEASE)."""
    return float(os.environ.get(LEASE_ENV) or 30)


def _procrastinate() -> Any:
    try:
        import procrastinate
    except ImportError as exc:
        raise StoreError(
            f"workers need procrastinate ({exc}): pip install 'step-runtime[postgres]'",
            code="STORE_DRIVER_MISSING",
        ) from exc
    return procrastinate


_APPS: dict[str, Any] = {}
_STORES: dict[str, Any] = {}


def app_for(url: str) -> Any:
    """The procrastinate app of a store URL, with the run task and the stall sweeper."""
    if url in _APPS:
        return _APPS[url]
    procrastinate = _procrastinate()
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name=TASK, queue=QUEUE, pass_context=True)
    def execute_run(context: Any, run_id: str) -> str:
        worker = str(context.worker_name or f"{socket.gethostname()}:{os.getpid()}")
        return execute(url, run_id, worker)

    @app.periodic(cron="* * * * * *", periodic_id="stalled")  # every second
    @app.task(name="runtime.retry_stalled", queue=QUEUE, pass_context=True)
    async def retry_stalled(context: Any, timestamp: int) -> None:
        # the documented recipe: jobs of workers whose heartbeat is older than the lease
        manager = context.app.job_manager
        for job in await manager.get_stalled_jobs(
            task_name=TASK, seconds_since_heartbeat=lease_seconds()
        ):
            await manager.retry_job(job)

    _APPS[url] = app
    return app


def ensure_queue(url: str) -> None:
    """Install procrastinate's schema once (under an advisory lock: workers start together)."""
    psycopg, _ = pgpool.drivers("worker")  # STORE_DRIVER_MISSING without them
    app = app_for(url)
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        found = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
        if found is None or found[0] is None:
            conn.execute(app.schema_manager.get_schema())


def _store(url: str) -> Any:
    from runtime.engine.stores import open_run_store

    if url not in _STORES:
        _STORES[url] = open_run_store(url)
    return _STORES[url]


def submit(
    url: str,
    pipeline_file: str,
    inputs: dict[str, Any],
    run_id: str | None = None,
    *,
    model: str | None = None,
    index: str | None = None,
) -> str:
    """Queue a run of a pipeline file for the workers of a Postgres store; its run id.

    model, index: what the run is executed with (as `runtime exec --model/--index`); the
    subject, if any, is among the inputs (`subject`)."""
    from runtime.engine import pgstore
    from runtime.format.validation import load_pipeline

    if not pgstore.is_url(url):
        raise RunError(
            "submit needs a postgresql:// store (workers share it)", code="STORE_URL_UNSUPPORTED"
        )
    pipeline = load_pipeline(pipeline_file)  # refused here, not by a worker later
    run_id = run_id or uuid.uuid4().hex[:12]
    store = _store(url)
    ensure_queue(url)
    if index is not None and _has_password(index):
        raise StoreError(
            "--index: a URL holding a password would be stored with the queued run; give the "
            "workers the password instead (PGPASSWORD, ~/.pgpass or $RUNTIME_INDEX)",
            code="STORE_URL_INVALID",
        )
    options = {k: v for k, v in (("model", model), ("index", index)) if v is not None}
    store.submit_run(run_id, pipeline.name, os.path.abspath(pipeline_file), inputs, options)
    app = app_for(url)
    with app.open():
        app.tasks[TASK].defer(run_id=run_id)
    return run_id


def _has_password(url: str) -> bool:
    """Whether a database URL carries a password (user:password@, or password= in it)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        return parts.password is not None or "password=" in url.lower()
    except ValueError:  # a malformed URL is refused where it is opened
        return False


def execute(url: str, run_id: str, worker: str) -> str:
    """Run (or resume) a queued run under a new lease; its final status."""
    from runtime.engine import Engine
    from runtime.format.validation import load_pipeline

    store = _store(url)
    queued = store.submission(run_id)
    if queued is None:
        raise RunError(f"no queued run {run_id!r} in {store.path}", code="RUN_NOT_FOUND")
    store.take_lease(run_id, worker)
    try:
        from runtime.engine.services import Services

        pipeline = load_pipeline(queued["file"])
        options = queued.get("options") or {}
        services = Services(
            settings=pipeline.settings,
            index_path=options.get("index"),
            model_spec=options.get("model"),
            base_dir=str(pipeline.base_dir),
        )
        engine = Engine(pipeline, services=services, store=store)
        try:
            status = store.load(run_id)["status"]
        except RunError as exc:
            if exc.code != "RUN_NOT_FOUND":
                raise
            status = None
        try:
            if status == "completed":  # finished by a worker whose job was handed on late
                return "completed"
            if status is not None:  # another worker began it and went silent: resume
                result = engine.resume(run_id)
            else:
                result = engine.run(queued["inputs"], run_id=run_id)
        except StoreError as exc:
            if exc.code == "STORE_LEASE_LOST":  # another worker has the run now
                _say(f"worker {worker}: run {run_id}: lease lost ({exc.code}): {exc.message}")
                return "lease lost"
            raise
        _say(f"worker {worker}: run {run_id}: {result.status}")
        return str(result.status)
    finally:
        store.drop_lease(run_id)


def _say(line: str) -> None:
    """One line on stderr: what a worker did (its log, read by people and tests)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def wait(url: str, run_id: str, timeout: float | None = None, poll: float = 0.2) -> dict[str, Any]:
    """Block until a run has completed or failed; its row as `runtime runs --json` lists it."""
    store = _store(url)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        for row in store.runs(limit=1_000_000):
            if row["run_id"] == run_id and row["status"] in ("completed", "failed"):
                return dict(row)
        if deadline is not None and time.monotonic() > deadline:
            raise RunError(f"run {run_id} did not end within {timeout} s", code="RUN_WAIT_TIMEOUT")
        time.sleep(poll)


def work(
    url: str, concurrency: int = 1, name: str | None = None, wait_for_jobs: bool = True
) -> None:
    """Execute queued runs until stopped (SIGINT/SIGTERM), `concurrency` at a time."""
    ensure_queue(url)
    lease = lease_seconds()
    app = app_for(url)
    app.run_worker(
        queues=[QUEUE],
        concurrency=concurrency,
        name=name or f"{socket.gethostname()}:{os.getpid()}",
        wait=wait_for_jobs,
        update_heartbeat_interval=max(lease / 4, 0.1),
        stalled_worker_timeout=lease,
        listen_notify=True,
        install_signal_handlers=True,
    )
