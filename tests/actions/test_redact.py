"""The redact action: a masked copy of a variable, counts in the trace, never a value."""

from __future__ import annotations

import json
from typing import Any

from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline

CARD = "5555 5555 5555 4444"
TEXT = f"card {CARD}, card {CARD}, mail ops@example.org, bad 5555 5555 5555 4445"


def run(tmp_path, step: dict[str, Any], settings: dict[str, Any] | None = None, value: Any = TEXT):
    data = {
        "settings": {"entry_step_id": "r", **(settings or {})},
        "steps": [
            {
                "id": "r",
                "action": "redact",
                "source": "text",
                "target": "masked",
                "next": "f",
                **step,
            },
            {"id": "f", "action": "finalize", "source": "masked"},
        ],
    }
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    return Engine(p, services=Services(settings=p.settings, base_dir=str(tmp_path))).run(
        {"text": value}, run_id="t"
    )


def test_masks_into_the_target_and_keeps_the_source(tmp_path):
    r = run(tmp_path, {})
    masked = r.state["masked"]
    assert CARD not in masked and "ops@example.org" not in masked
    assert "5555 5555 5555 4445" in masked  # Luhn-invalid: not a card
    tags = [w.strip(",") for w in masked.split() if w.startswith("[CARD_")]
    assert len(tags) == 2 and tags[0] == tags[1]
    assert r.state["text"] == TEXT
    [event] = [e for e in r.events if e["type"] == "REDACTED"]
    assert event["kinds"] == {"card": 1, "email": 1} and CARD not in json.dumps(r.events)


def test_kinds_of_the_step_and_lists_of_blocks(tmp_path):
    r = run(tmp_path, {"kinds": ["email"]}, value=[TEXT, {"note": TEXT}])
    first, second = r.state["masked"]
    assert CARD in first and "ops@example.org" not in first
    assert "ops@example.org" not in second["note"]


def test_settings_patterns_apply(tmp_path):
    settings = {"redact": {"kinds": [], "patterns": [{"name": "ticket", "regex": r"OPS-\d+"}]}}
    r = run(tmp_path, {}, settings, value="see OPS-42 and OPS-42")
    assert r.state["masked"].count("[TICKET_") == 2 and "OPS-42" not in r.state["masked"]


def test_a_pattern_over_its_bound_is_a_coded_error(tmp_path, monkeypatch):
    from runtime.governance import redaction

    monkeypatch.setattr(redaction, "PATTERN_TIMEOUT_SECONDS", 0.01)
    # Accepted at validation (probes are short and the bound was 0.5 s there); the text is
    # long enough to run over the small bound set here.
    monkeypatch.setattr(redaction, "pattern_problem", lambda text: None)
    r = run(tmp_path, {"patterns": [{"name": "slow", "regex": "(a|aa)+$"}]}, value="a" * 80 + "!")
    assert r.status == "failed" and r.error.code == "REDACTION_PATTERN_TIMEOUT"
    assert "masked" not in r.state


def test_a_governed_exception_copies_the_value_unmasked_and_is_traced(tmp_path):
    exception = {
        "id": "raw-copy",
        "rule": "redaction",
        "steps": ["r"],
        "owner": "sec-team",
        "expires": "2999-12-31",
        "rollback": "r",
    }
    r = run(tmp_path, {}, {"exceptions": [exception]})
    assert r.state["masked"] == TEXT
    [used] = [e for e in r.events if e["type"] == "EXCEPTION_USED"]
    assert used["exception"] == "raw-copy" and not [e for e in r.events if e["type"] == "REDACTED"]
