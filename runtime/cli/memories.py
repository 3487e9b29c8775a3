"""`runtime memories`, `runtime feedback` and `runtime values`: the memory store by hand."""

from __future__ import annotations

import json
from typing import Any

import click

from runtime.cli._common import existing_store, handle_errors, shown

memories_option = click.option(
    "--memories",
    "memory_path",
    type=click.Path(dir_okay=False),
    help="Memory store: a file or postgresql://... (default $RUNTIME_MEMORIES, else "
    "memories.db beside the index, or a postgresql:// index's database).",
)
index_option = click.option(
    "--index",
    "index_path",
    type=click.Path(dir_okay=False),
    help="Node index the default memory store sits beside (default $RUNTIME_INDEX or "
    ".runtime/index.db).",
)


def _writer(memory_path: str | None, index_path: str | None) -> Any:
    from runtime.retrieval.memories import open_memory_store

    return open_memory_store(memory_path, index_path=index_path, create=True)


def _scrubber() -> Any:
    from runtime.models.guard import scrubber_for

    return scrubber_for({})


@click.group()
def memories() -> None:
    """Import and search memories and experiences."""


@memories.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@memories_option
@index_option
@click.option("--json", "as_json", is_flag=True, help="Print {memories, experiences}.")
@handle_errors
def import_(file: str, memory_path: str | None, index_path: str | None, as_json: bool) -> None:
    """Store the memories and experiences of a seed file (JSON or JSON Lines).

    Every item is validated first; one bad item stores nothing (MEMORY_INVALID names the
    file and the item). An item whose id is stored already replaces it.
    """
    from runtime.retrieval.memory_io import import_seed_file

    store = _writer(memory_path, index_path)
    done = import_seed_file(store, file, scrub=_scrubber())
    if as_json:
        click.echo(json.dumps(done))
    else:
        click.echo(
            f"stored {done['memories']} memory(ies) and {done['experiences']} "
            f"experience(s) -> {store.path}"
        )


@memories.command("search")
@click.argument("query")
@click.option(
    "--kind",
    type=click.Choice(["memories", "experiences", "values"]),
    default="memories",
    show_default=True,
)
@click.option(
    "--axis",
    type=click.Choice(["full", "strategy", "surprise", "root_cause"]),
    default="full",
    show_default=True,
    help="Experience axis.",
)
@click.option("--filter", "filters", multiple=True, help="Experience filter KEY=VALUE.")
@click.option("--label", "labels", multiple=True, help="A label the caller may see (repeatable).")
@click.option("--repository", help="Only memories of this repository (and global ones).")
@click.option("--limit", type=click.IntRange(min=1), default=5, show_default=True)
@memories_option
@index_option
@click.option("--json", "as_json", is_flag=True, help="Print the hits as JSON.")
@handle_errors
def search(
    query: str,
    kind: str,
    axis: str,
    filters: tuple[str, ...],
    labels: tuple[str, ...],
    repository: str | None,
    limit: int,
    memory_path: str | None,
    index_path: str | None,
    as_json: bool,
) -> None:
    """Search the memory store as a run would (labels and scope applied)."""
    from runtime.errors import UsageError
    from runtime.retrieval.memories import open_memory_store

    store = open_memory_store(memory_path, index_path=index_path)
    allowed = frozenset(labels) if labels else None
    if kind == "memories":
        scope = {"repository": repository} if repository else None
        hits = store.search_memories(query, limit=limit, scope=scope, labels=allowed)
    elif kind == "experiences":
        given: dict[str, str] = {}
        for f in filters:
            key, sep, value = f.partition("=")
            if not sep:
                raise UsageError(f"--filter {f[:60]!r}: write KEY=VALUE")
            given[key] = value
        hits = store.search_experiences(
            query, axis=axis, limit=limit, filters=given, labels=allowed
        )
    else:
        hits = store.search_values(query, limit=limit, labels=allowed)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "id": h.id,
                        "kind": h.kind,
                        "score": h.score,
                        "text": h.text,
                        "fields": dict(h.fields),
                        "labels": sorted(h.labels),
                        "location": h.location,
                    }
                    for h in hits
                ],
                indent=2,
            )
        )
        return
    if not hits:
        click.echo(f"no {kind} match", err=True)
    for h in hits:
        click.echo(f"{h.score:.4f}  {shown(h.location, lines=False)}")
        for line in h.text.splitlines():
            click.echo(f"    {shown(line, lines=False)}")


@click.command()
@click.argument("run_id")
@click.option("--good", "verdict", flag_value="gold", help="A good run: tier gold.")
@click.option("--bad", "verdict", flag_value="abandoned", help="A bad run: tier abandoned.")
@click.option(
    "--tier",
    type=click.Choice(["gold", "silver", "bronze", "abandoned"]),
    help="Set this tier instead.",
)
@click.option("--note", help="Why (kept with the experience).")
@click.option("--domain", help="Domain when the run is recorded now (default its pipeline).")
@click.option(
    "--label",
    "labels",
    multiple=True,
    help="Labels of the record when the run is recorded now and its pipeline file cannot "
    "be read (default: the labels the run could read).",
)
@existing_store
@memories_option
@index_option
@click.option("--json", "as_json", is_flag=True, help="Print {id, tier, recorded}.")
@handle_errors
def feedback(
    run_id: str,
    verdict: str | None,
    tier: str | None,
    note: str | None,
    domain: str | None,
    labels: tuple[str, ...],
    store: str | None,
    memory_path: str | None,
    index_path: str | None,
    as_json: bool,
) -> None:
    """Say how a run went: its experience gets a confidence tier (--good: gold, --bad:
    abandoned, or --tier).

    A run not yet recorded as an experience is recorded first from the run store: its
    question, outcome, error code and the answer's first lines, labelled with the labels
    the run could read.
    """
    from runtime.errors import RunError, UsageError

    if (verdict is None) == (tier is None):
        raise UsageError("give one of --good, --bad and --tier")
    chosen = str(tier or verdict)
    memory = _writer(memory_path, index_path)
    recorded = False
    try:
        eid = memory.set_tier(run_id, chosen, note=note)
    except RunError as exc:
        if exc.code != "EXPERIENCE_NOT_FOUND":
            raise
        item = _run_item(run_id, store, domain, labels)
        if note is not None:
            item["note"] = note
        item["confidence_tier"] = chosen
        [eid] = memory.record_experiences([item], scrub=_scrubber())
        recorded = True
    if as_json:
        click.echo(json.dumps({"id": eid, "tier": chosen, "recorded": recorded}))
    else:
        what = "recorded run as experience" if recorded else "experience"
        click.echo(f"{what} {eid}: tier {chosen}")


def _run_item(
    run_id: str, store: str | None, domain: str | None, labels: tuple[str, ...]
) -> dict[str, Any]:
    """The experience a stored run is recorded as (EXPERIENCE_NOT_FOUND: no such run)."""
    from runtime.engine.stores import open_run_store
    from runtime.errors import RunError
    from runtime.retrieval.memory_io import run_experience

    runs = open_run_store(store, create=False)
    try:
        state = runs.load(run_id)
    except RunError as exc:
        if exc.code != "RUN_NOT_FOUND":
            raise
        raise RunError(
            f"no experience and no run {run_id[:80]!r} in {runs.path}",
            code="EXPERIENCE_NOT_FOUND",
        ) from exc
    events = runs.events(run_id)
    error = next(
        (
            {"code": e.get("code"), "message": e.get("message", "")}
            for e in events
            if e.get("type") == "RUN_FAILED"
        ),
        None,
    )
    pipeline = next(
        (
            str(e.get("pipeline"))
            for e in events
            if e.get("type") == "RUN_STARTED" and e.get("pipeline")
        ),
        None,
    ) or _pipeline_name(runs, run_id)
    return run_experience(
        run_id=run_id,
        pipeline=pipeline,
        status=str(state["status"]),
        inputs=state["inputs"],
        variables=state["variables"],
        error=error,
        labels=list(labels) if labels else _run_labels(runs, run_id, state["inputs"]),
        domain=domain,
    )


def _pipeline_name(runs: Any, run_id: str) -> str:
    rows = [r for r in runs.runs(1_000_000) if r["run_id"] == run_id]
    return str(rows[0]["pipeline"]) if rows and rows[0]["pipeline"] else "pipeline"


def _run_labels(runs: Any, run_id: str, inputs: Any) -> list[str]:
    """The labels the run could read: its allowed_labels input, else what its pipeline
    pins (read from its file); a file that cannot be read is an error, not a guess."""
    from runtime.errors import RunError, StepRuntimeError

    given = inputs.get("allowed_labels")
    if isinstance(given, list):
        return [str(x) for x in given]
    file = runs.run_file(run_id)
    try:
        from runtime.format.validation import load_pipeline

        pinned = load_pipeline(file).settings.get("allowed_labels")
    except (StepRuntimeError, OSError) as exc:
        raise RunError(
            f"cannot tell which labels run {run_id[:80]!r} could read: its pipeline "
            f"{file} does not load ({exc}); pass --label for each",
            code="MEMORY_UNLABELLED",
        ) from exc
    return [str(x) for x in pinned] if isinstance(pinned, list) else []


@click.group()
def values() -> None:
    """The principles clustered from experiences' lessons."""


@values.command("rebuild")
@click.option(
    "--min-size",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Fewest experiences a value is drawn from.",
)
@memories_option
@index_option
@click.option("--json", "as_json", is_flag=True, help="Print {values, experiences, method}.")
@handle_errors
def rebuild(min_size: int, memory_path: str | None, index_path: str | None, as_json: bool) -> None:
    """Cluster the lessons and surprises of every experience (abandoned ones left out) and
    store each cluster's representative as a value (the old values are replaced)."""
    from runtime.retrieval.values import rebuild_values

    store = _writer(memory_path, index_path)
    done = rebuild_values(store, min_size=min_size)
    if as_json:
        click.echo(json.dumps(done))
    else:
        click.echo(
            f"{done['values']} value(s) from {done['experiences']} experience(s) "
            f"({done['method']}) -> {store.path}"
        )
