"""The server's OpenAPI 3 document (served at /openapi.json; checked in tests/serve)."""

from __future__ import annotations

from typing import Any

_ERROR = {"$ref": "#/components/schemas/Error"}
_OBJ = {"type": "object"}


def _resp(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema or _OBJ}}}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(s): _resp("a coded error", _ERROR) for s in statuses}


def _run_id() -> dict[str, Any]:
    return {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _html(summary: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    page = {"description": "HTML", "content": {"text/html": {"schema": {"type": "string"}}}}
    return {"get": {"summary": summary, "parameters": parameters, "responses": {"200": page}}}


def document(title: str = "step-runtime serve") -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route (docs/serve.md)."""
    from importlib.metadata import version

    statuses = {"type": "string", "enum": ["running", "interrupted", "completed", "failed"]}
    message = {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"type": "string", "enum": ["system", "developer", "user", "assistant"]},
            "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": _OBJ}]},
        },
    }
    paths: dict[str, Any] = {
        "/v1/chat/completions": {
            "post": {
                "summary": "OpenAI-compatible chat completion: model = a served pipeline",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["model", "messages"],
                                "properties": {
                                    "model": {"type": "string"},
                                    "messages": {"type": "array", "items": message, "minItems": 1},
                                    "stream": {"type": "boolean", "default": False},
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "the answer (JSON), or SSE chunks ending in data: [DONE]",
                        "headers": {"X-Run-Id": {"schema": {"type": "string"}}},
                        "content": {
                            "application/json": {"schema": _OBJ},
                            "text/event-stream": {"schema": {"type": "string"}},
                        },
                    },
                    **_errors(400, 401, 404, 413, 429, 499, 500, 502, 504),
                },
            }
        },
        "/v1/models": {
            "get": {
                "summary": "The served pipelines",
                "responses": {"200": _resp("model list"), **_errors(401)},
            }
        },
        "/runs": {
            "post": {
                "summary": "Start a run (202 with its id), or wait for it with ?wait=true",
                "parameters": [_query("wait", {"type": "boolean"}, "wait for the run to end")],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["pipeline"],
                                "properties": {"pipeline": {"type": "string"}, "inputs": _OBJ},
                            }
                        }
                    },
                },
                "responses": {
                    "200": _resp("the ended run (?wait=true)"),
                    "202": _resp("the run id"),
                    **_errors(400, 401, 404, 413, 429, 499, 504),
                },
            },
            "get": {
                "summary": "Recent runs, newest first",
                "parameters": [
                    _query("pipeline", {"type": "string"}, "only this pipeline's runs"),
                    _query("status", statuses, "only runs with this status"),
                    _query(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": 1000},
                        "at most this many",
                    ),
                ],
                "responses": {"200": _resp("runs"), **_errors(400, 401)},
            },
        },
        "/runs/{run_id}": {
            "get": {
                "summary": "One run: status, inputs, output, error",
                "parameters": [_run_id()],
                "responses": {"200": _resp("the run"), **_errors(401, 404)},
            }
        },
        "/runs/{run_id}/trace": {
            "get": {
                "summary": "The run's trace events",
                "parameters": [
                    _run_id(),
                    _query("type", {"type": "string"}, "only events of this type"),
                    _query("step", {"type": "string"}, "only events of this step"),
                ],
                "responses": {"200": _resp("events"), **_errors(401, 404)},
            }
        },
        "/runs/{run_id}/context": {
            "get": {
                "summary": "The run's context packs",
                "parameters": [_run_id()],
                "responses": {"200": _resp("packs"), **_errors(401, 404)},
            }
        },
        "/runs/{run_id}/cancel": {
            "post": {
                "summary": "Cancel a run this server has going",
                "parameters": [_run_id()],
                "responses": {"202": _resp("cancelling"), **_errors(401, 404, 409)},
            }
        },
        "/healthz": {"get": {"summary": "Liveness", "responses": {"200": _resp("ok")}}},
        "/openapi.json": {
            "get": {"summary": "This document", "responses": {"200": _resp("OpenAPI 3.1")}}
        },
        "/": {
            "get": {
                "summary": "The run inspector (HTML)",
                "responses": {
                    "200": {
                        "description": "HTML",
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        # the inspector's own pages and the JSON they poll (runtime/serve/inspector.py)
        "/inspect/runs/{run_id}": _html("The inspector's page of one run", [_run_id()]),
        "/inspect/api/runs": {
            "get": {"summary": "The inspector's runs list", "responses": {"200": _resp("runs")}}
        },
        "/inspect/api/runs/{run_id}": {
            "get": {
                "summary": "A run's status and event count (the inspector polls it)",
                "parameters": [_run_id()],
                "responses": {"200": _resp("status"), **_errors(404)},
            }
        },
        "/inspect/static/{name}": {
            "get": {
                "summary": "The inspector's script and stylesheet",
                "parameters": [
                    {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": {"description": "the file"},
                    "404": {"description": "no such file"},
                },
            }
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version("step-runtime")},
        "paths": paths,
        "components": {
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {
                                "code": {"type": "string"},
                                "message": {"type": "string"},
                            },
                        }
                    },
                }
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
    }
