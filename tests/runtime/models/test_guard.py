"""ScrubbingProvider: every string of a reply or an error leaves the model layer scrubbed."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from runtime.errors import ModelProviderError
from runtime.models.base import ModelConfig, ModelRequest, ModelResponse, ToolCall
from runtime.models.guard import ScrubbingProvider

KEY = "sk-guard-0a1b2c3d4e5f"
ESCAPED = "".join(f"\\u{ord(c):04X}" for c in KEY)  # as JSON may write it


class Fixed:
    """A provider answering with one prepared response, or raising one prepared error."""

    restorable_state = True

    def __init__(self, answer: ModelResponse | Exception) -> None:
        self.config = ModelConfig(name="m", provider="openai", api_key_env="GUARD_KEY")
        self.answer = answer

    def complete(self, request: ModelRequest, *, on_chunk: Any = None) -> ModelResponse:
        if isinstance(self.answer, Exception):
            raise self.answer
        if on_chunk is not None:
            on_chunk(self.answer.text)
        return self.answer


@dataclasses.dataclass
class Extended(ModelResponse):
    """A response with a field a provider might add: lists and mappings are scrubbed too."""

    notes: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def strings(value: Any) -> list[str]:
    """Every string in a response (fields, lists, dicts, tool calls), keys included."""
    if isinstance(value, str):
        return [value]
    if dataclasses.is_dataclass(value):
        return strings([getattr(value, f.name) for f in dataclasses.fields(value)])
    if isinstance(value, dict):
        return strings(list(value)) + strings(list(value.values()))
    if isinstance(value, list | tuple):
        return [s for v in value for s in strings(v)]
    return []


def test_every_string_of_a_reply_is_scrubbed(monkeypatch):
    monkeypatch.setenv("GUARD_KEY", KEY)
    args = json.dumps({"pointer_id": "P", "slice": "S"}).replace("P", ESCAPED).replace("S", KEY)
    response = Extended(
        text=f"text {KEY}",
        model=f"model {ESCAPED}",
        provider=KEY,
        finish_reason=f"{KEY}",
        tool_calls=[ToolCall(f"id-{KEY}", ESCAPED, args)],
        notes=[{"reason": f"429 {KEY}", KEY: 1}],
    )
    out = ScrubbingProvider(Fixed(response), {}).complete(ModelRequest(messages=[]))
    assert all(KEY not in s and "\\u" not in s for s in strings(out)), strings(out)
    [call] = out.tool_calls
    assert (call.id, call.name) == ("id-[redacted]", "[redacted]")
    assert json.loads(call.arguments) == {"pointer_id": "[redacted]", "slice": "[redacted]"}
    assert (out.text, out.finish_reason) == ("text [redacted]", "[redacted]")
    assert out.notes == [{"reason": "429 [redacted]", "[redacted]": 1}]


def test_an_error_keeps_its_class_and_code_with_message_hint_and_details_scrubbed(monkeypatch):
    monkeypatch.setenv("GUARD_KEY", KEY)
    error = ModelProviderError(f"bad {ESCAPED}", hint=f"see {KEY}", body={"echo": [KEY]})
    with pytest.raises(ModelProviderError) as caught:
        ScrubbingProvider(Fixed(error), {}).complete(ModelRequest(messages=[]))
    assert caught.value is error and caught.value.code == "MODEL_PROVIDER_ERROR"
    assert (error.message, error.hint, str(error)) == (
        "bad [redacted]",
        "see [redacted]",
        "MODEL_PROVIDER_ERROR: bad [redacted]",
    )
    assert error.details == {"body": {"echo": ["[redacted]"]}}


def test_the_recorder_scrubs_every_form_on_its_own(monkeypatch, tmp_path):
    """A cassette line is scrubbed by the recorder too: a prompt may quote a key, and a
    provider wrapped without the guard (in code) may return one."""
    from runtime.models.cassette import RecordingProvider

    monkeypatch.setenv("GUARD_KEY", KEY)
    call = ToolCall(KEY, ESCAPED, json.dumps({"pointer_id": "P"}).replace("P", ESCAPED))
    inner = Fixed(ModelResponse(text=ESCAPED, model=KEY, tool_calls=[call]))
    path = tmp_path / "c.jsonl"
    request = ModelRequest(messages=[{"role": "user", "content": f"my key: {ESCAPED}"}])
    RecordingProvider(inner, str(path), {}).complete(request)
    line = path.read_text()
    assert KEY not in line and "\\u0073" not in line.lower() and "[redacted]" in line
    entry = json.loads(line)
    assert entry["request"]["messages"][0]["content"] == "my key: [redacted]"
    assert entry["tool_calls"] == [
        {"id": "[redacted]", "name": "[redacted]", "arguments": '{"pointer_id": "[redacted]"}'}
    ]
