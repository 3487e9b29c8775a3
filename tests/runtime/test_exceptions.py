"""runtime/governance/exceptions.py: which exception is active, and what validate says."""

from __future__ import annotations

import datetime as dt

import pytest

from runtime.governance import exceptions as ex

LAST_DAY = dt.date(2026, 12, 31)


def settings(**over):
    item = {
        "id": "legacy",
        "rule": "redaction",
        "steps": ["a", "b"],
        "owner": "sec-team",
        "expires": "2026-12-31",
        "rollback": "a reply quoting a card",
        **over,
    }
    return {"exceptions": [item]}


@pytest.mark.parametrize(
    ("today", "active"),
    [
        (LAST_DAY - dt.timedelta(days=1), True),
        (LAST_DAY, True),
        (LAST_DAY + dt.timedelta(days=1), False),
    ],
)
def test_an_exception_holds_through_its_last_day(today, active):
    found = ex.active_exception(settings(), "redaction", "a", today)
    assert (found is not None) is active
    codes = [f.code for f in ex.problems(settings(), ["a", "b"], today)]
    assert codes == (["EXCEPTION_DECLARED"] if active else ["EXCEPTION_EXPIRED"])


def test_only_the_named_rule_and_steps():
    s = settings()
    assert ex.active_exception(s, "redaction", "c", LAST_DAY) is None
    assert ex.active_exception(s, "access", "a", LAST_DAY) is None
    assert ex.active_exception({}, "redaction", "a", LAST_DAY) is None


def test_a_malformed_exception_lifts_nothing():
    for bad in ({"expires": "someday"}, {"owner": None}, {"steps": "a"}):
        assert ex.active_exception(settings(**bad), "redaction", "a", LAST_DAY) is None


def test_trace_data_names_owner_expiry_and_rollback():
    found = ex.active_exception(settings(), "redaction", "b", LAST_DAY)
    assert found.trace_data() == {
        "exception": "legacy",
        "rule": "redaction",
        "owner": "sec-team",
        "expires": "2026-12-31",
        "rollback": "a reply quoting a card",
    }


def test_duplicate_ids_are_invalid():
    s = settings()
    s["exceptions"].append(dict(s["exceptions"][0]))
    codes = [f.code for f in ex.problems(s, ["a", "b"], LAST_DAY)]
    assert codes.count("EXCEPTION_INVALID") == 1
