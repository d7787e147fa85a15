"""Text embeddings behind one interface, pinned per study.

Vectors are float32 and L2-normalised, so a dot product is the cosine. E5-style
models embed a search query and a stored passage differently, so the interface
has both ``embed_queries`` (the participant's new message) and
``embed_passages`` (stored memories).

The embedder is pinned: cosines between vectors of two different models mean
nothing, so there is no fallback chain for embeddings, and
``check_embedder_pinned`` refuses to start with an embedder other than the one
the study's stored messages were embedded with.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from services.llm.providers import build_embedding_provider
from services.llm.types import MALFORMED_RESPONSE, FailureHook, ProviderError


class EmbeddingProvider(Protocol):
    name: str
    model: str  # stored with every vector; vectors of different models are never compared
    dim: int

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...


class EmbedderMismatch(RuntimeError):
    """The configured embedder is not the one the stored vectors were made with."""


def normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


def checked_batch(vectors: np.ndarray, expected: int, provider: Any) -> np.ndarray:
    """A remote provider's batch, refused when it cannot be stored: wrong count, a width that
    differs from earlier batches, zero or non-finite rows. Sets ``provider.dim`` on first use."""
    if vectors.ndim != 2 or vectors.shape[0] != expected:
        got = vectors.shape[0] if vectors.ndim else 0
        raise ProviderError(f"malformed response: {got} vectors for {expected} texts", provider=provider.name,
                            kind=MALFORMED_RESPONSE)
    if provider.dim and vectors.shape[1] != provider.dim:
        raise ProviderError(f"malformed response: dimension {vectors.shape[1]}, expected {provider.dim}",
                            provider=provider.name, kind=MALFORMED_RESPONSE)
    if not np.all(np.isfinite(vectors)) or np.any(np.linalg.norm(vectors, axis=1) == 0):
        raise ProviderError("malformed response: a zero or non-finite vector", provider=provider.name,
                            kind=MALFORMED_RESPONSE)
    provider.dim = int(vectors.shape[1])
    return vectors


def build_embedder(settings: Any, on_failure: FailureHook | None = None) -> EmbeddingProvider:
    """The study's embedder (``EMBEDDING_PROVIDER``). ``on_failure`` receives each failed remote
    call (purpose ``embedding``), like the chat chain's hook."""
    embedder = build_embedding_provider(settings.embedding_provider, settings)
    if on_failure is not None and hasattr(embedder, "on_failure"):
        embedder.on_failure = on_failure
    return embedder


def stored_embedding_models(session: Any) -> dict[str, int]:
    """How many stored messages carry a vector of each embedding model."""
    from sqlalchemy import func, select

    from database.models import Message

    rows = session.execute(
        select(Message.embedding_model, func.count()).where(Message.embedding_model.is_not(None))
        .group_by(Message.embedding_model)
    ).all()
    return {model: count for model, count in rows}


def check_embedder_pinned(session: Any, embedder: EmbeddingProvider) -> None:
    """Raise ``EmbedderMismatch`` when stored messages were embedded with another model.

    Call it at start-up (and before a batch embedding job): switching ``EMBEDDING_PROVIDER``
    or the embedding model in the middle of a study would silently make every similarity,
    and so every L4/S1 recall, meaningless."""
    others = {model: n for model, n in stored_embedding_models(session).items() if model != embedder.model}
    if others:
        listed = ", ".join(f"{model} ({n} messages)" for model, n in sorted(others.items()))
        raise EmbedderMismatch(
            f"the configured embedder is {embedder.model}, but stored messages were embedded with {listed}. "
            "Vectors of different models cannot be compared: restore the study's EMBEDDING_PROVIDER / "
            "embedding model, or re-embed every message with the new one before switching.")
