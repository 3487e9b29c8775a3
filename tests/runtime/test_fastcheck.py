"""The fast schema check agrees with jsonschema, and covers every schema validation uses."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from runtime.contract.registry import default_registry
from runtime.format.fastcheck import compile_check
from runtime.format.schema import (
    INPUT_SCHEMA,
    PIPELINE_FIELDS,
    SETTINGS_SCHEMA,
    action_def,
    document_schema,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adversarial"))
import fuzz_pipelines

TOP = {
    "type": "object",
    "properties": {**PIPELINE_FIELDS, "steps": {"type": "array", "items": {"type": "object"}}},
    "additionalProperties": False,
    "$defs": {"settings": SETTINGS_SCHEMA, "input": INPUT_SCHEMA},
}


def _agree(schema: dict[str, Any], values: list[Any]) -> None:
    fast = compile_check(schema)
    assert fast is not None
    slow = jsonschema.Draft202012Validator(schema)
    for value in values:
        assert fast(value) == slow.is_valid(value), (schema, value)


def test_every_schema_of_the_registry_compiles():
    registry = default_registry()
    assert [n for n in registry.names() if compile_check(action_def(registry.get(n))) is None] == []
    assert compile_check(TOP) is not None
    assert compile_check(document_schema(registry)) is not None


@pytest.mark.parametrize(
    ("schema", "values"),
    [
        ({"type": "integer"}, [1, 1.0, 1.5, True, False, "1", None, math.nan, math.inf, 10**30]),
        ({"type": "number"}, [1, 1.5, True, "x", None, math.nan]),
        ({"type": ["string", "null"]}, ["a", None, 1, [], {}]),
        ({"const": 1}, [1, 1.0, True, "1", [1]]),
        ({"const": True}, [True, 1, 1.0, False]),
        ({"const": [1, {"a": False}]}, [[1, {"a": False}], [1, {"a": 0}], [True, {"a": False}]]),
        ({"enum": [0, "x", None]}, [0, False, 0.0, "x", None, "y"]),
        ({"pattern": "^[A-Z]+$"}, ["AB", "Ab", "", 5, ["AB"]]),
        ({"pattern": "b"}, ["abc", "xyz"]),  # search, not a full match
        # Python's `re`, as jsonschema: `$` before a final newline, U+001C..U+001F and U+0085
        # are `\s`, U+2028 is not (ECMA-262 regexes, jsonschema-rs's, differ on each:
        # docs/performance.md).
        ({"pattern": r"^\S(.*\S)?$"}, ["main", "main\n", "\x1c", "\x1f", "\x85", "a\u2028b"]),
        ({"pattern": "^[A-Z][A-Z0-9_]*$"}, ["ALL\n", "ALL\n\n"]),
        ({"minLength": 2, "maxLength": 3}, ["a", "ab", "abcd", 12345]),
        ({"minimum": 1, "exclusiveMaximum": 3}, [0, 1, 2.9, 3, True, "2"]),
        ({"exclusiveMinimum": 0}, [0, 0.0, 1e-9, -1, False]),
        (
            {"properties": {"a": {"type": "string"}}, "additionalProperties": False},
            [{}, {"a": "x"}, {"a": 1}, {"b": 1}, [], "x"],
        ),
        (
            {"properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}},
            [{"a": "x", "b": 2}, {"b": "x"}, {"a": 1}],
        ),
        ({"required": ["a"], "minProperties": 2}, [{"a": 1}, {"a": 1, "b": 2}, {"b": 1}, 3]),
        ({"propertyNames": {"pattern": "^[a-z]+$"}}, [{"ab": 1}, {"aB": 1}, {}]),
        ({"items": {"type": "integer"}, "minItems": 1}, [[], [1], [1, "x"], {"a": 1}]),
        (
            {"uniqueItems": True},
            [[], [1, 2], [1, 1], [1, 1.0], [1, True], [{"a": 1}, {"a": 1}], [[0], [False]], "x"],
        ),
        ({"uniqueItems": False}, [[1, 1]]),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, ["a", 1, 1.5, None]),
        ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, [1, -1, 1.5, "x"]),
        ({"allOf": [{"minimum": 0}, {"maximum": 2}], "not": {"const": 1}}, [0, 1, 2, 3]),
        (
            {"if": {"properties": {"k": {"const": "a"}}}, "then": {"required": ["x"]}},
            [{"k": "a"}, {"k": "a", "x": 1}, {"k": "b"}],
        ),
        (
            {
                "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
                "$ref": "#/$defs/n",
            },
            [[], [[[]]], [[1]], 1],
        ),
        (True, [1, None]),
        (False, [1, None]),
    ],
)
def test_the_fast_check_agrees_with_jsonschema(schema, values):
    _agree(schema, values)


def test_an_unsupported_keyword_falls_back_to_jsonschema():
    assert compile_check({"multipleOf": 2}) is None
    assert compile_check({"properties": {"a": {"patternProperties": {"x": {}}}}}) is None
    assert compile_check({"$ref": "other.json#/x"}) is None
    assert compile_check({"x-note": "ignored as jsonschema ignores it"}) is not None


@pytest.mark.parametrize(
    "seed", [7, *(pytest.param(s, marks=(pytest.mark.slow, pytest.mark.pins)) for s in (8, 9, 10))]
)
def test_the_fast_check_agrees_on_mutated_real_pipelines(seed):
    """Every step and document of 4 x 250 mutants, against its action's schema and the top."""
    registry = default_registry()
    schemas = {n: action_def(registry.get(n)) for n in registry.names()}
    fast = {n: compile_check(s) for n, s in schemas.items()}
    slow = {n: jsonschema.Draft202012Validator(s) for n, s in schemas.items()}
    top_fast, top_slow = compile_check(TOP), jsonschema.Draft202012Validator(TOP)
    checked = 0
    for mutant in fuzz_pipelines.mutants(250, seed=seed):
        try:
            docs = list(yaml.load_all(mutant.text, Loader=yaml.CSafeLoader))
        except yaml.YAMLError:
            continue
        for doc in docs:
            assert top_fast(doc) == top_slow.is_valid(doc)
            steps = doc.get("steps") if isinstance(doc, dict) else None
            for step in steps if isinstance(steps, list) else []:
                name = step.get("action") if isinstance(step, dict) else None
                if isinstance(name, str) and name in fast:
                    assert fast[name](step) == slow[name].is_valid(step), (name, step)
                    checked += 1
    assert checked > 125  # the corpus reaches the action schemas, not only the top


def test_validating_a_valid_pipeline_never_imports_jsonschema():
    code = (
        "import sys\n"
        "from runtime.format.validation import validate_paths\n"
        "report = validate_paths(['pipelines/code_qa.yaml'])\n"
        "assert report.errors == 0, report.diagnostics\n"
        "print('jsonschema' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout == "False\n"
