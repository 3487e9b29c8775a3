"""Tools a model step offers its model (`tools: [rehydrate]`), and the bounded call rounds.

A round: the model answers with tool calls instead of text; each call runs here and
its result goes back as a `tool` message; the model is asked again. After
`max_tool_rounds` rounds the model is asked once more with no tools offered, so it
must answer; a model that still calls a tool then fails the step with
`MODEL_TOOL_ROUNDS_EXCEEDED`.

A tool result is exact or absent, never cut: a rehydrated slice that does not fit what
is left of the prompt budget comes back as an error naming its size and the room left, so
the model can ask for a smaller slice. No request goes over the budget: when the tool
calls and the refusals alone leave the next request over it, the step fails with
`CONTEXT_OVERFLOW` (catchable) instead of sending it. Unknown tools, arguments that are not a JSON object
and failed rehydrations are answered the same way (an error the model reads) and each
is traced (`MODEL_TOOL_CALL` with its error code): the model caused them and can fix
them in the next round.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from runtime.context.injection import neutralise, scan
from runtime.contract.action import Path, StepContext
from runtime.contract.text import invalid_text
from runtime.errors import ContextOverflowError, ModelError, StepRuntimeError

DEFAULT_TOOL_ROUNDS = 3
MAX_TOOL_ROUNDS = 10
# A tool call's arguments are read only up to this many characters (rehydrate's are a
# pointer id and a slice of at most 1,000 characters, escapes included): longer ones are
# refused unread, and echoed back to the model as a short note instead of whole.
MAX_TOOL_ARGUMENTS = 8_192

REHYDRATE_SPEC: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "rehydrate",
        "description": (
            "Fetch the exact original behind a pointer (a block marked as elided), whole or "
            "a slice of it."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "pointer_id": {"type": "string", "description": "The pointer's id."},
                "slice": {
                    "type": "string",
                    "description": "Optional: `lines A-B`, a JSON path such as `$.items[3]`, "
                    "or `hunk N` of a diff; omit for the whole original.",
                },
            },
            "required": ["pointer_id"],
            "additionalProperties": False,
        },
    },
}
SPECS = {"rehydrate": REHYDRATE_SPEC}


def _rehydrate(ctx: StepContext, args: dict[str, Any], room: int, token_bytes: int | None) -> str:
    """The original (or slice) behind a pointer; SliceTooLarge when over room by a bound."""
    from runtime.context.pointers import rehydrate

    pointer_id = args.get("pointer_id")
    part = args.get("slice")
    if not isinstance(pointer_id, str) or (part is not None and not isinstance(part, str)):
        raise ModelError(
            "rehydrate takes {pointer_id: string, slice?: string}", code="TOOL_ARGUMENTS_INVALID"
        )
    return str(rehydrate(ctx, pointer_id, part, max_tokens=max(room, 0), token_bytes=token_bytes))


HANDLERS: dict[str, Callable[[StepContext, dict[str, Any], int, int | None], str]] = {
    "rehydrate": _rehydrate
}


@dataclasses.dataclass(frozen=True)
class Offered:
    """A tool a step offers: its face, the action class and the step fields fixed by `with:`."""

    name: str
    face: Any  # ToolFace (runtime/contract/tool.py)
    action: Any  # the Action subclass that runs a call
    fixed: Mapping[str, Any]

    def spec(self) -> dict[str, Any]:
        """The OpenAI function spec (rehydrate's as it always was)."""
        return SPECS[self.name] if self.name in SPECS else dict(self.face.spec())


def entries(tools: Any) -> list[tuple[str, Mapping[str, Any], Path]]:
    """(name, with, path) of each tool a `tools:` value names, list or `{select, from}` form."""
    if isinstance(tools, Mapping):
        items, base = tools.get("from"), ("from",)
    else:
        items, base = tools, ()
    out: list[tuple[str, Mapping[str, Any], Path]] = []
    for i, item in enumerate(items if isinstance(items, list) else ()):
        if isinstance(item, str):
            out.append((item, {}, ("tools", *base, i)))
        elif isinstance(item, Mapping) and isinstance(item.get("name"), str):
            fixed = item.get("with") if isinstance(item.get("with"), Mapping) else {}
            out.append((item["name"], fixed, ("tools", *base, i)))
    return out


def resolve(tools: Any, registry: Any = None) -> list[Offered]:
    """The tools a step's `tools:` names, looked up in the action registry (entry points)."""
    if registry is None:
        from runtime.contract.registry import default_registry

        registry = default_registry()
    out = []
    for name, fixed, _path in entries(tools):
        cls = registry.get(name)
        face = getattr(cls, "tool", None)
        if cls is None or face is None:
            raise ModelError(f"{name!r} is no tool (validate reports it)", code="TOOL_UNKNOWN")
        out.append(Offered(name, face, cls, dict(fixed)))
    return out


def complete(
    ctx: StepContext,
    provider: Any,
    request: Any,
    *,
    tools: list[Any],
    rounds: int,
    spare: Callable[[list[dict[str, Any]]], int],
    overhead: int,
    count: Callable[[str], int],
    on_chunk: Any = None,
    on_round: Callable[[int, list[dict[str, Any]]], None] | None = None,
) -> tuple[Any, list[dict[str, Any]]]:
    """Ask the model, running the tools it calls for at most `rounds` rounds.

    `tools`: names, or Offered tools (`resolve`). Returns the final reply and the
    messages of the request that got it. `spare(messages)` is the prompt budget less the
    prompt `messages` make (negative when over); `overhead` the framing tokens of one more
    message; `on_round(n, messages)` is told of each request just before it is sent
    (n = 0 for the first).
    """
    offered_tools = [t if isinstance(t, Offered) else resolve([t])[0] for t in tools]
    by_name = {t.name: t for t in offered_tools}
    offered = [t.spec() for t in offered_tools]
    request = dataclasses.replace(request, tools=offered or None, messages=list(request.messages))
    merged: dict[str, list[Any]] = {}  # accumulated list variables of this model call
    for number in range(rounds + 1):
        if on_round is not None:
            on_round(number, request.messages)
        response = provider.complete(request, on_chunk=on_chunk)
        if not response.tool_calls:
            return response, request.messages
        if number == rounds:
            break
        assistant = {
            "role": "assistant",
            "content": response.text or None,
            "tool_calls": [_echoed(c) for c in response.tool_calls],
        }
        messages = [*request.messages, assistant]
        for call in response.tool_calls:
            room = spare(messages) - overhead
            content = _run(ctx, call, number + 1, room, count, by_name, merged)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        left = spare(messages)
        if left < 0:
            raise ContextOverflowError(
                f"tool round {number + 1}: the prompt with the model's tool calls and their "
                f"results is {-left} tokens over the prompt budget; nothing more fits"
            )
        last = number + 1 == rounds
        # The last round offers no tools: the model must answer with what it has.
        request = dataclasses.replace(request, messages=messages, tools=None if last else offered)
    raise ModelError(
        f"the model still called tools after {rounds} round(s) (max_tool_rounds) and a final "
        "request that offered none",
        code="MODEL_TOOL_ROUNDS_EXCEEDED",
    )


def _echoed(call: Any) -> dict[str, Any]:
    """The call as the next request repeats it: arguments over the limit as a short note."""
    size = len(call.arguments or "")
    if size <= MAX_TOOL_ARGUMENTS:
        return dict(call.to_message())
    note = json.dumps({"refused": f"{size:,} characters of arguments, not repeated"})
    return dict(dataclasses.replace(call, arguments=note).to_message())


def _cut(text: str, limit: int = 80) -> str:
    """A model-written string quoted in a message or the trace, cut when long."""
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text):,} characters)"


def _arguments(raw: str) -> dict[str, Any] | str:
    """The call's arguments as an object, or why not (short: never the arguments themselves)."""
    if len(raw) > MAX_TOOL_ARGUMENTS:
        return f"the arguments are {len(raw):,} characters, over the {MAX_TOOL_ARGUMENTS:,} limit"
    try:
        args = json.loads(raw or "{}")
    except RecursionError:  # nested thousands deep: json's C parser stops at its limit
        return "the arguments are nested too deep"
    except ValueError:
        return "the arguments are not a JSON object"
    if not isinstance(args, dict):
        return "the arguments are not a JSON object"
    # `"\ud800"` decodes to a lone surrogate, which no UTF-8 store or prompt can hold: refused
    # like any text that is not valid Unicode (runtime/contract/text.py), naming where.
    problem = invalid_text(args)
    return args if problem is None else f"the arguments are not valid Unicode text: {problem}"


def _run(
    ctx: StepContext,
    call: Any,
    number: int,
    room: int,
    count: Callable[[str], int],
    offered: Mapping[str, Offered] | None = None,
    merged: dict[str, list[Any]] | None = None,
) -> str:
    """One tool call's result message; failures become an error the model reads, traced."""
    record: dict[str, Any] = {"round": number, "tool": _cut(call.name), "call_id": _cut(call.id)}
    args = _arguments(call.arguments)
    if isinstance(args, str):
        return _refuse(ctx, record, "TOOL_ARGUMENTS_INVALID", args)
    if offered is None:  # rehydrate alone, as the step offered it before tool faces
        offered = {"rehydrate": resolve(["rehydrate"])[0]}
    tool = offered.get(call.name)
    if tool is None:
        return _refuse(ctx, record, "TOOL_UNKNOWN", f"no tool {_cut(call.name)!r} is offered")
    if call.name not in HANDLERS:
        return _run_action(ctx, tool, args, record, room, count, {} if merged is None else merged)
    record.update(
        {k: _cut(args[k], 200) for k in ("pointer_id", "slice") if isinstance(args.get(k), str)}
    )
    problem = schema_problem(tool.face.parameters, args)
    if problem is not None:
        return _refuse(ctx, record, "TOOL_ARGUMENTS_INVALID", problem)
    from runtime.context.pointers import SliceTooLarge, max_token_bytes

    handler = HANDLERS[call.name]
    try:  # `count` is the model's counter's count: its vocabulary bounds a slice unread
        result = handler(ctx, args, room, max_token_bytes(getattr(count, "__self__", None)))
    except SliceTooLarge as exc:
        return _refuse(
            ctx,
            record,
            "CONTEXT_OVERFLOW",
            f"the result is at least {exc.tokens:,} tokens ({exc.chars:,} characters or more) "
            f"and {max(room, 0)} fit in the window: ask for a smaller slice",
        )
    except StepRuntimeError as exc:
        return _refuse(ctx, record, exc.code, exc.message)
    # Text from a store is data: lines that could pass for instructions are quoted as data
    # (issue 29), and the result is counted as it is sent.
    result, findings = neutralise(result)
    if findings:
        flagged(ctx, f"tool:{call.name}", findings, "neutralised", record)
    tokens = count(result)
    if tokens > room:
        return _refuse(
            ctx,
            record,
            "CONTEXT_OVERFLOW",
            f"the result is {tokens} tokens and {max(room, 0)} fit in the window: ask for a "
            "smaller slice",
        )
    ctx.trace("MODEL_TOOL_CALL", **record, tokens=tokens, error=None)
    return result


def schema_problem(schema: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    """Why the arguments do not match the tool's JSON Schema (the first error), or None."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(args))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the arguments"
    # jsonschema quotes the offending value: cut, the model may have sent anything.
    return f"{where}: {_cut(error.message, 200)}"


def _run_action(
    ctx: StepContext,
    tool: Offered,
    args: dict[str, Any],
    record: dict[str, Any],
    room: int,
    count: Callable[[str], int],
    merged: dict[str, list[Any]],
) -> str:
    """Run an action through its tool face; its result fitted to `room`, cut items traced."""
    face = tool.face
    record["arguments"] = _cut(json.dumps(args, ensure_ascii=False, sort_keys=True), 300)
    problem = schema_problem(face.parameters, args)
    if problem is not None:
        return _refuse(ctx, record, "TOOL_ARGUMENTS_INVALID", problem)
    step, overlay, narrowed = step_for(tool, args)
    if narrowed:
        record["narrowed"] = narrowed
    sub = ToolContext(ctx, step, overlay)
    try:
        tool.action().run(sub)
    except StepRuntimeError as exc:  # nothing it staged is kept: the call had no effect
        return _refuse(ctx, record, exc.code, exc.message)
    shown_value = screen(ctx, face, {name: sub.get(name, None) for name in face.result}, record)
    for name, value in sub.writes.items():
        ctx.set(name, value)
    for name in dict.fromkeys([*merged, *face.accumulate]):
        now = ctx.get(name, None)
        merged[name] = _merge(merged.get(name, []), now if isinstance(now, list) else [])
        ctx.set(name, merged[name])
    text, shown, cut = _fit(face, shown_value, room, count)
    if text is None:
        return _refuse(
            ctx,
            record,
            "CONTEXT_OVERFLOW",
            f"even with every item cut the result does not fit the {max(room, 0)} tokens left "
            "of the prompt budget",
        )
    tokens = count(text)
    extra: dict[str, Any] = {"shown": shown}
    if cut:
        extra["cut"] = cut
        extra["cut_reason"] = f"over the {max(room, 0)} tokens left of the prompt budget"
    ctx.trace("MODEL_TOOL_CALL", **record, tokens=tokens, room=room, error=None, **extra)
    return text


def step_for(
    tool: Offered, args: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(the step a call runs, variables it is handed, what was narrowed) from the arguments.

    The face's base, then the offering step's `with:`, then the arguments: an argument
    never replaces a field the author fixed, and a ceiling is only ever lowered.
    """
    face = tool.face
    step: dict[str, Any] = {"action": tool.name, **face.base, **tool.fixed}
    overlay: dict[str, Any] = {}
    narrowed: dict[str, Any] = {}
    shared = [v for v in face.inputs.values()]
    for name, value in args.items():
        var = face.inputs.get(name)
        if var is not None:
            if shared.count(var) == 1:  # the argument alone is the variable's value
                overlay[var] = value
            else:
                overlay.setdefault(var, {})[name] = value
            continue
        limit = step.get(name)
        if name in face.ceilings:
            if not isinstance(limit, int):  # no limit set here: the action's default holds
                narrowed[name] = {"asked": value, "given": "the action's default"}
                continue
            if isinstance(value, int) and value > limit:
                narrowed[name] = {"asked": value, "given": limit}
                continue
        elif name in tool.fixed:
            narrowed[name] = {"asked": _cut(json.dumps(value), 80), "given": tool.fixed[name]}
            continue
        step[name] = value
    return step, overlay, narrowed


def _merge(old: list[Any], new: list[Any]) -> list[Any]:
    """old, then what new adds (items compared by id when they have one)."""
    seen = {_key(x) for x in old}
    out = list(old)
    for item in new:
        key = _key(item)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _key(item: Any) -> str:
    if isinstance(item, Mapping) and "id" in item:
        return f"id:{item['id']}"
    return json.dumps(item, sort_keys=True, ensure_ascii=False)


def _item_id(item: Any) -> str:
    if isinstance(item, Mapping) and "id" in item:
        return _cut(str(item["id"]), 200)
    return _cut(item if isinstance(item, str) else json.dumps(item, ensure_ascii=False), 200)


def _fit(
    face: Any, values: Mapping[str, Any], room: int, count: Callable[[str], int]
) -> tuple[str | None, list[str], list[str]]:
    """(result text within room or None, ids shown, ids cut): items dropped from the end."""
    items = values.get(face.items) if face.items else None
    items = list(items) if isinstance(items, list) else []
    keep = len(items)
    while True:
        text = _render(face, values, items[:keep], items[keep:])
        if count(text) <= room:
            return text, [_item_id(x) for x in items[:keep]], [_item_id(x) for x in items[keep:]]
        if keep == 0:
            return None, [], [_item_id(x) for x in items]
        keep -= 1


def _render(face: Any, values: Mapping[str, Any], items: list[Any], cut: list[Any]) -> str:
    """A tool result: the other result variables as JSON, then the items (node texts framed
    as evidence: data, never instructions), then which items were cut and why."""
    from actions.call_model import CallModel
    from runtime.context.blocks import as_evidence

    lines = [f"{face.name} result:"]
    for name in face.result:
        if name != face.items:
            lines.append(_safe(f"{name}: {json.dumps(values.get(name), ensure_ascii=False)}"))
    if face.items:
        lines.append(f"{face.items}: {len(items)} item(s)")
        evidence = as_evidence(items)
        if items and evidence is not items:
            lines.append(CallModel.render(evidence))
        else:
            lines.extend(_safe(json.dumps(x, ensure_ascii=False)) for x in items)
    if cut:
        ids = [_item_id(x) for x in cut]
        more = f" and {len(ids) - 10} more" if len(ids) > 10 else ""
        lines.append(
            f"[{len(cut)} item(s) cut to fit the prompt budget: {', '.join(ids[:10])}{more}]"
        )
    return "\n".join(lines)


def _safe(line: str) -> str:
    """A result line with anything that could pass for an instruction quoted as data."""
    return neutralise(line)[0]


def screen(
    ctx: StepContext, face: Any, values: Mapping[str, Any], record: dict[str, Any]
) -> dict[str, Any]:
    """A tool result's values after the injection detector (issue 29): each flagged item
    traced, and dropped when the offering step says `on_injection: drop` (its id in the
    call's `withheld`); other flagged values traced (they are sent quoted as data)."""
    step = getattr(ctx, "step", None)
    drop = isinstance(step, Mapping) and step.get("on_injection") == "drop"
    out = dict(values)
    where = f"tool:{face.name}"
    items = values.get(face.items) if face.items else None
    if isinstance(items, list) and items:
        kept, withheld = [], []
        for item in items:
            # A node record is rendered as an evidence block: its text is what is read.
            node = isinstance(item, Mapping) and isinstance(item.get("text"), str)
            findings = scan(item["text"] if node else json.dumps(item, ensure_ascii=False))
            if not findings:
                kept.append(item)
                continue
            action = "dropped" if drop else "neutralised"
            flagged(ctx, where, findings, action, record, item=_item_id(item))
            if drop:
                withheld.append(_item_id(item))
            else:
                kept.append(item)
        if withheld:
            record["withheld"] = withheld
            out[face.items] = kept
    for name, value in values.items():
        if name == face.items:
            continue
        findings = scan(json.dumps(value, ensure_ascii=False))
        if findings:
            flagged(ctx, where, findings, "neutralised", record, variable=name)
    return out


# What the detector flagged in tool results during one model call (call_model's pack of
# each request after a tool round lists them in its drop report): set by flags_collected.
_FLAGS: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar(
    "tool_flags", default=None
)


@contextlib.contextmanager
def flags_collected() -> Iterator[list[dict[str, Any]]]:
    """The drop-report entries of what the detector flags in tool results inside the block."""
    found: list[dict[str, Any]] = []
    token = _FLAGS.set(found)
    try:
        yield found
    finally:
        _FLAGS.reset(token)


def flagged(
    ctx: StepContext,
    where: str,
    findings: list[Any],
    action: str,
    record: Mapping[str, Any],
    **extra: Any,
) -> None:
    """RETRIEVED_INSTRUCTION_FLAGGED for text in a tool result (round, tool, call id); an
    entry for the next request's drop report."""
    found = _FLAGS.get()
    if found is not None:
        item = extra.get("item") or extra.get("variable")
        found.append(
            {
                "id": f"{where}:{item}" if item else where,
                "reason": "injection",
                "tokens_saved": None if action == "dropped" else 0,
                "action": action,
                "kinds": sorted({f.kind for f in findings}),
                "by": "injection detector",
                "round": record.get("round"),
            }
        )
    ctx.trace(
        "RETRIEVED_INSTRUCTION_FLAGGED",
        node=where,
        action=action,
        round=record.get("round"),
        call_id=record.get("call_id"),
        count=len(findings),
        findings=[{"kind": f.kind, "line": f.line, "excerpt": f.excerpt} for f in findings[:50]],
        **extra,
    )


class ToolContext:
    """The context an action runs in as a tool: the offering step's, with the call's step,
    the variables its arguments set, and writes kept here until the call succeeds."""

    def __init__(self, parent: Any, step: Mapping[str, Any], overlay: Mapping[str, Any]):
        self._parent = parent
        self.step = step
        self.messages: list[Any] = []
        self._overlay = dict(overlay)
        self.writes: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parent, name)

    def get(self, name: str, default: Any = ...) -> Any:
        """A variable: this call's writes, its arguments' variables, then the run's."""
        if name in self.writes:
            return self.writes[name]
        if name in self._overlay:
            return self._overlay[name]
        return self._parent.get(name) if default is ... else self._parent.get(name, default)

    def has(self, name: str) -> bool:
        """True when set here or in the run."""
        return name in self.writes or name in self._overlay or bool(self._parent.has(name))

    def set(self, name: str, value: Any) -> None:
        """Kept until the call succeeds (engine-owned names are refused by the run's set)."""
        from runtime.contract.action import ENGINE_OWNED

        if name in ENGINE_OWNED:
            self._parent.set(name, value)  # raises STATE_PROTECTED
        self.writes[name] = value


def _refuse(ctx: StepContext, record: dict[str, Any], code: str, message: str) -> str:
    ctx.trace("MODEL_TOOL_CALL", **record, tokens=0, error=code, message=message)
    return f"error {code}: {message}"
