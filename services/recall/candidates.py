"""Which consolidated messages are recall candidates (``CandidateRule``), and what a new message recalls with.

A message that carries no content - "好的，谢谢", "OK thanks", "do you remember me?" - is a
near-paraphrase of every other such message to an E5 embedder (cosine 0.92-0.94) and would be recalled
for small talk, so a message is a candidate only if it has a content word or a high emotional salience.
Content words use the jieba-based ``services.text.keywords``; nothing here imports Flask or the database.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from services.recall.formulas import clamp_score
from services.text.keywords import tokenize

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
