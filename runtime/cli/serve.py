"""`runtime serve`: pipelines behind HTTP (OpenAI-compatible chat, runs API, inspector)."""

from __future__ import annotations

import click

from runtime.cli._common import handle_errors


@click.command()
@click.argument("pipelines", nargs=-1, required=True)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; any but loopback needs a token.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option(
    "--store",
    type=click.Path(dir_okay=False),
    help="Run store: a file or postgresql://... (default $RUNTIME_STORE or .runtime/runs.db).",
)
@click.option(
    "--index", "index_path", type=click.Path(dir_okay=False), help="Node index for retrieval steps."
)
@click.option("--model", "model_spec", help="Model for every call_model step, as for exec.")
@click.option(
    "--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Worker processes."
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    help="Bearer tokens: lines `NAME TOKEN` (or one bare token); also $RUNTIME_SERVE_TOKEN.",
)
@click.option(
    "--subjects",
    "subjects_file",
    type=click.Path(dir_okay=False),
    help="JSON mapping token names to run subjects (docs/access.md).",
)
@click.option(
    "--eval-report",
    "eval_reports",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A `runtime eval` report.json the inspector shows beside its runs (repeatable).",
)
@click.option("--max-body-bytes", type=click.IntRange(min=1), default=1_000_000, show_default=True)
@click.option(
    "--max-runs",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Runs at once (per worker); more: 429.",
)
@click.option(
    "--deadline",
    type=click.FloatRange(min=0.001),
    default=300.0,
    show_default=True,
    help="Seconds a run may take; then it is cancelled.",
)
@handle_errors
def serve(
    pipelines: tuple[str, ...],
    host: str,
    port: int,
    store: str | None,
    index_path: str | None,
    model_spec: str | None,
    workers: int,
    token_file: str | None,
    subjects_file: str | None,
    eval_reports: tuple[str, ...],
    max_body_bytes: int,
    max_runs: int,
    deadline: float,
) -> None:
    """Serve PIPELINES over HTTP: /v1/chat/completions, /runs, the inspector at /.

    Binds 127.0.0.1 by default; any other address needs a bearer token
    ($RUNTIME_SERVE_TOKEN or --token-file), or the server does not start. docs/serve.md.
    """
    import os

    from runtime.serve.config import ENV_CONFIG, ServeConfig, build_app
    from runtime.serve.errors import ServeError

    try:
        import uvicorn
    except ImportError as exc:
        from runtime.errors import UsageError

        raise UsageError(
            "runtime serve needs the serve extra: pip install 'step-runtime[serve]'"
        ) from exc
    config = ServeConfig(
        pipelines=list(pipelines),
        host=host,
        store=store,
        index=index_path,
        model=model_spec,
        token_file=token_file,
        subjects_file=subjects_file,
        eval_reports=list(eval_reports),
        max_body_bytes=max_body_bytes,
        max_runs=max_runs,
        deadline=deadline,
    )
    try:
        app = build_app(config)  # everything checked here, before a port is bound
    except ServeError as err:
        from runtime.errors import UsageError

        raise UsageError(err.message, code=err.code) from None
    if workers == 1:
        uvicorn.run(app, host=host, port=port, log_level="info")
        return
    os.environ[ENV_CONFIG] = config.to_env()
    uvicorn.run(
        "runtime.serve.config:worker_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
    )
