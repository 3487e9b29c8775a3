"""What changed in a pipeline between two loads: part by part, for PIPELINE_CHANGED.

A run records its pipeline's content hash (what `resume` compares) and, beside it, a
fingerprint: a short hash of every step (by id), every setting, every other top-level
field and every prompt file the steps name, and the order of the steps. When the hash
differs on resume, comparing the stored fingerprint with the current one says which
of those parts differ, without storing the pipeline itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# Hex digits kept of each part's SHA-256: enough to tell two versions of a part apart.
_DIGITS = 16


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:_DIGITS]


def fingerprint(pipeline: Any) -> dict[str, Any]:
    """The parts of a pipeline (`runtime.format.pipeline.Pipeline`) as short hashes."""
    raw: Mapping[str, Any] = pipeline.raw
    steps = [s for s in raw.get("steps") or [] if isinstance(s, Mapping)]
    settings = raw.get("settings")
    return {
        "steps": {str(s.get("id")): _hash(s) for s in steps},
        "order": [str(s.get("id")) for s in steps],
        "settings": {
            str(k): _hash(v) for k, v in (settings.items() if isinstance(settings, Mapping) else ())
        },
        "fields": {str(k): _hash(v) for k, v in raw.items() if k not in ("steps", "settings")},
        "prompts": {
            key: None if sha is None else sha[:_DIGITS]
            for key, sha in pipeline.prompt_files().items()
        },
    }


def _parts(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    name: Callable[[str], str],
    keys: Sequence[str] | None = None,
) -> list[str]:
    """What was removed, added or changed between old and new, key by key (sorted unless keys)."""
    out = []
    for key in sorted(set(old) | set(new)) if keys is None else keys:
        if key not in new:
            out.append(f"{name(key)} removed")
        elif key not in old:
            out.append(f"{name(key)} added")
        elif old[key] != new[key]:
            out.append(f"{name(key)} changed")
    return out


def describe(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """The parts that differ, in words ("step 'answer' changed, settings.top_k added"); '' if none.

    Steps come first in the current order, then the order of the steps, settings,
    other top-level fields and prompt files.
    """
    old_steps, new_steps = dict(old.get("steps") or {}), dict(new.get("steps") or {})
    ordered = [*new.get("order", []), *[s for s in old.get("order", []) if s not in new_steps]]
    rank = {sid: n for n, sid in enumerate(ordered)}
    steps = sorted(set(old_steps) | set(new_steps), key=lambda s: rank.get(s, len(rank)))
    out = _parts(old_steps, new_steps, "step {!r}".format, steps)
    kept_old = [s for s in old.get("order", []) if s in new_steps]
    kept_new = [s for s in new.get("order", []) if s in old_steps]
    if kept_old != kept_new:
        out.append("the order of the steps changed")
    out += _parts(old.get("settings") or {}, new.get("settings") or {}, "settings.{}".format)
    out += _parts(old.get("fields") or {}, new.get("fields") or {}, "`{}`".format)
    out += _parts(old.get("prompts") or {}, new.get("prompts") or {}, "prompt {!r}".format)
    return ", ".join(out)


def _well_formed(parts: Any) -> bool:
    """A record as `fingerprint` writes it (a damaged store may hold anything)."""
    if not isinstance(parts, Mapping):
        return False
    maps = [parts.get(k, {}) for k in ("steps", "settings", "fields", "prompts")]
    order = parts.get("order", [])
    return (
        all(isinstance(m, Mapping) for m in maps)
        and all(isinstance(v, str | None) for m in maps for v in m.values())
        and isinstance(order, list)
        and all(isinstance(s, str) for s in order)
    )


def since(stored: Any, pipeline: Any) -> str:
    """What differs between a run's recorded pipeline and `pipeline`, for PIPELINE_CHANGED.

    `stored` is the record as read from the store: None when none was written, anything
    else when the store was damaged (said so, never a traceback).
    """
    if stored is None:
        return (
            "the run was stored before runs recorded their pipeline part by part, so what "
            "changed cannot be told"
        )
    if not _well_formed(stored):
        return "the run's record of its pipeline is unreadable, so what changed cannot be told"
    return describe(stored, fingerprint(pipeline)) or "no recorded part differs"
