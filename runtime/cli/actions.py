"""`runtime actions`."""

from __future__ import annotations

import json

import click

from runtime.cli._common import handle_errors


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def actions(as_json: bool) -> None:
    """List the registered actions, where each comes from and whether it can run."""
    from runtime.contract.registry import default_registry

    rows = []
    for info in default_registry().infos():
        cls = info.cls
        rows.append(
            {
                "name": info.name,
                "source": info.source,
                "runnable": bool(cls and cls.runnable),
                "summary": cls.summary if cls else "",
                "error": info.error,
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        status = "runnable" if r["runnable"] else ("FAILED" if r["error"] else "schema only")
        click.echo(f"{r['name']:<28} {r['source']:<12} {status:<12} {r['summary'] or r['error']}")
