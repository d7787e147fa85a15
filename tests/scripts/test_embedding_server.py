"""scripts/embedding_server.py speaks the wire format the platform's openai_compatible embedder reads: the real
provider (the openai SDK) gets one normalised vector per text, in order, from the server's handler. The model is a
stand-in (sentence-transformers is not a platform requirement); what is tested is the HTTP side."""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer

import numpy as np
import pytest

from scripts import embedding_server
from services.llm.providers.openai_compatible import OpenAICompatibleEmbeddingProvider


class LengthEmbedder:
    """A vector that depends on the text (its length and first letter), so order and identity can be checked."""

    def __init__(self) -> None:
        self.cache: dict[str, np.ndarray] = {}
        self.embedded = 0
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        self.embedded += len(texts)
        return np.array([[len(t), ord(t[0]) if t else 0, 1.0] for t in texts], dtype=np.float32)


@pytest.fixture
def server():
    embedder = LengthEmbedder()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), embedding_server.make_handler(embedder, "stand-in"))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", embedder
    httpd.shutdown()
    httpd.server_close()


def test_the_platform_embedder_reads_the_servers_vectors_in_order(server):
    base_url, embedder = server
    provider = OpenAICompatibleEmbeddingProvider(model="stand-in", base_url=base_url, timeout=10)
    texts = ["a", "bbb", "cc"]
    vectors = provider.embed_passages(texts)
    expected = np.array([[1, ord("a"), 1], [3, ord("b"), 1], [2, ord("c"), 1]], dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert vectors.shape == (3, 3)
    assert np.allclose(vectors, expected, atol=1e-6)
    assert provider.model == "openai_compatible/stand-in"
    assert embedder.calls == [texts]  # one batch, as sent


def _post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_single_string_is_one_input_and_bad_input_is_refused(server):
    base_url, embedder = server
    status, body = _post(f"{base_url}/embeddings", json.dumps({"model": "x", "input": "hello"}).encode())
    assert status == 200 and [row["index"] for row in body["data"]] == [0] and body["model"] == "stand-in"
    for bad in ({"model": "x", "input": []}, {"model": "x", "input": [1, 2]}, {"model": "x"}):
        status, body = _post(f"{base_url}/embeddings", json.dumps(bad).encode())
        assert status == 400 and "input" in body["error"]["message"]
    status, _ = _post(f"{base_url}/chat/completions", b"{}")
    assert status == 404
    assert embedder.calls == [["hello"]]  # nothing refused reached the model


def test_models_lists_the_served_name(server):
    base_url, _ = server
    with urllib.request.urlopen(f"{base_url}/models", timeout=10) as response:
        assert [m["id"] for m in json.loads(response.read())["data"]] == ["stand-in"]
