"""`runtime exec` and `runtime resume`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from runtime.cli._common import handle_errors


def _parse_inputs(
    pairs: tuple[str, ...], inputs_file: str | None, declared: dict[str, Any] | None = None
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if inputs_file:
        try:
            data = json.loads(Path(inputs_file).read_text(encoding="utf-8"))
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--inputs") from exc
        if not isinstance(data, dict):
            raise click.BadParameter("must hold a JSON object", param_hint="--inputs")
        values.update(data)
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--input")
        spec = (declared or {}).get(name)
        if spec is not None and spec.type == "string":
            values[name] = raw  # a declared string stays text, even when it looks like JSON
            continue
        try:
            values[name] = json.loads(raw)
        except ValueError:
            values[name] = raw  # not JSON: the text itself
    return values


def _print_result(result: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    elif result.error is None:
        out = result.output
        if isinstance(out, dict):
            for key, value in out.items():
                click.echo(f"{key}: {value if isinstance(value, str) else json.dumps(value)}")
        elif out is not None:
            click.echo(out if isinstance(out, str) else json.dumps(out, indent=2))
        click.echo(f"[run {result.run_id} completed in {len(result.steps)} steps]", err=True)
    else:
        e = result.error
        click.echo(f"error: {e.code}: {e.message} (step {e.step_id})", err=True)
        if e.hint:
            click.echo(f"hint: {e.hint}", err=True)
        click.echo(
            f"[run {result.run_id} failed; resume with: runtime resume {result.run_id}]", err=True
        )


def _progress(enabled: bool) -> tuple[Any, Any]:
    """An event listener drawing a status line on a terminal (never on a pipe)."""
    if not enabled:
        return None, None
    from rich.console import Console

    console = Console(stderr=True)
    status = console.status("starting")
    count = {"n": 0}

    def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "STEP":
            count["n"] += 1
            status.update(f"step {count['n']}: {event['step_id']} ({event.get('action')})")

    return on_event, status


def _run(engine_call: Any, as_json: bool) -> None:
    on_event, status = _progress(sys.stderr.isatty() and not as_json)
    if status is not None:
        with status:
            result = engine_call(on_event)
    else:
        result = engine_call(None)
    _print_result(result, as_json)
    sys.exit(0 if result.status == "completed" else 1)


def _load_or_exit(path: str) -> Any:
    from runtime.errors import PipelineInvalidError
    from runtime.format.diagnostics import render_text
    from runtime.format.validation import load_pipeline

    try:
        return load_pipeline(path)
    except PipelineInvalidError as exc:
        click.echo(render_text(exc.diagnostics), err=True)
        sys.exit(2)


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
    "--store",
    type=click.Path(dir_okay=False),
    help="Run store (default $RUNTIME_STORE or .runtime/runs.db).",
)
@click.option("--max-steps", type=click.IntRange(min=1), help="Override settings.max_steps.")
@click.option("--run-id", help="Id for the new run (default random).")
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
@handle_errors
def exec_(
    pipeline: str,
    input_pairs: tuple[str, ...],
    inputs_file: str | None,
    store: str | None,
    max_steps: int | None,
    run_id: str | None,
    index_path: str | None,
    model_spec: str | None,
    record_path: str | None,
    as_json: bool,
) -> None:
    """Validate and run PIPELINE (a file, or FILE#NAME for a pack member).

    Exit status: 0 completed, 1 failed, 2 invalid pipeline or usage error.
    """
    from runtime.engine import Engine
    from runtime.engine.services import Services
    from runtime.engine.store import SqliteRunStore

    loaded = _load_or_exit(pipeline)
    inputs = _parse_inputs(input_pairs, inputs_file, loaded.inputs)
    on_chunk = None
    if not as_json and sys.stdout.isatty():

        def on_chunk(text: str) -> None:
            click.echo(text, nl=False)

    services = Services(
        settings=loaded.settings,
        index_path=index_path,
        model_spec=model_spec,
        record_path=record_path,
        base_dir=str(loaded.base_dir),
        on_model_chunk=on_chunk,
    )
    engine = Engine(loaded, services=services, store=SqliteRunStore(store))
    _run(lambda ev: engine.run(inputs, run_id=run_id, max_steps=max_steps, on_event=ev), as_json)


@click.command()
@click.argument("run_id")
@click.option(
    "--store",
    type=click.Path(dir_okay=False),
    help="Run store (default $RUNTIME_STORE or .runtime/runs.db).",
)
@click.option("--force", is_flag=True, help="Resume even though the pipeline changed.")
@click.option("--index", "index_path", type=click.Path(dir_okay=False), help="Node index.")
@click.option("--model", "model_spec", help="Model spec, as for exec.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object with the run's result."
)
@handle_errors
def resume(
    run_id: str,
    store: str | None,
    force: bool,
    index_path: str | None,
    model_spec: str | None,
    as_json: bool,
) -> None:
    """Resume a crashed or failed run from its last checkpoint."""
    from runtime.engine import Engine
    from runtime.engine.services import Services
    from runtime.engine.store import SqliteRunStore

    run_store = SqliteRunStore(store)
    file = run_store.run_file(run_id)
    loaded = _load_or_exit(file)
    services = Services(
        settings=loaded.settings,
        index_path=index_path,
        model_spec=model_spec,
        base_dir=str(loaded.base_dir),
    )
    engine = Engine(loaded, services=services, store=run_store)
    _run(lambda ev: engine.resume(run_id, force=force, on_event=ev), as_json)
