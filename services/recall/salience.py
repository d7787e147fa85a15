"""Emotional salience of a participant's message: three scores in [0, 1] (SPEC §2).

* ``intensity`` - how strongly an emotion is expressed ("我太开心了！" high,
  "今天天气不错" zero);
* ``disclosure`` - how much private or vulnerable information the message
  reveals ("我从没告诉过别人，我很害怕失败" high, "我是学生" low);
* ``value`` - how far it touches what the person holds important ("家人对我来说
  是最重要的" high, "今天吃了面包" zero).

``salience = 0.4·intensity + 0.4·disclosure + 0.2·value`` is computed by
``emotional_salience`` (weights from the study definition).

Two scorers produce the same ``SalienceScores``: a language model asked for
JSON (``salience_request`` / ``parse_salience_response``) and, offline, the
lexicon scorer below. The lexicon scorer segments Chinese with jieba so that a
negation right before an emotion word ("不焦虑") weakens it and single-character
words only match whole tokens. Its scores are heuristic by design: they rank
messages sensibly (small talk < personal facts < confessions), they are not a
validated instrument.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import jieba
import jsonschema

from services.llm.types import ChatRequest
from services.recall.formulas import clamp_score, emotional_salience
from services.recall.word_lists import load_word_lists
from services.text.languages import detect
from services.text.structured_output import parse_json_object

jieba.setLogLevel(logging.WARNING)


@dataclass(frozen=True)
class SalienceScores:
    intensity: float
    disclosure: float
    value: float
    source: str = "lexicon"

    def salience(self, weights: Mapping[str, float] | None = None) -> float:
        return emotional_salience(self.intensity, self.disclosure, self.value, weights)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------
# Lexicons: word -> weight in [0, 1], data/recall/salience_lexicon.json
# ---------------------------------------------------------------------------

LEXICON = load_word_lists("salience_lexicon")
_ZH, _EN = LEXICON.data["zh"], LEXICON.data["en"]


@dataclass(frozen=True)
class _Lexicon:
    """One language's weighted words and phrases (word -> weight in [0, 1])."""
    intensity: dict[str, float]
    intensifiers: dict[str, float]
    negations: set[str]
    disclosure_phrases: dict[str, float]
    disclosure_words: dict[str, float]
    value_words: dict[str, float]
    value_phrases: dict[str, float]

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> _Lexicon:
        return cls(**{name: (set if name == "negations" else dict)(data[name]) for name in cls.__dataclass_fields__})


ZH, EN = _Lexicon.of(_ZH), _Lexicon.of(_EN)

FIRST_PERSON_ZH = re.compile(_ZH["first_person"])
OTHER_SUBJECT_ZH = re.compile(_ZH["other_subject"])
FIRST_PERSON_EN = re.compile(_EN["first_person"], re.I)


def _combine(weights: list[float]) -> float:
    """Strongest cue plus a little for each further one: two cues say more than one."""
    if not weights:
        return 0.0
    ordered = sorted(weights, reverse=True)
    return ordered[0] + sum(0.1 * w for w in ordered[1:3])


def _tokens(text: str, language: str) -> list[str]:
    if language == "zh":
        return [t for t in jieba.lcut(text) if t.strip()]
    return re.findall(r"[a-z]+(?:'[a-z]+)?", text.lower())


def _word_hits(tokens: list[str], lexicon: Mapping[str, float], negations: set[str],
               intensifiers: Mapping[str, float] | None = None) -> list[float]:
    hits: list[float] = []
    for i, token in enumerate(tokens):
        weight = lexicon.get(token)
        if weight is None and len(token) > 2:
            # jieba may glue an emotion word to its neighbour ("很焦虑了"); look inside longer tokens.
            weight = max((w for word, w in lexicon.items() if len(word) >= 2 and word in token), default=None)
        if weight is None:
            continue
        before = tokens[max(0, i - 2):i]
        if any(b in negations for b in before):
            weight *= 0.3
        if intensifiers:
            factor = max((intensifiers[b] for b in before if b in intensifiers), default=1.0)
            weight *= factor
        hits.append(weight)
    return hits


def _phrase_hits(text: str, phrases: Mapping[str, float]) -> list[float]:
    lowered = text.lower()
    return [w for phrase, w in phrases.items() if phrase in lowered]


def lexicon_scores(text: str, language: str | None = None) -> SalienceScores:
    """Offline salience scores of one message, each clamped to [0, 1]."""
    lang = language or detect(text, default="zh")
    tokens = _tokens(text, lang)
    lex = ZH if lang == "zh" else EN
    if lang == "zh":
        intensity = _word_hits(tokens, lex.intensity, lex.negations, lex.intensifiers)
        exclaim = text.count("！") + text.count("!")
        # Chinese often drops the subject: a message is about oneself unless it names someone else.
        first_person = bool(FIRST_PERSON_ZH.search(text)) or not OTHER_SUBJECT_ZH.match(text.strip())
    else:
        lowered = " ".join(tokens)
        intensifiers = {k: v for k, v in lex.intensifiers.items() if " " not in k}
        intensity = _word_hits(tokens, lex.intensity, lex.negations, intensifiers)
        for phrase, factor in lex.intensifiers.items():
            if " " in phrase and phrase in lowered:
                intensity = [w * factor for w in intensity]
        exclaim = text.count("!")
        first_person = bool(FIRST_PERSON_EN.search(text))
    disclosure = _word_hits(tokens, lex.disclosure_words, set()) + _phrase_hits(text, lex.disclosure_phrases)
    value = _word_hits(tokens, lex.value_words, set()) + _phrase_hits(text, lex.value_phrases)
    intensity_score = _combine(intensity) + (min(exclaim, 2) * 0.1 if intensity else 0.0)
    disclosure_score = _combine(disclosure)
    if not first_person:
        # Talk about the world, not about oneself, discloses little.
        disclosure_score *= 0.4
    return SalienceScores(
        intensity=clamp_score(intensity_score),
        disclosure=clamp_score(disclosure_score),
        value=clamp_score(_combine(value)),
        source="lexicon",
    )


# ---------------------------------------------------------------------------
# Language-model scoring
# ---------------------------------------------------------------------------

SALIENCE_RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "scores": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": ["integer", "string"]},
                    "emotional_intensity": {"type": ["number", "string", "null"]},
                    "self_disclosure_depth": {"type": ["number", "string", "null"]},
                    "value_relevance": {"type": ["number", "string", "null"]},
                },
                "required": ["id"],
            },
        },
    },
    "required": ["scores"],
}

_SALIENCE_INSTRUCTIONS = {
    "zh": (
        "你是心理学研究助理。请为下面每条用户消息打三个分数，取值 0 到 1：\n"
        "emotional_intensity（情绪强度：情绪表达有多强烈；\"今天天气不错\"为 0）；\n"
        "self_disclosure_depth（自我披露深度：透露了多少私人、脆弱的信息；\"我是学生\"较低，\"我从没告诉过别人的秘密\"很高）；\n"
        "value_relevance（价值观相关：是否涉及此人看重的东西，如家人、理想、原则）。\n"
        "只输出 JSON，格式：{\"scores\": [{\"id\": 消息编号, \"emotional_intensity\": 0.0, "
        "\"self_disclosure_depth\": 0.0, \"value_relevance\": 0.0}]}，不要输出其他文字。"
    ),
    "en": (
        "You are a psychology research assistant. Score each user message below on three scales from 0 to 1:\n"
        "emotional_intensity (how strongly an emotion is expressed; \"nice weather today\" is 0);\n"
        "self_disclosure_depth (how much private or vulnerable information it reveals; \"I'm a student\" is low, "
        "\"something I've never told anyone\" is high);\n"
        "value_relevance (whether it touches what the person holds important: family, ideals, principles).\n"
        "Answer with JSON only, in the form {\"scores\": [{\"id\": message id, \"emotional_intensity\": 0.0, "
        "\"self_disclosure_depth\": 0.0, \"value_relevance\": 0.0}]} and nothing else."
    ),
}


def salience_request(messages: Iterable[tuple[int, str]], language: str, *, user_id: int | None = None) -> ChatRequest:
    """One request scoring all of a task's user messages (one call per task, not per message)."""
    lang = "en" if language == "en" else "zh"
    listing = "\n".join(f"[{mid}] {text}" for mid, text in messages)
    return ChatRequest(
        messages=[{"role": "system", "content": _SALIENCE_INSTRUCTIONS[lang]},
                  {"role": "user", "content": listing}],
        temperature=0.0, max_tokens=2000, json_mode=True, purpose="salience", language=lang, user_id=user_id,
    )


def parse_salience_response(text: str, ids: Iterable[int]) -> dict[int, SalienceScores]:
    """Scores per message id from a model's answer; raises ``ValueError`` when the answer is unusable.

    Out-of-range numbers are clamped; a message the model skipped, or a score it
    left out or wrote as a non-number, is filled from the lexicon scorer by the
    caller (``score_messages``), so a sloppy answer never breaks consolidation."""
    data = parse_json_object(text)
    errors = list(jsonschema.Draft202012Validator(SALIENCE_RESPONSE_SCHEMA).iter_errors(data))
    if errors:
        raise ValueError(f"salience answer does not match the schema: {errors[0].message}")
    wanted = {int(i) for i in ids}
    result: dict[int, SalienceScores] = {}
    for entry in data["scores"]:
        try:
            mid = int(entry["id"])
        except (TypeError, ValueError):
            continue
        if mid not in wanted:
            continue
        raw = (entry.get("emotional_intensity"), entry.get("self_disclosure_depth"), entry.get("value_relevance"))
        if any(_number(v) is None for v in raw):
            continue
        result[mid] = SalienceScores(*(clamp_score(v) for v in raw), source="llm")
    return result


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number  # NaN
