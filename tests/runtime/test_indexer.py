"""The indexer: nodes and edges from the sample, incremental re-indexing, deletions, chunks."""

from __future__ import annotations

import shutil
from pathlib import Path

from runtime.retrieval.indexer import doc_chunks, index_paths, labels_for
from runtime.retrieval.node import Scope
from runtime.retrieval.nodestore import open_store

SAMPLE_ROOT = Path(__file__).resolve().parent.parent.parent / "pipelines" / "sample" / "eshop"


def _copy(tmp_path):
    dst = tmp_path / "eshop"
    shutil.copytree(SAMPLE_ROOT, dst)
    return dst


def test_sample_index_counts_and_cross_language_edges(sample_index):
    counts = sample_index.counts()
    assert counts["files"] == 26 and counts["nodes"] > 100 and counts["edges"] > 100
    scope = Scope("eshop", "main", ("confidential",))
    edges = set(
        sample_index.edges(
            [
                "eshop::main::method::Eshop.Infrastructure.Repositories."
                "OrderRepository.PlaceOrderAsync"
            ],
            scope=scope,
        )
    )
    assert (
        "eshop::main::method::Eshop.Infrastructure.Repositories.OrderRepository.PlaceOrderAsync",
        "eshop::main::procedure::dbo.usp_PlaceOrder",
        "UsesSql",
    ) in edges


def test_incremental_reindex_skips_unchanged_and_drops_deleted(tmp_path):
    root = _copy(tmp_path)
    store = open_store(str(tmp_path / "i.db"), create=True)
    first = index_paths(store, [str(root)], repository="r")
    assert first.unchanged == 0 and first.nodes > 100
    again = index_paths(store, [str(root)], repository="r")
    assert (again.unchanged, again.nodes) == (again.files, 0)
    assert again.edges == first.edges  # resolution still sees every file
    proc = root / "Database" / "Procedures" / "usp_CancelOrder.sql"
    proc.write_text(proc.read_text().replace("usp_CancelOrder", "usp_CancelOrderV2"))
    changed = index_paths(store, [str(root)], repository="r")
    assert changed.unchanged == changed.files - 1 and changed.nodes == 1
    assert store.get_nodes(["r::main::procedure::dbo.usp_CancelOrder"], scope=Scope("r")) == {}
    assert store.get_nodes(["r::main::procedure::dbo.usp_CancelOrderV2"], scope=Scope("r"))
    (root / "Database" / "Procedures" / "usp_LogEvent.sql").unlink()
    gone = index_paths(store, [str(root)], repository="r")
    assert gone.deleted == 1
    assert store.get_nodes(["r::main::procedure::dbo.usp_LogEvent"], scope=Scope("r")) == {}
    executes = [
        e
        for e in store.edges(["r::main::procedure::dbo.usp_PlaceOrder"], scope=Scope("r"))
        if e[2] == "Executes"
    ]
    assert executes == []  # the edge into the deleted procedure went with it


def test_snapshots_live_side_by_side(tmp_path):
    root = _copy(tmp_path)
    store = open_store(str(tmp_path / "s.db"), create=True)
    index_paths(store, [str(root)], repository="r", snapshot="v1")
    (root / "src" / "Eshop.Core" / "Services" / "BasketService.cs").unlink()
    index_paths(store, [str(root)], repository="r", snapshot="v2")
    v1 = store.search("BasketService", scope=Scope("r", "v1"), top_k=5)
    v2 = store.search("BasketService", scope=Scope("r", "v2"), top_k=5)
    assert any(h["kind"] == "class" and h["name"] == "BasketService" for h in v1)
    assert not any(h["kind"] == "class" and h["name"] == "BasketService" for h in v2)


def test_skipped_files_are_counted(tmp_path):
    (tmp_path / "a.png").write_bytes(b"\x89PNG")
    (tmp_path / "notes.md").write_text("# Notes\nAbout orders.\n")
    store = open_store(str(tmp_path / "k.db"), create=True)
    report = index_paths(store, [str(tmp_path)], repository="r")
    assert (report.files, report.skipped) == (1, 1)


def test_heading_aware_chunks_and_label_globs():
    chunks = doc_chunks("intro\n# A\ntext a\n## B\ntext b\n# C\ntext c\n", "doc.md")
    assert [c[0] for c in chunks] == ["doc", "A", "A > B", "C"]
    assert chunks[2][2] == 4
    assert labels_for(
        "Database/Procedures/x.sql", [("Database/*", ["internal"]), ("*/Procedures/*", ["dba"])]
    ) == ["internal", "dba"]


def _dump(store) -> tuple[list, list, list]:
    db = store.conn()
    nodes = db.execute(
        "SELECT id, kind, name, path, start_line, end_line, text, metadata, labels FROM nodes "
        "ORDER BY id"
    ).fetchall()
    fts = db.execute(
        "SELECT n.id, f.name, f.body, f.meta FROM nodes_fts f JOIN nodes n ON n.rowid = f.rowid "
        "ORDER BY n.id"
    ).fetchall()
    edges = db.execute("SELECT * FROM edges ORDER BY 1, 2, 3").fetchall()
    return nodes, fts, edges


def test_worker_processes_build_the_same_index(tmp_path, monkeypatch):
    """Parsing in worker processes changes nothing in the index, only who does the work."""
    import runtime.retrieval.indexer as indexer

    monkeypatch.setattr(indexer, "PARALLEL_MIN_FILES", 1)
    root = _copy(tmp_path)
    labels = [("Database/Procedures/usp_CapturePayment.sql", ["confidential"])]
    serial = open_store(str(tmp_path / "serial.db"), create=True)
    parallel = open_store(str(tmp_path / "parallel.db"), create=True)
    one = index_paths(serial, [str(root)], repository="r", label_rules=labels, jobs=1)
    two = index_paths(parallel, [str(root)], repository="r", label_rules=labels, jobs=2)
    assert (one.files, one.nodes, one.edges) == (two.files, two.nodes, two.edges) == (26, 114, 110)
    assert _dump(serial) == _dump(parallel)


def test_an_index_of_another_layout_is_refused_by_readers_and_rebuilt_by_the_indexer(tmp_path):
    import sqlite3

    import pytest

    from runtime.errors import StoreError

    path = tmp_path / "old.db"
    store = open_store(str(path), create=True)
    index_paths(store, [str(SAMPLE_ROOT / "Database")], repository="r")
    store.conn().close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 1")  # as written by an earlier version
    db.commit()
    db.close()
    with pytest.raises(StoreError) as info:
        open_store(str(path))
    assert info.value.code == "INDEX_FORMAT" and "runtime index" in str(info.value)
    again = open_store(str(path), create=True)
    report = index_paths(again, [str(SAMPLE_ROOT / "Database")], repository="r")
    assert report.rebuilt and report.unchanged == 0 and report.nodes > 10
    assert open_store(str(path)).search("usp_PlaceOrder", scope=Scope("r"), top_k=1)


def test_reindexing_keeps_the_full_text_index_consistent(tmp_path):
    root = _copy(tmp_path)
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(root)], repository="r")
    service = root / "src" / "Eshop.Core" / "Services" / "BasketService.cs"
    service.write_text(service.read_text().replace("AddItemAsync", "AddLineAsync"))
    (root / "Database" / "Views" / "vw_CustomerLifetimeValue.sql").unlink()
    index_paths(store, [str(root)], repository="r")
    # FTS5 checks its index against the stored rows; a mismatch raises.
    store.conn().execute("INSERT INTO nodes_fts (nodes_fts) VALUES ('integrity-check')")
    hits = store.search("AddLineAsync", scope=Scope("r"), top_k=3)
    assert hits and hits[0]["name"] == "AddLineAsync"
    ids = {h["id"] for h in store.search("AddItemAsync", scope=Scope("r"), top_k=10)}
    assert "r::main::method::Eshop.Core.Services.BasketService.AddItemAsync" not in ids


def test_a_type_declared_in_two_files_leaves_no_stray_full_text_rows(tmp_path):
    """`partial class` in two files: a node per part; re-indexing either keeps FTS exact."""
    root = tmp_path / "src"
    root.mkdir()
    a = "namespace Shop;\npublic partial class Ledger\n{\n    public void Post() { }\n}\n"
    b = "namespace Shop;\npublic partial class Ledger\n{\n    public void Close() { }\n}\n"
    (root / "A.cs").write_text(a)
    (root / "B.cs").write_text(b)
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(root)], repository="r")
    (root / "A.cs").write_text(a.replace("Post()", "PostEntry()"))
    index_paths(store, [str(root)], repository="r")
    db = store.conn()
    db.execute("INSERT INTO nodes_fts (nodes_fts) VALUES ('integrity-check')")
    nodes = db.execute("SELECT count(*) FROM nodes").fetchone()[0]
    fts = db.execute("SELECT count(*) FROM nodes_fts").fetchone()[0]
    assert nodes == fts
    ids = [r[0] for r in db.execute("SELECT id FROM nodes WHERE kind = 'class' ORDER BY id")]
    assert ids == ["r::main::class::Shop.Ledger@A.cs", "r::main::class::Shop.Ledger@B.cs"]


def test_progress_reports_reading_then_parsing(tmp_path):
    root = _copy(tmp_path)
    store = open_store(str(tmp_path / "i.db"), create=True)
    calls: list[tuple[str, int, int]] = []
    index_paths(store, [str(root)], repository="r", progress=lambda *a: calls.append(a))
    reads = [c for c in calls if c[0] == "read"]
    parses = [c for c in calls if c[0] == "parse"]
    assert reads[-1] == ("read", 26, 26) and [c[1] for c in reads] == list(range(1, 27))
    assert parses[-1] == ("parse", 26, 26)
    calls.clear()
    index_paths(store, [str(root)], repository="r", progress=lambda *a: calls.append(a))
    assert {c[0] for c in calls} == {"read"}  # nothing changed: nothing parsed


def test_workers_start_fresh_interpreters_when_other_threads_run(tmp_path, monkeypatch):
    """With a thread alive fork is unsafe: spawned workers build the same index."""
    import threading

    import runtime.retrieval.indexer as indexer

    monkeypatch.setattr(indexer, "PARALLEL_MIN_FILES", 1)
    done = threading.Event()
    waiting = threading.Thread(target=done.wait, daemon=True)
    waiting.start()
    try:
        spawned = open_store(str(tmp_path / "spawned.db"), create=True)
        index_paths(spawned, [str(SAMPLE_ROOT)], repository="r", jobs=2)
    finally:
        done.set()
        waiting.join()
    serial = open_store(str(tmp_path / "serial.db"), create=True)
    index_paths(serial, [str(SAMPLE_ROOT)], repository="r", jobs=1)
    assert _dump(spawned) == _dump(serial)


def full_nodes(path):
    import sqlite3

    with sqlite3.connect(path) as db:
        return [p for (p,) in db.execute("SELECT path FROM nodes")]


def test_a_file_the_extractor_fails_on_is_reported_not_fatal(tmp_path, break_extraction):
    root = _copy(tmp_path)
    restore = break_extraction("BasketService.cs", IndexError("list index out of range"))
    store = open_store(str(tmp_path / "i.db"), create=True)
    report = index_paths(store, [str(root)], repository="r", jobs=1)
    assert report.failed == [
        {
            "path": "src/Eshop.Core/Services/BasketService.cs",
            "error": "IndexError: list index out of range",
        }
    ]
    service = "r::main::class::Eshop.Core.Services.BasketService"
    assert store.get_nodes([service], scope=Scope("r")) == {}
    restore()
    # Everything else is indexed: all 26 files are read, and only the failed file's nodes are missing.
    full_store = open_store(str(tmp_path / "full.db"), create=True)
    full = index_paths(full_store, [str(root)], repository="r", jobs=1)
    lost = [p for p in full_nodes(tmp_path / "full.db") if p.endswith("BasketService.cs")]
    assert len(lost) == 4  # the class and its members
    assert (report.files, report.nodes) == (full.files, full.nodes - len(lost)) == (26, 110)
    again = index_paths(store, [str(root)], repository="r", jobs=1)
    assert again.failed == [] and again.files - again.unchanged == 1  # parsed again, now fine
    assert set(store.get_nodes([service], scope=Scope("r"))) == {service}


def test_broken_csharp_fields_do_not_stop_extraction():
    """Found by fuzzing: half-typed fields, as a file has while someone edits it."""
    import classifiers

    for field in ("int x = ;", "private int x, ;"):
        broken = (
            "namespace N;\npublic class A\n{\n    " + field + "\n    public int B { get; }\n}\n"
        )
        ex = classifiers.extract(broken, "A.cs")
        assert {"N.A", "N.A.B"} <= {s.qualified_name for s in ex.symbols}


def test_build_output_dependencies_and_dot_folders_are_not_walked(tmp_path):
    root = tmp_path / "repo"
    code = "namespace N;\npublic class A { public void Run() { } }\n"
    for rel in (
        "src/A.cs",
        ".git/objects/B.cs",
        "node_modules/x/C.cs",
        "bin/Debug/D.cs",
        ".venv/E.cs",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(code.replace("A", Path(rel).stem))
    store = open_store(str(tmp_path / "i.db"), create=True)
    report = index_paths(store, [str(root)], repository="r")
    assert report.files == 1
    assert {
        n.path for n in store.get_nodes(["r::main::class::N.A"], scope=Scope("r")).values()
    } == {"src/A.cs"}


def test_sql_scripts_saved_as_utf16_or_windows_1252_are_read(tmp_path):
    """SSMS saves scripts as UTF-16 with a byte-order mark; older tools wrote Windows-1252."""
    from runtime.retrieval.indexer import decode_source

    root = tmp_path / "db"
    root.mkdir()
    proc = "-- Clôture du mois\nCREATE PROCEDURE dbo.usp_CloseMonth AS UPDATE dbo.Ledger SET Closed = 1;\n"
    (root / "usp_CloseMonth.sql").write_bytes(proc.encode("utf-16"))  # with its BOM
    (root / "usp_Audit.sql").write_bytes(
        "-- Résumé\nCREATE PROCEDURE dbo.usp_Audit AS SELECT 1 FROM dbo.Ledger;\n".encode("cp1252")
    )
    (root / "data.sql").write_bytes(b"\x00\x01binary\x00")
    store = open_store(str(tmp_path / "i.db"), create=True)
    report = index_paths(store, [str(root)], repository="r")
    assert report.files == 2 and report.skipped == 1
    assert report.encodings == {"usp_Audit.sql": "windows-1252", "usp_CloseMonth.sql": "utf-16"}
    found = store.get_nodes(
        ["r::main::procedure::dbo.usp_CloseMonth", "r::main::procedure::dbo.usp_Audit"],
        scope=Scope("r"),
    )
    assert found["r::main::procedure::dbo.usp_CloseMonth"].metadata["doc"] == "Clôture du mois"
    assert found["r::main::procedure::dbo.usp_Audit"].metadata["doc"] == "Résumé"
    assert decode_source("é".encode()) == ("é", "utf-8")
