"""Provider factory: one module per provider; adding one is one file plus one line here."""
from __future__ import annotations

import importlib
from typing import Any

from services.llm.types import ChatProvider

CHAT_PROVIDERS = {
    "offline": ("services.llm.providers.offline", "OfflineChatProvider"),
    "dashscope": ("services.llm.providers.dashscope_provider", "DashScopeChatProvider"),
    "openai_compatible": ("services.llm.providers.openai_compatible", "OpenAICompatibleChatProvider"),
}
EMBEDDING_PROVIDERS = {
    "offline": ("services.llm.providers.offline", "OfflineEmbeddingProvider"),
    "dashscope": ("services.llm.providers.dashscope_provider", "DashScopeEmbeddingProvider"),
    "openai_compatible": ("services.llm.providers.openai_compatible", "OpenAICompatibleEmbeddingProvider"),
}


def _load(registry: dict[str, tuple[str, str]], name: str, kind: str) -> Any:
    if name not in registry:
        raise ValueError(f"unknown {kind} provider {name!r}; known: {', '.join(sorted(registry))}")
    module_name, class_name = registry[name]
    return getattr(importlib.import_module(module_name), class_name)


def build_chat_provider(name: str, settings: Any) -> ChatProvider:
    return _load(CHAT_PROVIDERS, name, "chat").from_settings(settings)


def build_embedding_provider(name: str, settings: Any) -> Any:
    """An ``EmbeddingProvider`` (``services.llm.embedding_service``, which imports this module)."""
    return _load(EMBEDDING_PROVIDERS, name, "embedding").from_settings(settings)
