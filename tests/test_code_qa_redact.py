"""Issue 28, done when: a planted API key and card number in an indexed file of the sample
reach the model masked in a code_qa run with `redact:` on.

The real pipeline (pipelines/code_qa.yaml with `redact: true` added to its settings), the
real indexer over a copy of the sample with one file planted, and a chat server on
127.0.0.1 that records every request it receives.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from runtime.cli import cli

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "sk_live_51HqLyjWDarjtT1zdp7dcQxYzAb"
CARD = "4242 4242 4242 4242"
PLANTED = f"""using System;

namespace Eshop.Infrastructure.Payments
{{
    /// <summary>Charges orders through the card gateway.</summary>
    public sealed class GatewayChargeClient
    {{
        private const string GatewayApiKey = "{API_KEY}";

        // Smoke test card (production gateway): {CARD}
        public string ChargeOrder(int orderId, decimal amount)
        {{
            return $"charge {{orderId}} {{amount}} with {{GatewayApiKey}}";
        }}
    }}
}}
"""


def setup(tmp_path: Path, runner) -> tuple[str, str]:
    sample = tmp_path / "eshop"
    shutil.copytree(ROOT / "pipelines" / "sample" / "eshop", sample)
    target = sample / "src" / "Eshop.Infrastructure" / "Payments" / "GatewayChargeClient.cs"
    target.parent.mkdir()
    target.write_text(PLANTED)
    index = str(tmp_path / "index.db")
    done = runner.invoke(cli, ["index", str(sample), "--index", index, "--repository", "eshop"])
    assert done.exit_code == 0, done.output
    folder = tmp_path / "pipeline"
    folder.mkdir()
    shutil.copytree(ROOT / "pipelines" / "prompts", folder / "prompts")
    text = (ROOT / "pipelines" / "code_qa.yaml").read_text()
    assert "\nsettings:\n" in text
    (folder / "code_qa.yaml").write_text(
        text.replace("\nsettings:\n", "\nsettings:\n  redact: true\n", 1)
    )
    return str(folder / "code_qa.yaml"), index


def test_a_planted_key_and_card_reach_the_model_masked(runner, tmp_path, chat_server):
    pipeline, index = setup(tmp_path, runner)
    chat_server.script = [
        {"reply": '{"decision": "retrieve", "query": "GatewayChargeClient ChargeOrder"}'},
        {"reply": '{"decision": "sufficient"}'},
        {"reply": "ChargeOrder uses the key [SECRET_0]."},
    ]
    store = tmp_path / "runs.db"
    result = runner.invoke(
        cli,
        [
            "exec",
            pipeline,
            "--index",
            index,
            "--store",
            str(store),
            "--model",
            f"openai:m@{chat_server.url}",
            "--input",
            "question=Which API key does GatewayChargeClient use to charge an order?",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "completed"
    # The planted file was retrieved: its text, values and all, is the run's evidence.
    evidence = json.dumps(out["state"]["context_blocks"])
    assert "GatewayChargeClient" in evidence and API_KEY in evidence and CARD in evidence
    # The model never received either value, in any request; it got placeholders.
    assert len(chat_server.requests) == 3
    sent = [json.dumps(r["body"]["messages"]) for r in chat_server.requests]
    for text in sent:
        assert API_KEY not in text and CARD not in text
    answer = sent[2]
    assert "GatewayChargeClient" in answer and "[SECRET_" in answer and "[CARD_" in answer
    # The trace counts what was masked, never the values; the run store's trace, context
    # packs and ledger hold neither value.
    db = sqlite3.connect(store)
    redacted = [
        json.loads(row[0])
        for row in db.execute("SELECT data FROM events WHERE type = 'REDACTED' ORDER BY seq")
    ]
    assert redacted and any(r["kinds"].get("secret") and r["kinds"].get("card") for r in redacted)
    for table in ("events", "run_context_packs", "run_ledger"):
        rows = json.dumps(db.execute(f"SELECT * FROM {table}").fetchall())
        assert API_KEY not in rows and CARD not in rows, table
