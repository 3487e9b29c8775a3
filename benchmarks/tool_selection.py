"""Tool selection by retrieval (docs/tools.md): is the expected tool among those offered?

The candidates are step-runtime's own tool faces (read from the installed actions) and the
twenty tool specs of benchmarks/data/tool_catalog.json; the questions and their expected
tools are benchmarks/data/tool_questions.json, written before the first run. Each question
is ranked as `tools: {select: auto, max: N, from: [every candidate]}` ranks it (BM25;
MiniLM vectors fused when installed and --vectors is given). Prints the hit rate, every
miss with what was offered, and the median time of one selection.

    .venv/bin/python benchmarks/tool_selection.py [--json] [--vectors]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DATA = Path(__file__).resolve().parent / "data"
OWN = (
    "search_nodes",
    "expand_dependency_tree",
    "fetch_node_texts",
    "rehydrate",
    "assemble_context",
)


def candidates() -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """(name, OpenAI spec, safety tags) of every candidate tool."""
    from runtime.contract.registry import default_registry

    out = []
    registry = default_registry()
    for name in OWN:
        cls = registry.get(name)
        if cls is None or cls.tool is None:
            raise SystemExit(f"{name} has no tool face in this install")
        out.append((name, cls.tool.spec(), tuple(cls.tool.safety)))
    catalog = json.loads((DATA / "tool_catalog.json").read_text(encoding="utf-8"))
    for tool in catalog["tools"]:
        props = {k: {"type": "string", "description": v} for k, v in tool["parameters"].items()}
        spec = {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool["description"],
                "parameters": {"type": "object", "properties": props},
            },
        }
        out.append((tool["name"], spec, tuple(tool["safety"])))
    return out


def measure(vectors: bool = False) -> dict[str, Any]:
    """Hit rate of the expected tool among the offered, misses, median selection time."""
    from actions._tool_select import select

    data = json.loads((DATA / "tool_questions.json").read_text(encoding="utf-8"))
    tools = candidates()
    hits, misses, times = 0, [], []
    ranker = "bm25"
    for item in data["questions"]:
        started = time.perf_counter()
        chosen = select(item["q"], tools, max_tools=int(data["max"]), vectors=vectors)
        times.append(time.perf_counter() - started)
        ranker = chosen.ranker
        if item["expected"] in chosen.offered:
            hits += 1
        else:
            misses.append({"q": item["q"], "expected": item["expected"], "offered": chosen.offered})
    n = len(data["questions"])
    return {
        "questions": n,
        "candidates": len(tools),
        "max": data["max"],
        "ranker": ranker,
        "hits": hits,
        "hit_rate": round(hits / n, 4),
        "misses": misses,
        "median_ms": round(statistics.median(times) * 1000, 3),
    }


def main() -> None:
    """Print the figures (text, or JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--vectors", action="store_true", help="fuse MiniLM vectors if installed")
    args = parser.parse_args()
    result = measure(args.vectors)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(
        f"{result['hits']}/{result['questions']} questions ({result['hit_rate']:.1%}) had the "
        f"expected tool among the {result['max']} offered of {result['candidates']} "
        f"({result['ranker']}); median selection {result['median_ms']} ms"
    )
    for miss in result["misses"]:
        print(f"  miss: {miss['q']!r}: expected {miss['expected']}, offered {miss['offered']}")


if __name__ == "__main__":
    main()
