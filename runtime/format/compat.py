"""What the format keeps of the older code-RAG engine (LocalAI-RAG): one place, one rule each.

- its UI step fields, accepted on every step as documented metadata and ignored;
- its snapshot-comparison trio (parallel_roads_action, fork_action, merge_action): the
  shape of the steps a fork runs per snapshot (the actions are in actions/snapshot_trio.py);
- its prompt folder rule (`prompts_dir` from the working directory), found as well as the
  folder beside the pipeline file;
- its request fields, the inputs the dataflow checks assume when a pipeline declares none.

docs/migrating.md describes each for users; nothing here runs a step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

# The older engine's UI fields: what its chat front end showed while a step ran. Nothing here
# reads them; the schema accepts them on every step so the older files validate unchanged.
UI_FIELDS: dict[str, dict[str, Any]] = {
    "stages_visible": {
        "type": "boolean",
        "description": "Older engine UI metadata (show the step as a stage); ignored.",
    },
    "callback_caption": {
        "type": "string",
        "description": "Older engine UI metadata (stage caption); ignored.",
    },
    "callback_caption_translated": {
        "type": "string",
        "description": "Older engine UI metadata (translated stage caption); ignored.",
    },
    "custom_banner": {
        "type": "object",
        "properties": {"neutral": {"type": "string"}, "translated": {"type": "string"}},
        "additionalProperties": False,
        "description": "Older engine UI metadata (a banner above the answer); ignored.",
    },
}

# Settings of the older engine that nothing here reads -> what they meant there. They are
# SETTING_UNUSED warnings like any unread setting; the message says what they were.
OLDER_SETTINGS: dict[str, str] = {
    "snapshot_set_id": "the older engine's snapshot set for its UI",
    "native_chat": "the older engine's chat-template switch",
    "stages_visibility": "the older engine's UI stage policy",
    "callback": "the older engine's UI callback policy",
    "max_history_tokens": "the older engine's history budget",
    "history_summarization_policy": "the older engine's history summary policy",
    "retrieval_modes": "the older engine's list of search types",
    "test": "the older engine's test-mode flag",
}

# The older engine's request fields: its pipelines declare no `inputs` and read these, which
# a run passes as inputs (docs/migrating.md). The dataflow checks take them as the inputs of
# a pipeline that declares none (runtime/format/dataflow.py).
REQUEST_INPUTS: tuple[str, ...] = (
    "user_query",
    "translate_chat",
    "allowed_commands",
    "history",
    "repository",
    "snapshot",
    # the two snapshots a comparison pipeline's fork_action names as ${snapshot_id}, ${snapshot_id_b}
    "snapshot_id",
    "snapshot_id_b",
)

# The older engine's snapshot trio (actions/snapshot_trio.py runs it): `fork_action` ran the
# steps from its `search_action` up to the `merge_action` once per snapshot, in a loop over
# shared state; here that segment runs as concurrent branches, one per snapshot.
SNAPSHOT_TRIO = ("parallel_roads_action", "fork_action", "merge_action")


def snapshot_segment(
    fork_id: str,
    search_step: str,
    actions: Mapping[str, str],
    successors: Callable[[str], Iterable[str]],
) -> tuple[list[str], str]:
    """The steps a fork runs per snapshot (from `search_step`, in visiting order) and the
    merge step they lead to. ValueError (its message for the author) when the shape is not
    the trio's: no such step, no merge reached, or a path back to the fork.

    `actions`: step id -> action name; `successors`: the step ids a step can go to.
    """
    if search_step not in actions:
        raise ValueError(f"search_action {search_step!r} is not a step of this pipeline")
    segment: list[str] = []
    merges: list[str] = []
    pending = [search_step]
    seen = {search_step}
    while pending:
        sid = pending.pop(0)
        if sid == fork_id:
            raise ValueError(f"the steps from {search_step!r} lead back to the fork itself")
        if actions.get(sid) == "merge_action":
            merges.append(sid)
            continue
        segment.append(sid)
        for target in successors(sid):
            if target in actions and target not in seen:
                seen.add(target)
                pending.append(target)
    if not merges:
        raise ValueError(
            f"no merge_action step is reached from {search_step!r}: the steps a fork runs "
            "per snapshot must lead to one"
        )
    if len(merges) > 1:
        raise ValueError(
            f"the steps from {search_step!r} reach {len(merges)} merge_action steps "
            f"({', '.join(map(repr, merges))}); a fork's branches end at one"
        )
    return segment, merges[0]


def prompts_folder(base_dir: Path, configured: Any, cwd: Path | None = None) -> Path:
    """The prompt folder of a pipeline whose file is in base_dir.

    `settings.prompts_dir` (default `prompts`): an absolute path is used as given. A relative
    one is looked for, in this order, (1) in the pipeline file's folder, (2) in the working
    directory, as the older engine resolved it, (3) in each folder above the pipeline file's,
    nearest first (the older engine ran from its project root, an ancestor of its pipeline
    files). The first of these that is a folder wins; when none is, (1) is the answer, so a
    missing prompt is reported where new pipelines keep them.
    """
    rel = Path(configured if isinstance(configured, str) and configured else "prompts")
    if rel.is_absolute():
        return rel
    here = cwd if cwd is not None else Path.cwd()
    candidates = [base_dir / rel, here / rel, *(parent / rel for parent in base_dir.parents)]
    return next((c for c in candidates if c.is_dir()), candidates[0])
