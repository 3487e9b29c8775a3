"""`runtime validate` and `runtime lint`."""

from __future__ import annotations

import sys
from typing import Any

import click

from runtime.cli._common import handle_errors

FORMATS = ("text", "json", "github", "sarif")


def _run(paths: tuple[str, ...], fmt: str, strict: bool) -> None:
    from runtime.format import diagnostics as d
    from runtime.format.validation import expand_paths, validate_paths

    files = expand_paths(list(paths))
    if not files:
        raise click.UsageError("no *.yaml or *.yml files found in the given paths")
    report = validate_paths(list(paths))
    diags = report.diagnostics
    if fmt == "json":
        click.echo(d.render_json(diags, report.files))
    elif fmt == "github":
        if diags:
            click.echo(d.render_github(diags))
    elif fmt == "sarif":
        from importlib.metadata import version

        click.echo(d.render_sarif(diags, version=version("step-runtime")))
    else:
        if diags:
            click.echo(d.render_text(diags, color=sys.stdout.isatty()))
        else:
            click.echo(f"{len(report.files)} file(s) valid")
    failed = report.errors > 0 or (strict and report.warnings > 0)
    sys.exit(1 if failed else 0)


def _options(func: Any) -> Any:
    """The arguments and options validate and lint share."""
    func = click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="text",
        show_default=True,
        help="Output format.",
    )(func)
    return click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))(func)


@click.command()
@_options
@click.option("--strict", is_flag=True, help="Treat warnings as errors (exit 1).")
@handle_errors
def validate(paths: tuple[str, ...], fmt: str, strict: bool) -> None:
    """Validate pipeline files or folders (all *.yaml / *.yml), reporting every problem.

    Exit status: 0 clean, 1 errors (or warnings with --strict), 2 usage error.
    """
    _run(paths, fmt, strict)


@click.command()
@_options
@handle_errors
def lint(paths: tuple[str, ...], fmt: str) -> None:
    """Validate with warnings as errors (the same as `validate --strict`)."""
    _run(paths, fmt, True)
