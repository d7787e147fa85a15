"""Offline, rule-based profile extraction for Chinese and English.

Used when the consolidation chain has no real language model (the ``offline``
provider is a template responder, not an LLM). It reads only the participant's
own messages, clause by clause, and recognises self-statements about:

* name, age, occupation or studies, where they live or come from (``basic_info``);
* likes and dislikes (``preferences``); allergies, diets, foods they cannot eat
  and health conditions (``constraints``); plans and aims (``goals``);
* traits (``personality``); pets, family and people close to them (``social``);
* needs to be understood or supported (``emotional_needs``); what matters to
  them (``core_values``); life events and worries (``significant_events``);
* corrections ("我现在不养猫了", "其实我叫…", "I'm not vegetarian any more"):
  the statement is turned back into its positive form, the facts it names are
  removed from the old profile and the correction itself becomes the new item.

Chinese text is segmented with jieba, which gives name boundaries (person-name
tags) and the content words used to match corrections to old items. The output
is a ``ProfileDelta`` merged by ``services.profile.apply_delta``, so the result
passes the same schema as an LLM's profile.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import jieba
import jieba.posseg

from services.profile import ProfileDelta, Removal

jieba.setLogLevel(logging.WARNING)

MAX_ITEM_CHARS = 60
CLAUSE_SPLIT = re.compile(r"[，,。！？!?；;：:\n…~～]+")
SENTENCE_SPLIT = re.compile(r"(?<=[。！？!?；;\n])|(?<=\.)\s+")


@dataclass
class Fact:
    dimension: str  # a list dimension, or "basic_info"
    text: str
    key: str | None = None  # basic_info key
    terms: tuple[str, ...] = ()  # words that identify the fact, for corrections

    def removal(self) -> Removal:
        if self.dimension == "basic_info":
            return Removal(dimensions=(), terms=(), basic_info_keys=(self.key or "",))
        return Removal(dimensions=(self.dimension,), terms=self.terms or (self.text,))


@dataclass
class Extraction:
    delta: ProfileDelta
    facts_per_message: dict[int, int] = field(default_factory=dict)
    facts: list[tuple[int, Fact]] = field(default_factory=list)


def _clip(text: str) -> str:
    text = text.strip(" \t，,。.！!？?；;：:、")
    return text if len(text) <= MAX_ITEM_CHARS else text[: MAX_ITEM_CHARS - 1] + "…"


# ---------------------------------------------------------------------------
# Chinese
# ---------------------------------------------------------------------------

ZH_FILLERS = re.compile(r"^(?:嗯+|啊|哈+|唉|哎|诶|其实|说实话|老实说|对了|另外|还有|然后|而且|不过|但是|可是|所以"
                        r"|我觉得)+")
ZH_OTHER_SUBJECT = re.compile(r"^(?:他|她|它|他们|她们|你|您|我们|大家|别人|朋友|同学|老师说)")
ZH_ROLES = ("博士生|研究生|硕士生|本科生|大学生|高中生|中学生|学生|博士后|老师|教师|教授|医生|护士|工程师|程序员|"
            "设计师|律师|会计|销售|记者|编辑|作家|研究员|公务员|经理|产品经理|自由职业者|厨师|司机|画家|演员|"
            "歌手|创业者|咨询师|心理咨询师|社工|警察|军人|店员|职员|上班族|打工人")
ZH_PETS = "猫咪|小猫|猫|小狗|狗狗|狗|兔子|仓鼠|鹦鹉|金鱼|鱼|乌龟|龙猫|刺猬"
ZH_KIN = ("爸爸|妈妈|父亲|母亲|父母|爸妈|爷爷|奶奶|外公|外婆|姥姥|姥爷|哥哥|姐姐|弟弟|妹妹|老公|老婆|丈夫|妻子|"
          "男朋友|女朋友|对象|儿子|女儿|孩子|室友|导师|闺蜜|好朋友")
ZH_TRAITS = ("内向|外向|慢热|害羞|乐观|悲观|敏感|完美主义|急性子|慢性子|社恐|社牛|宅|独立|细心|粗心|理性|感性|"
             "话痨|安静|认真|拖延")
ZH_WORRY = re.compile(r"焦虑|担心|紧张|害怕|恐惧|迷茫|压力(?:很|好|特别|非常|有点)?大|不安|发愁|失眠|难过|沮丧|崩溃|"
                      r"烦恼|心烦|很烦|好烦|纠结|孤独|抑郁|自卑|怕")
ZH_EVENTS = re.compile(r"毕业|分手|搬家|结婚|离婚|失业|辞职|离职|生病|住院|怀孕|考上|录取|拿到|入职|升职|去世|"
                       r"出国|留学|获奖|比赛|失恋|手术")
ZH_CORRECTION = re.compile(r"不再|已经不|现在不|早就不|没再|不.{1,8}了$|已经没有|现在没有")
ZH_NOT_GOALS = re.compile(r"^(?:说|问|知道|聊|告诉|了解|想|看看|听|请你|让你|你)")


def _zh_name_after(text: str) -> str | None:
    """The person name right after 叫/名字是, bounded by jieba's segmentation."""
    tokens = [(w.word, w.flag) for w in jieba.posseg.cut(text)]
    if not tokens:
        return None
    word, flag = tokens[0]
    if not re.fullmatch(r"[\u4e00-\u9fa5]{1,4}|[A-Za-z][A-Za-z'-]{0,19}", word):
        return None
    # jieba may split an unfamiliar given name into single characters; join them back (max 4 chars).
    name = word
    for nxt, nflag in tokens[1:]:
        if len(name) >= 3 or not re.fullmatch(r"[\u4e00-\u9fa5]", nxt) or nflag in ("v", "p", "uj", "d", "c", "r", "t"):
            break
        name += nxt
    if flag.startswith("nr") or len(name) >= 2 or re.fullmatch(r"[A-Za-z'-]+", name):
        return name
    return None


ZhRule = Callable[[str], list[Fact]]


def _zh_name(clause: str) -> list[Fact]:
    match = re.search(r"(?:我叫|我的名字(?:是|叫)|名字叫|叫我)(.+)", clause)
    if not match or re.match(r"(?:什么|啥)", match.group(1)):
        return []
    name = _zh_name_after(match.group(1))
    return [Fact("basic_info", name, key="name")] if name else []


def _zh_age(clause: str) -> list[Fact]:
    match = re.search(r"(?:^|我|今年|已经)(\d{1,2}|[一二三四五六七八九十两]{1,3})(?:周)?岁", clause)
    if not match or "我" not in clause and "今年" not in clause:
        return []
    return [Fact("basic_info", f"{match.group(1)}岁", key="age")]


def _zh_occupation(clause: str) -> list[Fact]:
    facts: list[Fact] = []
    match = re.search(rf"^(?:我)?(?:现在|目前|是个|还)?是(?:一名|一个|一位|个|名)?(.{{0,10}}?(?:{ZH_ROLES}))", clause)
    if match:
        facts.append(Fact("basic_info", match.group(1), key="occupation"))
    match = re.search(r"^(?:我)?(?:现在|目前)?在(.{2,15}?)(?:读|上|念)(.{0,10})", clause)
    if match:
        facts.append(Fact("basic_info", _clip(f"在{match.group(1)}读{match.group(2)}"), key="study"))
    match = re.search(r"^(?:我)?(?:是|读|学|念)的?是?(.{2,12}?)专业", clause)
    if match:
        facts.append(Fact("basic_info", f"{match.group(1)}专业", key="study"))
    match = re.search(r"^(?:我)?(?:现在|目前)?在(.{2,15}?)(?:工作|上班|实习)", clause)
    if match:
        facts.append(Fact("basic_info", f"在{match.group(1)}工作", key="occupation"))
    return facts


def _zh_location(clause: str) -> list[Fact]:
    match = re.search(r"^(?:我)?(?:现在)?(?:住|生活)在(.{2,12})", clause)
    if match:
        return [Fact("basic_info", _clip(match.group(1)), key="location")]
    match = re.search(r"^(?:我)?(?:是([\u4e00-\u9fa5]{2,4}?)人$|来自(.{2,12}))", clause)
    if match and not re.search(r"[的个一]", match.group(1) or ""):
        return [Fact("basic_info", match.group(1) or _clip(match.group(2)), key="hometown")]
    return []


def _zh_preferences(clause: str) -> list[Fact]:
    match = re.search(r"(?:不喜欢|讨厌|受不了|不爱|不太喜欢)(.{1,20})", clause)
    if match:
        obj = _clip(match.group(1))
        return [Fact("preferences", f"不喜欢{obj}", terms=(obj,))] if obj else []
    # Up to four characters of time or degree words may sit between 我 and the verb (我周末喜欢, 我还是很喜欢).
    match = re.search(r"(?:^|我)[^不没]{0,4}?(?:喜欢|热爱|爱好是|享受|迷上了|爱上了)(.{1,20})", clause)
    if match or (match := re.search(r"(?:^|我的)爱好是(.{1,20})", clause)):
        obj = _clip(re.sub(r"^去", "", match.group(1)))
        if obj and not re.match(r"^(?:你|这样|那样|吗|吧)", obj):
            return [Fact("preferences", f"喜欢{obj}", terms=(obj,))]
    return []


def _zh_constraints(clause: str) -> list[Fact]:
    facts: list[Fact] = []
    match = re.search(r"对(.{1,10}?)过敏", clause) or re.search(r"^(?:我)?(.{1,8}?)过敏", clause)
    if match:
        obj = match.group(1).strip("我有点很")
        if obj:
            facts.append(Fact("constraints", f"对{obj}过敏", terms=(obj, "过敏")))
    if re.search(r"素食|吃素", clause):
        facts.append(Fact("constraints", "吃素", terms=("素",)))
    match = re.search(r"(?:不吃|不能吃|不敢吃|忌口)(.{1,10})", clause)
    if match and not re.search(r"素", clause):
        obj = _clip(match.group(1))
        facts.append(Fact("constraints", f"不吃{obj}", terms=(obj,)))
    if "乳糖不耐" in clause:
        facts.append(Fact("constraints", "乳糖不耐受", terms=("乳糖",)))
    match = re.search(r"(?:有|患有|得了|确诊了?)(糖尿病|高血压|哮喘|胃病|抑郁症|焦虑症|失眠症|过敏性鼻炎)", clause)
    if match:
        facts.append(Fact("constraints", f"有{match.group(1)}", terms=(match.group(1),)))
    if re.search(r"在减肥|要减肥|控制饮食|控糖", clause):
        facts.append(Fact("constraints", "在控制饮食/减肥", terms=("减肥",)))
    return facts


def _zh_social(clause: str) -> list[Fact]:
    facts: list[Fact] = []
    match = re.search(rf"(?:养了|养着|养|有)(一只|一条|两只|三只|只|条|一个)?({ZH_PETS})", clause)
    if match:
        pet = match.group(2)
        term = pet[-1] if pet[-1] in "猫狗鱼" else pet
        facts.append(Fact("social", f"养了{match.group(1) or '一只'}{pet}", terms=(term,)))
    match = re.search(rf"^(?:我)?有(一个|两个|个|一位)?({ZH_KIN})", clause)
    if match and not facts:
        facts.append(Fact("social", f"有{match.group(1) or ''}{match.group(2)}", terms=(match.group(2),)))
    match = re.search(rf"^我(?:的)?({ZH_KIN})(.{{1,25}})", clause)
    if match and not facts:
        facts.append(Fact("social", _clip(f"{match.group(1)}{match.group(2)}"), terms=(match.group(1),)))
    match = re.search(rf"(?:和|跟)({ZH_KIN}|家人)(?:一起)?住", clause)
    if match:
        facts.append(Fact("social", f"和{match.group(1)}一起住", terms=(match.group(1), "住")))
    return facts


def _zh_goals(clause: str) -> list[Fact]:
    match = re.search(r"(?:正在|在)(申请|备考|准备)(.{1,25})", clause) or re.search(
        r"(?:想|打算|计划|准备|希望能?|梦想是?|目标是|立志|决定)(申请|考(?!虑)|读|找|学|转|成为|当|出国|拿到|完成|写)(.{1,25})",
        clause)
    if match:
        text = _clip(match.group(1) + match.group(2))
        return [Fact("goals", text, terms=(text,))]
    match = re.search(r"(?:^|我)(?:想|打算|计划|准备|希望能?|梦想是?|目标是|立志|决定)(.{2,25})", clause)
    if match and not ZH_NOT_GOALS.match(match.group(1)) and not re.match(r"^(?:被|有人|别人)", match.group(1)):
        text = _clip(match.group(1))
        return [Fact("goals", text, terms=(text,))]
    return []


def _zh_personality(clause: str) -> list[Fact]:
    match = re.search(rf"^(?:我)?(?:是|算是|属于)?(?:个|一个)?(?:比较|挺|很|有点|非常|特别|超级)?({ZH_TRAITS})"
                      r"(?:的人|的性格)?", clause)
    return [Fact("personality", match.group(1), terms=(match.group(1),))] if match else []


def _zh_needs(clause: str) -> list[Fact]:
    match = re.search(r"(?:希望|需要|渴望|想要|想)(被(?:人)?(?:理解|认可|倾听|关心|支持|接纳|看见|肯定|鼓励)"
                      r"|有人(?:能)?(.{1,15}))", clause)
    if match:
        return [Fact("emotional_needs", _clip(f"希望{match.group(1)}"), terms=(match.group(1),))]
    if re.search(r"(?:没有人|没人|没有谁)(?:能)?(?:理解|懂|关心|在乎)我", clause):
        return [Fact("emotional_needs", "希望被理解", terms=("理解",))]
    return []


def _zh_values(clause: str) -> list[Fact]:
    match = re.search(r"^(.{1,12}?)对我(?:来说)?(?:是)?(?:很|非常|特别|最|挺)?重要", clause)
    if match:
        obj = ZH_FILLERS.sub("", match.group(1)).strip()
        return [Fact("core_values", f"重视{obj}", terms=(obj,))] if obj else []
    match = re.search(r"(?:我)?(?:最|很|非常)?(?<!不)(?:看重|在乎|重视|珍惜|相信)(.{1,20})", clause)
    if match and not re.match(r"^(?:你|我)", match.group(1)):
        obj = _clip(match.group(1))
        return [Fact("core_values", f"看重{obj}", terms=(obj,))] if obj else []
    return []


def _zh_events(clause: str) -> list[Fact]:
    if ZH_EVENTS.search(clause) and re.search(r"了|刚|最近|去年|今年|上个月|上周|马上|快要", clause):
        text = _clip(re.sub(r"^我", "", clause))
        return [Fact("significant_events", text, terms=(text,))]
    return []


ZH_CLAUSE_RULES: tuple[ZhRule, ...] = (
    _zh_name, _zh_age, _zh_occupation, _zh_location, _zh_constraints, _zh_social, _zh_preferences,
    _zh_goals, _zh_personality, _zh_needs, _zh_values, _zh_events,
)


def _zh_positive_form(clause: str) -> str:
    """'我现在不养猫了' -> '我现在养猫': the statement a correction takes back."""
    text = re.sub(r"不再|已经不|现在不|早就不|没再", lambda m: m.group(0).replace("不", "").replace("没再", "")
                  .replace("再", ""), clause)
    text = re.sub(r"已经没有|现在没有", "有", text)
    text = re.sub(r"不(?=.{1,8}了$)", "", text)
    return re.sub(r"了$", "", text)


def _zh_clauses(message: str) -> list[str]:
    clauses = []
    for raw in CLAUSE_SPLIT.split(message):
        clause = ZH_FILLERS.sub("", raw.strip())
        if clause:
            clauses.append(clause)
    return clauses


def _zh_worries(message: str) -> list[Fact]:
    """A worry is kept with its whole sentence, which usually names what it is about."""
    facts = []
    for sentence in re.split(r"[。！？!?；;\n]+", message):
        sentence = ZH_FILLERS.sub("", ZH_FILLERS.sub("", sentence.strip()).lstrip(" ，,、"))
        if not sentence or not ZH_WORRY.search(sentence) or "我" not in sentence and len(sentence) < 6:
            continue
        if re.search(r"(?:不|没|别)(?:焦虑|担心|紧张|害怕|难过)", sentence):
            continue
        text = _clip(re.sub(r"^我", "", sentence))
        facts.append(Fact("significant_events", text, terms=(text,)))
    return facts


def extract_zh(message: str) -> tuple[list[Fact], list[Fact], list[Fact]]:
    """(facts, corrections' removals as facts, correction items) for one Chinese message."""
    facts: list[Fact] = []
    taken_back: list[Fact] = []
    replacements: list[Fact] = []
    clauses = _zh_clauses(message)
    for clause in clauses:
        if ZH_OTHER_SUBJECT.match(clause):
            continue
        if "不叫" in clause:
            taken_back.append(Fact("basic_info", "", key="name"))
        if ZH_CORRECTION.search(clause) and "过敏" not in clause:
            positive = _zh_positive_form(clause)
            old = [f for rule in ZH_CLAUSE_RULES for f in rule(positive)]
            if old:
                taken_back.extend(old)
                dimension = old[0].dimension if old[0].dimension != "basic_info" else "significant_events"
                replacements.append(Fact(dimension, _clip(re.sub(r"^我", "", clause)), terms=old[0].terms))
                continue
        for rule in ZH_CLAUSE_RULES:
            facts.extend(rule(clause))
    facts.extend(_zh_worries(message))
    return facts, taken_back, replacements


# ---------------------------------------------------------------------------
# English
# ---------------------------------------------------------------------------

EN_ROLES = ("student|engineer|teacher|nurse|doctor|developer|programmer|designer|researcher|candidate|lawyer|"
            "writer|manager|accountant|postdoc|professor|chef|artist|freelancer|scientist|analyst|consultant|"
            "journalist|editor|pharmacist|therapist|librarian|mechanic|driver|cashier|lecturer|undergrad|"
            "undergraduate|graduate|architect|photographer|musician")
EN_PETS = "cat|dog|kitten|puppy|rabbit|bunny|hamster|parrot|goldfish|fish|turtle|tortoise|guinea pig"
EN_KIN = ("mom|mum|mother|dad|father|parents|sister|brother|wife|husband|partner|girlfriend|boyfriend|son|"
          "daughter|kids|children|grandma|grandmother|grandpa|grandfather|roommate|flatmate|supervisor|advisor|"
          "best friend")
EN_TRAITS = ("introvert(?:ed)?|extrovert(?:ed)?|shy|outgoing|optimistic|pessimistic|perfectionist|sensitive|calm|"
             "patient|impatient|organi[sz]ed|messy|curious|quiet|talkative|anxious person|night owl|early bird|"
             "procrastinator")
EN_WORRY = re.compile(r"\b(?:anxious|anxiety|worried|worry|worries|nervous|scared|afraid|stressed|stress|"
                      r"overwhelmed|lost|depressed|sad|upset|lonely|panic|panicking|insecure|frustrated)\b", re.I)
EN_NEGATED_WORRY = re.compile(r"\b(?:not|never|no longer)\s+(?:\w+\s+)?"
                              r"(?:anxious|worried|nervous|scared|afraid|stressed)", re.I)
EN_CORRECTION = re.compile(r"\b(?:any ?more|no longer|not\b.*\b(?:now|these days)|stopped)\b", re.I)
EN_NOT_GOALS = re.compile(r"^(?:know|ask|say|talk|tell|chat|share|hear|see if|check)\b", re.I)
EN_NOT_NAMES = {"a", "an", "the", "so", "not", "very", "really", "just", "from", "in", "at", "here", "fine",
                "good", "ok", "okay", "tired", "sorry", "glad", "happy", "sad", "anxious", "worried", "chinese",
                "english", "american", "british", "vegetarian", "vegan", "allergic", "back", "still", "also"}
_PHRASE = r"([^,.;!?]{2,50}?)(?=\s+(?:and|but|because|so|which|since)\b|[,.;!?]|$)"


def _en(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.I)


def _en_name(s: str) -> list[Fact]:
    match = re.search(r"\b(?:[Mm]y name is|[Cc]all me|I(?:'m| am) called|name's)\s+([A-Z][\w'-]*(?: [A-Z][\w'-]*)?)", s)
    if not match:
        match = re.search(r"(?:^|^(?:[Hh]i|[Hh]ello|[Hh]ey)[,!]?\s+|[Aa]ctually,?\s+)"
                          r"I(?:'m| am)\s+([A-Z][a-z'-]+)\b", s)
        if match and match.group(1).lower() in EN_NOT_NAMES:
            match = None
    return [Fact("basic_info", match.group(1), key="name")] if match else []


def _en_age(s: str) -> list[Fact]:
    match = _en(r"\bI(?:'m| am) (\d{1,2})(?: years? old|\b(?! ?(?:%|am|pm|minutes|hours|days)))").search(s)
    return [Fact("basic_info", match.group(1), key="age")] if match else []


def _en_occupation(s: str) -> list[Fact]:
    facts = []
    match = _en(rf"\bI(?:'m| am)(?: currently| now)? (?:a|an) ((?:[\w-]+ ){{0,3}}?(?:{EN_ROLES}))s?\b").search(s)
    if match:
        facts.append(Fact("basic_info", match.group(1), key="occupation"))
    match = _en(rf"\bI work (?:as (?:a|an) |at |for ){_PHRASE}").search(s)
    if match:
        facts.append(Fact("basic_info", _clip(match.group(0)[2:].replace("work", "works", 1)), key="occupation"))
    match = (_en(rf"\bI(?:'m| am) (?:studying|majoring in) {_PHRASE}").search(s)
             or _en(rf"\bI study {_PHRASE}").search(s))
    if match:
        facts.append(Fact("basic_info", _clip(f"studies {match.group(1).strip()}"), key="study"))
    match = _en(r"\bI(?:'m| am) doing (?:a|my) (PhD|master'?s|bachelor'?s|degree|postdoc)"
                r"(?: (?:in|on) ([^,.;!?]{2,40}))?").search(s)
    if match:
        subject = f" in {match.group(2).strip()}" if match.group(2) else ""
        facts.append(Fact("basic_info", _clip(f"doing a {match.group(1)}{subject}"), key="study"))
    return facts


def _en_location(s: str) -> list[Fact]:
    match = re.search(r"\bI live in ([A-Z][\w' -]{1,30}?)(?=[,.;!?]|\s+(?:and|but|with)\b|$)", s)
    if match:
        return [Fact("basic_info", match.group(1), key="location")]
    match = re.search(r"\bI(?:'m| am) (?:originally )?from ([A-Z][\w' -]{1,30}?)(?=[,.;!?]|\s+(?:and|but)\b|$)", s)
    return [Fact("basic_info", match.group(1), key="hometown")] if match else []


def _en_preferences(s: str) -> list[Fact]:
    match = _en(r"\bI (?:really |just |kind of )?(?:don't like|do not like|hate|dislike|can't stand|cannot stand) "
                + _PHRASE).search(s)
    if match:
        return [Fact("preferences", f"dislikes {match.group(1).strip()}", terms=(match.group(1).strip(),))]
    match = _en(rf"\bI (?:really |also |just |absolutely )?(?:like|love|enjoy|adore) {_PHRASE}").search(s)
    if match and not re.match(r"(?:you|it|that|this)\b", match.group(1), re.I):
        return [Fact("preferences", f"likes {match.group(1).strip()}", terms=(match.group(1).strip(),))]
    return []


def _en_constraints(s: str) -> list[Fact]:
    facts = []
    match = _en(rf"\ballergic to {_PHRASE}").search(s)
    if match:
        obj = match.group(1).strip()
        facts.append(Fact("constraints", f"allergic to {obj}", terms=(obj, "allergic")))
    match = _en(r"\bI(?:'m| am) (?:a |an )?(?:strict )?(vegetarian|vegan)\b").search(s)
    if match:
        facts.append(Fact("constraints", match.group(1).lower(), terms=(match.group(1).lower(),)))
    match = _en(rf"\bI (?:don't|do not|can't|cannot|never) eat {_PHRASE}").search(s)
    if match:
        obj = match.group(1).strip()
        facts.append(Fact("constraints", f"does not eat {obj}", terms=(obj,)))
    if _en(r"lactose[- ]intolerant").search(s):
        facts.append(Fact("constraints", "lactose intolerant", terms=("lactose",)))
    match = _en(r"\bI have (diabetes|asthma|high blood pressure|celiac disease|insomnia|depression"
                r"|an anxiety disorder)").search(s)
    if match:
        facts.append(Fact("constraints", f"has {match.group(1)}", terms=(match.group(1),)))
    return facts


def _en_social(s: str) -> list[Fact]:
    facts = []
    match = _en(rf"\bI (?:have|own|got) (a|an|two|three|\d+) (?:little |pet |small |big )?({EN_PETS})s?\b").search(s)
    if not match:
        match = _en(rf"\bmy (?:little |pet )?()({EN_PETS})\b").search(s)
    if match:
        pet = match.group(2).lower()
        count = (match.group(1) or "a").lower()
        facts.append(Fact("social", f"has {count} {pet}{'s' if count not in ('a', 'an', '1') else ''}", terms=(pet,)))
    match = _en(rf"\bI have (a|an|two|three|\d+) (?:younger |older |little |big |twin )?({EN_KIN})s?\b").search(s)
    if match:
        facts.append(Fact("social", f"has {match.group(1)} {match.group(2)}", terms=(match.group(2),)))
    match = _en(rf"\bmy ({EN_KIN}) ((?:is|was|lives|works|has|loves|wants|thinks|keeps)\b[^,.;!?]{{2,50}})").search(s)
    if match:
        facts.append(Fact("social", _clip(f"{match.group(1)} {match.group(2)}"), terms=(match.group(1),)))
    match = _en(rf"\bI live with (?:my )?({EN_KIN}|family)").search(s)
    if match:
        facts.append(Fact("social", f"lives with {match.group(1)}", terms=(match.group(1), "lives")))
    return facts


def _en_goals(s: str) -> list[Fact]:
    match = _en(r"\bI(?:'m| am) (?:currently |now )?(applying|preparing|studying|training|saving) (?:for|to) "
                + _PHRASE).search(s)
    if match:
        text = f"{match.group(1).lower()} for {match.group(2).strip()}"
        return [Fact("goals", text, terms=(match.group(2).strip(),))]
    match = _en(rf"\b(?:I (?:want|plan|hope|intend|would like|'d like|am going|'m going|am trying|'m trying|need) to|"
                rf"[Mm]y goal is to|[Mm]y dream is to) {_PHRASE}").search(s)
    if match and not EN_NOT_GOALS.match(match.group(1)) and not re.match(r"be (?:understood|heard)", match.group(1)):
        return [Fact("goals", match.group(1).strip(), terms=(match.group(1).strip(),))]
    return []


def _en_personality(s: str) -> list[Fact]:
    match = _en(r"\bI(?:'m| am) (?:quite |pretty |rather |very |a bit |a little |kind of |really |an? "
                rf"|more of an? )*({EN_TRAITS})\b").search(s)
    return [Fact("personality", match.group(1).lower(), terms=(match.group(1).lower(),))] if match else []


def _en_needs(s: str) -> list[Fact]:
    match = _en(r"\bI (?:just )?(?:want|need|wish|hope)(?: for)? (?:someone|somebody|people) (?:to |who )"
                r"([^,.;!?]{3,40})").search(s)
    if match:
        return [Fact("emotional_needs", f"wants someone to {match.group(1).strip()}", terms=(match.group(1).strip(),))]
    match = _en(r"\bI (?:want|need|wish|hope) to (?:be|feel) "
                r"(understood|heard|supported|appreciated|accepted|loved|seen|valued)").search(s)
    if match:
        return [Fact("emotional_needs", f"wants to feel {match.group(1).lower()}", terms=(match.group(1).lower(),))]
    if _en(r"\b(?:nobody|no one|no-one) (?:really )?(?:understands|gets|cares about) me").search(s):
        return [Fact("emotional_needs", "wants to feel understood", terms=("understood",))]
    return []


def _en_values(s: str) -> list[Fact]:
    match = _en(r"(?:^|[,.;!?]\s*)([^,.;!?]{2,40}?) (?:is|are|means|mean) "
                r"(?:really |very |so |the most |everything |a lot )*(?:important|everything) to me").search(s)
    if not match:
        match = _en(r"(?:^|[,.;!?]\s*)([^,.;!?]{2,40}?) matters? (?:a lot |most |so much )?to me").search(s)
    if match:
        obj = re.sub(r"^(?:and|but|so|honestly|for me,?)\s+", "", match.group(1).strip(), flags=re.I)
        obj = obj if obj.startswith("I ") else obj[:1].lower() + obj[1:]
        return [Fact("core_values", f"values {obj}", terms=(obj,))]
    match = _en(rf"\bI (?:really |deeply )?(?:value|care (?:a lot )?about|believe in) {_PHRASE}").search(s)
    if match:
        return [Fact("core_values", f"values {match.group(1).strip()}", terms=(match.group(1).strip(),))]
    return []


def _en_events(s: str) -> list[Fact]:
    match = _en(r"\bI (?:just |recently |finally )?(graduated|moved|broke up|got married|got divorced|lost my job|"
                r"quit my job|"
                r"got a (?:new )?job|got promoted|got sick|was hospitali[sz]ed|got into|got accepted|had surgery|"
                r"started (?:a new job|my phd|university|college))([^,.;!?]{0,40})").search(s)
    if match:
        text = _clip(match.group(1) + match.group(2))
        return [Fact("significant_events", text, terms=(text,))]
    return []


EN_RULES: tuple[Callable[[str], list[Fact]], ...] = (
    _en_name, _en_age, _en_occupation, _en_location, _en_constraints, _en_social, _en_preferences,
    _en_goals, _en_personality, _en_needs, _en_values, _en_events,
)


def _en_positive_form(sentence: str) -> str:
    """"I'm not vegetarian any more" -> "I'm vegetarian": the statement a correction takes back."""
    text = re.sub(r"\b(?:don't|do not|doesn't|does not)\s+", "", sentence, flags=re.I)
    text = re.sub(r"\b(?:no longer|not)\s+", "", text, flags=re.I)
    text = re.sub(r"\s*\b(?:any ?more|these days|now)\b", "", text, flags=re.I)
    return text.replace("I've stopped ", "I ").replace("I stopped ", "I ")


def _en_sentences(message: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?;])\s+|\n+", message) if s.strip()]


def extract_en(message: str) -> tuple[list[Fact], list[Fact], list[Fact]]:
    facts: list[Fact] = []
    taken_back: list[Fact] = []
    replacements: list[Fact] = []
    for sentence in _en_sentences(message):
        if _en(r"\bmy name is not|\bmy name isn't|\bactually,? (?:my name is|I'm|call me)").search(sentence):
            taken_back.append(Fact("basic_info", "", key="name"))
        if EN_CORRECTION.search(sentence) and not _en(r"\ballergic\b").search(sentence):
            old = [f for rule in EN_RULES for f in rule(_en_positive_form(sentence))]
            if old:
                taken_back.extend(old)
                dimension = old[0].dimension if old[0].dimension != "basic_info" else "significant_events"
                text = re.sub(r"^(?:actually|well|so|oh)[, ]+", "", sentence.rstrip(".!"), flags=re.I)
                replacements.append(Fact(dimension, _clip(text), terms=old[0].terms))
                continue
        for rule in EN_RULES:
            facts.extend(rule(sentence))
        if EN_WORRY.search(sentence) and _en(r"\b(?:I|I'm|my|me)\b").search(sentence) \
                and not EN_NEGATED_WORRY.search(sentence):
            text = _clip(re.sub(r"^(?:and |but |so |honestly,? |to be honest,? )?"
                                r"I(?:'m| am| feel| have been|'ve been) ",
                                "", sentence.rstrip(".!"), flags=re.I))
            facts.append(Fact("significant_events", text, terms=(text,)))
    return facts, taken_back, replacements


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def message_language(text: str) -> str:
    return "zh" if re.search(r"[\u4e00-\u9fff]", text) else "en"


def extract_message(text: str) -> tuple[list[Fact], list[Fact], list[Fact]]:
    return extract_zh(text) if message_language(text) == "zh" else extract_en(text)


def extract_profile_delta(messages: Iterable[tuple[int, str]]) -> Extraction:
    """Facts stated in the participant's messages (id, text), oldest first, as a ``ProfileDelta``.

    Later statements win: a correction removes what an earlier message of the
    same task (or an earlier task) said."""
    delta = ProfileDelta()
    extraction = Extraction(delta=delta)
    for message_id, text in messages:
        facts, taken_back, replacements = extract_message(text)
        for old in taken_back:
            removal = old.removal()
            delta.removals.append(removal)
            _retract(delta, removal)
        for fact in [*facts, *replacements]:
            if fact.dimension == "basic_info":
                delta.basic_info[fact.key or "other"] = fact.text
            else:
                delta.add(fact.dimension, fact.text)
        extraction.facts_per_message[message_id] = len(facts) + len(replacements)
        extraction.facts.extend((message_id, f) for f in [*facts, *replacements])
    return extraction


def _retract(delta: ProfileDelta, removal: Removal) -> None:
    """A correction also cancels what this same task said earlier."""
    for key in removal.basic_info_keys:
        delta.basic_info.pop(key, None)
    for dimension in removal.dimensions:
        kept = [i for i in delta.additions.get(dimension, []) if not removal.matches(dimension, i)]
        delta.additions[dimension] = kept
