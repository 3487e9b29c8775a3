"""runtime eval's arithmetic against values computed by hand."""

from __future__ import annotations

import math

import pytest

from runtime.eval import metrics, report
from runtime.eval.cases import _fact


def test_evidence_recall_counts_entries_not_nodes():
    # Three entries; the second is found through either of its two ids; the third not at all.
    expected = [{"a"}, {"b1", "b2"}, {"c"}]
    assert metrics.evidence_recall(expected, {"a", "b2", "x"}) == pytest.approx(2 / 3)
    assert metrics.evidence_recall(expected, {"x"}) == 0.0
    assert metrics.evidence_recall(expected, {"a", "b1", "c"}) == 1.0
    assert metrics.evidence_recall([], {"a"}) is None


def test_positions_are_fractions_of_the_blocks_shown():
    assert metrics.positions(["a", "b", "c", "d", "e"], {"a"}) == [0.0]
    assert metrics.positions(["a", "b", "c", "d", "e"], {"c"}) == [0.5]
    assert metrics.positions(["a", "b", "c", "d", "e"], {"e", "d"}) == [0.75, 1.0]
    assert metrics.positions(["a"], {"a"}) == [0.0]
    assert metrics.positions([], {"a"}) == []


def test_fact_coverage_strings_any_case_and_regexes():
    facts = [_fact("MaxAttempts"), _fact("/retr(y|ies)/i"), _fact("/^exact$/"), _fact("absent")]
    answer = "It RETRIES: maxattempts is 3."
    # maxattempts (any case) and the regex with i; ^exact$ and absent are not there.
    assert metrics.fact_coverage(facts, answer) == 0.5
    assert metrics.fact_coverage(facts[2:3], "exact") == 1.0
    assert metrics.fact_coverage([_fact("/retr(y|ies)/")], "RETRIES") == 0.0  # no i flag
    assert metrics.fact_coverage([], "x") is None


def test_answer_contains_needs_every_string_and_tools_share():
    assert (
        metrics.contains_all(["usp_PlaceOrder", "orders"], "dbo.USP_PLACEORDER writes Orders")
        == 1.0
    )
    assert metrics.contains_all(["usp_PlaceOrder", "lines"], "dbo.usp_PlaceOrder") == 0.0
    assert metrics.contains_all([], "x") is None
    assert metrics.tools_used(["rehydrate", "search"], ["rehydrate", "rehydrate"]) == 0.5
    assert metrics.tools_used([], ["x"]) is None


def test_found_rank_follows_children_and_mrr_inputs():
    hits = [{"id": "x"}, {"id": "y", "children": ["b"]}, {"id": "a"}]
    assert metrics.found_rank(hits, [{"a"}]) == 3
    assert metrics.found_rank(hits, [{"b"}]) == 2  # collapsed under the second hit
    assert metrics.found_rank(hits, [{"z"}]) is None


def test_ndcg_by_hand():
    hits = [{"id": "x"}, {"id": "a"}, {"id": "y"}, {"id": "b"}]
    # gains at ranks 2 and 4: 1/log2(3) + 1/log2(5); ideal: ranks 1 and 2: 1 + 1/log2(3)
    want = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert metrics.ndcg(hits, [{"a"}, {"b"}], 10) == pytest.approx(want)
    # cut at k=2: only rank 2 counts
    assert metrics.ndcg(hits, [{"a"}, {"b"}], 2) == pytest.approx(
        (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    )
    # an entry is credited once, however many of its ids appear
    assert metrics.ndcg([{"id": "a"}, {"id": "a2"}], [{"a", "a2"}], 10) == 1.0


def test_interval_is_students_t():
    values = [0.5, 0.7, 0.9]
    lo, hi = metrics.interval(values)
    # mean 0.7, sd 0.2, t(2 df) 4.303: 0.7 -+ 4.303 * 0.2 / sqrt(3)
    half = 4.303 * 0.2 / math.sqrt(3)
    assert (lo, hi) == (pytest.approx(0.7 - half), pytest.approx(0.7 + half))
    assert metrics.interval([0.5]) is None
    assert metrics.interval([1.0, 1.0]) == (1.0, 1.0)


def _run(case, repeat, recall, size=None, position=None):
    return {
        "case": case, "repeat": repeat, "error": None, "size": size, "size_unit": "k",
        "position": position, "evidence_recall": recall, "fact_coverage": None,
        "answer_contains": None, "tools_used": None, "within_max_tokens": None,
        "tokens_in": 10, "tokens_out": 2, "latency_s": 0.1, "steps": 3, "model_calls": 1,
    }  # fmt: skip


def test_aggregate_interval_is_over_repeat_means():
    runs = [_run("a", 0, 1.0), _run("b", 0, 0.0), _run("a", 1, 1.0), _run("b", 1, 1.0)]
    s = report.summarise(runs)
    assert s["evidence_recall"]["mean"] == 0.75
    # repeat means 0.5 and 1.0: mean 0.75, sd 0.353553, t(1 df) 12.706
    half = 12.706 * math.sqrt(0.125) / math.sqrt(2)
    assert s["evidence_recall"]["ci95"] == [round(0.75 - half, 6), round(0.75 + half, 6)]
    assert s["fact_coverage"]["mean"] is None


def test_curves_average_by_size_and_position():
    runs = [
        _run("a", 0, 1.0, 2, "start"),
        _run("a", 0, 0.0, 8, "end"),
        _run("b", 0, 1.0, 8, "start"),
        _run("b", 0, 0.5, 2, "middle"),
    ]
    c = report.curves(runs)
    assert c["context_rot"]["points"]["evidence_recall"] == [[2, 0.75], [8, 0.5]]
    assert c["position"]["evidence_recall"] == [["start", 1.0], ["middle", 0.5], ["end", 0.0]]
