"""A model's tokenizer and token_margin: settings.models entries, ad-hoc specs, validate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import runtime
from runtime.errors import ModelError
from runtime.models import config_from_settings, config_from_spec

OPENAI = {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:1/v1"}


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    for name in ("RUNTIME_TOKENIZER", "RUNTIME_TOKEN_MARGIN", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def tok(tmp_path) -> Path:
    path = tmp_path / "tok" / "tokenizer.json"
    path.parent.mkdir()
    path.write_text("{}")  # read when a count is first needed, not when configured
    return path


def test_tokenizer_names(tmp_path, tok):
    for name in ("cl100k_base", "o200k_base", "server"):
        assert config_from_settings("a", {**OPENAI, "tokenizer": name}).tokenizer == name
    relative = config_from_settings(
        "a", {**OPENAI, "tokenizer": "hf:tok/tokenizer.json"}, base_dir=str(tmp_path)
    )
    assert relative.tokenizer == f"hf:{tok}"
    absolute = config_from_settings("a", {"provider": "extractive", "tokenizer": f"hf:{tok}"})
    assert absolute.tokenizer == f"hf:{tok}"


@pytest.mark.parametrize(
    "entry,words",
    [
        ({**OPENAI, "tokenizer": "llama3"}, "server or hf:PATH"),
        ({**OPENAI, "tokenizer": ""}, "non-empty"),
        ({**OPENAI, "tokenizer": 5}, "non-empty"),
        ({**OPENAI, "tokenizer": "hf:"}, "path of a tokenizer.json"),
        ({**OPENAI, "tokenizer": "hf:nope/tokenizer.json"}, "no such file"),
        ({"provider": "extractive", "tokenizer": "server"}, "openai model's server"),
        ({**OPENAI, "token_margin": -0.1}, "fraction from 0 to 1"),
        ({**OPENAI, "token_margin": 1.5}, "fraction from 0 to 1"),
        ({**OPENAI, "token_margin": True}, "fraction from 0 to 1"),
        ({**OPENAI, "token_margin": "0.1"}, "fraction from 0 to 1"),
        ({**OPENAI, "token_margin": float("nan")}, "fraction from 0 to 1"),
    ],
)
def test_bad_tokenizers_and_margins_are_refused(tmp_path, entry, words):
    with pytest.raises(ModelError) as exc:
        config_from_settings("a", entry, base_dir=str(tmp_path))
    assert exc.value.code == "MODEL_CONFIG_INVALID"
    assert exc.value.message.startswith("settings.models.a:") and words in exc.value.message


@pytest.mark.parametrize("margin", [0, 0.15, 1])
def test_margins(margin):
    assert config_from_settings("a", {**OPENAI, "token_margin": margin}).token_margin == margin
    assert config_from_settings("a", OPENAI).token_margin == 0


def test_adhoc_specs_take_the_tokenizer_and_margin_from_the_environment(monkeypatch, tmp_path, tok):
    spec = "openai:m@http://127.0.0.1:1/v1"
    assert (config_from_spec(spec, {}).tokenizer, config_from_spec(spec, {}).token_margin) == (
        "cl100k_base",
        0,
    )
    monkeypatch.setenv("RUNTIME_TOKENIZER", "server")
    monkeypatch.setenv("RUNTIME_TOKEN_MARGIN", "0.2")
    cfg = config_from_spec(spec, {})
    assert (cfg.tokenizer, cfg.token_margin) == ("server", 0.2)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RUNTIME_TOKENIZER", "hf:tok/tokenizer.json")
    assert config_from_spec(spec, {}).tokenizer == f"hf:{tok}"
    # A settings entry says its own: the environment is for specs without one.
    monkeypatch.setenv("RUNTIME_TOKENIZER", "o200k_base")
    assert config_from_spec("big", {"models": {"big": OPENAI}}).tokenizer == "cl100k_base"


@pytest.mark.parametrize(
    "env,value,words",
    [
        ("RUNTIME_TOKENIZER", "llama3", "$RUNTIME_TOKENIZER"),
        ("RUNTIME_TOKENIZER", "hf:missing.json", "no such file"),
        ("RUNTIME_TOKEN_MARGIN", "lots", "$RUNTIME_TOKEN_MARGIN"),
        ("RUNTIME_TOKEN_MARGIN", "2", "fraction from 0 to 1"),
    ],
)
def test_a_bad_environment_value_is_refused(monkeypatch, tmp_path, env, value, words):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(env, value)
    with pytest.raises(ModelError) as exc:
        config_from_spec("openai:m@http://127.0.0.1:1/v1", {})
    assert exc.value.code == "MODEL_CONFIG_INVALID" and words in exc.value.message


def test_a_replay_takes_the_recorded_tokenizer_unless_the_environment_names_one(
    monkeypatch, tmp_path
):
    tape = tmp_path / "t.jsonl"
    tape.write_text(
        json.dumps({"cassette": 1, "context_window": 2048, "tokenizer": "server"}) + "\n"
    )
    assert config_from_spec(f"replay:{tape}", {}).tokenizer == "server"
    monkeypatch.setenv("RUNTIME_TOKENIZER", "o200k_base")
    assert config_from_spec(f"replay:{tape}", {}).tokenizer == "o200k_base"
    monkeypatch.setenv("RUNTIME_TOKENIZER", "server")
    with pytest.raises(ModelError) as exc:
        config_from_spec(f"replay:{tape}", {})
    assert "openai" in exc.value.message


def _validate(tmp_path: Path, entry: str) -> list[tuple[int | None, str, str]]:
    path = tmp_path / "p.yaml"
    path.write_text(
        "settings:\n"
        "  entry_step_id: a\n"
        "  models:\n"
        f"    local: {entry}\n"
        "steps:\n"
        "  - {id: a, action: finalize, source: q}\n"
    )
    report = runtime.validate(str(path))
    return [(d.line, d.code, d.message) for d in report.diagnostics if d.severity == "error"]


def test_validate_refuses_a_missing_tokenizer_file_at_the_models_entry(tmp_path):
    base = "{provider: openai, model: m, base_url: 'http://127.0.0.1:1/v1', tokenizer: "
    [(line, code, message)] = _validate(tmp_path, base + "'hf:tok.json'}")
    assert (line, code) == (4, "MODEL_CONFIG_INVALID") and "no such file" in message
    (tmp_path / "tok.json").write_text("{}")
    assert _validate(tmp_path, base + "'hf:tok.json'}") == []
    assert _validate(tmp_path, base + "server}") == []


@pytest.mark.parametrize(
    "entry", ["tokenizer: llama3", "token_margin: 2", "token_margin: -1", "token_margin: x"]
)
def test_validate_refuses_a_bad_tokenizer_or_margin(tmp_path, entry):
    found = _validate(tmp_path, "{provider: openai, model: m, " + entry + "}")
    assert [line for line, _, _ in found] == [4]


@pytest.mark.parametrize("tokenizer", ["server", "hf:tok.json"])
def test_static_budgets_of_a_model_with_its_own_tokenizer(tmp_path, tokenizer):
    """validate and `runtime budget` never ask the server (cl100k_base estimates its counts,
    and the report says so); an hf: tokenizer counts with the file."""
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")).save(str(tmp_path / "tok.json"))
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("You answer.\n")
    path = tmp_path / "p.yaml"
    path.write_text(
        "settings:\n"
        "  entry_step_id: m\n"
        "  models:\n"
        "    local: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', "
        f"tokenizer: '{tokenizer}', context_window: 100}}\n"
        "inputs: {question: {type: string, maxLength: 10}}\n"
        "steps:\n"
        "  - {id: m, action: call_model, prompt_key: sys, model: local, max_output_tokens: 99,\n"
        "     user_parts: {q: {source: question}}, next: end}\n"
        "  - {id: end, action: finalize, source: answer}\n"
    )
    report = runtime.validate(str(path))
    assert [d.code for d in report.diagnostics if d.severity == "error"] == ["BUDGET_IMPOSSIBLE"]
    from click.testing import CliRunner

    from runtime.cli import cli

    out = CliRunner().invoke(cli, ["budget", str(path), "--json"])
    [step] = json.loads(out.output)
    label = "server (estimated with cl100k_base)" if tokenizer == "server" else "hf:"
    assert step["tokenizer"].startswith(label) and step["status"] == "impossible"
