"""`type: map` and `type: parallel` steps: branches run concurrently on isolated state.

A map step runs its `steps` once per item of a list (`items_from`, the item as `as`), a
parallel step each of its named `branches`, all on threads up to `max_concurrency`. A
branch is a run of its own in the same run store (id `<run>.<step>.<key>`): its own
state, inbox, loop counters and checkpoints. It gets only what `with` passes (and its
item), never the parent's state, and gives back only its result: the variables named by
`output` (default: the branch's `final_answer`/`answer`), in `results_to` (a list in item
order for map, a mapping by branch name for parallel). `on_failure: fail` (default)
cancels the other branches and fails the step with the first error; `collect` records
each failed branch's error in its result and goes on. A resumed parent re-runs only the
branches that did not complete: a completed branch run is read back, a failed or killed
one is resumed from its own last checkpoint. Validation sees into the branches: their
steps are checked as a pipeline of their own whose inputs are `with`'s names and the
item, with positions in the parent file (docs/parallel.md).
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any, ClassVar

from runtime.contract.action import ENGINE_OWNED, Action, Problem, StepContext, VariableRead
from runtime.errors import RunError
from runtime.format.branches import as_action, branch_refs, branch_steps, ref_target

_KEY = re.compile(r"[^A-Za-z0-9_.-]")
MAX_CONCURRENCY = 64

_STEPS = {"type": "array", "minItems": 1, "items": {"type": "object"}}
_REF = {
    "type": "string",
    "minLength": 1,
    "description": "A pipeline to run instead of inline steps: file.yaml, or file.yaml#name "
    "for a pipeline of a pack; relative to this file's folder.",
}
# The branch pipelines being checked, so one that names itself (or a cycle) is an error,
# not an endless recursion.
_CHECKING: ContextVar[frozenset[str]] = ContextVar("step_runtime_branch_refs", default=frozenset())


def _fields(kind: str) -> dict[str, dict[str, Any]]:
    common: dict[str, dict[str, Any]] = {
        "type": {"enum": [kind], "description": f"`{kind}`: this step runs branches."},
        "with": {
            "type": "object",
            "additionalProperties": {"type": "string", "minLength": 1},
            "description": "What a branch gets: {its variable: the parent's variable}. "
            "Nothing else of the parent's state reaches it.",
        },
        "output": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "description": "The branch variables that are its result (default: its "
            "final_answer or answer).",
        },
        "results_to": {"type": "string", "minLength": 1, "description": "Where the results go."},
        "flatten": {
            "type": "boolean",
            "description": "Concatenate the branches' list results into one list, in "
            "branch order (e.g. the evidence of every snapshot, for one model call).",
        },
        "on_failure": {
            "enum": ["fail", "collect"],
            "description": "fail (default): cancel the other branches, fail the step; "
            "collect: record each failed branch's error and go on.",
        },
        "max_concurrency": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_CONCURRENCY,
            "description": "Branches at once (default 4).",
        },
    }
    if kind == "map":
        return {
            **common,
            "items_from": {"type": "string", "minLength": 1, "description": "A list variable."},
            "as": {"type": "string", "minLength": 1, "description": "The item's name in a branch."},
            "key": {
                "type": "string",
                "minLength": 1,
                "description": "A field of each (object) item that names its branch run "
                "(default: its index).",
            },
            "steps": {**_STEPS, "description": "The steps each item runs."},
            "pipeline": {
                **_REF,
                "description": "The pipeline each item runs (instead of "
                "steps): file.yaml or file.yaml#name, relative to this file's folder.",
            },
        }
    return {
        **common,
        "branches": {
            "type": "object",
            "minProperties": 1,
            # the name keys the branch's run id (<run>.<step>.<name>): refused by validate,
            # not first at run time
            "propertyNames": {"pattern": "^[A-Za-z0-9_.-]+$"},
            "additionalProperties": {
                "anyOf": [
                    _STEPS,
                    {
                        "type": "object",
                        "required": ["pipeline"],
                        "properties": {"pipeline": _REF},
                        "additionalProperties": False,
                    },
                ]
            },
            "description": "Named branches, each a list of steps or {pipeline: file.yaml#name}.",
        },
    }


class _Branches(Action):
    """What map and parallel share."""

    kind: ClassVar[str] = ""
    runnable = True

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        for name, source in (step.get("with") or {}).items():
            if isinstance(source, str):
                yield VariableRead((source,), ("with", name))
        if isinstance(step.get("items_from"), str):
            yield VariableRead((step["items_from"],), ("items_from",))

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        if isinstance(step.get("results_to"), str):
            yield step["results_to"]

    @classmethod
    def branch_steps(cls, step: Mapping[str, Any]) -> dict[str, Any]:
        """name -> its steps (map: one branch, `item`)."""
        return branch_steps({**step, "type": cls.kind})

    @classmethod
    def sub_pipeline(
        cls, step: Mapping[str, Any], steps: Any, settings: Mapping[str, Any], name: str
    ) -> dict[str, Any]:
        """A branch as a pipeline of its own: its steps, the parent's settings (entry step
        its first), its inputs `with`'s names and the item."""
        inputs: dict[str, Any] = {n: {"type": "any"} for n in step.get("with") or {}}
        if cls.kind == "map":
            inputs[str(step.get("as") or "item")] = {"type": "any"}
        settings = {k: v for k, v in settings.items() if k not in ("entry_step_id", "compat_mode")}
        first = steps[0] if isinstance(steps, list) and steps else None
        if isinstance(first, Mapping) and isinstance(first.get("id"), str):
            settings["entry_step_id"] = first["id"]  # a branch starts at its first step
        data: dict[str, Any] = {
            "name": name,
            "settings": settings,
            "inputs": inputs,
            "steps": [as_action(s) for s in steps],
        }
        if step.get("output"):
            data["outputs"] = list(step["output"])
        return data

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """The branches' steps, checked as pipelines of their own (positions in this file)."""
        from runtime.contract.registry import active_file, active_registry
        from runtime.format.pipeline import Pipeline
        from runtime.format.source import SourceMap
        from runtime.format.validation import check_pipeline

        # a map without items_from: the schema requires it (SCHEMA_MISSING_FIELD)
        results_to = step.get("results_to")
        if results_to in ENGINE_OWNED:  # else STATE_PROTECTED, after every branch ran
            yield Problem(
                "PROTECTED_FIELD", f"results_to {results_to!r} is engine-owned", ("results_to",)
            )
        registry = active_registry()
        if cls.kind == "map" and ("steps" in step) == ("pipeline" in step):
            yield Problem(
                "SCHEMA_MISSING_FIELD" if "steps" not in step else "SCHEMA_INVALID",
                "a map step runs `steps` or a `pipeline`: give exactly one",
                (),
            )
        yield from cls._check_refs(step, registry)
        for name, steps in cls.branch_steps(step).items():
            if not isinstance(steps, list) or not steps:
                continue  # the schema said so
            where: tuple[Any, ...] = ("steps",) if cls.kind == "map" else ("branches", name)
            data = cls.sub_pipeline(step, steps, settings, name)
            # Built on the parent's file: prompts are found beside it, budgets are checked.
            prompts = Pipeline.from_dict(data, file=active_file())
            found = check_pipeline(data, SourceMap(data, "<branch>"), registry, prompts=prompts)
            for diag in found:
                path = _path(diag.path)
                if path[:1] != ("steps",):
                    continue  # the parent's settings are checked with the parent
                yield Problem(
                    diag.code,
                    f"branch {name!r}: {diag.message}",
                    (*where, *path[1:]),
                    diag.hint,
                    diag.severity,
                )

    @classmethod
    def _check_refs(cls, step: Mapping[str, Any], registry: Any) -> Iterator[Problem]:
        """Each `pipeline:` branch loads and validates, and takes what `with` (and the item)
        pass: no input it does not declare, every input it requires."""
        from runtime.contract.registry import active_file
        from runtime.errors import PipelineInvalidError
        from runtime.format.validation import load_pipeline

        for name, ref in branch_refs({**step, "type": cls.kind}).items():
            where: tuple[Any, ...] = (
                ("pipeline",) if cls.kind == "map" else ("branches", name, "pipeline")
            )
            file, member = ref_target(ref, active_file())
            key = f"{file}#{member or ''}"
            if key in _CHECKING.get():
                yield Problem(
                    "BRANCH_PIPELINE_INVALID",
                    f"branch {name!r}: {ref!r} runs a pipeline that is already being checked "
                    "(a branch pipeline cannot run itself, directly or through others)",
                    where,
                )
                continue
            token = _CHECKING.set(_CHECKING.get() | {key})
            try:
                sub = load_pipeline(file, name=member, registry=registry)
            except PipelineInvalidError as exc:
                first = next(
                    (d for d in exc.diagnostics if d.severity == "error"), exc.diagnostics[0]
                )
                at = f"{first.file}:{first.line}: " if first.line else ""
                yield Problem(
                    "BRANCH_PIPELINE_INVALID",
                    f"branch {name!r}: {ref!r} is not a valid pipeline: {at}{first.code} "
                    f"{first.message}",
                    where,
                )
                continue
            finally:
                _CHECKING.reset(token)
            given = set(step.get("with") or {})
            if cls.kind == "map":
                given.add(str(step.get("as") or "item"))
            if sub.inputs is not None:
                unknown = sorted(given - set(sub.inputs))
                missing = sorted(n for n, s in sub.inputs.items() if s.required and n not in given)
                for problem, names in (("takes no input", unknown), ("requires", missing)):
                    if names:
                        yield Problem(
                            "BRANCH_PIPELINE_INVALID",
                            f"branch {name!r}: {ref!r} {problem} {', '.join(map(repr, names))}"
                            " (what `with`" + (" and `as`" if cls.kind == "map" else "") + " pass)",
                            where,
                        )

    # --- running -------------------------------------------------------------
    def run(self, ctx: StepContext) -> None:
        from runtime.engine import Engine
        from runtime.format.pipeline import Pipeline

        step = ctx.step
        passed = {name: ctx.get(source) for name, source in (step.get("with") or {}).items()}
        jobs = self.jobs(ctx, passed)
        settings = ctx.settings
        store = getattr(ctx.services, "run_store", None)
        registry = getattr(ctx.services, "registry", None)
        engines: dict[str, Any] = {}
        for name, steps in self.branch_steps(step).items():
            if not isinstance(steps, list):
                continue  # a `pipeline:` branch, below
            data = self.sub_pipeline(step, steps, settings, f"{ctx.pipeline.name}/{ctx.step_id}")
            pipeline = Pipeline.from_dict(data, file=ctx.pipeline.file)
            engines[name] = Engine(pipeline, registry=registry, services=ctx.services, store=store)
        for name, ref in branch_refs({**step, "type": self.kind}).items():
            from runtime.format.validation import load_pipeline

            file, member = ref_target(ref, ctx.pipeline.file)
            pipeline = load_pipeline(file, name=member, registry=registry)
            engines[name] = Engine(pipeline, registry=registry, services=ctx.services, store=store)
        fail_fast = step.get("on_failure", "fail") == "fail"
        width = int(step.get("max_concurrency", 4))
        results = run_branches(ctx, engines, jobs, width=width, fail_fast=fail_fast)
        out = [
            {"error": r.error.to_dict()} if r.error is not None else _result(r, step)
            for r in results
        ]
        target = step.get("results_to")
        if target:
            if step.get("flatten"):
                flat: list[Any] = []
                for value in out:  # a failed branch (collect) adds nothing but its trace event
                    if isinstance(value, list):
                        flat.extend(value)
                    elif (
                        not (isinstance(value, Mapping) and "error" in value) and value is not None
                    ):
                        flat.append(value)
                ctx.set(target, flat)
            elif self.kind == "map":
                ctx.set(target, out)
            else:
                ctx.set(target, {key: value for (key, _, _), value in zip(jobs, out, strict=True)})

    def jobs(
        self, ctx: StepContext, passed: dict[str, Any]
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """(key, branch name, inputs) per branch run, in result order."""
        raise NotImplementedError


class MapStep(_Branches):
    """Runs its steps once per item of a list, concurrently, each on its own state."""

    name = "map"
    kind = "map"
    summary = "Run steps for each item of a list, concurrently, on isolated state."
    fields: ClassVar[dict[str, dict[str, Any]]] = _fields("map")
    required = ("items_from",)

    def jobs(
        self, ctx: StepContext, passed: dict[str, Any]
    ) -> list[tuple[str, str, dict[str, Any]]]:
        step = ctx.step
        items = ctx.get(step["items_from"])
        if not isinstance(items, list):
            raise RunError(
                f"step {ctx.step_id!r}: items_from {step['items_from']!r} must be a list, "
                f"got {type(items).__name__}",
                code="VARIABLE_TYPE",
                step_id=ctx.step_id,
            )
        name = str(step.get("as") or "item")
        field = step.get("key")
        out, seen = [], set()
        for i, item in enumerate(items):
            key = str(i)
            if field is not None:
                value = item.get(field) if isinstance(item, Mapping) else None
                if not isinstance(value, str | int) or isinstance(value, bool):
                    raise RunError(
                        f"step {ctx.step_id!r}: item {i} has no {field!r} to key its branch by",
                        code="VARIABLE_TYPE",
                        step_id=ctx.step_id,
                    )
                key = _KEY.sub("_", str(value))[:64]
            if key in seen:
                raise RunError(
                    f"step {ctx.step_id!r}: two items have the key {key!r}",
                    code="VARIABLE_TYPE",
                    step_id=ctx.step_id,
                )
            seen.add(key)
            out.append((key, "item", {**passed, name: item}))
        return out


class ParallelStep(_Branches):
    """Runs its named branches concurrently, each on its own state."""

    name = "parallel"
    kind = "parallel"
    summary = "Run named branches concurrently on isolated state."
    fields: ClassVar[dict[str, dict[str, Any]]] = _fields("parallel")
    required = ("branches",)

    def jobs(
        self, ctx: StepContext, passed: dict[str, Any]
    ) -> list[tuple[str, str, dict[str, Any]]]:
        names = list(self.branch_steps(ctx.step))
        for name in names:
            if _KEY.search(name):
                raise RunError(
                    f"step {ctx.step_id!r}: branch name {name!r} may hold only letters, "
                    "digits, '_', '.' and '-'",
                    code="VARIABLE_TYPE",
                    step_id=ctx.step_id,
                )
        return [(name, name, dict(passed)) for name in names]


def run_branches(
    ctx: StepContext,
    engines: Mapping[str, Any],
    jobs: list[tuple[str, str, dict[str, Any]]],
    *,
    width: int,
    fail_fast: bool,
) -> list[Any]:
    """Run each job (key, engine name, inputs) as the branch run `<run>.<step>.<key>`, up to
    `width` at once; one BRANCH event each, in job order. The RunResults, in job order; with
    fail_fast, the first failure cancels the others and is raised (RunError)."""
    store = getattr(ctx.services, "run_store", None)
    # A step visited again (in a loop) runs new branches: visit n > 1 keys its branch runs
    # `<run>.<step>@n.<key>`. The count is engine state, so a retry or a resume of the same
    # visit finds the same branch runs.
    visit = ctx.increment(f"branch_visits:{ctx.step_id}")
    prefix = f"{ctx.run_id}.{ctx.step_id}" + (f"@{visit}" if visit > 1 else "")
    # Set by a failing branch (on_failure: fail), or set because the run itself was.
    cancel = _Cancel(ctx.cancel)
    timings: dict[str, tuple[float, float]] = {}
    zero = time.monotonic()
    # A branch answers the same subject as its parent (never another: access policy).
    subject = ctx.inputs.get("subject")
    # One max_steps for the run and all its branches (runtime/engine/step_budget.py).
    budget = ctx.branch_budget()

    def one(job: tuple[str, str, dict[str, Any]]) -> Any:
        key, branch, inputs = job
        run_id = f"{prefix}.{key}"
        started = time.monotonic() - zero
        try:
            result = _run_branch(engines[branch], run_id, inputs, store, cancel, subject, budget)
        finally:
            timings[key] = (started, time.monotonic() - zero)
        if result.error is not None and fail_fast:
            cancel.set()
        return result

    from runtime.engine.caller_loop import caller_loop

    loop = caller_loop()
    width = min(width, max(len(jobs), 1))
    if loop is None:
        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="branch") as pool:
            results = list(pool.map(one, jobs))
    else:  # under `arun`: the branches are tasks of the caller's event loop
        results = asyncio.run_coroutine_threadsafe(_as_tasks(jobs, one, width), loop).result()
    ctx.charge_steps(budget.used)
    first_error: tuple[str, Any] | None = None
    for (key, _branch, _inputs), result in zip(jobs, results, strict=True):
        start, end = timings.get(key, (0.0, 0.0))
        ctx.trace(
            "BRANCH",
            branch=key,
            run_id=result.run_id,
            status=result.status,
            started_ms=round(start * 1000, 3),
            ended_ms=round(end * 1000, 3),
            error=result.error.code if result.error else None,
        )
        failed = result.error is not None and result.error.code != "RUN_CANCELLED"
        if failed and first_error is None:
            first_error = (key, result.error)
    if first_error is not None and fail_fast:
        key, error = first_error
        raise RunError(
            f"branch {key!r} failed: {error.code}: {error.message}",
            code=error.code,
            step_id=ctx.step_id,
        )
    return results


async def _as_tasks(jobs: list[Any], one: Any, width: int) -> list[Any]:
    """Each job as a task of the running loop, at most `width` at once; results in job order.

    Actions are synchronous: a task runs its branch on a thread of a pool of `width` (the
    loop's default executor may be smaller than max_concurrency, and branches may wait on
    each other)."""
    gate = asyncio.Semaphore(width)
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=width, thread_name_prefix="branch-task") as pool:

        async def each(job: Any) -> Any:
            async with gate:
                return await loop.run_in_executor(pool, one, job)

        tasks = [asyncio.create_task(each(job), name=f"branch {job[0]}") for job in jobs]
        return list(await asyncio.gather(*tasks))


class _Cancel(threading.Event):
    """A branch's cancel event: set itself, or when the parent run's is."""

    def __init__(self, parent: Any) -> None:
        super().__init__()
        self._parent = parent

    def is_set(self) -> bool:
        """True once this event or the parent run's is set (asked before every step)."""
        return super().is_set() or (self._parent is not None and self._parent.is_set())


def _run_branch(
    engine: Any,
    run_id: str,
    inputs: dict[str, Any],
    store: Any,
    cancel: Any,
    subject: Any,
    budget: Any,
) -> Any:
    """A branch run: read back when it completed before (a resumed parent), resumed when
    it was killed or failed, started otherwise."""
    from runtime.engine.interpreter import RunResult
    from runtime.errors import RunError as Failure

    if store is not None:
        try:
            saved = store.load(run_id)
        except Failure as exc:
            if exc.code != "RUN_NOT_FOUND":
                return RunResult(run_id, "failed", [], {}, {}, exc)
            saved = None
        if saved is not None:
            if saved["status"] == "completed":
                from runtime.engine.interpreter import output_of

                state = saved["variables"]
                return RunResult(
                    run_id, "completed", [], state, output_of(engine.pipeline, state), None
                )
            try:
                return engine.resume(run_id, cancel=cancel, subject=subject, step_budget=budget)
            except Failure as exc:
                return RunResult(run_id, "failed", [], {}, {}, exc)
    try:
        return engine.run(inputs, run_id=run_id, cancel=cancel, subject=subject, step_budget=budget)
    except Failure as exc:  # refused before it ran (its inputs): the branch failed
        return RunResult(run_id, "failed", [], {}, {}, exc)


def _result(result: Any, step: Mapping[str, Any]) -> Any:
    """A completed branch's result: its output (one value when one variable is named)."""
    output = result.output
    names = step.get("output")
    if names and len(names) == 1:
        return output.get(names[0])
    if not names and len(output) == 1:
        return next(iter(output.values()))
    return output


def _path(json_path: str) -> tuple[Any, ...]:
    """`$.steps[2].top_k` -> ("steps", 2, "top_k")."""
    out: list[Any] = []
    for name, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", json_path):
        out.append(int(index) if index else name)
    return tuple(out)
