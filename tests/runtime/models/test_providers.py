"""Spec resolution, cassettes (record then replay), and the extractive responder."""

from __future__ import annotations

import json

import pytest

from runtime.blocks import format_block
from runtime.errors import ModelError
from runtime.models import ModelRequest, config_from_spec, resolve_provider
from runtime.models.extractive import NOTICE


def test_spec_grammar_and_precedence():
    settings = {
        "models": {
            "big": {
                "provider": "openai",
                "model": "qwen",
                "base_url": "http://h/v1",
                "context_window": 32000,
            }
        },
        "default_model": "big",
    }
    assert config_from_spec("big", settings).context_window == 32000
    assert config_from_spec("openai:gpt-x@http://h:1/v1", {}).base_url == "http://h:1/v1"
    assert config_from_spec("replay:c.jsonl", {}).cassette == "c.jsonl"
    assert resolve_provider(None, settings={}).config.provider == "extractive"
    assert resolve_provider(None, settings=settings).config.name == "big"
    assert (
        resolve_provider("big", settings=settings, cli_spec="extractive").config.provider
        == "extractive"
    )
    for spec, code in (
        ("nope", "MODEL_UNKNOWN"),
        ("openai:", "MODEL_CONFIG_INVALID"),
        ("weird:x", "MODEL_CONFIG_INVALID"),
    ):
        with pytest.raises(ModelError) as info:
            config_from_spec(spec, settings)
        assert info.value.code == code


def test_record_then_replay_is_identical(tmp_path, chat_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-recorded")
    cassette = tmp_path / "c.jsonl"
    chat_server.script = [{"reply": "one"}, {"reply": "two"}, {"reply": "three"}]
    rec = resolve_provider(
        None, settings={}, cli_spec=f"openai:m@{chat_server.url}", record_path=str(cassette)
    )
    got = [
        rec.complete(ModelRequest([{"role": "user", "content": q}], step_id=s)).text
        for q, s in (("a", "x"), ("b", "y"), ("c", "x"))
    ]
    assert got == ["one", "two", "three"]
    text = cassette.read_text()
    assert "sk-never-recorded" not in text
    assert [json.loads(line)["step_id"] for line in text.splitlines()] == ["x", "y", "x"]
    replay = resolve_provider(None, settings={}, cli_spec=f"replay:{cassette}")
    assert replay.complete(ModelRequest([], step_id="x")).text == "one"
    assert replay.complete(ModelRequest([], step_id="y")).text == "two"
    assert replay.complete(ModelRequest([], step_id="x")).text == "three"
    with pytest.raises(ModelError) as info:
        replay.complete(ModelRequest([], step_id="y"))
    assert info.value.code == "CASSETTE_EXHAUSTED" and "'y'" in info.value.message


def test_malformed_cassette_names_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step_id": "a", "response": "x"}\nnot json\n')
    with pytest.raises(ModelError) as info:
        resolve_provider(None, settings={}, cli_spec=f"replay:{bad}")
    assert info.value.code == "CASSETTE_INVALID" and "line 2" in info.value.message


EVIDENCE = "\n\n".join(
    [
        format_block(
            {
                "id": "r::m::procedure::dbo.usp_CapturePayment",
                "path": "db/pay.sql",
                "language": "sql",
                "text": "CREATE PROCEDURE dbo.usp_CapturePayment AS\nINSERT INTO dbo.Payments VALUES (1)",
            },
            compact=False,
        ),
        format_block(
            {
                "id": "r::m::class::Basket",
                "path": "src/Basket.cs",
                "language": "dotnet",
                "text": "public class Basket { }",
            },
            compact=False,
        ),
    ]
)


def test_extractive_answer_cites_and_says_no_model_was_used():
    p = resolve_provider(None, settings={})
    msg = f"Question: How are payments captured?\n\n<evidence>\n{EVIDENCE}\n</evidence>"
    r = p.complete(ModelRequest([{"role": "user", "content": msg}], step_id="a"))
    assert r.text.startswith(NOTICE)
    assert "[r::m::procedure::dbo.usp_CapturePayment] (db/pay.sql)" in r.text
    assert "INSERT INTO dbo.Payments" in r.text and "Basket" not in r.text.split("Sources:")[0]
    again = p.complete(ModelRequest([{"role": "user", "content": msg}], step_id="a"))
    assert again.text == r.text


@pytest.mark.parametrize("with_evidence,decision", [(True, "sufficient"), (False, "retrieve_more")])
def test_extractive_json_decisions(with_evidence, decision):
    p = resolve_provider(None, settings={})
    content = "Question: how are payments captured?" + (f"\n{EVIDENCE}" if with_evidence else "")
    schema = {
        "type": "object",
        "properties": {
            "decision": {"enum": ["sufficient", "retrieve_more"]},
            "query": {"type": "string"},
        },
    }
    r = p.complete(
        ModelRequest(
            [{"role": "user", "content": content}], json_mode=True, json_schema=schema, step_id="c"
        )
    )
    obj = json.loads(r.text)
    assert obj["decision"] == decision and obj["query"] == "payments captured"
