"""`runtime submit` and `runtime worker`: runs queued in a Postgres store, run by workers."""

from __future__ import annotations

import click

from runtime.cli._common import handle_errors


@click.command()
@click.argument("pipeline")
@click.option(
    "--input",
    "input_pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="An input variable; VALUE is parsed as JSON when it parses, else text.",
)
@click.option(
    "--inputs",
    "inputs_file",
    type=click.Path(exists=True, dir_okay=False),
    help="A JSON object of input variables.",
)
@click.option("--store", help="The Postgres run store (default $RUNTIME_STORE): postgresql://...")
@click.option("--run-id", help="Id for the new run (default random).")
@click.option(
    "--model",
    "model_spec",
    help="Model the worker runs it with: extractive, replay:FILE, openai:MODEL[@URL] or a "
    "settings.models name (as runtime exec --model).",
)
@click.option("--index", "index_path", help="Node index the worker runs it against.")
@click.option(
    "--subject",
    "subject_text",
    metavar="JSON|@FILE",
    help="Who the run answers (tenant, roles, clearance); recorded with it (docs/access.md).",
)
@handle_errors
def submit(
    pipeline: str,
    input_pairs: tuple[str, ...],
    inputs_file: str | None,
    store: str | None,
    run_id: str | None,
    model_spec: str | None = None,
    index_path: str | None = None,
    subject_text: str | None = None,
) -> None:
    """Queue a run of PIPELINE for the workers of a Postgres store; print its run id.

    The pipeline and inputs are checked here (exit 2 when invalid); a worker
    (`runtime worker`) runs it. `runtime runs` lists it as queued, then running with its
    worker, then completed or failed.
    """
    from runtime.cli._inputs import parse_inputs
    from runtime.cli.run import _load_or_exit
    from runtime.engine import workers
    from runtime.engine.state import apply_inputs
    from runtime.engine.store import default_path

    loaded = _load_or_exit(pipeline)
    inputs = parse_inputs(input_pairs, inputs_file, loaded.inputs)
    if subject_text is not None:
        from runtime.engine.interpreter import with_subject
        from runtime.governance.subject import read_subject_option

        inputs = dict(with_subject(inputs, read_subject_option(subject_text)) or {})
    apply_inputs(loaded, inputs)  # missing, unknown or mistyped: exit 2, nothing queued
    if model_spec is not None:  # a bad --model is refused here, not by a worker later
        from runtime.cli.run import _check_model
        from runtime.engine.services import Services

        _check_model(
            Services(settings=loaded.settings, model_spec=model_spec, base_dir=str(loaded.base_dir))
        )
    click.echo(
        workers.submit(
            store or default_path(), pipeline, inputs, run_id, model=model_spec, index=index_path
        )
    )


@click.command()
@click.option("--store", help="The Postgres run store (default $RUNTIME_STORE): postgresql://...")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs executed at once by this worker.",
)
@click.option("--name", help="The worker's name in `runtime runs` (default host:pid).")
@click.option(
    "--burst", is_flag=True, help="Stop when the queue is empty (default: wait for more)."
)
@handle_errors
def worker(store: str | None, concurrency: int, name: str | None, burst: bool) -> None:
    """Execute runs queued in a Postgres store until stopped (Ctrl-C, SIGTERM).

    A worker silent for $RUNTIME_WORKER_LEASE seconds (default 30) loses its runs: another
    worker resumes each from its last checkpoint, and the silent one's later writes are
    refused (STORE_LEASE_LOST). docs/scale-out.md.
    """
    from runtime.engine import pgstore, workers
    from runtime.engine.store import default_path
    from runtime.errors import StoreError

    url = store or default_path()
    if not pgstore.is_url(url):
        raise StoreError(
            "runtime worker needs a postgresql:// store (workers share it)",
            code="STORE_URL_UNSUPPORTED",
        )
    workers.work(url, concurrency=concurrency, name=name, wait_for_jobs=not burst)
