"""classify(): kinds on the sample codebase, a generated corpus, and look-alikes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import classifiers

ROOT = Path(__file__).resolve().parent.parent.parent
SAMPLE = ROOT / "pipelines" / "sample" / "eshop"
sys.path.insert(0, str(ROOT / "benchmarks"))
from corpus import corpus  # noqa: E402


@pytest.mark.parametrize(
    "path", sorted(SAMPLE.rglob("*.cs")) + sorted(SAMPLE.rglob("*.sql")), ids=lambda p: p.name
)
def test_sample_files(path):
    c = classifiers.classify(path.read_text())
    assert c.language == ("dotnet" if path.suffix == ".cs" else "sql")
    assert 0.5 <= c.confidence <= 1 and c.reasons


@pytest.mark.parametrize(
    "name,kind",
    [
        ("OrderRepository.cs", "DOTNET_WITH_SQL"),
        ("BasketRepository.cs", "DOTNET_WITH_SQL"),
        ("EshopDbContext.cs", "DOTNET_WITH_SQL"),
        ("20260301_AddOrderAudit.cs", "DOTNET_WITH_SQL"),
        ("PaymentRepository.cs", "DOTNET_WITH_SQL"),
        ("OrderService.cs", "DOTNET"),
        ("Order.cs", "DOTNET"),
    ],
)
def test_embedded_sql_makes_dotnet_with_sql(name, kind):
    [path] = list(SAMPLE.rglob(name))
    assert classifiers.classify(path.read_text()).kind == kind


def test_generated_corpus_accuracy_is_at_least_98_percent():
    items = corpus(300, seed=11)
    by_lang: dict[str, list[bool]] = {}
    for lang, _, text in items:
        by_lang.setdefault(lang, []).append(classifiers.classify(text).language == lang)
    for lang in ("dotnet", "sql", "unknown"):
        hits = by_lang[lang]
        assert sum(hits) / len(hits) >= 0.98, lang


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# Orders\nSelect the order you want and execute the steps in the guide.",
        '{"ConnectionStrings": {"Default": "Server=.;Database=Shop"}}',
        '<Project Sdk="Microsoft.NET.Sdk"><PropertyGroup/></Project>',
        "package a;\nimport java.util.List;\npublic class A extends B { public void f() {} }",
        "def f(x):\n    return x\n",
        "export class A { get(): number { return 1; } }",
    ],
)
def test_lookalikes_are_unknown(text):
    assert classifiers.classify(text).kind == "UNKNOWN"


def test_member_snippet_and_lowercase_sql():
    snippet = (
        "public async Task<int> CountAsync(int id)\n{\n    return await _repo.CountAsync(id);\n}"
    )
    assert classifiers.classify(snippet).language == "dotnet"
    assert (
        classifiers.classify("select o.id from dbo.orders o where o.total > 10;\ngo\n").kind
        == "SQL"
    )


def test_the_indexers_quick_decision_equals_classify():
    """language_only gathers less evidence but must decide exactly as classify()."""
    import sys
    from pathlib import Path

    from classifiers.code_classifier import classify, language_only

    root = Path(__file__).resolve().parent.parent.parent
    sys.path.insert(0, str(root / "benchmarks"))
    from corpus import codebase, corpus

    texts = [(name, text) for seed in (1, 2, 3) for _, name, text in corpus(300, seed=seed)]
    texts += codebase(4, members=(4, 7), steps=(0, 2))
    texts += [(str(p), p.read_text()) for p in (root / "tests" / "data" / "code").rglob("*.*")]
    texts += [
        ("x.sql", "SELECT 1"),
        ("x.txt", "SELECT a FROM b"),
        ("x.cs", ""),
        ("y", "GO\nSELECT 1"),
    ]
    for name, text in texts:
        assert language_only(text, name) == classify(text, name).language, name


def test_extraction_survives_mangled_files():
    """Seeded mutations of real files (cut, spliced, half-typed): never an exception."""
    import random
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent.parent
    bases = [p.read_text() for p in (root / "pipelines" / "sample" / "eshop").rglob("*.cs")]
    bases += [p.read_text() for p in (root / "pipelines" / "sample" / "eshop").rglob("*.sql")]
    pieces = [
        "{",
        "}",
        "(",
        ")",
        ";",
        "=",
        ",",
        "'",
        '"',
        '@"',
        "/*",
        "--",
        "\n",
        "int x = ",
        "GO\n",
    ]
    pieces += ["CREATE PROCEDURE ", "AS ", "BEGIN ", "END ", "class ", "public ", "WITH ", "FROM "]
    rng = random.Random(20261123)
    for _ in range(300):
        text = list(rng.choice(bases))
        for _ in range(rng.randint(1, 20)):
            at = rng.randrange(len(text) + 1)
            if rng.random() < 0.5:
                text[at:at] = rng.choice(pieces)
            else:
                del text[at : at + rng.randint(1, 40)]
        mangled = "".join(text)
        for path in ("x.cs", "x.sql"):
            classifiers.extract(mangled, path)
            classifiers.extract(mangled, path, detail=False)
