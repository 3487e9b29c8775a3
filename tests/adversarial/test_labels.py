"""Security labels fail closed (issue 25, item 8).

Label globs match paths relative to the repository's root, recorded in the index when the
repository is first indexed (or set with --repo-root), so a subfolder indexed with the
same labels file is labelled as the whole tree is. A glob that matches no file is warned
about; a labels file none of whose globs matches, or a path outside the root, is refused
before anything is written. An index whose label rows, stored labels, full-text label
tokens or repository column have been edited apart hides the node (the most restricted
reading wins), never shows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.cli import cli
from runtime.retrieval.node import Scope, label_set_token
from runtime.retrieval.nodestore import open_store

KEYS = "repo::main::class::Shop.Secret.KeyVault"
API = "repo::main::class::Shop.Public.Api"
LABELS = '"src/Secret/*": [secret]\n'


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel, text in {
        "src/Secret/KeyVault.cs": "namespace Shop.Secret { public class KeyVault { } }\n",
        "src/Public/Api.cs": "namespace Shop.Public { public class Api { } }\n",
        "docs/readme.md": "# Shop\nThe shop's readme.\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def index(runner: Any, tmp_path: Path, path: Path, labels: str = LABELS, *extra: str) -> Any:
    (tmp_path / "labels.yaml").write_text(labels)
    args = ["index", str(path), "--index", str(tmp_path / "i.db"), "--repository", "repo"]
    return runner.invoke(cli, [*args, "--labels", str(tmp_path / "labels.yaml"), *extra])


def visible(tmp_path: Path, *allowed: str) -> set[str]:
    store = open_store(str(tmp_path / "i.db"))
    scope = Scope("repo", "main", allowed or None)
    hits = {h["id"] for h in store.search("KeyVault Api", scope=scope, top_k=20)}
    return (hits | set(store.get_nodes([KEYS, API], scope=scope))) & {KEYS, API}


def test_a_subfolder_indexed_with_the_same_labels_stays_labelled(runner, tmp_path):
    root = tree(tmp_path)
    assert index(runner, tmp_path, root).exit_code == 0
    assert KEYS not in visible(tmp_path) and KEYS in visible(tmp_path, "secret")
    # src alone, the same labels file: its paths are still matched from the repository root
    done = index(runner, tmp_path, root / "src")
    assert done.exit_code == 0, done.stderr
    assert "warning" not in done.stderr
    assert visible(tmp_path) == {API} and KEYS in visible(tmp_path, "secret")
    # and a single file given alone
    assert index(runner, tmp_path, root / "src" / "Secret" / "KeyVault.cs").exit_code == 0
    assert visible(tmp_path) == set() and visible(tmp_path, "secret") == {KEYS}


def test_the_root_is_recorded_once_and_changed_only_on_purpose(runner, tmp_path):
    root = tree(tmp_path)
    # indexed first from src, with --repo-root naming the repository's root
    done = index(runner, tmp_path, root / "src", LABELS, "--repo-root", str(root))
    assert done.exit_code == 0, done.stderr
    assert visible(tmp_path) == {API}
    assert open_store(str(tmp_path / "i.db")).repository_root("repo") == str(root.resolve())
    # changed on purpose: said, and the globs match from the new root
    done = index(
        runner, tmp_path, root / "src", '"Secret/*": [secret]\n', "--repo-root", str(root / "src")
    )
    assert done.exit_code == 0, done.stderr
    assert f"changes from {root.resolve()} to {(root / 'src').resolve()}" in done.stderr
    assert visible(tmp_path) == {API}


def test_every_glob_that_matches_nothing_is_warned_about(runner, tmp_path):
    root = tree(tmp_path)
    done = index(runner, tmp_path, root, LABELS + '"Secret/*": [secret]\n"*.sql": [dba]\n')
    assert done.exit_code == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if line.startswith("warning: label glob")]
    assert len(warned) == 2
    assert "'Secret/*'" in warned[0] and "'*.sql'" in warned[1]
    assert str(root.resolve()) in warned[0]


@pytest.mark.parametrize(
    "labels",
    [
        '"Secret/*": [secret]\n',  # written relative to src, which is not the root
        '"/src/Secret/*": [secret]\n"*.sql": [dba]\n',
    ],
)
def test_a_labels_file_none_of_whose_globs_matches_is_refused(runner, tmp_path, labels):
    root = tree(tmp_path)
    assert index(runner, tmp_path, root).exit_code == 0
    before = open_store(str(tmp_path / "i.db")).counts()
    done = index(runner, tmp_path, root / "src", labels)
    assert done.exit_code == 2
    assert "LABELS_UNMATCHED" in done.stderr and "Traceback" not in done.stderr
    # nothing indexed: the previous run's nodes and labels stand
    assert open_store(str(tmp_path / "i.db")).counts() == before
    assert KEYS not in visible(tmp_path)


def test_a_path_outside_the_root_is_refused(runner, tmp_path):
    root = tree(tmp_path)
    first = index(runner, tmp_path, root / "src", '"Secret/*": [secret]\n')
    assert first.exit_code == 0  # the root is now src
    done = index(runner, tmp_path, root)
    assert done.exit_code == 2
    assert "LABELS_OUTSIDE_ROOT" in done.stderr and "--repo-root" in done.stderr


# --- a damaged or edited index hides, never shows ------------------------------------------


def _tamper(path: Path, *statements: str) -> None:
    import sqlite3

    db = sqlite3.connect(path)
    with db:
        for statement in statements:
            db.execute(statement)
    db.close()


SECRET_SET = '["secret"]'
ROW = f"(SELECT rowid FROM nodes WHERE id = '{KEYS}')"
TAMPERED = {
    # the label rows gone: the stored labels still say secret
    "label rows deleted": [f"DELETE FROM node_labels WHERE node = {ROW}"],
    # the stored labels emptied: the rows still say secret
    "stored labels emptied": [f"UPDATE nodes SET labels = '[]' WHERE id = '{KEYS}'"],
    "stored labels not JSON": [f"UPDATE nodes SET labels = 'secret' WHERE id = '{KEYS}'"],
    # the full-text label token removed: rows and stored labels still say secret
    "label token removed": [
        f"UPDATE nodes_fts SET meta = replace(meta, 'zzl{b'secret'.hex()}', '') WHERE rowid = {ROW}"
    ],
    # the label-set token (layout 4) claiming the unlabelled set, every set visible
    "label-set token swapped": [
        f"UPDATE nodes_fts SET meta = replace(meta, '{label_set_token(SECRET_SET)}', "
        f"'{label_set_token('[]')}') WHERE rowid = {ROW}",
        "UPDATE label_sets SET labels = '[]'",
    ],
    # every trace of the label gone but the stored labels
    "rows and token gone": [
        f"DELETE FROM node_labels WHERE node = {ROW}",
        f"UPDATE nodes_fts SET meta = replace(meta, 'zzl{b'secret'.hex()}', '') WHERE rowid = {ROW}",
    ],
}


@pytest.mark.parametrize("how", list(TAMPERED))
def test_an_index_whose_labels_disagree_hides_the_node(runner, tmp_path, how):
    root = tree(tmp_path)
    assert index(runner, tmp_path, root).exit_code == 0
    _tamper(tmp_path / "i.db", *TAMPERED[how])
    assert visible(tmp_path) == {API}
    store = open_store(str(tmp_path / "i.db"))
    for query in ("KeyVault", "key vault", "Shop.Secret.KeyVault", "class KeyVault secret"):
        hits = store.search(query, scope=Scope("repo", "main"), top_k=20)
        assert KEYS not in {h["id"] for h in hits}, (query, hits)
    found = runner.invoke(cli, ["search", "KeyVault", "--index", str(tmp_path / "i.db")])
    assert found.exit_code == 0 and "KeyVault" not in found.stdout


def test_a_node_moved_into_another_repository_by_its_column_stays_out(runner, tmp_path):
    root = tree(tmp_path)
    assert index(runner, tmp_path, root).exit_code == 0
    other = runner.invoke(
        cli, ["index", str(root / "src" / "Public"), "--index", str(tmp_path / "i.db"),
              "--repository", "other"],
    )  # fmt: skip
    assert other.exit_code == 0, other.stderr
    moved = "other::main::class::Shop.Public.Api"
    _tamper(tmp_path / "i.db", f"UPDATE nodes SET repository = 'repo' WHERE id = '{moved}'")
    store = open_store(str(tmp_path / "i.db"))
    scope = Scope("repo", "main")
    assert store.get_nodes([moved], scope=scope) == {}
    assert moved not in {h["id"] for h in store.search("Api", scope=scope, top_k=20)}


def test_a_run_without_labels_that_unlabels_nodes_says_so(runner, tmp_path):
    root = tree(tmp_path)
    assert index(runner, tmp_path, root).exit_code == 0
    args = ["index", str(root), "--index", str(tmp_path / "i.db"), "--repository", "repo"]
    done = runner.invoke(cli, args)  # the same files: their labels are what changed
    assert done.exit_code == 0
    assert "had 1 labelled node(s) and this run gave no --labels" in done.stderr
    assert KEYS in visible(tmp_path)
    again = runner.invoke(cli, args)  # nothing labelled left to lose: nothing to say
    assert again.exit_code == 0 and "warning" not in again.stderr
