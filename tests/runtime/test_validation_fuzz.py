"""Fuzz the loader and validator together: only coded diagnostics may come out."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import codes
from runtime.format.loader import pipelines_in, read_yaml
from runtime.format.source import SourceMap
from runtime.format.validation import check_pipeline

_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.text(max_size=6),
    st.sampled_from(["noop", "guard", "router", "finish", "a", "b", "yes", "on"]),
)
_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_keys = st.sampled_from(
    [
        "id",
        "action",
        "next",
        "end",
        "on_allow",
        "on_deny",
        "routes",
        "on_other",
        "retry",
        "catch",
        "count",
        "count_from_settings",
        "note",
        "x",
    ]
)
_step = st.dictionaries(_keys, _value, max_size=6)
_doc = st.fixed_dictionaries(
    {},
    optional={
        "name": _value,
        "settings": st.dictionaries(
            st.sampled_from(["entry_step_id", "max_steps", "k"]), _value, max_size=3
        ),
        "steps": st.lists(_step, max_size=5),
        "inputs": _value,
        "outputs": _value,
        "inbox": _value,
    },
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@pytest.mark.slow
@given(_doc)
def test_fuzz_validator(registry, doc):
    text = yaml.safe_dump(doc, sort_keys=False)
    yf = read_yaml("fuzz.yaml", text)
    found = list(yf.diagnostics)
    docs, problems = pipelines_in(yf)
    found += problems
    for pd in docs:
        found += check_pipeline(
            pd.data, SourceMap(pd.data, "fuzz.yaml", pd.prefix), registry, bool_keys=yf.bool_keys
        )
    for d in found:
        assert d.code in codes.CODES and d.line >= 1 and d.column >= 1
