"""`runtime index PATH --git`: commits as nodes linked to the files they touched."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from runtime.cli import cli
from runtime.errors import StepRuntimeError
from runtime.retrieval.git_history import parse_log
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.node import Scope
from runtime.retrieval.nodestore import open_store

ORDERS = "CREATE TABLE dbo.Orders (OrderId INT NOT NULL PRIMARY KEY, Status NVARCHAR(20));\n"
PLACE = (
    "CREATE PROCEDURE dbo.usp_PlaceOrder @CustomerId INT AS\n"
    "BEGIN\n  INSERT INTO dbo.Orders (Status) VALUES ('New');\nEND\n"
)
SERVICE = (
    "namespace Shop;\npublic class BasketService\n{\n"
    "    public void Clear() { }\n    public void Add(int id) { }\n}\n"
)


def git(repo: Path, *args: str, date: str = "2026-01-05T10:00:00+00:00") -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Ana Lima",
        "GIT_AUTHOR_EMAIL": "ana@example.com",
        "GIT_COMMITTER_NAME": "Ana Lima",
        "GIT_COMMITTER_EMAIL": "ana@example.com",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, check=True, text=True
    )
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str, date: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, date=date)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    commit(root, {"db/Orders.sql": ORDERS}, "Add the Orders table", "2026-01-05T10:00:00+00:00")
    commit(
        root,
        {"db/usp_PlaceOrder.sql": PLACE, "src/BasketService.cs": SERVICE},
        "Place orders from the basket\n\nusp_PlaceOrder inserts a New order.",
        "2026-01-06T11:30:00+00:00",
    )
    return root


def commits(store: object) -> dict[str, dict[str, object]]:
    found = store.search(  # type: ignore[attr-defined]
        "order basket table", scope=Scope(), top_k=50, filters={"kind": "commit"}, per_file=0
    )
    nodes = store.get_nodes([h["id"] for h in found], scope=Scope())  # type: ignore[attr-defined]
    return {n.metadata["message"].splitlines()[0]: n.metadata for n in nodes.values()}


def test_commits_are_nodes_with_their_fields_and_edges(repo: Path, tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "i.db"), create=True)
    report = index_paths(store, [str(repo)], repository="shop", git=True)
    assert report.git == {"commits": 2, "added": 2, "removed": 0, "edges": 3}
    found = commits(store)
    place = found["Place orders from the basket"]
    assert place["author"] == "Ana Lima"
    assert place["date"] == "2026-01-06T11:30:00+00:00"
    assert place["message"] == "Place orders from the basket\n\nusp_PlaceOrder inserts a New order."
    assert place["files"] == [
        {"path": "db/usp_PlaceOrder.sql", "added": 4, "deleted": 0},
        {"path": "src/BasketService.cs", "added": 6, "deleted": 0},
    ]
    assert (place["added"], place["deleted"], place["files_changed"]) == (10, 0, 2)
    sha = str(place["sha"])
    nid = f"shop::main::commit::{sha}"
    [node] = store.get_nodes([nid], scope=Scope()).values()
    assert node.name == sha[:12] and node.kind == "commit" and "Ana Lima" in node.text
    targets = sorted(t for _, t, e in store.edges([nid], scope=Scope()) if e == "Touches")
    # The file's top-level nodes, not its members.
    assert targets == [
        "shop::main::class::Shop.BasketService",
        "shop::main::procedure::dbo.usp_PlaceOrder",
    ]
    # Searchable by what the message says, in identifier spellings too.
    hits = store.search("place order", scope=Scope(), top_k=3, filters={"kind": "commit"})
    assert hits[0]["id"] == nid


def test_reindexing_reads_only_new_commits_and_drops_rewritten_ones(
    repo: Path, tmp_path: Path
) -> None:
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(repo)], repository="shop", git=True)
    again = index_paths(store, [str(repo)], repository="shop", git=True)
    assert again.git == {"commits": 2, "added": 0, "removed": 0, "edges": 3}
    commit(
        repo,
        {"db/Orders.sql": ORDERS + "-- audit\n"},
        "Note the audit",
        "2026-01-07T09:00:00+00:00",
    )
    third = index_paths(store, [str(repo)], repository="shop", git=True)
    assert third.git is not None and (third.git["added"], third.git["commits"]) == (1, 3)
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    commit(
        repo,
        {"db/Orders.sql": ORDERS + "-- v2\n"},
        "Rewrite the audit",
        "2026-01-08T09:00:00+00:00",
    )
    fourth = index_paths(store, [str(repo)], repository="shop", git=True)
    assert fourth.git is not None
    assert (fourth.git["added"], fourth.git["removed"], fourth.git["commits"]) == (1, 1, 3)
    assert set(commits(store)) == {
        "Add the Orders table",
        "Place orders from the basket",
        "Rewrite the audit",
    }


def test_reindexing_the_files_keeps_the_commit_edges(repo: Path, tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(repo)], repository="shop", git=True)
    before = store.typed_edges("shop", "main", "Touches")
    (repo / "db" / "Orders.sql").write_text(ORDERS + "-- changed, not committed\n")
    index_paths(store, [str(repo)], repository="shop")  # files only, no --git
    assert sorted(store.typed_edges("shop", "main", "Touches")) == sorted(before)
    assert len(before) == 3


def test_a_commit_carries_the_labels_of_the_files_it_touched(repo: Path, tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(
        store, [str(repo)], repository="shop", git=True, label_rules=[("src/*", ["internal"])]
    )
    assert set(commits(store)) == {"Add the Orders table"}
    allowed = store.search(
        "basket", scope=Scope(allowed_labels=("internal",)), top_k=5, filters={"kind": "commit"}
    )
    assert len(allowed) == 1


def test_a_path_outside_git_is_refused_and_creates_no_index(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.sql").write_text(ORDERS)
    index = tmp_path / "i.db"
    result = CliRunner().invoke(cli, ["index", str(plain), "--index", str(index), "--git"])
    assert result.exit_code == 2
    assert "GIT_NOT_A_REPOSITORY" in result.output
    assert not index.exists()
    store = open_store(str(tmp_path / "j.db"), create=True)
    with pytest.raises(StepRuntimeError) as err:
        index_paths(store, [str(plain)], repository="x", git=True)
    assert err.value.code == "GIT_NOT_A_REPOSITORY"
    assert store.counts()["nodes"] == 0


def test_the_cli_reports_the_history(repo: Path, tmp_path: Path) -> None:
    index = str(tmp_path / "i.db")
    result = CliRunner().invoke(cli, ["index", str(repo), "--index", index, "--git", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["git"] == {"commits": 2, "added": 2, "removed": 0, "edges": 3}
    text = CliRunner().invoke(cli, ["index", str(repo), "--index", index, "--git"])
    assert "2 commit(s) (0 new, 0 removed)" in text.output


def test_a_subfolder_indexes_only_its_history_with_paths_relative_to_it(
    repo: Path, tmp_path: Path
) -> None:
    store = open_store(str(tmp_path / "i.db"), create=True)
    report = index_paths(store, [str(repo / "db")], repository="db", git=True)
    assert report.git is not None and report.git["commits"] == 2
    found = commits(store)
    assert [f["path"] for f in found["Place orders from the basket"]["files"]] == [  # type: ignore[union-attr]
        "usp_PlaceOrder.sql"
    ]


def test_a_hostile_message_cannot_forge_fields_or_commits(repo: Path, tmp_path: Path) -> None:
    forged = "Fix\x1e\x1ffake\n\n1\t2\tsrc/Forged.cs\nnot a numstat line"
    commit(
        repo,
        {"db/tab\tname.sql": ORDERS, 'db/quote"d.sql': ORDERS},
        forged,
        "2026-01-09T00:00:00+00:00",
    )
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(repo)], repository="shop", git=True)
    metas = [json.loads(m) for m in store.kind_nodes("shop", "main", "commit").values()]
    assert len(metas) == 3
    [meta] = [m for m in metas if m["message"].startswith("Fix")]
    assert meta["message"] == forged
    assert sorted(f["path"] for f in meta["files"]) == ['db/quote"d.sql', "db/tab\tname.sql"]


def test_parse_log_reads_what_git_writes() -> None:
    text = (
        "\x00\x00abc\x00Ana\x002026-01-01T00:00:00+00:00\x00msg\n\x00\n3\t1\ta.cs\n-\t-\tlogo.png\n"
    )
    [c] = parse_log(text)
    assert c["files"] == [
        {"path": "a.cs", "added": 3, "deleted": 1},
        {"path": "logo.png", "added": 0, "deleted": 0},
    ]
