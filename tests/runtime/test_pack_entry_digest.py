"""A checkpoint's `pack` ledger entry takes the SHA-256 of the pack body the store wrote
from save_pack (not read back and hashed again): it is the hash of the stored bytes, and
`runtime verify` agrees; a changed byte of the body still fails verify."""

from __future__ import annotations

import hashlib
import json
import sqlite3

from tests.actions.test_context_packs import DOC, PARTS, run
from tests.ledger_support import open_and_verify


def test_the_pack_entry_holds_the_sha256_of_the_stored_body(tmp_path):
    r, store = run(
        tmp_path,
        {"user_parts": PARTS, "max_output_tokens": 256},
        {"question": "which fox?", "doc": DOC},
        settings={"context_policy": {"enabled": True}},
        store=True,
    )
    assert r.status == "completed", r.error
    assert not store._pack_digests  # taken by the checkpoint
    store.close()
    db = sqlite3.connect(tmp_path / "runs.db")
    [(body,)] = db.execute("SELECT body FROM run_context_packs").fetchall()
    entries = [
        json.loads(c)
        for (c,) in db.execute("SELECT content FROM run_ledger WHERE kind = 'pack'").fetchall()
    ]
    db.close()
    assert [e["sha256"] for e in entries] == [hashlib.sha256(body.encode()).hexdigest()]
    assert open_and_verify(str(tmp_path / "runs.db"), "t", None).ok
    # One byte of the stored body changed: verify names the pack.
    db = sqlite3.connect(tmp_path / "runs.db")
    db.execute(
        "UPDATE run_context_packs SET body = replace(body, '\"version\":1', '\"version\":2')"
    )
    db.commit()
    db.close()
    report = open_and_verify(str(tmp_path / "runs.db"), "t", None)
    assert not report.ok and report.first.kind == "pack"
