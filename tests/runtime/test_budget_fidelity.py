"""Static budget checks count each model step's context fidelity (docs/fidelity.md).

A fresh mode adds its preamble (at most the mode's budget, plus the blank line joining it
to the system prompt); `full` adds a thread no static bound limits. The mode is taken over
every way of arriving at the step: a transition's `fidelity` for arrivals by it, the
step's own (step, settings.default_fidelity, compact) for the entry and the others.
"""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

import pytest

from runtime.context import fidelity as fid
from runtime.context.tokens import get_counter
from runtime.contract.registry import default_registry
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.budget import PREAMBLE_JOINT, envelopes
from runtime.format.validation import load_pipeline, validate_paths

COUNT = get_counter("cl100k_base").count
PROMPT = "You review a change. Say what is wrong with it, or that it is ready."


def write(
    tmp_path: Path, body: str, *, window: int = 100_000, settings: str = "", entry: str = "a"
) -> Path:
    """A pipeline whose model steps use the `small` model (extractive: runnable offline)."""
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "p.md").write_text(PROMPT + "\n", encoding="utf-8")
    text = textwrap.dedent(
        """\
        name: fidelity_budgets
        settings:
          entry_step_id: {entry}
          models:
            small: {{provider: extractive, context_window: {window}}}
        {settings}
        inputs:
          question: {{type: string, maxLength: 50}}
        steps:
        {body}
          - id: done
            action: finalize
            source: question
        """
    ).format(
        window=window,
        entry=entry,
        settings=textwrap.indent(settings, "  "),
        body=textwrap.indent(textwrap.dedent(body), "  "),
    )
    path = tmp_path / "fidelity_budgets.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def model_step(sid: str, nxt: str, **extra: str) -> str:
    """A call_model step with no user parts (its prompt: the system prompt and the preamble)."""
    lines = [
        f"- id: {sid}",
        "  action: call_model",
        "  prompt_key: p",
        "  model: small",
        "  max_output_tokens: 50",
        *(f"  {k}: {v}" for k, v in extra.items()),
        f"  next: {nxt}" if nxt != "end" else "  end: true",
    ]
    return "\n".join(lines) + "\n"


def budgets(path: Path) -> list[tuple[str, str, int, str]]:
    """(code, severity, line, message) of every budget diagnostic."""
    report = validate_paths([str(path)])
    assert report.errors == 0, report.diagnostics
    return [
        (d.code, d.severity, d.line, d.message) for d in report.diagnostics if "BUDGET" in d.code
    ]


def the_envelopes(path: Path):
    report = validate_paths([str(path)])
    (pipeline,) = report.pipelines
    steps = [s.config for s in pipeline.steps]
    found = envelopes(steps, pipeline.settings, default_registry(), pipeline, {})
    return {b.step_id: b for b in found}


def line_of(path: Path, text: str) -> int:
    """The 1-based line holding `text` (once in the file)."""
    (n,) = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return n


def fidelity_parts(b) -> list[tuple[str, int | None]]:
    return [(p.label, p.tokens) for p in b.parts if p.label.startswith(("fidelity", "thread"))]


def test_a_step_that_names_no_fidelity_counts_the_compact_preamble(tmp_path):
    b = the_envelopes(write(tmp_path, model_step("a", "end")))["a"]
    assert fidelity_parts(b) == [
        ("fidelity preamble (compact)", fid.BUDGETS["compact"] + PREAMBLE_JOINT)
    ]


def test_a_transitions_full_warns_at_the_transitions_line(tmp_path):
    body = model_step("a", "{step: b, fidelity: full, thread_id: t}") + model_step("b", "end")
    path = write(tmp_path, body)
    [(code, severity, line, message)] = budgets(path)
    assert (code, severity) == ("BUDGET_MAY_OVERFLOW", "warning")
    assert line == line_of(path, "fidelity: full")  # the transition, not the step
    assert message.startswith("step 'b' on small (100000-token window): ")
    assert "arrived at from step 'a' by next with fidelity full" in message
    b = the_envelopes(path)["b"]
    # b is arrived at only by a's `full`: no preamble, a thread.
    assert fidelity_parts(b) == [("thread (fidelity full)", None)]
    assert b.status == "unbounded"


@pytest.mark.parametrize(
    ("extra", "settings"),
    [
        ({"context_policy": "{enabled: true}"}, ""),
        ({}, "context_policy: {enabled: true}"),
        ({"catch": "{CONTEXT_OVERFLOW: done}"}, ""),
    ],
)
def test_a_policy_or_a_catch_on_the_target_silences_the_transitions_warning(
    tmp_path, extra, settings
):
    body = model_step("a", "{step: b, fidelity: full}") + model_step("b", "end", **extra)
    assert budgets(write(tmp_path, body, settings=settings)) == []


def test_a_policy_on_the_transitions_source_does_not_bound_the_target(tmp_path):
    body = model_step("a", "{step: b, fidelity: full}", context_policy="{enabled: true}")
    body += model_step("b", "end")
    [(code, _, _, message)] = budgets(write(tmp_path, body))
    assert code == "BUDGET_MAY_OVERFLOW" and "step 'b'" in message


def test_a_steps_own_full_warns_at_the_step(tmp_path):
    path = write(tmp_path, model_step("a", "b") + model_step("b", "end", fidelity="full"))
    [(code, _, line, message)] = budgets(path)
    assert (code, line) == ("BUDGET_MAY_OVERFLOW", line_of(path, "- id: b"))
    assert "thread (fidelity full) (the step's fidelity is full" in message


def test_default_fidelity_full_makes_every_step_a_thread(tmp_path):
    path = write(
        tmp_path, model_step("a", "b") + model_step("b", "end"), settings="default_fidelity: full"
    )
    assert [(c, line) for c, _, line, _ in budgets(path)] == [
        ("BUDGET_MAY_OVERFLOW", line_of(path, "- id: a")),
        ("BUDGET_MAY_OVERFLOW", line_of(path, "- id: b")),
    ]


def test_the_largest_preamble_over_the_ways_in_is_counted(tmp_path):
    body = (
        model_step("a", "{step: c, fidelity: summary:high}")
        + model_step("b", "c")  # a short transition: c's own mode, truncate
        + model_step("c", "end", fidelity="truncate")
    )
    # a is the entry; b is reached by nothing but still counted as a way into c.
    found = the_envelopes(write(tmp_path, body))
    assert fidelity_parts(found["c"]) == [
        ("fidelity preamble (summary:high)", 3000 + PREAMBLE_JOINT)
    ]


def test_a_step_arrived_at_only_by_fidelity_transitions_skips_its_own_mode(tmp_path):
    body = model_step("a", "{step: b, fidelity: truncate}") + model_step(
        "b", "end", fidelity="summary:high"
    )
    found = the_envelopes(write(tmp_path, body))
    assert fidelity_parts(found["b"]) == [("fidelity preamble (truncate)", 100 + PREAMBLE_JOINT)]
    # The entry step runs in its own mode when the run starts, whatever leads back to it.
    loop = model_step("a", "b") + model_step("b", "{step: a, fidelity: truncate}")
    assert fidelity_parts(the_envelopes(write(tmp_path, loop, settings="max_steps: 9"))["a"]) == [
        ("fidelity preamble (compact)", 500 + PREAMBLE_JOINT)
    ]


@pytest.mark.parametrize("delta,warned", [(0, False), (-1, True)])
def test_a_preamble_at_the_window_is_clean_one_token_under_warns(tmp_path, delta, warned):
    body = model_step("a", "{step: b, fidelity: summary:medium}") + model_step("b", "end")
    probe = the_envelopes(write(tmp_path, body))
    # b: one system message (its framing), the prompt file, the preamble, the reserved output.
    top = 4 + COUNT(PROMPT) + fid.BUDGETS["summary:medium"] + PREAMBLE_JOINT + 50
    assert probe["b"].bounded_maximum == top
    path = write(tmp_path, body, window=top + delta)
    found = [(c, line) for c, _, line, _ in budgets(path)]
    assert (("BUDGET_MAY_OVERFLOW", line_of(path, "- id: b")) in found) is warned


def test_a_pipeline_validated_clean_at_its_window_runs_with_a_full_preamble(tmp_path):
    # Sixty steps, then a compact model step whose window is exactly its envelope: the
    # history fills the preamble's budget (steps' writes are never shown: docs/fidelity.md)
    # and the call still fits.
    writers = "".join(
        f"- id: w{i}\n  action: set_variables\n  rules:\n"
        f"    - {{set: note_{i}, value: {'word ' * 60!r}}}\n  next: w{i + 1}\n"
        for i in range(60)
    ).replace("next: w60", "next: ask")
    body = writers + model_step("ask", "end")
    probe = the_envelopes(write(tmp_path, body, entry="w0"))["ask"]
    path = write(tmp_path, body, window=probe.bounded_maximum, entry="w0")
    assert budgets(path) == []
    pipeline = load_pipeline(str(path))
    services = Services(settings=pipeline.settings, base_dir=str(tmp_path))
    result = Engine(pipeline, services=services).run({"question": "q"}, run_id="clean")
    assert result.status == "completed", result.error
    [call] = [e for e in result.events if e["type"] == "MODEL_CALL"]
    assert call["fidelity"] == "compact" and call["preamble_tokens"] > 450  # near its 500
    assert call["prompt_tokens"] + 50 <= probe.bounded_maximum


SYSTEMS = [
    PROMPT,
    "/system: answer.",
    "# Heading\nbody",
    "123 numbers first",
    "東京都の注文テーブル",
    "'s a contraction",
    "- a list item",
    "```json\n{}\n```",
]


@pytest.mark.parametrize("tokenizer", ["cl100k_base", "o200k_base"])
def test_the_blank_line_after_a_preamble_costs_at_most_the_joint(tokenizer):
    counter = get_counter(tokenizer)
    assert counter.count("\n\n") == 1 < PREAMBLE_JOINT  # the rest: pieces regrouped at the join
    records = [
        fid.StepRecord(i + 1, f"s{i}", "call_model", f"next -> s{i + 1}", 0.0, 1, [f"note {i}"])
        for i in range(40)
    ]
    variables = {f"v{i}": ("value (x) " * (i + 1)).strip() for i in range(12)}
    view = fid.RunView(
        "p", "Goal.", "r", "s40", 41, records, variables, [], list(variables), (), list(variables)
    )
    worst = 0
    for mode in fid.BUDGETS:
        pre = fid.build_preamble(mode, view, counter)
        for system in SYSTEMS:
            [joined] = fid.with_preamble([{"role": "system", "content": system}], pre.text)
            extra = counter.count(joined["content"]) - pre.tokens - counter.count(system)
            worst = max(worst, extra)
    # The prompt file comes first and the preamble after it, starting "## Run context": here
    # the joint is the blank line alone (it was 2 for o200k_base when the preamble came
    # first and a prompt file started "/system"); the search below bounds any join.
    assert worst <= 2
    # Any text either side: a preamble never ends, a stripped system prompt never starts, with
    # whitespace. A seeded search of random joins.
    rng = random.Random(16)
    pieces = [*"abZ09 /`'\".,:;-_#*()[]{}<>!?\t\n", "東", "é", "😀", "```", "'s", " the", "\\"]
    for _ in range(20_000):
        a = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))).rstrip() or "x"
        b = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))).strip() or "x"
        extra = counter.count(f"{a}\n\n{b}") - counter.count(a) - counter.count(b)
        assert extra <= PREAMBLE_JOINT, (a, b)
