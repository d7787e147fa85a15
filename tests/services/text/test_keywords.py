"""Keyword extraction (Chinese segmentation, stop words) and keyword overlap."""
from __future__ import annotations

import pytest

from services.text.keywords import (
    extract_keywords,
    keyword_jaccard,
    keyword_set,
    split_sentences,
    tokenize,
)


def test_chinese_is_segmented_and_stop_words_dropped():
    words = extract_keywords("我对海鲜过敏，吃虾会起疹子。")
    assert {"海鲜", "过敏", "疹子"} <= set(words)
    assert not {"我", "对", "会", "。", "，"} & set(words)
    # Whitespace splitting would see one "word" per clause; segmentation finds several.
    assert len(words) >= 4 and all(len(w) <= 3 for w in words)


def test_chinese_overlap_needs_segmentation():
    """Two Chinese sentences about the same allergy share keywords; split on whitespace they share nothing."""
    stored, question = "我对海鲜过敏", "你还记得我对什么过敏吗？"
    naive = keyword_jaccard(set(stored.split()), set(question.split()))
    assert naive == 0.0
    assert keyword_jaccard(keyword_set(stored), keyword_set(question)) == pytest.approx(1 / 2)  # {过敏} of {海鲜, 过敏}


def test_pronoun_glued_by_jieba_is_split_off():
    words = tokenize("我养了一只橘猫，叫咪咪。")
    assert "我养" not in words
    assert {"养", "橘猫", "咪咪"} <= set(words)


def test_english_stop_words_case_and_plurals():
    assert extract_keywords("I'm allergic to peanuts, so I have to be careful.") == ["allergic", "peanut", "careful"]
    assert keyword_set("My CATS and my cat") == {"cat"}
    assert extract_keywords("The budget is 3000 pounds at most, 2 weeks") == ["budget", "3000", "pound", "week"]


def test_keywords_ranked_by_frequency_then_order():
    assert extract_keywords("hiking hiking swimming climbing climbing climbing") == ["climbing", "hiking", "swimming"]
    assert extract_keywords("hiking hiking swimming climbing climbing climbing", limit=2) == ["climbing", "hiking"]


def test_mixed_language_text():
    words = keyword_set("我在用 Python 写 Flask 应用")
    assert {"python", "flask", "应用"} <= words
    assert "我" not in words and "在" not in words


def test_jaccard_hand_computed():
    assert keyword_jaccard({"a", "b", "c"}, {"b", "c", "d"}) == pytest.approx(2 / 4)
    assert keyword_jaccard({"a"}, {"a"}) == 1.0
    assert keyword_jaccard(set(), {"a"}) == 0.0
    assert keyword_jaccard({"x"}, {"y"}) == 0.0


def test_jaccard_counts_chinese_inclusion_but_not_english_substrings():
    # 猫 is inside 橘猫: one match out of {橘猫, 咪咪} ∪ {猫} → 1 / (2 + 1 − 1)
    assert keyword_jaccard({"橘猫", "咪咪"}, {"猫"}) == pytest.approx(0.5)
    assert keyword_jaccard({"cat"}, {"category"}) == 0.0
    # Matches are counted from both sides and the smaller count is used, so the result stays ≤ 1.
    assert keyword_jaccard({"猫"}, {"橘猫", "猫咪", "猫"}) == pytest.approx(1 / 3)


def test_split_sentences_keeps_end_punctuation():
    assert split_sentences("我对海鲜过敏。你还记得吗？好的！I like it. Do you? Yes") == [
        "我对海鲜过敏。", "你还记得吗？", "好的！", "I like it.", "Do you?", "Yes"]
