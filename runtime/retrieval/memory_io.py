"""Memories and experiences in and out of files and runs: seed files, finished runs.

A seed file is JSON `{"memories": [...], "experiences": [...]}` (either key may be
left out) or JSON Lines of `{"memory": {...}}` / `{"experience": {...}}` objects. It is
read whole, bounded, and every item validated before anything is written: one bad item
refuses the file (MEMORY_INVALID naming the file and the item), nothing stored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from runtime.errors import RunError

# A seed file is notes, not a corpus: read whole, so bounded.
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 32
# What a recorded run keeps of its question and answer.
GOAL_CHARS = 2000
ANSWER_LINES = 5
ANSWER_CHARS = 1500


def _invalid(path: str, why: str) -> RunError:
    return RunError(f"{path}: {why}", code="MEMORY_INVALID")


def _depth(value: Any) -> int:
    """How deep JSON data nests (walked with a stack: deep data is no RecursionError)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            return depth
        if isinstance(item, dict):
            stack += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            stack += [(v, depth + 1) for v in item]
    return deepest


def read_seed_file(path: str) -> tuple[list[Any], list[Any]]:
    """(memories, experiences) as written in a seed file (unvalidated items)."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise _invalid(path, f"holds {size} bytes, more than {MAX_FILE_BYTES}")
        raw = file.read_bytes()
    except OSError as exc:
        raise RunError(f"cannot read {path}: {exc.strerror}", code="MEMORY_INVALID") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(path, f"is not UTF-8 (byte {exc.start})") from exc
    memories: list[Any] = []
    experiences: list[Any] = []
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("{") and not path.endswith(".jsonl"):
        data = _loads(path, stripped, None)
        if not isinstance(data, dict) or set(data) - {"memories", "experiences"}:
            raise _invalid(path, 'must be an object with "memories" and/or "experiences" lists')
        for key, into in (("memories", memories), ("experiences", experiences)):
            items = data.get(key, [])
            if not isinstance(items, list):
                raise _invalid(path, f'"{key}" must be a list')
            into += items
        return memories, experiences
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        data = _loads(path, line, number)
        if (
            not isinstance(data, dict)
            or len(data) != 1
            or not set(data) <= {"memory", "experience"}
        ):
            raise _invalid(
                path, f'line {number} must be {{"memory": ...}} or {{"experience": ...}}'
            )
        (memories if "memory" in data else experiences).append(
            data.get("memory", data.get("experience"))
        )
    return memories, experiences


def _loads(path: str, text: str, line: int | None) -> Any:
    at = f"line {line}: " if line else ""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _invalid(path, f"{at}not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise _invalid(path, f"{at}nests deeper than {MAX_DEPTH}") from exc
    if _depth(data) > MAX_DEPTH:
        raise _invalid(path, f"{at}nests deeper than {MAX_DEPTH}")
    return data


def import_seed_file(
    store: Any, path: str, *, now: datetime | None = None, scrub: Any = None
) -> dict[str, int]:
    """Validate a seed file whole, then store it; {memories, experiences} written.

    Both kinds are validated before either is written, so a bad experience stores no
    memory either.
    """
    from runtime.retrieval.memories import _now
    from runtime.retrieval.memory_items import experience_record, memory_record

    memories, experiences = read_seed_file(path)
    moment = _now(now)
    for i, item in enumerate(memories):
        memory_record(item, now=moment, where=f"{path}: memory {i + 1}")
    for i, item in enumerate(experiences):
        experience_record(item, now=moment, where=f"{path}: experience {i + 1}")
    with store.transaction():
        store.remember(memories, now=moment, scrub=scrub, where=f"{path}: ")
        store.record_experiences(experiences, now=moment, scrub=scrub, where=f"{path}: ")
    return {"memories": len(memories), "experiences": len(experiences)}


def first_lines(text: str, lines: int = ANSWER_LINES, chars: int = ANSWER_CHARS) -> str:
    """The first non-blank lines of a text, cut to chars."""
    kept = [ln.rstrip() for ln in text.splitlines() if ln.strip()][:lines]
    joined = "\n".join(kept)
    return joined if len(joined) <= chars else joined[: chars - 1] + "…"


def run_experience(
    *,
    run_id: str,
    pipeline: str,
    status: str,
    inputs: Mapping[str, Any],
    variables: Mapping[str, Any],
    error: Mapping[str, Any] | None,
    labels: list[str],
    domain: str | None = None,
    created_at: str | None = None,
) -> dict[str, Any]:
    """The experience a finished run is recorded as: its question, outcome, error code and
    the answer's first lines. labels: the labels the run could read (what it saw may be
    in its answer, so the record is as restricted as the run was)."""
    question = inputs.get("question")
    if not isinstance(question, str):
        question = next((v for v in inputs.values() if isinstance(v, str) and v.strip()), "")
    goal = first_lines(question, 20, GOAL_CHARS) or f"run {run_id} of {pipeline}"
    answer = variables.get("final_answer", variables.get("answer"))
    if not isinstance(answer, str):
        answer = json.dumps(answer)[:ANSWER_CHARS] if answer is not None else ""
    code = (error or {}).get("code")
    outcome = {"completed": "success", "failed": "failure"}.get(status, "unknown")
    result = (
        f"{code}: {str((error or {}).get('message', ''))[:300]}" if code else first_lines(answer)
    )
    item: dict[str, Any] = {
        "id": f"run-{run_id}",
        "domain": domain or pipeline,
        "strategy": pipeline,
        "goal": goal,
        "action": f"ran the {pipeline} pipeline",
        "outcome_status": outcome,
        "outcome_result": result,
        "pipeline": pipeline,
        "run_id": run_id,
        "labels": labels,
    }
    if code:
        item["error_code"] = str(code)
    if created_at:
        item["created_at"] = created_at
    return item
