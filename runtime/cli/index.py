"""`runtime index` and `runtime search`."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from runtime.cli._common import handle_errors, shown


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option(
    "--index",
    "index_path",
    type=click.Path(dir_okay=False),
    help="Index file, or postgresql://... for a Postgres index (default $RUNTIME_INDEX or "
    ".runtime/index.db).",
)
@click.option(
    "--repository",
    help="Repository name (default: the name this tree was indexed under before, else the "
    "name of its folder).",
)
@click.option(
    "--snapshot", default="main", show_default=True, help="Snapshot (branch, tag, commit)."
)
@click.option(
    "--labels",
    "labels_file",
    type=click.Path(exists=True, dir_okay=False),
    help="JSON/YAML mapping of path globs to security labels; the globs match paths "
    "relative to the repository root (see --repo-root).",
)
@click.option(
    "--repo-root",
    type=click.Path(exists=True, file_okay=False),
    help="The repository's root folder, which label globs match paths from (default: the "
    "one recorded when the repository was first indexed, else the first PATH); recorded "
    "in the index.",
)
@click.option(
    "--embedder",
    help="Also store vectors: minilm or openai:MODEL@URL (every node without one is embedded, "
    "unchanged files included).",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    help="Worker processes that parse files (default: one per CPU; 1: no workers).",
)
@click.option(
    "--tokenizer",
    "tokenizers",
    multiple=True,
    help="Encoding whose token counts are stored with each node, so budget steps need not "
    "count indexed texts again (repeatable; default cl100k_base, the default "
    "settings.tokenizer).",
)
@click.option(
    "--git",
    "with_git",
    is_flag=True,
    help="Also index the git history of PATHS: a commit node per commit (sha, author, date, "
    "message, files, +/- counts) linked to the nodes of the files it touched (incremental).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {files, nodes, edges, skipped, seconds} (and embedded, with --embedder; "
    "git, with --git).",
)
@handle_errors
def index(
    paths: tuple[str, ...],
    index_path: str | None,
    repository: str | None,
    snapshot: str,
    labels_file: str | None,
    repo_root: str | None,
    embedder: str | None,
    jobs: int | None,
    tokenizers: tuple[str, ...],
    with_git: bool,
    as_json: bool,
) -> None:
    """Index C#, T-SQL, Markdown and text files under PATHS (incremental).

    Without --repository, a tree indexed before keeps the repository name it was indexed
    under, and a new tree is named after its folder: indexing the same tree again never
    stores a second copy under another name.

    Label globs (--labels) match paths relative to the repository's root, recorded once,
    so indexing a subfolder labels its files as indexing the whole tree does. Every glob
    that matches no file is warned about; a labels file none of whose globs matches is
    refused (LABELS_UNMATCHED), as is a PATH outside the root (LABELS_OUTSIDE_ROOT).
    """
    from runtime.context.tokens import get_counter
    from runtime.retrieval.embeddings import make_embedder
    from runtime.retrieval.indexes import index_location, is_url
    from runtime.retrieval.indexwrite import open_writer

    emb = make_embedder(embedder) if embedder else None  # a bad name creates no index
    tokenizers = tokenizers or ("cl100k_base",)
    for name in tokenizers:  # neither does a bad tokenizer (TOKENIZER_UNAVAILABLE)
        get_counter(name)
    roots = [str(Path(p).resolve()) for p in paths]
    if with_git:  # a path outside git creates no index (GIT_NOT_A_REPOSITORY)
        from runtime.retrieval.git_history import check_git_root

        for root in roots:
            check_git_root(root)
    path = index_location(index_path)
    if not is_url(path) and not Path(path).exists():  # a refusal creates no index file
        repository = _repository(lambda root: [], roots, repository)
    store = open_writer(path, on_wait=_waiting)
    try:
        _index(
            store,
            paths,
            roots,
            repository,
            snapshot,
            labels_file,
            repo_root,
            emb,
            jobs,
            tokenizers,
            with_git,
            as_json,
        )
    finally:
        close = getattr(store, "close", None)  # Postgres: its connection and writer lock
        if close is not None:
            close()


def _waiting(where: str) -> None:
    click.echo(f"note: another `runtime index` is writing {where}; waiting for it", err=True)


def _index(
    store: Any,
    paths: tuple[str, ...],
    roots: list[str],
    repository: str | None,
    snapshot: str,
    labels_file: str | None,
    repo_root: str | None,
    emb: Any,
    jobs: int | None,
    tokenizers: tuple[str, ...],
    with_git: bool,
    as_json: bool,
) -> None:
    """index's run once the index is open."""
    from runtime.retrieval.indexer import index_paths, load_labels

    repository = _repository(store.root_repositories, roots, repository)
    rules = load_labels(labels_file)
    # Without --labels every file is written unlabelled: said when that unlabels nodes.
    labelled = 0 if rules else store.labelled_nodes(repository, snapshot)
    bar: Any = None
    if sys.stderr.isatty() and not as_json:  # a progress bar on a terminal, never on a pipe
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        bar = Progress(
            "{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=True,
            console=Console(stderr=True),
            redirect_stdout=False,
        )
    with bar or contextlib.nullcontext():
        tasks: dict[str, Any] = {}

        def show(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                label = {"read": "reading files", "embed": "embedding nodes"}.get(
                    stage, "parsing changed files"
                )
                tasks[stage] = bar.add_task(label, total=total)
            bar.update(tasks[stage], completed=done)

        report = index_paths(
            store,
            list(paths),
            repository=repository,
            snapshot=snapshot,
            label_rules=rules,
            repo_root=repo_root,
            embedder=emb,
            jobs=jobs,
            tokenizers=tokenizers,
            progress=show if bar else None,
            git=with_git,
        )
    for root in roots:
        store.record_root(root, repository)
    if report.rebuilt:
        click.echo(
            f"note: {store.path} had the layout of another version; it was rebuilt from scratch",
            err=True,
        )
    if report.encodings:
        first = next(iter(report.encodings.items()))
        click.echo(
            f"note: {len(report.encodings)} file(s) were not UTF-8 and were read by their "
            f"byte-order mark or as Windows-1252 (e.g. {first[0]}: {first[1]})",
            err=True,
        )
    if report.root_replaced:
        click.echo(
            f"warning: the root of repository {repository!r} changes from "
            f"{report.root_replaced} to {report.repo_root}; label globs now match from there",
            err=True,
        )
    if labelled and store.labelled_nodes(repository, snapshot) < labelled:
        click.echo(
            f"warning: {repository}@{snapshot} had {labelled} labelled node(s) and this run "
            "gave no --labels: the files it rewrote are now unlabelled and visible to every "
            "caller; index again with the labels file to restore them",
            err=True,
        )
    for glob in report.unmatched_globs:
        click.echo(
            f"warning: label glob {glob!r} matches no file under {report.repo_root}: "
            "the files it was meant for, if any, are unlabelled and visible to every caller",
            err=True,
        )
    for failure in report.failed:
        click.echo(f"warning: {failure['path']} not indexed: {failure['error']}", err=True)
    if emb is None and report.nodes:
        # Nodes written without --embedder next to nodes with vectors: the new or changed
        # nodes have none, and semantic search would silently not find them.
        for model, missing in store.missing_vectors(repository, snapshot).items():
            click.echo(
                f"note: {missing} node(s) of {repository}@{snapshot} have no {model} vector; "
                "semantic and hybrid search cannot find them until this is run again with "
                "--embedder",
                err=True,
            )
    if as_json:
        d = report.to_dict()
        keys = (
            ("files", "nodes", "edges", "skipped", "seconds")
            + (("failed",) if d["failed"] else ())
            + (("embedded",) if emb is not None else ())
            + (("git",) if with_git else ())
        )
        click.echo(json.dumps({k: d[k] for k in keys}))
    else:
        click.echo(
            f"indexed {report.files} file(s) ({report.unchanged} unchanged, {report.deleted} "
            f"deleted, {report.skipped} skipped"
            + (f", {len(report.failed)} failed" if report.failed else "")
            + f"): {report.nodes} node(s) written, "
            f"{report.edges} edge(s)"
            + (f", {report.embedded} node(s) embedded" if emb is not None else "")
            + (
                f", {report.git['commits']} commit(s) ({report.git['added']} new, "
                f"{report.git['removed']} removed)"
                if report.git is not None
                else ""
            )
            + f", {report.seconds:.2f}s -> {store.path}"
        )


def _known_scope(store: Any, scope: Any) -> None:
    """USAGE when --repository or --snapshot names one the index does not hold: a typo
    would otherwise read as "no hits"."""
    from runtime.errors import UsageError
    from runtime.format.checks import did_you_mean

    repositories, snapshots = store.scope_names()
    for option, value, held in (
        ("repository", scope.repository, repositories),
        ("snapshot", scope.snapshot, snapshots),
    ):
        if value is not None and value not in held:
            near = did_you_mean(value, sorted(held))
            raise UsageError(
                f"--{option} {value!r}: the index holds no such {option} "
                f"(it holds {', '.join(sorted(held)) or 'nothing yet'})"
                + (f"; {near}" if near else "")
            )


def _repository(indexed_as: Callable[[str], list[str]], roots: list[str], given: str | None) -> str:
    """The repository to index roots as: given, else the one they were indexed as, else
    the folder's name; REPOSITORY_REQUIRED when that is not one name."""
    from runtime.errors import UsageError

    if given is not None:
        for root in roots:
            others = [r for r in indexed_as(root) if r != given]
            if others:  # named on purpose, but never silently: the old copy stays searchable
                click.echo(
                    f"warning: {root} is also indexed as repository {', '.join(others)}; "
                    f"this stores another copy as {given!r}",
                    err=True,
                )
        return given
    known = sorted({r for root in roots for r in indexed_as(root)})
    if len(known) == 1:
        return known[0]
    if known:
        raise UsageError(
            f"these paths are indexed as repositories {', '.join(known)}; "
            "say which with --repository",
            code="REPOSITORY_REQUIRED",
        )
    if len(roots) > 1:
        raise UsageError(
            f"{len(roots)} paths and no --repository: name the repository they form",
            code="REPOSITORY_REQUIRED",
        )
    top = Path(roots[0])
    name = (top if top.is_dir() else top.parent).name
    if not name:
        raise UsageError(
            f"{top} has no folder name to use; pass --repository", code="REPOSITORY_REQUIRED"
        )
    return name


@click.command()
@click.argument("query")
@click.option(
    "--index",
    "index_path",
    type=click.Path(dir_okay=False),
    help="Index file, or postgresql://... (default $RUNTIME_INDEX or .runtime/index.db).",
)
@click.option(
    "--type",
    "search_type",
    type=click.Choice(["bm25", "semantic", "hybrid"]),
    default="bm25",
    show_default=True,
)
@click.option("--top-k", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--repository", help="Only this repository.")
@click.option("--snapshot", help="Only this snapshot.")
@click.option(
    "--label", "labels", multiple=True, help="A security label the caller may see (repeatable)."
)
@click.option(
    "--per-file",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Hits of one file before its further hits are ranked down (0: no cap).",
)
@click.option(
    "--subject",
    "subject_text",
    metavar="JSON|@FILE",
    help="Who is searching: {tenant, roles, clearance, attributes} as JSON or @file; the "
    "default rule applies (docs/access.md) and --label then only narrows the clearance. "
    "Without it, --label names the labels the caller may see (no tenant).",
)
@click.option(
    "--policy",
    "policy_from",
    type=click.Path(exists=True, dir_okay=False),
    help="Decide access with the engine of this pipeline's settings.access (default: the "
    "built-in rule).",
)
@click.option("--json", "as_json", is_flag=True, help='Print {"hits": [...]}.')
@handle_errors
def search(
    query: str,
    index_path: str | None,
    search_type: str,
    top_k: int,
    repository: str | None,
    snapshot: str | None,
    labels: tuple[str, ...],
    per_file: int,
    subject_text: str | None,
    policy_from: str | None,
    as_json: bool,
) -> None:
    """Search the node store, as a subject (anonymous: unlabelled, untenanted nodes only)."""
    from runtime.errors import UsageError
    from runtime.governance.engines import load_engine
    from runtime.governance.subject import Subject, parse_subject, read_subject_option
    from runtime.retrieval.indexes import open_index
    from runtime.retrieval.node import Scope
    from runtime.retrieval.policed import AccessView

    if not query.strip():  # "no hits" would read as "nothing matches"
        raise UsageError("the search query is empty", code="QUERY_EMPTY")

    # Checked before the index is opened: an empty --repository "" is SCOPE_INVALID, never "all".
    scope = Scope(repository, snapshot, tuple(labels) if labels else None)
    if any(x.startswith("tenant:") for x in labels):
        raise UsageError(
            "--label names a tenant label; a tenant is granted only by --subject's tenant",
            code="SCOPE_WIDENED",
        )
    if subject_text is not None:
        subject = parse_subject(read_subject_option(subject_text), "--subject")
        pinned = tuple(labels) if labels else None
    else:  # as before subjects: the labels given are the caller's clearance
        subject, pinned = Subject(clearance=tuple(sorted(set(labels)))), None
    config: dict[str, Any] = {}
    base = "."
    if policy_from is not None:
        from runtime.format.validation import load_pipeline

        loaded = load_pipeline(policy_from)
        config, base = dict(loaded.settings.get("access") or {}), str(loaded.base_dir)
    engine = load_engine(config, base)
    store = open_index(index_path)
    _known_scope(store, scope)
    view = AccessView(store, engine, subject, pinned, scope)
    hits = view.search(query, top_k=top_k, search_type=search_type, per_file=per_file)
    denied = sum(ledger.denied for ledger in view.ledgers)
    if as_json:
        click.echo(json.dumps({"hits": hits, "denied": denied}, indent=2))
        return
    if denied:
        click.echo(f"({denied} candidate(s) not shown: the access policy denies them)", err=True)
    if not hits:
        from runtime.retrieval.query import named_words, query_terms

        words = query_terms(query)[0] or named_words(query)
        # Stop words and single letters are not searched: say so rather than "no match".
        click.echo("no hits" if words else "no hits: the query has no word to search for")
    for h in hits:  # names and paths come from indexed files: no escape is obeyed
        name, path = shown(str(h["name"]), lines=False), shown(str(h["path"]), lines=False)
        click.echo(f"{h['rank']:>3}. {h['score']:>9.4f}  {h['kind']:<10} {name:<32} {path}")
        for child in h.get("children", ()):
            # matched as part of this hit (an index, ...)
            click.echo(f"{'':>16}+ {shown(str(child), lines=False)}")
