"""Canonical JSON: the orjson path writes exactly the bytes json writes (runtime/context/canonical.py).

Differential: every value either encodes to the reference's bytes through the fast path or
is refused the same way. Packs and ledger entries hashed with and without the `fast` extra
must match, or a run recorded on one machine would not verify, nor replay to the same pack
ids, on another.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.context import canonical

orjson = pytest.importorskip("orjson", reason="the `fast` extra (orjson) is not installed")

FORMS: list[tuple[str, Callable[[Any], bytes], Callable[[Any], bytes]]] = [
    ("sorted_utf8", canonical.sorted_utf8, canonical.reference_sorted_utf8),
    ("sorted_ascii", canonical.sorted_ascii, canonical.reference_sorted_ascii),
    ("compact_utf8", canonical.compact_utf8, canonical.reference_compact_utf8),
]

# Floats where the two encoders write different text, and ones where they agree.
AWKWARD_FLOATS = [
    1e-5,
    -1e-5,
    2.5e-6,
    1e-7,
    5e-324,
    9.999e-5,
    1e-4,
    0.0001234,
    float("nan"),
    float("inf"),
    float("-inf"),
    -0.0,
    0.0,
    1e16,
    1e22,
    1.5e300,
    123456789012345680.0,
    0.1,
    12345.678,
]


def _outcome(fn: Callable[[Any], bytes], value: Any) -> bytes | str:
    try:
        return fn(value)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        return type(exc).__name__


def _check(value: Any) -> None:
    for name, fast, ref in FORMS:
        assert _outcome(fast, value) == _outcome(ref, value), (name, value)


@pytest.fixture(autouse=True)
def _fast_on() -> Iterator[None]:
    canonical.use_fast(True)
    yield
    canonical.use_fast(True)


@pytest.mark.parametrize("number", AWKWARD_FLOATS, ids=repr)
def test_awkward_floats_give_the_reference_bytes(number: float) -> None:
    # A float alone, in a pack-like record, and in a list of flat records (the messages
    # shape, which skips the read-back: a float must not pass as flat).
    for value in (
        number,
        {"score": number, "id": "n1"},
        [{"role": "user", "score": number}],
        {"items": [{"evidence": {"score": number}, "id": "x"}]},
    ):
        _check(value)


def test_tiny_floats_and_nan_really_differ_in_orjson() -> None:
    # What the guards exist for: without them the fast path would write these bytes.
    assert orjson.dumps(1e-5) != canonical.reference_sorted_utf8(1e-5)
    assert orjson.dumps(1e-7) != canonical.reference_sorted_utf8(1e-7)
    assert orjson.dumps(float("nan")) != canonical.reference_sorted_utf8(float("nan"))
    assert orjson.dumps("é") != canonical.reference_sorted_ascii("é")


def test_every_code_point_in_keys_and_values() -> None:
    chars = [chr(c) for c in range(sys.maxunicode + 1)]
    # 64 code points per string keeps the value small and covers every one of them.
    for at in range(0, len(chars), 4096):
        block = chars[at : at + 4096]
        texts = ["".join(block[i : i + 64]) for i in range(0, len(block), 64)]
        _check([{"content": t, "role": t[:3]} for t in texts])
        _check({t: i for i, t in enumerate(texts)})
        _check({"items": texts})


def test_lone_surrogates_non_string_keys_big_ints_and_other_types() -> None:
    for value in (
        "\ud800x",
        [{"content": "a\udfffb"}],
        {1: "a"},
        {True: 1},
        {None: 1},
        [{"n": 1 << 70}],
        {"n": -(1 << 64)},
        {"t": (1, 2)},
        [{"t": (1, "a")}],
        {"s": {1, 2}},
        {"b": b"x"},
        [[1, 2]],
        [{"a": [1]}],
        [{"a": {"b": 1}}],
        [],
        [{}],
        {"": None, "a\x00": "\x00\x1f\x7f\u2028"},
    ):
        _check(value)


def _json_values() -> st.SearchStrategy[Any]:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(1 << 70), max_value=1 << 70)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.sampled_from(AWKWARD_FLOATS)
        | st.text(max_size=12)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=5)
            | st.dictionaries(st.text(max_size=6), inner, max_size=5)
            | st.lists(st.dictionaries(st.text(max_size=6), scalars, max_size=4), max_size=4)
        ),
        max_leaves=30,
    )


@settings(max_examples=400, deadline=None)
@given(_json_values())
def test_generated_values_encode_alike(value: Any) -> None:
    _check(value)


def test_a_flat_record_list_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # The messages shape is what a model call's prompt hash encodes (tens of KB): it must
    # not fall back to json silently (that was the cost the fast path removes).
    def refuse(value: Any) -> bytes:
        raise AssertionError("json used")

    for name in ("reference_sorted_utf8", "reference_sorted_ascii", "reference_compact_utf8"):
        monkeypatch.setattr(canonical, name, refuse)
    messages = [{"role": "system", "content": "x" * 1000}, {"role": "user", "content": "q"}]
    assert canonical.compact_utf8(messages) == b'[{"role":"system","content":"' + b"x" * 1000 + (
        b'"},{"role":"user","content":"q"}]'
    )
    assert canonical.sorted_ascii(messages).startswith(b'[{"content":"xxx')
    assert canonical.sorted_utf8({"a": [{"b": 0.5, "c": None}]}) == b'{"a":[{"b":0.5,"c":null}]}'


def test_without_orjson_the_reference_is_used() -> None:
    canonical.use_fast(False)
    value = {"b": 1e-5, "a": [float("nan"), "é"]}
    assert canonical.sorted_utf8(value) == canonical.reference_sorted_utf8(value)
    assert canonical.sorted_ascii(value) == b'{"a":[NaN,"\\u00e9"],"b":1e-05}'


def test_a_pack_is_the_same_bytes_with_and_without_orjson() -> None:
    # Scores as a search may give them (tiny, NaN) and non-ASCII text: the same body, so the
    # same pack id, whichever encoder ran.
    from runtime.context import packs

    def build() -> tuple[bytes, str]:
        b = packs.PackBuilder(run_id="r", step_id="s", model="m", prompt_budget=1000)
        for i, score in enumerate([0.5, 1e-5, float("nan"), 3e-9, 0.25]):
            b.add(
                "knowledge",
                10,
                item={"id": f"n{i}é", "score": score, "evidence": {"score": score}},
            )
        b.drop("x", "budget_skip", 3, note="ünïcode")
        pack = b.finish([{"role": "user", "content": "¿qué? \u2028"}], 50)
        return b.body, pack["prompt_hash"]

    fast = build()
    canonical.use_fast(False)
    assert build() == fast


@pytest.mark.parametrize("text", ["\x7f", "a\x7fb", "\x1f\x7f"])
def test_del_alone_gives_the_reference_bytes(text: str) -> None:
    # (in the code-point test DEL shares a value with non-ASCII text, which sends the whole
    # value to json: alone, json's ASCII form escapes it and orjson does not)
    _check(text)
    _check([{"content": text, "role": "user"}])
    _check({"k": text})
