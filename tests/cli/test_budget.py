"""`runtime budget`: the envelope table, its JSON form and its exit status."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from runtime.cli import cli
from runtime.context.tokens import get_counter

PROMPT = "Answer from the evidence only."


def pipeline(tmp_path: Path, window: int, output: int = 100) -> Path:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "answer.md").write_text(PROMPT, encoding="utf-8")
    path = tmp_path / "p.yaml"
    path.write_text(
        f"""\
name: envelope
settings:
  entry_step_id: ask
  models:
    small: {{provider: openai, model: m, base_url: "http://127.0.0.1:9/v1", context_window: {window}}}
inputs:
  question: {{type: string}}
steps:
  - id: ask
    action: call_model
    prompt_key: answer
    model: small
    max_output_tokens: {output}
    user_parts:
      q: {{source: question}}
    end: true
""",
        encoding="utf-8",
    )
    return path


# One system and one user message (4 framing tokens each), the prompt, the output.
MINIMUM = 8 + get_counter("cl100k_base").count(PROMPT) + 100


def test_json_gives_each_model_steps_envelope(tmp_path):
    result = CliRunner().invoke(cli, ["budget", str(pipeline(tmp_path, 8192)), "--json"])
    assert result.exit_code == 0, result.output
    (step,) = json.loads(result.stdout)
    assert step["step"] == "ask" and step["window"] == 8192 and step["model"] == "small"
    assert step["minimum"] == MINIMUM and step["output_tokens"] == 100
    assert step["unbounded"] == ["user_parts.q"] and step["status"] == "unbounded"
    assert step["parts"][0]["why"] == "input question has no maxLength"


def test_the_table_names_the_step_and_its_unbounded_part(tmp_path):
    result = CliRunner().invoke(cli, ["budget", str(pipeline(tmp_path, 8192))])
    assert result.exit_code == 0, result.output
    assert "ask" in result.stdout and "1 unbounded" in result.stdout
    assert "ask: user_parts.q unbounded: input question has no maxLength" in result.stdout


def test_an_impossible_step_exits_1_and_is_shown_at_the_limit(tmp_path):
    at = CliRunner().invoke(cli, ["budget", str(pipeline(tmp_path, MINIMUM)), "--json"])
    assert at.exit_code == 0 and json.loads(at.stdout)[0]["status"] == "unbounded"
    over = CliRunner().invoke(cli, ["budget", str(pipeline(tmp_path, MINIMUM - 1)), "--json"])
    assert over.exit_code == 1
    assert json.loads(over.stdout)[0]["status"] == "impossible"


def test_an_invalid_pipeline_reports_its_errors_and_exits_1(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nsteps:\n  - id: a\n    action: nope\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["budget", str(path)])
    assert result.exit_code == 1
    assert "UNKNOWN_ACTION" in result.stderr and result.stdout == ""


def test_help():
    result = CliRunner().invoke(cli, ["budget", "--help"])
    assert result.exit_code == 0 and "--json" in result.stdout


PACK = Path(__file__).resolve().parent.parent / "data" / "legacy" / "tests" / "e2e" / "data"
PACK = PACK / "pipelines" / "pipeline_pack.yaml"


def test_a_pack_member_is_chosen_by_name():
    whole = CliRunner().invoke(cli, ["budget", str(PACK)])
    assert whole.exit_code == 2 and "holds several pipelines (P0, P1, P2, P3, P4)" in whole.stderr
    one = CliRunner().invoke(cli, ["budget", f"{PACK}#P1", "--json"])
    assert one.exit_code == 0, one.output
    assert [s["step"] for s in json.loads(one.stdout)] == ["call_router", "call_answer"]
    missing = CliRunner().invoke(cli, ["budget", f"{PACK}#NOPE"])
    assert missing.exit_code == 1 and "no pipeline NOPE in" in missing.stderr
