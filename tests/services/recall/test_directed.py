"""Directed retrieval (services.recall.directed, services.recall.scoring.direct_recall): an explicit request to
remember brings back its clear best match below the decay bar; nothing else changes. Plain values, no database."""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

import pytest

from services.recall.directed import DirectedRetrieval, memory_request
from services.recall.formulas import updated_g
from services.recall.parameters import resolve_recall_params
from services.recall.scoring import RecallCandidate, direct_recall
from services.recall.word_lists import WORD_LIST_DIR, load_word_lists, word_list_hashes
from services.study.definition import StudyDefinitionError, load_study
from services.text.languages import detect

ON = DirectedRetrieval(enabled=True, min_r=0.6, min_margin=0.1)


def candidate(rank: int, r: float, *, recalled: bool = False, text: str | None = None) -> RecallCandidate:
    return RecallCandidate(message_id=100 + rank, task_id="T1", text=text or f"memory {rank}", cosine=0.8, r=r, t=0.5,
                           g_before=1.0, g_after=1.0, p=0.5, p_final=0.5, salience=0.4, recalled=recalled,
                           rank=rank, at=datetime(2026, 3, 1), spacing_days=20.0)


def direct(text: str, candidates: list[RecallCandidate], rule: DirectedRetrieval = ON):
    return direct_recall(candidates, rule, text=text, language=detect(text), g_update_salience=0.5)


@pytest.mark.parametrize("text", [
    "do u remember what breed he is?", "You remember what I don't eat, na?", "Did I tell you about my allotment?",
    "Remember which exam I was preparing for?", "As I said, the gig is on Friday - where was it again?",
    "你还记得我家狗叫什么吗？", "我之前跟你说过我老婆在哪上班", "记不记得我上次说的那个考试", "我上回说我吃啥药来着？"])
def test_explicit_requests_to_remember_are_recognised_in_both_languages(text):
    assert memory_request(text, detect(text))


@pytest.mark.parametrize("text", [
    "Can you suggest a menu for Sunday lunch?", "remember to buy milk", "I remember that day well",
    "Remind me to call my mum", "帮我写一张提醒自己的小卡片", "记得带伞", "我记得小时候很喜欢吃糖"])
def test_messages_that_do_not_ask_the_assistant_to_remember_are_not_requests(text):
    assert memory_request(text, detect(text)) is None


def test_a_request_is_matched_in_the_message_s_own_language_only():
    assert memory_request("do you remember my dog?", "zh") is None
    assert memory_request("你还记得吗", "en") is None
    assert memory_request("你还记得吗", None) is None


def test_an_explicit_request_brings_back_its_clear_best_match_and_consolidates_it():
    before = [candidate(1, 0.65), candidate(2, 0.30), candidate(3, 0.10)]
    after, decision = direct("Do you remember what kind of business I have?", before)
    assert after[0].recalled and not after[1].recalled and not after[2].recalled
    assert after[0].g_after == pytest.approx(float(updated_g(1.0, 20.0, 0.4, 0.5)))
    assert after[1:] == before[1:]
    assert decision == {"request": "Do you remember", "recalled": True, "reason": "clear_best_match",
                        "message_id": 101, "top_r": 0.65, "second_r": 0.30, "margin": pytest.approx(0.35)}


def test_the_same_candidates_without_a_request_are_left_as_the_curve_decided():
    before = [candidate(1, 0.65), candidate(2, 0.30)]
    after, decision = direct("Can you suggest a cake for my business's first birthday?", before)
    assert decision["request"] is None
    assert after == before
    assert decision == {"request": None, "recalled": False, "reason": "no_request"}


def test_no_clear_best_match_no_directed_recall():
    # below the floor: the best candidate of a question about something never said is an unrelated memory
    after, decision = direct("你还记得我有什么病吗？", [candidate(1, 0.16), candidate(2, 0.01)])
    assert not any(c.recalled for c in after) and decision["reason"] == "below_min_r"
    # above the floor but level with the second: the request does not single one memory out
    after, decision = direct("do you remember where it was?", [candidate(1, 0.70), candidate(2, 0.65)])
    assert not any(c.recalled for c in after) and decision["reason"] == "below_min_margin"
    # the second ranked higher in r than the first: no lead at all
    after, decision = direct("do you remember where it was?", [candidate(1, 0.63), candidate(2, 0.86)])
    assert decision["reason"] == "below_min_margin" and decision["margin"] == pytest.approx(-0.23)
    # a single candidate needs only the floor
    after, decision = direct("do you remember where it was?", [candidate(1, 0.61)])
    assert after[0].recalled and decision["margin"] is None
    # the floor is inclusive, just below it is not enough
    assert direct("do you remember where it was?", [candidate(1, 0.59)])[1]["reason"] == "below_min_r"


def test_an_earlier_request_to_remember_is_not_what_a_request_brings_back():
    earlier = candidate(1, 0.88, text="Do you remember what I can't eat? Need a Christmas starter.")
    after, decision = direct("Do you remember what kind of business I have?", [earlier, candidate(2, 0.47)])
    assert not any(c.recalled for c in after) and decision["reason"] == "top_is_request"
    earlier = candidate(1, 0.99, text="上次我提到我的腰有什么问题，您还记得吗？")
    assert direct("您还记得我的腰是哪一节有问题吗？", [earlier])[1]["reason"] == "top_is_request"


def test_a_memory_the_curve_recalled_is_left_alone_and_the_rule_off_decides_nothing():
    before = [candidate(1, 0.95, recalled=True), candidate(2, 0.2)]
    after, decision = direct("你还记得我对什么过敏吗？", before)
    assert after == before and decision["reason"] == "already_recalled"
    assert direct("你还记得我对什么过敏吗？", [candidate(1, 0.6)], replace(ON, enabled=False)) == (
        [candidate(1, 0.6)], None)
    assert direct("do you remember?", [])[1] == {"request": "do you remember", "recalled": False,
                                                 "reason": "no_candidate"}


def test_the_study_setting_is_validated_and_recorded_with_the_request_phrases_hash():
    study = load_study()
    rule = study.memory.recall.directed_retrieval
    assert (rule.enabled, rule.min_r, rule.min_margin) == (True, 0.6, 0.1)  # the default study's
    assert not resolve_recall_params({k: v for k, v in study.memory.recall_config.items()
                                      if k != "directed_retrieval"}).directed_retrieval.enabled
    assert rule.word_lists == load_word_lists("memory_requests").sha256 == word_list_hashes()["memory_requests"]
    assert resolve_recall_params(study.memory.recall_config).to_dict()["directed_retrieval"] == rule.to_dict()
    custom = resolve_recall_params({**study.memory.recall_config,
                                    "directed_retrieval": {"enabled": True, "min_r": 0.5, "min_margin": 0.2}})
    assert (custom.directed_retrieval.enabled, custom.directed_retrieval.min_r,
            custom.directed_retrieval.min_margin) == (True, 0.5, 0.2)
    with pytest.raises(ValueError, match="min_r"):
        resolve_recall_params({**study.memory.recall_config, "directed_retrieval": {"min_r": 1.5}})
    with pytest.raises(StudyDefinitionError, match="directed_retrieval"):
        load_study(overrides={"memory": {"recall": {"directed_retrieval": {"enabled": "yes"}}}})
    with pytest.raises(StudyDefinitionError, match="directed_retrieval"):
        load_study(overrides={"memory": {"recall": {"directed_retrieval": {"floor": 0.3}}}})


def test_the_request_phrases_are_data():
    raw = json.loads((WORD_LIST_DIR / "memory_requests.json").read_text(encoding="utf-8"))
    assert set(raw) - {"about", "notes"} == {"en", "zh"}
