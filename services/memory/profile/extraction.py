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
is a ``ProfileDelta`` merged by ``services.memory.profile.schema.apply_delta``, so the result
passes the same schema as an LLM's profile.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import jieba
import jieba.posseg

from services.memory.profile.schema import ProfileDelta, Removal
from services.text.clipping import clip
from services.text.languages import detect

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
    about_other: bool = False  # about a pet or a relative: the clauses after it go on about them

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
    return clip(text, MAX_ITEM_CHARS, trim=" \t，,。.！!？?；;：:、")


# ---------------------------------------------------------------------------
# Chinese
# ---------------------------------------------------------------------------

ZH_FILLERS = re.compile(r"^(?:嗯+|啊|哈+|唉|哎|诶|其实|说实话|老实说|对了|另外|还有|然后|而且|不过|但是|可是|所以"
                        r"|我觉得)+")
ZH_OTHER_SUBJECT = re.compile(r"^(?:他|她|它|他们|她们|你|您|我们|大家|别人|朋友|同学|老师说)")
ZH_ROLES = ("博士生|研究生|硕士生|本科生|大学生|高中生|中学生|学生|博士后|老师|教师|教授|医生|护士|工程师|程序员|"
            "设计师|律师|会计|销售|记者|编辑|作家|研究员|公务员|经理|产品经理|自由职业者|厨师|司机|画家|演员|"
            "歌手|创业者|咨询师|心理咨询师|社工|警察|军人|店员|职员|上班族|打工人")
# Colours and breeds count: "一只橘猫", "一条柯基", "一只两岁的英短".
ZH_PETS = ("(?:[橘白黑灰花黄蓝]|狸花|三花|奶牛|布偶|暹罗|加菲|波斯)?(?:猫咪|小猫|猫)|英短|美短|布偶|"
           "小狗|狗狗|狗|柯基|金毛|泰迪|哈士奇|柴犬|拉布拉多|边牧|比熊|博美|萨摩耶|"
           "兔子|仓鼠|鹦鹉|金鱼|鱼|乌龟|龙猫|刺猬")
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
    # Only the participant's own name: "名字叫…" without 我 names a pet or a relative as often as not,
    # and those are handled with the pet or relative (extract_zh).
    match = re.search(r"(?:我叫做?|我的名字(?:是|叫)|我名字叫|本人叫|叫我)(.+)", clause)
    if not match or re.match(r"(?:什么|啥)", match.group(1)):
        return []
    name = _zh_name_after(match.group(1))
    return [Fact("basic_info", name, key="name")] if name else []


def _zh_nickname(clause: str) -> list[Fact]:
    """"大家都叫我小雨": what others call the participant, kept beside the name."""
    match = re.search(r"^(?:大家|朋友们?|同学们?|同事们?|家里人|身边的人|别人)(?:都|一般|平时)*(?:叫|喊|称呼)我(.+)",
                      clause)
    name = _zh_name_after(match.group(1)) if match else None
    return [Fact("basic_info", name, key="nickname")] if name else []


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
    match = (re.search(r"(?:不吃|不能吃|不敢吃|忌口|吃不了|不太能吃|不怎么吃)(.{1,10})", clause)
             or re.search(r"一点(.{1,6}?)(?:都|也)(?:不吃|不能吃|吃不了|不碰)", clause)
             or re.search(r"^(?:我)?(.{1,8}?)(?:都|也)(?:不吃|不能吃|吃不了|不能碰|碰不得)$", clause))
    if match and not re.search(r"素", clause) and not re.match(r"(?:什么|啥|东西|饭)", match.group(1)):
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


# count, an optional 的-phrase ("两岁的", "叫麻薯的"), the pet
ZH_PET = re.compile(r"(?:养了|养着|养|有)(一只|一条|两只|三只|几只|一个|只|条)?"
                    rf"((?:[^，,。；;！!？?\s的]{{1,6}}的)?)({ZH_PETS})")
ZH_PET_NAMED = re.compile(rf"^我(?:的|家的?)({ZH_PETS})(?:的名字)?(?:叫做?|名叫)(.+)")
ZH_NAMING = re.compile(r"^(?:它|他|她)?(?:的)?(?:名字|小名|大名)?(?:叫做?|名叫|取名叫?)(.+)")


def _zh_pet(clause: str) -> Fact | None:
    """A pet the participant keeps, with its name when the clause gives it ("养了一只叫麻薯的猫",
    "家里有只小狗叫旺财"). The name is the pet's, never the participant's."""
    named = ZH_PET_NAMED.match(clause)
    if named:
        pet, name = named.group(1), _zh_name_after(named.group(2))
        return Fact("social", f"{pet}叫{name}", terms=(_pet_term(pet),), about_other=True) if name else None
    match = ZH_PET.search(clause)
    if not match or re.search(r"(?:没|不)(?:有|养)", clause[:match.start() + 1]):
        return None
    count, modifier, pet = match.group(1) or "一只", match.group(2), match.group(3)
    text = f"养了{count}{modifier}{pet}"
    after = ZH_NAMING.match(clause[match.end():])
    name = _zh_name_after(after.group(1)) if after else None
    if name:
        text += f"，叫{name}"
    return Fact("social", _clip(text), terms=(_pet_term(pet),), about_other=True)


def _pet_term(pet: str) -> str:
    return pet[-1] if pet[-1] in "猫狗鱼" else pet


def _zh_social(clause: str) -> list[Fact]:
    facts: list[Fact] = []
    pet = _zh_pet(clause)
    if pet:
        facts.append(pet)
    match = re.search(rf"^(?:我)?有(一个|两个|个|一位)?({ZH_KIN})", clause)
    if match and not facts:
        facts.append(Fact("social", f"有{match.group(1) or ''}{match.group(2)}", terms=(match.group(2),),
                          about_other=True))
    match = re.search(rf"^我(?:的)?({ZH_KIN})(.{{1,25}})", clause)
    if match and not facts:
        facts.append(Fact("social", _clip(f"{match.group(1)}{match.group(2)}"), terms=(match.group(1),),
                          about_other=True))
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
    _zh_name, _zh_nickname, _zh_age, _zh_occupation, _zh_location, _zh_constraints, _zh_social, _zh_preferences,
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
    """(facts, corrections' removals as facts, correction items) for one Chinese message.

    Chinese drops the subject of a clause that goes on about the previous one: in "我养了一只橘猫，
    名字叫麻薯" the name is the cat's, in "我儿子叫豆豆，今年五岁" the age is the son's. So after a
    clause about a pet or a relative, the following clauses of the sentence without a subject of
    their own (我) add a name to that fact and are never read as the participant's own facts."""
    facts: list[Fact] = []
    taken_back: list[Fact] = []
    replacements: list[Fact] = []
    for sentence in re.findall(r"[^。！？!?；;\n]+[。！？!?；;\n]*", message):
        about: Fact | None = None
        clauses = _zh_clauses(sentence)
        for index, clause in enumerate(clauses):
            if _zh_asks(clause, last=index == len(clauses) - 1, question=bool(re.search(r"[？?]", sentence))):
                continue
            if about is not None and not clause.startswith("我"):
                named = ZH_NAMING.match(clause)
                name = _zh_name_after(named.group(1)) if named else None
                if name and "叫" not in about.text:
                    about.text = _clip(f"{about.text}，叫{name}")
                continue
            about = None
            clause_facts = _zh_clause_facts(clause, taken_back, replacements)
            facts.extend(clause_facts)
            about = next((f for f in clause_facts if f.about_other), None)
    facts.extend(_zh_worries(message))
    return facts, taken_back, replacements


def _zh_asks(clause: str, *, last: bool, question: bool) -> bool:
    """A question or a request is not a statement about oneself: "能帮我准备一下自我介绍吗？" is no goal,
    "你还记得我周末喜欢做什么吗" no preference. The clause before it may still state a fact ("我对海鲜过敏，
    能推荐几道菜吗？")."""
    return bool((last and question) or re.search(r"[吗呢]$|什么|怎么|哪些|哪里|如何|能不能|可不可以|能帮|帮我", clause))


def _zh_clause_facts(clause: str, taken_back: list[Fact], replacements: list[Fact]) -> list[Fact]:
    """The participant's facts in one clause; corrections go to ``taken_back`` and ``replacements``."""
    if ZH_OTHER_SUBJECT.match(clause):
        return _zh_nickname(clause)
    if "不叫" in clause:
        taken_back.append(Fact("basic_info", "", key="name"))
    if ZH_CORRECTION.search(clause) and "过敏" not in clause:
        positive = _zh_positive_form(clause)
        old = [f for rule in ZH_CLAUSE_RULES for f in rule(positive)]
        if old:
            taken_back.extend(old)
            dimension = old[0].dimension if old[0].dimension != "basic_info" else "significant_events"
            replacements.append(Fact(dimension, _clip(re.sub(r"^我", "", clause)), terms=old[0].terms))
            return []
    return [f for rule in ZH_CLAUSE_RULES for f in rule(clause)]


# ---------------------------------------------------------------------------
# English
# ---------------------------------------------------------------------------

EN_ROLES = ("student|engineer|teacher|nurse|doctor|developer|programmer|designer|researcher|candidate|lawyer|"
            "writer|manager|accountant|postdoc|professor|chef|artist|freelancer|scientist|analyst|consultant|"
            "journalist|editor|pharmacist|therapist|librarian|mechanic|driver|cashier|lecturer|undergrad|"
            "undergraduate|graduate|architect|photographer|musician")
EN_PETS = ("cat|dog|kitten|puppy|rabbit|bunny|hamster|parrot|budgie|parakeet|canary|goldfish|fish|turtle|tortoise|"
           "guinea pig|lizard|gecko|snake|ferret|hedgehog|chinchilla|horse|pony|tabby|labrador|retriever|terrier|"
           "poodle|corgi|husky|beagle|spaniel|collie|dachshund|pug|bulldog")
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
# Up to three words between the article and the pet: "an orange cat", "a fluffy white dog",
# "a three-year-old golden retriever" (never across "of": "a lot of cat hair").
_PET_WORDS = r"(?:(?!of\b|and\b|with\b)[\w'-]+ ){0,3}?"
EN_PET_KEPT = re.compile(
    rf"\b(?i:(?:I|we)(?:'ve| have)?\s+(?:have|own|got|keep|adopted)\s+(a|an|one|two|three|four|\d+)\s+"
    rf"({_PET_WORDS})({EN_PETS})(e?s)?\b(?!\s+(?:allerg|hair|food|toy|litter|sitter|caf)))")
EN_PET_NAME_AFTER = re.compile(r"^,?\s+(?i:called|named|whose name is)\s+([A-Z][\w'-]*)"
                               r"|^,\s+([A-Z][a-z'-]+(?: and [A-Z][a-z'-]+)?)(?=[,.!]|\s+who\b|$)")
EN_MY_PET_NAMED = re.compile(rf"\b(?i:my\s+({_PET_WORDS})({EN_PETS})(?:'s name is|'s called| is called| is named"
                             r"|,? called|,? named))\s+([A-Z][\w'-]*)")
EN_KIN_ADJECTIVES = r"(?:(?:little|younger|older|big|elder|baby|twin|kid) )?"
EN_KIN_NAMED = re.compile(rf"\b(?i:my\s+{EN_KIN_ADJECTIVES}({EN_KIN})(?:'s name is|'s called| is called| is named"
                          r"|,? called|,? named))\s+([A-Z][\w'-]*)")
EN_NICKNAME = re.compile(r"\b(?i:(?:everyone|everybody|people|my friends|friends|my family)\s+(?:usually\s+|just\s+|"
                         r"all\s+)?calls?\s+me)\s+([A-Z][\w'-]*)")


def _en(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.I)


def _en_name(s: str) -> list[Fact]:
    """The participant's own name ("my name is", "call me"); what others call them is a nickname, and a
    pet's or relative's name ("my sister's name is Emma") is never theirs."""
    nickname = EN_NICKNAME.search(s)
    facts = [Fact("basic_info", nickname.group(1), key="nickname")] if nickname else []
    match = re.search(r"\b(?:[Mm]y name is|I(?:'m| am) called|[Mm]y name's)\s+([A-Z][\w'-]*(?: [A-Z][\w'-]*)?)", s)
    if not match and not nickname:
        match = re.search(r"\b[Cc]all me\s+([A-Z][\w'-]*(?: [A-Z][\w'-]*)?)", s)
    if not match:
        match = re.search(r"(?:^|^(?:[Hh]i|[Hh]ello|[Hh]ey)[,!]?\s+|[Aa]ctually,?\s+)"
                          r"I(?:'m| am)\s+([A-Z][a-z'-]+)\b", s)
        if match and match.group(1).lower() in EN_NOT_NAMES:
            match = None
    return facts + ([Fact("basic_info", match.group(1), key="name")] if match else [])


def _en_age(s: str) -> list[Fact]:
    match = _en(r"\bI(?:'m| am) (\d{1,2})(?: years? old|\b(?! ?(?:%|am|pm|minutes|hours|days)))").search(s)
    return [Fact("basic_info", match.group(1), key="age")] if match else []


def _en_occupation(s: str) -> list[Fact]:
    facts = []
    role = rf"(?:{EN_ROLES})(?: (?:{EN_ROLES}))?"  # "graduate student" is one role, not "graduate"
    match = _en(rf"\bI(?:'m| am)(?: currently| now)? (?:a|an) ((?:[\w-]+ ){{0,3}}?{role})s?\b").search(s)
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
    # "allergic to peanuts and shellfish" is one list; "... peanuts and I carry an EpiPen" is not
    match = _en(r"\ballergic to ([^,.;!?]{2,60}?)(?=\s+(?:but|because|so|which|since|when|if)\b"
                r"|\s+(?:and|or)\s+(?:I|we|it|my|they|he|she|so)\b|[,.;!?]|$)").search(s)
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


def _en_pet(s: str) -> Fact | None:
    """A pet the participant keeps, as they describe it, with its name ("has an orange cat called Pumpkin")."""
    match = EN_PET_KEPT.search(s)
    if match:
        count, words, pet = match.group(1).lower(), match.group(2), match.group(3).lower()
        plural = match.group(4) or ""
        if not plural and count not in ("a", "an", "one", "1"):
            plural = "" if pet.endswith("fish") else "s"
        named = EN_PET_NAME_AFTER.match(s[match.end():])
        name = next((g for g in named.groups() if g), None) if named else None
        text = f"has {count} {words}{pet}{plural}" + (f" called {name}" if name else "")
        return Fact("social", _clip(text), terms=(pet,))
    match = EN_MY_PET_NAMED.search(s)
    if match:
        pet = match.group(2).lower()
        return Fact("social", _clip(f"has a {match.group(1)}{pet} called {match.group(3)}"), terms=(pet,))
    match = _en(rf"\bmy (?:little |pet )?({EN_PETS})\b").search(s)
    return Fact("social", f"has a {match.group(1).lower()}", terms=(match.group(1).lower(),)) if match else None


def _en_social(s: str) -> list[Fact]:
    facts = []
    pet = _en_pet(s)
    if pet:
        facts.append(pet)
    match = _en(rf"\bI have (a|an|two|three|\d+) (?:younger |older |little |big |twin )?({EN_KIN})s?\b").search(s)
    if match:
        facts.append(Fact("social", f"has {match.group(1)} {match.group(2)}", terms=(match.group(2),)))
    named = EN_KIN_NAMED.search(s)
    if named:
        kin = named.group(1).lower()
        facts.append(Fact("social", f"{kin} is called {named.group(2)}", terms=(kin,)))
    match = _en(rf"\bmy {EN_KIN_ADJECTIVES}({EN_KIN}) ((?:is|was|lives|works|has|loves|wants|thinks|keeps)\b"
                r"[^,.;!?]{2,50})").search(s)
    if match and not named:
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
        if sentence.rstrip().endswith("?"):
            # A question is not a statement about oneself ("Do you remember what I like to do at weekends?"),
            # though a worry asked about is still a worry.
            facts.extend(_en_worry(sentence))
            continue
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
        facts.extend(_en_worry(sentence))
    return facts, taken_back, replacements


def _en_worry(sentence: str) -> list[Fact]:
    if not EN_WORRY.search(sentence) or not _en(r"\b(?:I|I'm|my|me)\b").search(sentence) \
            or EN_NEGATED_WORRY.search(sentence):
        return []
    text = _clip(re.sub(r"^(?:and |but |so |honestly,? |to be honest,? )?I(?:'m| am| feel| have been|'ve been) ",
                        "", sentence.rstrip(".!?"), flags=re.I))
    return [Fact("significant_events", text, terms=(text,))]


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def extract_message(text: str) -> tuple[list[Fact], list[Fact], list[Fact]]:
    return extract_zh(text) if detect(text, default="zh") == "zh" else extract_en(text)


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
