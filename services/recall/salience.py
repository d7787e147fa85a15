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
# Lexicons: word -> weight in [0, 1]
# ---------------------------------------------------------------------------

ZH_INTENSITY = {
    "崩溃": 0.9, "绝望": 0.95, "痛苦": 0.85, "恐惧": 0.8, "害怕": 0.7, "心碎": 0.9, "愤怒": 0.85, "生气": 0.7,
    "激动": 0.75, "狂喜": 0.9, "兴奋": 0.7, "开心": 0.6, "高兴": 0.6, "快乐": 0.6, "幸福": 0.7, "感动": 0.7,
    "焦虑": 0.6, "担心": 0.5, "紧张": 0.5, "迷茫": 0.55, "难过": 0.6, "伤心": 0.65, "压力": 0.45, "孤独": 0.6,
    "失落": 0.55, "沮丧": 0.6, "委屈": 0.6, "烦躁": 0.55, "烦": 0.45, "不安": 0.5, "失眠": 0.45, "想哭": 0.75,
    "哭": 0.7, "讨厌": 0.5, "恨": 0.8, "自卑": 0.6, "抑郁": 0.75, "累": 0.35, "无聊": 0.25, "呵呵": 0.3,
    "随便": 0.2, "郁闷": 0.5, "期待": 0.45, "感激": 0.6, "爱": 0.5, "喜欢": 0.3,
}
ZH_INTENSIFIERS = {"很": 1.15, "好": 1.1, "非常": 1.25, "特别": 1.25, "太": 1.3, "超级": 1.3, "极其": 1.35,
                   "真的": 1.15, "实在": 1.2, "超": 1.25, "十分": 1.2, "有点": 0.8, "有些": 0.85}
ZH_NEGATIONS = {"不", "没", "没有", "别", "不再", "并不", "不太"}

ZH_DISCLOSURE_PHRASES = {
    "从没告诉": 0.95, "从来没告诉": 0.95, "没跟别人说": 0.9, "没和别人说": 0.9, "只告诉你": 0.9, "秘密": 0.85,
    "说实话": 0.6, "老实说": 0.6, "坦白说": 0.65, "其实我": 0.4, "不敢说": 0.75, "羞于": 0.7,
}
ZH_DISCLOSURE_WORDS = {
    "害怕": 0.55, "失败": 0.5, "自卑": 0.7, "抑郁": 0.75, "焦虑": 0.5, "迷茫": 0.5, "孤独": 0.6, "分手": 0.6,
    "离婚": 0.7, "吵架": 0.5, "生病": 0.5, "住院": 0.6, "压力": 0.4, "哭": 0.55, "失眠": 0.45, "担心": 0.4,
    "过敏": 0.35, "岁": 0.25, "叫": 0.2, "专业": 0.25, "工作": 0.2, "博士": 0.3, "申请": 0.25, "养": 0.2,
    "家人": 0.35, "父母": 0.35, "妈妈": 0.3, "爸爸": 0.3, "男朋友": 0.4, "女朋友": 0.4, "喜欢": 0.2,
    "学生": 0.25, "梦想": 0.4, "愧疚": 0.7, "后悔": 0.6,
}
ZH_VALUE_WORDS = {
    "重要": 0.6, "意义": 0.65, "价值": 0.6, "信念": 0.8, "原则": 0.7, "家人": 0.6, "家庭": 0.6, "梦想": 0.6,
    "理想": 0.6, "自由": 0.65, "公平": 0.7, "诚实": 0.7, "责任": 0.6, "未来": 0.5, "人生": 0.6, "尊重": 0.65,
    "信仰": 0.8, "追求": 0.55, "看重": 0.6, "在乎": 0.55, "珍惜": 0.6, "失败": 0.4, "成功": 0.4, "学术": 0.45,
    "健康": 0.45, "朋友": 0.35, "善良": 0.65, "坚持": 0.5,
}
ZH_VALUE_PHRASES = {"对我来说": 0.3, "最重要": 0.3}

EN_INTENSITY = {
    "devastated": 0.95, "desperate": 0.9, "terrified": 0.9, "heartbroken": 0.9, "furious": 0.85, "miserable": 0.85,
    "scared": 0.7, "afraid": 0.65, "angry": 0.7, "thrilled": 0.8, "excited": 0.7, "happy": 0.6, "glad": 0.5,
    "love": 0.5, "anxious": 0.6, "anxiety": 0.6, "worried": 0.5, "worry": 0.5, "nervous": 0.5, "stressed": 0.5,
    "lost": 0.45, "sad": 0.6, "upset": 0.6, "lonely": 0.6, "depressed": 0.75, "overwhelmed": 0.65, "frustrated": 0.55,
    "hate": 0.6, "cry": 0.7, "crying": 0.7, "tired": 0.35, "bored": 0.25, "whatever": 0.25, "grateful": 0.6,
    "proud": 0.6, "ashamed": 0.7, "guilty": 0.65, "panic": 0.8, "hopeless": 0.85, "confused": 0.45,
}
EN_INTENSIFIERS = {"very": 1.2, "so": 1.2, "really": 1.15, "extremely": 1.35, "incredibly": 1.3, "totally": 1.2,
                   "super": 1.25, "quite": 1.05, "a bit": 0.8, "slightly": 0.75, "kind of": 0.85}
EN_NEGATIONS = {"not", "never", "no", "don't", "isn't", "wasn't", "aren't", "didn't", "hardly"}

EN_DISCLOSURE_PHRASES = {
    "never told anyone": 0.95, "never told anybody": 0.95, "haven't told anyone": 0.95, "a secret": 0.85,
    "between us": 0.8, "to be honest": 0.6, "honestly": 0.55, "i have to admit": 0.7, "i'm ashamed": 0.8,
    "nobody knows": 0.9, "no one knows": 0.9,
}
EN_DISCLOSURE_WORDS = {
    "afraid": 0.5, "scared": 0.5, "failure": 0.5, "fail": 0.45, "depressed": 0.75, "depression": 0.75,
    "anxious": 0.5, "anxiety": 0.5, "lonely": 0.6, "divorce": 0.7, "breakup": 0.6, "broke": 0.4, "sick": 0.45,
    "therapy": 0.7, "hospital": 0.55, "stressed": 0.4, "insecure": 0.65, "allergic": 0.35, "name": 0.2,
    "old": 0.15, "student": 0.25, "phd": 0.3, "parents": 0.35, "family": 0.35, "mother": 0.3, "father": 0.3,
    "girlfriend": 0.4, "boyfriend": 0.4, "cat": 0.2, "dog": 0.2, "guilty": 0.65, "regret": 0.6, "lost": 0.35,
}
EN_VALUE_WORDS = {
    "important": 0.6, "meaning": 0.65, "meaningful": 0.65, "values": 0.6, "value": 0.55, "believe": 0.6,
    "principle": 0.7, "principles": 0.7, "family": 0.6, "dream": 0.6, "dreams": 0.6, "freedom": 0.65,
    "fairness": 0.7, "honesty": 0.7, "responsibility": 0.6, "future": 0.5, "life": 0.45, "respect": 0.65,
    "faith": 0.8, "matters": 0.55, "care": 0.4, "failure": 0.4, "success": 0.4, "health": 0.45,
    "friends": 0.35, "integrity": 0.75, "purpose": 0.7,
}
EN_VALUE_PHRASES = {"to me": 0.2, "the most important": 0.3, "means a lot": 0.4}

FIRST_PERSON_ZH = re.compile(r"我")
OTHER_SUBJECT_ZH = re.compile(r"(?:他|她|它|你|您|大家|别人|有人|今天|天气)")
FIRST_PERSON_EN = re.compile(r"\b(?:i|i'm|i've|i'd|me|my|mine|myself)\b", re.I)


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
    if lang == "zh":
        intensity = _word_hits(tokens, ZH_INTENSITY, ZH_NEGATIONS, ZH_INTENSIFIERS)
        disclosure = _word_hits(tokens, ZH_DISCLOSURE_WORDS, set()) + _phrase_hits(text, ZH_DISCLOSURE_PHRASES)
        value = _word_hits(tokens, ZH_VALUE_WORDS, set()) + _phrase_hits(text, ZH_VALUE_PHRASES)
        exclaim = text.count("！") + text.count("!")
        # Chinese often drops the subject: a message is about oneself unless it names someone else.
        first_person = bool(FIRST_PERSON_ZH.search(text)) or not OTHER_SUBJECT_ZH.match(text.strip())
    else:
        lowered = " ".join(tokens)
        intensifiers = {k: v for k, v in EN_INTENSIFIERS.items() if " " not in k}
        intensity = _word_hits(tokens, EN_INTENSITY, EN_NEGATIONS, intensifiers)
        for phrase, factor in EN_INTENSIFIERS.items():
            if " " in phrase and phrase in lowered:
                intensity = [w * factor for w in intensity]
        disclosure = _word_hits(tokens, EN_DISCLOSURE_WORDS, set()) + _phrase_hits(text, EN_DISCLOSURE_PHRASES)
        value = _word_hits(tokens, EN_VALUE_WORDS, set()) + _phrase_hits(text, EN_VALUE_PHRASES)
        exclaim = text.count("!")
        first_person = bool(FIRST_PERSON_EN.search(text))
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
