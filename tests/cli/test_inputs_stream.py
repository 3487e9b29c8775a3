"""The streamed `--inputs` reader (runtime/cli/_json_stream.py) accepts exactly what
json.loads accepts, with the same values, at every chunk size; and it holds a large string
input about once while reading it (issue 25 item 9)."""

from __future__ import annotations

import io
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.cli import _json_stream as js
from runtime.cli._inputs import parse_inputs
from runtime.errors import InputError

LIMIT = 1 << 30


def read(text: str | bytes, chunk: int = js.CHUNK, depth: int = 64):
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    old = js.CHUNK
    js.CHUNK = chunk
    try:
        data, used = js.read_object(io.BytesIO(raw), LIMIT, depth)
    finally:
        js.CHUNK = old
    assert used == len(raw)
    return data


def same(a, b) -> bool:
    """Equal as json.loads results (NaN equal to itself)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


CASES = [
    "{}",
    " {\n} ",
    '{"a": "b"}',
    '{"a":"x\\ny\\t\\"q\\"\\\\ \\/ \\b\\f\\r"}',
    '{"a": "\\u00e9\\u4e2d\\ud83d\\ude00 \\ud800 \\udc00x \\ud800\\u0041"}',
    '{"a": "\\\\ud83d\\ude00 \\\\\\ud83d\\ude00 \\\\\\\\ud83d"}',
    '{"a": "\\ud83d\\ud83d\\ude00\\ud83d"}',
    '{"a": 1, "b": -2.5e10, "c": true, "d": false, "e": null, "f": NaN, "g": -Infinity}',
    '{"a": [1, {"b": "]}\\"["}, []], "c": {"d": {"e": "}"}}}',
    '{"a": 1, "a": 2, "b": 3}',
    '{"\u00e9\U0001f600": "\u4e2d\u00e9 plain \U0001f600"}',
    "\ufeff{}",
    # refused by json.loads, so by the reader
    '{"a": "b",}',
    '{"a" "b"}',
    '{"a": "b" "c": 1}',
    "{a: 1}",
    '{"a": "unterminated',
    '{"a": "x\\qy"}',
    '{"a": "\\u12"}',
    '{"a": "\\u12G4"}',
    '{"a": "raw\ncontrol"}',
    '{"a": 01}',
    '{"a": [1, 2}',
    '{"a": }',
    '{"a": tru}',
    '{"a": 1} x',
    '{"a": 1}}',
    "{",
    '{"a"',
    '{"a":',
    '{"a": 1,',
]


@pytest.mark.parametrize("text", CASES)
@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 1 << 20])
def test_the_reader_accepts_what_json_loads_accepts(text, chunk):
    try:
        expected = json.loads(text)
    except ValueError:
        expected = ValueError
    if text.startswith("\ufeff"):  # json.loads refuses a BOM; the reader sees no `{` first
        assert isinstance(read(text, chunk), str)
        return
    if expected is ValueError:
        with pytest.raises(js.JsonStreamError):
            read(text, chunk)
    else:
        assert same(read(text, chunk), expected)


def test_error_positions_are_json_loads_positions():
    for text in ('{"a": 1,\n  "b" 2}', '{"a": "b"} x', "{\n\n  a: 1}"):
        with pytest.raises(ValueError) as want:
            json.loads(text)
        for chunk in (1, 4, 1 << 20):
            with pytest.raises(js.JsonStreamError) as got:
                read(text, chunk)
            assert str(got.value) == str(want.value), (text, chunk)


def test_a_bad_byte_is_named_with_its_offset_and_line():
    raw = b'{"a":\n "ok \xc3\xa9",\n "b": "x\xffy"}'
    for chunk in (1, 3, 1 << 20):
        with pytest.raises(js.NotUtf8) as got:
            read(raw, chunk)
        assert (got.value.offset, got.value.line, got.value.byte) == (raw.index(b"\xff"), 3, 0xFF)
    with pytest.raises(js.NotUtf8) as cut:  # a character cut off by the end of the file
        read(b'{"a": "\xe4\xb8', 2)
    assert cut.value.offset == 7


def test_depth_is_counted_from_the_top_level_object():
    assert read('{"a": [[1]]}', depth=3) == {"a": [[1]]}
    for text, depth in (('{"a": [[1]]}', 2), ("{}", 0), ('{"a": [[[[', 3)):
        with pytest.raises(js.TooDeep):
            read(text, depth=depth)
    assert read('{"a": "[[[[[[["}', depth=1) == {"a": "[[[[[[["}  # brackets in strings


def test_a_pipe_stops_at_the_limit():
    class Endless(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, b):
            b[: len(b)] = b" " * len(b)
            return len(b)

    with pytest.raises(js.TooLarge):
        js.read_object(Endless(), 1000, 64)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.text(max_size=8), json_values, max_size=5),
    st.booleans(),
    st.sampled_from([None, 1, 2]),
    st.integers(1, 9),
)
def test_any_object_json_dumps_writes_reads_back(obj, ascii_only, indent, chunk):
    text = json.dumps(obj, ensure_ascii=ascii_only, indent=indent)
    assert same(read(text, chunk), json.loads(text))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='{}[]":,\\ u0a1d8-.eE\n\ttrue', max_size=30), st.integers(1, 4))
def test_fuzzed_text_never_gives_another_answer(text, chunk):
    """Garbage: the reader and json.loads agree on accept or refuse, and on the value."""
    try:
        expected = json.loads(text)
    except (ValueError, RecursionError):
        expected = ValueError
    try:
        got = read(text, chunk)
    except (js.JsonStreamError, js.TooDeep):
        got = ValueError
    if isinstance(got, str):  # not an object: handed back for json.loads
        assert not isinstance(expected, dict)
    elif expected is ValueError or got is ValueError:
        assert expected is got is ValueError or not isinstance(expected, dict), (text, got)
    else:
        assert same(got, expected)


def test_parse_inputs_reads_a_file_and_names_its_problems(tmp_path):
    good = tmp_path / "in.json"
    good.write_text('{"question": "q", "n": [1, 2], "doc": "' + "x\\n" * 1000 + '"}')
    values = parse_inputs((), str(good), max_bytes=10_000)
    assert values == {"question": "q", "n": [1, 2], "doc": "x\n" * 1000}
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(InputError) as e:
        parse_inputs((), str(bad))
    assert e.value.code == "INPUT_INVALID_TEXT" and "byte 0xFF at byte 7 (line 1)" in str(e.value)
    lone = tmp_path / "lone.json"
    lone.write_text('{"a": "x\\ud800"}')
    with pytest.raises(InputError) as e:
        parse_inputs((), str(lone))
    assert e.value.code == "INPUT_INVALID_TEXT" and "U+D800" in str(e.value)
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' + "[" * 70 + "]" * 70 + "}")
    with pytest.raises(InputError) as e:
        parse_inputs((), str(deep))
    assert e.value.code == "INPUT_TOO_DEEP"
    big = tmp_path / "big.json"
    big.write_text('{"a": "' + "x" * 200 + '"}')
    with pytest.raises(InputError) as e:
        parse_inputs((), str(big), max_bytes=100)
    assert e.value.code == "INPUT_TOO_LARGE"


def test_a_large_string_input_is_held_about_once_while_read(tmp_path):
    """tracemalloc's peak while reading a 20 MB string value: the value and a chunk or
    two, not the file's text beside it (json.loads: 2x; decoding the bytes first: 3x)."""
    import tracemalloc

    size = 20_000_000
    path = tmp_path / "big.json"
    with open(path, "w") as fh:
        fh.write('{"question": "q", "doc": "')
        for _ in range(size // 100_000):
            fh.write("word\\n line " * 8_333 + "abcd")
        fh.write('"}')
    tracemalloc.start()
    try:
        values = parse_inputs((), str(path), max_bytes=size * 2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    held = len(values["doc"])
    assert held > size * 0.8
    assert peak < held * 1.25, (peak, held)


def test_the_streamed_limit_is_exact():
    raw = b'{"a": "' + b"x" * 5000 + b'"}'
    assert js.read_object(io.BytesIO(raw), len(raw), 64)[0] == {"a": "x" * 5000}
    with pytest.raises(js.TooLarge):
        js.read_object(io.BytesIO(raw), len(raw) - 1, 64)
