"""The examples of docs/access.md's Policy engines, Redaction and Governed exceptions sections run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from runtime.cli import cli

DOC = Path(__file__).resolve().parent.parent / "docs" / "access.md"


def section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def blocks(title: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section(title), re.S)


@pytest.mark.parametrize("title", ["Redaction", "Governed exceptions"])
def test_the_pipeline_example_validates_and_runs(runner, tmp_path, title):
    example = blocks(title, "yaml")[0]  # Governed exceptions: the access one runs in
    # tests/test_access_exceptions.py
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "answer.md").write_text("Answer the question.\n")
    path = tmp_path / "p.yaml"
    path.write_text(example)
    checked = runner.invoke(cli, ["validate", "--format", "json", str(path)])
    assert checked.exit_code == 0, checked.output
    question = "Is card 4111 1111 1111 1111 of jane@example.com blocked?"
    result = runner.invoke(
        cli,
        [
            "exec",
            str(path),
            "--input",
            f"question={question}",
            "--json",
            "--store",
            str(tmp_path / "r.db"),
        ],
    )
    assert result.exit_code == 0, result.output
    trace = runner.invoke(
        cli,
        [
            "trace",
            json.loads(result.stdout)["run_id"],
            "--store",
            str(tmp_path / "r.db"),
            "--format",
            "jsonl",
        ],
    )
    events = [json.loads(x) for x in trace.stdout.splitlines()]
    types = {e["type"] for e in events}
    if title == "Redaction":
        [call] = [e for e in events if e["type"] == "MODEL_CALL"]
        assert "4111 1111 1111 1111" not in json.dumps(call["messages"]) and "REDACTED" in types
    else:
        assert "EXCEPTION_USED" in types and "REDACTED" not in types


def test_the_python_example_runs():
    [code] = blocks("Governed exceptions", "python")
    example = blocks("Governed exceptions", "yaml")[0]
    settings = yaml.safe_load(example)["settings"]
    settings["exceptions"][0]["expires"] = str(settings["exceptions"][0]["expires"])
    scope = {"settings": settings}
    exec(code.replace("...", "found = lifted"), scope)
    assert scope["found"].id == "legacy-audit-export"


def test_the_rego_example_is_the_shipped_rule_and_opa_runs_it(tmp_path):
    from runtime.governance.access_policy import BuiltinEngine, Resource
    from runtime.governance.engines import load_engine
    from runtime.governance.subject import parse_subject
    from tests.opa_support import POLICY, OpaServer

    [example] = blocks("Policy engines", "rego")
    shipped = "".join(x for x in POLICY.read_text().splitlines(True) if not x.startswith("#"))
    assert example == shipped.lstrip("\n")
    rule = tmp_path / "example.rego"
    rule.write_text(example)
    server = OpaServer(policies=(rule,))
    try:
        engine = load_engine({"engine": "opa", "url": server.rule_url})
        subject = parse_subject({"tenant": "a", "clearance": ["public"]})
        resources = [
            Resource(f"r{i}", labels=labels)
            for i, labels in enumerate(
                [(), ("public",), ("internal",), ("public", "tenant:a"), ("public", "tenant:b")]
            )
        ]
        answered = [d.allowed for d in engine.decide(subject, "search", resources, None)]
    finally:
        server.close()
    builtin = BuiltinEngine().decide(subject, "search", resources, None)
    assert answered == [d.allowed for d in builtin] == [True, True, False, True, False]
