"""Spec strings, settings.models validation and provider precedence."""

from __future__ import annotations

import os

import pytest

from runtime.errors import ModelError
from runtime.models import check_settings, config_from_spec, resolve_provider
from runtime.models.base import DEFAULT_CONTEXT_WINDOW

SETTINGS = {
    "models": {
        "big": {
            "provider": "openai",
            "model": "qwen",
            "base_url": "http://h/v1",
            "context_window": 32000,
            "tokenizer": "o200k_base",
            "timeout_seconds": 5,
            "connect_timeout_seconds": 1.5,
            "max_retries": 0,
            "api_key_env": "BIG_KEY",
            "headers": {"X-Team": "docs"},
        },
        "offline": {"provider": "extractive", "context_window": 4000},
        "tape": {"provider": "replay", "cassette": "tapes/a.jsonl"},
    },
    "default_model": "big",
}


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("RUNTIME_CONTEXT_WINDOW", raising=False)


@pytest.mark.parametrize(
    "spec,provider,model,base_url",
    [
        ("extractive", "extractive", "extractive", ""),
        ("openai:gpt-x", "openai", "gpt-x", "https://api.openai.com/v1"),
        ("openai:gpt-x@http://h:1/v1", "openai", "gpt-x", "http://h:1/v1"),
        (
            "openai:qwen2.5-coder:7b@http://127.0.0.1:11434/v1",
            "openai",
            "qwen2.5-coder:7b",
            "http://127.0.0.1:11434/v1",
        ),
        ("replay:c.jsonl", "replay", "replay", ""),
        ("big", "openai", "qwen", "http://h/v1"),
        ("offline", "extractive", "extractive", ""),
    ],
)
def test_spec_grammar(spec, provider, model, base_url):
    cfg = config_from_spec(spec, SETTINGS)
    assert (cfg.provider, cfg.model, cfg.base_url) == (provider, model, base_url)


def test_a_settings_entry_keeps_every_field():
    cfg = config_from_spec("big", SETTINGS)
    assert cfg.name == "big" and cfg.context_window == 32000 and cfg.tokenizer == "o200k_base"
    assert (cfg.timeout_seconds, cfg.connect_timeout_seconds, cfg.max_retries) == (5.0, 1.5, 0)
    assert cfg.api_key_env == "BIG_KEY" and cfg.headers == {"X-Team": "docs"}
    assert config_from_spec("offline", SETTINGS).context_window == 4000


def test_openai_defaults_come_from_the_environment_when_set(monkeypatch):
    assert config_from_spec("openai:m", {}).context_window == DEFAULT_CONTEXT_WINDOW
    monkeypatch.setenv("OPENAI_BASE_URL", "http://proxy:9/v1")
    monkeypatch.setenv("RUNTIME_CONTEXT_WINDOW", "16384")
    cfg = config_from_spec("openai:m", {})
    assert (cfg.base_url, cfg.context_window) == ("http://proxy:9/v1", 16384)
    monkeypatch.setenv("RUNTIME_CONTEXT_WINDOW", "lots")
    with pytest.raises(ModelError) as info:
        config_from_spec("openai:m", {})
    assert (
        info.value.code == "MODEL_CONFIG_INVALID" and "RUNTIME_CONTEXT_WINDOW" in info.value.message
    )


def test_precedence_cli_then_step_then_default_then_extractive():
    assert resolve_provider(None, settings={}).config.provider == "extractive"
    assert resolve_provider(None, settings=SETTINGS).config.name == "big"
    assert resolve_provider("offline", settings=SETTINGS).config.name == "offline"
    cli = resolve_provider("offline", settings=SETTINGS, cli_spec="openai:m@http://x:1/v1")
    assert (cli.config.model, cli.config.base_url) == ("m", "http://x:1/v1")


def test_cassette_paths_resolve_from_where_they_were_written(tmp_path):
    cfg = config_from_spec("tape", SETTINGS, base_dir=str(tmp_path))
    assert cfg.cassette == str(tmp_path / "tapes" / "a.jsonl")
    on_cli = config_from_spec("replay:c.jsonl", SETTINGS, base_dir=str(tmp_path), spec_dir=None)
    assert on_cli.cassette == "c.jsonl"  # the working directory, as typed
    in_file = config_from_spec("replay:c.jsonl", SETTINGS, spec_dir=str(tmp_path))
    assert in_file.cassette == os.path.join(str(tmp_path), "c.jsonl")


@pytest.mark.parametrize(
    "spec",
    [
        "openai:",
        "openai:@http://h/v1",
        "openai:m@",
        "openai:m@ftp://h",
        "openai:m@http://",
        "replay:",
        "weird:x",
        "",
        " big",
    ],
)
def test_malformed_specs(spec):
    with pytest.raises(ModelError) as info:
        config_from_spec(spec, SETTINGS)
    assert info.value.code == "MODEL_CONFIG_INVALID"


def test_unknown_names_suggest_the_nearest():
    with pytest.raises(ModelError) as info:
        config_from_spec("bgi", SETTINGS)
    assert info.value.code == "MODEL_UNKNOWN" and "did you mean 'big'" in info.value.message
    with pytest.raises(ModelError) as info:
        resolve_provider("nope", settings={})
    assert info.value.code == "MODEL_UNKNOWN" and "none defined" in info.value.message


@pytest.mark.parametrize(
    "entry,words",
    [
        ({"provider": "anthropic", "model": "x"}, "provider must be one of"),
        ({"provider": "openai"}, "needs `model`"),
        ({"provider": "openai", "model": "m", "modle": "typo"}, "unknown key(s) modle"),
        ({"provider": "openai", "model": "m", "context_window": "big"}, "context_window"),
        ({"provider": "openai", "model": "m", "context_window": True}, "context_window"),
        ({"provider": "openai", "model": "m", "max_retries": -1}, "max_retries"),
        ({"provider": "openai", "model": "m", "timeout_seconds": 0}, "timeout_seconds"),
        ({"provider": "openai", "model": "m", "api_key_env": "not a name"}, "api_key_env"),
        ({"provider": "openai", "model": "m", "base_url": "localhost:8080"}, "http://"),
        ({"provider": "openai", "model": "m", "base_url": ""}, "base_url"),
        ({"provider": "openai", "model": "m", "headers": {"X": 1}}, "headers"),
        (
            {"provider": "openai", "model": "m", "headers": {"Authorization": "Bearer sk-1"}},
            "api_key_env",
        ),
        ({"provider": "replay"}, "cassette"),
        ({"provider": "extractive", "cassette": "x.jsonl"}, "cassette applies"),
        ({"provider": "extractive", "base_url": "http://h/v1"}, "base_url applies"),
        ("openai", "must be a mapping"),
    ],
)
def test_malformed_settings_entries(entry, words):
    with pytest.raises(ModelError) as info:
        config_from_spec("x", {"models": {"x": entry}})
    assert info.value.code == "MODEL_CONFIG_INVALID" and words in info.value.message


def test_credentials_in_a_url_are_refused_without_being_echoed():
    entry = {"provider": "openai", "model": "m", "base_url": "http://me:hunter2@h/v1"}
    for spec, settings in (
        ("x", {"models": {"x": entry}}),
        ("openai:m@http://me:hunter2@h/v1", {}),
        ("openai:m@ftp://me:hunter2@h/v1", {}),
    ):
        with pytest.raises(ModelError) as info:
            config_from_spec(spec, settings)
        assert info.value.code == "MODEL_CONFIG_INVALID" and "hunter2" not in info.value.message


def test_models_and_default_model_must_be_well_typed():
    for settings in ({"models": ["big"]}, {"default_model": 3}):
        with pytest.raises(ModelError) as info:
            resolve_provider(None, settings=settings)
        assert info.value.code == "MODEL_CONFIG_INVALID"


def test_check_settings_collects_every_problem():
    settings = {
        "models": {"ok": {"provider": "extractive"}, "bad": {"provider": "nope"}},
        "default_model": "missing",
    }
    codes = sorted(e.code for e in check_settings(settings))
    assert codes == ["MODEL_CONFIG_INVALID", "MODEL_UNKNOWN"]
    assert check_settings(SETTINGS) == []


def test_the_deadline_is_a_setting_and_bounds_the_timeouts_set_with_it():
    base = {"provider": "openai", "model": "m", "base_url": "http://h/v1"}
    assert config_from_spec("x", {"models": {"x": base}}).deadline_seconds == 120.0
    tight = {**base, "deadline_seconds": 5, "timeout_seconds": 5}
    assert config_from_spec("x", {"models": {"x": tight}}).deadline_seconds == 5.0
    # The defaults (60 s per read, 10 s to connect) are not compared: only values one sets.
    assert config_from_spec("x", {"models": {"x": {**base, "deadline_seconds": 2}}})
    for entry, words in [
        ({**base, "timeout_seconds": 300}, "timeout_seconds (300) exceeds deadline_seconds (120)"),
        (
            {**base, "deadline_seconds": 2, "connect_timeout_seconds": 3},
            "connect_timeout_seconds (3) exceeds deadline_seconds (2)",
        ),
        ({**base, "deadline_seconds": 0}, "deadline_seconds must be a positive number"),
        ({**base, "deadline_seconds": "1m"}, "deadline_seconds must be a positive number"),
    ]:
        with pytest.raises(ModelError) as info:
            config_from_spec("x", {"models": {"x": entry}})
        assert info.value.code == "MODEL_CONFIG_INVALID" and words in info.value.message


@pytest.mark.parametrize(
    "url", ["http://h/v1?api_key=hunter22", "http://h/v1/?key=hunter22&x=1", "http://h/v1#hunter22"]
)
def test_a_query_string_or_fragment_in_a_url_is_refused_without_being_echoed(url):
    entry = {"provider": "openai", "model": "m", "base_url": url}
    for spec, settings in (("x", {"models": {"x": entry}}), (f"openai:m@{url}", {})):
        with pytest.raises(ModelError) as info:
            config_from_spec(spec, settings)
        assert info.value.code == "MODEL_CONFIG_INVALID" and "hunter22" not in info.value.message
        assert "put the key in api_key_env" in info.value.message


def test_an_adhoc_spec_takes_its_deadline_from_the_environment(monkeypatch):
    # A slow local server needs more than 120 s for a long answer; settings.models can say
    # so, and an ad-hoc --model spec through $RUNTIME_DEADLINE_SECONDS.
    from runtime.models.base import DEFAULT_DEADLINE

    spec = "openai:m@http://127.0.0.1:8080/v1"
    monkeypatch.delenv("RUNTIME_DEADLINE_SECONDS", raising=False)
    assert config_from_spec(spec, {}).deadline_seconds == DEFAULT_DEADLINE
    monkeypatch.setenv("RUNTIME_DEADLINE_SECONDS", "600")
    assert config_from_spec(spec, {}).deadline_seconds == 600.0
    for bad in ("0", "-5", "soon", "nan", "inf", "1e300", "86400.5"):
        monkeypatch.setenv("RUNTIME_DEADLINE_SECONDS", bad)
        with pytest.raises(ModelError) as info:
            config_from_spec(spec, {})
        assert info.value.code == "MODEL_CONFIG_INVALID" and "RUNTIME_DEADLINE_SECONDS" in (
            info.value.message
        )


@pytest.mark.parametrize("key", ["deadline_seconds", "timeout_seconds", "connect_timeout_seconds"])
def test_a_time_beyond_a_day_is_refused_before_its_timer_would_overflow(key):
    # 1e300 s once reached threading.Timer, whose thread died with an OverflowError
    # traceback on stderr while the call went on without a deadline.
    from runtime.models.config import config_from_settings

    entry = {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:1/v1"}
    ok = config_from_settings("x", {**entry, key: 86_400, "deadline_seconds": 86_400})
    assert getattr(ok, key) == 86_400.0
    with pytest.raises(ModelError) as info:
        config_from_settings("x", {**entry, key: 1e300})
    assert info.value.code == "MODEL_CONFIG_INVALID" and "86,400" in info.value.message
