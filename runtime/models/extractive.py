"""The offline extractive responder: the default when no model is configured.

It answers from the evidence blocks in the prompt: it ranks them by overlap with
the question's terms (identifiers split into words), quotes the most relevant
lines, cites node ids and paths, and says plainly that no language model was
used. Asked for JSON, it returns a well-formed decision:

- with a `json_schema` whose `decision` property has an enum: when the prompt
  holds evidence, the first of answer / sufficient / enough / done in the enum;
  without evidence, the first of retrieve / search / more / retrieve_more; else
  the enum's first value. A `query` string property gets the question's key terms.
- without a schema: `{"decision": "answer" | "retrieve", "answer": ..., "query": ...}`.

Deterministic: the same prompt always gets the same reply.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from runtime._access import mapping
from runtime.blocks import parse_blocks
from runtime.models.base import ChunkCallback, ModelConfig, ModelRequest, ModelResponse
from runtime.nodestore import STOPWORDS, split_identifier

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NOTICE = (
    "No language model was used: this answer was assembled offline from the retrieved evidence."
)
_ANSWER_WORDS = ("answer", "sufficient", "enough", "done")
_RETRIEVE_WORDS = ("retrieve", "search", "more", "retrieve_more")


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


def _question(request: ModelRequest) -> str:
    users = [m["content"] for m in request.messages if m.get("role") == "user"]
    text = users[-1] if users else ""
    m = re.search(r"(?im)^question:\s*(.+)$", text)
    if m:
        return m.group(1).strip()
    return re.sub(r"<evidence>.*?</evidence>", " ", text, flags=re.S).strip()


class ExtractiveProvider:
    """Answers from the evidence in the prompt, without a model."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config

    def complete(
        self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None
    ) -> ModelResponse:
        """A deterministic, cited, extractive reply."""
        started = time.perf_counter()
        question = _question(request)
        blocks = [b for m in request.messages for b in parse_blocks(m.get("content", ""))]
        ranked = self._rank(question, blocks)
        if request.json_mode:
            text = json.dumps(self._decision(request, question, ranked), ensure_ascii=False)
        else:
            text = self._answer(question, ranked)
        if on_chunk:
            on_chunk(text)
        from runtime.tokens import get_counter

        count = get_counter(self.config.tokenizer).count
        tokens_in = sum(count(m.get("content", "")) for m in request.messages)
        return ModelResponse(
            text,
            tokens_in,
            count(text),
            round((time.perf_counter() - started) * 1000, 3),
            "extractive",
            "extractive",
        )

    @staticmethod
    def _rank(question: str, blocks: list[dict[str, str]]) -> list[tuple[float, dict[str, str]]]:
        wanted = set(terms(question))
        scored = []
        for i, b in enumerate(blocks):
            have = terms(" ".join((b.get("id", ""), b.get("path", ""), b.get("text", ""))))
            hits = sum(1 for t in have if t in wanted)
            distinct = len(wanted & set(have))
            score = distinct * 2 + min(hits, 20) / 10 - i * 1e-3  # earlier blocks win ties
            scored.append((score, b))
        return sorted((s for s in scored if s[0] > 0), key=lambda s: -s[0])

    @staticmethod
    def _quote(question: str, text: str, limit: int = 4) -> list[str]:
        wanted = set(terms(question))
        lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
        scored = sorted(
            ((len(wanted & set(terms(ln))), -i, ln) for i, ln in enumerate(lines)), reverse=True
        )
        best = sorted((-neg, ln) for score, neg, ln in scored[:limit] if score > 0)
        return [ln.strip()[:200] for _, ln in best] or [ln.strip()[:200] for ln in lines[:2]]

    def _answer(self, question: str, ranked: list[tuple[float, dict[str, str]]]) -> str:
        if not ranked:
            return (
                f"{NOTICE}\n\nNo evidence in the context matches the question"
                f"{f' ({question})' if question else ''}; nothing can be cited."
            )
        out = [NOTICE, "", f"Question: {question}" if question else "", "Most relevant evidence:"]
        for n, (_, block) in enumerate(ranked[:3], start=1):
            out.append(f"{n}. [{block.get('id', '?')}] ({block.get('path', 'unknown path')})")
            out += [f"   > {line}" for line in self._quote(question, block.get("text", ""))]
        cited = ", ".join(f"[{b.get('id', '?')}]" for _, b in ranked[:3])
        out += ["", f"Sources: {cited}"]
        return "\n".join(line for line in out if line is not None)

    def _decision(
        self, request: ModelRequest, question: str, ranked: list[tuple[float, dict[str, str]]]
    ) -> dict[str, Any]:
        has_evidence = bool(ranked)
        schema = request.json_schema or {}
        props = mapping(schema.get("properties"))
        enum = (
            (props.get("decision") or {}).get("enum")
            if isinstance(props.get("decision"), dict)
            else None
        )
        prefer = _ANSWER_WORDS if has_evidence else _RETRIEVE_WORDS
        if enum:
            decision = next((w for w in prefer if w in enum), enum[0])
        else:
            decision = "answer" if has_evidence else "retrieve"
        out: dict[str, Any] = {"decision": decision}
        key_terms = " ".join(
            dict.fromkeys(
                w
                for w in _WORD.findall(question)
                if split_identifier(w) and split_identifier(w)[0] not in STOPWORDS
            )
        )
        if not props or "query" in props:
            out["query"] = key_terms or question
        if not props:
            out["answer"] = self._answer(question, ranked)
        return out
