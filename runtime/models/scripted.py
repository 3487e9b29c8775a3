"""The scripted model: a deterministic caller of tools, for tests and the docs (docs/models.md).

`scripted` follows rules; `scripted:FILE` plays a script first and falls back to the rules
for the steps the script does not name.

**Rules.** Offered tools (`request.tools`), it calls one tool per round, in this order,
each at most as often as said, then answers:

1. `search_nodes` with the first search query: the plan's (`"queries": [...]` in a JSON
   object in the prompt, as the planner role writes), else the question's key terms;
2. `search_nodes` again with the next plan query, else refined with the name of the first
   search's best hit (so a search takes two rounds whenever the first one found anything);
3. `expand_dependency_tree` (`max_depth: 1`, `direction: both`) once a search found nodes;
4. `fetch_node_texts` once;
5. `rehydrate` for each pointer block in the prompt not read yet (at most three).

Offered none (or done), it answers as the offline extractive responder does, from every
evidence block in the conversation (the tool results included), with two JSON shapes of
its own: a schema with a `queries` property gets a plan (`steps`: the question split at
"and" / ";" / "?", `queries`: their key terms), and one with `unknown_citations` gets a
citation check of the draft in the prompt against the evidence ids shown
(`{decision: ok|fail, unknown_citations, cited}`).

**Script.** A JSON or YAML mapping of step id to a list of turns; a turn is
`{tool_calls: [{name, arguments}]}` or `{text: ...}`. A request gets the turn numbered by
the assistant turns already in it (0 for the first request of the step): a step whose
turns are used up answers (as the rules answer, calling no tool); a step the script does
not name follows the rules.

Deterministic: the same request always gets the same reply.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from runtime.errors import ModelError
from runtime.models.base import (
    ChunkCallback,
    ModelConfig,
    ModelRequest,
    ModelResponse,
    ToolCall,
)

_PLAN = re.compile(r'"queries"\s*:\s*\[')
_SPLIT = re.compile(r"\s*(?:;|\?|\band\b|\balso\b)\s*", re.I)
_CITED = re.compile(r"\[([^\[\]\n]{3,300})\]")
MAX_REHYDRATE = 3
_HANDLE = re.compile(r"^handle for \w+: \d+ item\(s\): (.+?)(?: and \d+ more)?$", re.M)


def load_script(path: str) -> dict[str, list[dict[str, Any]]]:
    """The script of a `scripted:FILE` spec: step id -> turns (MODEL_CONFIG_INVALID if bad)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        raise ModelError(
            f"scripted model: cannot read {path}: {type(exc).__name__}",
            code="MODEL_CONFIG_INVALID",
        ) from exc
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ModelError(
            f"scripted model: {path} is not YAML or JSON", code="MODEL_CONFIG_INVALID"
        ) from exc
    ok = isinstance(data, dict) and all(
        isinstance(k, str)
        and isinstance(v, list)
        and all(isinstance(t, dict) and ("text" in t or "tool_calls" in t) for t in v)
        for k, v in data.items()
    )
    if not ok:
        raise ModelError(
            f"scripted model: {path} must map step ids to lists of turns "
            "({tool_calls: [{name, arguments}]} or {text})",
            code="MODEL_CONFIG_INVALID",
        )
    return data


class ScriptedProvider:
    """Calls the offered tools by rule (or by script), then answers extractively."""

    restorable_state = True  # stateless

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.script = load_script(config.cassette) if config.cassette else {}

    def complete(
        self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None
    ) -> ModelResponse:
        """The scripted turn, else the rules' next tool call, else an extractive answer."""
        started = time.perf_counter()
        turn = self._scripted(request)
        calls: list[ToolCall] = []
        if turn is None and request.step_id in self.script:
            text = self._answer(request)  # the step's turns are used up: it answers
        elif turn is not None:
            before = sum(len(m.get("tool_calls") or ()) for m in request.messages)
            calls = [
                ToolCall(
                    f"call_{before + i + 1}",
                    str(c.get("name", "")),
                    c["arguments"]
                    if isinstance(c.get("arguments"), str)
                    else json.dumps(c.get("arguments", {})),
                )
                for i, c in enumerate(turn.get("tool_calls") or ())
            ]
            text = "" if calls else str(turn.get("text", ""))
        else:
            calls = next_calls(request)
            text = "" if calls else self._answer(request)
        if on_chunk is not None and text:
            on_chunk(text)
        from runtime.context.tokens import get_counter

        count = get_counter(self.config.tokenizer).count
        return ModelResponse(
            text,
            sum(count(m.get("content") or "") for m in request.messages),
            count(text),
            round((time.perf_counter() - started) * 1000, 3),
            "scripted",
            "scripted",
            "tool_calls" if calls else "stop",
            calls,
        )

    def _scripted(self, request: ModelRequest) -> dict[str, Any] | None:
        turns = self.script.get(request.step_id)
        if not turns:
            return None
        done = sum(
            1 for m in request.messages if m.get("role") == "assistant" and m.get("tool_calls")
        )
        return turns[done] if done < len(turns) else None

    def _answer(self, request: ModelRequest) -> str:
        from runtime.models.evidence import question_of, split_prompt
        from runtime.models.extractive import ExtractiveProvider

        props = (request.json_schema or {}).get("properties") or {}
        users = [m.get("content") or "" for m in request.messages if m.get("role") == "user"]
        if request.json_mode and "queries" in props:
            return json.dumps(plan(question_of(users[-1]) if users else ""), ensure_ascii=False)
        if request.json_mode and "unknown_citations" in props:
            shown = {
                b.id
                for m in request.messages
                for b in split_prompt(m.get("content") or "").blocks
                if b.id
            }
            for m in request.messages:  # a handle lists the ids of the items behind it
                for listed in _HANDLE.findall(m.get("content") or ""):
                    shown.update(x.strip() for x in listed.split(", ") if x.strip())
            return json.dumps(check_citations("\n".join(users), shown), ensure_ascii=False)
        # Tools are not offered again to the responder: it would call rehydrate by its rules.
        plain = ModelRequest(**{**request.__dict__, "tools": None})
        return ExtractiveProvider(self.config).complete(plain).text


def plan(question: str) -> dict[str, Any]:
    """The planner's reply: the question split into steps, and a search query for each."""
    from runtime.models.extractive import key_terms

    parts = [p.strip(" ,.") for p in _SPLIT.split(question) if p and p.strip(" ,.")]
    steps = parts or [question]
    queries = [q for q in dict.fromkeys(key_terms(s) for s in steps) if q]
    return {"steps": steps, "queries": queries or [key_terms(question) or question]}


def check_citations(text: str, shown: set[str]) -> dict[str, Any]:
    """The citations (`[node id]`) in a draft, and those naming no evidence block shown."""
    cited = list(dict.fromkeys(m.group(1).strip() for m in _CITED.finditer(text)))
    cited = [c for c in cited if "::" in c or c.startswith("ptr-")]
    unknown = [c for c in cited if c not in shown]
    ok = bool(cited) and not unknown
    return {"decision": "ok" if ok else "fail", "unknown_citations": unknown, "cited": cited}


def _offered(request: ModelRequest) -> set[str]:
    return {
        str((t.get("function") or {}).get("name"))
        for t in request.tools or ()
        if isinstance(t, dict)
    }


def _made(request: ModelRequest) -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, result) of each call so far in the conversation."""
    results = {
        m.get("tool_call_id"): m.get("content") or ""
        for m in request.messages
        if m.get("role") == "tool"
    }
    out = []
    for m in request.messages:
        for c in m.get("tool_calls") or ():
            fn = c.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {}
            out.append(
                (
                    str(fn.get("name")),
                    args if isinstance(args, dict) else {},
                    results.get(c.get("id"), ""),
                )
            )
    return out


def next_calls(request: ModelRequest) -> list[ToolCall]:
    """The rules' next tool call (one per round), or [] to answer."""
    offered = _offered(request)
    if not offered:
        return []
    made = _made(request)
    names = [name for name, _, _ in made]
    number = len(made) + 1

    def call(name: str, args: dict[str, Any]) -> list[ToolCall]:
        return [ToolCall(f"call_{number}", name, json.dumps(args, ensure_ascii=False))]

    if "search_nodes" in offered:
        queries = plan_queries(request)
        searched = [a.get("query") for n, a, _ in made if n == "search_nodes"]
        if not searched:
            return call("search_nodes", {"query": queries[0]})
        if len(searched) == 1:
            if len(queries) > 1:
                return call("search_nodes", {"query": queries[1]})
            first = next(r for n, _, r in made if n == "search_nodes")
            refined = _best_name(first)
            if refined and refined.lower() not in str(searched[0]).lower():
                return call("search_nodes", {"query": f"{refined} {searched[0]}"})
    found = any(n == "search_nodes" and '"id"' in r for n, _, r in made)
    if "expand_dependency_tree" in offered and found and "expand_dependency_tree" not in names:
        return call("expand_dependency_tree", {"max_depth": 1, "direction": "both"})
    if "fetch_node_texts" in offered and "fetch_node_texts" not in names:
        return call("fetch_node_texts", {})
    if "rehydrate" in offered and "rehydrate" not in names:
        from runtime.models.extractive import rehydrate_calls

        plain = ModelRequest(
            **{
                **request.__dict__,
                "messages": [m for m in request.messages if m.get("role") != "tool"],
            }
        )
        calls = rehydrate_calls(plain)[:MAX_REHYDRATE]
        return [ToolCall(f"call_{number + i}", c.name, c.arguments) for i, c in enumerate(calls)]
    return []


def plan_queries(request: ModelRequest) -> list[str]:
    """The plan's `queries` (a JSON object in the last user message), else the key terms."""
    from runtime.models.evidence import question_of
    from runtime.models.extractive import key_terms

    users = [m.get("content") or "" for m in request.messages if m.get("role") == "user"]
    text = users[-1] if users else ""
    for found in _PLAN.finditer(text):
        start = text.rfind("{", 0, found.start())
        if start < 0:
            continue
        try:
            value, _ = json.JSONDecoder().raw_decode(text[start:])
        except ValueError:
            continue
        queries = value.get("queries") if isinstance(value, dict) else None
        if isinstance(queries, list):
            kept = [q for q in queries if isinstance(q, str) and q.strip()]
            if kept:
                return kept
    question = question_of(text)
    return [key_terms(question) or question or "code"]


def _best_name(result: str) -> str:
    """The short name of the first hit in a search_nodes result (`...::Sales.usp_X` -> usp_X)."""
    for line in result.splitlines():
        if line.startswith("{") and '"id"' in line:
            try:
                hit = json.loads(line)
            except ValueError:
                continue
            node = str(hit.get("id", "")).split("::")[-1].split("@")[0]
            return node.split(".")[-1]
    return ""
