"""`runtime exec` and `runtime resume`."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

import click

from runtime.cli._common import existing_store, handle_errors
from runtime.cli._common import shown as safe
from runtime.cli._inputs import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
    MAX_BYTES_ENV,
    MAX_DEPTH_ENV,
    parse_inputs,
)

# Failures from outside the pipeline and its state (servers, credentials, files, the
# index, cancellation, an action's code): after fixing those, resuming can succeed. Other
# failures repeat the same way on resume, so no resume hint is printed for them.
RESUMABLE = frozenset(
    {
        "MODEL_RATE_LIMITED",
        "MODEL_TIMEOUT",
        "MODEL_PROVIDER_ERROR",
        "MODEL_AUTH_ERROR",
        "INVALID_STRUCTURED_OUTPUT",
        "RUN_CANCELLED",
        "STORE_ERROR",
        "INDEX_NOT_FOUND",
        "INDEX_FORMAT",
        "INDEX_ERROR",
        "EMBEDDINGS_UNAVAILABLE",
        "EMBEDDINGS_MISSING",
        "TOKENIZER_UNAVAILABLE",
        "ACTION_FAILED",
    }
)


def _check_model(services: Any) -> None:
    """Build the --model provider before the run: an unknown name or a bad spec exits 2."""
    from runtime.errors import StepRuntimeError, UsageError

    if services.model_spec is None:
        return
    try:
        services.model()  # cached: the run's steps use this same provider
    except StepRuntimeError as exc:
        raise UsageError(f"--model: {exc.message}", code=exc.code) from exc


def _print_result(
    result: Any, as_json: bool, progress: Any = None, store: str | None = None
) -> None:
    # A value the terminal already showed as a streamed reply is not printed again.
    already = progress.already_shown if progress is not None else (lambda text: False)
    warnings = list(progress.warnings) if progress is not None else []
    if as_json:
        out = result.to_dict()
        if warnings:
            out["warnings"] = warnings
        click.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    for line in warnings:
        click.echo(f"warning: {line}", err=True)
    if result.error is None:
        out = result.output
        # An answer quotes indexed text and a model's words: no terminal escape is obeyed.
        if isinstance(out, dict):
            for key, value in out.items():
                if isinstance(value, str) and already(value):
                    continue
                text = value if isinstance(value, str) else json.dumps(value)
                click.echo(f"{key}: {safe(text)}")
        elif out is not None and not (isinstance(out, str) and already(out)):
            click.echo(safe(out if isinstance(out, str) else json.dumps(out, indent=2)))
        click.echo(f"[run {result.run_id} completed in {len(result.steps)} steps]", err=True)
    else:
        e = result.error
        click.echo(f"error: {e.code}: {e.message} (step {e.step_id})", err=True)
        if e.hint:
            click.echo(f"hint: {e.hint}", err=True)
        if e.code in RESUMABLE:
            click.echo(
                # The line is copied as printed: it names the store when one was given.
                f"[run {result.run_id} failed; resume with: runtime resume {result.run_id}"
                f"{' --store ' + shlex.quote(store) if store else ''}]",
                err=True,
            )
        else:
            click.echo(f"[run {result.run_id} failed]", err=True)


def _progress(pipeline: Any, as_json: bool, first_step: str | None) -> Any:
    """The terminal view: a spinner on a terminal's stderr, replies streamed to a terminal's stdout."""
    from runtime.cli._progress import Progress

    return Progress(
        {s.id: s.action for s in pipeline.steps},
        first_step=first_step,
        spinner=sys.stderr.isatty() and not as_json,
        stream=sys.stdout.isatty() and not as_json,
    )


def _run(engine_call: Any, as_json: bool, progress: Any, store: str | None = None) -> None:
    with progress:
        result = engine_call(progress.event_listener)
    _print_result(result, as_json, progress, store)
    sys.exit(0 if result.status == "completed" else 1)


def _load_or_exit(path: str, locked: bool = False) -> Any:
    from runtime.errors import PipelineInvalidError
    from runtime.format.diagnostics import render_text
    from runtime.format.validation import load_pipeline

    try:
        return load_pipeline(path, locked=locked)
    except PipelineInvalidError as exc:
        click.echo(render_text(exc.diagnostics), err=True)
        sys.exit(2)


# --durability, the same for exec and resume.
_subject = click.option(
    "--subject",
    "subject_text",
    metavar="JSON|@FILE",
    help="Who the run answers: {tenant, roles, clearance, attributes} as JSON, or @file "
    "(JSON or YAML). Without it the run is anonymous: it reads only unlabelled, "
    "untenanted content (docs/access.md).",
)

_durability = click.option(
    "--durability",
    type=click.Choice(["normal", "full"]),
    help="Checkpoint durability: normal (WAL, no fsync per checkpoint; the default) or "
    "full (fsync every checkpoint). Overrides settings.durability.",
)


@click.command("exec")
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
@click.option(
    "--max-input-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BYTES,
    show_default=True,
    envvar=MAX_BYTES_ENV,
    show_envvar=True,
    help="Size limit of the --inputs file and the --input values together (INPUT_TOO_LARGE).",
)
@click.option(
    "--max-input-depth",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_DEPTH,
    show_default=True,
    envvar=MAX_DEPTH_ENV,
    show_envvar=True,
    help="How deeply input JSON may nest arrays and objects (INPUT_TOO_DEEP).",
)
@click.option(
    "--store",
    type=click.Path(dir_okay=False),
    help="Run store: a file or postgresql://... (default $RUNTIME_STORE or .runtime/runs.db).",
)
@click.option("--max-steps", type=click.IntRange(min=1), help="Override settings.max_steps.")
@click.option("--run-id", help="Id for the new run (default random).")
@_durability
@click.option(
    "--index",
    "index_path",
    type=click.Path(dir_okay=False),
    help="Node index (default $RUNTIME_INDEX or .runtime/index.db).",
)
@click.option(
    "--model",
    "model_spec",
    help="Model for every call_model step: extractive, replay:FILE, openai:MODEL[@URL] or a settings.models name.",
)
@click.option(
    "--record",
    "record_path",
    type=click.Path(dir_okay=False),
    help="Record model calls to this cassette (JSONL).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object with the run's result."
)
@_subject
@click.option(
    "--locked",
    is_flag=True,
    help="Refuse to run if the pipeline drifted from its lock file (LOCK_DRIFT), as "
    "settings.compat_mode: locked does (docs/lock.md).",
)
@handle_errors
def exec_(
    pipeline: str,
    input_pairs: tuple[str, ...],
    inputs_file: str | None,
    max_input_bytes: int,
    max_input_depth: int,
    store: str | None,
    max_steps: int | None,
    run_id: str | None,
    durability: str | None,
    index_path: str | None,
    model_spec: str | None,
    record_path: str | None,
    as_json: bool,
    subject_text: str | None,
    locked: bool,
) -> None:
    """Validate and run PIPELINE (a file, or FILE#NAME for a pack member).

    On a terminal, a spinner on stderr names the step running now, and a model reply
    streams to stdout as it arrives, on lines of its own; an answer already streamed
    is not printed again. NO_COLOR=1 turns colour off.

    Exit status: 0 completed, 1 failed, 2 before any run: an invalid pipeline, inputs
    or --model, or a usage error.
    """
    from runtime.engine import Engine
    from runtime.engine.services import Services
    from runtime.engine.state import apply_inputs
    from runtime.engine.stores import open_run_store

    loaded = _load_or_exit(pipeline, locked)
    inputs = parse_inputs(
        input_pairs,
        inputs_file,
        loaded.inputs,
        max_bytes=max_input_bytes,
        max_depth=max_input_depth,
    )
    if subject_text is not None:
        from runtime.engine.interpreter import with_subject
        from runtime.governance.subject import read_subject_option

        inputs = dict(with_subject(inputs, read_subject_option(subject_text)) or {})
    apply_inputs(loaded, inputs)  # missing, unknown or mistyped: exit 2 before a run exists
    progress = _progress(loaded, as_json, loaded.entry_step_id)
    services = Services(
        settings=loaded.settings,
        index_path=index_path,
        model_spec=model_spec,
        record_path=record_path,
        base_dir=str(loaded.base_dir),
        on_model_chunk=progress.chunk_listener,
    )
    _check_model(services)
    engine = Engine(loaded, services=services, store=open_run_store(store), durability=durability)
    _run(
        lambda ev: engine.run(inputs, run_id=run_id, max_steps=max_steps, on_event=ev),
        as_json,
        progress,
        store,
    )


@click.command()
@click.argument("run_id")
@existing_store
@click.option(
    "--force",
    is_flag=True,
    help="Resume even though the pipeline changed, or with a --model, --index or tokenizer "
    "other than the run was started with (the trace records what changed).",
)
@_durability
@click.option(
    "--index",
    "index_path",
    type=click.Path(dir_okay=False),
    help="Node index (default: the one the run was started with).",
)
@click.option(
    "--model",
    "model_spec",
    help="Model spec, as for exec (default: the one the run was started with).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object with the run's result."
)
@_subject
@handle_errors
def resume(
    run_id: str,
    store: str | None,
    force: bool,
    durability: str | None,
    index_path: str | None,
    model_spec: str | None,
    as_json: bool,
    subject_text: str | None,
) -> None:
    """Resume a crashed or failed run from its last checkpoint.

    The run goes on with the model, index and tokenizer it was started with (what
    --model and the environment, such as $OPENAI_BASE_URL, resolved to then). One given
    differently is refused (RESUME_CHOICE_CHANGED, exit 2) unless --force. The run keeps
    the subject it was started by; a different --subject is SUBJECT_CHANGED (exit 2),
    whatever --force says.
    """
    from runtime.engine import Engine
    from runtime.engine.services import Services
    from runtime.engine.stores import open_run_store

    run_store = open_run_store(store, create=False)
    file = run_store.run_file(run_id)
    loaded = _load_or_exit(file)
    progress = _progress(loaded, as_json, None)  # RUN_RESUMED names the step
    services = Services(
        settings=loaded.settings,
        index_path=index_path,
        model_spec=model_spec,
        base_dir=str(loaded.base_dir),
        on_model_chunk=progress.chunk_listener,
    )
    _check_model(services)
    engine = Engine(loaded, services=services, store=run_store, durability=durability)
    subject = None
    if subject_text is not None:
        from runtime.governance.subject import read_subject_option

        subject = read_subject_option(subject_text)
    _run(
        lambda ev: engine.resume(run_id, force=force, on_event=ev, subject=subject),
        as_json,
        progress,
        store,
    )
