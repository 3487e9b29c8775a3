"""add_command_action: permission-gated command links, written under the answer."""

from __future__ import annotations

import zlib
from typing import Any

from actions.add_command_action import plantuml_encode
from runtime.contract.registry import default_registry
from runtime.engine import Engine
from runtime.format.pipeline import Pipeline
from runtime.format.source import SourceMap
from runtime.format.validation import check_pipeline

SERVER = "https://plantuml.example/plantuml"
DIAGRAM = "@startuml\nBasket -> Order : place\n@enduml"
ANSWER = f"[Answer:]\n\n```plantuml\n{DIAGRAM}\n```"
STEP = {
    "id": "cmd",
    "action": "add_command_action",
    "commands": [{"type": "showDiagram"}, {"type": "ea_export"}],
    "next": "end",
}


def run(inputs: dict[str, Any], step: dict[str, Any] = STEP, **settings: Any):
    data = {
        "settings": {"entry_step_id": "cmd", **settings},
        "steps": [step, {"id": "end", "action": "finalize"}],
    }
    return Engine(Pipeline.from_dict(data)).run(inputs, run_id="t")


def _decode(encoded: str) -> str:
    """PlantUML's decoder, written from its alphabet, to check the encoder round-trips."""
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_"
    bits = b"".join(
        int.to_bytes(
            sum(
                alphabet.index(c) << s
                for c, s in zip(encoded[i : i + 4], (18, 12, 6, 0), strict=True)
            ),
            3,
            "big",
        )
        for i in range(0, len(encoded), 4)
    )
    return zlib.decompressobj(-15).decompress(bits).decode()


def test_plantuml_encoding_round_trips_and_matches_a_known_value():
    assert _decode(plantuml_encode(DIAGRAM)) == DIAGRAM
    # The PlantUML documentation's example diagram and its encoding.
    assert plantuml_encode("Bob -> Alice : hello") == "SyfFKj2rKt3CoKnELR1Io4ZDoSa70000"


def test_a_permitted_diagram_link_is_appended_to_the_answer():
    r = run(
        {"answer_neutral": ANSWER, "allowed_commands": ["showDiagram", "ea_export"]},
        plantuml_server=SERVER + "/",
    )
    link = f"{SERVER}/uml/{plantuml_encode(DIAGRAM)}"
    expected = (
        f'{ANSWER}\n\n<div class="command-links"><a class="command-link" href="{link}" '
        'target="_blank" rel="noopener noreferrer">Open UML diagram</a></div>'
    )
    assert r.state["answer_neutral"] == expected
    assert r.state["final_answer"] == expected  # finalize takes the older engine's answer
    assert r.state["commands_applied"] == ["showDiagram"]
    [event] = [e for e in r.events if e["type"] == "COMMANDS"]
    assert (event["applied"], event["skipped"], event["field"]) == (
        ["showDiagram"],
        {
            "ea_export": "it needs the older engine's PlantUML-to-XMI converter, not part of "
            "step-runtime"
        },
        "answer_neutral",
    )


def test_the_label_follows_the_users_language_and_the_translation_gets_the_links():
    r = run(
        {
            "answer_neutral": "x",
            "answer_translated": ANSWER,
            "translate_chat": True,
            "allowed_commands": ["showDiagram"],
        },
        plantuml_server=SERVER,
    )
    assert r.state["answer_neutral"] == "x"
    assert r.state["answer_translated"].endswith(">Otwórz diagram UML</a></div>")
    assert r.state["final_answer"] == r.state["answer_translated"]


def test_commands_run_only_with_permission_server_and_diagram():
    cases = [
        ({"answer_neutral": ANSWER}, SERVER, "not in the run's allowed_commands"),
        ({"answer_neutral": ANSWER, "allowed_commands": ["ea_export"]}, SERVER, None),
        ({"answer_neutral": ANSWER, "allowed_commands": ["showDiagram"]}, None, "server"),
        ({"answer_neutral": "no diagram", "allowed_commands": ["showDiagram"]}, SERVER, "diag"),
    ]
    reasons = []
    for inputs, server, _ in cases:
        settings = {"plantuml_server": server} if server else {}
        r = run(inputs, **settings)
        assert r.state["commands_applied"] == []
        assert r.state["final_answer"] == inputs["answer_neutral"]
        [event] = [e for e in r.events if e["type"] == "COMMANDS"]
        reasons.append(event["skipped"]["showDiagram"])
    assert reasons == [
        "not in the run's allowed_commands",
        "not in the run's allowed_commands",
        "settings.plantuml_server is not set",
        "the answer holds no @startuml ... @enduml diagram",
    ]


def test_unknown_and_unavailable_commands_are_warnings_at_validation():
    step = {**STEP, "commands": ["showDiagram", {"type": "ea_export"}, "showDiagrm"]}
    data = {
        "settings": {"entry_step_id": "cmd"},
        "steps": [step, {"id": "end", "action": "finalize"}],
        "inputs": {"answer_neutral": "string"},  # what finalize reads comes in
    }
    found = [
        (d.code, d.severity, d.path, d.message)
        for d in check_pipeline(data, SourceMap(data, "p.yaml"), default_registry())
    ]
    assert found == [
        (
            "COMMAND_UNSUPPORTED",
            "warning",
            "$.steps[0].commands[1]",
            "command 'ea_export' is skipped at run time: it needs the older engine's "
            "PlantUML-to-XMI converter, not part of step-runtime",
        ),
        (
            "COMMAND_UNSUPPORTED",
            "warning",
            "$.steps[0].commands[2]",
            "command 'showDiagrm' is skipped at run time: no such command (available: showDiagram)",
        ),
    ]
