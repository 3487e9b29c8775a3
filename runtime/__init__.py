"""step-runtime: a declarative step runtime for context-engineered LLM pipelines.

The embedding API: load a pipeline once, run it many times (concurrently from
threads, or from asyncio), inject services, observe events.

    import runtime
    pipeline = runtime.load("pipelines/code_qa.yaml")
    runner = runtime.Runner(pipeline, store=runtime.SqliteRunStore("runs.db"))
    result = runner.run({"question": "Who writes the Orders table?"})
"""

from __future__ import annotations

from typing import Any

# Everything else loads on first use, so `import runtime` (and `runtime --help`) stays light.
_LAZY = {
    "RunHandle": "runtime._api",
    "Runner": "runtime._api",
    "load": "runtime._api",
    "validate": "runtime._api",
    "remember": "runtime._api",
    "submit": "runtime._api",
    "wait": "runtime._api",
    "record_experience": "runtime._api",
    "Action": "runtime.contract.action",
    "Outcome": "runtime.contract.action",
    "Problem": "runtime.contract.action",
    "StepContext": "runtime.contract.action",
    "Transition": "runtime.contract.action",
    "VariableRead": "runtime.contract.action",
    "Diagnostic": "runtime.format.diagnostics",
    "RunResult": "runtime.engine",
    "PipelineInvalidError": "runtime.errors",
    "RunError": "runtime.errors",
    "StepRuntimeError": "runtime.errors",
    "Pipeline": "runtime.format.pipeline",
    "Registry": "runtime.contract.registry",
    "default_registry": "runtime.contract.registry",
    "Services": "runtime.engine.services",
    "SqliteRunStore": "runtime.engine.store",
    "open_run_store": "runtime.engine.stores",
    "Report": "runtime.format.validation",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "Action",
    "Diagnostic",
    "Outcome",
    "Pipeline",
    "PipelineInvalidError",
    "Problem",
    "Registry",
    "Report",
    "RunError",
    "RunHandle",
    "RunResult",
    "Runner",
    "Services",
    "SqliteRunStore",
    "StepContext",
    "StepRuntimeError",
    "Transition",
    "VariableRead",
    "default_registry",
    "load",
    "open_run_store",
    "record_experience",
    "remember",
    "submit",
    "validate",
    "wait",
]
