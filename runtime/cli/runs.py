"""`runtime runs` and `runtime trace`."""

from __future__ import annotations

import difflib
import json
import time
from typing import Any

import click

from runtime.cli._common import existing_store, handle_errors

# interrupted: left running by a process that is gone (runtime/engine/owner.py); queued:
# submitted to a Postgres store's workers and not started yet (runtime/engine/workers.py)
STATUSES = ("queued", "running", "interrupted", "completed", "failed")


@click.command()
@existing_store
@click.option("--status", type=click.Choice(STATUSES), help="Only runs with this status.")
@click.option("--pipeline", help="Only runs of the pipeline with this name.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def runs(
    store: str | None, status: str | None, pipeline: str | None, limit: int, as_json: bool
) -> None:
    """List runs with status and timing, newest first."""
    from runtime.engine.stores import open_run_store

    run_store = open_run_store(store, create=False)
    rows = run_store.runs(limit, status=status, pipeline=pipeline)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        what = " ".join(f"--{k} {v}" for k, v in (("status", status), ("pipeline", pipeline)) if v)
        click.echo(f"no runs{' match ' + what if what else ''} in {run_store.path}", err=True)
        return
    id_width = max(len("RUN ID"), *(len(r["run_id"]) for r in rows))
    name_width = max(len("PIPELINE"), *(len(str(r["pipeline"])) for r in rows))
    # The model of calls that name none (--model, else the pipeline's); "-": not recorded.
    models = {r["run_id"]: r.get("model") or "-" for r in rows}
    model_width = max(len("MODEL"), *(len(m) for m in models.values()))
    # a running run's worker, on a Postgres store with workers: "running (host:pid)"
    shown = {
        r["run_id"]: r["status"] + (f" ({r['worker']})" if r.get("worker") else "") for r in rows
    }
    sw = max(9, *(len(v) for v in shown.values()))  # status width
    header = (
        f"{'RUN ID':<{id_width}}  {'STATUS':<{sw}}  {'STARTED':<19}  {'SECONDS':>9}  "
        f"{'STEPS':>5}  {'PIPELINE':<{name_width}}  {'MODEL':<{model_width}}  ERROR"
    )
    click.echo(header)
    for r in rows:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_at"]))
        err = r["error"]["code"] if r["error"] else ""
        line = (
            f"{r['run_id']:<{id_width}}  {shown[r['run_id']]:<{sw}}  {started:<19}  "
            f"{r['seconds']:>9.3f}  "
            f"{r['steps']:>5}  {r['pipeline']!s:<{name_width}}  "
            f"{models[r['run_id']]:<{model_width}}  {err}"
        )
        click.echo(line.rstrip())
    where = f" --store {store}" if store else ""
    for r in rows:
        if r["status"] == "interrupted":
            click.echo(
                f"run {r['run_id']} was left running by a process that is gone; resume with: "
                f"runtime resume {r['run_id']}{where}",
                err=True,
            )


@click.command()
@click.argument("run_id")
@existing_store
@click.option(
    "--format", "fmt", type=click.Choice(["text", "jsonl"]), default="text", show_default=True
)
@click.option("--step", "step_id", help="Only the events of this step.")
@click.option(
    "--messages",
    is_flag=True,
    help="Print the exact messages each model call sent, verbatim (with --step: its calls); "
    "a tool-call turn lists each call's tool and arguments, a tool result names its call.",
)
@click.option("--full", is_flag=True, help="Print values whole (text listing cuts them at 80).")
@click.option(
    "--pointers",
    is_flag=True,
    help="Export the originals behind the run's context pointers (jsonl: with their text) "
    "and its thread compaction maps (docs/budget.md).",
)
@click.option(
    "--threads",
    is_flag=True,
    help="Print the run's conversation threads as checkpointed (docs/fidelity.md), and the "
    "fidelity of each model call.",
)
@click.option(
    "--branches",
    "show_branches",
    is_flag=True,
    help="Show the run's map and parallel branches side by side in time (jsonl: their "
    "BRANCH events).",
)
@click.option(
    "--branch",
    "branch_key",
    metavar="KEY",
    help="The events of one branch run (its key, or STEP.KEY) instead of the run's.",
)
@handle_errors
def trace(
    run_id: str,
    store: str | None,
    fmt: str,
    step_id: str | None,
    messages: bool,
    full: bool,
    pointers: bool,
    threads: bool = False,
    show_branches: bool = False,
    branch_key: str | None = None,
) -> None:
    """Show a run's trace events, or the exact prompts its model calls sent."""
    from runtime.engine import trace as tr
    from runtime.engine.stores import open_run_store

    opened = open_run_store(store, create=False)
    events = opened.events(run_id)
    if show_branches or branch_key is not None:
        from runtime.cli import _branch_view as view

        if show_branches:
            shown = view.branch_events(events)
            click.echo(tr.to_jsonl(shown) if fmt == "jsonl" else view.timeline(events), nl=False)
            return
        # the branch's own runs (a step visited again in a loop ran it again)
        events = [
            e for rid in view.branch_runs(events, str(branch_key)) for e in opened.events(rid)
        ]
    if pointers:
        click.echo(_render_pointers(opened, run_id, events, fmt), nl=False)
        return
    if threads:
        click.echo(_render_threads(opened.threads(run_id), events, fmt, full), nl=False)
        return
    if step_id is not None:
        events = _of_step(events, run_id, step_id)
    if messages:
        # A prompt the budget policy rejected is kept on its decision (docs/budget.md).
        calls = [
            e
            for e in events
            if e["type"] == "MODEL_CALL"
            or (e["type"] == "CONTEXT_BUDGET_DECISION" and "messages" in e)
        ]
        if not calls:
            from runtime.errors import UsageError

            where = f"step {step_id!r}" if step_id else "it"
            raise UsageError(f"run {run_id}: {where} made no model call")
        if fmt == "jsonl":
            keys = ("run_id", "seq", "step_id", "model", "messages")
            click.echo(tr.to_jsonl({k: c.get(k) for k in keys} for c in calls), nl=False)
        else:
            click.echo(_render_messages(calls), nl=False)
        return
    if fmt == "jsonl":
        click.echo(tr.to_jsonl(events), nl=False)
    else:
        click.echo(tr.render_text(events, width=None if full else 80))


def _render_pointers(store: Any, run_id: str, events: list[dict[str, Any]], fmt: str) -> str:
    """A run's pointers (jsonl: with the original text) and its thread compaction maps."""
    from runtime.context.pointers import export
    from runtime.engine import trace as tr

    rows = export(store, run_id, with_text=fmt == "jsonl")
    compactions = [e for e in events if e["type"] == "THREAD_COMPACTED"]
    if fmt == "jsonl":
        maps = [
            {"type": "compaction", "step_id": e["step_id"], "seq": e["seq"], **entry}
            for e in compactions
            for entry in e.get("map") or []
        ]
        return tr.to_jsonl([{"type": "pointer", **r} for r in rows] + maps)
    out = [f"{len(rows)} pointer(s) in run {run_id}\n"]
    out += [
        f"{r['pointer_id']}  {r['kind']:<8} {r['chars']:>10,} chars  sha256 {r['sha256']}\n"
        for r in rows
    ]
    for e in compactions:
        for entry in e.get("map") or []:
            out.append(
                f"compacted at event {e['seq']} ({e['step_id']}): message {entry['index']} "
                f"({entry['role']}) -> {entry['pointer_id']}, {entry['tokens_before']} -> "
                f"{entry['tokens_after']} tokens\n"
            )
    return "".join(out)


def _render_threads(
    threads: dict[str, list[dict[str, Any]]], events: list[dict[str, Any]], fmt: str, full: bool
) -> str:
    """Each model call's fidelity, thread and preamble tokens, then each thread's messages."""
    from runtime.engine import trace as tr

    calls = [e for e in events if e["type"] == "MODEL_CALL"]
    keys = ("fidelity", "fidelity_from", "thread_id", "thread_messages", "preamble_tokens")
    if fmt == "jsonl":
        rows: list[dict[str, Any]] = [
            {"type": "call", "seq": c["seq"], "step_id": c["step_id"], "degraded": None}
            | {k: c.get(k) for k in keys}
            | ({"degraded": c["degraded"]} if "degraded" in c else {})
            for c in calls
        ]
        rows += [
            {"type": "message", "thread_id": tid, "n": n, **m}
            for tid, messages in threads.items()
            for n, m in enumerate(messages)
        ]
        return tr.to_jsonl(rows)
    out = []
    for c in calls:
        mode = c.get("fidelity") or "-"
        where = (
            f"thread {c['thread_id']} ({c.get('thread_messages')} before)"
            if c.get("thread_id")
            else f"preamble {c.get('preamble_tokens')}/{c.get('preamble_budget')} tokens"
        )
        if mode == "-":
            where = "no fidelity declared"
        degraded = (
            f"  degraded {c['degraded']['from']} -> {c['degraded']['to']}"
            if c.get("degraded")
            else ""
        )
        out.append(f"{c['seq']:>5} {c['step_id']:<22} {mode:<15} {where}{degraded}\n")
    for tid, messages in threads.items():
        out.append(f"\nthread {tid}: {len(messages)} message(s)\n")
        for n, m in enumerate(messages):
            text = m.get("content") or ""
            shown = text if full else " ".join(text.split())[:100]
            out.append(f"  {n:>4} {m.get('role', '?'):<9} {shown}\n")
    return "".join(out)


def _of_step(events: list[dict[str, Any]], run_id: str, step_id: str) -> list[dict[str, Any]]:
    """The events of one step; USAGE naming the steps that ran when it did not run."""
    from runtime.errors import UsageError

    chosen = [e for e in events if e.get("step_id") == step_id]
    if chosen:
        return chosen
    ran = list(dict.fromkeys(e["step_id"] for e in events if e.get("step_id")))
    near = difflib.get_close_matches(step_id, ran, n=1)
    raise UsageError(
        f"run {run_id}: step {step_id!r} did not run; steps that ran: {', '.join(ran) or 'none'}"
        + (f"; did you mean {near[0]!r}?" if near else "")
    )


def _render_messages(calls: list[dict[str, Any]]) -> str:
    """Each call's messages, content verbatim between plain separator lines."""
    out = []
    for n, call in enumerate(calls, 1):
        about = ", ".join(
            f"{label} {call[key]}"
            for label, key in (
                ("event", "seq"),
                ("model", "model"),
                ("prompt tokens", "prompt_tokens"),
            )
            if call.get(key) is not None
        )
        what = "rejected prompt, not sent" if call["type"] != "MODEL_CALL" else "model call"
        out.append(f"=== {call['step_id']}: {what} {n} of {len(calls)} ({about}) ===\n")
        names: dict[str, str] = {}  # tool call id -> tool name, to label the results
        for i, message in enumerate(call.get("messages") or [], 1):
            out.append(f"--- message {i}: {_turn(message, names)} ---\n")
            content = message.get("content")
            if content is not None or not message.get("tool_calls"):
                text = "" if content is None else str(content)
                out.append(text if text.endswith("\n") else text + "\n")
            for c in message.get("tool_calls") or ():
                fn = c.get("function") or {}
                out.append(f"tool call {c.get('id')}: {fn.get('name')} {fn.get('arguments')}\n")
    return "".join(out)


def _turn(message: dict[str, Any], names: dict[str, str]) -> str:
    """A message's label: its role, with its tool calls counted or the call a result answers."""
    role = str(message.get("role"))
    calls = message.get("tool_calls") or []
    for c in calls:
        names[str(c.get("id"))] = str((c.get("function") or {}).get("name"))
    if calls:
        return f"{role} ({len(calls)} tool call{'s' if len(calls) > 1 else ''})"
    answered = message.get("tool_call_id")
    if role == "tool" and answered is not None:
        return f"tool (result of {answered}: {names.get(str(answered), 'unknown tool')})"
    return role
