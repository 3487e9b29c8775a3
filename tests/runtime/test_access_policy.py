"""The access policy engines (runtime/governance/access_policy.py, cedar.py, opa.py).

The built-in rule, Cedar (pipelines/access/policy.cedar) and OPA (pipelines/access/policy.rego
unchanged, evaluated by OPA's own Rego engine behind its data API on 127.0.0.1:
tests/opa_support.py) decide the same on a grid of subjects and resources; an OPA server
that fails in any way denies with ACCESS_ENGINE_FAILED.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from runtime.errors import RunError
from runtime.governance.access_policy import (
    BuiltinEngine,
    Resource,
    default_rule,
    visible_labels,
)
from runtime.governance.engines import load_engine
from runtime.governance.subject import ANONYMOUS, parse_subject
from tests.opa_support import OpaServer

ACCESS = Path(__file__).resolve().parents[2] / "pipelines" / "access"
CEDAR = {"engine": "cedar", "policies": "policy.cedar", "schema": "schema.cedarschema"}

LABEL_SETS = [(), ("public",), ("internal",), ("public", "internal"), ("secret",)]
TENANTS = [(), ("tenant:a",), ("tenant:b",), ("tenant:a", "tenant:b")]
RESOURCES = [
    Resource(
        f"r{i}",
        repository="shop",
        snapshot="main",
        path="x.sql",
        kind="procedure",
        labels=labels + tenants,
    )
    for i, (labels, tenants) in enumerate(itertools.product(LABEL_SETS, TENANTS))
]
SUBJECTS = [
    ANONYMOUS,
    parse_subject({"tenant": "a", "clearance": ["public"]}),
    parse_subject({"tenant": "a", "clearance": ["public", "internal"]}),
    parse_subject({"tenant": "b", "clearance": ["public", "internal", "secret"]}),
    parse_subject({"clearance": ["public", "internal"]}),
]


def expected(subject, resource):
    """The rule, written out once more: labels within clearance, tenants the subject's."""
    tenants = {x[7:] for x in resource.labels if x.startswith("tenant:")}
    labels = {x for x in resource.labels if not x.startswith("tenant:")}
    return labels <= set(subject.clearance) and tenants <= ({subject.tenant} - {None})


@pytest.mark.parametrize("subject", SUBJECTS, ids=range(len(SUBJECTS)))
def test_the_builtin_rule_is_labels_within_clearance_and_the_subjects_tenant(subject):
    decisions = BuiltinEngine().decide(subject, "search", RESOURCES, None)
    assert [d.allowed for d in decisions] == [expected(subject, r) for r in RESOURCES]
    assert all(d.id.startswith("acc-") and d.reason for d in decisions)


def test_the_anonymous_subject_sees_only_unlabelled_untenanted_resources():
    decisions = BuiltinEngine().decide(ANONYMOUS, "fetch", RESOURCES, None)
    assert [r.id for r, d in zip(RESOURCES, decisions, strict=True) if d.allowed] == ["r0"]
    assert visible_labels(ANONYMOUS, None) == ()


def test_pins_are_a_ceiling_and_never_grant_a_tenant():
    subject = parse_subject({"tenant": "a", "clearance": ["public", "internal"]})
    assert visible_labels(subject, ("public",)) == ("public", "tenant:a")
    assert visible_labels(subject, ("public", "tenant:b")) == ("public", "tenant:a")
    ok, why = default_rule(subject, Resource("x", labels=("internal",)), ("public",))
    assert not ok and "pin" in why
    ok, why = default_rule(subject, Resource("x", labels=("tenant:b",)), None)
    assert not ok and "another tenant" in why


def test_decision_ids_are_stable_and_differ_by_subject_and_effect():
    a = BuiltinEngine().decide(SUBJECTS[1], "search", RESOURCES, None)
    again = BuiltinEngine().decide(SUBJECTS[1], "search", RESOURCES, None)
    other = BuiltinEngine().decide(SUBJECTS[2], "search", RESOURCES, None)
    assert [d.id for d in a] == [d.id for d in again]
    assert {d.id for d in a}.isdisjoint({d.id for d in other})
    assert len({d.id for d in a}) == len(RESOURCES)


@pytest.mark.parametrize("subject", SUBJECTS, ids=range(len(SUBJECTS)))
def test_cedar_and_opa_decide_as_the_builtin_rule(subject, opa):
    builtin = [d.allowed for d in BuiltinEngine().decide(subject, "search", RESOURCES, None)]
    cedar = load_engine(CEDAR, str(ACCESS)).decide(subject, "search", RESOURCES, None)
    assert [d.allowed for d in cedar] == builtin
    assert all(d.code is None for d in cedar)
    engine = load_engine({"engine": "opa", "url": opa.rule_url})
    answered = engine.decide(subject, "search", RESOURCES, None)
    assert [d.allowed for d in answered] == builtin
    assert engine.calls == 1  # one request per batch
    sent = opa.bodies[-1]["input"]
    assert "text" not in str(sent) and sent["action"] == "search"


@pytest.fixture(scope="module")
def opa():
    server = OpaServer()
    yield server
    server.close()


def test_the_opa_server_evaluates_the_rego_it_serves(tmp_path):
    # Another rule gives other answers: the server runs Rego, not a copy of the default.
    rule = tmp_path / "roles.rego"
    rule.write_text(
        "package step_runtime.access\n\nimport rego.v1\n\n"
        "allowed contains r.id if {\n"
        '\tsome r in input.resources\n\t"auditor" in input.subject.roles\n'
        '\tstartswith(r.id, "r1")\n}\n'
    )
    server = OpaServer(policies=(rule,))
    try:
        engine = load_engine({"engine": "opa", "url": server.rule_url})
        auditor = parse_subject({"roles": ["auditor"]})
        allowed = [
            d.resource for d in engine.decide(auditor, "search", RESOURCES, None) if d.allowed
        ]
        nobody = engine.decide(SUBJECTS[3], "search", RESOURCES, None)
    finally:
        server.close()
    assert allowed == [r.id for r in RESOURCES if r.id.startswith("r1")]
    assert len(allowed) == 11 and not any(d.allowed for d in nobody)


@pytest.mark.parametrize(
    "mode,status,answer",
    [
        ("undefined", 200, {}),
        ("shape", 200, {"result": {"allowed": ["r0"]}}),
        ("down", 500, {"code": "internal_error"}),
    ],
)
def test_the_failing_modes_are_opas_own_answers(mode, status, answer):
    import httpx

    server = OpaServer(mode)
    try:
        reply = httpx.post(
            server.rule_url,
            json={
                "input": {
                    "subject": ANONYMOUS.to_dict(),
                    "resources": [r.to_dict() for r in RESOURCES[:2]],
                }
            },
        )
    finally:
        server.close()
    assert reply.status_code == status
    got = reply.json()
    assert {k: got[k] for k in answer} == answer
    if mode == "down":
        assert "eval_conflict_error" in got["message"]


@pytest.mark.parametrize("mode", ["down", "junk", "undefined", "shape"])
def test_a_failing_opa_server_denies_every_resource_with_a_code(mode):
    server = OpaServer(mode)
    try:
        engine = load_engine({"engine": "opa", "url": server.rule_url})
        subject = SUBJECTS[3]
        decisions = engine.decide(subject, "search", RESOURCES, None)
    finally:
        server.close()
    assert not any(d.allowed for d in decisions)
    assert {d.code for d in decisions} == {"ACCESS_ENGINE_FAILED"}


def test_an_unreachable_or_slow_opa_server_denies():
    server = OpaServer("slow")
    try:
        engine = load_engine({"engine": "opa", "url": server.rule_url, "timeout_seconds": 0.3})
        decisions = engine.decide(SUBJECTS[3], "fetch", RESOURCES[:3], None)
    finally:
        server.close()
    assert [d.code for d in decisions] == ["ACCESS_ENGINE_FAILED"] * 3
    assert not any(d.allowed for d in decisions)
    gone = load_engine({"engine": "opa", "url": server.rule_url})  # closed: refused
    assert not any(d.allowed for d in gone.decide(SUBJECTS[3], "fetch", RESOURCES[:3], None))


def test_one_opa_engine_asks_through_one_http_client(opa, monkeypatch):
    # A client per request cost 15 of a request's 20 ms (its TLS context): one is kept.
    import httpx

    made = []
    real = httpx.Client

    def counting(*args, **kwargs):
        made.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(httpx, "Client", counting)
    engine = load_engine({"engine": "opa", "url": opa.rule_url})
    for subject in SUBJECTS:
        answered = engine.decide(subject, "search", RESOURCES, None)
        assert [d.allowed for d in answered] == [expected(subject, r) for r in RESOURCES]
    assert engine.calls == len(SUBJECTS) and len(made) == 1
    # No pooled connections: each request opens its own, which the deadline can cut.
    assert made[0]["limits"].max_keepalive_connections == 0


def test_an_opa_engine_answers_again_after_a_request_it_cut():
    server = OpaServer("slow")
    try:
        engine = load_engine({"engine": "opa", "url": server.rule_url, "timeout_seconds": 0.3})
        cut = engine.decide(SUBJECTS[1], "search", RESOURCES, None)
        server.release.set()
        server.mode = "ok"
        again = engine.decide(SUBJECTS[1], "search", RESOURCES, None)
    finally:
        server.close()
    assert {d.code for d in cut} == {"ACCESS_ENGINE_FAILED"}
    assert [d.allowed for d in again] == [expected(SUBJECTS[1], r) for r in RESOURCES]
    assert any(d.allowed for d in again) and all(d.code is None for d in again)


def test_an_opa_answer_naming_ids_not_asked_about_allows_nothing_more(opa):
    engine = load_engine({"engine": "opa", "url": opa.rule_url})
    decisions = engine.decide(ANONYMOUS, "search", [Resource("x", labels=("secret",))], None)
    assert [d.allowed for d in decisions] == [False]


@pytest.mark.parametrize(
    "config,words",
    [
        ({"engine": "nope"}, "no access engine"),
        ({"engine": "cedar", "policies": "missing.cedar"}, "cannot read"),
        ({"engine": "opa", "url": "http://user:pw@127.0.0.1:1/v1/data/x"}, "credentials"),
        ({"engine": "opa", "url": "http://127.0.0.1:1/v1/data/x?token=1"}, "query string"),
        ({"engine": "opa", "url": "http://127.0.0.1:1/allow"}, "data API"),
    ],
)
def test_an_unusable_access_configuration_is_access_policy_invalid(config, words):
    with pytest.raises(RunError) as info:
        load_engine(config, str(ACCESS))
    assert info.value.code == "ACCESS_POLICY_INVALID" and words in info.value.message
    assert "pw" not in info.value.message and "token" not in info.value.message


def test_cedar_policies_that_do_not_parse_or_validate_are_refused(tmp_path):
    (tmp_path / "bad.cedar").write_text("permit (principal, action, resource) when { nonsense")
    (tmp_path / "typo.cedar").write_text(
        'permit (principal, action, resource) when { principal.clearence.contains("x") };'
    )
    (tmp_path / "schema.cedarschema").write_text((ACCESS / "schema.cedarschema").read_text())
    for name in ("bad.cedar", "typo.cedar"):
        with pytest.raises(RunError) as info:
            load_engine(
                {"engine": "cedar", "policies": name, "schema": "schema.cedarschema"}, str(tmp_path)
            )
        assert info.value.code == "ACCESS_POLICY_INVALID"


def test_a_cedar_evaluation_error_denies_with_a_code(tmp_path):
    # Without a schema an attribute the entity lacks is an evaluation error, not a deny.
    (tmp_path / "p.cedar").write_text(
        "permit (principal, action, resource) when { resource.owner == principal.tenant };"
    )
    engine = load_engine({"engine": "cedar", "policies": "p.cedar"}, str(tmp_path))
    decisions = engine.decide(SUBJECTS[1], "search", RESOURCES[:2], None)
    assert not any(d.allowed for d in decisions)
    assert {d.code for d in decisions} == {"ACCESS_ENGINE_FAILED"}
