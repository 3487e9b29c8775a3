"""The pipeline JSON Schema (Draft 2020-12), generated from the action registry.

Each action owns the schema of its step fields; this module adds the fields
every step has (id, action, next, end, retry, catch, ...) and the document
around the steps. The result is checked in as `schemas/pipeline.schema.json`
(a test fails when it is stale) and printed by `runtime schema`.
"""

from __future__ import annotations

import json
from typing import Any

from runtime.context.packs import PACK_BUDGET_SCHEMA
from runtime.context.policy import POLICY_SCHEMA
from runtime.contract.action import STEP_ID_PATTERN, VARIABLE_PATTERN, Action
from runtime.contract.registry import Registry
from runtime.format.compat import UI_FIELDS
from runtime.format.pipeline import INPUT_TYPES
from runtime.format.transitions import fidelity_schema, target_schema
from runtime.governance.exceptions import SCHEMA as EXCEPTIONS_SCHEMA
from runtime.governance.redaction import SCHEMA as REDACT_SCHEMA

SCHEMA_ID = "https://step-runtime.dev/schemas/pipeline.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"

_step_ref = {"type": "string", "pattern": STEP_ID_PATTERN}

COMMON_STEP_FIELDS: dict[str, Any] = {
    "id": {"type": "string", "pattern": STEP_ID_PATTERN, "description": "Unique step id."},
    "action": {"type": "string", "description": "Registered action name (`runtime actions`)."},
    "description": {"type": "string", "description": "What this step is for."},
    "next": target_schema(
        "Step to go to when the action chooses no branch (a step id or "
        "{step, fidelity, thread_id})."
    ),
    "end": {"type": "boolean", "description": "Stop the run after this step."},
    "retry": {
        "type": "object",
        "description": "Retry the step on errors (Amazon States Language style).",
        "properties": {
            "max_attempts": {
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
                "description": "Attempts in all, the first included.",
            },
            "on": {
                "type": "array",
                "items": {"type": "string", "pattern": "^[A-Z][A-Z0-9_]*$"},
                "description": "Error codes to retry (default: every model error).",
            },
            "backoff": {
                "type": "object",
                "properties": {
                    "initial_seconds": {"type": "number", "minimum": 0},
                    "multiplier": {"type": "number", "minimum": 1},
                    "max_seconds": {"type": "number", "minimum": 0},
                    "jitter": {"type": "boolean"},
                },
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    },
    "catch": {
        "type": "object",
        "description": "Error code (or ALL) -> step id (or {step, fidelity, thread_id}) to go "
        "to when the step fails.",
        "propertyNames": {"pattern": "^[A-Z][A-Z0-9_]*$"},
        "additionalProperties": target_schema(),
    },
    # Context fidelity (docs/fidelity.md): read by model steps, declared on any step so a
    # group or thread can span steps of every kind.
    "fidelity": fidelity_schema(
        "How much of the run a model step carries in: full joins a thread, the others start "
        "fresh with a preamble of that size (a transition's fidelity wins over this)."
    ),
    "thread_id": {
        "type": "string",
        "minLength": 1,
        "description": "Thread a `full` step joins (wins over the transition's and the defaults).",
    },
    "group": {
        "type": "string",
        "minLength": 1,
        "description": "A named group of steps; a `full` step with no other thread joins the "
        "group's.",
    },
    **UI_FIELDS,
}

# Not blank, no surrounding whitespace (runtime.retrieval.node.scope_value_problem).
_SCOPE_NAME = r"^\S(.*\S)?$"

SETTINGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Pipeline settings; unknown keys are allowed (read by *_from_settings fields).",
    "properties": {
        "entry_step_id": {**_step_ref, "description": "The step a run starts at."},
        "max_context_tokens": {
            "type": "integer",
            "minimum": 1,
            "description": "Global prompt budget in tokens.",
        },
        "max_turn_loops": {
            "type": "integer",
            "minimum": 1,
            "description": "Default limit of loop_guard steps.",
        },
        "max_steps": {
            "type": "integer",
            "minimum": 1,
            "description": "Global step limit of a run (default 1000).",
        },
        "top_k": {"type": "integer", "minimum": 1, "description": "Default search result count."},
        "compat_mode": {
            "enum": ["locked", "strict", "latest"],
            "description": "locked (or strict, the older engine's word): validate and exec "
            "refuse any drift from the pipeline's lock file (docs/lock.md); latest: the lock "
            "is not enforced.",
        },
        "behavior_version": {
            "type": "string",
            "description": "The older engine's behaviour version; compared with an older "
            "engine's lock file (docs/lock.md).",
        },
        "default_fidelity": fidelity_schema(
            "Fidelity of model steps that neither the transition taken nor the step sets "
            "(default compact)."
        ),
        "default_thread": {
            "type": "string",
            "minLength": 1,
            "description": "Thread of `full` steps that name none (before the step's group).",
        },
        "fidelity": {
            "type": "object",
            "description": "Which variables preambles show: include (only these) and exclude.",
            "properties": {
                "include": {"type": "array", "items": {"type": "string", "minLength": 1}},
                "exclude": {"type": "array", "items": {"type": "string", "minLength": 1}},
            },
            "additionalProperties": False,
        },
        "durability": {
            "type": "string",
            "enum": ["normal", "full"],
            "description": "Checkpoint durability: normal (WAL, no fsync per checkpoint; "
            "default) or full (fsync every checkpoint).",
        },
        "tokenizer": {
            "type": "string",
            "enum": ["cl100k_base", "o200k_base"],
            "description": "Token encoding for budgets.",
        },
        # issue 28 (docs/access.md): redaction before model calls, governed exceptions
        "redact": REDACT_SCHEMA,
        "exceptions": EXCEPTIONS_SCHEMA,
        "prompts_dir": {
            "type": "string",
            "description": "Prompt folder: beside the file, else the working directory, else a "
            "folder above the file (docs/format.md).",
        },
        "memory_store": {
            "type": "string",
            "minLength": 1,
            "description": "The memory store file (memories, experiences, values; relative "
            "to the working directory). Default $RUNTIME_MEMORIES, else memories.db beside "
            "the node index (docs/assembly.md).",
        },
        "search_type": {"type": "string", "enum": ["bm25", "semantic", "hybrid"]},
        "default_search_method": {
            "type": "string",
            "enum": ["bm25", "semantic", "hybrid"],
            "description": "Older engine name: search_type auto falls back to it after search_type.",
        },
        "model_language": {
            "type": "string",
            "minLength": 1,
            "description": "Language the model works in (default en); neutral: never translate.",
        },
        "translator_model": {
            "type": "string",
            "minLength": 1,
            "description": "Named model (settings.models) the translate_* steps use.",
        },
        "plantuml_server": {
            "type": "string",
            "pattern": "^https?://",
            "description": "PlantUML server for add_command_action's showDiagram links.",
        },
        # A pinned scope name is never blank: "" would mean every repository (SCOPE_INVALID).
        "repository": {
            "type": "string",
            "pattern": _SCOPE_NAME,
            "description": "Pins the repository; inputs may only repeat it.",
        },
        "snapshot": {
            "type": "string",
            "pattern": _SCOPE_NAME,
            "description": "Pins the snapshot; inputs may only repeat it.",
        },
        "allowed_labels": {
            "type": "array",
            "items": {"type": "string", "pattern": _SCOPE_NAME},
            "description": "Pins the labels a run may see; inputs may only narrow them.",
        },
        "access": {
            "type": "object",
            "description": "The access policy engine deciding what the run's subject may "
            "read (docs/access.md).",
            "properties": {
                "engine": {
                    "type": "string",
                    "minLength": 1,
                    "description": "builtin (default), cedar, opa, or a third-party engine "
                    "of the step_runtime.access_engines entry-point group.",
                },
                "policies": {
                    "type": "string",
                    "minLength": 1,
                    "description": "cedar: the .cedar policy file.",
                },
                "schema": {
                    "type": "string",
                    "minLength": 1,
                    "description": "cedar: the Cedar schema file (optional).",
                },
                "url": {
                    "type": "string",
                    "pattern": "^https?://",
                    "description": "opa: the rule under OPA's data API (http://host:port/v1/data/...).",
                },
                "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 600},
                "locked": {
                    "type": "boolean",
                    "description": "true: a pipeline extending this one may not change "
                    "settings.access (ACCESS_POLICY_OVERRIDDEN).",
                },
                "overfetch": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 64,
                    "description": "A per-resource engine's search asks the store for this "
                    "many times top_k candidates (default 4), more while top_k is not full.",
                },
            },
            "additionalProperties": True,
        },
        "default_model": {"type": "string"},
        "context_policy": POLICY_SCHEMA,
        "pack_budget": PACK_BUDGET_SCHEMA,
        "models": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["provider"],
                "properties": {
                    "provider": {"type": "string", "enum": ["openai", "extractive", "replay"]},
                    "model": {"type": "string"},
                    "base_url": {"type": "string"},
                    "api_key_env": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                    "context_window": {"type": "integer", "minimum": 1},
                    "tokenizer": {
                        "type": "string",
                        "pattern": "^(cl100k_base|o200k_base|server|hf:.+)$",
                        "description": "cl100k_base, o200k_base, server (the server's "
                        "/tokenize) or hf:PATH (a tokenizer.json); docs/models.md.",
                    },
                    "token_margin": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": 1,
                        "description": "Fraction of the count kept free when the tokenizer "
                        "is not the model's own (default 0).",
                    },
                    "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400},
                    "connect_timeout_seconds": {
                        "type": "number",
                        "exclusiveMinimum": 0,
                        "maximum": 86400,
                    },
                    "deadline_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400},
                    "max_retries": {"type": "integer", "minimum": 0},
                    "cassette": {"type": "string"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "structured_output": {
                        "enum": ["json_schema", "json_object", "none"],
                        "description": "How a step's json_schema reaches the server: "
                        "response_format json_schema (default), json_object, or none.",
                    },
                    "stream": {
                        "type": "boolean",
                        "description": "Stream replies from the server (default true).",
                    },
                    "later_system": {
                        "enum": ["user", "keep"],
                        "description": "System messages after the first: folded into user "
                        "turns (default, for strict chat templates) or kept.",
                    },
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": True,
}

INPUT_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "enum": list(INPUT_TYPES)},
        {
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": list(INPUT_TYPES)},
                "required": {"type": "boolean"},
                "default": {},
                "description": {"type": "string"},
                "maxLength": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Most characters a string input may hold (a run refuses a "
                    "longer one with INPUT_TOO_LONG); bounds the input for static budget checks.",
                },
                "minLength": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Fewest characters a string input may hold (a run refuses a "
                    "shorter one with INPUT_TOO_SHORT).",
                },
                "pattern": {
                    "type": "string",
                    "description": "A regular expression a string input must match somewhere "
                    "(re.search; `\\S`: not blank); a run refuses another with INPUT_PATTERN.",
                },
            },
            "additionalProperties": False,
        },
    ]
}

PIPELINE_FIELDS: dict[str, Any] = {
    "name": {"type": "string", "minLength": 1, "description": "Pipeline name."},
    "description": {"type": "string"},
    "extends": {
        "type": "string",
        "minLength": 1,
        "description": "Parent pipeline: path relative to this file, optionally #name.",
    },
    "abstract": {
        "type": "boolean",
        "description": "A base only meant to be extended: not graph-checked, cannot run.",
    },
    "settings": {"$ref": "#/$defs/settings"},
    "inputs": {
        "type": "object",
        "description": "Declared inputs; with none declared any input is accepted.",
        "propertyNames": {"pattern": VARIABLE_PATTERN},
        "additionalProperties": {"$ref": "#/$defs/input"},
    },
    "outputs": {
        "type": "array",
        "items": {"type": "string", "pattern": VARIABLE_PATTERN},
        "description": "State variables that make up the run's output.",
    },
    "inbox": {
        "type": "object",
        "properties": {"on_leftover": {"type": "string", "enum": ["error", "warn", "ignore"]}},
        "additionalProperties": False,
    },
    "steps": {"type": "array", "items": {"$ref": "#/$defs/step"}},
}


def action_def(action: type[Action]) -> dict[str, Any]:
    """The schema of one action's steps: common fields plus the action's own."""
    properties = dict(COMMON_STEP_FIELDS)
    properties["action"] = {"const": action.name, "description": action.summary}
    properties.update(action.fields)
    for outcome in action.outcomes:  # a branch takes the long form too (docs/format.md)
        declared = properties.get(f"on_{outcome}")
        if declared is not None and declared.get("type") == "string":
            properties[f"on_{outcome}"] = target_schema(
                declared.get("description", ""), pattern="pattern" in declared
            )
    schema: dict[str, Any] = {
        "type": "object",
        "title": action.name,
        "description": action.summary,
        "required": ["id", "action", *action.required],
        "properties": properties,
        "additionalProperties": False,
    }
    schema.update(action.schema_extra)
    return schema


def document_schema(registry: Registry) -> dict[str, Any]:
    """The whole document schema."""
    names = registry.names()
    defs: dict[str, Any] = {
        "settings": SETTINGS_SCHEMA,
        "input": INPUT_SCHEMA,
        "pipeline": {
            "type": "object",
            "properties": PIPELINE_FIELDS,
            "additionalProperties": False,
            "anyOf": [{"required": ["steps"]}, {"required": ["extends"]}],
        },
        "step": {
            "type": "object",
            "required": ["id", "action"],
            "properties": {"action": {"enum": names, "description": "Registered action name."}},
            "allOf": [
                {
                    "if": {"properties": {"action": {"const": n}}, "required": ["action"]},
                    "then": {"$ref": f"#/$defs/action_{n}"},
                }
                for n in names
            ],
        },
    }
    for n in names:
        cls = registry.get(n)
        assert cls is not None
        defs[f"action_{n}"] = action_def(cls)
    return {
        "$schema": DIALECT,
        "$id": SCHEMA_ID,
        "title": "step-runtime pipeline",
        "description": "A step-runtime pipeline file: one pipeline, YAMLpipeline, or a YAMLpipelines pack.",
        "type": "object",
        "properties": {
            **PIPELINE_FIELDS,
            "YAMLpipeline": {"$ref": "#/$defs/pipeline"},
            "YAMLpipelines": {
                "anyOf": [
                    {"type": "array", "items": {"$ref": "#/$defs/pipeline"}},
                    {"type": "object", "additionalProperties": {"$ref": "#/$defs/pipeline"}},
                ]
            },
        },
        "additionalProperties": False,
        "$defs": defs,
    }


def render(schema: dict[str, Any]) -> str:
    """The checked-in text form (stable key order, trailing newline)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
