"""`runtime context RUN_ID [--step] [--json] [--store]` and `pack_budget:` in `validate`.

The run is code_qa over the indexed sample (`runtime index`, `runtime exec`), as the issue's
done-when: every section with budget and tokens, every item with source, score and reason,
the drop report of what was left out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from runtime.cli import cli

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "Which stored procedure writes the OrderLines table and who calls it?"


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory):
    """A code_qa run with a pack_budget and a small evidence budget, so fetches skip blocks."""
    from click.testing import CliRunner

    tmp = tmp_path_factory.mktemp("context_cli")
    runner = CliRunner()
    index = str(tmp / "index.db")
    done = runner.invoke(
        cli,
        [
            *("index", str(ROOT / "pipelines" / "sample" / "eshop")),
            *("--index", index, "--repository", "eshop"),
        ],
    )
    assert done.exit_code == 0, done.output
    text = (ROOT / "pipelines" / "code_qa.yaml").read_text()
    budget = "  evidence_budget_tokens: 3000\n"
    assert budget in text
    text = text.replace(
        budget,
        "  evidence_budget_tokens: 800\n"
        "  pack_budget: {policy: 0.2, knowledge: 0.6, safety: 0.1}\n",
    )
    (tmp / "prompts").symlink_to(ROOT / "pipelines" / "prompts")
    pipeline = tmp / "qa.yaml"
    pipeline.write_text(text)
    store = str(tmp / "runs.db")
    done = runner.invoke(
        cli,
        [
            *("exec", str(pipeline), "--index", index, "--store", store, "--run-id", "qa"),
            *("--input", f"question={QUESTION}", "--json"),
        ],
    )
    assert done.exit_code == 0, done.output
    return store


def context(runner, store, *args):
    return runner.invoke(cli, ["context", *args, "--store", store])


def test_json_holds_one_pack_per_model_call(runner, qa_run):
    result = context(runner, qa_run, "qa", "--json")
    assert result.exit_code == 0, result.output
    packs = json.loads(result.stdout)
    assert [p["step_id"] for p in packs] == ["route", "check", "answer"]
    assert [p["seq"] for p in packs] == [1, 2, 3]
    answer = packs[-1]
    sections = {s["type"]: s for s in answer["sections"]}
    assert sections["knowledge"]["budget"] == int(0.6 * answer["prompt_budget"])
    assert sections["knowledge"]["items"]
    skips = [d for d in answer["drops"]["items"] if d["reason"] == "budget_skip"]
    assert skips and all(d["tokens_saved"] > 0 for d in skips)


def test_the_table_shows_sections_items_and_the_drop_report(runner, qa_run):
    packs = json.loads(context(runner, qa_run, "qa", "--json", "--step", "answer").stdout)
    [answer] = packs
    result = context(runner, qa_run, "qa", "--step", "answer")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"pack 3 {answer['pack_id']}  step answer" in out
    for s in answer["sections"]:
        budget = "-" if s["budget"] is None else f"{s['budget']} ({s['fraction']:g})"
        row = [c.strip() for c in _row(out, s["type"], "sections")]
        assert row[:3] == [s["type"], budget, str(s["tokens"])], row
    # Each search hit: its source with the retriever, its score and its reason.
    hit = next(i for s in answer["sections"] for i in s["items"] if i["source"] == "search")
    assert f"{hit['score']:.4g}" in out and f"search hit, rank {hit['rank']}" in out
    assert "search (keyword" in out and "expansion (graph)" in out
    assert "drop report:" in out and "budget_skip" in out and "fetch_node_texts" in out


def _row(out: str, first: str, table: str) -> list[str]:
    """The cells (two or more spaces apart) of the first row of `table` starting `first`."""
    body = out[out.index(f"\n{table}\n") :]
    for line in body.splitlines():
        cells = re.split(r"  +", line.strip())
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in {table}")


def test_one_step_and_unknown_names(runner, qa_run):
    packs = json.loads(context(runner, qa_run, "qa", "--json", "--step", "route").stdout)
    assert [p["step_id"] for p in packs] == ["route"]
    missing = context(runner, qa_run, "qa", "--step", "search")
    assert missing.exit_code == 2
    assert "step 'search' made no model call; steps that did: route, check, answer" in (
        missing.stderr
    )
    unknown = context(runner, qa_run, "nope")
    assert unknown.exit_code != 0 and "RUN_NOT_FOUND" in unknown.stderr


def test_a_run_without_model_calls_says_so(runner, tmp_path):
    (tmp_path / "p.yaml").write_text(
        "settings: {entry_step_id: a}\n"
        "steps:\n"
        "  - {id: a, action: set_variables, rules: [{set: x, value: 1}], next: f}\n"
        "  - {id: f, action: finalize, source: x}\n"
    )
    store = str(tmp_path / "r.db")
    done = runner.invoke(cli, ["exec", str(tmp_path / "p.yaml"), "--store", store, "--run-id", "r"])
    assert done.exit_code == 0, done.output
    result = context(runner, store, "r")
    assert result.exit_code == 0 and "no model calls" in result.stdout
    assert json.loads(context(runner, store, "r", "--json").stdout) == []


def test_validate_names_a_pack_budget_over_one_with_its_position(runner, tmp_path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Be brief.\n")
    path = tmp_path / "p.yaml"
    path.write_text(
        "settings:\n"
        "  entry_step_id: ask\n"
        "  pack_budget: {policy: 0.5, knowledge: 0.6}\n"
        "steps:\n"
        "  - id: ask\n"
        "    action: call_model\n"
        "    prompt_key: sys\n"
        "    pack_budget: {task: 0.7, user: 0.4, safety: 0.1}\n"
        "    next: f\n"
        "  - {id: f, action: finalize, source: last_model_response}\n"
    )
    result = runner.invoke(cli, ["validate", str(path)])
    assert result.exit_code == 1, result.output
    assert f"{path}:3:16: error PACK_BUDGET_INVALID pack_budget fractions sum to 1.1" in (
        result.stdout
    )
    assert f"{path}:8:18: error PACK_BUDGET_INVALID step 'ask': pack_budget fractions sum " in (
        result.stdout
    )
    ok = path.read_text().replace("knowledge: 0.6", "knowledge: 0.5").replace("0.7", "0.4")
    path.write_text(ok)
    assert runner.invoke(cli, ["validate", str(path)]).exit_code == 0


def test_validate_refuses_a_section_that_does_not_exist(runner, tmp_path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Be brief.\n")
    path = tmp_path / "p.yaml"
    path.write_text(
        "settings: {entry_step_id: ask, pack_budget: {knowlege: 0.5}}\n"
        "steps:\n"
        "  - {id: ask, action: call_model, prompt_key: sys, next: f}\n"
        "  - {id: f, action: finalize, source: last_model_response}\n"
    )
    result = runner.invoke(cli, ["validate", str(path)])
    assert result.exit_code == 1 and "knowlege" in result.stdout


def test_on_a_terminal_the_same_cells_are_rich_tables(runner, qa_run):
    from rich.console import Console

    from runtime.cli.context import plain, tables

    [answer] = json.loads(context(runner, qa_run, "qa", "--json", "--step", "answer").stdout)
    console = Console(record=True, width=400, color_system=None)
    for table in tables(answer):
        console.print(table)
    text = console.export_text()
    for title, _, rows in plain(answer):
        assert title in text
        for row in rows:
            assert row[0] in text and row[1] in text


DAMAGED_BODIES = [
    "{}",
    '{"sections": 5}',
    '{"step_id": "a", "model": "m", "prompt_hash": 7, "sections": []}',
    '{"step_id": "a", "model": "m", "prompt_hash": "h", "sections": [], "tokens": 5}',
    '{"step_id": "a", "model": "m", "prompt_hash": "h", "sections": [],'
    ' "drops": {"items": [{"id": 1}]}}',
    '{"step_id": "a", "model": "m", "prompt_hash": "h",'
    ' "sections": [{"type": "x", "tokens": 1, "items": [{"id": 1, "tokens": 2, "score": "hi"}]}]}',
    '{"step_id": "a", "model": "m", "prompt_hash": "h",'
    ' "sections": [{"type": "x", "tokens": 1, "budget": 5, "fraction": "z"}]}',
]


@pytest.mark.parametrize("body", DAMAGED_BODIES)
def test_a_pack_of_the_wrong_shape_is_store_error_naming_it(runner, qa_run, tmp_path, body):
    """A pack row edited to JSON of another shape is STORE_ERROR naming the pack, no traceback."""
    import sqlite3

    store = str(tmp_path / "runs.db")
    source, db = sqlite3.connect(qa_run), sqlite3.connect(store)
    source.backup(db)  # the store is in WAL mode: a file copy could miss its last writes
    source.close()
    with db:
        db.execute("UPDATE run_context_packs SET body = ? WHERE run_id = 'qa' AND seq = 2", (body,))
    db.close()
    result = context(runner, store, "qa")
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert "STORE_ERROR" in result.stderr and "pack 2 of run qa" in result.stderr
    assert "Traceback" not in result.stderr
    assert "pack 1 " not in result.stdout  # refused before any table, not half a listing
    # --json prints the rows as stored (what a tool would repair from).
    assert context(runner, store, "qa", "--json").exit_code == 0


def test_control_characters_from_indexed_text_are_shown_escaped(runner, qa_run):
    """A node id comes from a file (a Markdown heading): its terminal escapes (a title set,
    the screen cleared) are printed as visible escapes, never sent to the terminal."""
    from runtime.cli.context import plain

    [answer] = json.loads(context(runner, qa_run, "qa", "--json", "--step", "answer").stdout)
    hostile = "guide.md#Orders \x1b]0;pwned\x07 \x1b[2J\x9b31m red\r\nline"
    [section] = [s for s in answer["sections"] if s.get("items")][:1]
    section["items"][0]["id"] = hostile
    answer["step_id"] = hostile
    strings = [title for title, _, _ in plain(answer)]
    strings += [cell for _, _, rows in plain(answer) for row in rows for cell in row]
    text = "\n".join(strings)
    for char in "\x1b\x07\x9b\r":
        assert char not in text
    assert "guide.md#Orders \\x1b]0;pwned\\x07 \\x1b[2J\\x9b31m red\\r\\nline" in text
