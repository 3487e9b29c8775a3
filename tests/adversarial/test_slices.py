"""Pathological slice expressions and tool arguments: a coded error the model can read.

A slice comes from a pipeline author, a variable (`slice_from`) or a model's tool call.
Whatever it holds, it is bounded before it is parsed (runtime/context/pointers.py,
MAX_SLICE_CHARS), parsed without backtracking, and anything malformed is SLICE_INVALID:
from the rehydrate action (the step fails with the code) and through the rehydrate tool
(the model reads the error and the step goes on). A JSON path is answered only by an
original that is one JSON document (issue 24, item 3).
"""

from __future__ import annotations

import json

import pytest
from slice_support import ctx_of, put, rehydrate_run, tool_reply, tool_run

from runtime.context import pointers as ptr
from runtime.engine.store import SqliteRunStore
from runtime.errors import RunError

TEXT = "".join(f"line {n}: It is a truth universally acknowledged.\n" for n in range(1, 41))
DIGITS = "9" * 5000  # over Python's 4,300-digit int() limit


def refused(text: str, part: str, kind: str = "text", store=None) -> RunError:
    store = store or ptr.MemoryPointerStore()
    pid = put(store, text, kind)
    with pytest.raises(RunError) as info:
        ptr.rehydrate(ctx_of(store), pid, part)
    return info.value


@pytest.mark.parametrize(
    "part",
    [
        "1" + " " * 300_000 + "x",  # held a step for minutes: quadratic backtracking
        "lines 1" + " " * 300_000 + "- 2",
        " " * 300_000 + "$.a",
        "$" + ".a" * 200_000,
    ],
)
def test_a_slice_over_the_length_limit_is_refused_before_it_is_parsed(part):
    error = refused(TEXT, part)
    assert error.code == "SLICE_INVALID"
    assert f"over the {ptr.MAX_SLICE_CHARS:,}-character limit" in error.message
    assert len(error.message) < 250  # the expression is not echoed whole


@pytest.mark.parametrize(
    "part",
    [
        f"lines {DIGITS}",
        f"lines 1-{DIGITS}",
        f"line {DIGITS}",
        f"hunk {DIGITS}",
        f"$[{DIGITS}]",
        f"$.a[{DIGITS}]",
        "lines " + "9" * 900,  # within the length limit: still a coded error
        "lines 1-" + "9" * 16,
        "$[" + "9" * 16 + "]",
    ],
)
def test_a_huge_number_is_slice_invalid_not_a_value_error(part):
    error = refused(TEXT, part)
    assert error.code == "SLICE_INVALID"
    assert len(error.message) < 250


@pytest.mark.parametrize(
    "part",
    [
        '$["\\u12"]',  # an escape json cannot decode
        '$["\\x"]',
        "lines \u0661-\u0662",  # Arabic-Indic digits are not line numbers
        "$[\u0661]",
        "lines 1-2-3",
        "lines -2",
        "$..a",
        "$[",
        '$["a',
        "hunk",
        "\x00",
    ],
)
def test_malformed_slices_are_slice_invalid(part):
    assert refused(TEXT, part).code == "SLICE_INVALID"


def test_the_longest_slice_at_the_limit_is_still_read():
    part = "lines 3-4" + " " * (ptr.MAX_SLICE_CHARS - len("lines 3-4"))
    store = ptr.MemoryPointerStore()
    pid = put(store, TEXT, "text")
    assert ptr.rehydrate(ctx_of(store), pid, part) == ptr.line_slice(TEXT, 3, 4)
    assert refused(TEXT, part + " ").code == "SLICE_INVALID"


# --- a JSON path means a JSON document (issue 24, item 3) ------------------------------

LOG = "2026-11-25 10:02:11 build started\n" + "".join(
    f"2026-11-25 10:02:{n % 60:02d} compiling unit {n}\n" for n in range(3000)
)
CSV = "0,alpha,1.5\n1,beta,2.5\n2,gamma,3.5\n"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (LOG, "log"),  # `$` returned "2026"
        (LOG, "json"),  # declared json by the author: still a log
        (LOG[:400], "text"),
        (CSV, "text"),  # `$` returned "0"
        ('{"a": 1} trailing', "json"),
        ('[1, 2]\n{"b": 3}', "text"),
        ("true story", "text"),
    ],
)
@pytest.mark.parametrize("part", ["$", "$.a", "$[0]"])
@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_a_json_path_on_an_original_that_is_not_json_is_slice_invalid(
    tmp_path, text, kind, part, where
):
    store = SqliteRunStore(str(tmp_path / "runs.db")) if where == "sqlite" else None
    error = refused(text, part, kind, store)
    assert error.code == "SLICE_INVALID" and "not valid JSON" in error.message


@pytest.mark.parametrize("kind", ["text", "json", "log"])
def test_a_json_document_answers_a_path_whatever_its_kind(tmp_path, kind):
    doc = '\n {"results": [{"id": 1}, {"id": 2, "name": "x"}], "n": 2} \n'
    for store in (ptr.MemoryPointerStore(), SqliteRunStore(str(tmp_path / f"{kind}.db"))):
        pid = put(store, doc, kind)
        assert ptr.rehydrate(ctx_of(store), pid, "$.results[1]") == '{"id": 2, "name": "x"}'
        assert ptr.rehydrate(ctx_of(store), pid, "$") == doc.strip()


def test_an_index_stored_before_trailing_text_was_refused_is_not_followed(tmp_path):
    # A store written by an earlier version indexed the log as the number 2026.
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    pid = put(store, LOG, "log")
    from array import array

    # The old, lenient index: a scalar root at characters 0..4, the rest ignored.
    store.put_index("r", pid, LOG, ptr._packed(array("q", [ptr._MAGIC, len(LOG), 0, -1, 0, 4])))
    error = refused_from(store, pid, "$")
    assert error.code == "SLICE_INVALID" and "not valid JSON" in error.message


def refused_from(store, pid: str, part: str) -> RunError:
    with pytest.raises(RunError) as info:
        ptr.rehydrate(ctx_of(store), pid, part)
    return info.value


# --- through the rehydrate action --------------------------------------------------------


@pytest.mark.parametrize("part", [f"lines {DIGITS}", "7" + " " * 50_000 + "x", "$", '$["\\u1"]'])
def test_the_action_answers_a_bad_slice_from_a_variable_with_slice_invalid(tmp_path, part):
    result = rehydrate_run(tmp_path, LOG[:2000], "log", part=part)
    assert result.status == "failed"
    assert result.error.code == "SLICE_INVALID" and result.error.step_id == "back"
    assert len(result.error.message) < 300


# --- through the rehydrate tool ----------------------------------------------------------

POINTER = ptr.pointer_id_of(TEXT)[0]


def args(part: str) -> str:
    return json.dumps({"pointer_id": POINTER, "slice": part})


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        (args(f"lines {DIGITS}"), "SLICE_INVALID"),  # failed the whole step (ACTION_FAILED)
        (args("1" + " " * 5000 + "x"), "SLICE_INVALID"),
        (args("$"), "SLICE_INVALID"),  # the text is not JSON
        ('{"pointer_id": ' + "[" * 100_000 + "]" * 100_000 + "}", "TOOL_ARGUMENTS_INVALID"),
        ("[" * 100_000, "TOOL_ARGUMENTS_INVALID"),  # RecursionError
        ('{"pointer_id": "' + "x" * 2_000_000 + '"}', "TOOL_ARGUMENTS_INVALID"),
        (json.dumps({"pointer_id": "p" * 5000}), "POINTER_UNKNOWN"),
    ],
)
def test_the_model_reads_a_short_error_and_the_step_goes_on(tmp_path, chat_server, arguments, code):
    chat_server.script = [{"raw": tool_reply(("c1", "rehydrate", arguments))}, {"reply": "sorry"}]
    result = tool_run(tmp_path, chat_server.url, TEXT)
    assert result.status == "completed", result.error
    assert result.state["last_model_response"] == "sorry"
    answer = chat_server.requests[1]["body"]["messages"][-1]["content"]
    assert answer.startswith(f"error {code}:") and len(answer) < 250
    (event,) = [e for e in result.events if e["type"] == "MODEL_TOOL_CALL"]
    assert event["error"] == code and len(json.dumps(event)) < 1000


@pytest.mark.parametrize(
    "junk",
    [
        "[" * 100_000,
        "{" + '"k": ' * 50_000 + "1",
        "x" * 1_000_000,
        json.dumps({"pointer_id": POINTER, "slice": "9" * 5000}),
    ],
)
def test_a_valid_call_beside_a_junk_one_is_served(tmp_path, chat_server, junk):
    chat_server.script = [
        {"raw": tool_reply(("c1", "rehydrate", junk), ("c2", "rehydrate", args("lines 3-4")))},
        {"reply": "done"},
    ]
    result = tool_run(tmp_path, chat_server.url, TEXT, window=8192)
    assert result.status == "completed", result.error
    sent = chat_server.requests[1]["body"]["messages"]
    first, second = sent[-2:]
    assert first["tool_call_id"] == "c1" and first["content"].startswith("error ")
    assert len(first["content"]) < 250
    assert second == {"role": "tool", "tool_call_id": "c2", "content": ptr.line_slice(TEXT, 3, 4)}
    # The junk is not sent back whole in the assistant turn that repeats the calls.
    assert len(json.dumps(sent)) < 20_000
