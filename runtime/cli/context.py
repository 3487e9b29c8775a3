"""`runtime context RUN_ID`: the context packs of a run's model calls (docs/packs.md)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click

from runtime.cli._common import color_enabled, existing_store, handle_errors, shown


@click.command()
@click.argument("run_id")
@click.option("--step", "step_id", help="Only the packs of this step's model calls.")
@click.option("--json", "as_json", is_flag=True, help="Print the packs as a JSON array.")
@existing_store
@handle_errors
def context(run_id: str, step_id: str | None, as_json: bool, store: str | None) -> None:
    """Show what each model call of a run was shown, why, and what was left out."""
    from runtime.engine.stores import open_run_store
    from runtime.errors import UsageError

    opened = open_run_store(store, create=False)
    packs = opened.packs(run_id, step_id)
    if not packs and step_id is not None:
        steps = list(dict.fromkeys(p["step_id"] for p in opened.packs(run_id)))
        shown = repr(step_id)
        if len(step_id) > 200:  # a name pasted by mistake is not echoed whole
            shown = f"{step_id[:200]!r}… ({len(step_id):,} characters)"
        raise UsageError(
            f"run {run_id}: step {shown} made no model call; steps that did: "
            f"{', '.join(steps) or 'none'}"
        )
    if as_json:
        click.echo(json.dumps(packs, indent=1, ensure_ascii=False))
        return
    if not packs:
        click.echo(f"run {run_id}: no model calls, so no context packs")
        return
    render(packs, str(opened.path))


# Past this many packs, or off a terminal, the tables are plain text: rich takes ~20 ms a
# pack to lay out (a run of 1,000 model calls would take 20 s), plain text ~0.3 ms.
RICH_PACKS = 20


def render(packs: Sequence[Mapping[str, Any]], store: str = "?") -> None:
    """Each pack as its header, a section table, an item table and its drop report.

    Every pack's cells are made before any is printed: a stored pack of another shape (a
    damaged or hand-edited row) is STORE_ERROR naming it, not a traceback after half a listing.
    """
    cells = [_cells(pack, store) for pack in packs]
    if sys.stdout.isatty() and len(packs) <= RICH_PACKS:
        from rich.console import Console

        console = Console(no_color=not color_enabled(sys.stdout), highlight=False)
        for one in cells:
            for table in _tables(one):
                console.print(table)
            console.print()
        return
    out = sys.stdout
    for one in cells:
        for title, header, rows in one:
            out.write(title + "\n")
            if header:
                out.write(_lines(header, rows))
        out.write("\n")


Rows = list[tuple[str, ...]]
Cells = list[tuple[str, tuple[str, ...], Rows]]


def _cells(pack: Mapping[str, Any], store: str) -> Cells:
    """`plain(pack)`, or STORE_ERROR when the stored pack is not of the shape packs are written in."""
    try:
        return plain(pack)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        from runtime.errors import StoreError

        what = f"pack {pack.get('seq', '?')} of run {pack.get('run_id', '?')}"
        raise StoreError(
            f"run store {store}: {what}: not a context pack ({type(exc).__name__}: {exc}); "
            "`runtime context --json` prints it as stored (store damaged)"
        ) from exc


def plain(pack: Mapping[str, Any]) -> Cells:
    """The pack's header line and tables as (title, column names, rows) of strings."""
    t = pack.get("tokens") or {}
    head = (
        f"pack {pack.get('seq', '?')} {pack['pack_id']}  step {pack['step_id']}  "
        f"model {pack['model']}  prompt {t.get('prompt')} tokens "
        f"(+{t.get('tool_specs', 0)} tool specs; framing {t.get('framing')})  "
        f"budget {pack.get('prompt_budget')}  {pack['prompt_hash'][:23]}…"
    )
    verdicts = {a["section"]: a["verdict"] for a in pack.get("adherence") or ()}
    sections: Rows = []
    items: Rows = []
    for s in pack["sections"]:
        budget = "-" if s.get("budget") is None else f"{s['budget']} ({s['fraction']:g})"
        verdict = verdicts.get(s["type"], "ok")
        tokens = str(s["tokens"]) + ("" if verdict == "ok" else f" {verdict}")
        sections.append(
            (s["type"], budget, tokens, str(len(s.get("items") or ())), s.get("reason") or "")
        )
        for it in s.get("items") or ():
            score, ref = it.get("score"), it.get("summary_ref")
            items.append(
                (
                    s["type"],
                    str(it["id"]),
                    _source(it),
                    "-" if score is None else f"{score:.4g}",
                    str(it["tokens"]),
                    str(it.get("reason") or "-"),
                    ",".join(it.get("labels") or ()) or "-",
                    str(it.get("decision") or "-"),
                    ", ".join(ref) if isinstance(ref, list) else str(ref or "-"),
                )
            )
    d = pack.get("drops") or {}
    drops: Rows = []
    for r in d.get("items") or ():
        detail = ", ".join(
            f"{k} {v}" for k, v in r.items() if k not in ("id", "reason", "tokens_saved")
        )
        saved = r.get("tokens_saved")
        drops.append((str(r["id"]), r["reason"], "?" if saved is None else str(saved), detail))
    out: Cells = [
        (head, (), []),
        ("sections", SECTION_COLUMNS, sections),
        ("items", ITEM_COLUMNS, items),
        (_drop_title(d), DROP_COLUMNS, drops),
    ]
    if pack.get("items_omitted"):
        out.append((f"({pack['items_omitted']} more items not kept in the pack)", (), []))
    return [(_shown(t), h, [tuple(_shown(c) for c in r) for r in rows]) for t, h, rows in out]


def _shown(cell: str) -> str:
    """cell with its control characters, line feeds too, as visible escapes (an id or a
    query comes from indexed text: runtime/cli/_common.shown)."""
    return shown(cell, lines=False)


SECTION_COLUMNS = ("section", "budget", "tokens", "items", "reason")
ITEM_COLUMNS = (
    *("section", "id", "source", "score", "tokens"),
    *("reason", "labels", "decision", "summary"),
)
DROP_COLUMNS = ("id", "reason", "tokens saved", "by / detail")
NUMERIC = frozenset({"tokens", "score", "items", "tokens saved", "budget"})
WIDEST = 60  # a plain-text cell is cut (…) past this


def _drop_title(d: Mapping[str, Any]) -> str:
    return (
        f"drop report: {len(d.get('items') or ())} left out or shortened; "
        f"{d.get('tokens_accounted', 0)} of {d.get('tokens_removed', 0)} tokens removed "
        f"accounted for (coverage {d.get('coverage', 1.0):.0%})"
    )


def _lines(header: tuple[str, ...], rows: Rows) -> str:
    """Aligned columns, two spaces apart; numbers to the right; ids and the last column whole."""
    whole = {i for i, h in enumerate(header) if h == "id"} | {len(header) - 1}
    cut = [
        tuple(
            c if len(c) <= WIDEST or i in whole else c[: WIDEST - 1] + "…" for i, c in enumerate(r)
        )
        for r in rows
    ]
    widths = [max([len(h)] + [len(r[i]) for r in cut]) for i, h in enumerate(header)]
    out = []
    for r in [header, *cut]:
        cells = [
            c.rjust(w) if h in NUMERIC else c.ljust(w)
            for c, w, h in zip(r, widths, header, strict=True)
        ]
        out.append("  ".join(cells).rstrip() + "\n")
    return "".join(out)


def tables(pack: Mapping[str, Any]) -> list[Any]:
    """The rich renderables of one pack (the same cells as `plain`)."""
    return _tables(plain(pack))


def _tables(cells: Cells) -> list[Any]:
    from rich.table import Table
    from rich.text import Text

    out: list[Any] = []
    for title, header, rows in cells:
        if not header:
            out.append(Text(title))
            continue
        table = Table(title=title, title_justify="left")
        for column in header:
            table.add_column(column, justify="right" if column in NUMERIC else "left")
        for row in rows:
            table.add_row(*(Text(c) for c in row))  # Text: no markup read from an id
        out.append(table)
    return out


def _source(item: Mapping[str, Any]) -> str:
    """An item's source, with its retriever and query when it was retrieved."""
    ev = item.get("evidence")
    if not ev:
        return str(item.get("source"))
    query = ev.get("query") if ev.get("retriever") != "graph" else None
    tail = f": {query}" if query else ""
    return f"{item.get('source')} ({ev.get('retriever')}{tail})"
