"""`runtime runs` and `runtime trace`."""

from __future__ import annotations

import json
import time

import click

from runtime.cli._common import handle_errors


@click.command()
@click.option(
    "--store",
    type=click.Path(dir_okay=False),
    help="Run store (default $RUNTIME_STORE or .runtime/runs.db).",
)
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def runs(store: str | None, limit: int, as_json: bool) -> None:
    """List runs with status and timing, newest first."""
    from runtime.engine.store import SqliteRunStore

    rows = SqliteRunStore(store).runs(limit)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_at"]))
        err = f"  {r['error']['code']}" if r["error"] else ""
        click.echo(
            f"{r['run_id']:<14} {r['status']:<10} {started}  {r['seconds']:>8.3f}s "
            f"{r['steps']:>5} steps  {r['pipeline']}{err}"
        )


@click.command()
@click.argument("run_id")
@click.option("--store", type=click.Path(dir_okay=False), help="Run store.")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "jsonl"]), default="text", show_default=True
)
@handle_errors
def trace(run_id: str, store: str | None, fmt: str) -> None:
    """Show a run's trace events."""
    from runtime.engine import trace as tr
    from runtime.engine.store import SqliteRunStore

    events = SqliteRunStore(store).events(run_id)
    click.echo(tr.to_jsonl(events) if fmt == "jsonl" else tr.render_text(events), nl=fmt == "text")
