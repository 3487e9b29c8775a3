"""The `runtime` command group. Commands load lazily so `runtime --help` stays instant."""

from __future__ import annotations

import importlib
from typing import Any

import click

# name -> (module, attribute, one-line help). The help lives here so listing the
# commands imports none of them.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "validate": (
        "runtime.cli.validate",
        "validate",
        "Validate pipeline files (all problems at once).",
    ),
    "lint": (
        "runtime.cli.validate",
        "lint",
        "Validate with warnings as errors (validate --strict).",
    ),
    "schema": ("runtime.cli.schema", "schema", "Print the pipeline JSON Schema."),
    "graph": ("runtime.cli.graph", "graph", "Draw a pipeline's step graph (mermaid or dot)."),
    "budget": (
        "runtime.cli.budget",
        "budget",
        "Show each model step's worst-case prompt against its model's window.",
    ),
    "actions": (
        "runtime.cli.actions",
        "actions",
        "List the registered actions and where they come from.",
    ),
    "lock": (
        "runtime.cli.lock",
        "lock",
        "Freeze what a pipeline does in a lock file, or check it for drift.",
    ),
    "explain": ("runtime.cli.explain", "explain", "Explain an error or diagnostic code."),
    "exec": ("runtime.cli.run", "exec_", "Run a pipeline."),
    "resume": (
        "runtime.cli.run",
        "resume",
        "Resume a crashed or failed run from its last checkpoint.",
    ),
    "serve": (
        "runtime.cli.serve",
        "serve",
        "Serve pipelines over HTTP: OpenAI-compatible chat, a runs API, the run inspector.",
    ),
    "runs": ("runtime.cli.runs", "runs", "List runs in the run store."),
    "submit": (
        "runtime.cli.worker",
        "submit",
        "Queue a run for the workers of a Postgres store; print its id.",
    ),
    "worker": (
        "runtime.cli.worker",
        "worker",
        "Execute runs queued in a Postgres store (--concurrency N).",
    ),
    "store": (
        "runtime.cli.store",
        "store",
        "Migrate a run store, or copy one between SQLite and Postgres (verified).",
    ),
    "trace": ("runtime.cli.runs", "trace", "Show a run's trace."),
    "context": (
        "runtime.cli.context",
        "context",
        "Show what each model call of a run was shown, and what was left out.",
    ),
    "verify": (
        "runtime.cli.verify",
        "verify",
        "Check a run's record against its hash-chained provenance ledger.",
    ),
    "inspect": ("runtime.cli.inspect", "inspect", "Show what the runtime sees in a source file."),
    "index": ("runtime.cli.index", "index", "Index source trees into the node store."),
    "search": ("runtime.cli.index", "search", "Search the node store."),
    # issue 27
    "memories": (
        "runtime.cli.memories",
        "memories",
        "Import and search memories and experiences.",
    ),
    "feedback": (
        "runtime.cli.memories",
        "feedback",
        "Set how a run went: its experience's confidence tier.",
    ),
    "values": (
        "runtime.cli.memories",
        "values",
        "Rebuild the values clustered from experiences' lessons.",
    ),
    # issue 30
    "eval": (
        "runtime.cli.eval",
        "eval_",
        "Measure a pipeline on evaluation cases: evidence, facts, context rot, position.",
    ),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(entry[0])
        command: click.Command = getattr(module, entry[1])
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_) for name, (_, _, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="step-runtime", prog_name="runtime")
def cli() -> None:
    """step-runtime: declarative YAML pipelines for context-engineered LLM apps."""


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point."""
    return cli.main(args=argv, prog_name="runtime")
