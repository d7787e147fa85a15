"""Profile schema, incremental merge, corrections, rendering cap; the rule extractor; LLM answer parsing."""
from __future__ import annotations

import json

import pytest

from services.memory.profile.extraction import extract_profile_delta
from services.memory.profile.llm_merge import parse_profile_answer
from services.memory.profile.schema import (
    LIST_DIMENSIONS,
    ProfileDelta,
    Removal,
    apply_delta,
    empty_profile,
    normalise_profile,
    profile_diff,
    render_profile,
    split_tag,
    validation_errors,
)
from services.text.languages import detect


def extract(messages, task_id="T1", old=None):
    return apply_delta(old or empty_profile(), extract_profile_delta(enumerate(messages)).delta, task_id)


# -- schema ---------------------------------------------------------------------------


def test_empty_profile_is_valid_and_has_the_nine_dimensions():
    profile = empty_profile()
    assert validation_errors(profile) == []
    assert set(profile) == {"basic_info", *LIST_DIMENSIONS} and len(profile) == 9


@pytest.mark.parametrize("broken, where", [
    ({**empty_profile(), "goals": "申请博士 [T1]"}, "goals"),
    ({**empty_profile(), "basic_info": ["李明 [T1]"]}, "basic_info"),
    ({**empty_profile(), "hobbies": ["爬山 [T1]"]}, "hobbies"),
    ({k: v for k, v in empty_profile().items() if k != "social"}, "social"),
    ({**empty_profile(), "goals": ["申请博士"]}, "without a task tag"),
    ({**empty_profile(), "goals": ["x" * 300 + " [T1]"]}, "goals"),
])
def test_schema_rejects_malformed_profiles(broken, where):
    errors = validation_errors(broken)
    assert errors and any(where in e for e in errors)


def test_tags_split_and_join():
    assert split_tag("对海鲜过敏 [T1]") == ("对海鲜过敏", ["T1"])
    assert split_tag("likes hiking [T1, T3]") == ("likes hiking", ["T1", "T3"])
    assert split_tag("untagged") == ("untagged", [])


def test_normalise_tags_untagged_items_with_the_current_task_and_drops_duplicates():
    raw = {**empty_profile(), "basic_info": {"name": "Anna"}, "goals": ["PhD [T1]", "PhD", " ", "thesis"]}
    profile = normalise_profile(raw, "T2")
    assert profile["basic_info"] == {"name": "Anna [T2]"}
    assert profile["goals"] == ["PhD [T1]", "thesis [T2]"]


# -- merge ----------------------------------------------------------------------------------


def test_merge_adds_new_items_keeps_old_ones_and_marks_repetition():
    old = apply_delta(empty_profile(), ProfileDelta(basic_info={"name": "李明"},
                                                    additions={"preferences": ["喜欢爬山"]}), "T1")
    delta = ProfileDelta(additions={"preferences": ["喜欢爬山", "喜欢看书"], "goals": ["申请博士"]})
    new = apply_delta(old, delta, "T2")
    assert new["basic_info"] == {"name": "李明 [T1]"}
    assert new["preferences"] == ["喜欢爬山 [T1, T2]", "喜欢看书 [T2]"]
    assert new["goals"] == ["申请博士 [T2]"]
    assert old["preferences"] == ["喜欢爬山 [T1]"]  # the old profile object is not mutated
    assert profile_diff(old, new)["removed"] == ["preferences: 喜欢爬山 [T1]"]


def test_removal_matches_items_containing_every_term_in_its_dimensions_only():
    old = {**empty_profile(), "social": ["养了一只猫 [T1]", "有一个妹妹 [T1]"], "preferences": ["喜欢猫 [T1]"]}
    new = apply_delta(old, ProfileDelta(removals=[Removal(dimensions=("social",), terms=("猫",))]), "T2")
    assert new["social"] == ["有一个妹妹 [T1]"] and new["preferences"] == ["喜欢猫 [T1]"]


def test_chinese_conversation_gives_chinese_items():
    profile = extract(["你好，我叫李明，今年26岁，是一名研究生。", "我对海鲜过敏。", "我家养了一只猫。",
                       "最近在申请博士，压力很大，很焦虑。", "我比较内向。", "家人对我来说是最重要的。",
                       "我希望被理解。", "我周末喜欢去爬山。", "我上个月刚搬家了。", "我讨厌香菜。"])
    assert validation_errors(profile) == []
    assert profile["basic_info"] == {"name": "李明 [T1]", "age": "26岁 [T1]", "occupation": "研究生 [T1]"}
    assert profile["constraints"] == ["对海鲜过敏 [T1]"]
    assert profile["social"] == ["养了一只猫 [T1]"]
    assert profile["goals"] == ["申请博士 [T1]"]
    assert profile["personality"] == ["内向 [T1]"]
    assert profile["core_values"] == ["重视家人 [T1]"]
    assert profile["emotional_needs"] == ["希望被理解 [T1]"]
    assert profile["preferences"] == ["喜欢爬山 [T1]", "不喜欢香菜 [T1]"]
    assert "最近在申请博士，压力很大，很焦虑 [T1]" in profile["significant_events"]
    assert any("搬家" in e for e in profile["significant_events"])
    assert detect(profile["significant_events"]) == "zh"


def test_english_conversation_gives_english_items():
    profile = extract(["Hi, I'm Anna. I'm 24 years old and I'm a PhD student.", "I'm allergic to peanuts.",
                       "I'm vegetarian and I don't eat mushrooms.", "I have two cats.",
                       "I'm really anxious about my thesis defense.", "Family is really important to me.",
                       "I want to become a professor.", "I'm quite introverted.", "I just graduated from college.",
                       "I live in Boston.", "My sister lives in Paris."])
    assert validation_errors(profile) == []
    assert profile["basic_info"] == {"name": "Anna [T1]", "age": "24 [T1]", "occupation": "PhD student [T1]",
                                     "location": "Boston [T1]"}
    assert profile["constraints"] == ["allergic to peanuts [T1]", "vegetarian [T1]", "does not eat mushrooms [T1]"]
    assert profile["social"] == ["has two cats [T1]", "sister lives in Paris [T1]"]
    assert profile["goals"] == ["become a professor [T1]"]
    assert profile["personality"] == ["introverted [T1]"]
    assert profile["core_values"] == ["values family [T1]"]
    assert "really anxious about my thesis defense [T1]" in profile["significant_events"]
    assert any(e.startswith("graduated") for e in profile["significant_events"])
    assert detect([v for _, v in [("", i) for i in profile["constraints"]]]) == "en"


@pytest.mark.parametrize("t1, t2, dimension, gone, replacement", [
    (["我家养了一只猫。"], ["我现在不养猫了。"], "social", "养了一只猫", "现在不养猫了 [T2]"),
    (["我是素食者。"], ["我现在不吃素了。"], "constraints", "吃素 [T1]", "现在不吃素了 [T2]"),
    (["我很喜欢打游戏。"], ["我已经不喜欢打游戏了。"], "preferences", "喜欢打游戏 [T1]", "已经不喜欢打游戏了 [T2]"),
    (["I'm vegetarian."], ["I'm not vegetarian any more."], "constraints", "vegetarian [T1]",
     "I'm not vegetarian any more [T2]"),
    (["I have a cat."], ["I don't have a cat anymore."], "social", "has a cat", "I don't have a cat anymore [T2]"),
    (["I love jogging."], ["I no longer love jogging."], "preferences", "likes jogging",
     "I no longer love jogging [T2]"),
])
def test_corrections_replace_old_items(t1, t2, dimension, gone, replacement):
    old = extract(t1)
    assert any(gone in item for item in old[dimension])
    new = extract(t2, "T2", old)
    assert not any(gone in item for item in new[dimension]), new[dimension]
    assert replacement in new[dimension]
    assert validation_errors(new) == []


@pytest.mark.parametrize("t2, name", [(["其实我叫李小明。"], "李小明 [T2]"),
                                     (["Actually, my name is Anne."], "Anne [T2]")])
def test_name_corrections_replace_the_name(t2, name):
    old = extract(["我叫李明。", "我对海鲜过敏。"]) if "李" in name else extract(["My name is Anna."])
    new = extract(t2, "T2", old)
    assert new["basic_info"]["name"] == name
    assert list(new["basic_info"]) == list(old["basic_info"])  # a replaced value keeps its place


def test_a_correction_later_in_the_same_task_cancels_the_earlier_statement():
    profile = extract(["我养了一只猫。", "哦不对，我现在不养猫了。"])
    assert profile["social"] == ["现在不养猫了 [T1]"]


# Found by the bot simulation and in realistic sentences around it: a pet's or relative's name must never
# become the participant's, and pets described with a colour, breed or age are still pets.
@pytest.mark.parametrize(("message", "social"), [
    ("我养了一只橘猫，名字叫麻薯", "养了一只橘猫，叫麻薯"),
    ("我养了一只猫，叫麻薯，特别黏人。", "养了一只猫，叫麻薯"),
    ("我养了一只叫麻薯的猫，白色的，很胆小。", "养了一只叫麻薯的猫"),
    ("我有一只两岁的英短，叫奶茶。", "养了一只两岁的英短，叫奶茶"),
    ("家里有一条柯基，叫可乐，特别能吃。", "养了一条柯基，叫可乐"),
    ("我家有只小狗叫旺财", "养了只小狗，叫旺财"),
    ("我的猫叫年糕。", "猫叫年糕"),
    ("我妹妹叫小美，在读高中。", "妹妹叫小美"),
    ("我儿子叫豆豆，今年五岁。", "儿子叫豆豆"),
    ("I have an orange cat.", "has an orange cat"),
    ("I have an orange cat, Pumpkin, who sleeps on my keyboard.", "has an orange cat called Pumpkin"),
    ("I have a fluffy white dog named Snow.", "has a fluffy white dog called Snow"),
    ("We've got a scruffy terrier named Biscuit who steals socks.", "has a scruffy terrier called Biscuit"),
    ("I have a three-year-old golden retriever.", "has a three-year-old golden retriever"),
    ("We keep two guinea pigs, Salt and Pepper.", "has two guinea pigs called Salt and Pepper"),
    ("My dog's name is Biscuit.", "has a dog called Biscuit"),
    ("My sister is called Emma.", "sister is called Emma"),
    ("My sister's name is Emma.", "sister is called Emma"),
    ("My little brother is called Tom.", "brother is called Tom"),
])
def test_pets_and_relatives_keep_their_names_and_never_give_the_participant_theirs(message, social):
    profile = extract([message])
    assert profile["social"] == [f"{social} [T1]"]
    assert profile["basic_info"] == {}  # no name, and no age (豆豆's five years are not the participant's)


def test_the_participants_name_survives_a_pet_named_in_the_same_conversation():
    profile = extract(["你好，我叫林晓雨。", "我养了一只橘猫，名字叫麻薯。"])
    assert profile["basic_info"] == {"name": "林晓雨 [T1]"}
    profile = extract(["Hi! My name is Alex Chen and I'm a graduate student in Boston.", "My cat is called Mochi."])
    assert profile["basic_info"] == {"name": "Alex Chen [T1]", "occupation": "graduate student [T1]"}
    assert profile["social"] == ["has a cat called Mochi [T1]"]


@pytest.mark.parametrize(("message", "basic_info"), [
    ("叫我小林就好", {"name": "小林 [T1]"}),
    ("我叫林晓雨，朋友们都叫我小雨。", {"name": "林晓雨 [T1]", "nickname": "小雨 [T1]"}),
    ("大家都叫我阿凯。", {"nickname": "阿凯 [T1]"}),
    ("Call me Sam.", {"name": "Sam [T1]"}),
    ("My friends call me Lizzie but my name is Elizabeth.", {"nickname": "Lizzie [T1]", "name": "Elizabeth [T1]"}),
])
def test_names_and_what_others_call_the_participant(message, basic_info):
    assert extract([message])["basic_info"] == basic_info


@pytest.mark.parametrize(("message", "constraints"), [
    ("我不吃辣", ["不吃辣"]),
    ("我不太能吃辣。", ["不吃辣"]),
    ("我吃不了辣", ["不吃辣"]),
    ("虽然是成都人，但我一点辣都不吃。", ["不吃辣"]),
    ("我对花生和芒果过敏", ["对花生和芒果过敏"]),
    ("我对海鲜过敏，螃蟹虾都不能碰。", ["对海鲜过敏", "不吃螃蟹虾"]),
    ("I'm allergic to peanuts and shellfish.", ["allergic to peanuts and shellfish"]),
    ("I'm allergic to peanuts and I always carry an EpiPen.", ["allergic to peanuts"]),
    ("I'm allergic to cats, which is awkward because my flatmate has one.", ["allergic to cats"]),
    ("I can't eat spicy food.", ["does not eat spicy food"]),
])
def test_food_constraints_in_everyday_wording(message, constraints):
    profile = extract([message])
    assert profile["constraints"] == [f"{c} [T1]" for c in constraints]
    assert not any(item.startswith(("has", "养")) for item in profile["social"])  # an allergy to cats is no cat


@pytest.mark.parametrize("message", ["I have a lot of cat hair on my sofa.", "I have a cat allergy.",
                                     "我没有养猫。", "我有点怕狗。", "最近胃口不好，什么都吃不了。"])
def test_near_misses_are_not_pets_or_constraints(message):
    profile = extract([message])
    assert profile["social"] == [] and profile["constraints"] == []


def test_questions_and_requests_are_not_statements_about_oneself():
    # the bots' probes once became "likes to do at weekends" and the goal "一下自我介绍吗"
    profile = extract(["你还记得我周末喜欢做什么吗？", "下个月有一场面试，能帮我准备一下自我介绍吗？",
                       "Do you remember what I like to do at weekends?", "Could you help me plan my dinners?"])
    assert profile == empty_profile()
    profile = extract(["我对海鲜过敏，能推荐几道菜吗？", "Can you make me a meal plan? I'm allergic to nuts.",
                       "I'm so anxious about my exam, what should I do?"])
    assert profile["constraints"] == ["对海鲜过敏 [T1]", "allergic to nuts [T1]"]
    assert profile["significant_events"] == ["so anxious about my exam, what should I do [T1]"]


def test_conversational_phrases_are_not_facts():
    profile = extract(["我想问你一个问题。", "我想知道你怎么看。", "他是老师。", "I want to ask you something.",
                       "I'm fine, thanks.", "今天天气还不错。"])
    assert profile == empty_profile()


# -- rendering -----------------------------------------------------------------------------


def big_profile():
    return {**empty_profile(), "basic_info": {"name": "李明 [T1]", "age": "26岁 [T1]"},
            "constraints": ["对海鲜过敏 [T1]"],
            "preferences": [f"喜欢第{i}种很长很长的爱好活动 [T1]" for i in range(30)],
            "significant_events": ["最近在申请博士，压力很大，很焦虑 [T1]"]}


@pytest.mark.parametrize("cap", [40, 120, 500])
def test_rendering_never_exceeds_the_cap_and_keeps_priorities(cap):
    text = render_profile(big_profile(), language="zh", max_chars=cap)
    assert len(text) <= cap
    assert "姓名：李明 [T1]" in text
    if cap >= 120:
        assert "对海鲜过敏 [T1]" in text and "焦虑" in text  # safety and worries before hobbies


def test_rendering_in_both_languages():
    profile = {**empty_profile(), "basic_info": {"name": "李明 [T1]"}, "constraints": ["对海鲜过敏 [T1]"],
               "goals": ["申请博士 [T1]", "学游泳 [T2]"]}
    assert render_profile(profile, language="zh") == (
        "基本信息：姓名：李明 [T1]\n限制：对海鲜过敏 [T1]\n目标：申请博士 [T1]；学游泳 [T2]")
    assert render_profile(profile, language="en").splitlines()[0] == "Basic info: name: 李明 [T1]"
    assert render_profile(empty_profile()) == "" and render_profile(None) == ""


# -- parsing a model's answer ----------------------------------------------------------------


def answer(**items):
    return json.dumps({**empty_profile(), **items}, ensure_ascii=False)


def test_parse_accepts_fences_and_surrounding_prose_and_tags_new_items():
    text = "好的：\n```json\n" + answer(goals=["申请博士"], basic_info={"name": "李明 [T1]"}) + "\n```\n以上。"
    profile, errors = parse_profile_answer(text, "T2")
    assert errors == [] and profile["goals"] == ["申请博士 [T2]"] and profile["basic_info"]["name"] == "李明 [T1]"


@pytest.mark.parametrize("text", ["", "我不知道", '{"basic_info": {}}', '{"basic_info": "x", "goals": 1}',
                                  answer(pets=["猫"])])
def test_parse_rejects_invalid_answers(text):
    profile, errors = parse_profile_answer(text, "T2")
    assert profile is None and errors


def test_parse_refuses_an_answer_that_silently_drops_the_profile():
    old = {**empty_profile(), "goals": ["a [T1]", "b [T1]"], "preferences": ["c [T1]", "d [T1]"]}
    profile, errors = parse_profile_answer(answer(goals=["a [T1]"]), "T2", old)
    assert profile is None and "keeps only 1 of the 4" in errors[0]
    profile, errors = parse_profile_answer(answer(goals=["a [T1]", "b [T1]"], preferences=["c [T1]"]), "T2", old)
    assert errors == []  # one correction is fine
