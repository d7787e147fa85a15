"""Salience: the lexicon scorer (Chinese and English), clamping, and parsing a model's scores."""
from __future__ import annotations

import json

import pytest

from services.recall.formulas import initial_g
from services.recall.salience import SalienceScores, lexicon_scores, parse_salience_response, salience_request


def e(text: str) -> float:
    return lexicon_scores(text).salience()


def test_seed_examples_rank_in_order():
    # The seed's hand-scored examples: 0.00 < 0.28 < 0.70 < 0.82.
    ranked = ["今天天气不错", "呵呵，随便吧", "说实话，我对未来很迷茫", "我从没告诉过别人，我很害怕失败"]
    scores = [e(t) for t in ranked]
    assert scores[0] == 0.0
    assert scores == sorted(scores) and len(set(scores)) == 4
    assert scores[3] > 0.7


def test_each_dimension_responds_to_its_own_cues():
    plain, secret = lexicon_scores("我是学生"), lexicon_scores("我从没告诉过别人这个秘密")
    assert secret.disclosure > 0.8 > plain.disclosure > 0.0
    assert lexicon_scores("家人对我来说是最重要的").value > 0.6 > lexicon_scores("今天吃了面包").value
    assert lexicon_scores("我太开心了！").intensity > lexicon_scores("我有点开心").intensity > 0.0


def test_english_scores_follow_the_same_ordering():
    texts = ["Nice weather today.", "I'm a student.", "To be honest, I feel lost about my future.",
             "I've never told anyone this, but I'm really afraid of failure."]
    scores = [e(t) for t in texts]
    assert scores[0] == 0.0 and scores == sorted(scores)
    assert lexicon_scores("Family is the most important thing to me.").value > 0.6


def test_negation_weakens_an_emotion_word():
    assert lexicon_scores("我不焦虑").intensity < lexicon_scores("我很焦虑").intensity
    assert lexicon_scores("I'm not anxious").intensity < lexicon_scores("I'm so anxious").intensity


@pytest.mark.parametrize("text", [
    "我太太太崩溃了！！！！！绝望痛苦恐惧害怕心碎愤怒，从没告诉过别人的秘密，家人梦想信念原则自由公平都很重要",
    "I'm extremely devastated, terrified, heartbroken!!!! I never told anyone, a secret; family, faith, integrity",
    "", "🙂🙂🙂", "1234",
])
def test_scores_stay_in_the_unit_interval(text):
    scores = lexicon_scores(text)
    for value in (scores.intensity, scores.disclosure, scores.value, scores.salience()):
        assert 0.0 <= value <= 1.0


def test_salience_uses_the_study_weights():
    scores = SalienceScores(0.5, 1.0, 0.0)
    assert scores.salience() == pytest.approx(0.4 * 0.5 + 0.4 * 1.0)
    assert scores.salience({"intensity": 1.0, "disclosure": 0.0, "value": 0.0}) == pytest.approx(0.5)
    assert initial_g(scores.salience()) == pytest.approx(1.0 + 0.5 * 0.6)


def test_request_asks_for_json_in_the_participant_language():
    request = salience_request([(7, "我很焦虑")], "zh")
    assert request.json_mode and request.purpose == "salience" and request.temperature == 0.0
    assert "自我披露" in request.messages[0]["content"] and "[7] 我很焦虑" in request.messages[1]["content"]
    assert "self_disclosure_depth" in salience_request([(1, "hi")], "en").messages[0]["content"]


def test_model_scores_are_clamped_and_incomplete_entries_dropped():
    answer = "Here you go:\n```json\n" + json.dumps({"scores": [
        {"id": 1, "emotional_intensity": 1.4, "self_disclosure_depth": -2, "value_relevance": "0.3"},
        {"id": "2", "emotional_intensity": 0.5, "self_disclosure_depth": 0.5},
        {"id": 3, "emotional_intensity": "high", "self_disclosure_depth": 0.5, "value_relevance": 0.5},
        {"id": 99, "emotional_intensity": 0.5, "self_disclosure_depth": 0.5, "value_relevance": 0.5},
    ]}) + "\n```"
    scores = parse_salience_response(answer, [1, 2, 3])
    assert set(scores) == {1}
    assert (scores[1].intensity, scores[1].disclosure, scores[1].value, scores[1].source) == (1.0, 0.0, 0.3, "llm")


@pytest.mark.parametrize("answer", ["no json here", '{"scores": "none"}', '{"other": []}'])
def test_unusable_model_answers_raise_value_error(answer):
    with pytest.raises(ValueError):
        parse_salience_response(answer, [1])
