"""The bot participants' personas: the facts each bot plants in T1 (six, four with a specific detail the gist
profile drops), the scripted turns of every task in Chinese and English, and how a planted fact or specific is
found again in a text or in a stored memory context.

HTTP-only like the rest of ``services.research.bots``: nothing here imports ``services``.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

TASKS = ("T1", "T2", "T3", "T4")
PROBE_TASKS = ("T2", "T3", "T4")
SOURCES = ("profile", "recent_turns", "recalled", "other")


# ---------------------------------------------------------------------------------------------
# The scripts
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    id: str
    label: str
    pattern: re.Pattern[str]  # matches the fact in Chinese or English text
    late: bool = False  # planted in T1's last turns (inside a 7-turn window)


FACTS = [
    Fact("name", "name (林晓雨 / Alex)", re.compile(r"晓雨|\bAlex\b")),
    Fact("allergy", "seafood allergy", re.compile(r"过敏|allerg", re.IGNORECASE)),
    Fact("cat", "cat (麻薯 / Mochi)", re.compile(r"猫|麻薯|\bcats?\b|\bMochi\b", re.IGNORECASE)),
    Fact("phd", "PhD application worry", re.compile(r"博士|\bPhD\b", re.IGNORECASE)),
    Fact("hometown", "hometown (成都 / Edinburgh)", re.compile(r"成都|Edinburgh")),
    Fact("hobby", "hiking (late in T1)", re.compile(r"爬山|登山|\bhik(?:e|es|ed|ing)\b", re.IGNORECASE), late=True),
]
FACT_IDS = [f.id for f in FACTS]
EARLY_FACTS = {f.id for f in FACTS if not f.late}
LATE_FACTS = {f.id for f in FACTS if f.late}

# Details planted with a fact that the gist profile drops (the offline extractor keeps "对海鲜过敏",
# "has a cat called Mochi", "likes hiking", not the shrimp and the rash, the clinginess, the hill's name).
# A context holding one of them remembers a specific earlier exchange, not the gist. Keyed by fact.
SPECIFICS = {
    "allergy": re.compile(r"虾|疹子|\bshrimp\b|\brash\b", re.IGNORECASE),
    "cat": re.compile(r"黏人|follows me everywhere", re.IGNORECASE),
    "hometown": re.compile(r"想家|miss home", re.IGNORECASE),
    "hobby": re.compile(r"香山|Blue Hill"),
}


@dataclass(frozen=True)
class Turn:
    text: str
    kind: str  # fact:<id> | probe:<topic> | filler


def _turns(*pairs: tuple[str, str]) -> list[Turn]:
    return [Turn(text, kind) for kind, text in pairs]


SCRIPTS: dict[str, dict[str, list[Turn]]] = {
    "zh": {
        "T1": _turns(
            ("fact:name", "你好！我叫林晓雨，在北京读研究生。"),
            ("fact:allergy", "我对海鲜过敏，吃一点虾就会全身起疹子。"),
            ("fact:cat", "我养了一只猫，叫麻薯，特别黏人。"),
            ("fact:phd", "最近我在申请博士，压力特别大，总担心申请不上。"),
            ("fact:hometown", "我是成都人，一个人在外地上学，有时候挺想家的。"),
            ("filler", "今天天气还不错，出门走了走。"),
            ("filler", "中午在食堂随便吃了点面条。"),
            ("filler", "下午开了一个很长的组会，有点累。"),
            ("filler", "晚上打算早点休息。"),
            ("filler", "最近在看一部讲宇宙的纪录片。"),
            ("fact:hobby", "周末我最喜欢去爬山，上周刚爬了香山。"),
            ("filler", "好啦，今天先聊到这里，谢谢你陪我聊天！"),
        ),
        "T2": _turns(
            ("probe:memory", "好久不见！你还记得我是谁吗？"),
            ("probe:food", "今晚想和朋友去吃一顿海鲜大餐，你觉得怎么样？"),
            ("probe:pet", "家里的小宠物最近不太爱吃东西，我有点担心。"),
            ("probe:application", "申请材料下周就要截止了，我该怎么安排时间？"),
            ("probe:hobby", "你还记得我周末喜欢做什么吗？"),
            ("probe:allergy_detail", "上次我跟你说过，我吃了什么东西会浑身不舒服来着？"),
            ("probe:hobby_detail", "我上周末去的是哪座山，你还记得吗？"),
            ("probe:cat_detail", "我家那个小家伙平时对我怎么样，你还记得吗？"),
            ("probe:hometown_detail", "一个人在外地上学，我之前跟你说过心里是什么滋味吗？"),
            ("filler", "这几天睡得不太好。"),
            ("filler", "昨天和室友看了一场电影。"),
            ("filler", "好的，今天就聊到这里，下次见！"),
        ),
        "T3": _turns(
            ("probe:food", "你能帮我制定下周的晚餐计划吗？"),
            ("probe:pet", "我想给家里的小宠物买个新玩具，有什么推荐？"),
            ("probe:application", "下个月有一场面试，能帮我准备一下自我介绍吗？"),
            ("probe:memory", "你还记得我之前跟你说过哪些事情吗？"),
            ("probe:hobby", "周末想出去走走，有什么建议？"),
            ("probe:allergy_detail", "点外卖的时候，哪些菜我得避开？我之前跟你说过原因。"),
            ("probe:hobby_detail", "上次我说去过的那座山，还值得再去一次吗？"),
            ("probe:cat_detail", "我出门的时候，家里那个小家伙会怎么样？你还记得我说过它的性子吗？"),
            ("filler", "今天有点忙。"),
            ("filler", "谢谢你的建议。"),
            ("filler", "我先去准备了，回头聊！"),
        ),
        "T4": _turns(
            ("probe:memory", "三周过得真快，你还记得关于我的哪些事？"),
            ("probe:food", "最后推荐一道适合我的晚餐吧。"),
            ("probe:pet", "替我向家里那个毛茸茸的小家伙问声好吧。"),
            ("probe:application", "申请的结果快出来了，给我打打气吧。"),
            ("probe:self", "你觉得我是一个怎样的人？"),
            ("probe:cat_detail", "你还记得我说过家里那个小家伙有多依赖我吗？"),
            ("probe:allergy_detail", "我之前说过吃错东西身上会起什么反应？"),
            ("probe:hometown_detail", "放假想回老家了，你还记得我说过一个人在外地是什么感受吗？"),
            ("filler", "谢谢你这几周的陪伴。"),
            ("filler", "我会想念和你聊天的。"),
            ("filler", "再见啦！"),
        ),
    },
    "en": {
        "T1": _turns(
            ("fact:name", "Hi! My name is Alex Chen and I'm a graduate student in Boston."),
            ("fact:allergy", "I'm allergic to seafood; even a little shrimp gives me a rash."),
            ("fact:cat", "I have a cat called Mochi who follows me everywhere."),
            ("fact:phd", "I'm applying for PhD programmes and I'm really anxious about getting in."),
            ("fact:hometown", "I'm originally from Edinburgh, so I miss home sometimes."),
            ("filler", "The weather was nice today, so I went for a short walk."),
            ("filler", "I had a quick bowl of noodles in the canteen for lunch."),
            ("filler", "This afternoon we had a very long lab meeting."),
            ("filler", "I plan to go to bed early tonight."),
            ("filler", "I've been watching a documentary about space."),
            ("fact:hobby", "At weekends I love hiking; last week I climbed Blue Hill."),
            ("filler", "Okay, that's all for today. Thanks for chatting with me!"),
        ),
        "T2": _turns(
            ("probe:memory", "Long time no see! Do you remember who I am?"),
            ("probe:food", "Tonight I'm thinking of a big seafood dinner with friends. What do you think?"),
            ("probe:pet", "My little pet hasn't been eating much lately and I'm a bit worried."),
            ("probe:application", "My application materials are due next week. How should I plan my time?"),
            ("probe:hobby", "Do you remember what I like to do at weekends?"),
            ("probe:allergy_detail", "Remind me, what did I say happens to my skin if I eat the wrong thing?"),
            ("probe:hobby_detail", "Which hill did I climb last week, do you remember?"),
            ("probe:cat_detail", "Do you remember how my furry companion behaves around me?"),
            ("probe:hometown_detail", "Living far from where I grew up: do you remember how I said it makes me feel?"),
            ("filler", "I haven't been sleeping well these days."),
            ("filler", "Yesterday I watched a film with my flatmate."),
            ("filler", "Alright, that's it for today. See you next time!"),
        ),
        "T3": _turns(
            ("probe:food", "Could you help me plan my dinners for next week?"),
            ("probe:pet", "I'd like to buy a new toy for my little pet at home. Any ideas?"),
            ("probe:application", "I have an interview next month. Could you help me prepare an introduction?"),
            ("probe:memory", "Do you remember what I told you before?"),
            ("probe:hobby", "I want to get outdoors this weekend. Any suggestions?"),
            ("probe:allergy_detail", "Ordering takeaway tonight: which dishes must I avoid? I told you why before."),
            ("probe:hobby_detail", "Is the hill I told you I climbed worth another visit?"),
            ("probe:cat_detail", "When I'm at home, what does my furry companion do? You know her habits."),
            ("filler", "It's been a busy day."),
            ("filler", "Thanks for the advice."),
            ("filler", "I'll go and get ready now. Talk later!"),
        ),
        "T4": _turns(
            ("probe:memory", "These three weeks flew by. What do you remember about me?"),
            ("probe:food", "One last thing: recommend a dinner that suits me."),
            ("probe:pet", "Say hello to my furry little friend at home for me."),
            ("probe:application", "My application results are coming out soon. Cheer me up!"),
            ("probe:self", "What kind of person do you think I am?"),
            ("probe:cat_detail", "Do you remember how attached my furry companion is to me?"),
            ("probe:allergy_detail", "What did I tell you my body does when I eat the wrong food?"),
            ("probe:hometown_detail", "Do you remember how I said I feel about being away from where I grew up?"),
            ("filler", "Thank you for keeping me company these weeks."),
            ("filler", "I'll miss our chats."),
            ("filler", "Goodbye!"),
        ),
    },
}
OPEN_ANSWERS = {"zh": "这是一个模拟参与者的回答。", "en": "This answer comes from a simulated participant."}


def facts_in(text: str) -> set[str]:
    return {fact.id for fact in FACTS if fact.pattern.search(text or "")}


def specifics_in(text: str) -> set[str]:
    """The facts whose planted specific detail (SPECIFICS) ``text`` holds."""
    return {fact_id for fact_id, pattern in SPECIFICS.items() if pattern.search(text or "")}


def context_texts(context: dict[str, Any] | None) -> Iterator[tuple[str, str]]:
    """(section, text) for every piece of a stored memory context the assistant was shown."""
    if not context:
        return
    yield "profile", (context.get("profile") or {}).get("text") or ""
    for turn in context.get("recent_turns") or []:
        yield "recent_turns", turn.get("user") or ""
        yield "recent_turns", turn.get("assistant") or ""
    for memory in context.get("recalled") or []:
        yield "recalled", memory.get("text") or ""
        yield "recalled", memory.get("reply") or ""
    for key in ("summary", "r1_memory"):
        yield "other", (context.get(key) or {}).get("text") or ""
    for fragment in context.get("fragments") or []:
        yield "other", fragment.get("text") or ""


def context_facts(context: dict[str, Any] | None) -> dict[str, set[str]]:
    """Planted facts in each section of a stored memory context."""
    found = {source: set() for source in SOURCES}
    for source, text in context_texts(context):
        found[source] |= facts_in(text)
    return found


def context_specifics(context: dict[str, Any] | None) -> set[str]:
    """Planted specifics (SPECIFICS) anywhere in a stored memory context."""
    return set().union(*(specifics_in(text) for _, text in context_texts(context)))
