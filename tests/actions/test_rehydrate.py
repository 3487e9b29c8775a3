"""rehydrate: a pointer made by the context policy comes back exactly, whole or sliced."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime.context.pointers import json_slice, line_slice
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.engine.store import SqliteRunStore
from runtime.format.pipeline import Pipeline

DOC = "".join(f"line {i}: the quick brown fox number {i} jumps.\n" for i in range(1, 3001))
DATA = json.dumps({"meta": {"n": 2}, "items": [{"id": i, "name": f"n{i}"} for i in range(4000)]})


def pipeline(
    tmp_path,
    rehydrate: dict[str, Any],
    settings: dict[str, Any] | None = None,
    inputs: dict[str, Any] | None = None,
):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer from the document.\n")
    data = {
        "settings": {
            "entry_step_id": "ask",
            "models": {"small": {"provider": "extractive", "context_window": 4096}},
            "context_policy": {"enabled": True},
            **(settings or {}),
        },
        "inputs": {"question": {"type": "string"}, "doc": {"type": "string"}, **(inputs or {})},
        "steps": [
            {
                "id": "ask",
                "action": "call_model",
                "prompt_key": "sys",
                "model": "small",
                "user_parts": {
                    "q": {"source": "question", "template": "Question: {}"},
                    "doc": {"source": "doc", "template": "Document:\n{}"},
                },
                "next": "back",
            },
            {"id": "back", "action": "rehydrate", "target": "restored", "next": "f", **rehydrate},
            {"id": "f", "action": "finalize", "source": "restored"},
        ],
    }
    return Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))


def run(tmp_path, rehydrate, doc, *, store=None, settings=None, pointer_id_from=None):
    p = pipeline(tmp_path, rehydrate, settings)
    engine = Engine(p, services=Services(settings=p.settings, base_dir=str(tmp_path)), store=store)
    return engine.run({"question": "which fox?", "doc": doc}, run_id="r1"), engine


def pointer_of(events: list[dict[str, Any]]) -> str:
    [decision] = [e for e in events if e["type"] == "CONTEXT_BUDGET_DECISION"]
    assert decision["decision"] == "needs_summary"
    [pid] = decision["summarised"]
    return str(pid)


def first_pointer(tmp_path, doc) -> str:
    """The pointer id the policy gives the document (content-addressed: same every run)."""
    r, _ = run(tmp_path / "probe", {"pointer_id": "ptr-0000000000000000"}, doc)
    assert r.status == "failed" and r.error.code == "POINTER_UNKNOWN"
    return pointer_of(r.events)


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        (None, DOC),
        ("lines 10-12", line_slice(DOC, 10, 12)),
        ("lines 3000-3000", "line 3000: the quick brown fox number 3000 jumps.\n"),
        ("7", "line 7: the quick brown fox number 7 jumps.\n"),
    ],
)
def test_rehydrate_gives_back_the_exact_text_or_lines(tmp_path, part, expected):
    (tmp_path / "probe").mkdir()
    pid = first_pointer(tmp_path, DOC)
    step = {"pointer_id": pid, **({"slice": part} if part else {})}
    r, _ = run(tmp_path, step, DOC)
    assert r.status == "completed", r.error
    assert r.state["restored"] == expected
    assert DOC.encode().find(expected.encode()) >= 0  # byte-identical to a part of the original


def test_json_path_slice_is_the_original_text_of_the_value(tmp_path):
    (tmp_path / "probe").mkdir()
    pid = first_pointer(tmp_path, DATA)
    r, _ = run(tmp_path, {"pointer_id": pid, "slice": "$.items[3999]"}, DATA)
    assert r.state["restored"] == '{"id": 3999, "name": "n3999"}'
    assert r.state["restored"] == json_slice(DATA, "$.items[3999]")


def test_pointer_from_a_json_reply_variable(tmp_path):
    (tmp_path / "probe").mkdir()
    pid = first_pointer(tmp_path, DOC)
    p = pipeline(tmp_path, {"pointer_id_from": "ask_for"}, inputs={"ask_for": {"type": "object"}})
    engine = Engine(p, services=Services(settings=p.settings, base_dir=str(tmp_path)))
    inputs = {"question": "q", "doc": DOC}
    r = engine.run({**inputs, "ask_for": {"pointer_id": pid, "slice": "lines 2-2"}}, run_id="r1")
    assert r.state["restored"] == line_slice(DOC, 2, 2)


@pytest.mark.parametrize(
    ("part", "why"),
    [
        ("lines 0-2", "the text has lines 1-3000"),
        ("lines 2999-3001", "the text has lines 1-3000"),
        ("lines 5-4", "the text has lines 1-3000"),
        ("$.items", "not valid JSON"),  # the document is not JSON
        ("hunk 1", "the diff has 0 hunk(s)"),  # nor a diff
        ("words 1-3", 'use "lines A-B"'),
    ],
)
def test_bad_slices_are_coded_errors_naming_the_step(tmp_path, part, why):
    (tmp_path / "probe").mkdir()
    pid = first_pointer(tmp_path, DOC)
    r, _ = run(tmp_path, {"pointer_id": pid, "slice": part}, DOC)
    assert r.status == "failed"
    assert r.error.code == "SLICE_INVALID" and r.error.step_id == "back"
    assert why in r.error.message


def test_unknown_pointer_and_other_runs_pointers(tmp_path):
    r, _ = run(tmp_path, {"pointer_id": "ptr-0123456789abcdef"}, DOC)
    assert r.error.code == "POINTER_UNKNOWN" and r.error.step_id == "back"


def test_over_budget_is_refused_and_a_slice_at_the_limit_passes(tmp_path):
    (tmp_path / "probe").mkdir()
    pid = first_pointer(tmp_path, DOC)
    from runtime.context.tokens import get_counter

    exact = get_counter().count(line_slice(DOC, 1, 40))
    ok, _ = run(tmp_path, {"pointer_id": pid, "slice": "lines 1-40", "max_tokens": exact}, DOC)
    assert ok.status == "completed"
    over, _ = run(
        tmp_path, {"pointer_id": pid, "slice": "lines 1-40", "max_tokens": exact - 1}, DOC
    )
    assert over.error.code == "REHYDRATE_OVER_BUDGET"


def test_originals_live_in_the_run_store_once_and_survive_reopening(tmp_path):
    (tmp_path / "probe").mkdir()
    pid = first_pointer(tmp_path, DOC)
    db = str(tmp_path / "runs.db")
    r, _ = run(tmp_path, {"pointer_id": pid, "slice": "lines 1-1"}, DOC, store=SqliteRunStore(db))
    assert r.status == "completed"
    reopened = SqliteRunStore(db, create=False)
    assert reopened.get_original("r1", pid) == ("text", DOC)
    [row] = reopened.pointers("r1")
    assert row["pointer_id"] == pid and row["chars"] == len(DOC)
    conn = reopened._conn()
    assert conn.execute("SELECT count(*) FROM originals").fetchone()[0] == 1
    # Another run of the same document shares the stored original.
    p = pipeline(tmp_path, {"pointer_id": pid})
    Engine(p, services=Services(settings=p.settings), store=reopened).run(
        {"question": "q", "doc": DOC}, run_id="r2"
    )
    assert conn.execute("SELECT count(*) FROM originals").fetchone()[0] == 1
    assert reopened.get_original("r2", pid) == ("text", DOC)
    assert reopened.get_original("r2", "ptr-0123456789abcdef") is None


def test_pointers_survive_resume_in_a_new_process_and_trace_exports_them(tmp_path):
    from click.testing import CliRunner

    from runtime.cli import cli

    db = str(tmp_path / "runs.db")
    (tmp_path / "probe").mkdir()
    pid = first_pointer(tmp_path, DOC)
    p = pipeline(tmp_path, {"pointer_id": pid, "slice": "lines 100-101"})
    first = Engine(p, services=Services(settings=p.settings), store=SqliteRunStore(db))
    stopped = first.run({"question": "q", "doc": DOC}, run_id="r1", max_steps=1)
    assert stopped.status == "failed" and stopped.steps == ["ask"]
    # A new engine, new services (no memory of the first) and a new store connection.
    again = Engine(p, services=Services(settings=p.settings), store=SqliteRunStore(db))
    resumed = again.resume("r1")
    assert resumed.status == "completed", resumed.error
    assert resumed.state["restored"] == line_slice(DOC, 100, 101)

    runner = CliRunner()
    listing = runner.invoke(cli, ["trace", "r1", "--store", db, "--pointers"])
    assert listing.exit_code == 0, listing.output
    assert listing.output.startswith("1 pointer(s) in run r1\n")
    assert f"{pid}  text" in listing.output and f"{len(DOC):,} chars" in listing.output
    jsonl = runner.invoke(cli, ["trace", "r1", "--store", db, "--pointers", "--format", "jsonl"])
    [row] = [json.loads(line) for line in jsonl.output.splitlines()]
    assert row["type"] == "pointer" and row["pointer_id"] == pid and row["text"] == DOC
