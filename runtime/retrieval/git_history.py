"""Git history as nodes: one `commit` node per commit, linked to the files it touched.

`runtime index PATH --git` runs `git log` in PATH (never a shell; fixed arguments; the
path limited to PATH with `--relative`) and writes each commit as a node of kind
`commit` (language `git`): its id `<repository>::<snapshot>::commit::<sha>`, its name the
short sha, its text the message, author, date and the files with their +/- counts, its
metadata `{sha, short_sha, author, date, message, files: [{path, added, deleted}],
added, deleted}`. A `Touches` edge leads from a commit to the top-level nodes of every
file it changed that the index holds. Commits get the labels of the files they touched
(the same label rules as the files), so a commit message never shows what its files hide.

Incremental: commits already indexed are not read again, commits no longer reachable
from HEAD (history rewritten) are removed, and the Touches edges are recomputed.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import RunError, UsageError
from runtime.retrieval.indexwrite import IndexWriter
from runtime.retrieval.node import Node, node_id
from runtime.retrieval.nodestore import node_row

COMMIT_KIND = "commit"
TOUCHES = "Touches"
SHORT_SHA = 12
# git's output is read whole: bounded, so a hostile repository cannot exhaust memory.
MAX_OUTPUT = 512 * 1024 * 1024
GIT_TIMEOUT = 600.0
# The commit message shown in a node is cut here (the whole stays in git).
MAX_MESSAGE = 8000
# One commit's file list in its text and metadata (a vendoring commit touches thousands).
MAX_FILES = 200


@dataclass
class GitReport:
    """What indexing the history did."""

    commits: int = 0  # commit nodes in the snapshot after the run
    added: int = 0
    removed: int = 0
    edges: int = 0


def _git_env() -> dict[str, str]:
    """The environment git runs in: no pager, no prompts, no system or user config that
    could run programs (a repository's own config cannot be avoided for log)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_PAGER="cat",
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        LC_ALL="C",
    )
    return env


def _git(root: str, args: Sequence[str], stdin: str | None = None) -> str:
    """git's stdout for args run in root; GIT_ERROR (quoting git) when it fails."""
    cmd = ["git", "-C", root, "-c", "core.quotePath=false", *args]
    try:
        done = subprocess.run(
            cmd,
            input=stdin.encode() if stdin is not None else None,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            env=_git_env(),
            check=False,
        )
    except FileNotFoundError as exc:
        raise RunError("git is not installed (needed by --git)", code="GIT_ERROR") from exc
    except subprocess.TimeoutExpired as exc:
        raise RunError(
            f"git {args[0]} in {root} took over {GIT_TIMEOUT:g}s", code="GIT_ERROR"
        ) from exc
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[:300]
        raise RunError(f"git {args[0]} in {root} failed: {said}", code="GIT_ERROR")
    if len(done.stdout) > MAX_OUTPUT:
        raise RunError(
            f"git {args[0]} in {root} wrote more than {MAX_OUTPUT} bytes", code="GIT_ERROR"
        )
    return done.stdout.decode("utf-8", "replace")


def check_git_root(path: str) -> str:
    """The folder to read history in (a file's folder), or GIT_NOT_A_REPOSITORY."""
    folder = Path(path)
    folder = folder if folder.is_dir() else folder.parent
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            timeout=60,
            env=_git_env(),
            check=False,
        )
    except FileNotFoundError as exc:
        raise RunError("git is not installed (needed by --git)", code="GIT_ERROR") from exc
    if done.returncode != 0 or done.stdout.strip() != b"true":
        raise UsageError(
            f"{path} is not inside a git work tree: --git indexes a repository's history",
            code="GIT_NOT_A_REPOSITORY",
        )
    return str(folder)


def _has_head(root: str) -> bool:
    done = subprocess.run(
        ["git", "-C", root, "rev-parse", "--verify", "--quiet", "HEAD"],
        capture_output=True,
        timeout=60,
        env=_git_env(),
        check=False,
    )
    return done.returncode == 0


# A NUL separates fields: git refuses NUL in commit messages and author names, so no
# message can forge a field or a commit boundary.
_FORMAT = "--format=%x00%x00%H%x00%an%x00%aI%x00%B%x00"


def _unquote(path: str) -> str:
    """A path git quoted (C-style, when it holds a tab, newline, quote or backslash)."""
    if len(path) >= 2 and path[0] == '"' and path[-1] == '"':
        raw = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
        return raw.encode("latin-1", "replace").decode("utf-8", "replace")
    return path


def parse_log(text: str) -> list[dict[str, Any]]:
    """Commits from `git log` output in _FORMAT with --numstat (newest first, as given)."""
    out = []
    for record in text.split("\x00\x00")[1:]:
        parts = record.split("\x00")
        if len(parts) < 5:
            raise RunError("git log wrote a record this version cannot read", code="GIT_ERROR")
        sha, author, date, message, stats = parts[0], parts[1], parts[2], parts[3], parts[4]
        files = []
        for line in stats.splitlines():
            fields = line.split("\t", 2)
            if len(fields) != 3:
                continue
            added, deleted, path = fields
            files.append(
                {
                    "path": _unquote(path),
                    "added": int(added) if added.isdigit() else 0,  # "-": a binary file
                    "deleted": int(deleted) if deleted.isdigit() else 0,
                }
            )
        out.append(
            {
                "sha": sha.strip(),
                "author": author,
                "date": date,
                "message": message.strip()[:MAX_MESSAGE],
                "files": files,
            }
        )
    return out


def commit_node(repository: str, snapshot: str, commit: dict[str, Any], labels: list[str]) -> Node:
    """The node of one commit (see the module docstring)."""
    files = commit["files"]
    added = sum(f["added"] for f in files)
    deleted = sum(f["deleted"] for f in files)
    shown = files[:MAX_FILES]
    lines = [f" {f['path']} | +{f['added']} -{f['deleted']}" for f in shown]
    if len(files) > len(shown):
        lines.append(f" ... and {len(files) - len(shown)} more file(s)")
    text = (
        f"commit {commit['sha']}\nAuthor: {commit['author']}\nDate: {commit['date']}\n\n"
        f"{commit['message']}\n\n" + "\n".join(lines)
    ).rstrip() + "\n"
    return Node(
        id=node_id(repository, snapshot, COMMIT_KIND, commit["sha"]),
        repository=repository,
        snapshot=snapshot,
        kind=COMMIT_KIND,
        name=commit["sha"][:SHORT_SHA],
        qualified_name=commit["sha"],
        path="",
        language="git",
        text=text,
        metadata={
            "sha": commit["sha"],
            "short_sha": commit["sha"][:SHORT_SHA],
            "author": commit["author"],
            "date": commit["date"],
            "message": commit["message"],
            "files": shown,
            "files_changed": len(files),
            "added": added,
            "deleted": deleted,
        },
        labels=labels,
    )


def index_history(
    store: IndexWriter,
    roots: Sequence[str],
    *,
    repository: str,
    snapshot: str,
    labels_of: Callable[[int, str], list[str]] | None = None,
) -> GitReport:
    """Index the history of each root (a folder inside a git work tree) as commit nodes.

    labels_of(root number, path relative to that root): the labels of a file (the
    indexer's label rules); a commit gets those of every file it touched.
    """
    from runtime.retrieval.search import CHILD_KINDS, MEMBER_KINDS

    folders = [check_git_root(r) for r in roots]
    known = store.kind_nodes(repository, snapshot, COMMIT_KIND)
    report = GitReport()
    reachable: set[str] = set()
    fresh: dict[str, dict[str, Any]] = {}
    for number, folder in enumerate(folders):
        if not _has_head(folder):
            continue  # a repository without commits has no history yet
        shas = _git(folder, ["rev-list", "HEAD", "--", "."]).split()
        reachable.update(shas)
        wanted = [s for s in shas if s not in known]
        if not wanted:
            continue
        text = _git(
            folder,
            [
                "log",
                "--no-walk=unsorted",
                "--stdin",
                "--no-renames",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                "--numstat",
                "--relative",
                _FORMAT,
                "--",
                ".",
            ],
            stdin="\n".join(wanted) + "\n",
        )
        for commit in parse_log(text):
            for f in commit["files"]:
                f["root"] = number
            have = fresh.get(commit["sha"])
            if have is None:
                fresh[commit["sha"]] = commit
            else:  # the same commit seen from two roots: its files from both
                have["files"] += [
                    f
                    for f in commit["files"]
                    if f["path"] not in {g["path"] for g in have["files"]}
                ]
    gone = sorted(set(known) - reachable)
    rows = []
    for sha in sorted(fresh):
        commit = fresh[sha]
        labels: list[str] = []
        for f in commit["files"]:
            number = f.pop("root")
            for label in labels_of(number, f["path"]) if labels_of else ():
                if label not in labels:
                    labels.append(label)
        rows.append(node_row(commit_node(repository, snapshot, commit, sorted(labels))))
    with store.batch():
        store.delete_kind_nodes(repository, snapshot, COMMIT_KIND, gone)
        store.put_loose_rows(rows)
        # Every commit's edges again: files indexed since a commit was first seen get theirs.
        targets = store.path_nodes(repository, snapshot, {COMMIT_KIND, *CHILD_KINDS, *MEMBER_KINDS})
        edges = []
        for sha, metadata in store.kind_nodes(repository, snapshot, COMMIT_KIND).items():
            source = node_id(repository, snapshot, COMMIT_KIND, sha)
            for f in json.loads(metadata).get("files", []):
                for target in targets.get(f["path"], ()):
                    edges.append((source, target))
        report.edges = store.replace_typed_edges(repository, snapshot, TOUCHES, edges)
    report.added = len(rows)
    report.removed = len(gone)
    report.commits = len(known) - len(gone) + len(rows)
    return report
