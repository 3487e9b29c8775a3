"""The Cedar access engine: policies in Cedar, evaluated in process by cedarpy.

`settings.access: {engine: cedar, policies: FILE.cedar, schema: FILE.cedarschema}`
(paths relative to the pipeline's folder). Each read sends one batch: the subject as
`User` (tenant, tenants, roles, clearance, attributes as a string of JSON) and every
candidate as an entity of its type (`Node`, `Pointer`, `Memory`: labels without tenant
labels, tenants, repository, snapshot, path, kind). The action is `Action::"search"` and
so on (access_policy.ACTIONS). Cedar denies by default: only a `permit` allows.

A Cedar error (policies that do not parse, an entity the schema refuses, a request
whose evaluation errs) denies, with ACCESS_ENGINE_FAILED; it never allows.
docs/access.md has the example policy set and schema shipped in pipelines/access/.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runtime.errors import RunError
from runtime.governance.access_policy import Decision, Resource, decision_id, failed
from runtime.governance.subject import TENANT_PREFIX, Subject

ENTITY_TYPES = {"node": "Node", "pointer": "Pointer", "memory": "Memory", "file": "File"}


def _read(base_dir: str, name: Any, what: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise RunError(f"settings.access.{what} must name a file", code="ACCESS_POLICY_INVALID")
    path = Path(base_dir) / name
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunError(
            f"settings.access.{what}: cannot read {path}: {exc}", code="ACCESS_POLICY_INVALID"
        ) from exc


def check_policies(policies: str, schema: str | None) -> str | None:
    """Why a policy set (and schema) cannot be used, else None."""
    import cedarpy

    try:
        cedarpy.PolicySet.from_str(policies)
    except ValueError as exc:
        return f"the Cedar policies do not parse: {exc}"
    if schema is not None:
        result = cedarpy.validate_policies(policies, schema)
        if not result.validation_passed:
            errors = "; ".join(str(e) for e in getattr(result, "errors", [])[:3])
            return f"the Cedar policies do not validate against the schema: {errors}"
    return None


class CedarEngine:
    """Cedar policies, one batch per read."""

    name = "cedar"
    per_resource = True

    def __init__(self, config: Mapping[str, Any], base_dir: str = ".") -> None:
        import cedarpy

        self.policies_text = _read(base_dir, config.get("policies"), "policies")
        schema_name = config.get("schema")
        self.schema_text = _read(base_dir, schema_name, "schema") if schema_name else None
        problem = check_policies(self.policies_text, self.schema_text)
        if problem:
            raise RunError(f"settings.access: {problem}", code="ACCESS_POLICY_INVALID")
        self._policies = cedarpy.PolicySet.from_str(self.policies_text)
        self._schema = cedarpy.Schema.from_str(self.schema_text) if self.schema_text else None

    @staticmethod
    def principal(subject: Subject) -> dict[str, Any]:
        """The subject as a Cedar entity."""
        return {
            "uid": {
                "type": "User",
                "id": subject.id or ("anonymous" if subject.anonymous else "subject"),
            },
            "attrs": {
                "tenant": subject.tenant or "",
                "tenants": [subject.tenant] if subject.tenant else [],
                "roles": list(subject.roles),
                "clearance": list(subject.clearance),
                "attributes": json.dumps(dict(subject.attributes), sort_keys=True),
            },
            "parents": [],
        }

    @staticmethod
    def entity(resource: Resource) -> dict[str, Any]:
        """A resource as a Cedar entity (attributes only, never text)."""
        # Built here, not through Resource.to_dict: this runs once per candidate.
        labels, tenants = [], []
        for label in sorted(resource.labels):
            if label.startswith(TENANT_PREFIX):
                tenants.append(label[len(TENANT_PREFIX) :])
            else:
                labels.append(label)
        return {
            "uid": {"type": ENTITY_TYPES.get(resource.type, "Node"), "id": resource.id},
            "attrs": {
                "labels": labels,
                "tenants": tenants,
                "repository": resource.repository or "",
                "snapshot": resource.snapshot or "",
                "path": resource.path or "",
                "kind": resource.kind or "",
            },
            "parents": [],
        }

    def decide(
        self,
        subject: Subject,
        action: str,
        resources: Sequence[Resource],
        pinned: tuple[str, ...] | None,
    ) -> list[Decision]:
        """One Cedar request per resource, in one batch; any error denies."""
        if not resources:
            return []
        import cedarpy

        principal = self.principal(subject)
        entities = [principal] + [self.entity(r) for r in resources]
        verb = {"type": "Action", "id": action}
        # No `context` key: an empty context is Cedar's default, and a dict one is
        # serialised and the request copied by cedarpy, once per candidate.
        requests = [
            {"principal": principal["uid"], "action": verb, "resource": e["uid"]}
            for e in entities[1:]
        ]
        try:
            # The schema validated the policies when they were loaded; entities are not
            # validated against it per request (a missing attribute is an evaluation
            # error, which denies).
            results = cedarpy.is_authorized_batch(requests, self._policies, json.dumps(entities))
        except Exception as exc:  # cedarpy raises plain exceptions; never an allow
            return failed(self.name, subject, action, resources, f"{type(exc).__name__}: {exc}")
        if len(results) != len(resources):
            return failed(
                self.name, subject, action, resources, "a batch answer of the wrong length"
            )
        out = []
        digest = subject.digest()
        for r, res in zip(resources, results, strict=True):
            diagnostics = res.diagnostics
            errors = list(getattr(diagnostics, "errors", []) or [])
            if errors:
                out += failed(self.name, subject, action, [r], f"evaluation error: {errors[0]}")
                continue
            ok = bool(res.allowed)
            reasons = sorted(getattr(diagnostics, "reasons", []) or [])
            why = (
                f"permitted by Cedar policy {', '.join(map(str, reasons))}"
                if ok
                else "no Cedar policy permits it"
            )
            out.append(
                Decision(
                    decision_id(self.name, digest, action, r.id, ok),
                    self.name,
                    action,
                    ok,
                    why,
                    r.id,
                )
            )
        return out
