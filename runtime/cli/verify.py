"""`runtime verify`: recompute a run's provenance ledger from the stored rows."""

from __future__ import annotations

import json
import sys

import click

from runtime.cli._common import existing_store, handle_errors


@click.command()
@click.argument("run_id")
@existing_store
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@handle_errors
def verify(run_id: str, store: str | None, as_json: bool) -> None:
    """Check a run's record against its hash-chained provenance ledger.

    Recomputes every entry from the stored rows it covers (trace events, checkpoints,
    variables, pointers and their originals, context packs, the run's end) and names the
    first entry that does not match. With $RUNTIME_LEDGER_KEY set, every entry must be
    signed with that key. Exit 0: the record matches; 1: it does not (or the run has no
    ledger); other errors are coded (STORE_ERROR, RUN_NOT_FOUND, ...).
    """
    from runtime.engine.ledger import describe_report
    from runtime.engine.stores import open_run_store
    from runtime.errors import RunError
    from runtime.governance.ledger import key_from_env

    run_store = open_run_store(store, create=False)  # a missing file is refused
    report = run_store.verify_ledger(run_id, key_from_env())
    if report.entries == 0:
        raise RunError(
            f"run {run_id} has no provenance ledger (stored before the ledger, or with it off)",
            code="LEDGER_MISSING",
        )
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, default=_stored_text))
    else:
        click.echo(describe_report(report))
    if not report.ok:
        sys.exit(1)


def _stored_text(value: object) -> str:
    """A value a damaged row holds as bytes (an entry number edited to text), as text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
