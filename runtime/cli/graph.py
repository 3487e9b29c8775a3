"""`runtime graph`."""

from __future__ import annotations

import click

from runtime.cli._common import handle_errors


@click.command()
@click.argument("pipeline", type=str)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mermaid", "dot"]),
    default="mermaid",
    show_default=True,
    help="Graph language.",
)
@handle_errors
def graph(pipeline: str, fmt: str) -> None:
    """Draw a pipeline's step graph with labelled branches (PIPELINE may be FILE#NAME)."""
    from runtime.contract.registry import default_registry
    from runtime.format.graph import to_dot, to_mermaid
    from runtime.format.validation import load_pipeline

    loaded = load_pipeline(pipeline, for_execution=False)
    registry = default_registry()
    click.echo(to_mermaid(loaded, registry) if fmt == "mermaid" else to_dot(loaded, registry))
