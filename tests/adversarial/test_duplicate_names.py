"""Duplicate names: every definition of a qualified name survives incremental indexing.

A table created in `Tables/` and in `Migrations/`, a C# partial class split over two
files, the same object created twice in one script, a heading repeated in one document:
each definition is its own node, and an index brought up to date run by run equals a
fresh index of the same tree.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.cli import cli
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.node import Scope
from runtime.retrieval.nodestore import open_store

ORDERS = "CREATE TABLE dbo.Orders (Id INT PRIMARY KEY, Total DECIMAL(10, 2));\n"
ORDERS_V1 = "CREATE TABLE dbo.Orders (Id INT PRIMARY KEY);\n"
READER = "CREATE PROCEDURE dbo.usp_OrderTotal AS SELECT Total FROM dbo.Orders;\n"
PART_A = "namespace Shop;\npublic partial class Ledger\n{\n    public void Post() { }\n}\n"
PART_B = "namespace Shop;\npublic partial class Ledger\n{\n    public void Close() { }\n}\n"


def _dump(path: str) -> tuple[list, list, list]:
    """Every node, full-text row and edge of an index, in a canonical order."""
    db = sqlite3.connect(path)
    try:
        nodes = db.execute(
            "SELECT id, repository, snapshot, kind, name, qualified_name, path, language, "
            "start_line, end_line, text, metadata, labels FROM nodes ORDER BY id"
        ).fetchall()
        fts = db.execute(
            "SELECT n.id, f.name, f.body, f.meta FROM nodes_fts f "
            "JOIN nodes n ON n.rowid = f.rowid ORDER BY n.id"
        ).fetchall()
        edges = db.execute("SELECT * FROM edges ORDER BY 1, 2, 3").fetchall()
    finally:
        db.close()
    return nodes, fts, edges


def _index(runner, root: Path, index: Path) -> dict:
    result = runner.invoke(
        cli,
        ["index", str(root), "--index", str(index), "--repository", "r", "--jobs", "1", "--json"],
    )
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_a_table_in_two_folders_keeps_both_definitions_through_an_edit(runner, tmp_path):
    root = tmp_path / "db"
    _write(
        root,
        {
            "Tables/Orders.sql": ORDERS,
            "Migrations/001_init.sql": ORDERS_V1,
            "Procedures/usp_OrderTotal.sql": READER,
        },
    )
    index = tmp_path / "i.db"
    # 3 nodes, each counted once; edges: the procedure reads both definitions, and the two
    # definitions name each other (SameName, both ways).
    first = _index(runner, root, index)
    assert (first["files"], first["nodes"], first["edges"]) == (3, 3, 4)
    assert open_store(str(index)).counts()["nodes"] == 3
    (root / "Migrations" / "001_init.sql").write_text(ORDERS_V1.replace(");", ", Placed DATE);"))
    second = _index(runner, root, index)
    assert (second["files"], second["nodes"], second["edges"]) == (3, 1, 4)  # one file parsed
    fresh = tmp_path / "fresh.db"
    _index(runner, root, fresh)
    assert _dump(str(index)) == _dump(str(fresh))
    store = open_store(str(index))
    tables = store.get_nodes(
        [
            "r::main::table::dbo.Orders@Tables/Orders.sql",
            "r::main::table::dbo.Orders@Migrations/001_init.sql",
        ],
        scope=Scope("r"),
    )
    assert {n.path: n.text.strip() for n in tables.values()} == {
        "Tables/Orders.sql": ORDERS.strip(),  # the unchanged file's text is still there
        "Migrations/001_init.sql": "CREATE TABLE dbo.Orders (Id INT PRIMARY KEY, Placed DATE);",
    }
    reads = store.edges(["r::main::procedure::dbo.usp_OrderTotal"], scope=Scope("r"))
    assert reads == [
        (
            "r::main::procedure::dbo.usp_OrderTotal",
            "r::main::table::dbo.Orders@Migrations/001_init.sql",
            "ReadsFrom",
        ),
        (
            "r::main::procedure::dbo.usp_OrderTotal",
            "r::main::table::dbo.Orders@Tables/Orders.sql",
            "ReadsFrom",
        ),
    ]
    # Once the migration is gone the table is defined once: the plain id again.
    (root / "Migrations" / "001_init.sql").unlink()
    third = _index(runner, root, index)
    assert (third["files"], third["nodes"], third["edges"]) == (2, 0, 1)
    gone = tmp_path / "gone.db"
    _index(runner, root, gone)
    assert _dump(str(index)) == _dump(str(gone))
    assert set(store.get_nodes(["r::main::table::dbo.Orders"], scope=Scope("r"))) == {
        "r::main::table::dbo.Orders"
    }


def test_the_offline_answer_cites_each_definition_with_its_own_path(runner, tmp_path):
    """code_qa.yaml end to end after an incremental run: both tables are evidence, each
    cited by its id and path, each with its file's current text."""
    root = tmp_path / "db"
    _write(
        root,
        {
            "Tables/Orders.sql": ORDERS,
            "Migrations/001_init.sql": ORDERS_V1,
            "Procedures/usp_OrderTotal.sql": READER,
        },
    )
    index = tmp_path / "i.db"
    _index(runner, root, index)
    (root / "Migrations" / "001_init.sql").write_text(ORDERS_V1.replace(");", ", Placed DATE);"))
    _index(runner, root, index)
    pipeline = Path(__file__).resolve().parents[2] / "pipelines" / "code_qa.yaml"
    result = runner.invoke(
        cli,
        [
            "exec",
            str(pipeline),
            "--index",
            str(index),
            "--store",
            str(tmp_path / "runs.db"),
            "--input",
            "question=Which columns does the Orders table have?",
            "--input",
            "repository=r",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)["output"]["final_answer"]
    assert (
        "1. [r::main::table::dbo.Orders@Tables/Orders.sql] (Tables/Orders.sql)\n"
        "   > CREATE TABLE dbo.Orders (Id INT PRIMARY KEY, Total DECIMAL(10, 2));\n"
        "2. [r::main::table::dbo.Orders@Migrations/001_init.sql] (Migrations/001_init.sql)\n"
        "   > CREATE TABLE dbo.Orders (Id INT PRIMARY KEY, Placed DATE);\n"
    ) in answer


def test_a_partial_class_keeps_both_parts_through_an_edit_of_one(runner, tmp_path):
    root = tmp_path / "src"
    _write(root, {"Ledger.cs": PART_A, "Ledger.Close.cs": PART_B})
    index = tmp_path / "i.db"
    first = _index(runner, root, index)
    # Two class parts and two methods; the parts name each other both ways.
    assert (first["files"], first["nodes"], first["edges"]) == (2, 4, 2)
    (root / "Ledger.Close.cs").write_text(PART_B.replace("Close()", "CloseMonth()"))
    second = _index(runner, root, index)
    assert (second["files"], second["nodes"], second["edges"]) == (2, 2, 2)
    fresh = tmp_path / "fresh.db"
    _index(runner, root, fresh)
    assert _dump(str(index)) == _dump(str(fresh))
    store = open_store(str(index))
    part_a = "r::main::class::Shop.Ledger@Ledger.cs"
    part_b = "r::main::class::Shop.Ledger@Ledger.Close.cs"
    parts = store.get_nodes([part_a, part_b], scope=Scope("r"))
    assert "Post()" in parts[part_a].text and "CloseMonth()" in parts[part_b].text
    assert store.edges([part_a], scope=Scope("r")) == [(part_a, part_b, "SameName")]
    hits = store.search("Post", scope=Scope("r"), top_k=5)
    assert hits[0]["id"] == "r::main::method::Shop.Ledger.Post"  # the unchanged part's member


def test_one_script_creating_a_table_twice_and_a_repeated_heading_keep_both(tmp_path):
    root = tmp_path / "repo"
    _write(
        root,
        {
            "setup.sql": ORDERS_V1 + "GO\nDROP TABLE dbo.Orders;\nGO\n" + ORDERS,
            "guide.md": "# Guide\n## Example\nfirst example\n## Example\nsecond example\n",
        },
    )
    store = open_store(str(tmp_path / "i.db"), create=True)
    report = index_paths(store, [str(root)], repository="r", jobs=1)
    ids = sorted(r[0] for r in store.conn().execute("SELECT id FROM nodes"))
    assert report.nodes == len(ids) == 5
    assert ids == [
        "r::main::doc::guide.md#Guide",
        "r::main::doc::guide.md#Guide > Example@guide.md",
        "r::main::doc::guide.md#Guide > Example@guide.md#2",
        "r::main::table::dbo.Orders@setup.sql",
        "r::main::table::dbo.Orders@setup.sql#2",
    ]


def test_files_under_one_relative_path_from_two_roots_are_refused(runner, tmp_path):
    _write(tmp_path / "a", {"README.md": "# A\n"})
    _write(tmp_path / "b", {"README.md": "# B\n"})
    both = [str(tmp_path / "a"), str(tmp_path / "b")]
    result = runner.invoke(
        cli, ["index", *both, "--index", str(tmp_path / "i"), "--repository", "r"]
    )
    assert result.exit_code == 2 and "USAGE" in result.stderr
    assert "would both be indexed as README.md" in result.stderr
    # A file under two roots given (one inside the other) is indexed once.
    store = open_store(str(tmp_path / "n.db"), create=True)
    _write(tmp_path / "c", {"Core/A.sql": ORDERS})
    report = index_paths(store, [str(tmp_path / "c"), str(tmp_path / "c" / "Core")], jobs=1)
    assert (report.files, report.nodes) == (1, 1)


# The pool the property test edits: paths of each language, and texts for each, with the
# same qualified names across files (dbo.Orders, Shop.Ledger, dbo.usp_Get), within one
# file, in another spelling (dbo.ORDERS) and referenced by bare name.
_SQL_PATHS = ("Tables/Orders.sql", "Migrations/001.sql", "Migrations/002.sql", "Procs/get.sql")
_CS_PATHS = ("src/Ledger.cs", "src/Ledger.Post.cs", "src/Book.cs")
_MD_PATHS = ("docs/guide.md",)
_TEXTS = {
    ".sql": (
        ORDERS,
        ORDERS_V1,
        ORDERS_V1 + "GO\n" + ORDERS,
        "CREATE TABLE dbo.ORDERS (Id INT);\n",
        "CREATE PROCEDURE dbo.usp_Get AS SELECT Id FROM dbo.Orders;\n",
        "CREATE PROCEDURE dbo.usp_Get AS UPDATE Orders SET Total = 0;\n",
    ),
    ".cs": (
        PART_A,
        PART_B,
        "namespace Shop;\npublic partial class Ledger\n{\n    partial void Audit();\n"
        "    public void Post() { Audit(); }\n}\n",
        "namespace Shop;\npublic partial class Ledger\n{\n    partial void Audit() { }\n}\n",
        "namespace Shop;\npublic class Book\n{\n    private Ledger _ledger;\n"
        "    public void Run() { _ledger.Post(); }\n}\n",
    ),
    ".md": (
        "# Guide\n## Example\nLedger posts.\n## Example\nOrders total.\n",
        "# Guide\nAbout the Ledger.\n",
    ),
}
_PATHS = _SQL_PATHS + _CS_PATHS + _MD_PATHS


def _text(path: str, choice: int) -> str:
    texts = _TEXTS[Path(path).suffix]
    return texts[choice % len(texts)]


def _sibling(path: str, choice: int) -> str:
    """A path of the same language (a rename keeps the language)."""
    same = [p for p in _PATHS if Path(p).suffix == Path(path).suffix]
    return same[choice % len(same)]


_TREE = st.dictionaries(st.sampled_from(_PATHS), st.integers(0, 5), min_size=1)
_EDIT = st.tuples(
    st.sampled_from(("put", "put", "delete", "rename")), st.sampled_from(_PATHS), st.integers(0, 5)
)


_EDITS = st.lists(_EDIT, min_size=1, max_size=5)


@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(_TREE, _EDITS)
def test_incremental_index_equals_a_fresh_one_after_any_edits(tree, edits):
    """Add, edit, delete and rename files among duplicate names: after every run the
    incremental index equals a fresh index of the same tree."""
    check_edits(tree, edits)


@pytest.mark.slow
@pytest.mark.pins
@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(_TREE, _EDITS)
def test_incremental_index_equals_a_fresh_one_over_more_edits(tree, edits):
    """The same property over more (and not derandomized) trees and edits."""
    check_edits(tree, edits)


def check_edits(tree: dict[str, int], edits: list[tuple[str, str, int]]) -> None:
    """Index the tree, apply the edits one run at a time, compare with fresh indexes."""
    work = Path(tempfile.mkdtemp(prefix="dup-names-"))
    root = work / "tree"
    _write(root, {path: _text(path, choice) for path, choice in tree.items()})
    incremental = open_store(str(work / "incremental.db"), create=True)
    try:
        index_paths(incremental, [str(root)], repository="r", jobs=1)
        for step, (op, path, choice) in enumerate(edits):
            target = root / path
            if op == "put":
                _write(root, {path: _text(path, choice)})
            elif op == "delete" and target.exists():
                target.unlink()
            elif op == "rename" and target.exists():
                dest = root / _sibling(path, choice)
                if not dest.exists():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    target.rename(dest)
            report = index_paths(incremental, [str(root)], repository="r", jobs=1)
            fresh = open_store(str(work / f"fresh{step}.db"), create=True)
            expected = index_paths(fresh, [str(root)], repository="r", jobs=1)
            counts = fresh.counts()
            fresh.conn().close()
            assert _dump(incremental.path) == _dump(fresh.path)
            assert report.edges == expected.edges == counts["edges"]
            assert (report.files, expected.nodes) == (expected.files, counts["nodes"])
    finally:
        incremental.conn().close()
        shutil.rmtree(work)
