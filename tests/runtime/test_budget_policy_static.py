"""The static checks are not fooled by a context policy (issue 24 item 6).

What a policy may not summarise (the fixed text, the fidelity preamble, the question, a
part marked `summarizable: false`) is checked against the policy's own budget, exactly at
the limit and one token over; an unbounded part the policy may not summarise still warns;
a budget under the emergency floor is a warning; `runtime budget` shows each step's
policy (budget, reserve, floor).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from actions import _tools
from actions.call_model import EVIDENCE_NOTE, MESSAGE_OVERHEAD
from runtime.cli import cli
from runtime.context import fidelity as fid
from runtime.context.tokens import get_counter
from runtime.format.budget import BYTES_PER_CHAR, PREAMBLE_JOINT
from runtime.format.validation import validate_paths

COUNT = get_counter("cl100k_base").count
PROMPT = "You answer questions about a long novel."
FRAME = COUNT(f"{EVIDENCE_NOTE}\n<evidence>\n\n</evidence>")
PREAMBLE = fid.BUDGETS["compact"] + PREAMBLE_JOINT
QUESTION_CHARS = 400


def write(tmp_path: Path, *, window: int, policy: str, keep: str = "", q: str = "") -> Path:
    """question (maxLength 400, never summarised), doc (unbounded, summarisable), keep."""
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "answer.md").write_text(PROMPT + "\n", encoding="utf-8")
    text = textwrap.dedent(
        f"""\
        name: budgets
        settings:
          entry_step_id: first
          models:
            small: {{provider: openai, model: m, base_url: "http://127.0.0.1:9/v1", context_window: {window}}}
          {"context_policy: " + policy if policy else ""}
        inputs:
          question: {{type: string{q or f", maxLength: {QUESTION_CHARS}"}}}
          doc: {{type: string}}
          note: {{type: string, maxLength: 100}}
        steps:
          - id: first
            action: call_model
            prompt_key: answer
            model: small
            max_output_tokens: 100
            tools: [rehydrate]
            user_parts:
              q: {{source: question, template: "Question: {{}}"}}
              doc: {{source: doc}}
              note: {{source: note{keep}}}
            end: true
        """
    )
    path = tmp_path / "budgets.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def found(path: Path) -> list[tuple[str, str, int, str]]:
    report = validate_paths([str(path)])
    return [
        (d.code, d.severity, d.line, d.message)
        for d in report.diagnostics
        if "BUDGET" in d.code or "POLICY" in d.code
    ]


# The offered rehydrate tool's spec goes with every request (issue 29): fixed, as the run
# counts it.
SPEC = COUNT(json.dumps(_tools.resolve(["rehydrate"])[0].spec(), sort_keys=True))
# Two messages, the prompt, the template text, the blank lines joining three parts, the spec.
FIXED = 2 * MESSAGE_OVERHEAD + COUNT(PROMPT) + COUNT("Question: ") + COUNT("\n\n" * 2) + SPEC
HARD = FIXED + QUESTION_CHARS * BYTES_PER_CHAR + FRAME + PREAMBLE


def test_what_the_policy_may_not_summarise_at_the_budget_is_clean_one_over_is_an_error(
    tmp_path,
):
    at = write(tmp_path, window=HARD + 100, policy="{enabled: true}")
    assert found(at) == []
    over = write(tmp_path, window=HARD + 99, policy="{enabled: true}")
    [(code, severity, line, message)] = found(over)
    assert (code, severity, line) == ("BUDGET_POLICY_CANNOT_FIT", "error", 12)
    assert f"needs up to {HARD} tokens" in message
    assert f"user_parts.q up to {QUESTION_CHARS * BYTES_PER_CHAR + FRAME}" in message
    assert f"over its {HARD - 1}-token prompt budget (reserve 100)" in message


def test_a_part_marked_not_summarisable_counts_and_a_prompt_budget_is_the_budget(tmp_path):
    note = 100 * BYTES_PER_CHAR + FRAME
    window = HARD + note + 100
    assert (
        found(
            write(tmp_path, window=window, policy="{enabled: true}", keep=", summarizable: false")
        )
        == []
    )
    over = write(
        tmp_path, window=window - 1, policy="{enabled: true}", keep=", summarizable: false"
    )
    assert [c[0] for c in found(over)] == ["BUDGET_POLICY_CANNOT_FIT"]
    capped = write(tmp_path, window=10 * window, policy=f"{{prompt_budget: {HARD - 1}}}")
    assert [c[0] for c in found(capped)] == ["BUDGET_POLICY_CANNOT_FIT"]


def test_an_unbounded_question_warns_even_with_a_policy(tmp_path):
    path = write(tmp_path, window=100_000, policy="{enabled: true}", q=" ")
    [(code, severity, _, message)] = found(path)
    assert (code, severity) == ("BUDGET_MAY_OVERFLOW", "warning")
    assert "may not summarise user_parts.q (input question has no maxLength)" in message
    assert "doc" not in message  # the policy summarises what it may


def test_a_prompt_budget_under_the_emergency_floor_warns(tmp_path):
    at = write(
        tmp_path, window=100_000, policy=f"{{prompt_budget: {HARD}, emergency_floor: {HARD}}}"
    )
    assert found(at) == []
    under = write(
        tmp_path, window=100_000, policy=f"{{prompt_budget: {HARD}, emergency_floor: {HARD + 1}}}"
    )
    [(code, severity, _, message)] = found(under)
    assert (code, severity) == ("POLICY_BUDGET_UNDER_FLOOR", "warning")
    assert f"prompt budget {HARD} (reserve 100) is under its emergency_floor {HARD + 1}" in message


def test_runtime_budget_shows_the_policy_of_each_step(tmp_path):
    path = write(
        tmp_path, window=HARD + 500, policy="{response_reserve: 200, emergency_floor: 300}"
    )
    result = CliRunner().invoke(cli, ["budget", str(path), "--json"])
    assert result.exit_code == 0, result.output
    [step] = json.loads(result.stdout)
    assert step["policy"] == {
        "enabled": True,
        "dry_run": False,
        "budget": HARD + 300,
        "reserve": 200,
        "floor": 300,
        "summary_tokens": 200,
    }
    assert step["unsummarisable_maximum"] == HARD
    table = CliRunner().invoke(cli, ["budget", str(path)])
    assert table.exit_code == 0 and f"{HARD + 300}/200/300" in table.stdout
    assert (
        f"the policy may not summarise <= {HARD} of its {HARD + 300}-token budget" in table.stdout
    )
    over = write(tmp_path, window=HARD + 99, policy="{enabled: true}")
    failed = CliRunner().invoke(cli, ["budget", str(over)])
    assert failed.exit_code == 1 and "policy cannot fit" in failed.stdout


def test_without_a_policy_runtime_budget_says_none(tmp_path):
    path = write(tmp_path, window=HARD + 500, policy="")
    [step] = json.loads(CliRunner().invoke(cli, ["budget", str(path), "--json"]).stdout)
    assert step["policy"] is None
