"""A fast yes/no JSON Schema check: the schema compiled once into nested closures.

Validation asks jsonschema for its errors only when this check says a value is
invalid, so a valid pipeline is never walked by jsonschema (which costs ~20x more
per step) and `jsonschema` is not even imported. The check covers the keywords
the pipeline schemas use, with jsonschema's Draft 2020-12 semantics (booleans are
no numbers, 1.0 is an integer, `pattern` searches, `const` and `enum` compare as
JSON). A schema with any other vocabulary keyword compiles to None: the caller
then asks jsonschema directly, so an unsupported schema can never pass silently.
tests/runtime/test_fastcheck.py holds the check equal to jsonschema.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any], bool]

# Keywords that only annotate: no effect on validity.
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$comment",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "format",  # an annotation in 2020-12 unless a format checker is given (none is)
        "markdownDescription",
    }
)
_HANDLED = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "required",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "const",
        "enum",
        "items",
        "minItems",
        "maxItems",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "if",
        "then",
        "else",
        "$ref",
    }
)
# Every other keyword of the 2020-12 vocabularies: a schema using one is not compiled.
_VOCABULARY = frozenset(
    {
        "$id",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "$vocabulary",
        "patternProperties",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "unevaluatedProperties",
        "unevaluatedItems",
        "prefixItems",
        "additionalItems",
        "contains",
        "minContains",
        "maxContains",
        "multipleOf",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
    }
)


class Unsupported(Exception):
    """The schema uses a keyword this check does not implement."""


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


_TYPES: dict[str, Check] = {
    "string": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, dict),  # as jsonschema: a dict (LMap is one)
    "array": lambda v: isinstance(v, list),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": _is_number,
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
}


_BOUNDS: dict[str, Callable[[Any, Any], bool]] = {
    "minimum": lambda v, b: v >= b,
    "maximum": lambda v, b: v <= b,
    "exclusiveMinimum": lambda v, b: v > b,
    "exclusiveMaximum": lambda v, b: v < b,
}


def _bounded(test: Callable[[Any, Any], bool], bound: Any) -> Check:
    return lambda v: not _is_number(v) or test(v, bound)


def json_equal(one: Any, two: Any) -> bool:
    """Equality as jsonschema means it: True is not 1, 1 is 1.0, containers compared deeply."""
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, list | tuple) and isinstance(two, list | tuple):
        return len(one) == len(two) and all(json_equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return len(one) == len(two) and all(
            key in two and json_equal(value, two[key]) for key, value in one.items()
        )
    if isinstance(one, bool) or isinstance(two, bool):
        return False  # True and False are only themselves (identity was checked above)
    return bool(one == two)


def _unique(items: list[Any]) -> bool:
    """No two items equal as jsonschema compares them (quadratic: arrays here are short)."""
    return not any(
        json_equal(items[i], items[j]) for i in range(len(items)) for j in range(i + 1, len(items))
    )


def compile_check(schema: Any) -> Check | None:
    """A function telling whether a value is valid against `schema`, or None when unsupported."""
    try:
        return _Compiler(schema).compile(schema)
    except Unsupported:
        return None


class _Compiler:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.refs: dict[str, Check] = {}

    def ref(self, pointer: str) -> Check:
        if pointer in self.refs:
            return self.refs[pointer]
        if not pointer.startswith("#"):
            raise Unsupported(pointer)
        target: Any = self.root
        for part in pointer[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                raise Unsupported(pointer)
            target = target[part]
        box: list[Check] = []
        self.refs[pointer] = lambda v: box[0](v)  # recursion: filled in below
        box.append(self.compile(target))
        return self.refs[pointer]

    def compile(self, schema: Any) -> Check:
        if schema is True or schema == {}:
            return lambda v: True
        if schema is False:
            return lambda v: False
        if not isinstance(schema, Mapping):
            raise Unsupported(repr(schema))
        for key in schema:
            # Unknown plain keywords are ignored, as jsonschema ignores them; known ones not
            # implemented here, and unknown `$` keywords, make the schema unsupported.
            unknown_ref = key.startswith("$") and key not in _HANDLED and key not in _ANNOTATIONS
            root_id = key == "$id" and schema is self.root  # the root's own id is harmless
            if (key in _VOCABULARY or unknown_ref) and not root_id:
                raise Unsupported(key)
        checks: list[Check] = []
        if "$ref" in schema:
            checks.append(self.ref(schema["$ref"]))
        if "type" in schema:
            names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            try:
                tests = [_TYPES[n] for n in names]
            except (KeyError, TypeError) as exc:
                raise Unsupported("type") from exc
            checks.append(tests[0] if len(tests) == 1 else lambda v: any(t(v) for t in tests))
        if "const" in schema:
            const = schema["const"]
            checks.append(lambda v: json_equal(v, const))
        if "enum" in schema:
            choices = list(schema["enum"])
            checks.append(lambda v: any(json_equal(v, c) for c in choices))
        checks.extend(self._strings(schema))
        checks.extend(self._numbers(schema))
        checks.extend(self._objects(schema))
        checks.extend(self._arrays(schema))
        checks.extend(self._logic(schema))
        if not checks:
            return lambda v: True
        if len(checks) == 1:
            return checks[0]
        return lambda v: all(c(v) for c in checks)

    def _strings(self, schema: Mapping[str, Any]) -> list[Check]:
        out: list[Check] = []
        if "pattern" in schema:
            search = re.compile(schema["pattern"]).search
            out.append(lambda v: not isinstance(v, str) or search(v) is not None)
        if "minLength" in schema:
            low = schema["minLength"]
            out.append(lambda v: not isinstance(v, str) or len(v) >= low)
        if "maxLength" in schema:
            high = schema["maxLength"]
            out.append(lambda v: not isinstance(v, str) or len(v) <= high)
        return out

    def _numbers(self, schema: Mapping[str, Any]) -> list[Check]:
        out: list[Check] = []
        for key, test in _BOUNDS.items():
            if key in schema:
                bound = schema[key]
                if not _is_number(bound):
                    raise Unsupported(key)
                out.append(_bounded(test, bound))
        return out

    def _objects(self, schema: Mapping[str, Any]) -> list[Check]:
        out: list[Check] = []
        props = {k: self.compile(s) for k, s in (schema.get("properties") or {}).items()}
        extra: Check | None = None
        if "additionalProperties" in schema:
            extra = self.compile(schema["additionalProperties"])
        if props or extra is not None:
            if extra is None:

                def check_props(v: Any) -> bool:
                    if not isinstance(v, dict):
                        return True
                    return all(c(v[k]) for k, c in props.items() if k in v)

            else:
                more = extra

                def check_props(v: Any) -> bool:
                    if not isinstance(v, dict):
                        return True
                    for k, item in v.items():
                        c = props.get(k)
                        if not (c(item) if c is not None else more(item)):
                            return False
                    return True

            out.append(check_props)
        if "required" in schema:
            required = list(schema["required"])
            out.append(lambda v: not isinstance(v, dict) or all(k in v for k in required))
        if "propertyNames" in schema:
            names = self.compile(schema["propertyNames"])
            out.append(lambda v: not isinstance(v, dict) or all(names(k) for k in v))
        if "minProperties" in schema:
            low = schema["minProperties"]
            out.append(lambda v: not isinstance(v, dict) or len(v) >= low)
        if "maxProperties" in schema:
            high = schema["maxProperties"]
            out.append(lambda v: not isinstance(v, dict) or len(v) <= high)
        return out

    def _arrays(self, schema: Mapping[str, Any]) -> list[Check]:
        out: list[Check] = []
        if "items" in schema:
            if not isinstance(schema["items"], Mapping | bool):
                raise Unsupported("items")  # the old tuple form
            item = self.compile(schema["items"])
            out.append(lambda v: not isinstance(v, list) or all(item(x) for x in v))
        if "minItems" in schema:
            low = schema["minItems"]
            out.append(lambda v: not isinstance(v, list) or len(v) >= low)
        if "maxItems" in schema:
            high = schema["maxItems"]
            out.append(lambda v: not isinstance(v, list) or len(v) <= high)
        if schema.get("uniqueItems") is True:
            out.append(lambda v: not isinstance(v, list) or _unique(v))
        return out

    def _logic(self, schema: Mapping[str, Any]) -> list[Check]:
        out: list[Check] = []
        if "allOf" in schema:
            every = [self.compile(s) for s in schema["allOf"]]
            out.append(lambda v: all(c(v) for c in every))
        if "anyOf" in schema:
            some = [self.compile(s) for s in schema["anyOf"]]
            out.append(lambda v: any(c(v) for c in some))
        if "oneOf" in schema:
            one = [self.compile(s) for s in schema["oneOf"]]
            out.append(lambda v: sum(1 for c in one if c(v)) == 1)
        if "not" in schema:
            negated = self.compile(schema["not"])
            out.append(lambda v: not negated(v))
        if "if" in schema:
            cond = self.compile(schema["if"])
            then = self.compile(schema.get("then", True))
            other = self.compile(schema.get("else", True))
            out.append(lambda v: then(v) if cond(v) else other(v))
        return out
