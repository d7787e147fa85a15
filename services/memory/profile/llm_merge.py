"""Asking a language model to merge a task's conversation into the profile.

The model receives the old profile (JSON) and the task's conversation and
answers with the complete new profile as JSON. The answer is parsed leniently
(code fences, prose around the object) and validated strictly against
``services.memory.profile.schema.PROFILE_SCHEMA``; an invalid answer gets one repair request
showing the model its errors. If that also fails, ``ProfileUpdateFailed`` is
raised and the caller keeps the previous profile.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from services.llm.types import ChatRequest, ChatResult
from services.memory.profile.schema import empty_profile, iter_items, normalise_profile, split_tag, validation_errors
from services.text.structured_output import parse_json_object

PROMPTS = {
    "zh": {
        "system": (
            "你负责维护一份用户画像，供一个聊天助手在以后的对话中记住这位用户。"
            "请把【本次对话】中用户透露的信息合并进【原有画像】，输出完整的新画像。\n"
            "规则：\n"
            "1. 只输出一个 JSON 对象，不要输出解释或代码块标记。键必须是：basic_info（对象，键为 name、age、"
            "occupation、study、location、hometown 等，值为字符串），以及 preferences、constraints、goals、"
            "personality、social、emotional_needs、core_values、significant_events（字符串数组）。\n"
            "2. 每个条目末尾都要带上来源任务标签，例如 \"对海鲜过敏 [T1]\"。原有条目保留原标签；"
            "本次新得到的条目用 [{task_id}]；同一件事再次被提到时写成 [T1, {task_id}]。\n"
            "3. 保留原有画像中的所有条目，除非用户在本次对话中更正或否定了它（例如“我现在不养猫了”、"
            "“其实我叫…”）：这时删除或改写旧条目。\n"
            "4. 只记录用户自己说过的事实、偏好、目标、担忧和价值观，不要推测，不要记录助手说的话。\n"
            "5. 条目用用户所用的语言（{language_name}）简洁书写，每条不超过 40 个字。"
        ),
        "user": "【原有画像】\n{profile}\n\n【本次对话（任务 {task_id}）】\n{conversation}",
        "repair": "你的回答不是有效的画像 JSON：{errors}\n请只输出修正后的完整 JSON 对象。",
        "roles": {"user": "用户", "assistant": "助手"},
        "language_name": "中文",
    },
    "en": {
        "system": (
            "You maintain a user profile that lets a chat assistant remember this user in later conversations. "
            "Merge what the user revealed in [This conversation] into [Current profile] and answer with the "
            "complete new profile.\n"
            "Rules:\n"
            "1. Answer with one JSON object only, no explanation, no code fence. Keys: basic_info (an object "
            "with keys such as name, age, occupation, study, location, hometown and string values) and "
            "preferences, constraints, goals, personality, social, emotional_needs, core_values, "
            "significant_events (arrays of strings).\n"
            "2. Every item ends with the tag of the task it came from, e.g. \"allergic to seafood [T1]\". Keep "
            "existing tags; tag new items [{task_id}]; something mentioned again becomes [T1, {task_id}].\n"
            "3. Keep every existing item unless the user corrected or contradicted it in this conversation "
            "(e.g. \"I don't have a cat any more\", \"actually my name is ...\"): then remove or rewrite it.\n"
            "4. Record only facts, preferences, goals, worries and values the user stated; do not guess and do "
            "not record what the assistant said.\n"
            "5. Write items concisely in the user's language ({language_name}), at most 15 words each."
        ),
        "user": "[Current profile]\n{profile}\n\n[This conversation (task {task_id})]\n{conversation}",
        "repair": "Your answer is not a valid profile JSON: {errors}\nAnswer with the corrected complete JSON "
                  "object only.",
        "roles": {"user": "User", "assistant": "Assistant"},
        "language_name": "English",
    },
}


class ProfileUpdateFailed(Exception):
    """The model's answer could not be turned into a valid profile, even after a repair request."""

    def __init__(self, message: str, *, result: ChatResult | None, answers: list[str]) -> None:
        super().__init__(message)
        self.result = result
        self.answers = answers


@dataclass
class LLMProfileUpdate:
    profile: dict[str, Any]
    result: ChatResult
    repaired: bool
    attempts: list[dict[str, Any]] = field(default_factory=list)


def profile_request(old_profile: dict[str, Any] | None, conversation: list[tuple[str, str]], *, task_id: str,
                    language: str, user_id: int | None = None) -> ChatRequest:
    lang = "en" if language == "en" else "zh"
    prompts = PROMPTS[lang]
    lines = "\n".join(f"{prompts['roles'].get(role, role)}: {text}" for role, text in conversation)
    system = prompts["system"].replace("{task_id}", task_id).replace("{language_name}", prompts["language_name"])
    user = prompts["user"].format(profile=json.dumps(old_profile or empty_profile(), ensure_ascii=False, indent=1),
                                  task_id=task_id, conversation=lines)
    return ChatRequest(messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                       temperature=0.0, max_tokens=1500, json_mode=True, purpose="consolidation", language=lang,
                       user_id=user_id)


def parse_profile_answer(text: str, task_id: str, old_profile: dict[str, Any] | None = None,
                         ) -> tuple[dict[str, Any] | None, list[str]]:
    """(profile, []) for a valid answer, (None, errors) otherwise.

    An answer that silently drops most of the old profile is refused too: a
    correction removes an item or two, never half of what was known."""
    try:
        raw = parse_json_object(text)
    except ValueError as exc:
        return None, [str(exc)]
    errors = _structure_errors(raw)
    if errors:
        return None, errors
    profile = normalise_profile(raw, task_id)
    errors = validation_errors(profile)
    if not errors and old_profile:
        kept, total = _kept_items(old_profile, profile)
        if total >= 4 and kept * 2 < total:
            errors = [f"the answer keeps only {kept} of the {total} existing items; keep every item that was "
                      "not corrected"]
    return (None, errors) if errors else (profile, [])


def _kept_items(old: dict[str, Any], new: dict[str, Any]) -> tuple[int, int]:
    new_texts = {split_tag(item)[0] for _, item in iter_items(new)}
    old_texts = [split_tag(item)[0] for _, item in iter_items(old)]
    return sum(1 for t in old_texts if t in new_texts), len(old_texts)


def _structure_errors(raw: Any) -> list[str]:
    """Schema errors that normalising cannot fix; missing tags are fixed by ``normalise_profile``."""
    return [e for e in validation_errors(raw) if "without a task tag" not in e]


def update_profile_with_llm(llm, old_profile: dict[str, Any] | None, conversation: list[tuple[str, str]], *,
                            task_id: str, language: str, user_id: int | None = None) -> LLMProfileUpdate:
    """Ask the chain for the merged profile; one repair request on an invalid answer.

    Provider errors (``AllProvidersFailed``) propagate; an answer from the
    ``offline`` template responder is returned as is for the caller to detect."""
    request = profile_request(old_profile, conversation, task_id=task_id, language=language, user_id=user_id)
    result = llm.complete(request)
    attempts = list(result.attempts)
    if result.provider == "offline":
        return LLMProfileUpdate(profile={}, result=result, repaired=False, attempts=attempts)
    profile, errors = parse_profile_answer(result.text, task_id, old_profile)
    if profile is not None:
        return LLMProfileUpdate(profile=profile, result=result, repaired=False, attempts=attempts)
    answers = [result.text]
    lang = "en" if language == "en" else "zh"
    repair = ChatRequest(
        messages=[*request.messages, {"role": "assistant", "content": result.text or ""},
                  {"role": "user", "content": PROMPTS[lang]["repair"].format(errors="; ".join(errors[:5]))}],
        temperature=0.0, max_tokens=request.max_tokens, json_mode=True, purpose="consolidation", language=lang,
        user_id=user_id,
    )
    repaired = llm.complete(repair)
    attempts += repaired.attempts
    answers.append(repaired.text)
    profile, errors = parse_profile_answer(repaired.text, task_id, old_profile) if repaired.provider != "offline" else (
        None, ["the repair request was answered by the offline template responder"])
    if profile is None:
        raise ProfileUpdateFailed("invalid profile JSON after one repair request: " + "; ".join(errors[:5]),
                                  result=repaired, answers=answers)
    return LLMProfileUpdate(profile=profile, result=repaired, repaired=True, attempts=attempts)
