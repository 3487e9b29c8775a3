"""`runtime context RUN_ID`: the context packs of a run's model calls (docs/packs.md)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click

from runtime.cli._common import color_enabled, handle_errors


@click.command()
@click.argument("run_id")
@click.option("--step", "step_id", help="Only the packs of this step's model calls.")
@click.option("--json", "as_json", is_flag=True, help="Print the packs as a JSON array.")
@click.option(
    "--store",
    type=click.Path(dir_okay=False),
    help="Run store (default $RUNTIME_STORE or .runtime/runs.db); it must exist.",
)
@handle_errors
def context(run_id: str, step_id: str | None, as_json: bool, store: str | None) -> None:
    """Show what each model call of a run was shown, why, and what was left out."""
    from runtime.engine.store import SqliteRunStore
    from runtime.errors import UsageError

    opened = SqliteRunStore(store, create=False)
    packs = opened.packs(run_id, step_id)
    if not packs and step_id is not None:
        steps = list(dict.fromkeys(p["step_id"] for p in opened.packs(run_id)))
        raise UsageError(
            f"run {run_id}: step {step_id!r} made no model call; steps that did: "
            f"{', '.join(steps) or 'none'}"
        )
    if as_json:
        click.echo(json.dumps(packs, indent=1, ensure_ascii=False))
        return
    if not packs:
        click.echo(f"run {run_id}: no model calls, so no context packs")
        return
    render(packs)


def render(packs: Sequence[Mapping[str, Any]]) -> None:
    """Each pack as a section table, an item table and its drop report (rich)."""
    from rich.console import Console

    # A pipe gets a fixed width, not rich's 80 columns: the rows stay whole in a log.
    width = None if sys.stdout.isatty() else 160
    console = Console(
        no_color=not color_enabled(sys.stdout), highlight=False, soft_wrap=False, width=width
    )
    for pack in packs:
        for table in tables(pack):
            console.print(table)
        console.print()


def tables(pack: Mapping[str, Any]) -> list[Any]:
    """The rich renderables of one pack: header, sections, items, drops."""
    from rich.table import Table
    from rich.text import Text

    t = pack.get("tokens") or {}
    head = Text(
        f"pack {pack.get('seq', '?')} {pack['pack_id']}  step {pack['step_id']}  "
        f"model {pack['model']}  prompt {t.get('prompt')} tokens "
        f"(+{t.get('tool_specs', 0)} tool specs; framing {t.get('framing')})  "
        f"budget {pack.get('prompt_budget')}  {pack['prompt_hash'][:23]}…"
    )
    sections = Table(title="sections", title_justify="left")
    for column in ("section", "budget", "tokens", "items", "reason"):
        sections.add_column(column, justify="right" if column in ("budget", "tokens") else "left")
    verdicts = {a["section"]: a["verdict"] for a in pack.get("adherence") or ()}
    for s in pack["sections"]:
        budget = "-" if s.get("budget") is None else f"{s['budget']} ({s['fraction']:g})"
        tokens = str(s["tokens"]) + (
            f" {verdicts[s['type']]}" if verdicts.get(s["type"], "ok") != "ok" else ""
        )
        sections.add_row(
            s["type"], budget, tokens, str(len(s.get("items") or ())), Text(s.get("reason") or "")
        )
    items = Table(title="items", title_justify="left")
    columns = ("section", "id", "source", "score", "tokens", "reason", "labels", "decision")
    for column in (*columns, "summary"):
        items.add_column(column, justify="right" if column in ("score", "tokens") else "left")
    for s in pack["sections"]:
        for it in s.get("items") or ():
            score = it.get("score")
            ref = it.get("summary_ref")
            items.add_row(
                s["type"],
                Text(str(it["id"])),
                Text(_source(it)),
                "-" if score is None else f"{score:.4g}",
                str(it["tokens"]),
                Text(str(it.get("reason") or "-")),
                Text(",".join(it.get("labels") or ()) or "-"),
                Text(str(it.get("decision") or "-")),
                Text(", ".join(ref) if isinstance(ref, list) else str(ref or "-")),
            )
    d = pack.get("drops") or {}
    drops = Table(
        title=f"drop report: {len(d.get('items') or ())} left out or shortened; "
        f"{d.get('tokens_accounted', 0)} of {d.get('tokens_removed', 0)} tokens removed "
        f"accounted for (coverage {d.get('coverage', 1.0):.0%})",
        title_justify="left",
    )
    for column in ("id", "reason", "tokens saved", "by / detail"):
        drops.add_column(column, justify="right" if column == "tokens saved" else "left")
    for r in d.get("items") or ():
        detail = ", ".join(
            f"{k} {v}" for k, v in r.items() if k not in ("id", "reason", "tokens_saved")
        )
        saved = r.get("tokens_saved")
        drops.add_row(
            Text(str(r["id"])), r["reason"], "?" if saved is None else str(saved), Text(detail)
        )
    out: list[Any] = [head, sections, items, drops]
    if pack.get("items_omitted"):
        out.append(Text(f"({pack['items_omitted']} more items not kept in the pack)"))
    return out


def _source(item: Mapping[str, Any]) -> str:
    """An item's source, with its retriever and query when it was retrieved."""
    ev = item.get("evidence")
    if not ev:
        return str(item.get("source"))
    query = ev.get("query") if ev.get("retriever") != "graph" else None
    tail = f": {query}" if query else ""
    return f"{item.get('source')} ({ev.get('retriever')}{tail})"
