"""`runtime explain`."""

from __future__ import annotations

import click

from runtime.cli._common import handle_errors


@click.command()
@click.argument("code")
@handle_errors
def explain(code: str) -> None:
    """Explain an error or diagnostic code (see docs/errors.md for the table)."""
    from runtime import codes
    from runtime.format.checks import did_you_mean

    entry = codes.CODES.get(code.upper())
    if entry is None:
        hint = did_you_mean(code.upper(), list(codes.CODES))
        raise click.UsageError(f"unknown code {code!r}" + (f"; {hint}" if hint else ""))
    click.echo(f"{entry.name} ({entry.category})")
    click.echo(f"  {entry.summary}")
    if entry.hint:
        click.echo(f"  hint: {entry.hint}")
