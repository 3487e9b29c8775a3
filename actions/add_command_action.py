"""add_command_action: permission-gated command links under the answer (the older engine's)."""

from __future__ import annotations

import html
import re
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from runtime.contract.action import Action, Outcome, Problem, StepContext, VariableRead

# Where the links go: the first of these holding text (the older engine's order).
ANSWER_FIELDS = ("final_answer", "answer_translated", "answer_neutral", "last_model_response")
_DIAGRAM = re.compile(r"@startuml.*?@enduml", re.I | re.S)
# PlantUML's own 64-character alphabet for its deflate text encoding.
_PLANTUML_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_"
# Command types the older engine had that need parts step-runtime does not include.
UNAVAILABLE = {
    "ea_export": "it needs the older engine's PlantUML-to-XMI converter, not part of step-runtime",
}


def plantuml_encode(text: str) -> str:
    """PlantUML's URL encoding of a diagram: raw deflate, then its 64-character alphabet."""
    data = zlib.compress(text.encode("utf-8"), 9)[2:-4]  # drop the zlib header and checksum
    out: list[str] = []
    for i in range(0, len(data), 3):
        chunk = data[i : i + 3] + b"\0" * (3 - len(data[i : i + 3]))
        n = int.from_bytes(chunk, "big")
        out.extend(_PLANTUML_ALPHABET[(n >> shift) & 0x3F] for shift in (18, 12, 6, 0))
    return "".join(out)


def _show_diagram(answer: str, ctx: StepContext) -> tuple[str | None, str]:
    """A link that opens the answer's first PlantUML diagram on the configured server."""
    server = ctx.settings.get("plantuml_server")
    if not isinstance(server, str) or not server:
        return None, "settings.plantuml_server is not set"
    match = _DIAGRAM.search(answer)
    if match is None:
        return None, "the answer holds no @startuml ... @enduml diagram"
    url = f"{server.rstrip('/')}/uml/{plantuml_encode(match.group(0))}"
    if url in answer:
        return None, "the answer already links the diagram"
    label = "Otwórz diagram UML" if ctx.get("translate_chat", False) is True else "Open UML diagram"
    return (
        f'<a class="command-link" href="{html.escape(url)}" target="_blank" '
        f'rel="noopener noreferrer">{label}</a>'
    ), ""


# Command type -> builder of its link (None and the reason when it does not apply).
COMMANDS: dict[str, Callable[[str, StepContext], tuple[str | None, str]]] = {
    "showDiagram": _show_diagram,
}


def command_types(step: Mapping[str, Any]) -> list[str]:
    """The command types of the step, in order (`- type: X` or `- X`)."""
    out = []
    for item in step.get("commands") or []:
        name = item.get("type") if isinstance(item, Mapping) else item
        if isinstance(name, str) and name.strip():
            out.append(name.strip())
    return out


class AddCommandAction(Action):
    """Append links for the permitted, applicable commands to the answer text."""

    name = "add_command_action"
    summary = "Append permission-gated command links (such as a diagram link) to the answer."
    fields = {
        "commands": {
            "type": "array",
            "minItems": 1,
            "items": {
                "anyOf": [
                    {"type": "string", "minLength": 1},
                    {
                        "type": "object",
                        "required": ["type"],
                        "properties": {"type": {"type": "string", "minLength": 1}},
                        "additionalProperties": False,
                    },
                ]
            },
            "description": "Command types in order: `- type: showDiagram` (or `- showDiagram`).",
        },
        "permissions_from": {
            "type": "string",
            "description": "Variable listing the permitted command types (default "
            "allowed_commands).",
        },
    }
    required = ("commands",)
    reads = ("allowed_commands", "translate_chat", *ANSWER_FIELDS)
    writes = ("commands_applied", *ANSWER_FIELDS)
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Command types step-runtime cannot build are skipped at run time: say so now."""
        for i, name in enumerate(command_types(step)):
            if name in COMMANDS:
                continue
            why = UNAVAILABLE.get(name, f"no such command (available: {', '.join(COMMANDS)})")
            yield Problem(
                "COMMAND_UNSUPPORTED",
                f"command {name!r} is skipped at run time: {why}",
                ("commands", i),
                severity="warning",
            )

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """A `permissions_from` the step names; the answer fields may be unset (no links)."""
        if isinstance(step.get("permissions_from"), str):
            yield VariableRead((step["permissions_from"],), ("permissions_from",))

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """commands_applied; an answer field only when it is already set (so not here)."""
        yield "commands_applied"

    def run(self, ctx: StepContext) -> Outcome | None:
        """Build each permitted command's link; append them all in one line."""
        allowed = ctx.get(ctx.step.get("permissions_from", "allowed_commands"), None)
        permitted = (
            {a for a in allowed if isinstance(a, str)} if isinstance(allowed, list) else set()
        )
        field = next((f for f in ANSWER_FIELDS if isinstance(ctx.get(f, None), str)), None)
        answer = ctx.get(field) if field else ""
        links: list[str] = []
        applied: list[str] = []
        skipped: dict[str, str] = {}
        for name in command_types(ctx.step):
            build = COMMANDS.get(name)
            if build is None:
                skipped[name] = UNAVAILABLE.get(name, "no such command")
            elif name not in permitted:
                skipped[name] = "not in the run's allowed_commands"
            elif not answer.strip():
                skipped[name] = "there is no answer text"
            else:
                link, why = build(answer, ctx)
                if link is None:
                    skipped[name] = why
                else:
                    links.append(link)
                    applied.append(name)
        if links and field is not None:
            ctx.set(field, f'{answer}\n\n<div class="command-links">{" ".join(links)}</div>')
        ctx.set("commands_applied", applied)
        ctx.trace("COMMANDS", applied=applied, skipped=skipped, field=field)
        return None
