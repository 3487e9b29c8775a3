"""Static budget checks: each model step's worst-case prompt against its model's window.

Every window below is computed from the real tokenizer and set exactly at the envelope,
then one token under it: at the limit the step is clean, one over it is flagged.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from actions.call_model import EVIDENCE_NOTE, MESSAGE_OVERHEAD
from runtime.context import fidelity as fid
from runtime.context.tokens import get_counter
from runtime.contract.registry import default_registry
from runtime.engine.state import apply_inputs
from runtime.errors import InputError
from runtime.format.budget import BYTES_PER_CHAR, PREAMBLE_JOINT, envelopes
from runtime.format.pipeline import Pipeline
from runtime.format.validation import validate_paths

COUNT = get_counter("cl100k_base").count
PROMPT = "You answer questions about a long novel. Quote the text you rely on, with its line."
FRAME = COUNT(f"{EVIDENCE_NOTE}\n<evidence>\n\n</evidence>")


def write(tmp_path: Path, body: str, *, window: int, inputs: str = "", settings: str = "") -> Path:
    """A pipeline with one small-window model and the prompt file `answer`."""
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "answer.md").write_text(PROMPT + "\n", encoding="utf-8")
    text = textwrap.dedent(
        """\
        name: budgets
        settings:
          entry_step_id: first
          max_context_tokens: 3000
          models:
            small: {{provider: openai, model: m, base_url: "http://127.0.0.1:9/v1", context_window: {window}}}
        {settings}
        inputs:
          question: {{type: string{inputs}}}
        steps:
        {body}
        """
    ).format(
        window=window,
        settings=textwrap.indent(settings, "  "),
        inputs=inputs,
        body=textwrap.indent(textwrap.dedent(body), "  "),
    )
    path = tmp_path / "budgets.yaml"
    path.write_text(text, encoding="utf-8")
    return path


ASK = """\
- id: first
  action: call_model
  prompt_key: answer
  model: small
  max_output_tokens: 100
  user_parts:
    q: {source: question, template: "Question: {}"}
  end: true
"""
# Two messages (system, user), the system prompt, the template's text, the reserved output.
MINIMUM = 2 * MESSAGE_OVERHEAD + COUNT(PROMPT) + COUNT("Question: ") + 100
# Every model step in these pipelines names no fidelity: each call starts with a compact
# preamble (docs/fidelity.md), at most its budget, joined to the system prompt by a blank line.
PREAMBLE = fid.BUDGETS["compact"] + PREAMBLE_JOINT


def codes(path: Path) -> list[tuple[str, str, int]]:
    """(code, severity, line) of every budget diagnostic."""
    report = validate_paths([str(path)])
    return [(d.code, d.severity, d.line) for d in report.diagnostics if "BUDGET" in d.code]


def the_envelope(path: Path):
    report = validate_paths([str(path)])
    (pipeline,) = report.pipelines
    steps = [s.config for s in pipeline.steps]
    found = envelopes(
        steps, pipeline.settings, default_registry(), pipeline, pipeline.raw.get("inputs")
    )
    return {b.step_id: b for b in found}


def slots(b):
    """The parts a variable fills (not the fidelity preamble or thread)."""
    return [p for p in b.parts if p.variable]


def test_the_fixed_part_is_the_prompt_file_templates_framing_and_output(tmp_path):
    b = the_envelope(write(tmp_path, ASK, window=10_000, inputs=", maxLength: 50"))["first"]
    assert (b.window, b.tokenizer, b.minimum) == (10_000, "cl100k_base", MINIMUM)
    assert [(p.label, p.tokens) for p in b.parts] == [
        ("user_parts.q", 50 * BYTES_PER_CHAR + FRAME),
        ("fidelity preamble (compact)", PREAMBLE),
    ]
    assert b.bounded_maximum == MINIMUM + 200 + FRAME + PREAMBLE and b.status == "fits"


def test_a_fixed_part_exactly_at_the_window_is_valid_one_token_over_is_impossible(tmp_path):
    at = write(tmp_path, ASK, window=MINIMUM, inputs=", maxLength: 50")
    assert [c for c in codes(at) if c[0] == "BUDGET_IMPOSSIBLE"] == []
    over = write(tmp_path, ASK, window=MINIMUM - 1, inputs=", maxLength: 50")
    # Positioned at the step's id: line 11 of the file written above (line 7 is the empty
    # settings line).
    assert codes(over) == [("BUDGET_IMPOSSIBLE", "error", 11)]
    report = validate_paths([str(over)])
    (diag,) = [d for d in report.diagnostics if d.code == "BUDGET_IMPOSSIBLE"]
    assert f"need {MINIMUM} tokens" in diag.message and "'first'" in diag.message


def test_bounded_parts_at_the_window_are_clean_one_token_more_warns(tmp_path):
    top = MINIMUM + 50 * BYTES_PER_CHAR + FRAME + PREAMBLE
    assert codes(write(tmp_path, ASK, window=top, inputs=", maxLength: 50")) == []
    found = codes(write(tmp_path, ASK, window=top - 1, inputs=", maxLength: 50"))
    assert found == [("BUDGET_MAY_OVERFLOW", "warning", 11)]


def test_an_input_without_maxlength_is_named_as_the_unbounded_part(tmp_path):
    path = write(tmp_path, ASK, window=1_000_000)
    report = validate_paths([str(path)])
    (diag,) = [d for d in report.diagnostics if d.code == "BUDGET_MAY_OVERFLOW"]
    assert diag.severity == "warning"
    assert "unbounded parts: user_parts.q (input question has no maxLength)" in diag.message


@pytest.mark.parametrize(
    ("extra", "settings", "warned"),
    [
        ("", "", True),
        ("catch: {CONTEXT_OVERFLOW: first}\n", "", False),
        ("catch: {ALL: first}\n", "", False),
        ("catch: {MODEL_TIMEOUT: first}\n", "", True),
        ("", "context_policy: {enabled: true}", False),
        ("", "context_policy: {enabled: false}", True),
        ("", "context_policy: {enabled: true, dry_run: true}", True),
        # The step's policy is merged over the settings', as at run time.
        ("context_policy: {enabled: false}\n", "context_policy: {enabled: true}", True),
        ("context_policy: {enabled: true}\n", "context_policy: {enabled: false}", False),
        ("context_policy: {summary_tokens: 50}\n", "", False),
    ],
)
def test_a_policy_or_a_catch_of_the_overflow_silences_the_warning(
    tmp_path, extra, settings, warned
):
    body = ASK.replace("  end: true\n", "  end: true\n" + textwrap.indent(extra, "  "))
    # A part the policy may summarise (the question it may not: test_budget_policy_static.py).
    body = body.replace("{source: question,", "{source: notes,")
    path = write(tmp_path, body, window=1_000_000, settings=settings)
    assert bool(codes(path)) is warned


def test_context_blocks_are_bounded_by_manage_context_budget(tmp_path):
    body = """\
    - id: first
      action: manage_context_budget
      on_ok: ask
      on_over: ask
    - id: ask
      action: call_model
      prompt_key: answer
      model: small
      max_output_tokens: 100
      user_parts:
        evidence: {source: context_blocks}
      end: true
    """
    b = the_envelope(write(tmp_path, body, window=100_000))["ask"]
    (part,) = slots(b)
    assert (part.tokens, part.variable) == (3000 + FRAME, "context_blocks")
    assert "keeps it within 3000" in part.why


def test_a_model_reply_is_bounded_by_its_writers_max_output_tokens(tmp_path):
    body = """\
    - id: first
      action: call_model
      prompt_key: answer
      model: small
      max_output_tokens: 77
      next: second
    - id: second
      action: call_model
      prompt_key: answer
      model: small
      max_output_tokens: 50
      user_parts:
        draft: {source: last_model_response}
      end: true
    """
    b = the_envelope(write(tmp_path, body, window=100_000))["second"]
    # Both steps write last_model_response: the larger reply bounds it.
    assert [p.tokens for p in b.parts] == [77 + FRAME, PREAMBLE]


def test_one_unbounded_writer_makes_the_variable_unbounded(tmp_path):
    body = """\
    - id: first
      action: manage_context_budget
      on_ok: load
      on_over: load
    - id: load
      action: load_conversation_history
      next: ask
    - id: ask
      action: call_model
      prompt_key: answer
      model: small
      use_history: true
      user_parts:
        a: {source: context_blocks}
        b: {source: conversation_history}
      end: true
    """
    b = the_envelope(write(tmp_path, body, window=100_000))["ask"]
    assert [(p.label, p.tokens is None) for p in b.parts] == [
        ("user_parts.a", False),
        ("user_parts.b", True),
        ("conversation_history", True),
        ("fidelity preamble (compact)", False),
    ]
    assert "load_conversation_history" in b.parts[1].why


def test_validation_counts_only_when_bytes_cannot_decide(tmp_path):
    b = the_envelope(write(tmp_path, ASK, window=10_000, inputs=", maxLength: 50"))["first"]
    assert b.exact  # runtime budget counts exactly
    report = validate_paths([str(write(tmp_path, ASK, window=10_000, inputs=", maxLength: 5"))])
    assert report.errors == 0 and report.warnings == 0


def test_maxlength_is_enforced_at_run_time_at_its_limit(tmp_path):
    pipeline = Pipeline.from_dict(
        {"steps": [], "inputs": {"question": {"type": "string", "maxLength": 5}}}
    )
    assert apply_inputs(pipeline, {"question": "12345"}) == {"question": "12345"}
    with pytest.raises(InputError) as info:
        apply_inputs(pipeline, {"question": "123456"})
    assert info.value.code == "INPUT_TOO_LONG" and "6 characters" in info.value.message


def test_maxlength_on_a_non_string_input_is_invalid(tmp_path):
    path = write(tmp_path, ASK, window=10_000)
    text = path.read_text().replace(
        "question: {type: string}", "question: {type: array, maxLength: 3}"
    )
    path.write_text(text)
    report = validate_paths([str(path)])
    assert [d.code for d in report.diagnostics if d.severity == "error"] == ["INPUT_SPEC_INVALID"]


def test_an_unreadable_prompt_file_is_named_not_a_crash(tmp_path):
    path = write(tmp_path, ASK, window=10_000, inputs=", maxLength: 5")
    (tmp_path / "prompts" / "answer.md").write_bytes(b"\xff\xfe not utf-8")
    report = validate_paths([str(path)])
    (diag,) = [d for d in report.diagnostics if d.code.startswith("BUDGET")]
    assert diag.code == "BUDGET_MAY_OVERFLOW"
    assert "system prompt (UnicodeDecodeError" in diag.message


def test_an_unbounded_source_beside_a_bounded_writer_leaves_the_variable_unbounded(tmp_path):
    body = """\
    - id: first
      action: manage_context_budget
      on_ok: ask
      on_over: ask
    - id: ask
      action: call_model
      prompt_key: answer
      model: small
      user_parts:
        evidence: {source: context_blocks}
      end: true
    """
    path = write(tmp_path, body, window=100_000)
    text = path.read_text().replace(
        "  question: {type: string}", "  question: {type: string}\n  context_blocks: {type: array}"
    )
    path.write_text(text)
    (part,) = slots(the_envelope(path)["ask"])
    # An input may hand in any context_blocks, whatever manage_context_budget keeps.
    assert (part.tokens, part.why) == (None, "input context_blocks has no maxLength")


def test_a_rehydrated_variable_is_bounded_by_the_steps_max_tokens(tmp_path):
    body = """\
    - id: first
      action: rehydrate
      pointer_id: ptr-0123456789abcdef
      target: passage
      max_tokens: 300
      next: ask
    - id: ask
      action: call_model
      prompt_key: answer
      model: small
      user_parts:
        passage: {source: passage}
      end: true
    """
    (part,) = slots(the_envelope(write(tmp_path, body, window=100_000))["ask"])
    assert part.tokens == 300 + FRAME and "keeps it within 300" in part.why


def spec_tokens(*names: str) -> int:
    """The tokens of the named tools' specs, as a step offering them counts them."""
    import json

    from actions import _tools

    return sum(COUNT(json.dumps(t.spec(), sort_keys=True)) for t in _tools.resolve(list(names)))


ASK_WITH_TOOLS = ASK.replace(
    "  end: true\n", "  tools: [search_nodes, fetch_node_texts]\n  end: true\n"
)


def test_offered_tool_specs_are_part_of_the_fixed_prompt_at_their_exact_tokens(tmp_path):
    # The specs go with every request (issue 29): a window that holds the prompt but not
    # the specs can never run, one exactly at prompt + specs can.
    specs = spec_tokens("search_nodes", "fetch_node_texts")
    assert specs > 50  # two real specs, not an empty list
    top = MINIMUM + specs
    at = the_envelope(write(tmp_path, ASK_WITH_TOOLS, window=top, inputs=", maxLength: 50"))
    assert at["first"].minimum == top
    assert [
        c
        for c in codes(write(tmp_path, ASK_WITH_TOOLS, window=top, inputs=", maxLength: 50"))
        if c[0] == "BUDGET_IMPOSSIBLE"
    ] == []
    over = write(tmp_path, ASK_WITH_TOOLS, window=top - 1, inputs=", maxLength: 50")
    assert ("BUDGET_IMPOSSIBLE", "error", 11) in codes(over)


def test_a_tool_selection_counts_every_tool_it_may_offer(tmp_path):
    body = ASK.replace(
        "  end: true\n",
        "  tools: {select: auto, max: 1, from: [search_nodes, fetch_node_texts]}\n  end: true\n",
    )
    b = the_envelope(write(tmp_path, body, window=10_000, inputs=", maxLength: 50"))["first"]
    assert b.minimum == MINIMUM + spec_tokens("search_nodes", "fetch_node_texts")
