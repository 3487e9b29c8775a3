"""Token counts made before a process (by the indexer, by an earlier budget step) and carried
with the text: they equal counting, and a count of other text, another encoding or another
cut rule is never used.

Every comparison is against tiktoken encoding the whole string in one piece, on real C# and
T-SQL (tests/data/realworld, tests/data/code), with counters that have counted nothing before.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runtime.context.blocks import format_block, seed_block
from runtime.context.tokens import CUT_RULE, TokenCounter, digest, get_counter
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.node import Scope
from runtime.retrieval.nodestore import open_store

DATA = Path(__file__).resolve().parent.parent / "data"
ROOTS = [str(DATA / "realworld"), str(DATA / "code")]
ENCODINGS = ["cl100k_base", "o200k_base"]
SEP = "\n\n"


def fresh(name: str) -> TokenCounter:
    """A counter that has counted nothing (the shared encoding, empty caches)."""
    return TokenCounter(get_counter(name).encoding)


def exact(name: str, text: str) -> int:
    return len(get_counter(name).encoding.encode_ordinary(text))


@pytest.fixture(scope="module")
def real_index(tmp_path_factory):
    path = tmp_path_factory.mktemp("carried") / "index.db"
    store = open_store(str(path), create=True)
    report = index_paths(store, ROOTS, repository="real", jobs=1, tokenizers=ENCODINGS)
    assert report.nodes > 100 and not report.failed
    return store


@pytest.fixture(scope="module")
def nodes(real_index) -> list[Any]:
    ids = [r[0] for r in real_index.conn().execute("SELECT id FROM nodes ORDER BY id")]
    found = real_index.get_nodes(ids, scope=Scope())
    return [found[i] for i in ids]


def item(node: Any, name: str | None = None) -> dict[str, Any]:
    """A node_texts item as fetch_node_texts hands it on (the index's counts, bound)."""
    record = {
        "digest": digest(node.text),
        "rule": CUT_RULE,
        "parts": {k: list(v) for k, v in node.tokens.items() if name is None or k == name},
    }
    return {**node.to_dict(), "tokens": record}


@pytest.mark.parametrize("name", ENCODINGS)
def test_the_index_stores_what_counting_gives(nodes, name):
    counter = fresh(name)
    languages = {n.language for n in nodes}
    assert {"dotnet", "sql"} <= languages
    for n in nodes:
        assert n.tokens[name] == counter.parts(n.text), n.id
        first, last, middle = n.tokens[name]
        assert middle == exact(name, n.text[first:last])
        assert exact(name, n.text[:first]) + middle + exact(name, n.text[last:]) == exact(
            name, n.text
        )
    # Indented code has cuts: most C# member texts are cut (they were whole joints before).
    cs = [n for n in nodes if n.language == "dotnet" and n.text.count("\n") > 3]
    assert sum(n.tokens[name][0] < len(n.text) for n in cs) > 0.9 * len(cs)


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("suffix", ["", SEP, "\n", " x"])
def test_a_block_counted_from_its_carried_text_count_is_exact(nodes, name, suffix):
    counter = fresh(name)
    for n in nodes:
        block = format_block(n.to_dict(), compact=False, metadata={"kind": n.kind})
        assert seed_block(counter, block, item(n, name))
        assert counter.count_block(block, suffix) == exact(name, block + suffix), n.id


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_context_joined_from_carried_counts_is_exact(nodes, name):
    rng = random.Random(14)
    for round_ in range(6):
        counter = fresh(name)
        chosen = rng.sample(nodes, rng.randint(1, 40))
        blocks = [format_block(n.to_dict(), compact=False) for n in chosen]
        for n, b in zip(chosen, blocks, strict=True):
            seed_block(counter, b, item(n))
        if round_ % 2:  # batch markers between them, as divide_new_content puts them
            blocks.insert(rng.randrange(len(blocks) + 1), "=== new evidence ===")
        for sep in (SEP, "\n", " | "):
            assert counter.count_joined(blocks, sep) == exact(name, sep.join(blocks))


@pytest.mark.parametrize("name", ENCODINGS)
def test_only_header_and_joints_are_encoded_when_counts_are_carried(nodes, name):
    counter = fresh(name)
    big = [n for n in nodes if len(n.text) > 1500][:10]
    blocks = [format_block(n.to_dict(), compact=False) for n in big]
    for n, b in zip(big, blocks, strict=True):
        seed_block(counter, b, item(n))
    encoded: list[str] = []
    original = counter.count
    counter.count = lambda text: encoded.append(text) or original(text)  # type: ignore[method-assign]
    try:
        total = counter.count_joined(blocks, SEP)
    finally:
        del counter.count
    assert total == exact(name, SEP.join(blocks))
    assert len(big) == 10 and sum(map(len, encoded)) < 0.1 * len(SEP.join(blocks))


def test_a_count_for_other_text_or_tokenizer_or_rule_is_never_used(nodes):
    counter = fresh("cl100k_base")
    n = next(n for n in nodes if n.language == "sql" and n.text.count("\n") > 20)
    good = item(n)["tokens"]
    assert counter.carried(n.text, good) == n.tokens["cl100k_base"]
    first, last, middle = n.tokens["cl100k_base"]
    edited = n.text[:first] + "X" + n.text[first + 1 :]  # same length, same cuts
    bad = [
        (edited, good),  # the text changed since it was counted
        (n.text, {**good, "rule": CUT_RULE - 1}),  # counted under another cut rule
        (n.text, {**good, "parts": {"o200k_base": good["parts"]["o200k_base"]}}),  # no cl100k
        (n.text, {**good, "parts": {"cl100k_base": [first + 1, last, middle]}}),  # not a cut
        (n.text, {**good, "parts": {"cl100k_base": [first, last, -1]}}),
        (n.text, {**good, "parts": {"cl100k_base": [first, last]}}),
        (n.text, {**good, "parts": {"cl100k_base": [first, last, str(middle)]}}),
        (n.text, {**good, "digest": digest(edited)}),
        (n.text, None),
        (n.text, "tokens"),
    ]
    for text, record in bad:
        assert counter.carried(text, record) is None, record
    block = format_block({**n.to_dict(), "text": edited}, compact=False)
    assert not seed_block(counter, block, {**n.to_dict(), "text": edited, "tokens": good})
    assert counter.count_block(block, SEP) == exact("cl100k_base", block + SEP)


def test_a_stale_count_in_the_index_is_not_handed_on(tmp_path):
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(DATA / "code")], repository="r", jobs=1)
    nid, text = (
        store.conn().execute("SELECT id, text FROM nodes WHERE length(text) > 400").fetchone()
    )
    assert store.get_nodes([nid], scope=Scope())[nid].tokens  # counted by default (cl100k_base)
    with store.conn() as db:  # the text changes behind the counts' back
        db.execute("UPDATE nodes SET text = ? WHERE id = ?", (text + "\n-- edited", nid))
    assert store.get_nodes([nid], scope=Scope())[nid].tokens == {}


def test_an_index_made_before_counts_existed_still_works(tmp_path):
    import shutil

    src = tmp_path / "code"
    shutil.copytree(DATA / "code", src)
    path = tmp_path / "old.db"
    index_paths(open_store(str(path), create=True), [str(src)], repository="r", jobs=1)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE node_tokens")  # the layout-3 index of an earlier version
    db.commit()
    db.close()
    reader = open_store(str(path))  # opens (no INDEX_FORMAT error); the table is added, empty
    ids = [r[0] for r in reader.conn().execute("SELECT id FROM nodes")]
    found = reader.get_nodes(ids, scope=Scope())
    assert len(found) == len(ids) > 10 and all(n.tokens == {} for n in found.values())
    # Indexing again counts the files that changed; the others keep no counts until they do.
    changed = src / "db" / "usp_TransferFunds.sql"
    changed.write_text(changed.read_text() + "\n-- reviewed\n")
    index_paths(open_store(str(path), create=True), [str(src)], repository="r", jobs=1)
    found = reader.get_nodes(ids, scope=Scope())
    counted = {n.path for n in found.values() if n.tokens}
    assert counted == {"db/usp_TransferFunds.sql"}


def test_node_counts_follow_the_node_through_deletes(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "A.sql").write_text("CREATE TABLE dbo.A (Id int NOT NULL);\nGO\n")
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(src)], repository="r", jobs=1)
    assert store.conn().execute("SELECT count(*) FROM node_tokens").fetchone()[0] == 1
    (src / "A.sql").unlink()
    index_paths(store, [str(src)], repository="r", jobs=1)
    assert store.conn().execute("SELECT count(*) FROM node_tokens").fetchone()[0] == 0


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_context_carried_in_run_state_is_taken_block_by_block(nodes, name):
    blocks = [format_block(n.to_dict(), compact=False) for n in nodes[:30]]
    record = fresh(name).carry_blocks(blocks)
    assert record["encoding"] == name and record["rule"] == CUT_RULE
    counter = fresh(name)
    changed = [*blocks[:5], blocks[5] + " ", *blocks[6:]]  # one block edited since
    assert counter.take_blocks(changed, record) == 29
    assert counter.count_joined(changed, SEP) == exact(name, SEP.join(changed))
    other = "o200k_base" if name == "cl100k_base" else "cl100k_base"
    assert fresh(other).take_blocks(blocks, record) == 0  # another tokenizer's counts
    assert fresh(name).take_blocks(blocks, {**record, "rule": CUT_RULE + 1}) == 0
    forged = {**record, "blocks": {k: [v[0] + 1, v[1], v[2]] for k, v in record["blocks"].items()}}
    assert fresh(name).take_blocks(blocks, forged) == 0  # offsets that are not cuts
    # A block without a cut has no middle: a record claiming one is not taken either.
    plain = ["one line, no cut"]
    claimed = fresh(name).carry_blocks(plain)
    assert [v for v in claimed["blocks"].values()] == [[len(plain[0]), len(plain[0]), 0]]
    assert fresh(name).take_blocks(plain, claimed) == 1
    claimed["blocks"] = {k: [v[0], v[1], 7] for k, v in claimed["blocks"].items()}
    assert fresh(name).take_blocks(plain, claimed) == 0


@pytest.mark.parametrize("name", ENCODINGS)
def test_indented_line_starts_are_cuts(name):
    counter = fresh(name)
    rng = random.Random(21)
    alphabet = ["\n", "\n", " ", "    ", "\t", "\r\n", "/", "//", "x", "Ab", "'s", "12", ";", "}"]
    alphabet += ["\u00a0", "\u3000", "\x0b", "\x85", "é"]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20)))
        first, last, middle = counter.parts(text)
        assert exact(name, text[:first]) + middle + exact(name, text[last:]) == exact(name, text)
        blocks = [text, "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))]
        sep = rng.choice([SEP, "\n", "", " "])
        assert counter.count_joined(blocks, sep) == exact(name, sep.join(blocks))


@pytest.mark.parametrize("name", ENCODINGS)
def test_texts_without_cuts_are_counted_in_their_joints(name):
    # The line after "text:" is a cut only when the text starts like a cut ("x", "  x");
    # a text opening with "/" (o200k joins it to the newline), a newline or a blank is not.
    texts = ["/// only", "// a\n// b", "\nx", "\n", "  ", "", "\n\n  y", "x", "  x", "/x\n/y"]
    for text in texts:
        counter = fresh(name)
        node = {"id": "n", "path": "p.sql", "language": "sql", "text": text}
        block = format_block(node, compact=False)
        assert seed_block(counter, block, {**node, "tokens": fresh(name).carry(text)})
        assert counter.count_block(block, SEP) == exact(name, block + SEP), text
        joined = [block, "tail", block]
        assert counter.count_joined(joined, SEP) == exact(name, SEP.join(joined)), text
