"""`runtime store migrate|copy`: a run store's schema, and moving one between backends."""

from __future__ import annotations

import json

import click

from runtime.cli._common import handle_errors


@click.group()
def store() -> None:
    """Migrate a run store, or copy one between SQLite and Postgres (issue 34)."""


@store.command("migrate")
@click.argument("location")
@handle_errors
def migrate(location: str) -> None:
    """Bring the run store at LOCATION (a file or postgresql://...) to the current schema.

    Creates it when missing. Migrations are ordered and named, each applied once and
    recorded; on Postgres under an advisory lock, so several processes may run this at
    once. Prints the migrations applied, or that none was needed.
    """
    from runtime.engine import pgstore
    from runtime.engine.stores import open_run_store

    if pgstore.is_url(location):
        opened = open_run_store(location)
        applied = list(getattr(opened, "applied", []))
        total = len(pgstore.MIGRATIONS)
    else:
        import sqlite3
        from pathlib import Path

        from runtime.engine.store import MIGRATIONS

        def done() -> set[str]:
            if not Path(location).is_file():
                return set()
            db = sqlite3.connect(location)
            try:
                return {r[0] for r in db.execute("SELECT name FROM migrations")}
            except sqlite3.Error:
                return set()
            finally:
                db.close()

        before = done()
        opened = open_run_store(location)
        applied = [name for name, _ in MIGRATIONS if name not in before]
        total = len(MIGRATIONS)
    opened.close()
    if applied:
        click.echo(f"{opened.path}: applied {len(applied)} migration(s): {', '.join(applied)}")
    else:
        click.echo(f"{opened.path}: up to date ({total} migrations)")


@store.command("copy")
@click.argument("source")
@click.argument("target")
@click.option(
    "--what",
    default="runs",
    show_default=True,
    help="What to copy: runs (the run store) or another registered store (index, memories).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the per-table report as JSON.")
@handle_errors
def copy(source: str, target: str, what: str, as_json: bool) -> None:
    """Copy the store at SOURCE into TARGET (each a file or postgresql://...), verified.

    Every table is copied in one transaction of the target, then read back from both
    sides and compared by row count and SHA-256; a difference rolls the copy back
    (STORE_COPY_MISMATCH). The target must hold no runs. The source is not changed.
    """
    from runtime.engine.storecopy import copier

    report = copier(what)(source, target)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    rows = sum(t.rows for t in report.tables)
    click.echo(
        f"copied {report.source} -> {report.target}: {rows} rows in {len(report.tables)} tables, verified"
    )
    for t in report.tables:
        if t.rows:
            click.echo(f"  {t.table}: {t.rows} rows, sha256 {t.sha256[:16]}")
