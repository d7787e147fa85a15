"""Keyword extraction for Chinese and English, and keyword overlap.

Used by S1's fuzzy recall (the keyword-Jaccard part of the score) and by the
offline rule-based S1/R1 updaters. Chinese is segmented with jieba (whitespace
splitting would leave a whole clause as one "word"); English is split on word
characters, lower-cased and lightly singularised. Stop words - function words,
pronouns, particles, filler verbs and words about remembering itself ("记得",
"remember") - are dropped, so two texts overlap on what they are about rather
than on "我" or "the".
"""
from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Iterable

import jieba

from services.text.languages import CJK_CHAR

jieba.setLogLevel(logging.WARNING)
_jieba_lock = threading.Lock()
_jieba_ready = False

ZH_STOP_WORDS = frozenset("""
的 了 着 过 地 得 之 与 及 和 跟 同 并 而 且 或 或者 还是 以及 但 但是 可是 不过 然而 所以 因此 因为 由于 如果 要是
虽然 即使 然后 而且 并且 于是 那么 这样 那样 这么 那么 怎么样 怎样 这个 那个 这些 那些 这里 那里 这儿 那儿 哪 哪里 哪个
什么 怎么 怎么办 为什么 为何 如何 多少 几 谁 吗 呢 吧 啊 呀 哦 哈 嗯 哎 嘛 啦 呗 哇 噢 喔 么 之类 等等 等
我 你 您 他 她 它 我们 你们 他们 她们 它们 咱们 大家 自己 别人 人家 我的 你的 他的 她的 本人
是 在 有 没 没有 不 也 都 就 才 又 再 还 很 太 挺 最 更 非常 特别 比较 真的 真 就是 只是 已经 一直 一下 一些 一点 一点儿
一个 一种 一样 这种 那种 个 些 把 被 给 让 叫 对 向 从 到 往 于 为 为了 关于 对于 比 像 除了 按照 通过 被 由 以 用
会 能 可以 可能 应该 要 想 觉得 感觉 知道 认为 说 讲 看 看看 去 来 做 弄 搞 上 下 里 中 内 外 前 后 时候 时 的话
今天 现在 其实 当然 好像 一般 还有 总是 经常 有点 有些 有的 一定 可 又 也许 大概 或许 好 好的 对的 是的 不是 没事
谢谢 你好 您好 嗨 哈哈 呵呵 嘿嘿 请问 请 一起 而已 罢了 起来 出来 下去 过来 回来 一下子 所有 每 各 某 该 此 其
一只 一条 一位 一次 一件 一本 一段 一份 帮 帮忙 不想 不要 不用 记得 还记得 记住 想起 忘记 忘了
""".split())

EN_STOP_WORDS = frozenset("""
a about above after again against all am an and any are aren't as at be because been before being below between both
but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each few for from further
had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him himself his how how's i
i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't my myself no nor not of off on
once only or other ought our ours ourselves out over own same shan't she she'd she'll she's should shouldn't so some
such than that that's the their theirs them themselves then there there's these they they'd they'll they're they've
this those through to too under until up very was wasn't we we'd we'll we're we've were weren't what what's when
when's where where's which while who who's whom why why's with won't would wouldn't you you'd you'll you're you've
your yours yourself yourselves also just really quite get got getting go going gone went make made thing things
something anything everything yes yeah ok okay oh hi hello hey thanks thank please well like know think want
would like maybe lot lots much many one two still even ever every back now today tell told say said let us will
remember remembered recall forget forgot help
""".split())

_TOKEN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+|[A-Za-z][A-Za-z'’\-]*|\d+(?:\.\d+)?")
_PRONOUN_HEADS = "我你您他她它"


def _ensure_jieba() -> None:
    # jieba builds its prefix dictionary lazily and not thread-safely; do it once, under a lock.
    global _jieba_ready
    if not _jieba_ready:
        with _jieba_lock:
            if not _jieba_ready:
                jieba.initialize()
                _jieba_ready = True


# Not cached in the platform: a cache of runs would keep pieces of participants' words in the process after an
# erasure (the recall index's cache drops a participant's texts after 30 idle minutes, services/memory/hybrid.py).
# The test process memoises it (tests/conftest.py), where the same runs come back in test after test.
def _segment_chinese(run: str) -> tuple[str, ...]:
    _ensure_jieba()
    words: list[str] = []
    for word in jieba.lcut(run):
        # jieba's HMM glues a pronoun to an unknown verb ("我养" in "我养了一只猫"); split it off
        # when the pair is not a dictionary word, so the pronoun can be dropped as a stop word.
        if len(word) > 1 and word[0] in _PRONOUN_HEADS and word not in jieba.dt.FREQ:
            words.extend([word[0], word[1:]])
        else:
            words.append(word)
    return tuple(words)


def _normalise_english(word: str) -> str:
    word = word.lower().replace("’", "'").strip("'-")
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Content words of ``text`` in order, stop words and punctuation removed (may repeat)."""
    words: list[str] = []
    for run in _TOKEN.findall(text or ""):
        if CJK_CHAR.match(run):
            words.extend(w for w in _segment_chinese(run) if w not in ZH_STOP_WORDS and w.strip())
        elif run[0].isdigit():
            if len(run) > 1:  # a lone digit says nothing; "3000" or "2.5" might
                words.append(run)
        else:
            raw = run.lower().replace("’", "'")
            word = _normalise_english(run)
            if raw not in EN_STOP_WORDS and word not in EN_STOP_WORDS and len(word) > 1:
                words.append(word)
    return words


def extract_keywords(text: str, limit: int | None = None) -> list[str]:
    """Distinct keywords, most frequent first (ties: first occurrence first)."""
    counts = Counter(tokenize(text))
    ranked = sorted(counts, key=lambda w: -counts[w])  # sorted() is stable, so ties keep text order
    return ranked[:limit] if limit else ranked


def keyword_set(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


def _is_chinese(word: str) -> bool:
    return bool(CJK_CHAR.match(word))


def _related(a: str, b: str) -> bool:
    # Inclusion counts as a match for Chinese words (猫 / 橘猫, 申请 / 博士申请), where segmentation
    # granularity varies; for English, substring matching would pair "cat" with "category".
    if a == b:
        return True
    return _is_chinese(a) and _is_chinese(b) and (a in b or b in a)


def shared_keywords(a: Iterable[str], b: Iterable[str]) -> int:
    """How many keywords two sets share, a Chinese word inside another counting as shared.

    The smaller of (words of a matched in b, words of b matched in a), so it never exceeds either set."""
    set_a, set_b = set(a), set(b)
    matched_a = sum(1 for x in set_a if any(_related(x, y) for y in set_b))
    matched_b = sum(1 for y in set_b if any(_related(x, y) for x in set_a))
    return min(matched_a, matched_b)


def keyword_jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """Jaccard similarity of two keyword sets, with Chinese inclusion counted as a match:
    ``m / (|a| + |b| - m)`` with ``m = shared_keywords(a, b)``. Equals plain Jaccard when no
    word contains another; 0 when either set is empty."""
    set_a, set_b = set(a), set(b)
    if not set_a or not set_b:
        return 0.0
    m = shared_keywords(set_a, set_b)
    return m / (len(set_a) + len(set_b) - m)


def split_sentences(text: str) -> list[str]:
    """Sentences of Chinese or English text, each stripped, empty ones dropped; the end
    punctuation stays with its sentence (a question keeps its question mark)."""
    parts = re.split(r"(?<=[。！？!?；;\n])|(?<=[.])\s+", text or "")
    return [p.strip() for p in parts if p and p.strip()]
