"""A run killed at any point resumes to the trace of an uninterrupted run (issue 25, item 7).

`runtime exec` runs in a child process that `STEP_RUNTIME_KILL_AT=checkpoint:N`
(runtime/engine/faults.py) SIGKILLs as it is about to write its Nth checkpoint: before the
first one, after a step stored its compaction pointers and before they were checkpointed,
after a step that compacted the same turns again, and before the final checkpoint.
`runtime resume` then finishes the run. Its trace must hold every event of the
uninterrupted run, in order and with the same data (timing aside), and the same counters;
a kill may add events (RUN_RESUMED), never lose one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kill_support import cli, comparable, long_history, write_folder

import runtime

PIPELINE = """\
name: kills
settings:
  entry_step_id: prep
  models:
    small: {provider: extractive, context_window: 16000}
  context_policy: {enabled: true, trace_threshold_tokens: 2500}
inputs:
  question: {type: string}
  conversation_history: {type: array}
steps:
  - id: prep
    action: set_variables
    rules:
      - {set: note, value: ready}
    next: a1
  - id: a1        # compacts five model turns of the history: five pointers stored
    action: call_model
    prompt_key: sys
    model: small
    use_history: true
    user_parts: {q: {source: question, template: "Question: {}"}}
    next: a2
  - id: a2        # compacts the same five turns again: counted once, by a1
    action: call_model
    prompt_key: sys
    model: small
    use_history: true
    user_parts: {q: {source: question, template: "Question: {}"}}
    next: f
  - id: f
    action: finalize
    source: last_model_response
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    inputs = {"question": "q", "conversation_history": long_history()}
    prompts = {"sys": "You answer from the document.\n"}
    return write_folder(tmp_path_factory.mktemp("kills"), PIPELINE, prompts, inputs)


def exec_(folder: Path, db: str, kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
    # The same run id in both stores: it is part of the run-context preamble a model sees.
    args = ("exec", "p.yaml", "--inputs", "in.json", "--store", db, "--run-id", "k")
    return cli(folder, *args, kill_at=kill_at)


@pytest.fixture(scope="module")
def reference(folder: Path) -> dict[str, Any]:
    """The uninterrupted run (in this process: the same engine `runtime exec` drives)."""
    from runtime.engine import Engine

    db = str(folder / "ref.db")
    inputs = json.loads((folder / "in.json").read_text())
    pipeline = runtime.load(str(folder / "p.yaml"))
    here = os.getcwd()
    os.chdir(folder)  # as `runtime exec` runs there: the run records its index path
    try:
        done = Engine(pipeline, store=runtime.SqliteRunStore(db)).run(inputs, run_id="k")
    finally:
        os.chdir(here)
    assert done.status == "completed", done.error
    store = runtime.SqliteRunStore(db)
    events = store.events("k")
    counters = events[-1]["counters"]
    assert counters["compactions"] == 5 and counters["tokens_saved"] > 0  # a1's five turns
    return {
        "events": events,
        "state": store.load("k")["variables"],
        "pointers": store.pointers("k"),
    }


def kill_and_resume(
    folder: Path, name: str, kill_at: str, db: str | None = None
) -> runtime.SqliteRunStore:
    db = db or str(folder / f"{name}.db")
    killed = exec_(folder, db, kill_at=kill_at)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)
    return runtime.open_run_store(db)


def resume(folder: Path, store: runtime.SqliteRunStore) -> None:
    done = cli(folder, "resume", "k", "--store", getattr(store, "url", store.path))
    assert done.returncode == 0, done.stderr


def assert_same_trace(store: runtime.SqliteRunStore, reference: dict[str, Any]) -> None:
    events = store.events("k")
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert comparable(events) == comparable(reference["events"])
    assert events[-1]["counters"] == reference["events"][-1]["counters"]
    assert store.load("k")["variables"] == reference["state"]
    assert store.pointers("k") == reference["pointers"]
    [row] = store.runs()
    assert row["status"] == "completed"


@pytest.mark.slow  # (in the fast subset: test_resume_edges' kill before the first checkpoint)
def test_a_run_killed_before_its_first_checkpoint_keeps_run_started(folder, reference):
    store = kill_and_resume(folder, "first", "checkpoint:1")
    # RUN_STARTED is stored with the run, before any step runs
    assert [e["type"] for e in store.events("k")] == ["RUN_STARTED"]
    resume(folder, store)
    assert_same_trace(store, reference)
    assert [e["type"] for e in store.events("k")][:3] == ["RUN_STARTED", "RUN_RESUMED", "STEP"]


def test_a_kill_between_a_compaction_pointer_and_its_checkpoint_keeps_the_counters(
    folder, reference
):
    store = kill_and_resume(folder, "pointer", "checkpoint:2")
    # a1 ran and stored its five pointers; its checkpoint was never written
    assert store.load("k")["engine"]["step_trace"] == ["prep"]
    resume(folder, store)
    assert_same_trace(store, reference)


def test_a_run_killed_mid_compaction_resumes_to_the_same_trace_on_postgres(
    folder, reference, pg_url
):
    """The same kill on a Postgres store (issue 34): pointers provisional, counters kept."""
    store = kill_and_resume(folder, "pg", "checkpoint:2", db=pg_url)
    assert store.load("k")["engine"]["step_trace"] == ["prep"]
    resume(folder, store)
    assert_same_trace(store, reference)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kill_at",
    [
        "checkpoint:3",  # a2 compacted the same turns again (counted by a1, checkpointed)
        "checkpoint:4",  # the last step ran
        "checkpoint:5",  # RUN_COMPLETED traced, the final checkpoint not written
    ],
)
def test_a_run_killed_at_any_later_checkpoint_resumes_to_the_same_trace(folder, reference, kill_at):
    store = kill_and_resume(folder, kill_at.replace(":", "-"), kill_at)
    resume(folder, store)
    assert_same_trace(store, reference)


def test_a_malformed_kill_point_is_a_usage_error(monkeypatch):
    from runtime.engine import faults
    from runtime.errors import UsageError

    for spec in ("checkpoint:zero", "checkpoint:0", ":3"):
        monkeypatch.setattr(faults, "_SPEC", spec)
        with pytest.raises(UsageError, match="STEP_RUNTIME_KILL_AT"):
            faults.reached("checkpoint")
    monkeypatch.setattr(faults, "_SPEC", "elsewhere:1")
    faults.reached("checkpoint")  # another point: nothing happens


# --- the store's side: pointers are provisional until the run's next checkpoint -----------


def _checkpoint(store: runtime.SqliteRunStore, steps: list[str], seq: int) -> None:
    store.checkpoint(
        "r",
        position="a",
        variables={},
        engine={"step_trace": steps, "step_count": len(steps)},
        events=[{"seq": seq, "type": "STEP", "step_id": "a"}],
        status="running",
    )


def _put(store: runtime.SqliteRunStore, pointer_id: str, text: str) -> None:
    import hashlib

    sha = hashlib.sha256(text.encode()).hexdigest()
    store.put_original("r", pointer_id, sha, "text", text)


def test_a_resume_drops_only_the_pointers_stored_after_the_last_checkpoint(store_location):
    p = runtime.Pipeline.from_dict(
        {"name": "p", "settings": {"entry_step_id": "a"}, "steps": [{"id": "a", "action": "x"}]}
    )
    store = runtime.open_run_store(store_location)
    store.create_run("r", p, {})
    _put(store, "ptr-0000000000000001", "kept")
    _checkpoint(store, ["a"], 1)
    # after the checkpoint: a new pointer, and the checkpointed one stored again
    _put(store, "ptr-0000000000000002", "dropped")
    _put(store, "ptr-0000000000000001", "kept")
    assert [q["pointer_id"] for q in store.pointers("r")] == [
        "ptr-0000000000000001",
        "ptr-0000000000000002",
    ]
    other = runtime.open_run_store(store_location)  # the resuming process
    other.rewind("r")
    assert [q["pointer_id"] for q in other.pointers("r")] == ["ptr-0000000000000001"]
    assert other.get_original("r", "ptr-0000000000000001") == ("text", "kept")
    # stored again and checkpointed, a pointer is the run's for good
    _put(other, "ptr-0000000000000002", "dropped")
    _checkpoint(other, ["a", "a"], 2)
    other.rewind("r")
    assert len(other.pointers("r")) == 2
