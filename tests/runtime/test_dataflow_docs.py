"""docs/dataflow.md says what the code does: its action table, its output and its example."""

from __future__ import annotations

import re
from pathlib import Path

import runtime
from runtime.contract.registry import Registry, default_registry

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "dataflow.md").read_text()


def _table() -> dict[str, tuple[set[str], set[str]]]:
    body = PAGE.split("<!-- dataflow:start -->")[1].split("<!-- dataflow:end -->")[0]
    rows: dict[str, tuple[set[str], set[str]]] = {}
    for line in body.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        name = cells[0].strip("`")
        # Names in backticks; `(or `target`)` and the like name fields, not defaults.
        needs = set(re.findall(r"`(\w+)`", re.sub(r"\(or `\w+`\)", "", cells[1])))
        writes = set(re.findall(r"`(\w+)`", re.sub(r"\(or `\w+`\)", "", cells[3])))
        rows[name] = (needs, writes)
    return rows


def test_the_action_table_matches_what_the_actions_declare():
    registry = default_registry()
    rows = _table()
    assert sorted(rows) == registry.names()
    for name, (needs, writes) in rows.items():
        cls = registry.get(name)
        assert cls is not None
        declared = {n for r in cls.step_reads({}) for n in r.names}
        assert needs == declared, name
        if name in ("set_variables", "rehydrate", "redact"):  # the fields name what they write
            assert list(cls.step_writes({})) == []
            continue
        assert writes == set(cls.step_writes({})), name


def test_the_page_shows_what_validate_prints(runner, monkeypatch):
    from runtime.cli import cli

    monkeypatch.chdir(ROOT)
    result = runner.invoke(cli, ["validate", "tests/data/dataflow/finalize_unwritten.yaml"])
    assert result.exit_code == 0
    command = "```text\n$ runtime validate tests/data/dataflow/finalize_unwritten.yaml\n"
    assert PAGE.split(command)[1].split("```")[0] == result.stdout


def test_the_third_party_example_takes_part(tmp_path):
    code = PAGE.split("```python\n")[1].split("```")[0]
    space: dict = {}
    exec(compile(code, "dataflow.md", "exec"), space)  # the page's own example
    summarise = space["Summarise"]
    registry = Registry.from_classes(summarise, default_registry().get("finalize"))
    path = tmp_path / "p.yaml"
    path.write_text(
        "settings: {entry_step_id: s}\n"
        "inputs: {text: string}\n"
        "steps:\n"
        "  - {id: s, action: summarise, source: notes, next: f}\n"
        "  - {id: f, action: finalize, source: summary}\n"
    )
    [diag] = runtime.validate(str(path), registry=registry).diagnostics
    assert (diag.code, diag.line, diag.column, diag.path) == (
        "VARIABLE_NEVER_WRITTEN",
        4,
        40,
        "$.steps[0].source",
    )
    path.write_text(path.read_text().replace("source: notes", "source: text"))
    assert runtime.validate(str(path), registry=registry).diagnostics == []
