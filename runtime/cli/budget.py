"""`runtime budget`: the worst-case prompt envelope of every model step, before a run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from runtime.cli._common import color_enabled, handle_errors

# Problems that leave the envelope computable: the budget checks' own findings.
_OWN = frozenset(
    {
        "BUDGET_IMPOSSIBLE",
        "BUDGET_MAY_OVERFLOW",
        "BUDGET_POLICY_CANNOT_FIT",
        "POLICY_BUDGET_UNDER_FLOOR",
    }
)


@click.command()
@click.argument("pipeline", type=str)
@click.option("--json", "as_json", is_flag=True, help="Print the envelopes as JSON.")
@handle_errors
def budget(pipeline: str, as_json: bool) -> None:
    """Show each model step's prompt envelope against its model's window (PIPELINE may be FILE#NAME).

    Fixed parts (system prompt, templates, framing) are counted with the model's own
    tokenizer; bounded parts at their bound; unbounded parts named; a step's context policy
    with its budget, reserve and floor. Exit status: 0, or 1 when a step can never fit
    (BUDGET_IMPOSSIBLE, BUDGET_POLICY_CANNOT_FIT) or the pipeline is invalid.
    """
    from runtime.contract.registry import default_registry
    from runtime.format import diagnostics as d
    from runtime.format.budget import envelopes
    from runtime.format.validation import validate_paths

    path, name = pipeline, None
    if "#" in pipeline and not Path(pipeline).exists():
        path, _, name = pipeline.partition("#")
    report = validate_paths([path])
    blocking = [x for x in report.diagnostics if x.severity == "error" and x.code not in _OWN]
    chosen = [p for p in report.pipelines if name is None or p.name == name]
    if blocking or not chosen:
        if blocking:
            click.echo(d.render_text(blocking, color=color_enabled(sys.stderr)), err=True)
        else:
            click.echo(f"error: no pipeline {name or ''} in {path}".rstrip(), err=True)
        sys.exit(1)
    if len(chosen) > 1:
        names = ", ".join(p.name for p in chosen)
        raise click.UsageError(f"{path} holds several pipelines ({names}); use {path}#NAME")
    loaded = chosen[0]
    found = envelopes(
        [s.config for s in loaded.steps],
        loaded.settings,
        default_registry(),
        loaded,
        loaded.raw.get("inputs"),
        base_dir=str(loaded.base_dir),
    )
    if as_json:
        click.echo(json.dumps([b.to_dict() for b in found], indent=2))
    else:
        _table(found, loaded.name)
    sys.exit(1 if any(b.status == "impossible" or b.policy_cannot_fit for b in found) else 0)


def _table(found: list[Any], title: str) -> None:
    """One row per model step, then each step's parts (rich, imported only here)."""
    from rich.console import Console
    from rich.table import Table

    # A pipe gets a fixed width, not rich's 80 columns: the rows stay whole in a log.
    width = None if sys.stdout.isatty() else 120
    console = Console(
        no_color=not color_enabled(sys.stdout), highlight=False, soft_wrap=True, width=width
    )
    if not found:
        console.print(f"{title}: no model steps")
        return
    table = Table(title=f"{title}: prompt envelopes (tokens)")
    columns = ("step", "model", "window", "fixed", "output", "bounded max", "policy", "status")
    for column in columns:
        table.add_column(column, justify="right" if column in _NUMERIC else "left")
    for b in found:
        status = f"{len(b.unbounded)} unbounded" if b.status == "unbounded" else b.status
        table.add_row(
            b.step_id,
            b.model,
            str(b.window),
            str(b.fixed_tokens),
            str(b.output_tokens),
            str(b.bounded_maximum),
            _policy_cell(b.policy),
            ("policy cannot fit" if b.policy_cannot_fit else status)
            + (f" ({b.guard})" if b.guard and b.status != "fits" else ""),
        )
    console.print(table)
    for b in found:
        for p in b.parts:
            size = "unbounded" if p.tokens is None else f"<= {p.tokens}"
            keep = "" if p.summarisable or b.policy is None else " (never summarised)"
            console.print(f"  {b.step_id}: {p.label} {size}{keep}: {p.why}", markup=False)
        if b.policy is not None and b.policy["enabled"]:
            console.print(
                f"  {b.step_id}: the policy may not summarise <= {b.unsummarisable_maximum} of "
                f"its {b.policy['budget']}-token budget",
                markup=False,
            )


def _policy_cell(policy: dict[str, Any] | None) -> str:
    """budget/reserve/floor of a step's context policy; - without one."""
    if policy is None:
        return "-"
    cell = f"{policy['budget']}/{policy['reserve']}/{policy['floor']}"
    return cell + (" dry run" if policy["dry_run"] else "" if policy["enabled"] else " off")


_NUMERIC = frozenset({"window", "fixed", "output", "bounded max"})
