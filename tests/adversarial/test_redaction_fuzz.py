"""The redactor under hostile input: random, huge and pathological text, secrets split across
lines and evidence items, rehydrated text in tool rounds, and a resumed run's placeholders.

Bounds are in characters and a CPU-time ceiling far above the measured cost (docs/
performance.md, Redaction): a detector that backtracked would take minutes, not a second.
"""

from __future__ import annotations

import json
import random
import resource

import pytest
from slice_support import put, tool_reply

from runtime.context import pointers as ptr
from runtime.context.blocks import format_block
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.engine.store import SqliteRunStore
from runtime.format.pipeline import Pipeline
from runtime.governance import redaction as r

KEY = r.run_key("fuzz", secret="")
ALPHABET = "aA1 \n\t@.:-_+=/'\"[](){};,#$%<>!\\" + "é€\u200b\U0001f600"


def everything() -> r.Redactor:
    return r.build(
        {"kinds": list(r.KINDS), "patterns": [{"name": "emp", "regex": r"EMP-\d{6}"}]}, KEY
    )


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pathological() -> list[str]:
    """Inputs shaped to make each detector's pattern work hardest."""
    return [
        "a" * 200_000 + "@",  # a local part that never ends
        "@" * 100_000,
        "a@" * 50_000,
        ("a." * 30_000) + "@b",
        "1" * 200_000,  # one digit run: card and phone candidates everywhere
        "1 " * 100_000,
        "1-" * 100_000,
        "+1 " * 60_000,
        "GB82 " * 40_000,  # IBAN starts
        "AKIA" * 50_000,
        "password=" * 20_000,
        "password: " * 20_000,
        "token " * 30_000,
        "'" + "A1b" * 60_000 + "'",  # one huge quoted high-entropy candidate
        "-----BEGIN RSA PRIVATE KEY-----\n" + ("A" * 64 + "\n") * 3_000,
        "postgres://" + "u" * 100_000 + ":",
        "://" * 60_000,
        "Authorization: Bearer " * 10_000,
        "Password=x;" * 20_000,
        "\n" * 200_000,
        "[EMAIL_0000000" * 20_000,
    ]


def chunked(n: int, fast: int) -> list:
    """The first `fast` cases in the fast subset, the rest `slow` (docs/testing.md)."""
    return [i if i < fast else pytest.param(i, marks=pytest.mark.slow) for i in range(n)]


@pytest.mark.parametrize("index", chunked(len(pathological()), 6))
def test_pathological_input_is_masked_in_bounded_time(index):
    text = pathological()[index]
    red = everything()
    start = cpu()
    out = red.redact(text)
    assert cpu() - start < 5.0  # ~0.02-0.2 s measured; a backtracking pattern takes minutes
    assert isinstance(out, str)
    assert red.redact(out) == out  # masking again changes nothing


@pytest.mark.parametrize("seed", chunked(40, 5))
def test_random_text_never_raises_and_masking_is_idempotent(seed):
    rnd = random.Random(seed)
    pieces = [
        "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, 80))),
        "4111 1111 1111 1111",
        "jane@example.com",
        "AKIAIOSFODNN7EXAMPLE",
        "DE89370400440532013000",
        "password: hunter22",
    ]
    text = "".join(rnd.choice(pieces) for _ in range(200))
    red = everything()
    out = red.redact(text)
    for value in ("4111 1111 1111 1111", "jane@example.com", "AKIAIOSFODNN7EXAMPLE"):
        # A planted value survives only glued to a neighbour that makes it another token
        # (a letter or digit right before or after it): then it is not that value.
        for i in range(len(out)):
            if out.startswith(value, i):
                before = out[i - 1] if i else " "
                after = out[i + len(value)] if i + len(value) < len(out) else " "
                assert before.isalnum() or after.isalnum() or before in "_.+-@" or after in "_.-@"
    # A second pass keeps every placeholder (values glued into garbage may be found anew
    # once a neighbour became a placeholder; none is ever unmasked).
    again = red.redact(out)
    for m in r.PLACEHOLDER.finditer(out):
        assert m.group() in again


def test_a_megabyte_of_mixed_text_uses_bounded_memory():
    text = (
        "x = compute(a, b)  # 2026-11-26 user jane@example.com paid 4111 1111 1111 1111\n"
    ) * 13_000
    red = everything()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = red.redact(text)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 200 * 1024  # the text is ~1 MB; the spans and the output a few times that
    assert "4111" not in out and red.counts["card"] == 13_000


def test_a_card_number_wrapped_across_lines_is_masked():
    out = everything().redact("card: 4111 1111\n1111 1111 expires 12/29")
    assert "1111 1111" not in out and "[CARD_" in out


def test_a_private_key_cut_between_two_evidence_items_is_masked_in_both():
    body = "\n".join(["MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB"] * 6)
    head = f"-----BEGIN RSA PRIVATE KEY-----\n{body[:200]}"
    tail = f"{body[200:]}\n-----END RSA PRIVATE KEY-----"
    red = everything()
    first, second = red.redact(head), red.redact(tail)
    assert "MIIEow" not in first and "MIIEow" not in second
    assert red.counts["secret"] == 2


def test_a_token_split_by_a_line_break_is_masked_where_each_half_is_a_token():
    # A line wrapped inside a token: the half that still has the token's shape is masked;
    # what remains (a short tail) is too short to be anything by itself.
    token = "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"
    out = everything().redact(f"GITHUB_TOKEN={token[:20]}\n{token[20:]}")
    assert token[:20] not in out


# --- through call_model ------------------------------------------------------------------


def model_pipeline(tmp_path, steps):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer.")
    data = {"settings": {"entry_step_id": steps[0]["id"], "redact": True}, "steps": steps}
    return Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))


SECRET_TEXT = "line 1\nstripe key sk_live_4eC39HqLyjWDarjtT1zdp7dcQx\ncard 4111 1111 1111 1111\n"


def test_text_a_tool_call_rehydrates_reaches_the_model_masked(tmp_path, chat_server):
    pid = ptr.pointer_id_of(SECRET_TEXT)[0]
    chat_server.script = [
        {"raw": tool_reply(("c1", "rehydrate", json.dumps({"pointer_id": pid})))},
        {"reply": "done"},
    ]
    model = {
        "provider": "openai",
        "model": "m",
        "base_url": chat_server.url,
        "context_window": 16384,
    }
    steps = [
        {
            "id": "ask",
            "action": "call_model",
            "prompt_key": "sys",
            "model": "small",
            "tools": ["rehydrate"],
            "user_parts": {"q": {"source": "question"}},
            "next": "done",
        },
        {"id": "done", "action": "finalize", "source": "last_model_response"},
    ]
    p = model_pipeline(tmp_path, steps)
    p = Pipeline.from_dict(
        {"settings": {**p.settings, "models": {"small": model}}, "steps": steps},
        file=str(tmp_path / "p.yaml"),
    )
    services = Services(settings=p.settings, base_dir=str(tmp_path))
    put(services.pointers, SECRET_TEXT, "text", run_id="t")
    result = Engine(p, services=services).run({"question": "What is in it?"}, run_id="t")
    assert result.status == "completed", result.error
    second = json.dumps(chat_server.requests[1]["body"]["messages"])
    assert "[SECRET_" in second and "[CARD_" in second and "line 1" in second
    assert "sk_live_4eC39" not in second and "4111 1111 1111 1111" not in second
    [call] = [e for e in result.events if e["type"] == "MODEL_CALL"]
    assert "sk_live_4eC39" not in json.dumps(call)
    kinds = [e["kinds"] for e in result.events if e["type"] == "REDACTED"]
    assert kinds[-1] == {"card": 1, "secret": 1}


def test_a_resumed_run_gets_the_same_placeholders(tmp_path, chat_server):
    # The second model step fails (a 400 is not retried); the run is resumed and the step
    # runs again: its placeholders equal the first step's.
    block = format_block({"id": "n1", "path": "a.cs", "text": SECRET_TEXT})
    steps = [
        {
            "id": s,
            "action": "call_model",
            "prompt_key": "sys",
            "user_parts": {"ev": {"source": "context_blocks"}},
            "next": n,
        }
        for s, n in (("a", "b"), ("b", "done"))
    ] + [{"id": "done", "action": "finalize", "source": "last_model_response"}]
    p = model_pipeline(tmp_path, steps)
    db = str(tmp_path / "runs.db")

    def engine():
        services = Services(
            settings=p.settings, base_dir=str(tmp_path), model_spec=f"openai:m@{chat_server.url}"
        )
        return Engine(p, services=services, store=SqliteRunStore(db))

    chat_server.script = [{"reply": "a"}, {"status": 400}, {"reply": "b"}]
    first = engine().run({"context_blocks": [block]}, run_id="keep")
    assert first.status == "failed"
    resumed = engine().resume("keep")
    assert resumed.status == "completed", resumed.error
    sent = [r["body"]["messages"][-1]["content"] for r in chat_server.requests]
    assert len(sent) == 3 and sent[0] == sent[2]
    assert "4111 1111 1111 1111" not in sent[2] and "[CARD_" in sent[2]
