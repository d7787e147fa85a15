"""Forgetting-curve recall for the L4 condition: pure maths, numpy only.

The curve, its consolidation update and the spacing gain follow Hou, Tamoto &
Miyashita, "My agent understands me better": Integrating Dynamic Human-like
Memory Recall and Consolidation in LLM-Based Agents (CHI EA 2024); the
salience terms (``g0`` and the probability bonus) are the study's extension
(SPEC §2).

Every function accepts plain floats or numpy arrays and broadcasts; given only
scalars it returns a float. Two translations sit in front of the formula and
are what calibration is about (docs/recall_calibration.md):

* ``RelevanceMapping`` maps the retriever's scores to ``r`` in [0, 1]. E5-style
  embedders give unrelated sentences cosines around 0.85, so raw cosine as
  ``r`` would make everything relevant. The default (``anchored``) makes ``r``
  an index on a false-recall budget, not a probability.
* ``elapsed_time`` turns real seconds into ``t`` in the configured unit
  (days, hours or turns, times a scale), honouring pilot mode's short days.

A third decision comes before both: which consolidated messages are recall
candidates at all (``CandidateRule``). A message that carries no content -
"好的，谢谢", "OK thanks", "do you remember me?" - is a near-paraphrase of every
other such message to an E5 embedder (cosine 0.92-0.94) and would be recalled
for small talk, so a message is a candidate only if it has a content word or a
high emotional salience.

``resolve_recall_params`` reads the effective parameters from the study
definition; nothing here imports Flask or the database (content words use the
jieba-based ``services.text.keywords``).
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from services.platform.mappings import deep_merge
from services.recall.relevance import LogisticRelevance, UnrelatedTail, anchored_index
from services.recall.retrieval import BM25_B, BM25_K1, FusionWeights
from services.text.keywords import tokenize

NORMALISER = 1.0 - math.exp(-1.0)
TIME_UNITS = ("days", "hours", "turns")
RELEVANCE_METHODS = ("raw", "linear", "logistic", "anchored")
DEFAULT_FALSE_RECALL_BUDGET = 0.02
DEFAULT_SALIENCE_WEIGHTS = {"intensity": 0.4, "disclosure": 0.4, "value": 0.2}
# A score the consolidation step could not produce counts as 0: missing evidence
# must never make a memory easier to recall than a neutral one.
MISSING_SCORE_DEFAULT = 0.0
# The spacing gain S(t) of the consolidation update takes days since the last recall (the seed's unit),
# independent of the decay's time unit and fitted scale (issue 27). Recorded with every reply's recall
# parameters (``RecallParams.spacing_unit``) so an audit can tell this update from the earlier one.
SPACING_UNIT = "days"
# Any positive length works: t for a given number of study days does not depend on it.
SECONDS_PER_DAY_FOR_ANCHOR = 86400.0



def _result(value: np.ndarray) -> float | np.ndarray:
    return float(value) if np.ndim(value) == 0 else value


# ---------------------------------------------------------------------------
# The formula
# ---------------------------------------------------------------------------


def recall_probability(r: ArrayLike, t: ArrayLike, g: ArrayLike) -> float | np.ndarray:
    """p = (1 − exp(−r·exp(−t/g))) / (1 − exp(−1)) (Hou et al., CHI EA 2024).

    ``r`` is relevance in [0, 1], ``t`` elapsed time (≥ 0) in the configured
    unit, ``g`` the consolidation coefficient (> 0). Inputs are clipped to
    their domain so the result always lies in [0, 1]."""
    r_ = np.clip(np.asarray(r, dtype=np.float64), 0.0, 1.0)
    t_ = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
    g_ = np.maximum(np.asarray(g, dtype=np.float64), 1e-9)
    p = -np.expm1(-r_ * np.exp(-t_ / g_)) / NORMALISER
    return _result(np.clip(p, 0.0, 1.0))


def final_probability(p: ArrayLike, salience: ArrayLike, bonus: float) -> float | np.ndarray:
    """Salience bonus on the retrieval path: p_final = min(1, p + bonus·e)."""
    value = np.asarray(p, dtype=np.float64) + bonus * np.asarray(salience, dtype=np.float64)
    return _result(np.clip(value, 0.0, 1.0))


def initial_g(salience: ArrayLike, g0_base: float = 1.0, g0_salience: float = 0.5) -> float | np.ndarray:
    """Consolidation coefficient at consolidation: g0 = g0_base + g0_salience·e."""
    return _result(g0_base + g0_salience * np.asarray(salience, dtype=np.float64))


def spacing_gain(t: ArrayLike) -> float | np.ndarray:
    """S(t) = (1 − e^{−t}) / (1 + e^{−t}), i.e. tanh(t/2): 0 at t = 0, → 1 for long gaps."""
    return _result(np.tanh(np.maximum(np.asarray(t, dtype=np.float64), 0.0) / 2.0))


def updated_g(g: ArrayLike, t: ArrayLike, salience: ArrayLike, g_update_salience: float = 0.5) -> float | np.ndarray:
    """g after a recall: g + S(t)·(1 + g_update_salience·e). Never smaller than g.

    ``t`` is in the seed's unit, ``SPACING_UNIT``: days since the last recall (not the decay's scaled
    time; ``score_candidates``' ``spacing_days``)."""
    gain = np.asarray(spacing_gain(t)) * (1.0 + g_update_salience * np.asarray(salience, dtype=np.float64))
    return _result(np.asarray(g, dtype=np.float64) + np.maximum(gain, 0.0))


def required_relevance(t: ArrayLike, g: ArrayLike, salience: ArrayLike, threshold: float,
                       bonus: float) -> float | np.ndarray:
    """The smallest r for which p_final reaches ``threshold`` at (t, g, e).

    Solving the curve for r gives r* = x*·exp(t/g) with
    x* = −ln(1 − (threshold − bonus·e)·(1 − e^{−1})); values above 1 mean the
    memory cannot be recalled however relevant it is."""
    needed_p = np.asarray(threshold, dtype=np.float64) - bonus * np.asarray(salience, dtype=np.float64)
    inside = np.clip(1.0 - needed_p * NORMALISER, 1e-12, None)
    x_star = np.maximum(-np.log(inside), 0.0)
    t_ = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
    g_ = np.maximum(np.asarray(g, dtype=np.float64), 1e-9)
    return _result(x_star * np.exp(t_ / g_))


# ---------------------------------------------------------------------------
# Emotional salience
# ---------------------------------------------------------------------------


def clamp_score(value: Any, missing: float = MISSING_SCORE_DEFAULT) -> float:
    """One salience score clamped to [0, 1]; None, NaN and non-numbers become ``missing``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return missing
    if math.isnan(number):
        return missing
    return min(1.0, max(0.0, number))


def emotional_salience(intensity: Any, disclosure: Any, value: Any,
                       weights: Mapping[str, float] | None = None,
                       missing: float = MISSING_SCORE_DEFAULT) -> float:
    """e = 0.4·I + 0.4·D + 0.2·V with each score clamped to [0, 1] (missing → ``missing``)."""
    w = {**DEFAULT_SALIENCE_WEIGHTS, **(weights or {})}
    return (w["intensity"] * clamp_score(intensity, missing)
            + w["disclosure"] * clamp_score(disclosure, missing)
            + w["value"] * clamp_score(value, missing))


def emotional_salience_array(intensity: ArrayLike, disclosure: ArrayLike, value: ArrayLike,
                             weights: Mapping[str, float] | None = None,
                             missing: float = MISSING_SCORE_DEFAULT) -> np.ndarray:
    """Vectorised ``emotional_salience``: NaN marks a missing score."""
    w = {**DEFAULT_SALIENCE_WEIGHTS, **(weights or {})}

    def clean(scores: ArrayLike) -> np.ndarray:
        arr = np.asarray(scores, dtype=np.float64)
        return np.clip(np.where(np.isnan(arr), missing, arr), 0.0, 1.0)

    return w["intensity"] * clean(intensity) + w["disclosure"] * clean(disclosure) + w["value"] * clean(value)


# ---------------------------------------------------------------------------
# Translating the embedder and the clock into r and t
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RelevanceMapping:
    """A candidate's scores → r ∈ [0, 1].

    ``raw``: r = cosine clipped to [0, 1] (the seed, literally).
    ``linear``: r = (cosine − floor) / (ceiling − floor), clipped, where the floor
    is the embedder's measured similarity of unrelated pairs and the ceiling a
    cosine that counts as fully relevant. Cosine levels differ by language (E5
    gives English pairs lower cosines than Chinese ones), so ``by_language`` may
    hold a (floor, ceiling) per query language.
    ``logistic``: r = P(relevant | the retriever's scores), a per-language logistic model
    (``services.recall.relevance``) fitted by ``scripts/calibrate_recall.py``; ``fitted_for``
    records the retrieval settings (fusion weights) its scores came from.
    ``anchored`` (issue 17): r is an index on a false-recall budget, not a probability. The score s
    is the logistic model's linear score; ``tails`` holds, per query language (``default`` for any
    other), the fitted upper tail of the development participants' *unrelated* candidates' s. The
    score above which a share ``false_recall_budget`` of them lies (the language's own budget where
    ``budget_by_language`` names one) lands exactly on ``anchor_r``, the
    curve's bar for a neutral memory (e = 0, g = g0_base) ``anchor_days`` study days old (T2's unlock
    offset); r rises smoothly through it with the tail's local scale at the anchor
    (``services.recall.relevance.anchored_index``).
    ``embedder_model`` names the model the bounds or fit were measured for: they mean nothing
    for another embedder."""

    method: str = "linear"
    floor: float = 0.0
    ceiling: float = 1.0
    by_language: dict[str, tuple[float, float]] = field(default_factory=dict)
    embedder_model: str | None = None
    model: LogisticRelevance | None = None
    fitted_for: dict[str, Any] | None = None
    tails: dict[str, UnrelatedTail] = field(default_factory=dict)
    false_recall_budget: float | None = None
    # per query language: that language's budget instead of ``false_recall_budget`` (study file:
    # ``false_recall_budget_by_language``); languages not named, and messages of no language, keep the default
    budget_by_language: dict[str, float] = field(default_factory=dict)
    anchor_days: float | None = None
    anchor_r: float | None = None  # resolved from the curve's parameters (resolve_recall_params)

    def measured_for(self, model: str) -> bool:
        """False when these bounds were calibrated for a different embedding model."""
        return self.method == "raw" or self.embedder_model is None or self.embedder_model == model

    def bounds(self, language: str | None = None) -> tuple[float, float]:
        return self.by_language.get(language or "", (self.floor, self.ceiling))

    def to_r(self, cosine: ArrayLike, language: str | None = None,
             scores: Mapping[str, ArrayLike] | None = None) -> float | np.ndarray:
        """r for candidates with these cosines; ``logistic`` also needs the retriever's ``scores``
        (``fused``, ``lexical_z``, ``dense_z``; the cosine is taken from ``cosine``)."""
        cos = np.asarray(cosine, dtype=np.float64)
        if self.method == "raw":
            return _result(np.clip(cos, 0.0, 1.0))
        if self.method in ("logistic", "anchored"):
            if self.model is None or scores is None:
                raise ValueError(f"{self.method} relevance needs its model and the retriever's scores")
            if self.method == "logistic":
                return _result(self.model.predict({**scores, "cosine": cos}, language))
            anchor = self.anchor_score(language)
            return _result(anchored_index(self.model.linear({**scores, "cosine": cos}, language), anchor,
                                          self.tail(language).local_scale(anchor), self.anchor_r))
        floor, ceiling = self.bounds(language)
        return _result(np.clip((cos - floor) / (ceiling - floor), 0.0, 1.0))

    def tail(self, language: str | None) -> UnrelatedTail:
        return self.tails.get(language or "", self.tails["default"])

    def budget(self, language: str | None = None) -> float | None:
        """The false-recall budget of messages in ``language``: its own, else ``false_recall_budget``."""
        return self.budget_by_language.get(language or "", self.false_recall_budget)

    def anchor_score(self, language: str | None = None) -> float:
        """The score at the (1 − budget) quantile of the language's fitted unrelated tail."""
        return self.tail(language).quantile(self.budget(language))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["by_language"] = {k: {"floor": f, "ceiling": c} for k, (f, c) in self.by_language.items()}
        data["model"] = self.model.to_dict() if self.model else None
        data["tails"] = {k: tail.to_dict() for k, tail in self.tails.items()}
        return data


def relevance(cosine: ArrayLike, floor: float, ceiling: float) -> float | np.ndarray:
    """Linear rescale of raw cosine between ``floor`` (→ 0) and ``ceiling`` (→ 1), clipped."""
    return RelevanceMapping("linear", floor, ceiling).to_r(cosine)


def study_days(elapsed_seconds: ArrayLike, day_seconds: float) -> float | np.ndarray:
    """Elapsed study days: real seconds / day_seconds (86400 normally; less in pilot mode)."""
    if day_seconds <= 0:
        raise ValueError("day_seconds must be positive")
    return _result(np.maximum(np.asarray(elapsed_seconds, dtype=np.float64), 0.0) / day_seconds)


def elapsed_time(elapsed_seconds: ArrayLike, *, unit: str, time_scale: float, day_seconds: float,
                 turns: ArrayLike | None = None) -> float | np.ndarray:
    """``t`` for the curve: elapsed study time in ``unit`` times ``time_scale``.

    ``days`` and ``hours`` count study time (so pilot mode's short days age memories
    as fast as real days would); ``turns`` counts the participant's messages since
    the reference time, which the caller passes as ``turns``."""
    if unit == "days":
        base = np.asarray(study_days(elapsed_seconds, day_seconds))
    elif unit == "hours":
        base = np.asarray(study_days(elapsed_seconds, day_seconds)) * 24.0
    elif unit == "turns":
        if turns is None:
            raise ValueError("time unit 'turns' needs the number of turns elapsed")
        base = np.maximum(np.asarray(turns, dtype=np.float64), 0.0)
    else:
        raise ValueError(f"unknown time unit {unit!r}; use one of {TIME_UNITS}")
    return _result(base * time_scale)


# ---------------------------------------------------------------------------
# Which consolidated messages are recall candidates
# ---------------------------------------------------------------------------

# Words that manage the conversation rather than say anything about the person: agreement and
# acknowledgement, laughter, thanks and apologies, greetings and farewells, talk about the chat
# itself and about remembering. services.text.keywords already drops function words; a message whose
# remaining words all fall in these classes carries no content to remember. Set phrases go first,
# as whole phrases ("no worries" is not a worry, "没问题" not a problem).
CONVERSATIONAL_PHRASES = re.compile(
    r"没问题|没关系|不用谢|有道理|说得对|好主意|试试看?|下次见|回头见|明天见|"
    # leave-taking: "我先去忙了", "先这样", "回头再聊"
    r"我?先(?:去|走|撤|下)?(?:准备|忙|睡觉?|休息)?(?:了|啦)|先(?:这样|到这)|(?:回头|改天|下次|明天)再?聊|"
    # "有缘再聊", "祝你一切都好", "那就这样啦", "不唠了" (seventh round)
    r"有缘再(?:聊|见)|祝你?一切(?:都)?(?:好|顺利)|那就(?:这样|这)(?:吧|啦|了)?|不唠了|爱了爱了|"
    r"\b(?:no (?:worries|problem)|not at all|never mind|catch you(?: later)?|"
    r"see you(?: later| soon| tomorrow| next time)?|take care|give it a (?:try|go|shot)|makes sense|fair enough|"
    r"okie dokie|sounds (?:good|like a plan)|will do|thanks a (?:million|bunch|lot)|take it easy|mind yourself|"
    # regional and texting thanks and leave-takings (seventh round): "ka pai", "sweet as", "that's me done"
    r"ka pai|ka kite(?: an[oō])?|sweet as|no bother|bye for now|that'?s (?:me|all|it)(?: done| for (?:now|today))?|"
    # leave-taking: "I'll go and get ready now", "gotta run", "talk later"
    r"(?:I'll|I will|I'm going to|I have to|I need to|I must|I should|gotta|got to|time to) "
    r"(?:go|get going|head off|head out|run|log off)(?: and get ready)?(?: now)?|"
    r"talk (?:to you )?(?:later|soon|tomorrow))\b",
    re.IGNORECASE)
CONVERSATIONAL_WORDS_ZH = frozenset("""
嗯嗯 嗯哼 哦哦 噢噢 好啊 好呀 好吧 好滴 好嘞 好啦 好哒 行 行吧 可以 收到 明白 明白了 了解 懂 懂了 知道 知道了
对 对啊 对呀 对对 是啊 是呀 是的 确实 没错 原来 如此 原来如此 不错 挺好 还行 嘞 哼 哒 呐 咯 喽 哟 嘛
哈 哈哈 哈哈哈 哈哈哈哈 哈哈哈哈哈 呵呵 嘿嘿 嘻嘻 呜 呜呜 呜呜呜
谢 谢谢 谢啦 多谢 感谢 辛苦 辛苦了 辛苦啦 不客气 客气 抱歉 不好意思 麻烦
你好 您好 嗨 哈喽 早 早上好 中午好 下午好 晚上好 晚安 再见 拜拜 回见 回头 下次 改天 好久不见 在吗 在不在 见
聊 聊天 聊到 聊聊 先聊 再聊 陪 陪伴 陪我 说说 听 听我说 建议 先 这样 那样 就 这 那 人 事 事情 之前 以前 哪些
找 问题 我会 帮助 意思 道歉 回答 那好 那先 下回 太好了 太棒了 棒
多 这么多 记下 记下了 记住 记住了 这段时间 段时间
中 中中 嗯呐 唠叨 唠 有缘 哦
""".split())
CONVERSATIONAL_WORDS_EN = frozenset("""
sure okay ok alright right fine cool nice great good perfect yep yup yeah yes no nope true fair enough gotcha noted
indeed exactly absolutely totally definitely agreed deal sound sounds sense point interesting wow awesome idea
haha hahaha ha lol hehe hmm mm mm-hmm uh um ah oh mate
brilliant lovely amazing wonderful excellent fantastic grand sweet brill ace super splendid
helpful useful handy anyway anyhow ta
thanks thank cheer cheers appreciated appreciate welcome sorry
hi hello hey again bye goodbye later soon night morning evening see ya care take catch
chat chatting chatted talk talking talked listening listen advice try give
time day week long next last kind person three four five
obliged heaps heap thx thanx ty tysm ya k kk legend righto peace pleasure understood kindly aye fun honey cya
""".split())


@lru_cache(maxsize=65536)
def _content_words(text: str) -> tuple[str, ...]:
    return tuple(w for w in tokenize(CONVERSATIONAL_PHRASES.sub(" ", text))
                 if w not in CONVERSATIONAL_WORDS_ZH and w.lower() not in CONVERSATIONAL_WORDS_EN)


def forget_texts() -> None:
    """Empty the content-word caches, whose keys are message texts (after an erasure, or when a
    process drops participants it no longer serves)."""
    _content_words.cache_clear()
    _memory_words.cache_clear()
    _cue.cache_clear()


def content_words(text: str) -> list[str]:
    """The words of ``text`` that say something: ``services.text.keywords.tokenize`` (stop words removed)
    minus conversational phrases and words. Empty for "好的，谢谢！" or "Do you remember me?"."""
    return list(_content_words(text or ""))


# A question asking the assistant to remember ("你还记得我说过我大学学的什么专业吗？", "Do you remember
# which ingredient I can't have?") says nothing new about the person: what it asks about is in an
# earlier message, or was never said. Stored, its frame makes it a near-paraphrase of every other such
# question, so a later one recalled an earlier one (the seventh round's false recalls). Such a clause is
# not memory content; the clauses around it still are ("你还记得不 现在还是肿": 肿 counts).
# clauses end after a mark (which they keep), at a run of spaces, or at a space between Chinese characters
_CLAUSES = re.compile(r"(?<=[。！？!?；;\n，,、~～])|\s{2,}|(?<=[\u4e00-\u9fff])\s+(?=[\u4e00-\u9fff])")
_REMEMBER_ZH = re.compile(r"记得|记不记得|记住了?(?:吗|没|不)|忘了?(?:吗|没)|还知道")
_QUESTION_ZH = re.compile(r"(?:吗|么|嘛|不|没|没有|呢)[呀啊呢吧]?\s*[？?]?\s*$|"
                          r"什么|啥|哪|谁|几|多少|怎么|为什么|是不是|有没有|[？?]")
# the English frames, shared by the question test below and ``recall_cue``'s frame words
_ASK_EN = r"\b(?:do|did|can|could|would|will|d'?)\s*(?:you|ya|u)\s+(?:still\s+|even\s+)?(?:remember|recall|know)\b"
_ASKED_EN = r"(?:what|which|who|where|when|why|how|if|whether|my|me|that|the)\b"
_TOLD_EN = r"\bwhat\s+(?:did|have)\s+i\s+(?:tell|told|say|said|mention|mentioned)\b"
_DID_I_EN = r"\bdid\s+i\s+(?:ever\s+)?(?:tell|mention)\b"
_REMEMBER_EN = re.compile(rf"{_ASK_EN}|\b(?:remember|recall)\s+{_ASKED_EN}|{_TOLD_EN}|{_DID_I_EN}", re.IGNORECASE)


def is_recall_question(clause: str) -> bool:
    """Whether one clause asks the assistant to remember something (and does nothing else)."""
    clause = clause.strip()
    if not clause:
        return False
    if _REMEMBER_ZH.search(clause):
        return bool(_QUESTION_ZH.search(clause))
    return bool(_REMEMBER_EN.search(clause)) and ("?" in clause
                                                   or bool(re.match(r"(?i)\s*(?:do|did|can|could|would|will)\b",
                                                                    clause)))


@lru_cache(maxsize=65536)
def _memory_words(text: str) -> tuple[str, ...]:
    parts = [part for part in _CLAUSES.split(text) if part.strip()]
    kept = [part for part in parts if not is_recall_question(part)]
    if len(kept) == len(parts):
        return _content_words(text)
    return tuple(w for part in kept for w in _content_words(part))


def memory_content_words(text: str) -> list[str]:
    """``content_words`` of a stored message without its clauses that ask the assistant to remember: what
    the message says about the person. Empty for "你还记得我老婆在哪上班吗？"."""
    return list(_memory_words(text or ""))


# The words of a clause that only frame it as a question asking to remember: "你还记得…吗", "记不记得",
# "Do you remember …?", "What did I tell you about …". ``recall_cue`` takes them out of a new message.
_FRAME_ZH = re.compile(r"(?:你|您)?(?:还|可|都)?(?:记不记得|还记得|记得|记住了?)(?:不|吗|没)?")
_FRAME_END_ZH = re.compile(r"(?:吗|么|嘛|不|没|没有)[呀啊呢吧]?(?=\s*[？?]?\s*$)")
_FRAME_EN = re.compile(rf"{_ASK_EN}|\b(?:remember|recall)\b(?=\s+{_ASKED_EN})|"
                       rf"(?:{_TOLD_EN}|{_DID_I_EN})\s+(?:you\s+)?(?:about\s+)?", re.IGNORECASE)


def _uncued(clause: str) -> str:
    if not is_recall_question(clause):
        return clause
    if _REMEMBER_ZH.search(clause):
        return _FRAME_END_ZH.sub("", _FRAME_ZH.sub("", clause))
    return _FRAME_EN.sub("", clause)


@lru_cache(maxsize=65536)
def _cue(text: str) -> str:
    parts = _CLAUSES.split(text)
    cue = "".join(_uncued(part) for part in parts)
    return cue if cue != text and _content_words(cue) else text


def recall_cue(text: str) -> str:
    """The text a new message recalls with: the message without the words that only frame a clause as a
    question asking to remember ("你还记得我家那个小胖子叫啥吗？" cues with "我家那个小胖子叫啥？").

    The frame says nothing about what is asked, but it is the same in every such question, so embedded
    whole, one such question lies close to any other stored one (the false recalls of the seventh round's
    development participants, docs/recall_calibration.md, eighth round). The message itself is stored
    and answered unchanged; a message left without content words by this cues with its whole text."""
    return _cue(text or "")


@dataclass(frozen=True)
class CandidateRule:
    """Which consolidated user messages may be recalled at all, and which new messages recall.

    A stored message is a candidate when it has at least ``min_content_words`` content words
    (``content_words``; with ``recall_questions`` false, not counting the clauses that ask the
    assistant to remember: ``memory_content_words``) or, whatever its words, an emotional salience of
    at least ``min_salience`` (None: salience alone never admits). ``min_content_words = 0`` admits
    every consolidated message, as the seed's wording does. A new message that asks to remember
    still recalls (``admits_query`` counts all its words)."""

    min_content_words: int = 1
    min_salience: float | None = 0.5
    recall_questions: bool = False  # whether a question asking to remember is itself a memory

    def memory_word_count(self, text: str) -> int:
        """The content words a stored message counts with under this rule."""
        return len(content_words(text) if self.recall_questions else memory_content_words(text))

    def admits(self, content_word_count: ArrayLike, salience: ArrayLike) -> bool | np.ndarray:
        words = np.asarray(content_word_count)
        admitted = words >= self.min_content_words
        if self.min_salience is not None:
            admitted = admitted | (np.asarray(salience, dtype=np.float64) >= self.min_salience)
        return bool(admitted) if np.ndim(admitted) == 0 else admitted

    def admits_text(self, text: str, salience: float | None) -> bool:
        """The rule for one stored message (a missing salience counts as 0)."""
        return bool(self.admits(self.memory_word_count(text), clamp_score(salience)))

    def admits_query(self, text: str) -> bool:
        """Whether a new message may recall anything: it needs content words too (its salience is not
        known before consolidation). "好的，谢谢" is about nothing, so nothing is relevant to it."""
        return len(content_words(text)) >= self.min_content_words

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def candidate_rule_from_config(raw: Mapping[str, Any] | None) -> CandidateRule:
    """The rule from ``memory.recall.candidates`` (or from a reply's recorded ``recall_params.candidates``);
    None: the documented default."""
    if raw is None:
        return CandidateRule()
    rule = CandidateRule(min_content_words=int(raw.get("min_content_words", 1)),
                         min_salience=None if raw.get("min_salience") is None else float(raw["min_salience"]),
                         recall_questions=bool(raw.get("recall_questions", False)))
    if rule.min_content_words < 0:
        raise ValueError("recall candidates.min_content_words must be 0 or more")
    if rule.min_salience is not None and not 0.0 <= rule.min_salience <= 1.0:
        raise ValueError("recall candidates.min_salience must lie in [0, 1] (or be null)")
    return rule


# ---------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RecallParams:
    preset: str
    top_k: int
    threshold: float
    salience_bonus: float
    g0_base: float
    g0_salience: float
    g_update_salience: float
    time_unit: str
    time_scale: float
    relevance: RelevanceMapping
    candidates: CandidateRule = field(default_factory=CandidateRule)
    spacing_unit: str = SPACING_UNIT  # the spacing gain's t: study days since the last recall, never scaled

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["relevance"] = self.relevance.to_dict()
        data["candidates"] = self.candidates.to_dict()
        return data


_PARAM_KEYS = ("top_k", "threshold", "salience_bonus", "g0_base", "g0_salience", "g_update_salience",
               "time_unit", "time_scale", "relevance")
_OPTIONAL_KEYS = ("candidates",)  # absent: the documented default CandidateRule


def _relevance_from_config(raw: Mapping[str, Any]) -> RelevanceMapping:
    method = raw.get("method", "linear")
    if method not in RELEVANCE_METHODS:
        raise ValueError(f"recall relevance method {method!r} must be one of {RELEVANCE_METHODS}")
    if method == "raw":
        return RelevanceMapping("raw")
    if method in ("logistic", "anchored"):
        if not isinstance(raw.get("model"), Mapping):
            raise ValueError(f"recall relevance method {method!r} needs a fitted 'model' "
                             "(scripts/calibrate_recall.py --fit --write-preset)")
        mapping = RelevanceMapping(method, model=LogisticRelevance.from_dict(raw["model"]),
                                   embedder_model=raw.get("embedder_model"), fitted_for=raw.get("fitted_for"))
        return mapping if method == "logistic" else _anchored_from_config(mapping, raw)
    floor, ceiling = float(raw["floor"]), float(raw["ceiling"])
    by_language: dict[str, tuple[float, float]] = {}
    for lang, bounds in (raw.get("by_language") or {}).items():
        by_language[lang] = (float(bounds["floor"]), float(bounds["ceiling"]))
    for name, (f, c) in {"default": (floor, ceiling), **by_language}.items():
        if not -1.0 <= f < c <= 1.0:
            raise ValueError(f"recall relevance bounds for {name}: need -1 ≤ floor < ceiling ≤ 1, got {f}, {c}")
    return RelevanceMapping("linear", floor, ceiling, by_language, raw.get("embedder_model"))


def _check_budget(name: str, budget: float, share: float, what: str) -> None:
    """A budget is a quantile of a fitted tail, which covers only its top ``share`` of the unrelated scores."""
    if not math.isfinite(budget) or not 0.0 < budget < share:
        raise ValueError(f"recall relevance {name} must lie in (0, {share:g}) ({what}), got {budget}")


def _anchored_from_config(mapping: RelevanceMapping, raw: Mapping[str, Any]) -> RelevanceMapping:
    tails = raw.get("tails")
    if not isinstance(tails, Mapping) or "default" not in tails:
        raise ValueError("recall relevance method 'anchored' needs fitted 'tails' with a 'default' "
                         "(scripts/calibrate_recall.py --fit --write-preset)")
    try:
        budget = float(raw.get("false_recall_budget", DEFAULT_FALSE_RECALL_BUDGET))
        anchor_days = float(raw["anchor_days"])
        fitted = {lang: UnrelatedTail.from_dict(tail) for lang, tail in tails.items()}
    except (KeyError, TypeError) as exc:
        raise ValueError(f"recall relevance 'anchored' needs anchor_days and tails of threshold, share and scale "
                         f"(and optionally shape) ({exc})") from exc
    _check_budget("false_recall_budget", budget, min(t.share for t in fitted.values()), "the fitted tails' share")
    by_language = raw.get("false_recall_budget_by_language") or {}
    if not isinstance(by_language, Mapping):
        raise ValueError("recall relevance false_recall_budget_by_language maps a language to its budget")
    try:
        by_language = {str(lang): float(value) for lang, value in by_language.items()}
    except (TypeError, ValueError) as exc:
        raise ValueError(f"recall relevance false_recall_budget_by_language: a budget is a number ({exc})") from exc
    for lang, value in by_language.items():
        _check_budget(f"false_recall_budget_by_language[{lang!r}]", value, fitted.get(lang, fitted["default"]).share,
                      "its fitted tail's share")
    if not anchor_days >= 0.0:
        raise ValueError(f"recall relevance anchor_days must be 0 or more, got {anchor_days}")
    return replace(mapping, tails=fitted, false_recall_budget=budget, budget_by_language=by_language,
                   anchor_days=anchor_days)


def resolve_anchor(params: RecallParams) -> RecallParams:
    """An anchored relevance's bar: the r a neutral memory (e = 0, g = g0_base) needs at anchor_days."""
    relevance = params.relevance
    if relevance.method != "anchored":
        return params
    t = elapsed_time(relevance.anchor_days * SECONDS_PER_DAY_FOR_ANCHOR, unit=params.time_unit,
                     time_scale=params.time_scale, day_seconds=SECONDS_PER_DAY_FOR_ANCHOR,
                     turns=relevance.anchor_days)
    bar = float(required_relevance(t, params.g0_base, 0.0, params.threshold, params.salience_bonus))
    if not 0.0 < bar < 1.0:
        raise ValueError(f"recall relevance 'anchored': a neutral memory {relevance.anchor_days:g} days old needs "
                         f"r = {bar:.3f} under this time unit; the anchor needs a bar in (0, 1)")
    return replace(params, relevance=replace(relevance, anchor_r=bar))


def embedder_warning(recall: RecallParams, embedder_model: str) -> str | None:
    """Why ``r`` means nothing with this embedder, or None when the active preset was fitted for it."""
    if recall.relevance.measured_for(embedder_model):
        return None
    return (f"the configured embedder is {embedder_model}, but the active recall preset {recall.preset!r} was "
            f"fitted for {recall.relevance.embedder_model}: its relevance r means nothing for this embedder; "
            "run scripts/calibrate_recall.py --fit --write-preset")


def resolve_recall_params(config: Mapping[str, Any], preset: str | None = None,
                          overrides: Mapping[str, Any] | None = None) -> RecallParams:
    """The effective recall parameters of a study's ``memory.recall`` section (``config``).

    Layers, later ones winning: the constants given directly under
    ``memory.recall`` (the seed's), the chosen preset (``memory.recall.preset``
    unless ``preset`` is passed), ``memory.recall.overrides``, then ``overrides``.
    The app resolves them once, when the study is loaded (``Study.memory.recall``)."""
    presets = config.get("presets") or {}
    name = preset or config.get("preset") or "anchored"
    if name not in presets:
        raise ValueError(f"unknown recall preset {name!r}; known: {', '.join(sorted(presets)) or 'none'}")
    values = {k: v for k, v in config.items() if k in _PARAM_KEYS + _OPTIONAL_KEYS}
    values = deep_merge(values, presets[name])
    values = deep_merge(values, config.get("overrides") or {})
    values = deep_merge(values, overrides or {})
    missing = [k for k in _PARAM_KEYS if k not in values]
    if missing:
        raise ValueError(f"recall preset {name!r} leaves {', '.join(missing)} unset")
    params = RecallParams(
        preset=name,
        top_k=int(values["top_k"]),
        threshold=float(values["threshold"]),
        salience_bonus=float(values["salience_bonus"]),
        g0_base=float(values["g0_base"]),
        g0_salience=float(values["g0_salience"]),
        g_update_salience=float(values["g_update_salience"]),
        time_unit=str(values["time_unit"]),
        time_scale=float(values["time_scale"]),
        relevance=_relevance_from_config(values["relevance"]),
        candidates=candidate_rule_from_config(values.get("candidates")),
    )
    if params.top_k < 1:
        raise ValueError("recall top_k must be at least 1")
    if not 0.0 < params.threshold <= 1.0:
        raise ValueError("recall threshold must lie in (0, 1]")
    if params.time_unit not in TIME_UNITS:
        raise ValueError(f"recall time_unit {params.time_unit!r} must be one of {TIME_UNITS}")
    if params.time_scale <= 0:
        raise ValueError("recall time_scale must be positive")
    if params.g0_base <= 0 or min(params.salience_bonus, params.g0_salience, params.g_update_salience) < 0:
        raise ValueError("recall g0_base must be positive and the salience factors non-negative")
    return resolve_anchor(params)


@dataclass(frozen=True)
class RetrievalSettings:
    """How L4 (and S1) find candidates: the hybrid retriever of ``services.recall.retrieval``.

    ``fusion``: weights of the z-scored BM25 and cosine scores; ``k1``/``b``: BM25's;
    ``neighbour_turns``: earlier exchanges of the same task indexed lexically with each memory."""

    fusion: FusionWeights = field(default_factory=FusionWeights)
    k1: float = BM25_K1
    b: float = BM25_B
    neighbour_turns: int = 2

    def to_dict(self) -> dict[str, Any]:
        return {"fusion": {"lexical": self.fusion.lexical, "dense": self.fusion.dense}, "k1": self.k1,
                "b": self.b, "neighbour_turns": self.neighbour_turns}


def retrieval_from_config(raw: Mapping[str, Any] | None) -> RetrievalSettings:
    """The retrieval settings of a study's ``memory.retrieval`` section (defaults where absent)."""
    raw = raw or {}
    fusion = raw.get("fusion") or {}
    settings = RetrievalSettings(
        fusion=FusionWeights(lexical=float(fusion.get("lexical", 1.5)), dense=float(fusion.get("dense", 1.0))),
        k1=float(raw.get("k1", BM25_K1)), b=float(raw.get("b", BM25_B)),
        neighbour_turns=int(raw.get("neighbour_turns", 2)))
    if settings.fusion.lexical < 0 or settings.fusion.dense < 0 or not (settings.fusion.lexical
                                                                        or settings.fusion.dense):
        raise ValueError("memory.retrieval.fusion weights must be non-negative and not both 0")
    if settings.k1 < 0 or not 0.0 <= settings.b <= 1.0:
        raise ValueError("memory.retrieval needs k1 >= 0 and 0 <= b <= 1")
    if settings.neighbour_turns < 0:
        raise ValueError("memory.retrieval.neighbour_turns must be 0 or more")
    return settings


# ---------------------------------------------------------------------------
# The scoring core shared by the VectorStore, the calibration and the benchmark
# ---------------------------------------------------------------------------


def top_k_indices(cosines: np.ndarray, k: int, exclude: np.ndarray | None = None) -> np.ndarray:
    """Indices of the ``k`` highest cosines, best first; ties go to the lower index (the older memory).

    ``exclude`` is a boolean mask of rows that may not be candidates."""
    scores = np.asarray(cosines, dtype=np.float64).copy()
    if exclude is not None:
        scores[np.asarray(exclude, dtype=bool)] = -np.inf
    allowed = int(np.isfinite(scores).sum())
    k = min(k, allowed)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < scores.size:
        # The k-th best score may be shared by rows outside the partition; keep all ties, then order.
        kth = np.partition(scores, scores.size - k)[scores.size - k]
        pool = np.flatnonzero(scores >= kth)
    else:
        pool = np.flatnonzero(np.isfinite(scores))
    order = np.lexsort((pool, -scores[pool]))
    return pool[order][:k]


@dataclass
class RecallScores:
    """Per-candidate results of one recall, aligned with the candidate order."""

    r: np.ndarray
    p: np.ndarray
    p_final: np.ndarray
    recalled: np.ndarray
    g_after: np.ndarray


def score_candidates(cosine: ArrayLike, t: ArrayLike, g: ArrayLike, salience: ArrayLike,
                     params: RecallParams, language: str | None = None,
                     scores: Mapping[str, ArrayLike] | None = None, *,
                     spacing_days: ArrayLike) -> RecallScores:
    """r, p, p_final, the recall decision and the updated g for each candidate. ``scores``: the
    retriever's per-candidate scores, which a ``logistic`` relevance model reads.

    ``t`` is the curve's elapsed time (the configured unit times ``time_scale``); ``spacing_days`` the
    study days since each memory's last recall (or consolidation), the spacing gain's own argument
    (``SPACING_UNIT``): S(t) is the seed's, in days, whatever scale the decay was fitted on (issue 27).
    Passing the scaled ``t`` there instead turned consolidation off (a recall at T2 raised g by 0.02, not
    0.76), so the argument is required."""
    cos = np.atleast_1d(np.asarray(cosine, dtype=np.float64))
    t_ = np.broadcast_to(np.asarray(t, dtype=np.float64), cos.shape)
    spacing = np.broadcast_to(np.asarray(spacing_days, dtype=np.float64), cos.shape)
    g_ = np.broadcast_to(np.asarray(g, dtype=np.float64), cos.shape)
    e = np.broadcast_to(np.asarray(salience, dtype=np.float64), cos.shape)
    r = np.atleast_1d(np.asarray(params.relevance.to_r(cos, language, scores), dtype=np.float64))
    p = np.atleast_1d(np.asarray(recall_probability(r, t_, g_)))
    p_final = np.atleast_1d(np.asarray(final_probability(p, e, params.salience_bonus)))
    recalled = p_final >= params.threshold
    g_after = np.where(recalled, np.asarray(updated_g(g_, spacing, e, params.g_update_salience)), g_)
    return RecallScores(r=r, p=p, p_final=p_final, recalled=recalled, g_after=np.asarray(g_after, dtype=np.float64))
