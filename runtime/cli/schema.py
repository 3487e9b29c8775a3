"""`runtime schema`."""

from __future__ import annotations

import click

from runtime.cli._common import handle_errors


@click.command()
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True),
    help="Write the schema to this file instead of standard output.",
)
@handle_errors
def schema(output: str | None) -> None:
    """Print the pipeline JSON Schema (Draft 2020-12), generated from the registered actions."""
    from pathlib import Path

    from runtime.contract.registry import default_registry
    from runtime.format.schema import document_schema, render

    text = render(document_schema(default_registry()))
    if output:
        Path(output).write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)
