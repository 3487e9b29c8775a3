"""translate_in_if_needed and translate_out_if_needed: real HTTP translation, honest identity."""

from __future__ import annotations

from typing import Any

import pytest

from actions.translate_in_if_needed import BUILTIN_PROMPT
from actions.translate_out_if_needed import RULES, TO_QUESTION
from runtime.contract.registry import default_registry
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline
from runtime.format.source import SourceMap
from runtime.format.validation import check_pipeline

QUESTION = "Gdzie liczona jest suma koszyka?"
MD_PROMPT = (
    "You translate Markdown from English to Polish.\n\nINPUT: one Markdown document between:\n"
    "<<<MARKDOWN_EN\n...\nMARKDOWN_EN\n\nOUTPUT: the Polish translation. If you cannot, "
    "output exactly:\nERROR\n"
)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "prompts" / "utility").mkdir(parents=True)
    (tmp_path / "prompts" / "utility" / "translate_md_en_pl.txt").write_text(MD_PROMPT)
    return tmp_path


def models(url: str, **extra: Any) -> dict[str, Any]:
    return {"models": {"tr": {"provider": "openai", "model": "mt", "base_url": url, **extra}}}


def run(folder, steps: list[dict[str, Any]], inputs: dict[str, Any], **settings: Any):
    data = {
        "settings": {"entry_step_id": steps[0]["id"], **settings},
        "steps": [*steps, {"id": "end", "action": "finalize"}],
    }
    p = Pipeline.from_dict(data, file=str(folder / "p.yaml"))
    services = Services(settings=p.settings, base_dir=str(folder))
    return Engine(p, services=services).run(inputs, run_id="t")


def notes(result) -> list[tuple[str, bool, str]]:
    return [
        (e["direction"], e["translated"], e.get("reason", e.get("model")))
        for e in result.events
        if e["type"] == "TRANSLATE"
    ]


IN = {"id": "tin", "action": "translate_in_if_needed", "next": "end"}
OUT = {"id": "tout", "action": "translate_out_if_needed", "next": "end"}


def test_translate_in_through_the_configured_translator_over_http(folder, chat_server):
    chat_server.script = [{"reply": " Where is the basket total computed? \n"}]
    r = run(
        folder,
        [IN],
        {"user_query": QUESTION, "translate_chat": True, "answer": "a"},
        translator_model="tr",
        **models(chat_server.url),
    )
    assert r.status == "completed"
    assert r.state["user_question_neutral"] == "Where is the basket total computed?"
    [request] = chat_server.requests
    assert request["body"]["model"] == "mt"
    assert request["body"]["messages"] == [
        {"role": "system", "content": BUILTIN_PROMPT.format(language="English")},
        {"role": "user", "content": QUESTION},
    ]
    assert request["body"]["max_tokens"] == 512
    assert notes(r) == [("in", True, "settings.translator_model 'tr'")]
    [call] = [e for e in r.events if e["type"] == "MODEL_CALL"]
    assert (call["step_id"], call["provider"], call["tokens_in"]) == ("tin", "openai", 11)


@pytest.mark.parametrize(
    "inputs,settings,reason,translate_chat",
    [
        (
            {"translate_chat": False},
            {"translator_model": "tr"},
            "translate_chat is not true",
            False,
        ),
        ({}, {"translator_model": "tr"}, "translate_chat is not true", None),
        (
            {"translate_chat": True},
            {"translator_model": "tr", "model_language": "neutral"},
            "settings.model_language is neutral",
            False,
        ),
        (
            {"translate_chat": True},
            {},
            "no translator is configured (a step `model:`, `use_main_model: true` or "
            "settings.translator_model)",
            True,
        ),
    ],
)
def test_translate_in_keeps_the_question_and_says_why(
    folder, chat_server, inputs, settings, reason, translate_chat
):
    r = run(
        folder,
        [IN],
        {"user_query": QUESTION, "answer": "a", **inputs},
        **settings,
        **models(chat_server.url),
    )
    assert r.status == "completed" and chat_server.requests == []
    assert r.state["user_question_neutral"] == QUESTION
    assert r.state.get("translate_chat") == translate_chat
    assert notes(r) == [("in", False, reason)]


def test_the_offline_extractive_responder_never_pretends_to_translate(folder):
    step = {**IN, "use_main_model": True}
    r = run(folder, [step], {"user_query": QUESTION, "translate_chat": True, "answer": "a"})
    assert r.state["user_question_neutral"] == QUESTION
    assert notes(r) == [
        ("in", False, "the main model is the offline extractive responder, which cannot translate")
    ]
    assert [e for e in r.events if e["type"] == "MODEL_CALL"] == []


def test_translate_in_needs_its_question(folder):
    r = run(folder, [IN], {"translate_chat": True})
    assert (r.error.code, r.error.step_id) == ("VARIABLE_MISSING", "tin")
    r = run(folder, [IN], {"user_query": ["not", "text"]})
    assert r.error.code == "VARIABLE_TYPE"


def test_translate_out_with_the_older_engines_prompt_and_markers(folder, chat_server):
    chat_server.script = [{"reply": "Suma jest liczona w `Basket.Total`."}]
    step = {**OUT, "model": "tr", "translate_prompt_key": "utility/translate_md_en_pl"}
    r = run(
        folder,
        [step],
        {
            "user_query": QUESTION,
            "translate_chat": True,
            "answer_neutral": "The total is computed in `Basket.Total`.",
            "answer_translated": None,
        },
        **models(chat_server.url),
    )
    assert r.status == "completed"
    assert r.state["answer_translated"] == "Suma jest liczona w `Basket.Total`."
    # finalize prefers the translation when the run asked for one.
    assert r.state["final_answer"] == "Suma jest liczona w `Basket.Total`."
    assert chat_server.requests[0]["body"]["messages"] == [
        {"role": "system", "content": MD_PROMPT.strip()},
        {
            "role": "user",
            "content": "<<<MARKDOWN_EN\nThe total is computed in `Basket.Total`.\nMARKDOWN_EN",
        },
    ]
    assert notes(r) == [("out", True, "step model 'tr'")]


def test_translate_out_into_the_language_of_the_question(folder, chat_server):
    chat_server.script = [{"reply": "Odpowiedź."}]
    r = run(
        folder,
        [{**OUT, "model": "tr", "max_output_tokens": 100}],
        {"user_query": QUESTION, "translate_chat": True, "answer_neutral": "Answer."},
        **models(chat_server.url),
    )
    assert r.state["answer_translated"] == "Odpowiedź."
    body = chat_server.requests[0]["body"]
    assert body["max_tokens"] == 100
    assert body["messages"] == [
        {"role": "system", "content": TO_QUESTION + RULES},
        {
            "role": "user",
            "content": f"<<<QUESTION\n{QUESTION}\nQUESTION\n<<<MARKDOWN\nAnswer.\nMARKDOWN",
        },
    ]


def test_a_declined_translation_keeps_the_answer_and_says_so(folder, chat_server):
    chat_server.script = [{"reply": "ERROR"}]
    step = {**OUT, "model": "tr", "target_language": "pl"}
    r = run(
        folder,
        [step],
        {"translate_chat": True, "answer_neutral": "Answer."},
        **models(chat_server.url),
    )
    assert r.state["answer_translated"] == "Answer."
    assert notes(r) == [("out", False, "step model 'tr' returned no translation")]
    assert chat_server.requests[0]["body"]["messages"][0]["content"].startswith(
        "Translate the Markdown document between <<<MARKDOWN and MARKDOWN into Polish. "
    )


def test_translate_out_writes_nothing_when_not_asked_or_nothing_to_translate(folder):
    r = run(folder, [OUT], {"answer_neutral": "Answer."})
    assert "answer_translated" not in r.state and r.state["final_answer"] == "Answer."
    r = run(folder, [OUT], {"translate_chat": True, "answer_neutral": None, "answer": "a"})
    assert "answer_translated" not in r.state
    assert notes(r) == [("out", False, "'answer_neutral' holds no answer")]


def test_the_window_is_checked_before_a_translation_is_sent(folder, chat_server):
    r = run(
        folder,
        [{**OUT, "model": "tr"}],
        {"user_query": QUESTION, "translate_chat": True, "answer_neutral": "word " * 300},
        **models(chat_server.url, context_window=600),
    )
    assert (r.error.code, r.error.step_id) == ("CONTEXT_OVERFLOW", "tout")
    assert chat_server.requests == []


def diags(steps: list[dict[str, Any]], **settings: Any) -> list[tuple[str, str, str]]:
    data = {"settings": {"entry_step_id": steps[0]["id"], **settings}, "steps": steps}
    p = Pipeline.from_dict(data, file="/nowhere/p.yaml")
    return [
        (d.code, d.severity, d.path)
        for d in check_pipeline(data, SourceMap(data, "p.yaml"), default_registry(), prompts=p)
    ]


def test_validation_checks_the_translator_and_the_prompt_file():
    steps = [
        {**IN, "model": "nope", "next": "tout"},
        # It translates the question IN wrote (answer_neutral is written by no step here).
        {
            **OUT,
            "source": "user_question_neutral",
            "translate_prompt_key": "utility/missing",
            "next": "end",
        },
        {"id": "end", "action": "finalize"},
    ]
    assert diags(steps, translator_model="absent", models={"x": {"provider": "extractive"}}) == [
        ("MODEL_UNKNOWN", "error", "$.steps[0].model"),
        ("MODEL_UNKNOWN", "error", "$.steps[1].action"),
        ("PROMPT_NOT_FOUND", "error", "$.steps[1].translate_prompt_key"),
    ]


def test_settings_redact_masks_what_the_translator_receives(folder, chat_server):
    chat_server.script = [{"reply": "Is card [CARD_x] blocked?"}]
    question = "Czy karta 4111 1111 1111 1111 jest zablokowana?"
    r = run(
        folder,
        [IN],
        {"user_query": question, "translate_chat": True, "answer": "a"},
        translator_model="tr",
        redact=True,
        **models(chat_server.url),
    )
    assert r.status == "completed"
    [request] = chat_server.requests
    sent = request["body"]["messages"][-1]["content"]
    assert "4111 1111 1111 1111" not in sent and "[CARD_" in sent
    [event] = [e for e in r.events if e["type"] == "REDACTED"]
    assert event["kinds"] == {"card": 1}
