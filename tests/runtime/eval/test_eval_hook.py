"""The evidence hook: distractors added, k cut and padded, evidence placed."""

from __future__ import annotations

import pytest

from runtime.context.evidence_hook import EvidencePlan, place

IDS = ["r1", "E1", "r2", "r3", "E2", "r4"]
EV = frozenset({"E1", "E2"})


def test_place_start_middle_end():
    assert place(IDS, EV, "start", 0) == ["E1", "E2", "r1", "r2", "r3", "r4"]
    assert place(IDS, EV, "end", 0) == ["r1", "r2", "r3", "r4", "E1", "E2"]
    assert place(IDS, EV, "middle", 0) == ["r1", "r2", "E1", "E2", "r3", "r4"]
    # odd number of others: one more after the evidence
    assert place(["a", "E1", "b", "c"], EV, "middle", 0) == ["a", "E1", "b", "c"]
    assert place(IDS, EV, None, 0) == IDS


def test_shuffled_depends_on_the_seed_only():
    one = place(IDS, EV, "shuffled", 1)
    assert sorted(one) == sorted(IDS)
    assert place(IDS, EV, "shuffled", 1) == one
    assert any(place(IDS, EV, "shuffled", s) != one for s in range(2, 6))


def test_unknown_position_is_refused():
    with pytest.raises(ValueError):
        place(IDS, EV, "top", 0)


def test_candidates_add_distractors_without_duplicates():
    plan = EvidencePlan(evidence=EV, distractors=("d1", "r1", "d2"))
    assert plan.candidates("fetch", ["r1", "E1"]) == ["r1", "E1", "d1", "d2"]


def test_k_cuts_the_pipelines_list_or_pads_it():
    plan = EvidencePlan(evidence=EV, distractors=("d1",), extra=("x1", "x2", "x3"), k=5)
    assert plan.candidates("fetch", ["r1", "E1"]) == ["r1", "E1", "d1", "x1", "x2"]
    # cut: the evidence found and the distractor first, then the pipeline's others in order
    plan = EvidencePlan(evidence=EV, distractors=("d1",), k=3)
    assert plan.candidates("fetch", ["r1", "E1", "r2", "r3"]) == ["r1", "E1", "d1"]
    plan = EvidencePlan(evidence=EV, distractors=("d1", "d2"), k=2)
    assert plan.candidates("fetch", ["r1", "r2", "E2"]) == ["E2", "d1"]
    # evidence the pipeline did not find is never added
    plan = EvidencePlan(evidence=EV, extra=("x1",), k=3)
    assert plan.candidates("fetch", ["r1"]) == ["r1", "x1"]


def test_tokens_sets_only_a_token_budget():
    plan = EvidencePlan(tokens=900)
    assert plan.budget("fetch", "tokens", 3000) == 900
    assert plan.budget("fetch", "chars", 3000) == 3000
    assert EvidencePlan().budget("fetch", "tokens", 3000) == 3000
