"""The offline extractive responder: the default when no model is configured.

It answers from the evidence blocks in the prompt: it ranks them by overlap with
the question's terms (identifiers split at CamelCase and snake_case, lower case,
stop words dropped, crudely stemmed), ahead of prose the code objects that do what the
question asks to the object it names (`which procedure writes Orders?`: a procedure
whose body writes Orders) and the kind of node it names; it quotes the most relevant
lines of the top three, states what a cited object does (`procedure Sales.usp_X writes
Sales.Orders`), cites their node ids and paths, and says plainly that no language
model was used. The question is the last user message's `Question:` line outside the
evidence, else that message's text around the evidence.

Asked for JSON (`json_mode`) it returns one well-formed object:

- `decision`: with a `json_schema` whose `decision` property has an `enum`: when the
  prompt holds evidence blocks, the first of answer / sufficient / enough / done
  found in the enum; without evidence, the first of retrieve / search / more /
  retrieve_more; when none is in the enum, the enum's first value. Without an
  enum: `answer` with evidence, else `retrieve`.
- `query`: the question's key terms (identifiers kept as written), when the schema
  has a `query` property or there is no schema.
- `answer`: the extractive answer, when the schema has an `answer` property or
  there is no schema.
- any other `required` property: its enum's first value, else an empty value of
  its type, so the object still has the required shape.

Offered the `rehydrate` tool (`request.tools`) with pointer blocks in the prompt
(`[ELIDED ptr-...`, runtime/context/pointers.py) and no tool result yet, it calls the tool
once per pointer, in prompt order (at most three): the first lines of a text, log,
Markdown or code (`lines 1-20`), the first hunk of a diff, the first array item a JSON
summary names (`$.results[0]`, else `$`). With the results in the conversation it
answers as above, the slices ranked and quoted with the evidence (cited as
`ptr-... lines 1-20`, path `rehydrated`), and says which slices it read and which
calls came back as errors (never claiming those as read).

Deterministic: the same prompt always gets the same reply.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime.models.base import (
    ChunkCallback,
    ModelConfig,
    ModelRequest,
    ModelResponse,
    ToolCall,
)
from runtime.models.evidence import Block, question_of, split_prompt
from runtime.retrieval.words import STOPWORDS, split_identifier

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NOTICE = (
    "No language model was used: this answer was assembled offline from the retrieved evidence."
)
ANSWER_WORDS = ("answer", "sufficient", "enough", "done")
RETRIEVE_WORDS = ("retrieve", "search", "more", "retrieve_more")
TOP_BLOCKS = 3
QUOTED_LINES = 4
_EMPTY: dict[str, type] = {
    "string": str,
    "number": int,
    "integer": int,
    "boolean": bool,
    "array": list,
    "object": dict,
}


def _stem(word: str) -> str:
    for suffix in ("ations", "ation", "ings", "ing", "ies", "es", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 4 else word  # place/placing/placed


def terms(text: str) -> list[str]:
    """Content terms: identifiers split, lower case, stop words dropped, crudely stemmed."""
    out: list[str] = []
    for word in _WORD.findall(text):
        for part in split_identifier(word):
            if part not in STOPWORDS and len(part) > 1:
                out.append(_stem(part))
    return out


def key_terms(question: str) -> str:
    """The question's words that carry meaning, as written, in order, once each."""
    kept = (
        w
        for w in _WORD.findall(question)
        if split_identifier(w) and split_identifier(w)[0] not in STOPWORDS
    )
    return " ".join(dict.fromkeys(kept))


# Question words that ask what code does to an object (`which procedure writes Orders?`),
# and the relation of the code's extraction that answers them.
RELATION_WORDS = {
    "writes": (
        "write writes written writing insert inserts inserted inserting update updates "
        "updated updating delete deletes deleted deleting modify modifies modified change "
        "changes changed save saves saved store stores stored populate populates fill fills "
        "load loads loaded merge merges"
    ),
    "reads": "read reads reading select selects query queries queried join joins fetch fetches",
    "executes": "call calls called execute executes executed run runs invoke invokes",
}
_RELATION_OF = {w: rel for rel, words in RELATION_WORDS.items() for w in words.split()}
# Score added to a block whose code does what the question asks to the object it names,
# and to a block of the kind the question names: the object that answers outranks prose
# that only mentions it.
RELATION_BONUS = 6.0
KIND_BONUS = 3.0


@dataclass(frozen=True)
class Fact:
    """What one object in a block is and does: `procedure Sales.usp_X writes Sales.Orders`."""

    kind: str
    name: str
    relations: tuple[tuple[str, tuple[str, ...]], ...]

    def line(self, asked: frozenset[str] = frozenset()) -> str:
        """The fact as one line for the answer, the relations asked about first."""
        ordered = sorted(self.relations, key=lambda r: r[0] not in asked)
        done = "; ".join(f"{rel} {', '.join(names)}" for rel, names in ordered)
        return f"{self.kind} {self.name}" + (f" {done}" if done else "")


_COMPACT_RELATION = re.compile(r"^\s*-- (reads|writes|executes): (.+)$")
_COMPACT_HEADER = re.compile(
    r"^CREATE\s+(?:OR\s+ALTER\s+)?(PROC(?:EDURE)?|FUNCTION|VIEW|TRIGGER)\s+(\S+)", re.I
)
_EDGE_RELATION = {"WritesTo": "writes", "ReadsFrom": "reads", "Executes": "executes"}


def _kind_of(block: Block) -> str:
    """A block's node kind: its `kind` metadata, else the kind part of a node id
    (`<repository>::<snapshot>::<kind>::<name>`)."""
    if block.metadata.get("kind"):
        return block.metadata["kind"]
    parts = block.id.split("::")
    return parts[2] if len(parts) >= 4 else ""


@functools.lru_cache(maxsize=256)
def _sql_facts(text: str, compact: bool) -> tuple[Fact, ...]:
    """The objects of a SQL block and what each reads, writes and executes (a compact block
    says so in `-- writes: ...` lines under each header)."""
    if compact:
        facts: list[Fact] = []
        head: tuple[str, str] | None = None
        rels: list[tuple[str, tuple[str, ...]]] = []
        for line in [*text.splitlines(), "GO"]:
            header = _COMPACT_HEADER.match(line)
            relation = _COMPACT_RELATION.match(line)
            if relation and head:
                names = tuple(n.strip() for n in relation.group(2).split(","))
                rels.append((relation.group(1), names))
            elif header or line.strip() == "GO":
                if head:
                    facts.append(Fact(head[0], head[1], tuple(rels)))
                kind = header.group(1).lower() if header else ""
                head = (
                    (("procedure" if kind.startswith("proc") else kind), header.group(2))
                    if header
                    else None
                )
                rels = []
        return tuple(facts)
    from classifiers import tsql

    symbols, deps = tsql.extract(text)
    out = []
    for sym in symbols:
        rels = []
        for edge, rel in _EDGE_RELATION.items():
            names = tuple(
                dict.fromkeys(
                    d.to_name
                    for d in deps
                    if d.from_qualified_name == sym.qualified_name and d.edge_type == edge
                )
            )
            if names:
                rels.append((rel, names))
        out.append(Fact(sym.kind, sym.qualified_name, tuple(rels)))
    return tuple(out)


def facts(block: Block) -> tuple[Fact, ...]:
    """What the objects of a SQL block do (other blocks: none)."""
    if block.language != "sql" and not block.path.lower().endswith(".sql"):
        return ()
    return _sql_facts(block.text, block.compact)


def _names_in(question: str) -> set[str]:
    """Object names a question could mean: each word and dotted name, lower case, and the
    singular of a plural (`Orders` also matches `Order`)."""
    out: set[str] = set()
    for word in re.findall(r"[A-Za-z_][\w.]*", question):
        for name in {word.lower(), word.lower().split(".")[-1]}:
            out.add(name)
            if name.endswith("s"):
                out.add(name[:-1])
    return out


def asked_relations(question: str) -> frozenset[str]:
    """What a question asks code to do: writes, reads, executes."""
    words = re.findall(r"[a-z]+", question.lower())
    return frozenset(_RELATION_OF[w] for w in words if w in _RELATION_OF)


def _answers(question: str, block: Block) -> list[Fact]:
    """The facts of a block that do to an object named in the question what it asks."""
    asked = asked_relations(question)
    if not asked:
        return []
    names = _names_in(question)
    return [
        fact
        for fact in facts(block)
        if any(
            rel in asked
            and any(
                target.lower() in names or target.lower().split(".")[-1] in names
                for target in targets
            )
            for rel, targets in fact.relations
        )
    ]


def rank(question: str, blocks: list[Block]) -> list[Block]:
    """Blocks sharing terms with the question, most relevant first (earlier blocks win ties).

    A block whose code does what the question asks to the object it names (the procedure
    that writes the table asked about) and a block of the kind the question names get a
    bonus, so the object itself is cited before prose about it.
    """
    from runtime.retrieval.query import kinds_in

    wanted = set(terms(question))
    kinds = set(kinds_in(question))
    scored = []
    for i, block in enumerate(blocks):
        have = terms(" ".join((block.id, block.path, block.text)))
        distinct = len(wanted & set(have))
        if distinct:
            hits = sum(1 for t in have if t in wanted)
            score = distinct * 2 + min(hits, 20) / 10
            if kinds and _kind_of(block) in kinds:
                score += KIND_BONUS
            if _answers(question, block):
                score += RELATION_BONUS
            scored.append((-score, i, block))
    return [block for *_, block in sorted(scored, key=lambda s: (s[0], s[1]))]


def quote(question: str, text: str, limit: int = QUOTED_LINES) -> list[str]:
    """The lines of text sharing most terms with the question, in their original order."""
    wanted = set(terms(question))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    scored = sorted(
        ((-len(wanted & set(terms(ln))), i) for i, ln in enumerate(lines)), key=lambda s: s
    )
    best = sorted(i for score, i in scored[:limit] if score < 0)
    return [lines[i][:200] for i in best] or [ln[:200] for ln in lines[:2]]


def answer_text(question: str, ranked: list[Block]) -> str:
    """The cited, quoted answer (or a plain statement that nothing matches)."""
    if not ranked:
        asked = f" ({question})" if question else ""
        return f"{NOTICE}\n\nNo evidence in the context matches the question{asked}; nothing can be cited."
    out = [NOTICE, ""]
    if question:
        out.append(f"Question: {question}")
    out.append("Most relevant evidence:")
    top = ranked[:TOP_BLOCKS]
    relations = asked_relations(question)
    for n, block in enumerate(top, start=1):
        out.append(f"{n}. [{block.id or '?'}] ({block.path or 'unknown path'})")
        # What the cited object does, from its code: the answer to "which ... writes X".
        out += [f"   = {fact.line(relations)}" for fact in _answers(question, block)]
        out += [f"   > {line}" for line in quote(question, block.text)]
    out += ["", "Sources: " + ", ".join(f"[{b.id or '?'}]" for b in top)]
    return "\n".join(out)


def decision(schema: Mapping[str, Any] | None, has_evidence: bool) -> Any:
    """The decision value for a schema (see the module docstring for the rule)."""
    props = (schema or {}).get("properties")
    spec = props.get("decision") if isinstance(props, Mapping) else None
    enum = spec.get("enum") if isinstance(spec, Mapping) else None
    prefer = ANSWER_WORDS if has_evidence else RETRIEVE_WORDS
    if isinstance(enum, list) and enum:
        return next((w for w in prefer if w in enum), enum[0])
    return prefer[0]


def _empty(spec: Any) -> Any:
    if isinstance(spec, Mapping):
        if isinstance(spec.get("enum"), list) and spec["enum"]:
            return spec["enum"][0]
        kind = spec.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind in _EMPTY:
            return _EMPTY[kind]()
    return None


def decision_object(
    schema: Mapping[str, Any] | None, question: str, blocks: list[Block]
) -> dict[str, Any]:
    """The JSON-mode reply (see the module docstring)."""
    props = (schema or {}).get("properties")
    props = props if isinstance(props, Mapping) else {}
    out: dict[str, Any] = {}
    if not props or "decision" in props:
        out["decision"] = decision(schema, bool(blocks))
    if not props or "query" in props:
        out["query"] = key_terms(question) or question
    if not props or "answer" in props:
        out["answer"] = answer_text(question, rank(question, blocks))
    required = (schema or {}).get("required")
    for name in required if isinstance(required, list) else []:
        if isinstance(name, str) and name not in out:
            out[name] = _empty(props.get(name))
    return out


_POINTER = re.compile(r"\[ELIDED (ptr-[0-9a-f]{16}): (\w+),")
_FIRST_ITEM = re.compile(r"^(\$[^\s:=]*?\[0\])[:= ]", re.M)
MAX_TOOL_CALLS = 3
TEXT_LINES = 20


def _read(request: ModelRequest) -> str:
    """Lines naming the slices read through rehydrate, and those whose call failed.

    A result is matched to its call by `tool_call_id`, not by position; one that came
    back as a tool error (`error CODE: ...`) was not read and is never claimed as read.
    """
    asked = _rehydrate_calls_made(request)
    if not asked:
        return ""
    read, failed = [], []
    for m in request.messages:
        args = asked.get(m.get("tool_call_id", "")) if m.get("role") == "tool" else None
        if args is None:
            continue
        content = m.get("content") or ""
        where = f"{args.get('pointer_id')} {args.get('slice') or 'whole'}"
        if content.startswith("error "):
            failed.append(f"{where} ({content[6:].split(':', 1)[0]})")
        else:
            read.append(f"{where} ({len(content):,} characters)")
    out = f"\nRead through rehydrate: {', '.join(read)}." if read else ""
    return out + (f"\nRehydrate failed: {', '.join(failed)}." if failed else "")


def _rehydrate_calls_made(request: ModelRequest) -> dict[str, dict[str, Any]]:
    """The rehydrate calls in the conversation: call id -> arguments."""
    return {
        c["id"]: json.loads(c["function"]["arguments"])
        for m in request.messages
        for c in m.get("tool_calls") or ()
        if c.get("function", {}).get("name") == "rehydrate"
    }


def rehydrated_blocks(request: ModelRequest) -> list[Block]:
    """The slices rehydrate returned, as evidence cited by pointer id and slice."""
    asked = _rehydrate_calls_made(request)
    out = []
    for m in request.messages:
        content = m.get("content") or ""
        args = asked.get(m.get("tool_call_id", ""))
        if m.get("role") != "tool" or args is None or content.startswith("error "):
            continue
        where = f"{args.get('pointer_id')} {args.get('slice') or 'whole'}"
        out.append(Block(id=where, path="rehydrated", language="text", text=content))
    return out


def rehydrate_calls(request: ModelRequest) -> list[ToolCall]:
    """The rehydrate calls the responder makes (see the module docstring); [] to answer."""
    offered = {
        (t.get("function") or {}).get("name") for t in request.tools or () if isinstance(t, dict)
    }
    if "rehydrate" not in offered or any(m.get("role") == "tool" for m in request.messages):
        return []
    calls: list[ToolCall] = []
    for m in request.messages:
        content = m.get("content") or ""
        for hit in _POINTER.finditer(content):
            pointer_id, kind = hit.group(1), hit.group(2)
            if kind == "json":
                block = content[hit.end() : content.find(f"[/ELIDED {pointer_id}]", hit.end())]
                first = _FIRST_ITEM.search(block)
                part = first.group(1) if first else "$"
            elif kind == "diff":
                part = "hunk 1"
            else:
                part = f"lines 1-{TEXT_LINES}"
            arguments = json.dumps({"pointer_id": pointer_id, "slice": part})
            calls.append(ToolCall(f"call_{len(calls) + 1}", "rehydrate", arguments))
    return calls[:MAX_TOOL_CALLS]


class ExtractiveProvider:
    """Answers from the evidence in the prompt, without a model."""

    restorable_state = True  # stateless

    def __init__(self, config: ModelConfig) -> None:
        self.config = config

    def complete(
        self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None
    ) -> ModelResponse:
        """A deterministic, cited, extractive reply."""
        started = time.perf_counter()
        # An assistant message that only called a tool has content None.
        users = [m.get("content") or "" for m in request.messages if m.get("role") == "user"]
        question = question_of(users[-1]) if users else ""
        blocks = [b for m in request.messages for b in split_prompt(m.get("content") or "").blocks]
        blocks += rehydrated_blocks(request)
        calls = rehydrate_calls(request)
        if calls:
            text = ""
        elif request.json_mode:
            reply = decision_object(request.json_schema, question, blocks)
            text = json.dumps(reply, ensure_ascii=False)
        else:
            text = answer_text(question, rank(question, blocks)) + _read(request)
        if on_chunk is not None and text:
            on_chunk(text)
        from runtime.context.tokens import get_counter

        count = get_counter(self.config.tokenizer).count
        return ModelResponse(
            text,
            sum(count(m.get("content") or "") for m in request.messages),
            count(text),
            round((time.perf_counter() - started) * 1000, 3),
            "extractive",
            "extractive",
            "tool_calls" if calls else "stop",
            calls,
        )
