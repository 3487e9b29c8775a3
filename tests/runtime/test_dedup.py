"""runtime/context/dedup.py: the candidate pairs found at once miss no pair an all-pairs
comparison would merge (real code), and dedupe gives what the all-pairs comparison gives."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from rapidfuzz import process
from rapidfuzz.distance import Indel

from runtime.context import dedup
from runtime.context.assembly import Candidate
from runtime.context.dedup import dedupe, signature, similar_pairs

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "realworld"


def _real_texts() -> list[str]:
    """Whitespace-collapsed real texts of many lengths with near-duplicates among them:
    chunks of the real corpora, each also copied with small edits, some twice verbatim."""
    files = sorted(
        p for p in CORPUS.glob("**/*") if p.suffix in (".cs", ".sql", ".md") and p.is_file()
    )
    rng = random.Random(27)
    chunks: list[str] = []
    for f in files:
        text = f.read_text(errors="replace")
        size = rng.choice((60, 200, 800, 2000))
        chunks += [text[i : i + size] for i in range(0, min(len(text), 4000), size)]
    picked = rng.sample(chunks, 160)
    out: list[str] = []
    for t in picked:
        out.append(t)
        edits = rng.choice((0, 1, 3, 10, 40))  # from a verbatim copy to a clearly other text
        copy = list(t)
        for _ in range(edits):
            if copy:
                copy[rng.randrange(len(copy))] = rng.choice("abcxyz{};= ")
        out.append("".join(copy))
    out += picked[:10]  # verbatim copies: the exact pass
    rng.shuffle(out)
    return [" ".join(t.split()) for t in out]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return _real_texts()


@pytest.mark.parametrize("threshold", [0.8, 0.9, 0.93, 0.97])
def test_every_pair_at_or_above_the_threshold_is_a_candidate(texts, threshold):
    scores = process.cdist(texts, texts, scorer=Indel.normalized_similarity)
    want = {(i, j) for i in range(len(texts)) for j in range(i) if scores[i][j] >= threshold}
    near = similar_pairs(texts, threshold)
    got = {(i, j) for i, js in near.items() for j in js}
    assert len(want) > 60  # the fixture has pairs to find (edited and verbatim copies)
    assert want <= got, sorted(want - got)[:5]
    assert all(js == sorted(js) and all(j < i for j in js) for i, js in near.items())
    # and it is a filter: most of the 115k pairs are never compared
    assert len(got) < 0.02 * len(texts) * (len(texts) - 1) / 2


def test_identical_texts_are_paired_and_only_with_earlier_ones():
    a, b = "the same text here", "another text entirely"
    near = similar_pairs([a, b, a, a, b, a], 0.99)
    assert near == {2: [0], 3: [0, 2], 4: [1], 5: [0, 2, 3]}


def test_the_bound_holds_for_long_texts_and_non_ascii():
    # counts beyond 16 bits take the wide path; non-BMP characters are one character each
    base = ("Ωμέγα 🙂 " * 5000) + "tail"
    texts = [base, base.replace("tail", "tall"), "x" * 40000, ("Ωμέγα 🙂 " * 4000)]
    near = similar_pairs(texts, 0.9)
    assert near == {1: [0]}


def _cands(texts: list[str]) -> list[Candidate]:
    out = []
    for i, t in enumerate(texts):
        kind = ("memory", "code", "doc")[i % 3]
        out.append(Candidate(f"i{i}", "s", kind, t, 1.0, f"i{i}", name=f"N{i % 7}"))
    return out


def test_dedupe_is_what_comparing_every_pair_gives(texts, monkeypatch):
    cands = _cands(texts)
    fast = dedupe(cands, 0.9)
    assert len(fast[1]) > 30  # duplicates were found, by text

    def every_pair(ts, threshold):
        return [[j for j in range(len(ts)) if j != i] for i in range(len(ts))]

    monkeypatch.setattr(dedup, "_bounded_pairs", every_pair)
    slow = dedupe(cands, 0.9)
    assert [c.id for c in fast[0]] == [c.id for c in slow[0]]
    assert [(a.id, b.id, why) for a, b, why in fast[1]] == [
        (a.id, b.id, why) for a, b, why in slow[1]
    ]


def test_without_numpy_every_pair_is_compared(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy", None)
    texts = ["alpha beta gamma delta", "alpha beta gamma delta!", "something else"]
    assert similar_pairs(texts, 0.9) == {1: [0], 2: [0, 1]}


def test_signature_collapses_line_whitespace_and_strips_code_comments():
    c = Candidate(
        "x",
        "s",
        "code",
        "int  F()\t{ // why\n    return   1; /* n */\n}\n",
        1.0,
        "x",
    )
    sig = signature(c)
    assert sig.text == "int F()\t{ return 1; }".replace("\t", " ")
    assert sig.lines == {"int F() {", "return 1;"}
    assert sig.numbers == ("1",)


def test_an_item_is_compared_with_the_kept_ones_only():
    a = "abcdefghij" * 10
    b = "".join("Q" if i % 12 == 5 else ch for i, ch in enumerate(a))  # 8 changed: 0.92
    c = "".join("Z" if i % 12 == 9 else ch for i, ch in enumerate(b))  # 8 more: 0.84 to a
    assert Indel.normalized_similarity(b, c) >= 0.9 > Indel.normalized_similarity(a, c)
    cands = [Candidate(f"m{i}", "s", "memory", t, 1.0, f"m{i}") for i, t in enumerate((a, b, c))]
    kept, dropped = dedupe(cands, 0.9)
    assert [k.id for k in kept] == ["m0", "m2"]  # b went; c is not dropped for resembling b
    assert [(x.id, k.id) for x, k, _ in dropped] == [("m1", "m0")]
