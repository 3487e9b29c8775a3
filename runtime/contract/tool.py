"""The tool face of an action: how a model may call it (docs/tools.md).

An action declares ``tool = ToolFace(...)``: the name and description a model reads and the
JSON Schema of the arguments it may give. The arguments are a subset of the action's step
fields (``parameters``), plus values handed to it as variables (``inputs``: a search's
``query``); a field the author fixed on the offering step's tool entry (``with:``) is a
limit the model can only narrow: an integer argument above it is lowered to it
(``ceilings``), a `path_prefix` must extend it, a list must be a subset. Scope fields
(repository, snapshot, labels) are never step fields of a tool: a model naming one is
refused by the schema (``additionalProperties: false``).

``result`` names the variables the action writes whose values the model reads back, in
order (an argument alone in its ``inputs`` variable is its value; several are gathered
into an object); ``items`` the one that holds a list the runtime may cut item by item to fit the
prompt budget (each item a context block when it holds node records); ``accumulate`` the
list variables merged with what earlier calls of the same model call wrote (a second
search adds its seeds to the first's). ``safety`` tags say what a call may do
(``read_only``, ``scoped``, ``writes``, ``network``, ``expensive``), for selection to filter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SAFETY_TAGS = ("read_only", "scoped", "writes", "network", "expensive", "external")
# Field names a tool face may never take from a model: the run's security scope.
SCOPE_FIELDS = frozenset({"repository", "snapshot", "allowed_labels", "labels", "scope"})


@dataclass(frozen=True)
class ToolFace:
    """What a model sees of an action, and how its arguments become the step it runs."""

    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON Schema of an object (properties, required)
    inputs: Mapping[str, str] = field(default_factory=dict)  # argument -> variable it sets
    result: tuple[str, ...] = ()
    items: str | None = None
    accumulate: tuple[str, ...] = ()
    ceilings: tuple[str, ...] = ()
    safety: tuple[str, ...] = ("read_only",)
    # What the subject's access policy is asked about offering it (runtime/governance/
    # access_policy.py ACTIONS: search, expand, fetch, rehydrate, assemble, inspect).
    access: str = "inspect"
    # The step fields every call starts from (before the step's `with:` and the arguments).
    base: Mapping[str, Any] = field(default_factory=dict)

    def spec(self) -> dict[str, Any]:
        """The OpenAI function spec offered to a model."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    def argument_names(self) -> list[str]:
        """The argument names, as the schema lists them."""
        props = self.parameters.get("properties")
        return list(props) if isinstance(props, Mapping) else []


def face_problems(face: ToolFace, fields: Mapping[str, Any]) -> list[str]:
    """Why a declared tool face is unusable (empty when it is fine): checked at load time."""
    out: list[str] = []
    params = face.parameters
    if params.get("type") != "object" or params.get("additionalProperties") is not False:
        out.append("parameters must be an object schema with additionalProperties: false")
    for name in face.argument_names():
        if name in SCOPE_FIELDS:
            out.append(f"argument {name!r} is a scope field: a model may never set it")
        elif name not in fields and name not in face.inputs:
            out.append(f"argument {name!r} is neither a step field nor one of its inputs")
    bad = [t for t in face.safety if t not in SAFETY_TAGS]
    if bad:
        out.append(f"unknown safety tag(s) {', '.join(bad)}; known: {', '.join(SAFETY_TAGS)}")
    return out
