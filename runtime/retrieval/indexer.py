"""Indexing source trees into the node store: one node per type, member and SQL object,
heading-aware chunks for Markdown and text, edges resolved across the whole codebase.

Incremental: a file whose content hash is unchanged is not parsed again; a file
that disappeared loses its nodes. Edges are re-resolved for the whole snapshot
from the stored per-file extraction summaries, so a change in one file updates
edges that point into it from files that did not change.

Identity: a kind and qualified name defined once in the snapshot has the plain id; one
defined more than once (a partial class, a table in `Tables/` and in `Migrations/`) keeps
every definition, each named by its path (see node_id). Whether a name is defined once
depends on every file, so a run renames the nodes of unchanged files whose names gained
or lost a second definition; the result equals a fresh index of the same tree.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runtime.retrieval.indexes import is_url
from runtime.retrieval.indexwrite import IndexWriter
from runtime.retrieval.node import Node, node_id
from runtime.retrieval.nodestore import NodeRow

CODE_SUFFIXES = {".cs", ".sql"}
DOC_SUFFIXES = {".md", ".markdown", ".txt", ".rst"}
# Never walked: build output, dependencies, virtual environments, and every folder whose
# name starts with a dot (.git, .vs, .venv, tool caches).
SKIP_DIRS = {"bin", "obj", "node_modules", "__pycache__", "venv"}
MAX_CHUNK_CHARS = 2500
# The edge between two definitions of one kind and qualified name (both directions), so the
# graph walks from one part of a partial class to the others.
SAME_NAME = "SameName"
# Edges from nodes that belong to no file (runtime/retrieval/git_history.py): re-indexing
# the files keeps them.
KEPT_EDGE_TYPES = ("Touches",)
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


@dataclass
class IndexReport:
    """What an indexing run did."""

    files: int = 0
    nodes: int = 0
    edges: int = 0
    skipped: int = 0
    unchanged: int = 0
    deleted: int = 0
    seconds: float = 0.0
    bytes: int = 0
    embedded: int = 0  # nodes given a vector (of the --embedder) by this run
    rebuilt: bool = False  # the index had an older layout and was rebuilt from scratch
    failed: list[dict[str, str]] = field(default_factory=list)  # {path, error} not indexed
    encodings: dict[str, str] = field(default_factory=dict)  # path -> encoding, when not UTF-8
    repo_root: str = ""  # the folder label globs matched from (see repository_root)
    root_replaced: str | None = None  # the root recorded before, when --repo-root changed it
    unmatched_globs: list[str] = field(default_factory=list)  # label globs no file matched
    # With git=True: {commits, added, removed, edges} of the history (git_history.GitReport).
    git: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The `runtime index --json` object (plus detail counters)."""
        return asdict(self)


def decode_source(raw: bytes) -> tuple[str | None, str]:
    """(text, encoding) of a source file; (None, "binary") when it is not text; (None, why)
    when it is text in no encoding read here (why names the first bad byte and its line).

    A byte-order mark decides (SSMS saves scripts as UTF-16 with one); without one, UTF-8,
    else Windows-1252, which SQL Server tools and older Visual Studio wrote by default.
    A NUL byte without a UTF-16 mark means binary. A file that fails its byte-order mark's
    encoding (a lone surrogate in UTF-16) or holds a byte Windows-1252 leaves undefined is
    not skipped as binary: the indexer reports it as not indexed (INPUT_INVALID_TEXT), as
    text that is not valid Unicode is refused everywhere it enters (runtime/contract/text.py).
    """
    for bom, name in (
        (b"\xef\xbb\xbf", "utf-8-sig"),
        (b"\xff\xfe\x00\x00", "utf-32"),
        (b"\x00\x00\xfe\xff", "utf-32"),
        (b"\xff\xfe", "utf-16"),
        (b"\xfe\xff", "utf-16"),
    ):
        if raw.startswith(bom):
            try:
                return raw.decode(name), name
            except UnicodeDecodeError as exc:
                line = raw[: exc.start].decode(name, "replace").count("\n") + 1
                label = name.upper().replace("-SIG", "")
                return None, (
                    f"the bytes at byte {exc.start} (line {line}) are not {label}: {exc.reason}"
                )
    if b"\x00" in raw:
        return None, "binary"
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        return raw.decode("cp1252"), "windows-1252"
    except UnicodeDecodeError as exc:  # a byte cp1252 leaves undefined
        line = raw[: exc.start].count(b"\n") + 1
        return None, (
            f"byte 0x{raw[exc.start]:02X} at byte {exc.start} (line {line}) is neither UTF-8 "
            "nor Windows-1252"
        )


def load_labels(path: str | None) -> list[tuple[str, list[str]]]:
    """(glob, labels) rules from a JSON or YAML mapping file."""
    if not path:
        return []
    import json

    import yaml

    from runtime.errors import UsageError

    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise UsageError(f"labels file {path} is not valid: {exc}") from exc
    if not isinstance(data, dict) or not all(
        isinstance(v, list) and all(isinstance(x, str) for x in v) for v in data.values()
    ):
        raise UsageError(f"labels file {path} must map path globs to lists of labels")
    return [(str(k), list(v)) for k, v in data.items()]


def labels_for(
    rel: str, rules: Sequence[tuple[str, list[str]]], matched: set[str] | None = None
) -> list[str]:
    """Labels of every rule whose glob matches the path (relative to the repository root).

    matched: the globs that matched are added to it.
    """
    found: list[str] = []
    for glob, labels in rules:
        if fnmatch.fnmatch(rel, glob):
            found += [lb for lb in labels if lb not in found]
            if matched is not None:
                matched.add(glob)
    return found


def repository_root(
    store: IndexWriter, repository: str, roots: Sequence[str], given: str | None
) -> tuple[Path, str | None]:
    """(the folder label globs match from, the root it replaces when `given` changes it).

    Given (`--repo-root`), it is recorded for the repository; else the recorded one holds;
    else this first run's first path (a file's folder) becomes the repository's root.
    """
    from runtime.errors import UsageError

    recorded = store.repository_root(repository)
    if given is not None:
        root = Path(given).resolve()
        if not root.is_dir():
            raise UsageError(f"--repo-root {given}: not a folder")
        return root, (recorded if recorded not in (None, str(root)) else None)
    if recorded is not None:
        return Path(recorded), None
    first = Path(roots[0]).resolve()
    return (first if first.is_dir() else first.parent), None


def _label_prefixes(roots: Sequence[str], repo_root: Path, repository: str) -> list[str]:
    """Per root, what turns a path relative to it into one relative to the repository root."""
    from runtime.errors import UsageError

    out = []
    for root in roots:
        base = Path(root).resolve()
        folder = base if base.is_dir() else base.parent
        if folder == repo_root:
            out.append("")
        elif repo_root in folder.parents:
            out.append(folder.relative_to(repo_root).as_posix() + "/")
        else:
            # Its files' paths relative to the root cannot be known: no glob could be
            # trusted to label them, so nothing is indexed.
            raise UsageError(
                f"{root} is outside {repo_root}, the root of repository {repository!r} "
                "that label globs match from: index a folder under it, or pass --repo-root",
                code="LABELS_OUTSIDE_ROOT",
            )
    return out


def _files(roots: Sequence[str]) -> list[tuple[Path, str, int]]:
    """(path, path relative to its root, the root's position) of every file under roots, in
    path order, once each.

    Skipped folders (.git, node_modules, bin, obj, ...) are pruned, not walked and then
    filtered: a repository's .git alone can hold more files than its code.
    """
    import os

    out = []
    for number, root in enumerate(roots):
        base = Path(root)
        if base.is_file():
            out.append((base, base.name, number))
            continue
        found = []
        for folder, dirs, names in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
            here = Path(folder)
            for name in names:
                path = here / name
                if path.is_file():
                    found.append((path, path.relative_to(base).as_posix(), number))
        out += sorted(found, key=lambda item: item[1])
    # A file under two roots given (`src` and `src/Core`) is indexed once, under the first;
    # two files under one relative path would overwrite each other on every run.
    bases = [Path(root).resolve() for root in roots]
    nested = any(a == b or a in b.parents for i, a in enumerate(bases) for b in bases[i + 1 :])
    nested = nested or any(b in a.parents for i, a in enumerate(bases) for b in bases[i + 1 :])
    owner: dict[str, Path] = {}
    listed: set[Path] = set()
    unique = []
    for path, rel, number in out:
        if nested:  # resolved only then: a system call per file
            real = path.resolve()
            if real in listed:
                continue
            listed.add(real)
        if owner.setdefault(rel, path) != path:
            from runtime.errors import UsageError

            raise UsageError(
                f"{owner[rel]} and {path} would both be indexed as {rel}: index a folder "
                "that holds both, or each under its own --snapshot or --repository"
            )
        unique.append((path, rel, number))
    return unique


def doc_chunks(text: str, rel: str) -> list[tuple[str, str, int, int]]:
    """(heading path, text, start line, end line) chunks split at headings."""
    marks = [(m.start(), len(m.group(1)), m.group(2)) for m in _HEADING.finditer(text)]
    if not marks or marks[0][0] > 0:
        marks.insert(0, (0, 0, Path(rel).stem))
    chunks = []
    trail: list[tuple[int, str]] = []
    counted, line = 0, 1  # lines counted up to `counted`, forward only (not from 0 each time)
    for i, (start, level, title) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else len(text)
        trail = [(lv, t) for lv, t in trail if 0 < lv < level] + [(level, title)]
        body = text[start:end].strip()
        if not body:
            continue
        heading = " > ".join(t for _, t in trail)
        line += text.count("\n", counted, start)
        counted = start
        for j in range(0, len(body), MAX_CHUNK_CHARS):
            part = body[j : j + MAX_CHUNK_CHARS]
            chunks.append(
                (
                    heading + (f" ({j // MAX_CHUNK_CHARS + 1})" if j else ""),
                    part,
                    line,
                    line + part.count("\n"),
                )
            )
    return chunks


def _summary(ex: Any) -> dict[str, Any]:
    """What cross-file resolution needs from an extraction (stored per file)."""
    return {
        "kind": ex.kind,
        "language": ex.language,
        "usings": ex.usings,
        "symbols": [
            {"kind": s.kind, "name": s.name, "qn": s.qualified_name, "language": s.language}
            for s in ex.symbols
        ],
        "deps": [[d.from_qualified_name, d.to_name, d.edge_type, d.line] for d in ex.dependencies],
    }


# (kind, qualified name): what a node id names, before the path that tells definitions apart.
Key = tuple[str, str]


def _keys(summary: dict[str, Any]) -> list[Key]:
    """The (kind, qualified name) of each node of a file, in the order it was written."""
    keys = [(s["kind"], s["qn"]) for s in summary.get("symbols", []) if s["kind"] != "namespace"]
    return keys + [("doc", qn) for qn in summary.get("docs", [])]


class Definitions:
    """Where each kind and qualified name of a snapshot is defined, and so each node's id."""

    def __init__(self, repository: str, snapshot: str) -> None:
        self.repository, self.snapshot = repository, snapshot
        self.paths: dict[Key, list[str]] = {}  # key -> the path of each definition

    def add(self, path: str, keys: Iterable[Key]) -> None:
        """Record a file's definitions (a path once per definition)."""
        for key in keys:
            self.paths.setdefault(key, []).append(path)

    def _id(self, key: Key, path: str | None = None, occurrence: int = 1) -> str:
        return node_id(self.repository, self.snapshot, *key, at=path, occurrence=occurrence)

    def ids(self, path: str, keys: Sequence[Key]) -> list[str]:
        """The ids of a recorded file's nodes (keys in file order)."""
        paths, repository, snapshot = self.paths, self.repository, self.snapshot
        out = []
        seen: Counter[Key] = Counter()
        for key in keys:
            if len(paths.get(key, ())) <= 1:  # the common case: defined once, the plain id
                out.append(node_id(repository, snapshot, *key))
            else:
                seen[key] += 1
                out.append(self._id(key, path, seen[key]))
        return out

    def place(self, path: str, keys: Sequence[Key]) -> tuple[list[str], list[tuple[str, str]]]:
        """Record a file about to be written: its nodes' ids and the (old, new) ids of
        stored nodes whose name was defined once until now."""
        renames = []
        for key in dict.fromkeys(keys):
            where = self.paths.get(key, ())
            if len(where) == 1:
                renames.append((self._id(key), self._id(key, where[0])))
        self.add(path, keys)
        return self.ids(path, keys), renames

    def settle(self, lost: Iterable[Key]) -> list[tuple[str, str]]:
        """(old, new) ids for names that lost definitions and now have one: back to plain."""
        renames = []
        for key in sorted(lost):
            where = self.paths.get(key, ())
            if len(where) == 1:
                renames.append((self._id(key, where[0]), self._id(key)))
        return renames

    def same_name_edges(self) -> list[tuple[str, str, str]]:
        """A SAME_NAME edge each way between the definitions of every name defined twice+."""
        edges = []
        for key, where in self.paths.items():
            if len(where) < 2:
                continue
            seen: Counter[str] = Counter()
            ids = []
            for path in where:
                seen[path] += 1
                ids.append(self._id(key, path, seen[path]))
            edges += [(a, b, SAME_NAME) for a in ids for b in ids if a != b]
        return edges


def _from_summary(summary: dict[str, Any]) -> Any:
    from classifiers.model import Dependency, Extraction, Symbol

    ex = Extraction(summary["kind"], summary["language"], usings=summary.get("usings", []))
    ex.symbols = [
        Symbol(s["kind"], s["name"], s["qn"], s["language"], 0, 0) for s in summary["symbols"]
    ]
    ex.dependencies = [Dependency(*d) for d in summary["deps"]]
    return ex


# Nodes embedded per call to the embedder (and per progress report).
EMBED_BATCH = 256


def _embed_missing(
    store: IndexWriter,
    repository: str,
    snapshot: str,
    embedder: Any,
    progress: Callable[[str, int, int], None] | None,
) -> int:
    """Embed every node of the snapshot without a vector of this embedder and vector text
    (new and changed files, and unchanged ones indexed without it or with another text).
    Returns how many were embedded."""
    from runtime.retrieval.embeddings import embedding_text, to_blob, vector_model

    model = vector_model(embedder)
    rows = store.nodes_without_vectors(repository, snapshot, model)
    for start in range(0, len(rows), EMBED_BATCH):
        batch = rows[start : start + EMBED_BATCH]
        texts = [embedding_text(kind, name, qn, doc) for _, kind, name, qn, doc in batch]
        vectors = embedder.embed(texts)
        store.put_vectors(model, {r[0]: to_blob(v) for r, v in zip(batch, vectors, strict=True)})
        if progress:
            progress("embed", start + len(batch), len(rows))
    return len(rows)


def index_paths(
    store: IndexWriter,
    roots: Sequence[str],
    *,
    repository: str = "default",
    snapshot: str = "main",
    label_rules: Sequence[tuple[str, list[str]]] = (),
    progress: Callable[[str, int, int], None] | None = None,
    embedder: Any = None,
    jobs: int | None = None,
    tokenizers: Sequence[str] = ("cl100k_base",),
    repo_root: str | None = None,
    git: bool = False,
) -> IndexReport:
    """Index files under roots into one repository snapshot.

    label_rules: (glob, labels) matched against each file's path relative to the
    repository's root (repo_root when given, else the one recorded for the repository,
    else this first run's first path; see repository_root), so a subfolder indexed with
    the same rules is labelled the same. A root outside it (LABELS_OUTSIDE_ROOT), or rules
    none of whose globs matches a file (LABELS_UNMATCHED), is refused before anything is
    written; the globs that matched nothing are listed in the report (`unmatched_globs`).

    tokenizers: encodings whose token counts of each node's text are stored with it, so a
    run's budget steps never encode an indexed text again (an unknown name is a
    TOKENIZER_UNAVAILABLE error before anything is written).

    jobs: worker processes that parse files (default: one per CPU; 1 parses in this
    process). Workers are used only when enough files changed to repay starting them.
    Results are written in file order, so the index is the same for any jobs.
    progress(stage, done, total) is called per file: stage "read" while files are read
    and hashed, then "parse" for each changed file written; then "embed" per batch of
    nodes embedded (embedder: every node of the snapshot without its vector, see
    _embed_missing).
    """
    started = time.perf_counter()
    from runtime.context.tokens import get_counter

    for name in tokenizers:  # loaded here: forked workers share the loaded encodings
        get_counter(name)
    report = IndexReport(rebuilt=store.rebuilt)
    root, report.root_replaced = repository_root(store, repository, roots, repo_root)
    report.repo_root = str(root)
    prefixes = _label_prefixes(roots, root, repository) if label_rules else [""] * len(roots)
    known = store.file_hashes(repository, snapshot)
    seen: set[str] = set()
    # The index itself (and its -wal/-shm files) may sit inside the tree; a database not.
    own = None if is_url(store.path) else str(Path(store.path).resolve())
    matched: set[str] = set()
    work = _changed_files(
        roots, own, known, seen, (label_rules, prefixes, matched), progress, report
    )
    report.unmatched_globs = [glob for glob, _ in label_rules if glob not in matched]
    if label_rules and not matched:
        from runtime.errors import UsageError

        raise UsageError(
            f"no label glob matches any of the {report.files} file(s) under {root} (the "
            f"root of repository {repository!r} that globs match from): nothing indexed, "
            "every labelled file would be visible to all",
            code="LABELS_UNMATCHED",
        )
    gone = sorted(set(known) - seen)
    with store.batch():
        store.record_repository_root(repository, str(root))
        if not work and not gone:  # nothing changed: the nodes and edges are the last run's
            report.edges = store.edge_count(repository, snapshot)
            if git:
                report.git = _history(store, roots, repository, snapshot, label_rules, prefixes)
            if embedder is not None:  # after the history: its new commits are embedded too
                report.embedded = _embed_missing(store, repository, snapshot, embedder, progress)
            report.seconds = round(time.perf_counter() - started, 3)
            return report
        changed = {item[0] for item in work}
        stored = store.extractions(repository, snapshot, sorted(seen - changed))
        defs = Definitions(repository, snapshot)
        for rel in sorted(stored):
            defs.add(rel, _keys(stored[rel]))
        # Old nodes go first, so that while files are written the store holds exactly what
        # defs records (the ids of a file about to be written are then free).
        lost = store.delete_nodes(repository, snapshot, sorted(changed & set(known)))
        for rel in gone:
            lost |= store.delete_file(repository, snapshot, rel)
            report.deleted += 1
        fresh: dict[str, Any] = {}  # path -> Extraction of the files parsed now
        for i, (rel, digest, rows, summary, encoded, error) in enumerate(
            _prepare_all(work, repository, snapshot, jobs, tuple(tokenizers))
        ):
            if progress:
                progress("parse", i + 1, len(work))
            if error is not None:
                # Reported, not fatal: the file loses its old nodes and, with no hash
                # stored, is parsed again next time.
                store.delete_file(repository, snapshot, rel)
                report.failed.append({"path": rel, "error": error})
                continue
            ids, renames = defs.place(rel, _keys(summary))
            store.rename_nodes(renames)
            rows = [(nid, *row[1:]) for nid, row in zip(ids, rows, strict=True)]
            report.nodes += store.replace_file_rows(
                repository, snapshot, rel, digest, rows, encoded, known=False
            )
            fresh[rel] = _from_summary(summary)  # here, not after: workers may leave a core idle
        store.rename_nodes(defs.settle(lost))
        exs = {**{rel: _from_summary(x) for rel, x in stored.items()}, **fresh}
        report.edges = _resolve_edges(store, repository, snapshot, exs, defs)
        if git:
            report.git = _history(store, roots, repository, snapshot, label_rules, prefixes)
        if embedder is not None:  # after the history: its new commits are embedded too
            report.embedded = _embed_missing(store, repository, snapshot, embedder, progress)
    optimize = getattr(store, "optimize", None)  # SQLite's: other stores keep their own
    if optimize is not None:
        optimize()  # one full-text segment: the label-set match seeks once (nodestore)
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def _history(
    store: IndexWriter,
    roots: Sequence[str],
    repository: str,
    snapshot: str,
    label_rules: Sequence[tuple[str, list[str]]],
    prefixes: Sequence[str],
) -> dict[str, int]:
    """Index the roots' git history (commit nodes and their Touches edges)."""
    from runtime.retrieval.git_history import index_history

    done = index_history(
        store,
        roots,
        repository=repository,
        snapshot=snapshot,
        labels_of=lambda number, rel: labels_for(prefixes[number] + rel, label_rules),
    )
    return asdict(done)


# (relative path, text, content hash, labels) of a file to parse.
_Work = tuple[str, str, str, list[str]]
# (relative path, hash, encoded node rows, extraction summary, the summary encoded, the
# error that stopped the file's parsing or None).
_Prepared = tuple[str, str, list[NodeRow], dict[str, Any], bytes, str | None]
# Below this many changed files, starting worker processes costs more than it saves.
PARALLEL_MIN_FILES = 64


def _changed_files(
    roots: Sequence[str],
    own: str | None,
    known: dict[str, str],
    seen: set[str],
    labelling: tuple[Sequence[tuple[str, list[str]]], list[str], set[str]],
    progress: Callable[[str, int, int], None] | None,
    report: IndexReport,
) -> list[_Work]:
    """Read every indexable file; return those whose content or labels changed.

    labelling: the label rules, each root's prefix to the repository root, and the set
    the globs that matched are added to.
    """
    label_rules, prefixes, matched = labelling
    own_name = Path(own).name if own else ""
    work: list[_Work] = []
    files = _files(roots)
    for done, (path, rel, number) in enumerate(files, 1):
        if progress:
            progress("read", done, len(files))
        if own and path.name.startswith(own_name) and str(path.resolve()).startswith(own):
            continue  # the index itself (and its -wal/-shm files) may sit inside the tree
        if path.suffix.lower() not in CODE_SUFFIXES | DOC_SUFFIXES:
            report.skipped += 1
            continue
        raw = path.read_bytes()
        text, encoding = decode_source(raw)
        if text is None:
            if encoding == "binary":
                report.skipped += 1
            else:  # text, but not valid in any encoding read here: said, not skipped
                report.failed.append({"path": rel, "error": f"INPUT_INVALID_TEXT: {encoding}"})
            continue
        if encoding not in ("utf-8", "utf-8-sig"):
            report.encodings[rel] = encoding
        report.files += 1
        report.bytes += len(raw)
        seen.add(rel)
        labels = labels_for(prefixes[number] + rel, label_rules, matched) if label_rules else []
        digest = hashlib.sha256(raw + repr(labels).encode()).hexdigest()
        if known.get(rel) == digest:
            report.unchanged += 1
            continue
        work.append((rel, text, digest, labels))
    return work


def _prepare_all(
    work: list[_Work], repository: str, snapshot: str, jobs: int | None, tokenizers: tuple[str, ...]
) -> Iterator[_Prepared]:
    """Parse files, in worker processes when there are enough of them; in file order."""
    import functools
    import gc
    import os

    prepare = functools.partial(
        _prepare, repository=repository, snapshot=snapshot, tokenizers=tokenizers
    )
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    if jobs <= 1 or len(work) < PARALLEL_MIN_FILES:
        yield from map(prepare, work)
        return
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from runtime.errors import StoreError

    # fork shares the already-imported parsers; with other threads alive fork is unsafe,
    # so a fresh interpreter is started instead.
    method = "fork" if hasattr(os, "fork") and threading.active_count() == 1 else "spawn"
    batch = functools.partial(
        _prepare_batch, repository=repository, snapshot=snapshot, tokenizers=tokenizers
    )
    gc.freeze()  # forked workers then do not copy every page the collector would touch
    # An executor, not multiprocessing.Pool: a worker that cannot start (spawn from an
    # interactive session) breaks it with an error instead of being restarted forever.
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context(method))
    try:
        for results in pool.map(batch, _batches(work, jobs)):
            yield from results
    except BrokenProcessPool as exc:
        raise StoreError(
            f"the indexer's worker processes stopped ({method}): {exc}; index with jobs=1 "
            "(runtime index --jobs 1)",
            code="INDEX_ERROR",
        ) from exc
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        gc.unfreeze()


def _batches(work: list[_Work], jobs: int) -> Iterator[list[_Work]]:
    """Consecutive batches that shrink as the work runs out (guided scheduling).

    Large batches first: every task and result crosses the pool's threads in this process,
    which compete with the writes for the GIL (batches of 8 ran 30% slower than of 32+).
    Small batches last: no worker waits long for the final one.
    """
    start = 0
    while start < len(work):
        size = max(8, min(64, (len(work) - start) // (jobs * 3)))
        yield work[start : start + size]
        start += size


def _prepare_batch(
    items: list[_Work], *, repository: str, snapshot: str, tokenizers: tuple[str, ...]
) -> list[_Prepared]:
    """_prepare over a batch (one task of a worker)."""
    return [
        _prepare(item, repository=repository, snapshot=snapshot, tokenizers=tokenizers)
        for item in items
    ]


def _prepare(
    item: _Work, *, repository: str, snapshot: str, tokenizers: tuple[str, ...] = ()
) -> _Prepared:
    """Nodes, FTS rows and the extraction summary of one file (runs in a worker).

    A file the extractors fail on is returned with the error, so one broken file is
    reported instead of stopping the whole index (fuzzing found such files once).
    """
    try:
        return _parse(item, repository=repository, snapshot=snapshot, tokenizers=tokenizers)
    except Exception as exc:  # reported per file by index_paths, never dropped
        return item[0], item[2], [], {}, b"", f"{type(exc).__name__}: {exc}"


def _parse(
    item: _Work, *, repository: str, snapshot: str, tokenizers: tuple[str, ...]
) -> _Prepared:
    import classifiers
    from runtime.context.tokens import get_counter
    from runtime.retrieval.nodestore import encode_extraction, node_row

    rel, text, digest, labels = item
    nodes: list[Node] = []
    summary: dict[str, Any] = {"kind": "UNKNOWN", "language": "unknown", "symbols": [], "deps": []}
    searchable: dict[int, str] = {}  # node index -> its searchable text, when not its text
    if Path(rel).suffix.lower() in CODE_SUFFIXES:
        ex = classifiers.extract(text, rel, detail=False)
        summary = _summary(ex)
        searchable = _declarations_only(ex.symbols)
        for s in ex.symbols:
            if s.kind == "namespace":
                continue
            # The plain id; index_paths gives a name defined more than once its path.
            nodes.append(
                Node(
                    node_id(repository, snapshot, s.kind, s.qualified_name),
                    repository,
                    snapshot,
                    s.kind,
                    s.name,
                    s.qualified_name,
                    rel,
                    s.language,
                    s.start_line,
                    s.end_line,
                    s.text,
                    {"signature": s.signature, "doc": s.doc, **s.metadata},
                    labels,
                )
            )
    else:
        for heading, chunk, start, end in doc_chunks(text, rel):
            qn = f"{rel}#{heading}"
            nodes.append(
                Node(
                    node_id(repository, snapshot, "doc", qn),
                    repository,
                    snapshot,
                    "doc",
                    heading,
                    qn,
                    rel,
                    "unknown",
                    start,
                    end,
                    chunk,
                    {"heading": heading},
                    labels,
                )
            )
        summary["docs"] = [n.qualified_name for n in nodes]  # node keys (see _keys)
    counters = [get_counter(name) for name in tokenizers]
    rows = [node_row(n, searchable.get(i), counters) for i, n in enumerate(nodes)]
    return rel, digest, rows, summary, encode_extraction(summary), None


def _declarations_only(symbols: Sequence[Any]) -> dict[int, str]:
    """Searchable text of each type that has members: its own lines, each member by signature.

    Keyed by the type's index among the symbols that are nodes (namespaces are not): one
    file may declare a name twice. A member's body is indexed in the member's node;
    indexing it again in its type made the type outrank the method a question is about
    (and doubled the indexing work).
    """
    children: dict[str, list[Any]] = {}
    for s in symbols:
        if s.parent and s.kind != "namespace":
            children.setdefault(s.parent, []).append(s)
    out: dict[int, str] = {}
    nodes = [s for s in symbols if s.kind != "namespace"]
    for index, s in enumerate(nodes):
        kids = children.get(s.qualified_name)
        if not kids:
            continue
        lines = s.text.split("\n")
        for kid in kids:
            first, last = kid.start_line - s.start_line, kid.end_line - s.start_line
            if 0 <= first <= last < len(lines):
                lines[first] = kid.signature or lines[first]
                for i in range(first + 1, last + 1):
                    lines[i] = ""
        out[index] = "\n".join(line for line in lines if line)
    return out


def _resolve_edges(
    store: IndexWriter,
    repository: str,
    snapshot: str,
    by_path: dict[str, Any],
    defs: Definitions,
) -> int:
    """Resolve every file's dependencies against the whole snapshot and store the edges.

    by_path: the extraction of every file. An edge leaves the definitions of its source name
    in the file that declares the dependency and reaches every definition of its target.
    """
    import classifiers.resolver

    # In path order: where a name is ambiguous, the first candidates win (deterministic).
    paths = sorted(by_path)
    exs = [by_path[rel] for rel in paths]
    to_ids: dict[str, list[str]] = {}  # qualified name -> the ids of its definitions
    from_ids: list[dict[str, list[str]]] = []  # per file: qualified name -> its ids there
    for rel, ex in zip(paths, exs, strict=True):
        keys = [(s.kind, s.qualified_name) for s in ex.symbols if s.kind != "namespace"]
        here: dict[str, list[str]] = {}
        for (_, qn), nid in zip(keys, defs.ids(rel, keys), strict=True):
            to_ids.setdefault(qn, []).append(nid)
            here.setdefault(qn, []).append(nid)
        from_ids.append(here)
    edges = defs.same_name_edges()
    for here, found in zip(from_ids, classifiers.resolver.resolve_each(exs), strict=True):
        for e in found:
            targets = to_ids.get(e.to_qn)
            sources = here.get(e.from_qn)
            if targets and sources:
                for source in sources:
                    for target in targets:
                        edges.append((source, target, e.edge_type))
    # Edges the file indexing does not derive (a commit's Touches, written by `--git`)
    # are kept: replace_edges makes the snapshot's edges exactly the list.
    for kept in KEPT_EDGE_TYPES:
        edges += store.typed_edges(repository, snapshot, kept)
    return store.replace_edges(repository, snapshot, edges)
