"""Renderers: one golden rendering per output format, plus format-specific properties."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from runtime.format import diagnostics as d
from runtime.format.validation import validate_paths

DATA = Path(__file__).resolve().parent.parent / "data"
GOLDEN = DATA / "golden"
FIXTURE = "invalid/schema.yaml"


@pytest.fixture
def diags(registry, monkeypatch):
    monkeypatch.chdir(DATA)  # relative paths keep the golden files machine-independent
    return validate_paths([FIXTURE], registry=registry).diagnostics


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text + "\n")
    assert text + "\n" == path.read_text()


def test_text_golden(diags):
    _golden("schema.text", d.render_text(diags))


def test_json_golden(diags):
    _golden("schema.json", d.render_json(diags, [FIXTURE]))


def test_github_golden(diags):
    _golden("schema.github", d.render_github(diags))


def test_sarif_golden(diags):
    _golden("schema.sarif", d.render_sarif(diags, version="test"))


def test_text_has_caret_under_the_offending_token(diags):
    text = d.render_text(diags)
    lines = text.splitlines()
    i = lines.index(next(x for x in lines if "unknown field 'nxt'" in x))
    assert lines[i + 1].endswith("nxt: second                     # expect: SCHEMA_UNKNOWN_FIELD")
    caret = lines[i + 2]
    assert caret.index("^") == lines[i + 1].index("nxt") and caret.count("^") == 3


def test_json_shape_is_the_cli_contract(diags):
    obj = json.loads(d.render_json(diags, [FIXTURE]))
    assert set(obj) == {"files", "errors", "warnings", "diagnostics"}
    assert obj["errors"] == sum(1 for x in diags if x.severity == "error")
    for item in obj["diagnostics"]:
        assert set(item) == {
            "code",
            "severity",
            "message",
            "file",
            "line",
            "column",
            "path",
            "hint",
        }
        assert item["line"] >= 1 and item["column"] >= 1
        assert item["severity"] in ("error", "warning")


def test_github_escapes_properties_and_newlines():
    diag = d.Diagnostic("SCHEMA_TYPE", "error", "a\nb 100%", "x,y:z.yaml", 3, 4)
    assert d.render_github([diag]) == (
        "::error file=x%2Cy%3Az.yaml,line=3,col=4,title=SCHEMA_TYPE::a%0Ab 100%25"
    )


def test_sarif_structure(diags):
    log = json.loads(d.render_sarif(diags))
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert rule_ids == sorted(set(rule_ids))
    for res in run["results"]:
        assert rule_ids[res["ruleIndex"]] == res["ruleId"]
        assert res["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1
    # A minimal structural schema of the SARIF 2.1.0 parts we emit.
    jsonschema.validate(
        log,
        {
            "type": "object",
            "required": ["version", "runs"],
            "properties": {
                "runs": {
                    "type": "array",
                    "items": {
                        "required": ["tool", "results"],
                        "properties": {
                            "results": {
                                "type": "array",
                                "items": {
                                    "required": ["ruleId", "level", "message", "locations"],
                                    "properties": {
                                        "level": {"enum": ["error", "warning", "note", "none"]}
                                    },
                                },
                            }
                        },
                    },
                }
            },
        },
    )
