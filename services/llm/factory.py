"""The configured chain: providers named in the settings, the retry policy from the settings."""
from __future__ import annotations

from typing import Any

from services.llm.chain import LLMService
from services.llm.providers import build_chat_provider
from services.llm.retry import RetryPolicy
from services.llm.types import FailureHook


def build_llm_service(settings: Any, chain: list[str] | None = None, on_failure: FailureHook | None = None,
                      **options: Any) -> LLMService:
    """The provider chain named in settings (``LLM_PROVIDERS``), in order.

    ``options`` go to ``LLMService`` (``retry``, ``breakers``, ``sleep`` ...); by default the
    retry policy comes from ``LLM_MAX_RETRIES`` / ``LLM_TIMEOUT_SECONDS``. A provider that
    cannot be configured (missing key) raises ``ProviderConfigError`` here, at start-up."""
    names = chain or settings.llm_providers
    options.setdefault("retry", RetryPolicy.from_settings(settings))
    return LLMService([build_chat_provider(name, settings) for name in names], on_failure=on_failure, **options)
