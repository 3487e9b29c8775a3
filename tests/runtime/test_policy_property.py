"""Property: whatever the prompt, the policy never lets a prompt go over its budget.

Thousands of random prompts and payload mixes (text, JSON, diffs, logs, Markdown of
random sizes, summarisable or not, in system/history/user messages) against random
budgets: every prompt the policy passes is counted exactly and is within its budget;
a reject is only ever a prompt whose parts that may not be summarised (with the
pointers it could make) exceed the budget; nothing that is not summarisable changes;
a dry run changes nothing at all. Then a few hundred whole runs through call_model
keep the run counter context_budget_violations at 0.
"""

from __future__ import annotations

import json
import lzma
import random
from collections import Counter
from pathlib import Path

import pytest

from runtime.context import policy as pol
from runtime.context.pointers import MemoryPointerStore
from runtime.context.tokens import get_counter

DATA = Path(__file__).parents[1] / "data"
with lzma.open(DATA / "long_inputs" / "pride_and_prejudice.txt.xz", "rt") as _f:
    NOVEL = _f.read()
SOURCES = {
    "text": NOVEL,
    "diff": (DATA / "summaries" / "eshop_aaf1857.diff").read_text(encoding="utf-8"),
    "json": (DATA / "summaries" / "eshop_catalog.json").read_text(encoding="utf-8"),
    "log": (DATA / "summaries" / "dpkg.log").read_text(encoding="utf-8"),
    "markdown": (DATA / "summaries" / "eshop_README.md").read_text(encoding="utf-8"),
}
ITEMS = json.loads(SOURCES["json"])
COUNTER = get_counter()
OVERHEAD = 4


def payload(rng: random.Random) -> tuple[str, str | None]:
    kind = rng.choice(sorted(SOURCES))
    source = SOURCES[kind]
    if kind == "json" and rng.random() < 0.5:
        text = json.dumps(ITEMS[: rng.randint(0, len(ITEMS))])
        return text, rng.choice(["json", None])
    start = rng.randint(0, max(0, len(source) - 1))
    size = rng.choice([0, 5, 80, 600, 3000, 10000])
    # A JSON slice is not JSON: declaring it so is SUMMARY_KIND_MISMATCH (tested elsewhere).
    declared = None if kind == "json" else rng.choice([kind, None])
    return source[start : start + size], declared


def prompt(rng: random.Random) -> list[pol.PromptMessage]:
    messages = [pol.PromptMessage("system", [rng.choice(["", "You answer.", NOVEL[:900]])])]
    for i in range(rng.randint(0, 4)):
        role = rng.choice(["user", "assistant"])
        text, _ = payload(rng)
        if role == "user":  # user turns are never summarised: keep them question-sized
            text = text[:400]
        messages.append(
            pol.PromptMessage(role, [pol.Segment(f"{role}[{i}]", text, role == "assistant")])
        )
    pieces: list[str | pol.Segment] = []
    for j in range(rng.randint(1, 5)):
        text, kind = payload(rng)
        if j:
            pieces.append("\n\n")
        pieces.append(rng.choice(["", "Part:\n", "Evidence <evidence>\n"]))
        summarizable = rng.random() < 0.75
        if not summarizable:  # mostly question-sized; sometimes too big to fit anything
            text = text[: rng.choice([300, 300, 300, 10000])]
        pieces.append(pol.Segment(f"part{j}", text, summarizable, kind))
    messages.append(pol.PromptMessage("user", pieces))
    return messages


def frozen(messages: list[pol.PromptMessage]) -> list[tuple[str, str]]:
    """What may never change: each non-summarisable segment's text as shown."""
    return [(s.sid, s.shown) for m in messages for s in m.segments() if not s.summarizable]


CASES = 1500
CHUNK = 150
# The first chunk is in the fast subset; the rest are `slow` (seconds each) and `pins`
# (the mutation tool runs them). Chunks also spread the cases over the test workers.
SLOW_PINS = (pytest.mark.slow, pytest.mark.pins)


def chunks(total: int, size: int) -> list:
    """One parameter per chunk of seeds: the first fast, the others slow."""
    return [
        pytest.param(k, marks=SLOW_PINS if k else (), id=f"seeds{k * size}-{(k + 1) * size - 1}")
        for k in range(total // size)
    ]


@pytest.mark.parametrize("chunk", chunks(CASES, CHUNK))
def test_no_prompt_passes_over_its_budget(chunk):
    """Seeded random cases (a failure names its case: rerun it with check_case(n))."""
    decisions: Counter[str] = Counter()
    for n in range(chunk * CHUNK, (chunk + 1) * CHUNK):
        decisions[check_case(n)] += 1
    # The mix reaches every branch, so a policy that always says one thing fails here.
    assert all(decisions[d] > CHUNK // 20 for d in ("ok", "needs_summary", "reject")), decisions


def check_case(n: int) -> str:
    """One random prompt, budget, summary size and dry-run flag; the decision made."""
    rng = random.Random(n)
    messages = prompt(rng)
    budget = rng.randint(1, 400) if rng.random() < 0.5 else rng.randint(400, 4000)
    summary_tokens = rng.choice([16, 60, 200])
    dry_run = rng.random() < 0.5
    cfg = pol.PolicyConfig(
        enabled=True, dry_run=dry_run, summary_tokens=summary_tokens, emergency_floor=0
    )
    profile = pol.Profile("m", budget + 512, 512, budget, 0)
    before = [m.content() for m in messages]
    kept = frozen(messages)
    store = MemoryPointerStore()
    d = pol.enforce(messages, profile, cfg, COUNTER, store=store, run_id="r", overhead=OVERHEAD)
    sent = pol.prompt_tokens(messages, COUNTER, OVERHEAD)
    where = f"case {n}"
    assert frozen(messages) == kept, where
    if dry_run or d.decision in ("ok", "reject"):
        assert [m.content() for m in messages] == before, where  # nothing changed
    if d.decision == "ok":
        assert sent == d.prompt_tokens <= budget, where
    elif d.decision == "needs_summary":
        assert d.summarised and d.deficit > 0, where
        if not dry_run:
            assert sent == d.prompt_tokens <= budget, where
            for s in d.summarised:  # each pointer leads back to its original
                assert store.get_original("r", s["pointer_id"]) is not None, where
    else:
        assert d.deficit > 0 and d.prompt_tokens > budget, where
        if d.exact and d.cause not in ("floor", "no_policy"):
            # Tight: the smallest prompt the policy can make is d.prompt_tokens; at that
            # budget the same prompt passes.
            again = pol.enforce(
                messages,
                pol.Profile("m", d.prompt_tokens + 512, 512, d.prompt_tokens, 0),
                cfg,
                COUNTER,
                store=store,
                run_id="r",
                overhead=OVERHEAD,
            )
            assert again.decision != "reject" and again.prompt_tokens <= d.prompt_tokens, where
    return str(d.decision)


RUNS = 300
RUN_CHUNK = 50


@pytest.mark.parametrize("chunk", chunks(RUNS, RUN_CHUNK))
def test_violation_counter_stays_zero_over_whole_runs(tmp_path, chunk):
    """Three hundred runs through call_model: every prompt sent is within its budget."""
    from runtime.engine import Engine
    from runtime.engine.services import Services
    from runtime.format.pipeline import Pipeline

    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Answer.\n")
    rng = random.Random(17 + chunk)
    kinds = sorted(SOURCES)
    sent = completed = 0
    for n in range(chunk * RUN_CHUNK, (chunk + 1) * RUN_CHUNK):
        parts = {}
        inputs: dict[str, object] = {"question": "what?"}
        for j in range(rng.randint(1, 4)):
            source = SOURCES[rng.choice(kinds)]
            start = rng.randrange(len(source))
            inputs[f"p{j}"] = source[start : start + rng.choice([10, 500, 4000, 30000])]
            parts[f"p{j}"] = {"source": f"p{j}", "summarizable": rng.random() > 0.2}
        window = rng.choice([1024, 2048, 4096, 8192])
        data = {
            "settings": {
                "entry_step_id": "ask",
                "models": {"m": {"provider": "extractive", "context_window": window}},
                "context_policy": {"enabled": True, "summary_tokens": rng.choice([40, 120])},
            },
            "steps": [
                {
                    "id": "ask",
                    "action": "call_model",
                    "prompt_key": "sys",
                    "model": "m",
                    "max_output_tokens": rng.choice([64, 256]),
                    "user_parts": {"q": {"source": "question"}, **parts},
                    "catch": {"CONTEXT_OVERFLOW": "f"},
                    "next": "f",
                },
                {"id": "f", "action": "finalize", "source": "question"},
            ],
        }
        p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
        r = Engine(p, services=Services(settings=p.settings, base_dir=str(tmp_path))).run(
            inputs, run_id=f"r{n}"
        )
        assert r.status == "completed", r.error
        completed += 1
        [d] = [e for e in r.events if e["type"] == "CONTEXT_BUDGET_DECISION"]
        calls = [e for e in r.events if e["type"] == "MODEL_CALL"]
        if calls:
            sent += 1
            [call] = calls
            tokens = sum(COUNTER.count(m["content"]) + OVERHEAD for m in call["messages"])
            assert tokens == call["prompt_tokens"] <= d["budget"]
        else:
            assert d["decision"] == "reject"
        counters = r.events[-1].get("counters") or {}
        assert counters.get("context_budget_violations", 0) == 0
    assert completed == RUN_CHUNK and sent > RUN_CHUNK // 2  # most runs did call the model
