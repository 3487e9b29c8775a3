"""call_model: render a prompt, check it fits the model's window, call the model."""

from __future__ import annotations

from runtime.action import Action, Outcome, StepContext

_PART = {
    "type": "object",
    "required": ["source"],
    "additionalProperties": False,
    "properties": {
        "source": {"type": "string", "description": "Variable to insert."},
        "template": {"type": "string", "description": "Text with {} marking the value."},
    },
}


class CallModel(Action):
    """System prompt from prompt_key, ordered user_parts, reply to last_model_response."""

    name = "call_model"
    summary = "Call a language model with a system prompt and ordered user parts."
    fields = {
        "prompt_key": {
            "type": "string",
            "minLength": 1,
            "description": "System prompt file under the pipeline's prompts folder.",
        },
        "user_parts": {
            "type": "object",
            "additionalProperties": _PART,
            "description": "Ordered name -> {source, template}.",
        },
        "use_history": {"type": "boolean", "description": "Send conversation_history first."},
        "max_output_tokens": {
            "type": "integer",
            "minimum": 1,
            "description": "Reserved output tokens (default 512).",
        },
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "model": {"type": "string", "description": "A named model from settings.models."},
        "json": {
            "type": "boolean",
            "description": "Require a JSON reply (else INVALID_STRUCTURED_OUTPUT).",
        },
        "json_schema": {"type": "object", "description": "Expected reply shape (JSON Schema)."},
        "fidelity": {
            "enum": ["full", "truncate", "compact", "summary"],
            "description": "How much of earlier context to carry (reserved).",
        },
        "thread_id": {"type": "string", "description": "Conversation thread key (reserved)."},
    }
    required = ("prompt_key",)
    reads = ("conversation_history",)
    writes = ("last_model_response",)

    def run(self, ctx: StepContext) -> Outcome | None:
        """Not runnable yet."""
        raise NotImplementedError
