"""Compatibility path: the action contract lives in `runtime.contract.action`.

Third-party actions written against `runtime.action` keep working unchanged.
"""

from runtime.contract.action import (
    ENGINE_OWNED,
    VARIABLE_PATTERN,
    Action,
    ActionInfo,
    Outcome,
    Problem,
    StepContext,
    Transition,
    setting_ref,
)

__all__ = [
    "ENGINE_OWNED",
    "VARIABLE_PATTERN",
    "Action",
    "ActionInfo",
    "Outcome",
    "Problem",
    "StepContext",
    "Transition",
    "setting_ref",
]
