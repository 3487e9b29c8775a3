"""Shared CLI helpers: the edge where errors become output and exit codes."""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable
from typing import Any, TextIO, TypeVar

import click

from runtime.errors import StepRuntimeError

F = TypeVar("F", bound=Callable[..., Any])

# --store of the commands that read a run store already there (resume, runs, trace, verify,
# context); exec's --store, which may create one, has its own.
existing_store = click.option(
    "--store",
    type=click.Path(dir_okay=False),
    help="Run store: a file or postgresql://... (default $RUNTIME_STORE or .runtime/runs.db);"
    " it must exist.",
)


# Control characters (C0, DEL, C1) and bidi overrides: text the CLI prints can come from
# indexed files (a Markdown heading is a node id) or a model's reply, and a terminal would
# obey an escape in it (set its title, clear the screen, reorder a line). Shown, not obeyed.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def shown(text: str, *, lines: bool = True) -> str:
    """text with its control characters as visible escapes (\\x1b, \\u202e); with lines,
    line feeds and tabs stay as they are (an answer), else they are escaped too (a cell)."""
    pattern = _CONTROL_BUT_LINES if lines else _CONTROL
    return pattern.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def color_enabled(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


def handle_errors(func: F) -> F:
    """Turn a StepRuntimeError into `error: CODE message` on stderr and its exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except StepRuntimeError as exc:
            click.echo(f"error: {exc.code}: {exc.message}", err=True)
            if exc.hint:
                click.echo(f"hint: {exc.hint}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]
