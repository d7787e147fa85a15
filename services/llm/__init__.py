"""Chat models behind one small interface, and the fallback chain over them.

* ``types``   — ``ChatRequest``/``ChatResult``, the error kinds, ``ProviderError`` and the
  ``ChatProvider`` Protocol: everything a caller or a provider needs to name.
* ``wire``    — helpers for provider implementations (redaction, ``Retry-After``, status -> kind).
* ``retry``   — ``RetryPolicy``, ``CircuitBreaker`` and ``retrying``, the one retry loop.
* ``chain``   — ``LLMService``: the fallback chain, for blocking and streamed replies.
* ``factory`` — ``build_llm_service``: the chain named in the settings.
* ``embedding_service`` — ``EmbeddingProvider``, ``build_embedder``, the embedder pinned per study.
* ``providers`` — one module per provider (offline, DashScope, OpenAI-compatible) for chat and embeddings.

Providers (``services/llm/providers/``) import ``types``, ``wire`` and ``retry``, never the chain.
This file imports nothing, so importing ``services.llm.types`` never pulls the chain in.

May import: ``services.platform`` and ``services.text`` (nothing above them).
"""
