"""The scrubber: a secret in any form it knows is replaced, in text and in a stream of pieces.

The forms (runtime/net/secrets.py): each character literal, JSON-escaped (any hex case,
surrogate pairs, `\\/`, escaped again any number of times), percent-encoded or an HTML
reference; the whole key in base64 (two alphabets, three alignments) or hex.
"""

from __future__ import annotations

import base64
import json
import random

import pytest

from runtime.net.secrets import REDACTED, Scrubber

KEY = "sk-proj/Echo+7f3a9c21e4/x"
WIDE = "sk-emoji-\U0001f600-5d0b7e2a1"  # JSON writes the emoji as a surrogate pair


def _json_escape(c: str, rng: random.Random) -> str:
    units = c.encode("utf-16-be")
    hexes = [units[i : i + 2].hex() for i in range(0, len(units), 2)]
    slashes = "\\" * rng.choice([1, 1, 2, 4])  # escaped again: every backslash doubles
    return "".join(
        slashes + "u" + "".join(d.upper() if rng.random() < 0.5 else d for d in h) for h in hexes
    )


def _one_char(c: str, rng: random.Random) -> str:
    """c written in one of the forms, chosen at random."""
    kind = rng.choice(["literal", "json", "json", "percent", "html", "html-hex", "short"])
    if kind == "json":
        return _json_escape(c, rng)
    if kind == "percent":
        return "".join(f"%{b:02X}" if rng.random() < 0.5 else f"%{b:02x}" for b in c.encode())
    if kind == "html":
        return f"&#{ord(c)};"
    if kind == "html-hex":
        return f"&#{rng.choice('xX')}{ord(c):x};"
    if kind == "short" and c == "/":
        return "\\" * rng.choice([1, 2]) + "/"
    return c


def written(key: str, rng: random.Random) -> str:
    return "".join(_one_char(c, rng) for c in key)


def _around(rng: random.Random) -> str:
    return "".join(rng.choice('ab \\%&#;/u0\n"') for _ in range(rng.randrange(0, 12)))


@pytest.mark.parametrize("key", [KEY, WIDE])
def test_every_mix_of_character_forms_is_replaced_whole(key):
    rng = random.Random(25)
    scrub = Scrubber([key])
    for _ in range(300):
        before, form, after = _around(rng), written(key, rng), _around(rng)
        # Backslashes just before an escape count as its own (an escape escaped again).
        lead = before.rstrip("\\") if form.startswith("\\") else before
        assert scrub.text(before + form + after) == lead + REDACTED + after, form


@pytest.mark.parametrize(
    "encoded",
    [
        *(base64.b64encode(b"xy"[:n] + KEY.encode() + b"!").decode() for n in range(3)),
        *(base64.urlsafe_b64encode(b"xy"[:n] + KEY.encode()).decode() for n in range(3)),
        KEY.encode().hex(),
        KEY.encode().hex().upper(),
        json.dumps(json.dumps(json.dumps(KEY))),
        repr(json.dumps(KEY.replace("/", "\\/"))),
    ],
)
def test_whole_encodings_and_nested_escapes_are_replaced(encoded):
    scrub = Scrubber([KEY])
    assert scrub.found(encoded)
    assert REDACTED in scrub.text(encoded) and not scrub.found(scrub.text(encoded))


def test_text_without_a_secret_is_left_alone():
    rng = random.Random(7)
    scrub = Scrubber([KEY, WIDE])
    near = [KEY[:-1], KEY[1:], KEY.upper(), KEY.replace("-", " "), "\\u0073k-proj", "%73%6B"]
    for _ in range(300):
        text = _around(rng) + rng.choice(near) + _around(rng)
        assert scrub.text(text) == text


def test_short_values_are_not_secrets():
    assert not Scrubber(["EMPTY", "ollama", ""])
    assert Scrubber(["EMPTY"]).text("EMPTY \\u0045MPTY") == "EMPTY \\u0045MPTY"


@pytest.mark.parametrize("key", [KEY, WIDE])
def test_a_stream_never_passes_on_a_piece_of_a_secret_in_any_form(key):
    """Whatever the cut points, what was passed on so far is a beginning of the scrubbed
    whole: no part of a secret left before its end arrived. Joined, it is the whole."""
    rng = random.Random(11)
    scrub = Scrubber([key])
    for _ in range(200):
        whole = _around(rng) + written(key, rng) + _around(rng) + written(key[:9], rng)
        expected = scrub.text(whole)
        sent: list[str] = []
        stream = scrub.stream(sent.append)
        cuts = sorted(rng.sample(range(1, len(whole)), rng.randrange(1, 8)))
        for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True):
            stream.feed(whole[a:b])
            assert expected.startswith("".join(sent)), (whole, sent)
        stream.flush()
        assert "".join(sent) == expected


def test_data_scrubs_keys_and_values_at_any_depth():
    scrub = Scrubber([KEY])
    escaped = json.dumps(KEY).strip('"').replace("s", "\\u0073", 1)
    data = {escaped: [{"a": f"x {KEY} y"}, 3, None], "b": (KEY,)}
    assert scrub.data(data) == {REDACTED: [{"a": f"x {REDACTED} y"}, 3, None], "b": [REDACTED]}
