"""Text embeddings behind one interface, pinned per study.

Vectors are float32 and L2-normalised, so a dot product is the cosine. E5-style
models embed a search query and a stored passage differently, so the interface
has both ``embed_queries`` (the participant's new message) and
``embed_passages`` (stored memories).
"""
from __future__ import annotations

from typing import Protocol

import numpy as np


class EmbeddingProvider(Protocol):
    name: str
    model: str  # stored with every vector; vectors of different models are never compared
    dim: int

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...


def normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


def build_embedder(settings) -> EmbeddingProvider:
    """The study's embedder (``EMBEDDING_PROVIDER``)."""
    from services.providers import build_embedding_provider

    return build_embedding_provider(settings.embedding_provider, settings)
