"""`runtime index --index postgresql://...` (issue 34): the indexer writes into Postgres.

The same corpus (three repositories, two snapshots of one, labels, git history, vectors)
is indexed into a SQLite file and into a Postgres database by the same indexer, and the
two are compared table by table with `runtime store copy`'s verification (row counts and
SHA-256 of every table in canonical form) and by search results. An incremental re-index
after edits equals a fresh index; a killed indexer leaves the previous index searchable;
a second indexer waits for the first or is refused; a database that is down is a coded
error without the password.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from runtime.engine.indexcopy import VIEWS, _Side
from runtime.errors import StoreError
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.indexes import open_index
from runtime.retrieval.indexwrite import open_writer
from runtime.retrieval.node import Scope
from runtime.retrieval.pgwrite import PostgresIndexWriter
from tests.conftest import SAMPLE_ROOT, HashingEmbedder

ROOT = Path(__file__).resolve().parents[2]
# Seconds each (the corpus indexed several times): out of the fast subset, run by mutants.
SLOW_PINS = (pytest.mark.slow, pytest.mark.pins)
LABELS = [
    ("Database/Procedures/*", ["confidential"]),
    ("src/Eshop.Api/*", ["internal"]),
]
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
}


def _git(folder: Path, *args: str) -> None:
    env = {**os.environ, **GIT_ENV, "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, env=env)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """eshop (labelled, with git history), the ledger sample and cleanarch, copied."""
    top = tmp_path / "corpus"
    shutil.copytree(SAMPLE_ROOT, top / "eshop")
    shutil.copytree(ROOT / "tests" / "data" / "code", top / "ledger")
    shutil.copytree(ROOT / "tests" / "data" / "realworld" / "cleanarch", top / "cleanarch")
    _git(top / "eshop", "init", "-q", "-b", "main")
    _git(top / "eshop", "add", "-A")
    _git(top / "eshop", "commit", "-q", "-m", "first")
    return top


def build(writer: Any, top: Path, *, embed: bool = True) -> list[dict[str, Any]]:
    """Index the corpus: its runs' reports (without the seconds)."""
    emb = HashingEmbedder(32) if embed else None
    runs = [
        ("eshop", "main", LABELS, True),
        ("ledger", "main", [], False),
        ("cleanarch", "v1", [], False),
        ("cleanarch", "v2", [], False),
    ]
    reports = []
    for name, snapshot, labels, git in runs:
        report = index_paths(
            writer,
            [str(top / name)],
            repository=name,
            snapshot=snapshot,
            label_rules=labels,
            embedder=emb,
            jobs=1,
            git=git,
        )
        writer.record_root(str(top / name), name)
        d = report.to_dict()
        d.pop("seconds")
        reports.append(d)
    return reports


def index_into(location: str, top: Path, **kw: Any) -> list[dict[str, Any]]:
    writer = open_writer(location)
    try:
        return build(writer, top, **kw)
    finally:
        getattr(writer, "close", lambda: None)()


def digests(location: str) -> dict[str, tuple[int, str]]:
    """Rows and SHA-256 of every table, as `runtime store copy` verifies them."""
    side = _Side(location, create=False)
    try:
        return {table: side.digest(table) for table in VIEWS}
    finally:
        side.close()


def edit(top: Path) -> None:
    """A changed file, a deleted one, a new one, a second definition of a class, new labels."""
    service = top / "eshop" / "src" / "Eshop.Core" / "Services" / "BasketService.cs"
    service.write_text(service.read_text().replace("BasketService", "BasketServiceV2", 1))
    (top / "ledger" / "db" / "usp_TransferFunds.sql").unlink()
    (top / "ledger" / "NOTES.md").write_text("# Notes\n\nTransfers are journaled twice.\n")
    repo = next((top / "ledger" / "src").glob("AccountRepository.cs"))
    (top / "ledger" / "src" / "AccountRepositoryCopy.cs").write_text(repo.read_text())
    _git(top / "eshop", "add", "-A")
    _git(top / "eshop", "commit", "-q", "-m", "second")


QUERIES = [
    ("BasketService", Scope("eshop", "main")),
    ("capture payment", Scope("eshop", "main", ("confidential", "internal"))),
    ("usp_CapturePayment", Scope("eshop", "main")),
    ("usp_CapturePayment", Scope("eshop", "main", ("confidential",))),
    ("transfer funds between accounts", Scope("ledger")),
    ("account repository", Scope()),
    ("todo item", Scope("cleanarch", "v2")),
]


def searches(location: str, *, hybrid: bool = True) -> list[list[str]]:
    store = open_index(location)
    try:
        out = [[h["id"] for h in store.search(q, scope=scope, top_k=8)] for q, scope in QUERIES]
        emb = HashingEmbedder(32)
        out += [
            [h["id"] for h in store.search(q, scope=s, top_k=8, search_type="hybrid", embedder=emb)]
            for q, s in (QUERIES[:3] if hybrid else ())
        ]
        return out
    finally:
        getattr(store, "close", lambda: None)()


@SLOW_PINS[0]
@SLOW_PINS[1]
def test_postgres_index_equals_the_sqlite_index(pg_url, corpus, tmp_path):
    sqlite = str(tmp_path / "index.db")
    assert index_into(pg_url, corpus) == index_into(sqlite, corpus)
    pg, lite = digests(pg_url), digests(sqlite)
    assert pg == lite
    # the corpus is wide enough to tell: every table holds rows
    assert all(rows for rows, _ in pg.values()), pg
    found = searches(pg_url)
    assert found == searches(sqlite)
    assert all(found)
    proc = "eshop::main::procedure::dbo.usp_CapturePayment"
    assert proc not in found[2] and proc == found[3][0]  # labels hold on Postgres too


@SLOW_PINS[0]
@SLOW_PINS[1]
def test_incremental_reindex_equals_a_fresh_index(pg_server, corpus, tmp_path):
    url, fresh = pg_server.create_database(), pg_server.create_database()
    sqlite = str(tmp_path / "index.db")
    index_into(url, corpus)
    index_into(sqlite, corpus)
    edit(corpus)
    again = index_into(url, corpus)
    assert again == index_into(sqlite, corpus)
    # the unchanged files were skipped, the changed, new and deleted ones were seen to
    assert again[1]["unchanged"] == again[1]["files"] - 2 and again[1]["deleted"] == 1
    assert again[2]["nodes"] == again[3]["nodes"] == 0
    index_into(fresh, corpus)
    assert digests(url) == digests(fresh) == digests(sqlite)
    assert searches(url) == searches(fresh)


KILLER = """
import os, signal, sys
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.indexwrite import open_writer

url, root, at = sys.argv[1], sys.argv[2], int(sys.argv[3])

def progress(stage, done, total):
    if stage == "parse" and done == at:
        os.kill(os.getpid(), signal.SIGKILL)

index_paths(open_writer(url), [root], repository="eshop", snapshot="main",
            label_rules=[("Database/Procedures/*", ["confidential"]),
                         ("src/Eshop.Api/*", ["internal"])],
            jobs=1, progress=progress)
"""


@SLOW_PINS[0]
@SLOW_PINS[1]
def test_a_killed_indexer_leaves_the_previous_index_searchable(pg_url, corpus):
    index_into(pg_url, corpus, embed=False)
    before, hits = digests(pg_url), searches(pg_url, hybrid=False)
    for path in (corpus / "eshop").rglob("*.cs"):  # every C# file changes
        path.write_text(path.read_text() + "\n// edited\n")
    done = subprocess.run(
        [sys.executable, "-c", KILLER, pg_url, str(corpus / "eshop"), "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == -9, done.stderr
    assert digests(pg_url) == before
    assert searches(pg_url, hybrid=False) == hits
    # the killed run's lock went with its connection: the next run proceeds and finishes it
    writer = PostgresIndexWriter(pg_url, lock_wait=30)
    try:
        report = index_paths(
            writer, [str(corpus / "eshop")], repository="eshop", label_rules=LABELS, jobs=1
        )
    finally:
        writer.close()
    assert report.unchanged == report.files - len(list((corpus / "eshop").rglob("*.cs")))
    assert digests(pg_url) != before


def test_a_second_indexer_waits_for_the_first_or_is_refused(pg_url, corpus):
    first = PostgresIndexWriter(pg_url)
    try:
        with pytest.raises(StoreError) as refused:
            PostgresIndexWriter(pg_url, lock_wait=0.2)
        assert refused.value.code == "INDEX_BUSY"
        waiting = threading.Event()
        seen: dict[str, Any] = {}

        def second() -> None:
            writer = PostgresIndexWriter(pg_url, lock_wait=60, on_wait=lambda _: waiting.set())
            try:
                seen["report"] = index_paths(
                    writer, [str(corpus / "ledger")], repository="ledger", jobs=1
                )
            finally:
                writer.close()

        thread = threading.Thread(target=second)
        thread.start()
        assert waiting.wait(30)
        index_paths(first, [str(corpus / "ledger")], repository="ledger", jobs=1)
    finally:
        first.close()
    thread.join(60)
    # it read the hashes the first stored: nothing was left for it to write
    report = seen["report"]
    assert report.files > 0 and report.unchanged == report.files and report.nodes == 0


@pytest.mark.parametrize(
    "form",
    [
        "postgresql://someone:s3cr3t-pw@127.0.0.1:{port}/index",
        "postgresql://someone@127.0.0.1:{port}/index?sslmode=disable&password=s3cr3t-pw",
    ],
    ids=["after the user", "in the query"],
)
@pytest.mark.parametrize("command", ["index", "search"])
def test_a_database_that_is_down_is_a_coded_error_without_the_password(
    runner, corpus, form, command
):
    from runtime.cli import cli
    from tests.postgres import _free_port

    url = form.format(port=_free_port())
    first = str(corpus / "ledger") if command == "index" else "transfer"
    result = runner.invoke(cli, [command, first, "--index", url])
    assert result.exit_code != 0
    assert "INDEX_UNAVAILABLE" in result.output + result.stderr
    assert "s3cr3t-pw" not in result.output + result.stderr
    assert "someone" in result.output + result.stderr  # the rest of the URL is shown


@SLOW_PINS[0]
@SLOW_PINS[1]
def test_a_server_gone_mid_index_leaves_the_last_commit(pg_private_server, corpus):
    url = pg_private_server.create_database()
    index_into(url, corpus, embed=False)
    before = digests(url)
    (corpus / "ledger" / "NOTES.md").write_text("# Notes\n\nnew\n")
    for path in (corpus / "ledger").rglob("*.cs"):
        path.write_text(path.read_text() + "\n// edited\n")

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "parse" and done == 2:
            pg_private_server.stop(
                "fast"
            )  # (immediate would lose commits: synchronous_commit is off)

    writer = PostgresIndexWriter(url)
    try:
        with pytest.raises(StoreError) as gone:
            index_paths(
                writer, [str(corpus / "ledger")], repository="ledger", jobs=1, progress=progress
            )
    finally:
        writer.close()
    assert gone.value.code == "INDEX_UNAVAILABLE"
    pg_private_server.restart()
    assert digests(url) == before


def test_runtime_index_and_search_take_a_url(runner, pg_url, corpus, tmp_path):
    from runtime.cli import cli

    out = {}
    for where in (pg_url, str(tmp_path / "index.db")):
        result = runner.invoke(cli, ["index", str(corpus / "ledger"), "--index", where, "--json"])
        assert result.exit_code == 0, result.output + result.stderr
        counts = json.loads(result.output)
        counts.pop("seconds")
        found = runner.invoke(cli, ["search", "transfer funds", "--index", where, "--json"])
        assert found.exit_code == 0, found.output + found.stderr
        out[where] = (counts, [h["id"] for h in json.loads(found.output)["hits"]])
    pg, lite = out.values()
    assert pg == lite and pg[0]["nodes"] > 0 and pg[1]


def test_runtime_inspect_reads_labels_from_a_postgres_index(runner, pg_url, corpus):
    from runtime.cli import cli

    eshop = corpus / "eshop"
    labels = eshop.parent / "labels.json"
    labels.write_text(json.dumps(dict(LABELS)))
    args = ["index", str(eshop), "--index", pg_url, "--labels", str(labels)]
    assert runner.invoke(cli, args).exit_code == 0
    secret = next((eshop / "Database" / "Procedures").glob("*.sql"))
    denied = runner.invoke(cli, ["inspect", str(secret), "--index", pg_url])
    assert denied.exit_code != 0 and "ACCESS_DENIED" in denied.output + denied.stderr
    cleared = json.dumps({"clearance": ["confidential"]})
    allowed = runner.invoke(cli, ["inspect", str(secret), "--index", pg_url, "--subject", cleared])
    assert allowed.exit_code == 0, allowed.output + allowed.stderr
    public = eshop / "README.md"
    assert runner.invoke(cli, ["inspect", str(public), "--index", pg_url]).exit_code == 0


def test_text_postgres_cannot_hold_is_indexed_as_on_sqlite(pg_url, tmp_path):
    # NUL (from a UTF-16 file) and the escape character pgtext uses, followed by its codes
    tree = tmp_path / "odd"
    tree.mkdir()
    (tree / "nul.txt").write_bytes("# Nul\n\nbefore\x00after \U0010fffd0\n".encode("utf-16"))
    (tree / "esc.md").write_text("# Esc\n\n\U0010fffde and \U0010fffd0 stay as written\n")
    sqlite = str(tmp_path / "index.db")
    for where in (pg_url, sqlite):
        writer = open_writer(where)
        try:
            assert index_paths(writer, [str(tree)], repository="odd", jobs=1).nodes == 2
        finally:
            getattr(writer, "close", lambda: None)()
    assert digests(pg_url) == digests(sqlite)
    store = open_index(pg_url)
    try:
        nodes = store.get_nodes(
            ["odd::main::doc::nul.txt#Nul", "odd::main::doc::esc.md#Esc"], scope=Scope()
        )
    finally:
        store.close()
    assert "before\x00after \U0010fffd0" in nodes["odd::main::doc::nul.txt#Nul"].text
    assert "\U0010fffde and \U0010fffd0" in nodes["odd::main::doc::esc.md#Esc"].text


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_an_id_held_by_another_file_is_refused_on_both(backend, request, tmp_path):
    from runtime.retrieval.node import Node
    from runtime.retrieval.nodestore import node_row

    where = str(tmp_path / "i.db") if backend == "sqlite" else request.getfixturevalue("pg_url")

    def row(path: str) -> Any:
        return node_row(
            Node("r::s::class::A", "r", "s", "class", "A", "A", path, "dotnet", 1, 2, "x")
        )

    writer = open_writer(where)
    try:
        writer.replace_file_rows("r", "s", "a.cs", "h1", [row("a.cs")], b"", known=False)
        for held_by in ("stored", "same batch"):
            with pytest.raises(StoreError) as taken, writer.batch():
                if held_by == "same batch":
                    writer.replace_file_rows("r", "s", "c.cs", "h3", [], b"", known=False)
                    writer.delete_file("r", "s", "a.cs")
                    writer.replace_file_rows(
                        "r", "s", "a.cs", "h1", [row("a.cs")], b"", known=False
                    )
                writer.replace_file_rows("r", "s", "b.cs", "h2", [row("b.cs")], b"", known=False)
            assert taken.value.code == "INDEX_ERROR"
            assert str(taken.value).startswith(
                "INDEX_ERROR: b.cs: the node id r::s::class::A is already held by a node of a.cs"
            )
            # nothing of the refused batch stayed
            assert writer.file_hashes("r", "s") == {"a.cs": "h1"}
    finally:
        getattr(writer, "close", lambda: None)()


def _blocks(doc: str, after: str) -> list[str]:
    """The command lines of the first code block after a marker in a doc."""
    text = (ROOT / "docs" / doc).read_text()
    block = text[text.index(after) :].split("```\n", 2)[1]
    return [line for line in block.splitlines() if line.strip()]


def test_the_documented_commands_run(runner, pg_url, tmp_path, monkeypatch):
    import shlex

    from runtime.cli import cli

    shutil.copytree(SAMPLE_ROOT, tmp_path / "src")
    (tmp_path / "labels.yaml").write_text('"Database/Procedures/*": [confidential]\n')
    monkeypatch.chdir(tmp_path)
    lines = _blocks("scale-out.md", "## The node index on Postgres")
    assert lines[0] == "export RUNTIME_INDEX=postgresql://runtime@db.internal/index"
    monkeypatch.setenv("RUNTIME_INDEX", pg_url)
    out = []
    for line in lines[1:] + lines[1:2]:
        args = shlex.split(line, comments=True)
        assert args[0] == "runtime"
        result = runner.invoke(cli, args[1:])
        assert result.exit_code == 0, (line, result.output, result.stderr)
        out.append(result.output)
    assert "OrderService" in out[1]  # where orders are placed
    assert " 0 node(s) written" in out[2]  # the same tree again: nothing to write
