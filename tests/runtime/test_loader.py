"""Loading: positions, duplicate keys, YAML 1.1 traps, limits, packs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.format.loader import MAX_DEPTH, MAX_NODES, pipelines_in, read_yaml
from runtime.format.source import LList, LMap, SourceMap


def test_positions_of_keys_values_and_items():
    yf = read_yaml("p.yaml", "name: x\nsteps:\n  - id: a\n    top_k: 3\n")
    doc = yf.documents[0]
    assert isinstance(doc, LMap) and isinstance(doc["steps"], LList)
    sm = SourceMap(doc, "p.yaml")
    loc = sm.locate(("steps", 0, "top_k"))
    assert (loc.line, loc.column, loc.raw) == (4, 12, "3")
    key = sm.locate(("steps", 0, "top_k"), key=True)
    assert (key.line, key.column) == (4, 5)
    assert sm.locate(("steps", 0)).line == 3
    # A path that goes past the data falls back to the nearest known ancestor.
    assert sm.locate(("steps", 0, "missing", "deeper")).line == 3


def test_scalars_are_typed_like_yaml_but_dates_stay_text():
    yf = read_yaml("p.yaml", "a: 1\nb: 1.5\nc: true\nd: null\ne: 2026-01-01\nf: '7'\n")
    assert yf.documents[0] == {"a": 1, "b": 1.5, "c": True, "d": None, "e": "2026-01-01", "f": "7"}


def test_duplicate_key_is_an_error_at_the_second_key():
    yf = read_yaml("p.yaml", "a: 1\nb: 2\na: 3\n")
    [d] = yf.diagnostics
    assert (d.code, d.line, d.column) == ("YAML_DUPLICATE_KEY", 3, 1)
    assert "first at line 1" in d.message


def test_boolean_keys_are_restored_and_recorded():
    yf = read_yaml("p.yaml", "on: 1\nyes: 2\n'no': 3\n")
    assert yf.documents[0] == {"on": 1, "yes": 2, "no": 3}
    assert [(b.raw, b.loc.line) for b in yf.bool_keys] == [("on", 1), ("yes", 2)]


def test_merge_keys_are_applied_and_explicit_keys_win():
    yf = read_yaml("p.yaml", "base: &b {x: 1, y: 2}\nchild:\n  <<: *b\n  y: 3\n")
    assert yf.documents[0]["child"] == {"x": 1, "y": 3}


def test_syntax_error_is_positioned():
    yf = read_yaml("p.yaml", "a: [1, 2\nb: 3\n")
    [d] = yf.diagnostics
    assert d.code == "YAML_SYNTAX" and d.line >= 1 and yf.documents == []


def test_billion_laughs_is_refused():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    yf = read_yaml("bomb.yaml", "\n".join(lines) + "\n")
    assert [d.code for d in yf.diagnostics] == ["YAML_TOO_LARGE"]
    assert str(MAX_NODES) in yf.diagnostics[0].message
    assert yf.documents == []


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,  # flow nesting (libyaml would crash)
        "".join(f"{' ' * i}k{i}:\n" for i in range(200)) + " " * 200 + "v: 1\n",  # block nesting
        "a: &a [*a]\n",  # a recursive alias
    ],
)
def test_deep_or_recursive_nesting_is_refused(text):
    yf = read_yaml("deep.yaml", text)
    assert [d.code for d in yf.diagnostics] in (["YAML_TOO_DEEP"], ["YAML_TOO_LARGE"])
    assert str(MAX_DEPTH) in yf.diagnostics[0].message or "nodes" in yf.diagnostics[0].message


def test_file_size_limit(tmp_path, monkeypatch):
    import runtime.format.loader as loader

    monkeypatch.setattr(loader, "MAX_FILE_BYTES", 100)
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * 200 + "\n")
    yf = read_yaml(str(big))
    assert [d.code for d in yf.diagnostics] == ["YAML_TOO_LARGE"]


def test_missing_and_non_utf8_files(tmp_path):
    assert read_yaml(str(tmp_path / "nope.yaml")).diagnostics[0].code == "FILE_NOT_FOUND"
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"a: \xff\xfe\n")
    assert read_yaml(str(bad)).diagnostics[0].code == "FILE_UNREADABLE"


def test_pack_shapes_list_mapping_and_multi_document():
    listed = read_yaml(
        "p.yaml", "YAMLpipelines:\n  - {name: a, steps: []}\n  - {name: b, steps: []}\n"
    )
    docs, problems = pipelines_in(listed)
    assert [d.name for d in docs] == ["a", "b"] and problems == []
    assert docs[1].prefix == ("YAMLpipelines", 1)
    mapped = read_yaml("p.yaml", "YAMLpipelines:\n  one: {steps: []}\n  two: {steps: []}\n")
    assert [d.name for d in pipelines_in(mapped)[0]] == ["one", "two"]
    multi = read_yaml("p.yaml", "name: a\nsteps: []\n---\nname: b\nsteps: []\n")
    assert [d.name for d in pipelines_in(multi)[0]] == ["a", "b"]
    one = read_yaml("w.yaml", "YAMLpipeline:\n  steps: []\n")
    assert [(d.name, d.prefix) for d in pipelines_in(one)[0]] == [("w", ("YAMLpipeline",))]


def test_duplicate_names_in_a_pack():
    yf = read_yaml("p.yaml", "YAMLpipelines:\n  - {name: a, steps: []}\n  - {name: a, steps: []}\n")
    _, problems = pipelines_in(yf)
    assert [(p.code, p.line) for p in problems] == [("PACK_DUPLICATE_NAME", 3)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.text(alphabet=st.sampled_from(list("abc:-[]{}&*!|>'\"#\n \t0123456789yesno<")), max_size=200)
)
@pytest.mark.slow
def test_fuzz_loader_only_yields_coded_diagnostics(text):
    from runtime import codes

    yf = read_yaml("fuzz.yaml", text)
    pipelines_in(yf)
    assert all(d.code in codes.CODES for d in yf.diagnostics)
