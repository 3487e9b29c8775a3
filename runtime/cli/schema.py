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
@click.option(
    "--cases", is_flag=True, help="The schema of runtime eval's cases files instead (docs/eval.md)."
)
@handle_errors
def schema(output: str | None, cases: bool) -> None:
    """Print the pipeline JSON Schema (Draft 2020-12), generated from the registered actions."""
    from pathlib import Path

    from runtime.format.schema import render

    if cases:
        from runtime.eval.cases import cases_schema

        text = render(cases_schema())
    else:
        from runtime.contract.registry import default_registry
        from runtime.format.schema import document_schema

        text = render(document_schema(default_registry()))
    if output:
        Path(output).write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)
