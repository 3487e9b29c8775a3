"""Issue 28's "Done when": code_qa run by a subject of tenant a cleared for `public`.

The index holds `public` and `internal` nodes of tenants a and b (one SQL procedure
each, all answering the question). Under the built-in rule, a Cedar policy
(pipelines/access/policy.cedar) and OPA (pipelines/access/policy.rego unchanged, evaluated
by OPA's own Rego engine behind its data API on 127.0.0.1: tests/opa_support.py), the
run cites only tenant a's public node, the trace counts the denied nodes without their
text, the three answers are the same, and an API key and a card number planted in the
cited file reach the model masked (`redact: true`, docs/access.md#redaction).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runtime.cli import cli
from runtime.engine.store import SqliteRunStore
from tests.opa_support import OpaServer

ROOT = Path(__file__).resolve().parent.parent
PIPELINES = ROOT / "pipelines"
QUESTION = "Which stored procedure ships the order?"
SUBJECT = {"id": "ana", "tenant": "a", "roles": ["support"], "clearance": ["public"]}
LABELS = {
    "a/public/**": ["public", "tenant:a"],
    "a/internal/**": ["internal", "tenant:a"],
    "b/public/**": ["public", "tenant:b"],
    "b/internal/**": ["internal", "tenant:b"],
}
ALLOWED = "shop::main::procedure::dbo.usp_ShipOrderAPublic"
# Planted in tenant a's public file: they must reach the model masked (h28redact's
# `redact: true`, docs/access.md#redaction).
PLANTED_KEY = "ghp_" + "x7Qm2Lp9Rt4Vw8Zk3Nc6Bd1Fh5Jy0Sa2Ue7K"
PLANTED_CARD = "4111 1111 1111 1111"
# Words only the denied nodes hold: none may reach the state, the trace or the answer.
DENIED_WORDS = [
    "usp_ShipOrderAInternal",
    "usp_ShipOrderBPublic",
    "usp_ShipOrderBInternal",
    "MarginSecretA",
    "CourierContractB",
]


def write_tree(root: Path) -> None:
    """Four procedures, one per tenant and label, each shipping an order."""
    secrets = {
        ("a", "internal"): "-- MarginSecretA: internal pricing note\n",
        ("b", "public"): "",
        ("b", "internal"): "-- CourierContractB: internal contract number\n",
        ("a", "public"): f"-- deploy with token {PLANTED_KEY}; refunds go to card {PLANTED_CARD}\n",
    }
    for (tenant, label), extra in secrets.items():
        folder = root / tenant / label
        folder.mkdir(parents=True)
        name = f"usp_ShipOrder{tenant.upper()}{label.capitalize()}"
        (folder / "ship.sql").write_text(
            "-- Ships an order: marks the order shipped and writes the shipment row.\n"
            f"CREATE PROCEDURE dbo.{name}\n    @OrderId INT\nAS\nBEGIN\n    {extra}"
            "    UPDATE dbo.Orders SET Status = 'Shipped' WHERE OrderId = @OrderId;\n"
            "    INSERT INTO dbo.Shipments (OrderId) VALUES (@OrderId);\nEND\n"
        )


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from click.testing import CliRunner

    base = tmp_path_factory.mktemp("tenants")
    write_tree(base / "tree")
    (base / "labels.json").write_text(json.dumps(LABELS))
    path = base / "index.db"
    result = CliRunner().invoke(
        cli,
        [
            "index",
            str(base / "tree"),
            "--index",
            str(path),
            "--repository",
            "shop",
            "--labels",
            str(base / "labels.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    return str(path)


def pipeline(tmp_path: Path, access: dict[str, str] | None, redact: bool = False) -> str:
    """code_qa as shipped, or a pipeline extending it with settings.access and redaction."""
    if access is None and not redact:
        return str(PIPELINES / "code_qa.yaml")
    file = tmp_path / "code_qa_access.yaml"
    settings: dict[str, Any] = {"prompts_dir": str(PIPELINES / "prompts"), "redact": redact}
    if access is not None:
        settings["access"] = access
    file.write_text(json.dumps({"extends": str(PIPELINES / "code_qa.yaml"), "settings": settings}))
    return str(file)


def run(runner, index, tmp_path, access, subject=SUBJECT, redact=False):
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = tmp_path / "runs.db"
    args = ["exec", pipeline(tmp_path, access, redact), "--index", index, "--store", str(store)]
    args += ["--input", f"question={QUESTION}", "--json"]
    if subject is not None:
        args += ["--subject", json.dumps(subject)]
    result = runner.invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    events = SqliteRunStore(str(store), create=False).events(out["run_id"])
    return out, events, result.stdout


def cited(out):
    blocks = out["state"]["context_blocks"]
    return sorted(b.split("\n")[1][4:] for b in blocks if b.startswith("--- NODE ---"))


@pytest.fixture(scope="module")
def opa():
    server = OpaServer()
    yield server
    server.close()


def engines(opa):
    return {
        "builtin": None,
        "cedar": {
            "engine": "cedar",
            "policies": str(PIPELINES / "access" / "policy.cedar"),
            "schema": str(PIPELINES / "access" / "schema.cedarschema"),
        },
        "opa": {"engine": "opa", "url": opa.rule_url},
    }


def test_a_tenant_a_public_subject_cites_only_tenant_a_public_nodes_under_every_engine(
    runner, index, tmp_path, opa
):
    answers = {}
    for name, access in engines(opa).items():
        out, events, stdout = run(runner, index, tmp_path / name, access, redact=True)
        assert out["status"] == "completed", (name, out["error"])
        assert cited(out) == [ALLOWED], name
        answer = out["output"]["final_answer"]
        assert f"[{ALLOWED}]" in answer
        access_events = [e for e in events if e["type"] == "ACCESS"]
        assert access_events and {e["engine"] for e in access_events} == {name}
        search = [e for e in access_events if e["action"] == "search"]
        # Three denied nodes hold the question's words: counted, never listed.
        assert sum(e["denied"] for e in search) == 3, name
        assert all(e.get("code") is None for e in access_events)
        everything = json.dumps(events) + stdout
        for word in DENIED_WORDS:
            assert word not in everything, (name, word)
        hits = out["state"]["retrieval_hits"]
        assert [h["id"] for h in hits] == [ALLOWED]
        allowed_ids = {d for e in search for d in (x["id"] for x in e["decisions"])}
        assert hits[0]["decision"] in allowed_ids
        # The planted key and card reach the model masked, in every call.
        calls = [e for e in events if e["type"] == "MODEL_CALL"]
        sent = json.dumps([e.get("messages") for e in calls])
        assert calls and "messages" in calls[-1]
        assert PLANTED_KEY not in sent and PLANTED_CARD not in sent, name
        assert "[SECRET_" in sent and "[CARD_" in sent, name
        assert PLANTED_KEY not in answer and PLANTED_CARD not in answer
        answers[name] = answer
    assert answers["builtin"] == answers["cedar"] == answers["opa"]
    assert len(opa.bodies) >= 1  # the OPA runs really asked the server


def test_the_anonymous_run_reads_only_unlabelled_content(runner, index, tmp_path):
    out, events, _ = run(runner, index, tmp_path, None, subject=None)
    assert out["status"] == "completed", out["error"]
    assert cited(out) == []  # every node of this index is labelled
    assert sum(e["denied"] for e in events if e["type"] == "ACCESS") >= 4
    for word in [*DENIED_WORDS, "usp_ShipOrderAPublic"]:
        assert word not in json.dumps(out["state"]) + json.dumps(events)


def test_a_tenant_b_internal_subject_sees_only_tenant_b(runner, index, tmp_path):
    subject = {"tenant": "b", "clearance": ["public", "internal"]}
    out, _, _ = run(runner, index, tmp_path, None, subject=subject)
    assert cited(out) == sorted(
        [
            "shop::main::procedure::dbo.usp_ShipOrderBPublic",
            "shop::main::procedure::dbo.usp_ShipOrderBInternal",
        ]
    )
