"""A local OpenAI-compatible ``/v1/embeddings`` server over a sentence-transformers model on disk (research tool).

    python scripts/embedding_server.py MODEL_DIR [--name NAME] [--prompt TEXT] [--port 8765] [--cache FILE]

Serves ``POST /v1/embeddings`` ({"model", "input": str | [str], "encoding_format": "float"} in, OpenAI's
{"object": "list", "data": [{"embedding", "index"}], "model", "usage"} out) and ``GET /v1/models`` on 127.0.0.1,
so the platform's ``openai_compatible`` embedder can be pointed at a stronger model than the bundled one
(docs/recall_round11.md, "A stronger embedder on the development data"):

    EMBEDDING_PROVIDER=openai_compatible OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_EMBEDDING_MODEL=NAME

The OpenAI wire format has no query/passage distinction, so every text is embedded with the same ``--prompt``
(prepended; empty by default). Vectors are L2-normalised float32. ``--cache`` keeps every vector in a NumPy
file keyed by the exact text, so a second run (the fit, then the probes) does not embed a text twice.

Nothing here is imported by the platform and nothing is downloaded: the model is loaded from MODEL_DIR with
the Hugging Face hub switched off. Needs ``sentence-transformers`` (and torch) in the interpreter that runs it;
they are not among the platform's requirements, install them into a separate virtual environment.
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np


class Embedder:
    """The model, one batch at a time, with a text -> vector cache (optionally saved to disk)."""

    def __init__(self, model_dir: str, *, prompt: str, threads: int, cache_file: Path | None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub, whatever the model's files say
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        self.model = SentenceTransformer(model_dir, device="cpu", local_files_only=True)
        self.prompt = prompt
        self.lock = threading.Lock()
        self.cache_file = cache_file
        self.cache: dict[str, np.ndarray] = {}
        if cache_file and cache_file.exists():
            with np.load(cache_file, allow_pickle=False) as stored:
                self.cache = dict(zip(stored["texts"].tolist(), stored["vectors"], strict=True))
        self.embedded = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        with self.lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
            if missing:
                vectors = self.model.encode([self.prompt + t for t in missing], batch_size=32,
                                            normalize_embeddings=True, convert_to_numpy=True)
                self.cache.update(zip(missing, vectors.astype(np.float32), strict=True))
                self.embedded += len(missing)
                self._save()
            return np.stack([self.cache[t] for t in texts])

    def _save(self) -> None:
        if not self.cache_file:
            return
        texts = list(self.cache)
        partial = self.cache_file.with_suffix(".partial.npz")
        np.savez(partial, texts=np.array(texts), vectors=np.stack([self.cache[t] for t in texts]))
        partial.replace(self.cache_file)


def make_handler(embedder: Embedder, name: str):
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            if self.path.rstrip("/") == "/v1/models":
                self._answer(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "local"}]})
            else:
                self._answer(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != "/v1/embeddings":
                self._answer(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
                return
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                texts = request.get("input")
                texts = [texts] if isinstance(texts, str) else texts
                if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
                    raise ValueError("input must be a non-empty string or list of strings")
            except (ValueError, json.JSONDecodeError) as exc:
                self._answer(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
                return
            started = time.monotonic()
            vectors = embedder.embed(texts)
            tokens = sum(len(t.split()) for t in texts)  # words, not model tokens: OpenAI clients only log it
            self.log_message("%d texts in %.1f s (%d embedded since start, %d cached)", len(texts),
                             time.monotonic() - started, embedder.embedded, len(embedder.cache))
            self._answer(200, {"object": "list", "model": name,
                               "data": [{"object": "embedding", "index": i, "embedding": v.tolist()}
                                        for i, v in enumerate(vectors)],
                               "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", help="a sentence-transformers model directory on disk")
    parser.add_argument("--name", help="the model name the server answers with (default: the directory's name)")
    parser.add_argument("--prompt", default="", help="prepended to every text (e.g. a model's task prompt)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", type=Path, help="a .npz file keeping every vector by its text across runs")
    args = parser.parse_args(argv)
    embedder = Embedder(args.model_dir, prompt=args.prompt, threads=args.threads, cache_file=args.cache)
    name = args.name or Path(args.model_dir).name
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(embedder, name))
    print(f"serving {name} on http://127.0.0.1:{args.port}/v1 (prompt {args.prompt!r}, "
          f"{len(embedder.cache)} cached vectors)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
