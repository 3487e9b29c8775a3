"""token_margin: when the tokenizer is not the model's, the prompt budget keeps a margin.

A model entry's token_margin m makes call_model's window check (and the policy's budget)
hold counted * (1 + m) <= window - reserve. Each case finds the prompt's exact count from
a first run with room to spare (checked against the messages sent), then sets the window
one under, at and one over the smallest that holds it with the margin.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import runtime
from runtime.context.tokens import get_counter

SYSTEM = "You answer from evidence."
QUESTION = "Which procedure writes the Orders table, and who calls it?"
END = {"id": "end", "action": "finalize", "source": "q"}
OVERHEAD = 4  # chat framing tokens per message (call_model's MESSAGE_OVERHEAD)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("margin")
    (folder / "prompts").mkdir()
    (folder / "prompts" / "sys.md").write_text(SYSTEM + "\n")
    return folder


def call(
    root: Path,
    window: int,
    *,
    margin: float | None = None,
    policy: Any = None,
    notes: str = "",
    **step: Any,
):
    entry: dict[str, Any] = {"provider": "extractive", "context_window": window}
    if margin is not None:
        entry["token_margin"] = margin
    settings: dict[str, Any] = {"entry_step_id": "m", "models": {"m1": entry}}
    if policy is not None:
        settings["context_policy"] = policy
    data = {
        "settings": settings,
        "steps": [
            {
                "id": "m",
                "action": "call_model",
                "prompt_key": "sys",
                "model": "m1",
                "next": "end",
                "user_parts": {"q": {"source": "question"}},
                "max_output_tokens": 40,
                **step,
            },
            END,
        ],
    }
    pipeline = runtime.Pipeline.from_dict(data, file=str(root / "p.yaml"))
    services = runtime.Services(settings=settings, base_dir=str(root))
    return runtime.Runner(pipeline, services=services).run(
        {"q": notes or "x", "question": QUESTION}, run_id="t"
    )


def event(result: Any, kind: str) -> dict[str, Any]:
    [found] = [e for e in result.events if e["type"] == kind]
    return found


@pytest.fixture(scope="module")
def prompt(root) -> int:
    """The exact prompt count, from a run with room to spare, checked against what was sent."""
    r = call(root, 100_000)
    sent = event(r, "MODEL_CALL")["messages"]
    counted = sum(get_counter().count(m["content"]) + OVERHEAD for m in sent)
    assert event(r, "CONTEXT_BUDGET_DECISION")["prompt_tokens"] == counted
    return counted


def smallest_window(prompt: int, margin: float, reserve: int = 40) -> int:
    """The smallest window with prompt * (1 + margin) <= window - reserve (exact decimals)."""
    return reserve + math.ceil(prompt * (1 + Fraction(str(margin))))


@pytest.mark.parametrize("margin", [0.15, 0.3, 1])
@pytest.mark.parametrize("delta,fits", [(-1, False), (0, True), (1, True)])
def test_the_margin_shrinks_the_window_check_exactly_at_its_limit(
    root, prompt, margin, delta, fits
):
    window = smallest_window(prompt, margin) + delta
    assert prompt + 40 <= window - 1  # without the margin every one of these would fit
    r = call(root, window, margin=margin)
    decision = event(r, "CONTEXT_BUDGET_DECISION")
    assert (decision["token_margin"], decision["tokenizer"]) == (margin, "cl100k_base")
    assert decision["budget"] == math.floor((window - 40) / (1 + Fraction(str(margin))))
    if fits:
        assert r.status == "completed"
    else:
        assert (r.error.code, r.error.step_id) == ("CONTEXT_OVERFLOW", "m")
        assert [e for e in r.events if e["type"] == "MODEL_CALL"] == []


def test_no_margin_is_the_window_less_the_reserve(root, prompt):
    assert call(root, prompt + 40).status == "completed"
    assert call(root, prompt + 40, margin=0).status == "completed"
    assert call(root, prompt + 39).error.code == "CONTEXT_OVERFLOW"


@pytest.mark.parametrize("delta,fits", [(-1, False), (0, True)])
def test_the_margin_holds_in_a_dry_run_of_the_policy(root, delta, fits):
    """A dry run sends the prompt as assembled (over its prompt_budget, it would summarise
    the notes): the window check it still makes keeps the margin."""
    policy = {"dry_run": True, "emergency_floor": 0, "prompt_budget": 150, "summary_tokens": 16}
    parts = {"q": {"source": "question"}, "n": {"source": "q", "template": "Notes:\n{}"}}
    notes = "The order total is computed in the basket service, line by line.\n" * 30
    probe = call(root, 100_000, policy=policy, user_parts=parts, notes=notes)
    assert event(probe, "CONTEXT_BUDGET_DECISION")["decision"] == "needs_summary"
    sent = event(probe, "CONTEXT_BUDGET_DECISION")["sent_tokens"]
    window = smallest_window(sent, 0.2) + delta
    r = call(root, window, margin=0.2, policy=policy, user_parts=parts, notes=notes)
    assert (r.status == "completed") is fits
    if not fits:
        assert r.error.code == "CONTEXT_OVERFLOW" and "token_margin 0.2" in r.error.message


def test_the_margin_shrinks_the_policys_prompt_budget(root, prompt):
    window = smallest_window(prompt, 0.25)
    r = call(root, window, margin=0.25, policy={"emergency_floor": 0})
    assert event(r, "CONTEXT_BUDGET_DECISION")["budget"] == prompt
    assert r.status == "completed"
    r = call(root, window - 1, margin=0.25, policy={"emergency_floor": 0})
    assert event(r, "CONTEXT_BUDGET_DECISION")["budget"] == prompt - 1
    assert r.error.code == "CONTEXT_OVERFLOW"
