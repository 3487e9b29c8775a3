"""`runtime validate` and `runtime lint`."""

from __future__ import annotations

import sys
from typing import Any

import click

from runtime.cli._common import color_enabled, handle_errors

FORMATS = ("text", "json", "github", "sarif")


def _run(
    paths: tuple[str, ...], fmt: str, strict: bool, only_pipelines: bool, locked: bool = False
) -> None:
    from runtime.format import diagnostics as d
    from runtime.format.validation import expand_paths, validate_paths

    # A named file that does not exist is a FILE_NOT_FOUND diagnostic in the chosen
    # format (the other files are still checked); only a folder without YAML is usage.
    files = expand_paths(list(paths))
    if not files:
        raise click.UsageError("no *.yaml or *.yml files found in the given paths")
    report = validate_paths(list(paths), only_pipelines=only_pipelines, locked=locked)
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
            click.echo(d.render_text(diags, color=color_enabled(sys.stdout)))
        else:
            skipped = (
                f", {len(report.skipped)} skipped (no pipeline root)" if report.skipped else ""
            )
            click.echo(f"{len(report.files)} file(s) valid{skipped}")
    failed = report.errors > 0 or (strict and report.warnings > 0)
    sys.exit(1 if failed else 0)


def _options(func: Any) -> Any:
    """The arguments and options validate and lint share."""
    func = click.option(
        "--only-pipelines",
        is_flag=True,
        help="Skip YAML files with no pipeline root (YAMLpipeline(s), extends, or steps "
        "naming actions), such as CI workflows; for hooks given every *.yaml file.",
    )(func)
    func = click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="text",
        show_default=True,
        help="Output format.",
    )(func)
    return click.argument("paths", nargs=-1, required=True, type=click.Path())(func)


@click.command()
@_options
@click.option("--strict", is_flag=True, help="Treat warnings as errors (exit 1).")
@click.option(
    "--locked",
    is_flag=True,
    help="Compare every pipeline with its lock file (<file>.lock.json): drift is LOCK_DRIFT "
    "and a missing lock LOCK_MISSING, as settings.compat_mode: locked does (docs/lock.md).",
)
@handle_errors
def validate(
    paths: tuple[str, ...], fmt: str, only_pipelines: bool, strict: bool, locked: bool
) -> None:
    """Validate pipeline files or folders (all *.yaml / *.yml), reporting every problem.

    A missing or empty file is an error (FILE_NOT_FOUND, YAML_NOT_A_PIPELINE); the
    other files are still checked. Exit status: 0 clean, 1 errors (or warnings with
    --strict), 2 usage error.
    """
    _run(paths, fmt, strict, only_pipelines, locked)


@click.command()
@_options
@handle_errors
def lint(paths: tuple[str, ...], fmt: str, only_pipelines: bool) -> None:
    """Validate with warnings as errors (the same as `validate --strict`)."""
    _run(paths, fmt, True, only_pipelines)
