"""Values are checked for JSON where they enter: writes, inbox payloads, trace data, inputs.

The check walks the value instead of encoding it, and its message says where in the
value the problem is. Only data that comes back unchanged from a checkpoint is let in.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import runtime
from runtime.engine import Engine

VALUES: dict[str, Any] = {}  # step field `put` -> the Python value the step writes


class Put(runtime.Action):
    """Writes VALUES[put] to `v` (or sends it / traces it, per `how`)."""

    name = "put"
    runnable = True

    def run(self, ctx: Any) -> runtime.Outcome | None:
        value = VALUES[ctx.step["put"]]
        how = ctx.step.get("how", "set")
        if how == "set":
            ctx.set("v", value)
        elif how == "send":
            ctx.enqueue("b", "topic", {"data": value})
        else:
            ctx.trace("PUT", data=value)
        return None


REG = runtime.Registry.from_classes(Put)


def run(put: str, how: str = "set", inputs: dict[str, Any] | None = None) -> runtime.RunResult:
    p = runtime.Pipeline.from_dict(
        {
            "settings": {"entry_step_id": "a"},
            "inbox": {"on_leftover": "ignore"},
            "steps": [
                {"id": "a", "action": "put", "put": put, "how": how, "next": "b"},
                {"id": "b", "action": "put", "put": "ok", "how": "trace", "end": True},
            ],
        }
    )
    return Engine(p, registry=REG).run(inputs or {}, run_id="j")


circular: list[Any] = []
circular.append(circular)

REFUSED = [
    ("int key", {"k": {1: "a"}}, "at value['k']: key 1 (int) is not a string"),
    ("set inside", [1, {"k": [0, {2}]}], "at value[1]['k'][1]: type set is not JSON data"),
    ("nan", math.nan, "nan is not a JSON number"),
    ("inf in a list", {"x": [1.5, -math.inf]}, "at value['x'][1]: -inf is not a JSON number"),
    ("object", {"o": object}, "at value['o']: type type is not JSON data"),
    (
        "circular",
        circular,
        "at value[0][0][0][0][0][0][0][0][0][0][0][0][...]: nested deeper than 400 levels"
        " (a circular reference?)",
    ),
]


@pytest.mark.parametrize("name,value,problem", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_write_that_is_not_json_is_refused_naming_where(name, value, problem):
    VALUES.update(ok=1, bad=value)
    result = run("bad")
    assert (result.status, result.error.code, result.error.step_id) == (
        "failed",
        "STATE_NOT_SERIALIZABLE",
        "a",
    )
    assert result.error.message == f"variable 'v' is not JSON-serialisable: {problem}"
    assert "v" not in result.state


@pytest.mark.parametrize("how", ["send", "trace"])
def test_inbox_payloads_and_trace_data_are_checked_the_same_way(how):
    VALUES.update(ok=1, bad={"k": {1: "a"}})
    result = run("bad", how)
    what = "inbox payload for 'b'" if how == "send" else "trace event 'PUT'"
    assert (result.error.code, result.error.message) == (
        "STATE_NOT_SERIALIZABLE",
        f"{what} is not JSON-serialisable: at value['data']['k']: key 1 (int) is not a string",
    )


def test_an_input_that_is_not_json_is_refused():
    VALUES.update(ok=1)
    with pytest.raises(runtime.RunError) as info:
        run("ok", inputs={"q": {"when": {3}}})
    assert (info.value.code, info.value.message) == (
        "STATE_NOT_SERIALIZABLE",
        "input 'q' is not JSON-serialisable: at value['when']: type set is not JSON data",
    )


def test_plain_json_data_is_written_as_given():
    nested = {"a": [1, 2.5, True, None, "s", {"b": []}], "t": (1, "x")}
    VALUES.update(ok=1, good=nested)
    result = run("good")
    assert result.status == "completed", result.error
    assert result.state["v"] is nested
