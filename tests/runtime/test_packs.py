"""runtime/context/packs.py on its own: budget verdicts at their edges, the budget check,
the body and id, the summary form, coverage."""

from __future__ import annotations

import json

import pytest

from runtime.context import packs


def pack_with(tokens: int, fraction: float, budget: int = 1000) -> dict:
    b = packs.PackBuilder(
        run_id="r",
        step_id="s",
        model="m",
        prompt_budget=budget,
        pack_budget=({"task": fraction}, "step"),
    )
    b.add("task", tokens)
    return b.finish([{"role": "user", "content": "x"}], tokens)


@pytest.mark.parametrize(
    ("tokens", "verdict"),
    [(100, "ok"), (105, "ok"), (106, "warning"), (110, "warning"), (111, "error")],
)
def test_a_section_is_fine_to_5_percent_over_a_warning_to_10_then_an_error(tokens, verdict):
    [a] = pack_with(tokens, 0.1)["adherence"]
    assert (a["section"], a["budget"], a["verdict"]) == ("task", 100, verdict)


def test_a_zero_budget_with_tokens_is_an_error_and_unbudgeted_sections_have_no_verdict():
    pack = pack_with(3, 0.0)
    assert [(a["section"], a["verdict"]) for a in pack["adherence"]] == [("task", "error")]
    assert pack_with(0, 0.0)["adherence"][0]["verdict"] == "ok"


def test_fractions_may_sum_to_one_not_more():
    assert list(packs.budget_problems({"task": 0.5, "knowledge": 0.4, "safety": 0.1})) == []
    [(message, path)] = packs.budget_problems({"task": 0.5, "knowledge": 0.6})
    assert "sum to 1.1" in message and "task 0.5 + knowledge 0.6" in message and path == ()
    assert list(packs.budget_problems("not a mapping")) == []


def test_the_step_budget_wins_over_the_settings():
    step = {"pack_budget": {"task": 0.2}}
    settings = {"pack_budget": {"knowledge": 0.5}}
    assert packs.resolve_budget(settings, step) == ({"task": 0.2}, "step")
    assert packs.resolve_budget(settings, {}) == ({"knowledge": 0.5}, "settings")
    assert packs.resolve_budget({}, {}) is None


def test_the_id_is_the_hash_of_the_body_which_leaves_out_the_run():
    one = pack_with(10, 0.5)
    b = packs.PackBuilder(
        run_id="other",
        step_id="s",
        model="m",
        prompt_budget=1000,
        pack_budget=({"task": 0.5}, "step"),
    )
    b.add("task", 10)
    two = b.finish([{"role": "user", "content": "x"}], 10)
    assert one["pack_id"] == two["pack_id"] == packs.pack_id_of(packs.canonical_bytes(one))
    body = json.loads(packs.canonical_bytes(one))
    assert "run_id" not in body and "pack_id" not in body
    assert pack_with(11, 0.5)["pack_id"] != one["pack_id"]


def test_the_summary_is_small_and_stable():
    b = packs.PackBuilder(run_id="r", step_id="s", model="m", prompt_budget=None)
    b.add("knowledge", 40, item={"id": "n1", "source": "search"})
    b.drop("n2", "budget_skip", 30)
    pack = b.finish([{"role": "user", "content": "x"}], 50)
    assert packs.summary(pack) == {
        "pack_id": pack["pack_id"],
        "step_id": "s",
        "model": "m",
        "prompt_hash": pack["prompt_hash"],
        "prompt_tokens": 50,
        "sections": dict.fromkeys(packs.SECTIONS, 0) | {"knowledge": 40},
        "items": 1,
        "drops": 1,
        "coverage": 1.0,
    }


def test_coverage_is_what_the_drops_account_for_of_what_the_call_removed():
    b = packs.PackBuilder(run_id="r", step_id="s", model="m", prompt_budget=None)
    b.removed_by_call(1000, 940)
    pack = b.finish([], 0)
    assert pack["drops"]["coverage"] == 0.94
    with pytest.raises(packs.PackCoverageError, match="accounts for 940 of 1000"):
        packs.assert_coverage(pack)
    b = packs.PackBuilder(run_id="r", step_id="s", model="m", prompt_budget=None)
    b.removed_by_call(1000, 950)
    packs.assert_coverage(b.finish([], 0))
