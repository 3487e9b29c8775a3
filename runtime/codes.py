"""The one table of stable error and diagnostic codes.

Every coded error and diagnostic in step-runtime names a code from this table;
`docs/errors.md` is generated from it (a test fails when the page is stale) and
`runtime explain CODE` prints an entry. A code is never reused: a retired code
stays here with ``removed=True``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    """One entry of the code table."""

    name: str
    category: str
    summary: str
    hint: str = ""
    removed: bool = False


_CODES: list[Code] = [
    # --- YAML and loading -------------------------------------------------------
    Code(
        "YAML_SYNTAX",
        "load",
        "The file is not valid YAML.",
        "Fix the syntax at the position shown.",
    ),
    Code(
        "YAML_DUPLICATE_KEY",
        "load",
        "A mapping holds the same key twice.",
        "PyYAML would silently keep the last one; remove or rename one of them.",
    ),
    Code(
        "YAML_BOOLEAN_KEY",
        "load",
        "An unquoted key such as on/off/yes/no is a boolean in YAML 1.1.",
        'Quote the key ("on":) so every YAML tool reads it as a string.',
    ),
    Code(
        "YAML_BOOLEAN_VALUE",
        "load",
        "An unquoted yes/no/on/off value was read as a boolean where a string is expected.",
        "Quote the value.",
    ),
    Code(
        "YAML_TOO_LARGE",
        "load",
        "The document exceeds the size or node-count limit.",
        "Split the pipeline or remove alias expansion (a 'billion laughs' document is refused).",
    ),
    Code(
        "YAML_TOO_DEEP",
        "load",
        "The document nests deeper than the limit.",
        "Flatten the structure.",
    ),
    Code(
        "YAML_NOT_A_PIPELINE",
        "load",
        "The document root is not a pipeline mapping, YAMLpipeline or YAMLpipelines.",
        "A pipeline file is a mapping with `steps:` (or `extends:`).",
    ),
    Code(
        "FILE_NOT_FOUND", "load", "A file named on the command line or by `extends` does not exist."
    ),
    Code(
        "FILE_UNREADABLE",
        "load",
        "A file could not be read: not a regular file (a device, FIFO or folder), no "
        "permission, or not UTF-8.",
    ),
    Code(
        "VALIDATION_CRASHED",
        "load",
        "Validating a pipeline raised an unexpected exception (a bug in step-runtime or in a "
        "plugin action's checks). The other files and pipelines are still reported.",
        "Report it with the file; the message names the exception and where it was raised.",
    ),
    Code(
        "EXTENDS_CYCLE",
        "load",
        "Pipelines extend each other in a cycle.",
        "Break the cycle; `extends` must form a chain.",
    ),
    Code(
        "EXTENDS_TARGET_UNKNOWN",
        "load",
        "`extends: file#name` names a pipeline the file does not hold.",
    ),
    Code("PACK_DUPLICATE_NAME", "load", "Two pipelines in one pack share a name."),
    # --- schema -----------------------------------------------------------------
    Code(
        "SCHEMA_UNKNOWN_FIELD",
        "schema",
        "A field is not allowed here.",
        "Check the spelling against the action's field table in docs/actions/.",
    ),
    Code("SCHEMA_MISSING_FIELD", "schema", "A required field is missing."),
    Code("SCHEMA_TYPE", "schema", "A value has the wrong type."),
    Code("SCHEMA_ENUM", "schema", "A value is not one of the allowed choices."),
    Code("SCHEMA_RANGE", "schema", "A number or length is out of its allowed range."),
    Code("SCHEMA_PATTERN", "schema", "A string does not match its required pattern."),
    Code("SCHEMA_INVALID", "schema", "A value does not match the schema."),
    Code(
        "UNKNOWN_ACTION",
        "schema",
        "A step names an action that is not registered.",
        "Run `runtime actions` to list the registered actions.",
    ),
    Code(
        "FIDELITY_UNKNOWN",
        "schema",
        "A fidelity (a step's, a transition's or settings.default_fidelity) is not one of the "
        "six modes.",
        "Use full, truncate, compact, summary:low, summary:medium or summary:high "
        "(docs/fidelity.md).",
    ),
    Code(
        "TRANSITION_UNKNOWN_KEY",
        "schema",
        "A long-form transition ({step: ...}) holds a key other than step, fidelity and thread_id.",
        "Write `{step: <id>, fidelity: <mode>, thread_id: <name>}`; other step settings go on "
        "the target step.",
    ),
    # --- graph and semantic checks ---------------------------------------------------
    Code(
        "ENTRY_STEP_MISSING",
        "graph",
        "settings.entry_step_id is not set.",
        "Set settings.entry_step_id to the first step to run.",
    ),
    Code("ENTRY_STEP_UNKNOWN", "graph", "settings.entry_step_id names no step."),
    Code("DUPLICATE_STEP_ID", "graph", "Two steps share an id."),
    Code("UNKNOWN_STEP", "graph", "A transition names a step that does not exist."),
    Code(
        "UNREACHABLE_STEP",
        "graph",
        "No path from the entry step reaches this step.",
        "Remove the step or route to it.",
    ),
    Code(
        "NO_TRANSITION",
        "graph",
        "A step has no way on (`next`, a branch) and no `end: true`.",
        "Add `next:`, the action's `on_*` branches, or `end: true`.",
    ),
    Code(
        "NO_PATH_TO_END",
        "graph",
        "No path from this step ever reaches an end.",
        "Every loop needs an exit that leads to an `end: true` step.",
    ),
    Code(
        "UNBOUNDED_CYCLE",
        "graph",
        "A cycle passes no bounding step (such as loop_guard) and the pipeline sets no max_steps.",
        "Put a loop_guard step in the cycle or set settings.max_steps.",
    ),
    Code(
        "SETTING_MISSING", "graph", "A `*_from_settings` field names a setting that does not exist."
    ),
    Code("SETTING_TYPE", "graph", "A setting has the wrong type for the field that reads it."),
    Code("PROMPT_NOT_FOUND", "graph", "A prompt file named by `prompt_key` does not exist."),
    # --- issue 29: actions as tools, isolated roles ----------------------------------
    Code(
        "TOOL_NOT_A_TOOL",
        "graph",
        "A call_model step's `tools:` names an action that declares no tool face, so no model "
        "can call it.",
        "Offer an action with a tool face (docs/tools.md), or run it as a step of its own.",
    ),
    Code(
        "TOOL_CONFIG_INVALID",
        "graph",
        "A tool entry of `tools:` is wrong: offered twice, or its `with:` names a field the "
        "action does not have, a scope field, or a value its schema refuses.",
        "`with:` takes the action's own step fields (docs/tools.md); the scope comes from "
        "inputs and settings only.",
    ),
    Code(
        "TOOL_FACE_INVALID",
        "graph",
        "An action's tool face is unusable: its arguments are not an object schema with "
        "additionalProperties: false, name a scope field or a field the action lacks, or use "
        "an unknown safety tag.",
        "Fix the action's `tool = ToolFace(...)` (docs/tools.md).",
    ),
    Code(
        "PROMPT_FIELD_UNDECLARED",
        "graph",
        "A prompt template refers to a field ({name}) the step does not declare as a user "
        "part's source, or a system prompt holds such a placeholder (a system prompt is sent "
        "as written).",
        "Declare it as a user part (`user_parts: {x: {source: name}}`) or remove it; each "
        "model call sees only the fields it declares (docs/roles.md).",
    ),
    Code("INBOX_TARGET_UNKNOWN", "graph", "An inbox rule targets a step that does not exist."),
    Code(
        "THREAD_WITHOUT_FULL",
        "graph",
        "A thread is named (a step's or a transition's thread_id, or settings.default_thread) "
        "where no arrival resolves the fidelity to `full`, so no call ever joins the thread.",
        "Set `fidelity: full` on the step, on a transition into it or as "
        "settings.default_fidelity, or remove the thread_id.",
    ),
    Code(
        "FIDELITY_WITHOUT_MODEL",
        "graph",
        "`fidelity` or `thread_id` is set on a step, or on a transition into a step, whose "
        "action makes no model call that reads it (only a call_model step's prompt takes a "
        "fidelity preamble or a thread), so it has no effect.",
        "Move the field to the model step it is meant for, or remove it.",
    ),
    Code(
        "THREAD_FALLBACK_EMPTY",
        "graph",
        "A step arrived at in fidelity `full` names no thread (no thread_id on the step or "
        "the transition, no settings.default_thread, no group), so it joins the thread named "
        "after the previous step, which no other model step joins: it starts an empty "
        "conversation instead of continuing one. The run's trace says so too.",
        "Name the thread the step should continue: thread_id on the step or the transition, "
        "settings.default_thread, or a group shared with the steps before it.",
    ),
    Code(
        "ERROR_CODE_UNKNOWN",
        "graph",
        "A step's `catch` or `retry.on` names an error code that is not in the code table, so "
        "it would never match.",
        "Use a code from docs/errors.md (`runtime explain CODE` prints one), or ALL.",
    ),
    Code(
        "BUDGET_OPTIONS_EXCLUSIVE", "graph", "Budget options that exclude each other are combined."
    ),
    Code("BUDGET_SETTING_MISSING", "graph", "A budget falls back to a setting that is not set."),
    Code("BUDGET_CANNOT_FIT", "graph", "Budget settings that cannot fit together."),
    Code(
        "BUDGET_IMPOSSIBLE",
        "graph",
        "A model step's fixed prompt and reserved output alone exceed its model's window.",
        "Shorten the system prompt or templates, lower max_output_tokens, or use a model with "
        "a larger context_window (`runtime budget PIPELINE` shows the envelope).",
    ),
    Code(
        "BUDGET_MAY_OVERFLOW",
        "graph",
        "A model step's prompt may exceed its model's window, and nothing handles the overflow "
        "(a warning).",
        "Bound the parts named (manage_context_budget, an input maxLength), set a "
        "context_policy, or catch CONTEXT_OVERFLOW (`runtime budget PIPELINE`).",
    ),
    Code(
        "BUDGET_POLICY_CANNOT_FIT",
        "graph",
        "A model step with a context_policy: what the policy may not summarise (fixed text, "
        "the fidelity preamble, the question, parts marked summarizable: false) exceeds the "
        "policy's prompt budget at its bounds.",
        "Lower the bounds of the parts named (an input maxLength), mark a part that may be "
        "summarised `summarizable: true`, lower the reserve, or use a larger context_window "
        "(`runtime budget PIPELINE`).",
    ),
    Code(
        "POLICY_BUDGET_UNDER_FLOOR",
        "graph",
        "A context policy's prompt budget is under its emergency_floor: a prompt over it is "
        "rejected, never summarised (a warning).",
        "Raise prompt_budget (or the window) to at least emergency_floor, or lower "
        "emergency_floor.",
    ),
    Code(
        "POLICY_NO_WAY_BACK",
        "graph",
        "A model step's context policy may put parts behind pointers, and nothing can bring "
        "them back: no rehydrate tool is offered and no rehydrate step reads a pointer_to of "
        "its parts (a warning).",
        "Offer `tools: [rehydrate]`, or give the part `pointer_to: VAR` and add a rehydrate "
        "step with `pointer_id_from: VAR`.",
    ),
    Code("COMPACTION_RULE_INVALID", "graph", "A compaction rule is incomplete or out of range."),
    # issue 27 (assemble_context)
    Code(
        "ASSEMBLY_SOURCE_INVALID",
        "graph",
        "An assemble_context source is malformed: an unknown kind, axis, search type or "
        "filter, a name used twice, a state source without `from`.",
        "Use the kinds code, docs, memories, experiences, values, commits, state; axes full, "
        "strategy, surprise, root_cause (docs/assembly.md).",
    ),
    Code(
        "ASSEMBLY_BUDGET_MISSING",
        "graph",
        "assemble_context has no budget: neither max_tokens nor a max_tokens_from_settings "
        "naming a positive integer setting.",
    ),
    Code(
        "ASSEMBLY_PREMORTEM_INVALID",
        "graph",
        "assemble_context mode premortem needs exactly one of domain and domain_from "
        "(and at most one of strategy and strategy_from).",
    ),
    Code("RULE_INVALID", "graph", "A rule in a step's `rules` is malformed."),
    Code(
        "PROTECTED_FIELD",
        "graph",
        "A rule or value writes an engine-owned field.",
        "Engine-owned fields (inbox, loop counters, trace, run metadata) are read-only.",
    ),
    Code("MODEL_UNKNOWN", "graph", "A step or the CLI names a model not in settings.models."),
    Code(
        "ACTION_NOT_RUNNABLE",
        "graph",
        "The action is registered for validation but cannot run yet.",
    ),
    Code(
        "ACTION_LOAD_FAILED",
        "graph",
        "A plugin action failed to load.",
        "The diagnostic names the distribution; reinstall or remove it.",
    ),
    Code("INPUT_SPEC_INVALID", "graph", "An `inputs` declaration is malformed."),
    Code(
        "BRANCH_PIPELINE_INVALID",
        "graph",
        "A map or parallel branch given as `pipeline: file.yaml#name` does not load or "
        "validate, runs itself (a cycle), or does not take what `with` (and the map's item) "
        "pass.",
        "The message names the branch pipeline's first problem; `runtime validate` that file "
        "for all of them (docs/parallel.md).",
    ),
    Code(
        "SNAPSHOT_TRIO_INVALID",
        "graph",
        "An older-engine snapshot comparison is malformed: a fork_action's search_action "
        "names no step, reaches no merge_action (or more than one), or leads back to the "
        "fork; or a merge_action is reached from no fork.",
        "The steps from search_action up to one merge_action are what each snapshot runs "
        "(docs/migrating.md).",
    ),
    Code(
        "ACTION_NOT_YET_SUPPORTED",
        "graph",
        "Retired: the older engine's snapshot trio (parallel_roads_action, fork_action, "
        "merge_action) was refused before parallel branches existed; it now runs "
        "(docs/migrating.md).",
        removed=True,
    ),
    Code(
        "SETTING_UNUSED",
        "graph",
        "A setting that nothing reads: not a known setting, named by no `*_from_settings` "
        "field and read by no action of the pipeline (a warning).",
        "Remove it or fix its spelling; the known settings are listed in docs/format.md.",
    ),
    Code(
        "FIELD_IGNORED",
        "graph",
        "A step field accepted for compatibility with the older engine that step-runtime does "
        "not act on (a warning).",
        "Remove it; docs/migrating.md lists what each older field means here.",
    ),
    Code(
        "COMMAND_UNSUPPORTED",
        "graph",
        "An add_command_action command type that step-runtime cannot build (a warning): the "
        "step skips it at run time.",
        "The command types available are listed in docs/actions/add_command_action.md.",
    ),
    Code(
        "VARIABLE_NEVER_WRITTEN",
        "graph",
        "A step needs a state variable (a field such as `source` names it, or the action "
        "reads it) that no step writes on any path from the entry step to it and that is no "
        "declared input or action default: the run would fail there with VARIABLE_MISSING, "
        "or a router or finalize would find nothing (a warning; an error under --strict).",
        "Write it in a step before this one, declare it under `inputs`, or fix the name "
        "(docs/dataflow.md).",
    ),
    # --- issue 28: redaction and governed exceptions (docs/access.md) -----------------
    Code(
        "REDACTION_INVALID",
        "graph",
        "A `redact:` value (in settings or on a model step) names an unknown kind, a custom "
        "pattern name that is not lower-case letters, digits and _, or a built-in kind's "
        "name, or the same name twice.",
        "Kinds: email, phone, card, iban, secret, password; see docs/access.md, Redaction.",
    ),
    Code(
        "REDACTION_PATTERN_INVALID",
        "graph",
        "A custom redaction pattern is not a valid regular expression, is over 500 "
        "characters, matches the empty string, or backtracks catastrophically (it ran over "
        "its time bound on a short probe).",
        "Fix the expression; avoid nested quantifiers such as (a+)+.",
    ),
    Code(
        "REDACTION_PATTERN_TIMEOUT",
        "run",
        "A custom redaction pattern ran over its time bound on a prompt: the prompt is not "
        "sent (never unmasked).",
        "Make the pattern linear (no nested quantifiers), or narrow it.",
    ),
    Code(
        "EXCEPTION_DECLARED",
        "graph",
        "The pipeline declares a governed exception: a rule lifted for some steps until a "
        "date (a warning naming its owner and expiry; its use is traced).",
        "Keep it only as long as needed; its owner renews or removes it before it expires.",
    ),
    Code(
        "EXCEPTION_EXPIRED",
        "graph",
        "A governed exception is past its expiry date: `runtime validate` reports it as an "
        "error and `runtime exec` refuses the pipeline before the first step.",
        "Remove the exception (the rule holds again), or have its owner renew it.",
    ),
    Code(
        "EXCEPTION_INVALID",
        "graph",
        "A governed exception names an unknown rule, a step the pipeline does not have, an "
        "expiry that is not a date, or an id used twice.",
        "Rules: see docs/access.md, Governed exceptions.",
    ),
    # issue 29 (h29verify): verify_answer and the defenses against bad retrieval
    Code(
        "VERIFY_PATTERN_INVALID",
        "graph",
        "An `exempt` pattern of a verify_answer step is not a regular expression.",
        "Fix the pattern (Python `re` syntax); the message quotes the compiler's error.",
    ),
    Code(
        "VERIFY_VARIABLES_CLASH",
        "graph",
        "A verify_answer step names one variable for two things: the answer, what its "
        "model was shown (`shown_from`) and the verdict (`result_to`) are three variables.",
        "Give shown_from and result_to names of their own.",
    ),
    # --- run time ---------------------------------------------------------------
    Code("INPUT_MISSING", "run", "A required pipeline input was not given."),
    Code("INPUT_UNKNOWN", "run", "An input was given that the pipeline does not declare."),
    Code("INPUT_TYPE", "run", "An input has the wrong type."),
    Code(
        "INPUT_TOO_SHORT",
        "run",
        "A string input is shorter than the `minLength` its declaration asks for (an empty "
        "question, say).",
        "Pass the value the input asks for.",
    ),
    Code(
        "INPUT_PATTERN",
        "run",
        "A string input does not match the `pattern` its declaration gives (`\\S`: not blank).",
        "Pass the value the input asks for.",
    ),
    Code(
        "INPUT_TOO_LONG",
        "run",
        "A string input is longer than the `maxLength` its declaration allows.",
        "Pass a shorter value, or raise the input's maxLength (it bounds the prompt statically).",
    ),
    Code(
        "INPUT_TOO_LARGE",
        "run",
        "An `--inputs` file or `--input` value is larger than the input size limit.",
        "Pass less data, or raise --max-input-bytes ($RUNTIME_MAX_INPUT_BYTES; default 1 MiB).",
    ),
    Code(
        "INPUT_TOO_DEEP",
        "run",
        "An `--inputs` file or `--input` value nests JSON deeper than the depth limit.",
        "Flatten the value, or raise --max-input-depth ($RUNTIME_MAX_INPUT_DEPTH; default 64).",
    ),
    Code(
        "INPUT_INVALID_TEXT",
        "run",
        "An input holds text that is not valid Unicode: a byte that is not UTF-8 in an "
        "`--input` value or `--inputs` file, or a lone surrogate (JSON `\\ud800` without its "
        "pair) anywhere in the inputs. The message names the input and the position.",
        "Pass UTF-8 text; write a character beyond U+FFFF as its surrogate pair or as itself.",
    ),
    Code("VARIABLE_MISSING", "run", "A step reads a state variable that is not set."),
    Code("VARIABLE_TYPE", "run", "A state variable has the wrong type for the step."),
    Code(
        "STATE_NOT_SERIALIZABLE", "run", "A value written to state or an inbox payload is not JSON."
    ),
    Code(
        "STATE_PROTECTED", "run", "An action or model output tried to overwrite engine-owned state."
    ),
    Code(
        "MAX_STEPS_EXCEEDED",
        "run",
        "The run took more steps than max_steps.",
        "Raise settings.max_steps or --max-steps, or bound the loop with loop_guard.",
    ),
    Code("INBOX_LEFTOVER", "run", "Inbox messages were never consumed (inbox.on_leftover: error)."),
    Code("RUN_CANCELLED", "run", "The run was cancelled."),
    Code("RUN_NOT_FOUND", "run", "No run with this id is in the store."),
    Code("RUN_NOT_RESUMABLE", "run", "The run has completed or cannot be resumed."),
    Code(
        "PIPELINE_CHANGED",
        "run",
        "The pipeline changed since the run started.",
        "Pass --force to resume against the changed pipeline.",
    ),
    Code("STORE_ERROR", "run", "The run store failed."),
    Code(
        "DURABILITY_UNKNOWN",
        "run",
        "A run or run store was given a durability other than normal or full.",
        "normal: WAL without an fsync per checkpoint (the default); full: fsync every checkpoint.",
    ),
    Code(
        "STORE_NOT_FOUND",
        "run",
        "The run store named by --store or $RUNTIME_STORE does not exist.",
        "Check the path; only `runtime exec` creates a run store.",
    ),
    Code(
        "STORE_URL_UNSUPPORTED",
        "run",
        "A run store or node index was given as a URL; only local SQLite files are supported "
        "(Postgres is not supported yet).",
        "Pass a file path such as .runtime/runs.db or .runtime/index.db.",
    ),
    # issue 34: the run store on PostgreSQL (runtime/engine/pgstore.py)
    Code(
        "STORE_UNAVAILABLE",
        "run",
        "The Postgres run store cannot be reached, or its server went away mid-run.",
        "Start the database (or fix the URL) and run `runtime resume RUN_ID`: the run goes on "
        "from its last checkpoint.",
    ),
    Code(
        "STORE_DRIVER_MISSING",
        "run",
        "A postgresql:// store was given but psycopg 3 or psycopg-pool is not installed.",
        "pip install 'step-runtime[postgres]'.",
    ),
    Code(
        "STORE_COPY_MISMATCH",
        "run",
        "`runtime store copy` read back a table that differs from the source (row count or "
        "SHA-256 of its rows); the copy was rolled back.",
        "Nothing was copied. Check the target database (disk, encoding) and copy again.",
    ),
    Code(
        "STORE_COPY_TARGET_NOT_EMPTY",
        "run",
        "`runtime store copy` was given a target store that already holds runs.",
        "Copy into a new SQLite file or an empty Postgres database.",
    ),
    Code(
        "STORE_LEASE_LOST",
        "run",
        "A worker wrote to a run whose lease another worker has taken over since (it was "
        "paused or cut off past its lease); the write was refused.",
        "Nothing to do: the worker holding the lease continues the run from its last checkpoint.",
    ),
    Code(
        "STORE_URL_INVALID",
        "run",
        "A postgresql:// store URL is malformed or names an unknown connection option.",
        "Write it as postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE.",
    ),
    Code(
        "LEDGER_MISMATCH",
        "run",
        "`runtime verify`: a stored row a run's provenance ledger covers (a trace event, a "
        "checkpoint, a variable, a pointer's original, a context pack, the ledger itself) is "
        "not what its entry recorded, or a stored row is in no entry.",
        "The run's record was changed after it was written: the report names the first entry.",
    ),
    Code(
        "LEDGER_UNSIGNED",
        "run",
        "`runtime verify` with $RUNTIME_LEDGER_KEY set: a ledger entry carries no signature.",
        "The run was written without the key; verify without it to check the chain alone.",
    ),
    Code(
        "LEDGER_KEY_MISMATCH",
        "run",
        "`runtime verify` with $RUNTIME_LEDGER_KEY set: a ledger entry was signed with another "
        "key (or its signature was changed).",
    ),
    Code(
        "LEDGER_MISSING",
        "run",
        "`runtime verify`: the run has no provenance ledger (stored before the ledger existed, "
        "or by a store opened with ledger=False).",
    ),
    # issue 26 (round 4): checkpoints sealed in batches
    Code(
        "LEDGER_SEALED_LATE",
        "run",
        "`runtime verify` (a warning): a ledger entry sealed rows of a run killed before their "
        "batch was sealed, when the run was resumed or verified; those rows were unprotected "
        "from their write until then.",
        "The entry names what it vouched for; a change made to them before it was written "
        "cannot be told apart.",
    ),
    Code(
        "LEDGER_SEAL_EVERY_INVALID",
        "run",
        "A run store was opened with `seal_every` that is not a whole number of at least 1.",
        "Pass how many checkpoints a ledger entry may cover at most (default 32).",
    ),
    Code("ACTION_FAILED", "run", "An action raised an unexpected exception (a bug in the action)."),
    Code("TRANSFORM_FAILED", "run", "A set_variables transform cannot apply to its value."),
    Code("QUERY_EMPTY", "run", "A search has an empty query."),
    Code(
        "SCOPE_INVALID",
        "run",
        "A scope value (repository, snapshot or an allowed label) is empty, blank, padded with "
        "whitespace or not a string; an empty value would otherwise mean every repository.",
        "Pass the exact name, or leave the input out: the scope in settings applies then.",
    ),
    Code(
        "SCOPE_WIDENED",
        "run",
        "A run input asks for more than the scope pinned in settings: another repository or "
        "snapshot, or labels not in settings.allowed_labels. Inputs may only narrow it.",
        "Leave the input out or repeat the pinned value; to allow more, change the settings.",
    ),
    # --- issue 28: subjects and access policy (docs/access.md) -------------------------
    Code(
        "SUBJECT_INVALID",
        "usage",
        "The run's subject (the `subject` input, `--subject`, the embedding API's subject=) "
        "is not an object of id, tenant, roles, clearance and attributes, a value is blank "
        "or not a string, or its clearance names a tenant label.",
        'Give {"tenant": "a", "clearance": ["public"], ...}; a tenant is '
        "granted only by `tenant`; other attributes go under `attributes`.",
    ),
    Code(
        "SUBJECT_CHANGED",
        "usage",
        "A resume gave a subject other than the one the run was started by; a run answers "
        "one subject.",
        "Resume without --subject (the recorded subject is kept), or start a new run.",
    ),
    Code(
        "ACCESS_POLICY_INVALID",
        "run",
        "settings.access cannot be used: an unknown engine, Cedar policies or a schema that "
        "do not read, parse or validate, an OPA url that is not OPA's data API or carries "
        "credentials, or a third-party engine that failed to load.",
        "Fix settings.access (docs/access.md); `runtime validate` reports it with its line.",
    ),
    Code(
        "ACCESS_POLICY_OVERRIDDEN",
        "load",
        "A pipeline changes settings.access that the pipeline it extends locked "
        "(`locked: true`): an extends may not swap the access policy.",
        "Leave settings.access out of the extending pipeline (it inherits the locked one), "
        "or change the locked pipeline itself.",
    ),
    Code(
        "ACCESS_ENGINE_FAILED",
        "run",
        "The access policy engine could not decide (unreachable, an error, an answer of the "
        "wrong shape): every resource it was asked about is denied, never allowed; the "
        "ACCESS trace event carries this code.",
        "Check the engine (OPA's server and rule path, the Cedar policies); the run goes on "
        "with what the engine could allow.",
    ),
    Code(
        "ACCESS_DENIED",
        "run",
        "The run's subject may not read what was asked for (a pointer or a file whose "
        "content its access policy denies).",
        "Read it as a subject cleared for it.",
    ),
    Code("SEARCH_TYPE_UNRESOLVED", "run", "search_type auto could not be resolved."),
    Code(
        "PRIORITIZATION_MODE_INVALID",
        "run",
        "An inbox message asked for an unknown prioritization_mode.",
    ),
    Code(
        "PIPELINE_BUDGET_MISCONFIG",
        "run",
        "The incoming texts alone cannot fit into max_context_tokens.",
        "The retrieval budget is larger than the global budget; lower it.",
    ),
    Code(
        "INDEX_NOT_FOUND",
        "run",
        "The node index does not exist.",
        "Build it with `runtime index PATH`.",
    ),
    Code(
        "INDEX_FORMAT",
        "run",
        "The node index was written by another version of step-runtime.",
        "Run `runtime index PATH` again: it rebuilds the index in the current format.",
    ),
    Code("INDEX_ERROR", "run", "The node index failed."),
    # issue 34: the node index on PostgreSQL (runtime/retrieval/pgindex.py)
    Code(
        "INDEX_UNAVAILABLE",
        "run",
        "The Postgres node index cannot be reached, or its server went away mid-search.",
        "Start the database (or fix the --index URL / $RUNTIME_INDEX) and search again.",
    ),
    # issue 34: `runtime index --index postgresql://...` (runtime/retrieval/pgwrite.py)
    Code(
        "INDEX_BUSY",
        "run",
        "Another `runtime index` has been writing this Postgres index for longer than this "
        "one waits (one indexer writes a database at a time).",
        "Run again when the other indexer has finished; the index it is writing stays "
        "searchable meanwhile.",
    ),
    Code(
        "REPOSITORY_REQUIRED",
        "usage",
        "`runtime index` cannot choose the repository name: several paths are given, or the "
        "tree is already indexed under more than one name.",
        "Pass --repository NAME.",
    ),
    Code(
        "LABELS_UNMATCHED",
        "usage",
        "`runtime index --labels`: none of the labels file's globs matches a file, so every "
        "file it was meant to label would be visible to all; nothing was indexed.",
        "Globs match paths relative to the repository root (recorded when the repository was "
        "first indexed; --repo-root sets it): write them from there, e.g. src/Secrets/*.",
    ),
    Code(
        "LABELS_OUTSIDE_ROOT",
        "usage",
        "`runtime index --labels`: a path lies outside the repository root that label globs "
        "match from, so its files could not be labelled; nothing was indexed.",
        "Index a folder under the root, or pass --repo-root with a folder holding every path.",
    ),
    Code(
        "EMBEDDINGS_UNAVAILABLE",
        "run",
        "Semantic search needs an embedding provider that is not installed.",
        "pip install 'step-runtime[embeddings]' or configure an embeddings endpoint.",
    ),
    Code(
        "EMBEDDINGS_MISSING",
        "run",
        "Semantic or hybrid search on an index that holds no vectors of the embedder (or of "
        "the text it embeds now: an index embedded by an older version).",
        "Run `runtime index PATH --embedder NAME`: it embeds every node without a vector, "
        "unchanged files included.",
    ),
    Code(
        "TOKENIZER_UNAVAILABLE",
        "run",
        "The tokenizer is unknown or unavailable: an encoding, a tokenizer.json (hf:PATH) "
        "or the tokenizers package, or a server's /tokenize endpoint (tokenizer: server).",
        "cl100k_base and o200k_base ship with the install; hf:PATH needs the embeddings "
        "extra; server needs a llama.cpp-style /tokenize (docs/models.md).",
    ),
    # issue 27 (assemble_context): warnings in the trace, the other sources still assemble
    Code(
        "ASSEMBLY_SOURCE_FAILED",
        "run",
        "A source of assemble_context failed (its store raised a coded error); the event "
        "names the source and the error's own code, and the pack is built from the others.",
    ),
    Code(
        "ASSEMBLY_SOURCE_TIMEOUT",
        "run",
        "A source of assemble_context gave no answer within timeout_seconds; the pack is "
        "built from the others.",
        "Raise timeout_seconds on the step, or look at the store the source reads.",
    ),
    # --- models (one subtree) ----------------------------------------------------
    Code(
        "MODEL_TOOL_ROUNDS_EXCEEDED",
        "model",
        "The model kept calling tools after max_tool_rounds rounds and a final request that "
        "offered none.",
        "Raise max_tool_rounds, or tell the model in the prompt to answer once it has what it "
        "needs.",
    ),
    Code(
        "TOOL_ARGUMENTS_INVALID",
        "model",
        "A model called a tool with arguments that are not the JSON object the tool takes "
        "(answered to the model as an error, and traced).",
        "Nothing to do unless it repeats: the model reads the error and may call again.",
    ),
    Code(
        "TOOL_UNKNOWN",
        "model",
        "A model called a tool the step does not offer (answered to the model as an error, and "
        "traced).",
        "Offer the tool in the step's `tools`, or ignore: the model reads the error.",
    ),
    Code(
        "CONTEXT_OVERFLOW",
        "model",
        "The prompt plus reserved output tokens exceeds the model's context window.",
    ),
    Code(
        "POINTER_UNKNOWN",
        "run",
        "A rehydrate names a pointer id the run does not have (ids are `ptr-` and 16 hex digits).",
        "Copy the id from the [ELIDED ptr-…] block of the prompt or the CONTEXT_BUDGET_DECISION "
        "trace event of the same run.",
    ),
    Code(
        "SLICE_INVALID",
        "run",
        "A rehydrate slice is malformed or outside the original: lines past the end, a JSON path "
        "that names no value, a hunk the diff does not have.",
        "Use `lines A-B` (1-based, inclusive), a JSON path such as `$.items[3].name`, or "
        "`hunk N`; the pointer's summary gives line numbers, paths and hunks.",
    ),
    Code(
        "POINTER_STORE_UNAVAILABLE",
        "run",
        "The run's services have no pointer store for originals behind pointers.",
        "Use the engine's Services (it provides one), or pass pointer_store= to Services.",
    ),
    Code(
        "SUMMARY_KIND_UNAVAILABLE",
        "run",
        "No summariser is installed for the kind asked for (code is installed by the action "
        "layer).",
        "Use text, diff, json, log or markdown, or import actions before summarising code.",
    ),
    Code(
        "PACK_BUDGET_INVALID",
        "graph",
        "A `pack_budget:` (settings or a call_model step) gives section fractions that sum to "
        "more than 1.",
        "Lower the fractions so they sum to at most 1 (docs/packs.md); `safety` is headroom "
        "that counts in the sum.",
    ),
    Code(
        "PACK_BUDGET_EXCEEDED",
        "run",
        "A section of a model call's context pack is over its `pack_budget` share by more than "
        "10% (5-10% is a PACK_BUDGET_OVER event in the trace). The pack is stored first.",
        "Read the pack (`runtime context RUN --step ID`), then bound what fills the section "
        "or give it a larger share.",
    ),
    Code(
        "PACK_COVERAGE_LOW",
        "run",
        "A context pack's drop report accounts for less than 95% of the tokens the call "
        "removed from its prompt: an event in the trace at run time, an assertion failure in "
        "tests (runtime.context.packs.assert_coverage).",
        "Report every reduction as a drop (id, reason, tokens saved) where it is made.",
    ),
    Code(
        "SUMMARY_KIND_MISMATCH",
        "run",
        "A payload declared as one kind is not of that kind (e.g. `json` that does not parse).",
        "Fix the declared kind, or leave it out to detect it.",
    ),
    Code("SUMMARY_BUDGET_INVALID", "run", "A summary was asked for with a budget below 1 token."),
    Code(
        "SUMMARY_MODEL_FAILED",
        "run",
        "The model a part's `summary_kind: model:NAME` names failed to summarise it (its "
        "error is the event's `cause`); the deterministic summariser was used instead (the "
        "SUMMARY_MODEL_FALLBACK trace event, not a step failure).",
        "See the cause: a timeout (raise the model's deadline_seconds), a refused request, an "
        "empty reply; or summarise that part deterministically (a plain summary_kind).",
    ),
    Code(
        "REHYDRATE_OVER_BUDGET",
        "run",
        "A rehydrate step's text is over its max_tokens (or settings.max_context_tokens).",
        "Ask for a slice (`lines A-B`, a JSON path, `hunk N`), or raise max_tokens.",
    ),
    Code(
        "INVALID_STRUCTURED_OUTPUT",
        "model",
        "The model's reply is not the JSON the step asked for.",
    ),
    Code("MODEL_RATE_LIMITED", "model", "The model server answered 429 after all retries."),
    Code("MODEL_TIMEOUT", "model", "The model server did not answer in time."),
    Code(
        "MODEL_OUTPUT_TRUNCATED",
        "model",
        "The reply was cut (`finish_reason: length`) before the output tokens the step "
        "reserved: the server counted the prompt as longer than the runtime did "
        "(a step with `on_truncated: fail`; the default, warn, traces it and goes on).",
        "Use the model's own tokenizer (`tokenizer: server` or `hf:PATH`), or a `token_margin`, "
        "so the prompt budget leaves the reserved output room (docs/models.md).",
    ),
    Code("MODEL_PROVIDER_ERROR", "model", "The model server failed or answered malformed data."),
    Code(
        "MODEL_AUTH_ERROR",
        "model",
        "The model server refused the credentials.",
        "Set the API key in the environment variable named by the model's settings.",
    ),
    Code("MODEL_CONFIG_INVALID", "model", "A model spec or settings.models entry is malformed."),
    Code(
        "CASSETTE_EXHAUSTED",
        "model",
        "A replay cassette has no more recorded responses for this step.",
    ),
    Code("CASSETTE_INVALID", "model", "A cassette file is missing or malformed."),
    # --- usage ------------------------------------------------------------------
    Code("USAGE", "usage", "The command line is wrong."),
    Code(
        "OTEL_NOT_INSTALLED",
        "usage",
        "OpenTelemetry is enabled ($RUNTIME_OTEL, an $OTEL_EXPORTER_OTLP_ENDPOINT, or a tracer "
        "provider given to the embedding API) but its packages are not installed.",
        "pip install 'step-runtime[otel]', or unset the variables (RUNTIME_OTEL=0 keeps it off).",
    ),
    Code(
        "OTEL_SETTING_INVALID",
        "usage",
        "An OpenTelemetry environment variable has a value step-runtime does not read "
        "($RUNTIME_OTEL, $OTEL_SDK_DISABLED or "
        "$OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT not a boolean, or an OTLP "
        "protocol other than http/protobuf).",
        "Set it to true or false (for the protocol: http/protobuf), or unset it.",
    ),
    Code(
        "RESUME_CHOICE_CHANGED",
        "usage",
        "A resume gave a model, index or tokenizer other than the run was started with "
        "(`--model`, `--index`, or an environment variable such as `$OPENAI_BASE_URL` "
        "set to another value); the message names what was recorded and what was given.",
        "Resume without it (what is not given is taken from the run), or pass --force "
        "to go on with what is given; the trace records the change.",
    ),
    # --- issue 27: memories, experiences, values, git history ----------------------
    Code(
        "MEMORY_INVALID",
        "run",
        "A memory or experience is malformed: a field missing, of the wrong type or out "
        "of range, an unknown field, or a checksum that is not the text's; the message "
        "names the item and the field, and nothing of the batch is stored.",
        "Fix the field named (docs/assembly.md lists every field and its range).",
    ),
    Code(
        "MEMORY_UNLABELLED",
        "run",
        "A memory or experience was written without a `labels` list; nothing is stored.",
        "Give every item its security labels (`labels: []` for an item anyone may read).",
    ),
    Code(
        "MEMORY_STORE_ERROR",
        "run",
        "The memory store cannot be read or written: not a memory store, damaged (a row "
        "whose checksum does not match its fields), or a SQLite error.",
        "Restore the file from a copy, or rebuild it (`runtime memories import` of the "
        "seeds, `runtime values rebuild`).",
    ),
    # issue 34: memories on PostgreSQL (runtime/retrieval/pgmemories.py)
    Code(
        "MEMORY_STORE_UNAVAILABLE",
        "run",
        "The Postgres memory store cannot be reached, or its server went away mid-search "
        "or mid-write (a write that failed so stored nothing).",
        "Start the database (or fix the --memories URL / $RUNTIME_MEMORIES / the "
        "postgresql:// --index the memories sit beside) and try again.",
    ),
    Code(
        "MEMORY_AXIS_UNKNOWN",
        "run",
        "An experience search named an axis other than full, strategy, surprise or "
        "root_cause, or a filter other than domain, strategy, outcome, pipeline or "
        "confidence_tier.",
        "Use one of the axes and filters listed.",
    ),
    Code(
        "EXPERIENCE_NOT_FOUND",
        "run",
        "`runtime feedback` named a run that was never recorded as an experience (and is "
        "not in the run store).",
        "Check the run id (`runtime runs`).",
    ),
    Code(
        "GIT_NOT_A_REPOSITORY",
        "usage",
        "`runtime index PATH --git` was given a path that is not inside a git work tree.",
        "Index the repository's folder, or leave out --git.",
    ),
    Code(
        "GIT_ERROR",
        "run",
        "git is missing or `git log` failed while indexing history; the message quotes "
        "git's error.",
        "Install git, or check the repository with `git log` yourself.",
    ),
    # --- issue 30: runtime eval -------------------------------------------------
    Code(
        "CASES_INVALID",
        "load",
        "An evaluation cases file (CASES.yaml) does not match its schema "
        "(`runtime schema --cases`) or holds a bad regex, a repeated case id, or k and "
        "tokens together; the message names file:line.",
        "Fix the case at the position shown (docs/eval.md).",
    ),
    Code(
        "EVAL_EVIDENCE_UNKNOWN",
        "usage",
        "A case names expected evidence or a distractor (a node id, path glob or kind and "
        "name) that no node of the index matches: recall could never be measured, or the "
        "case would run without its distractor.",
        "Index the corpus the cases are about (--index, or the cases file's corpus:), or "
        "correct the id.",
    ),
    Code(
        "EVAL_BASELINE_INVALID",
        "usage",
        "The --baseline file is not a report.json written by `runtime eval`.",
        "Pass the report.json of an earlier run (docs/eval.md, report keys).",
    ),
    Code(
        "EVAL_PLOTS_UNAVAILABLE",
        "usage",
        "The context-rot and position plots need matplotlib, which is not installed; the "
        "other outputs were written.",
        "pip install 'step-runtime[eval]'.",
    ),
    # --- the behaviour lock (issue 32) -------------------------------------------
    Code(
        "LOCK_DRIFT",
        "graph",
        "A locked pipeline resolves differently from its lock file: a step, setting, prompt "
        "byte, action behaviour version or default, model, tokenizer, policy or the runtime "
        "version changed. The message says what, where and how (old and new value or hash).",
        "Review the change; if it is meant, `runtime lock FILE --update` rewrites the lock "
        "(`runtime lock FILE --diff` shows it first).",
    ),
    Code(
        "LOCK_MISSING",
        "graph",
        "A pipeline is locked (`settings.compat_mode: locked`, or `--locked`) but its lock "
        "file does not exist.",
        "Write it with `runtime lock FILE` and commit it beside the pipeline.",
    ),
    Code(
        "LOCK_INVALID",
        "graph",
        "A lock file cannot be read: not JSON, not an object, an unknown lock_version, or a "
        "field of the wrong shape.",
        "Write it again with `runtime lock FILE --update` (an older engine's lock: "
        "`runtime lock FILE --upgrade`).",
    ),
    Code(
        "LOCK_LEGACY",
        "graph",
        "The lock file is the older engine's (lock_version 1): its allowed step keys and "
        "defaults are honoured, but prompts, settings and models are not frozen by it.",
        "`runtime lock FILE --upgrade` writes the new format from it.",
    ),
    # --- runtime serve (issue 33) -------------------------------------------------
    Code(
        "SERVE_BAD_REQUEST",
        "usage",
        "A request to `runtime serve` is not what the route takes: not JSON, not an object, a "
        "field missing or of the wrong type (HTTP 400). The message names the field.",
        "Send the body docs/serve.md shows for the route (the OpenAPI document: /openapi.json).",
    ),
    Code(
        "SERVE_BODY_TOO_LARGE",
        "usage",
        "A request body is over the server's limit (`runtime serve --max-body-bytes`; HTTP 413).",
        "Send less (a shorter history), or start the server with a larger limit.",
    ),
    Code(
        "SERVE_BUSY",
        "run",
        "Every run slot of the server is taken (`runtime serve --max-runs`; HTTP 429 with "
        "Retry-After).",
        "Retry after the number of seconds in the Retry-After header.",
    ),
    Code(
        "SERVE_DEADLINE",
        "run",
        "A run took longer than the server's per-run deadline (`runtime serve --deadline`); "
        "it was cancelled (HTTP 504).",
        "Ask something narrower, or start the server with a longer --deadline.",
    ),
    Code(
        "SERVE_UNKNOWN_MODEL",
        "usage",
        "A chat completion or run names a pipeline the server does not serve (HTTP 404); the "
        "message lists the served ones and the closest name.",
        "Use a name from GET /v1/models.",
    ),
    Code(
        "SERVE_NOT_FOUND",
        "usage",
        "No route of the server matches the request's path and method (HTTP 404 or 405).",
        "See the OpenAPI document at /openapi.json.",
    ),
    Code(
        "SERVE_NOT_RUNNING",
        "run",
        "POST /runs/{id}/cancel names a run this server has not got going (it has ended, or "
        "another process runs it; HTTP 409). The body gives the run's status.",
        "Nothing to cancel; a run of another process is cancelled there.",
    ),
    Code(
        "SERVE_INTERNAL",
        "run",
        "The server hit an error of its own while answering (a bug; HTTP 500). The response "
        "names the exception's type only; the server's log has the traceback.",
        "Report it with the server's log.",
    ),
    Code(
        "SERVE_UNAUTHORIZED",
        "usage",
        "A request to a server bound to an address other than loopback carries no bearer "
        "token, or not one the server knows (HTTP 401).",
        "Send `Authorization: Bearer TOKEN` with a token from the server's token file or "
        "$RUNTIME_SERVE_TOKEN.",
    ),
    Code(
        "SERVE_TOKEN_MISSING",
        "usage",
        "`runtime serve` was asked to bind an address other than loopback without a bearer "
        "token ($RUNTIME_SERVE_TOKEN or --token-file), or the token file cannot be read or is "
        "empty. The server does not start.",
        "Set $RUNTIME_SERVE_TOKEN or pass --token-file FILE (lines `NAME TOKEN`), or bind "
        "127.0.0.1.",
    ),
    Code(
        "SERVE_SUBJECT_IN_BODY",
        "usage",
        "A request body names a `subject`: a run's subject comes only from the server's "
        "mapping of authenticated callers (--subjects), never from the request (HTTP 400).",
        "Leave `subject` out; map the caller's token name to a subject in the --subjects file.",
    ),
    Code(
        "SERVE_SUBJECTS_INVALID",
        "usage",
        "The --subjects file of `runtime serve` is not a JSON object mapping token names to "
        "subjects, or names a token the server does not have. The server does not start.",
        'Write {"TOKEN_NAME": {"id": ..., "roles": [...]}} (docs/serve.md).',
    ),
]

CODES: dict[str, Code] = {c.name: c for c in _CODES}


def get(name: str) -> Code:
    """Return the code entry; an unknown name is a programming error."""
    return CODES[name]
