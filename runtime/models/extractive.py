"""The offline extractive responder: the default when no model is configured.

It answers from the evidence blocks in the prompt: it ranks them by overlap with
the question's terms (identifiers split at CamelCase and snake_case, lower case,
stop words dropped, crudely stemmed), quotes the most relevant lines of the top
three, cites their node ids and paths, and says plainly that no language model was
used. The question is the last user message's `Question:` line outside the
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

Deterministic: the same prompt always gets the same reply.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any

from runtime.models.base import ChunkCallback, ModelConfig, ModelRequest, ModelResponse
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


def rank(question: str, blocks: list[Block]) -> list[Block]:
    """Blocks sharing terms with the question, most relevant first (earlier blocks win ties)."""
    wanted = set(terms(question))
    scored = []
    for i, block in enumerate(blocks):
        have = terms(" ".join((block.id, block.path, block.text)))
        distinct = len(wanted & set(have))
        if distinct:
            hits = sum(1 for t in have if t in wanted)
            scored.append((-(distinct * 2 + min(hits, 20) / 10), i, block))
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
    for n, block in enumerate(top, start=1):
        out.append(f"{n}. [{block.id or '?'}] ({block.path or 'unknown path'})")
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


class ExtractiveProvider:
    """Answers from the evidence in the prompt, without a model."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config

    def complete(
        self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None
    ) -> ModelResponse:
        """A deterministic, cited, extractive reply."""
        started = time.perf_counter()
        users = [m.get("content", "") for m in request.messages if m.get("role") == "user"]
        question = question_of(users[-1]) if users else ""
        blocks = [b for m in request.messages for b in split_prompt(m.get("content", "")).blocks]
        if request.json_mode:
            reply = decision_object(request.json_schema, question, blocks)
            text = json.dumps(reply, ensure_ascii=False)
        else:
            text = answer_text(question, rank(question, blocks))
        if on_chunk is not None:
            on_chunk(text)
        from runtime.context.tokens import get_counter

        count = get_counter(self.config.tokenizer).count
        return ModelResponse(
            text,
            sum(count(m.get("content", "")) for m in request.messages),
            count(text),
            round((time.perf_counter() - started) * 1000, 3),
            "extractive",
            "extractive",
        )
