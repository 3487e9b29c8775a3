"""What the format keeps of the older code-RAG engine (LocalAI-RAG): one place, one rule each.

- its UI step fields, accepted on every step as documented metadata and ignored;
- its snapshot-comparison trio, named with a specific diagnostic until parallel branches
  exist here;
- its prompt folder rule (`prompts_dir` from the working directory), found as well as the
  folder beside the pipeline file;
- its request fields, the inputs the dataflow checks assume when a pipeline declares none.

docs/migrating.md describes each for users; nothing here runs a step.
"""

from __future__ import annotations

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
)

# Actions of the older engine that step-runtime does not run yet -> what they did there.
NOT_YET_SUPPORTED: dict[str, str] = {
    "parallel_roads_action": "opens a snapshot comparison for fork_action and merge_action",
    "fork_action": "runs its search step once per snapshot",
    "merge_action": "merges each snapshot's node texts into context_blocks",
}


def not_yet_supported_message(action: str) -> str:
    """The one diagnostic message for a step naming an action of the snapshot trio."""
    return (
        f"action {action!r} of the older engine ({NOT_YET_SUPPORTED[action]}) is not supported "
        "yet: parallel branches are a planned feature, so a run of this pipeline is refused"
    )


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
