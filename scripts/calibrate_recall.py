"""Calibrate L4 forgetting-curve recall for the configured embedder, schedule and parameters.

Prints (1) how the recall-candidate rule judges hand-labelled short messages
and how many sample messages it leaves out, (2) the measured cosine of related
and unrelated pairs in a bundled bilingual sample (16 participants, half of them
held out from the choice of the bounds), (3) p over the study's real gaps for a
range of raw cosines and their mapped r, and (4) the share of the sample's
memories recalled at T2, T3 and T4, per language and split, when the schedule is
simulated on a ManualClock with g updates. Saves the curves and shares as a PNG.
Warns loudly on stderr when the configuration makes recall impossible (nothing
at any task) or universal (more than 5 % of the unrelated candidates recalled,
or 90 % or more of the memories), and when a language recalls nothing relevant
at some task; ``--strict`` exits 2 on the first two.

    .venv/bin/python scripts/calibrate_recall.py [--preset seed_literal] [--out docs/_generated/recall.png]

The numbers and the reasoning behind the default preset: docs/recall_calibration.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import lru_cache
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np

from config import SECONDS_PER_DAY
from services import recall_model as rm
from services.clock import ManualClock
from services.memory.relevance import LogisticRelevance, fit_monotone
from services.memory.retrieval import HybridRetriever, RetrievalDoc, exchange_text, neighbour_text
from services.salience import lexicon_scores
from services.study import DEFAULT_STUDY_FILE, Study, load_study

REPO_ROOT = Path(__file__).resolve().parents[1]

DEFAULT_OUT = REPO_ROOT / "docs" / "_generated" / "recall_calibration.png"
UNIVERSAL_SHARE = 0.9
# Unrelated memories recalled, as a share of the unrelated candidates a task's messages saw: the embedder's
# related and unrelated cosines overlap, so "never" is not attainable; above this, recall is not selective.
UNRELATED_TOLERANCE = 0.05
R_GRID = (0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
# The pre-registered targets (issue 9): on held-out participants of each language, the share of relevant
# memories recalled at each task, falling with age, and the share of unrelated candidates recalled.
TARGETS = {"T2": 0.60, "T3": 0.30, "T4": 0.15}
UNRELATED_MAX = 0.03
# Curve time units tried by --fit, in days per unit (t = study days / unit).
TIME_UNIT_GRID_DAYS = (7, 14, 30, 45, 60, 90, 120, 180, 270, 365, 540, 730)
DEFAULT_FEATURES = ("fused", "dense_z", "cosine")
TURN_GAPS = (0.0, 3.0, 10.0, 20.0, 40.0)

# A bundled sample: two Chinese participants and one English one. Each message is
# (text, topics, (intensity, disclosure, value)); a stored memory is relevant to a
# probe when they share a topic. Filler has no topic, so it is relevant to nothing.
_FILLER = (0.0, 0.0, 0.0)
SAMPLE: dict[str, dict[str, list[tuple[str, set[str], tuple[float, float, float] | None]]]] = {
    "zh": {
        "T1": [
            ("你好，我叫林晓雨，朋友们都叫我小雨。", {"name"}, (0.2, 0.4, 0.1)),
            ("我在读心理学硕士，研究方向是情绪调节。", {"study"}, (0.2, 0.4, 0.4)),
            ("我对海鲜过敏，吃虾和螃蟹会起疹子，严重时还要去医院。", {"allergy"}, (0.5, 0.6, 0.3)),
            ("我家养了一只橘猫，叫年糕，已经三岁了，特别黏人。", {"cat"}, (0.6, 0.5, 0.5)),
            ("最近在准备申请博士，特别焦虑，总担心导师不回我的邮件。", {"phd"}, (0.8, 0.8, 0.7)),
            ("周末我喜欢去公园跑步，一般跑五公里。", {"running"}, (0.3, 0.3, 0.3)),
            ("今天天气还不错。", set(), _FILLER),
            ("嗯嗯，好的。", set(), _FILLER),
            ("哈哈，是这样的。", set(), _FILLER),
            ("现在是下午三点。", set(), _FILLER),
        ],
        "T2": [
            ("你还记得我叫什么名字吗？", {"name"}, (0.1, 0.1, 0.1)),
            ("这几天年糕有点不爱吃东西，我挺担心它的。", {"cat"}, (0.6, 0.5, 0.4)),
            ("这周我又去跑步了，腿有点酸。", {"running"}, (0.2, 0.2, 0.1)),
            ("今天下雨了，我在宿舍看了一下午书。", set(), _FILLER),
            ("好的，谢谢你。", set(), _FILLER),
        ],
        "T3": [
            ("能帮我制定一周的饮食计划吗？有些东西我不能吃。", {"allergy"}, (0.1, 0.3, 0.3)),
            ("朋友请我去吃海鲜自助，我该怎么拒绝？", {"allergy"}, (0.3, 0.3, 0.2)),
            ("我下周要给博士导师发套磁邮件，心里很紧张，能帮我改一下吗？", {"phd"}, (0.7, 0.6, 0.6)),
            ("你觉得周末看什么电影好？", set(), _FILLER),
            ("好的，我试试。", set(), _FILLER),
        ],
        "T4": [
            ("博士申请的结果出来了，我拿到了面试机会！", {"phd"}, (0.9, 0.6, 0.7)),
            ("年糕现在又能吃能睡了。", {"cat"}, (0.5, 0.3, 0.3)),
            ("我的毕业论文是关于情绪调节的，下一步该怎么写？", {"study"}, (0.2, 0.3, 0.4)),
            ("谢谢你这三周的陪伴，再见。", set(), (0.4, 0.2, 0.2)),
        ],
    },
    "zh2": {
        "T1": [
            ("我叫王浩，在一家互联网公司做后端开发。", {"name", "work"}, (0.1, 0.4, 0.3)),
            ("我乳糖不耐受，喝牛奶就会肚子疼。", {"diet"}, (0.3, 0.5, 0.2)),
            ("我养了一条金毛，叫豆豆，每天早上都要遛它。", {"dog"}, (0.5, 0.5, 0.5)),
            ("最近在考虑跳槽，又怕新工作不稳定，晚上经常睡不着。", {"job_change"}, (0.8, 0.7, 0.6)),
            ("我业余时间在学吉他，已经练了半年了。", {"guitar"}, (0.3, 0.3, 0.4)),
            ("嗯，明白了。", set(), _FILLER),
            ("刚才开了一个很长的会。", set(), (0.1, 0.0, 0.0)),
            ("好的。", set(), _FILLER),
        ],
        "T2": [
            ("豆豆昨天把我的拖鞋咬坏了，哈哈。", {"dog"}, (0.4, 0.3, 0.2)),
            ("我今天终于把一首完整的曲子弹下来了！", {"guitar"}, (0.6, 0.3, 0.4)),
            ("最近天气有点冷。", set(), _FILLER),
        ],
        "T3": [
            ("帮我安排一下这周的早餐吧，要方便一点的。", {"diet"}, (0.0, 0.2, 0.2)),
            ("我拿到了一个新公司的录用通知，但还在犹豫要不要去。", {"job_change", "work"}, (0.7, 0.6, 0.6)),
            ("周末带豆豆去哪里玩比较好？", {"dog"}, (0.3, 0.2, 0.3)),
        ],
        "T4": [
            ("我最后决定跳槽了，下周一去新公司报到。", {"job_change", "work"}, (0.7, 0.6, 0.6)),
            ("最近吉他练得少了，有点生疏。", {"guitar"}, (0.3, 0.2, 0.3)),
            ("这三周聊得很开心，谢谢你。", set(), (0.4, 0.2, 0.2)),
        ],
    },
    "en": {
        "T1": [
            ("Hi, I'm Alex Chen, most people just call me Alex.", {"name"}, (0.2, 0.4, 0.1)),
            ("I work as a data analyst at a small logistics company.", {"work"}, (0.1, 0.3, 0.3)),
            ("I'm allergic to seafood, shrimp and crab give me hives.", {"allergy"}, (0.5, 0.6, 0.3)),
            ("I have a grey cat called Mochi, she is four years old.", {"cat"}, (0.5, 0.5, 0.5)),
            ("I'm applying for PhD programmes and I'm really anxious about it.", {"phd"}, (0.8, 0.8, 0.7)),
            ("My younger sister is starting university in Beijing this autumn.", {"sister"}, (0.4, 0.5, 0.6)),
            ("The weather is nice today.", set(), _FILLER),
            ("OK, sure.", set(), _FILLER),
            ("Haha, yes.", set(), _FILLER),
            ("It's three in the afternoon now.", set(), _FILLER),
        ],
        "T2": [
            ("Do you remember my name?", {"name"}, (0.1, 0.1, 0.1)),
            ("Mochi hasn't been eating much these days, I'm worried.", {"cat"}, (0.6, 0.5, 0.4)),
            ("My sister just started term and I worry about her alone in Beijing.", {"sister"}, (0.5, 0.5, 0.5)),
            ("It rained today so I stayed home reading.", set(), _FILLER),
        ],
        "T3": [
            ("Can you make me a meal plan for next week? There are things I can't eat.", {"allergy"},
             (0.1, 0.3, 0.3)),
            ("I have to email a potential PhD supervisor next week and I'm nervous.", {"phd"}, (0.7, 0.6, 0.6)),
            ("What movie should I watch this weekend?", set(), _FILLER),
        ],
        "T4": [
            ("I got a PhD interview invitation!", {"phd"}, (0.9, 0.6, 0.7)),
            ("My manager asked me to build a dashboard for shipment delays.", {"work"}, (0.2, 0.2, 0.3)),
            ("Thanks for these three weeks, goodbye.", set(), (0.4, 0.2, 0.2)),
        ],
    },
}

# Further participants written for the re-calibration of per-language bounds. Their messages carry no hand
# scores (None): they are scored by the offline lexicon scorer, as offline consolidation scores them. Later
# messages often come back to a topic in other words ("我的小宠物最近不爱吃东西" about a cat called 麻薯,
# "晚饭想吃点海边的特色菜" for a participant allergic to seafood), which is what makes recall hard. Topic-less
# messages are acknowledgements and generic questions; small talk has a topic of its own (weather ...).
_MORE: dict[str, dict[str, list[tuple[str, set[str]]]]] = {
    "zh3": {
        "T1": [("大家好，我叫陈静，在上海一家医院当护士。", {"name", "work"}),
               ("我养了一只叫麻薯的猫，白色的，很胆小。", {"cat"}),
               ("我对花生过敏，吃到一点就会喉咙发痒。", {"allergy"}),
               ("我妈妈去年做了手术，现在身体还是不太好，我很担心她。", {"mother"}),
               ("我最近在自学日语，打算明年春天去日本看樱花。", {"japan"}),
               ("上夜班之后经常睡不着，只能躺着刷手机。", {"sleep"}),
               ("今天下了一整天的雨。", {"weather"}),
               ("嗯嗯，好的。", set()),
               ("哈哈哈，对啊。", set())],
        "T2": [("我的小宠物最近不爱吃东西，是不是生病了？", {"cat"}),
               ("这周连着上了四个夜班，白天怎么也睡不踏实。", {"sleep", "work"}),
               ("五十音图我终于背完了！", {"japan"}),
               ("你还记得我之前跟你说过什么吗？", set()),
               ("好的，谢谢。", set())],
        "T3": [("能帮我列一个零食清单吗？有些坚果我碰不得。", {"allergy"}),
               ("我妈下个月要去复查，我想请假陪她。", {"mother"}),
               ("帮我规划一下去东京的五天行程吧。", {"japan"}),
               ("最近天气忽冷忽热的。", {"weather"}),
               ("嗯，明白了。", set())],
        "T4": [("妈妈复查结果很好，医生说恢复得不错！", {"mother"}),
               ("机票已经订好了，下个月就出发去大阪。", {"japan"}),
               ("最近终于能睡个整觉了。", {"sleep"}),
               ("谢谢你，再见啦。", set())],
    },
    "zh4": {
        "T1": [("我叫刘洋，在杭州一所高中教数学。", {"name", "work"}),
               ("我对海鲜过敏，螃蟹虾都不能碰。", {"allergy"}),
               ("家里有一条柯基，叫可乐，特别能吃。", {"dog"}),
               ("我在准备人生第一个全程马拉松，每周跑三次。", {"marathon"}),
               ("女朋友在深圳工作，我们异地快两年了，有时候挺累的。", {"partner"}),
               ("今天食堂的红烧肉还挺好吃。", {"canteen"}),
               ("好吧。", set()),
               ("收到，谢谢！", set())],
        "T2": [("晚饭想吃点海边的特色菜，有什么推荐？", {"allergy"}),
               ("我家那只小短腿昨天把沙发咬了个洞。", {"dog"}),
               ("这周练了一次三十公里长距离，膝盖有点疼。", {"marathon"}),
               ("她这个周末要飞过来看我，好开心！", {"partner"}),
               ("哈哈，好的。", set())],
        "T3": [("帮我安排一下这周的饮食，我要为比赛补充营养。", {"marathon", "allergy"}),
               ("学生期中考试成绩出来了，有几个孩子退步很大。", {"work"}),
               ("我在考虑要不要辞职去深圳，这样就不用异地了。", {"partner", "work"}),
               ("今天下班路上堵了一个小时。", {"commute"}),
               ("行，我知道了。", set())],
        "T4": [("我跑完全马了，四小时十二分！", {"marathon"}),
               ("可乐今天去打疫苗了，很乖。", {"dog"}),
               ("我们决定明年结婚了。", {"partner"}),
               ("这几周谢谢你，拜拜。", set())],
    },
    "zh5": {
        "T1": [("我叫赵敏，在武汉读大三，学的是建筑。", {"name", "study"}),
               ("我吃素已经五年了，一点肉都不吃。", {"diet"}),
               ("宿舍里偷偷养了一只仓鼠，叫团子。", {"hamster"}),
               ("在准备雅思，想申请去英国读研，但口语一直上不去。", {"abroad"}),
               ("和室友最近闹得很僵，回宿舍都觉得压抑。", {"roommate"}),
               ("周末喜欢去美术馆画速写。", {"drawing"}),
               ("今天早上起晚了，差点迟到。", {"morning"}),
               ("嗯嗯。", set())],
        "T2": [("团子这两天总躲在窝里不出来。", {"hamster"}),
               ("雅思考试报名了，下个月考。", {"abroad"}),
               ("周末去东湖边画了一下午。", {"drawing"}),
               ("你还记得我吗？", set()),
               ("好滴。", set())],
        "T3": [("帮我推荐几家学校附近的餐厅吧，我有饮食上的讲究。", {"diet"}),
               ("她昨天又把我的东西扔了，我真的受不了了。", {"roommate"}),
               ("能帮我改一下留学文书吗？", {"abroad"}),
               ("今天的课好无聊。", {"class"}),
               ("好的好的。", set())],
        "T4": [("雅思出分了，口语考了6.5！", {"abroad"}),
               ("我申请换宿舍成功了，终于解脱了。", {"roommate"}),
               ("最近迷上了水彩。", {"drawing"}),
               ("谢谢，回头聊。", set())],
    },
    "zh6": {
        "T1": [("你好，我是孙磊，在深圳做产品经理。", {"name", "work"}),
               ("我胃不好，一吃辣就胃疼。", {"diet"}),
               ("我爸上个月住院了，是心脏的问题，我每周末都飞回老家。", {"father"}),
               ("一直想学游泳，但是有点怕水。", {"swim"}),
               ("桌上养了两条金鱼，看着它们能放松一点。", {"fish"}),
               ("公司最近天天加班到十一点。", {"overtime", "work"}),
               ("好的，明白。", set()),
               ("哈哈。", set())],
        "T2": [("同事约我去吃火锅，我有点犹豫。", {"diet"}),
               ("老爷子出院了，不过还要定期复查。", {"father"}),
               ("报了一个成人游泳班，第一节课呛了好几口水。", {"swim"}),
               ("你记得我跟你说过什么吗？", set())],
        "T3": [("能帮我做一个下周的午餐计划吗？", {"diet"}),
               ("这个版本上线又要延期了，老板很不满意。", {"work", "overtime"}),
               ("我在考虑把父母接到深圳来住。", {"father"}),
               ("楼下新开了一家奶茶店。", {"shop"}),
               ("嗯，好的，谢谢。", set())],
        "T4": [("我现在能游二十五米了！", {"swim"}),
               ("鱼缸里有一条金鱼死了，有点难过。", {"fish"}),
               ("终于不用天天加班了，项目告一段落。", {"overtime", "work"}),
               ("再见，谢谢你。", set())],
    },
    "zh7": {
        "T1": [("我叫周婷，在南京一家银行当柜员。", {"name", "work"}),
               ("我有哮喘，换季的时候特别容易犯。", {"asthma"}),
               ("最近下班后都在复习，准备考公务员。", {"exam"}),
               ("上个月奶奶去世了，我到现在还是很难过。", {"grandma"}),
               ("周末喜欢在家烤蛋糕和饼干。", {"baking"}),
               ("楼下的超市在打折。", {"shop"}),
               ("好吧，谢谢。", set())],
        "T2": [("这两天降温，晚上咳得睡不着。", {"asthma"}),
               ("行测的题目我总是做不完。", {"exam"}),
               ("昨天梦到奶奶了，醒来哭了好久。", {"grandma"}),
               ("你还记得我说过的事吗？", set()),
               ("嗯。", set())],
        "T3": [("帮我排一个考前三周的复习计划吧。", {"exam"}),
               ("我想给同事做一个生日蛋糕，有什么好看的款式？", {"baking"}),
               ("春天花粉多，出门要注意什么？", {"asthma"}),
               ("今天排队的客户特别多。", {"work"}),
               ("明白啦。", set())],
        "T4": [("笔试成绩出来了，我进面试了！", {"exam"}),
               ("清明节回老家给奶奶扫墓了。", {"grandma"}),
               ("我烤的戚风蛋糕终于没有塌。", {"baking"}),
               ("谢谢你，拜拜！", set())],
    },
    "zh8": {
        "T1": [("我叫黄凯，是个自由摄影师，住在成都。", {"name", "work"}),
               ("虽然是成都人，但我一点辣都不吃。", {"diet"}),
               ("家里有只鹦鹉，会说你好和再见。", {"parrot"}),
               ("我爸妈一直反对我做摄影，觉得不稳定，我们经常吵架。", {"parents", "work"}),
               ("我的梦想是明年办一次个人影展。", {"exhibition"}),
               ("去年打球伤了膝盖，现在还不能剧烈运动。", {"knee"}),
               ("今天拍了一组街景。", {"work"}),
               ("嗯嗯，好。", set())],
        "T2": [("朋友约我去吃串串，我该怎么点菜？", {"diet"}),
               ("我妈今天又打电话让我去考编制。", {"parents"}),
               ("鸟笼里那个小话痨今天学会了吹口哨。", {"parrot"}),
               ("你还记得我吗？", set())],
        "T3": [("帮我写一份影展的策划方案吧。", {"exhibition"}),
               ("医生说膝盖可以开始做康复训练了，有什么建议？", {"knee"}),
               ("下周要给一对新人拍婚纱照。", {"work"}),
               ("今天外面好热。", {"weather"}),
               ("好的，谢谢你。", set())],
        "T4": [("影展的场地定下来了，在一家咖啡馆。", {"exhibition"}),
               ("我爸第一次夸我拍得好看。", {"parents", "work"}),
               ("我终于可以慢跑了。", {"knee"}),
               ("就聊到这吧，再见。", set())],
    },
    "en2": {
        "T1": [("Hey, I'm Sam Turner, I write software for a bank in Manchester.", {"name", "work"}),
               ("I've been vegetarian for about ten years now.", {"diet"}),
               ("We've got a scruffy terrier named Biscuit who steals socks.", {"dog"}),
               ("I'm training for my first half marathon in October.", {"running"}),
               ("My dad was diagnosed with Parkinson's last year and it's been hard on the family.", {"father"}),
               ("I'm learning Spanish on my commute, about twenty minutes a day.", {"spanish"}),
               ("It's been pouring with rain all week.", {"weather"}),
               ("Cool, thanks.", set()),
               ("Haha, fair enough.", set())],
        "T2": [("The little rascal chewed through my new trainers yesterday.", {"dog"}),
               ("Did a 15k long run on Sunday, legs are dead.", {"running"}),
               ("Dad's new medication seems to help with the tremor.", {"father"}),
               ("What do you remember about me?", set()),
               ("Ok, thanks.", set())],
        "T3": [("Can you suggest some high-protein dinners that don't involve meat?", {"diet", "running"}),
               ("I'm planning a trip to Madrid and want to practise ordering food.", {"spanish"}),
               ("My team lead wants me to take over the payments project.", {"work"}),
               ("The bus was late again this morning.", {"commute"}),
               ("Alright, got it.", set())],
        "T4": [("Finished the half marathon in 1:52!", {"running"}),
               ("Dad and I went for a short walk together at the weekend, it meant a lot.", {"father"}),
               ("Biscuit had his annual check-up at the vet, all fine.", {"dog"}),
               ("Thanks for everything, bye!", set())],
    },
    "en3": {
        "T1": [("My name's Emma, I teach year three at a primary school in Dublin.", {"name", "work"}),
               ("I'm lactose intolerant, so dairy is a no-go for me.", {"diet"}),
               ("My sister is getting married in June and I have to give a speech, which terrifies me.",
                {"wedding"}),
               ("I've played the violin since I was seven, I'm in a community orchestra.", {"violin"}),
               ("We're trying to buy our first flat and the mortgage stuff is stressing me out.", {"flat"}),
               ("We have a budgie called Kiwi who whistles at the kettle.", {"bird"}),
               ("I had toast for breakfast.", {"breakfast"}),
               ("Yeah, sure.", set())],
        "T2": [("I tried writing a few jokes for the toast at the reception but they fell flat.", {"wedding"}),
               ("The bank finally approved our mortgage in principle!", {"flat"}),
               ("Our little bird learned a new tune.", {"bird"}),
               ("Do you remember my name?", {"name"}),
               ("Okay.", set())],
        "T3": [("Could you plan a week of breakfasts that won't upset my stomach?", {"diet", "breakfast"}),
               ("Orchestra rehearsals start again next week and my fingers are rusty.", {"violin"}),
               ("Can you help me tidy up the speech for the big day?", {"wedding"}),
               ("The kids were so loud today.", {"work"}),
               ("Right, thanks.", set())],
        "T4": [("We got the keys to the flat yesterday!", {"flat"}),
               ("The wedding was beautiful and people laughed at my speech.", {"wedding"}),
               ("We have our spring concert on Saturday.", {"violin"}),
               ("Thanks a lot, take care.", set())],
    },
    "en4": {
        "T1": [("I'm Marcus, I work as a paramedic in Toronto.", {"name", "work"}),
               ("I'm allergic to peanuts, I always carry an EpiPen.", {"allergy"}),
               ("My son starts kindergarten in September and I'm nervous about how he'll cope.", {"son"}),
               ("We keep two guinea pigs, Salt and Pepper.", {"pets"}),
               ("I play pickup basketball with friends on Thursdays.", {"basketball"}),
               ("Night shifts wreck my sleep schedule.", {"sleep", "work"}),
               ("The coffee at the station is awful.", {"coffee"}),
               ("Sure thing.", set()),
               ("Ha, ok.", set())],
        "T2": [("We visited his new classroom and he hid behind my leg the whole time.", {"son"}),
               ("One of the little furballs has stopped eating hay.", {"pets"}),
               ("I sprained my ankle going for a rebound.", {"basketball"}),
               ("Do you remember what I told you last time?", set())],
        "T3": [("Can you help me pack snacks for a road trip? I need to be careful about nuts.", {"allergy"}),
               ("I got moved to nights again for the whole month.", {"sleep", "work"}),
               ("How can I help a shy five-year-old make friends?", {"son"}),
               ("My car needs new tires.", {"car"}),
               ("Got it, thanks.", set())],
        "T4": [("He loves school now and has a best friend already.", {"son"}),
               ("I'm back on the court, ankle's fine.", {"basketball"}),
               ("Finally back on day shifts and sleeping properly.", {"sleep", "work"}),
               ("Bye for now.", set())],
    },
    "en5": {
        "T1": [("Hi, Hannah here, I'm a freelance graphic designer in Bristol.", {"name", "work"}),
               ("I have coeliac disease so I have to eat gluten-free.", {"diet"}),
               ("I have an orange cat, Pumpkin, who sleeps on my keyboard.", {"cat"}),
               ("Work has dried up a bit and I'm worried about paying rent.", {"money", "work"}),
               ("I go bouldering twice a week, it clears my head.", {"climbing"}),
               ("My gran moved into a care home last month and I visit her on Sundays.", {"gran"}),
               ("There's a lot of traffic outside today.", {"traffic"}),
               ("Nice, thanks.", set())],
        "T2": [("My furry flatmate knocked a mug of tea onto my drawings.", {"cat"}),
               ("I landed a new branding client, so rent is sorted for now.", {"money", "work"}),
               ("Gran didn't recognise me on Sunday, that was hard.", {"gran"}),
               ("What do you know about me?", set()),
               ("Ok cool.", set())],
        "T3": [("Can you suggest a birthday cake recipe I can actually eat?", {"diet"}),
               ("I finally sent the first logo drafts to the new client.", {"work"}),
               ("I want to try an outdoor climbing trip, where should I start?", {"climbing"}),
               ("My phone screen cracked.", {"phone"}),
               ("Sounds good.", set())],
        "T4": [("Topped out on my first V4 at the climbing wall!", {"climbing"}),
               ("Gran had a good week, she remembered my name.", {"gran"}),
               ("Pumpkin turned eight today.", {"cat"}),
               ("That's all, thanks, bye.", set())],
    },
    "en6": {
        "T1": [("Hi, I'm Leo, a master's student in economics in Amsterdam.", {"name", "study"}),
               ("I'm allergic to shellfish, mussels put me in hospital once.", {"allergy"}),
               ("My thesis is due in eight weeks and I've barely started, I'm panicking.", {"thesis", "study"}),
               ("My girlfriend lives in Lisbon, we video call every night.", {"partner"}),
               ("I'm teaching myself guitar with online videos.", {"guitar"}),
               ("My little brother just got his driving licence.", {"brother"}),
               ("I cycled to campus in the wind today.", {"cycling"}),
               ("Fine, thanks.", set())],
        "T2": [("Friends want to go out for moules-frites on Friday, what should I do?", {"allergy"}),
               ("My supervisor said my literature review is too thin.", {"thesis", "study"}),
               ("I can finally play a full song on the six-string!", {"guitar"}),
               ("She booked a flight to visit me next month.", {"partner"}),
               ("Okay, see you.", set())],
        "T3": [("Help me plan my writing schedule for the next month.", {"thesis"}),
               ("What should we do when she visits Amsterdam?", {"partner"}),
               ("My brother crashed Dad's car, nobody was hurt.", {"brother"}),
               ("It's freezing today.", {"weather"}),
               ("Thanks, noted.", set())],
        "T4": [("I submitted my thesis this morning!", {"thesis", "study"}),
               ("My girlfriend got a job offer in Amsterdam, she's moving here.", {"partner"}),
               ("I played guitar at a friend's party.", {"guitar"}),
               ("Cheers, goodbye.", set())],
    },
    "en7": {
        "T1": [("I'm Grace, a pharmacist in Leeds.", {"name", "work"}),
               ("I've had type 1 diabetes since I was twelve, so I count carbs at every meal.", {"diet"}),
               ("My driving test is in three weeks and I keep stalling the car.", {"driving"}),
               ("My mum lives in Lagos and I haven't seen her in two years.", {"mother"}),
               ("I'm presenting a poster at a conference next month and public speaking scares me.", {"conference"}),
               ("I have a tortoise called Sheldon who is older than me.", {"tortoise"}),
               ("I watched a cooking show last night.", {"tv"}),
               ("Yep.", set())],
        "T2": [("Had my third lesson on roundabouts, still terrifying.", {"driving"}),
               ("Video called home yesterday, she looked tired.", {"mother"}),
               ("My shelled friend has started eating strawberries again.", {"tortoise"}),
               ("Do you remember who I am?", set()),
               ("Alright.", set())],
        "T3": [("Can you plan a week of lunches that keep my blood sugar stable?", {"diet"}),
               ("Help me practise answering questions about my poster.", {"conference"}),
               ("I'm thinking of booking a flight to Nigeria for Christmas.", {"mother"}),
               ("My neighbour's dog barked all night.", {"neighbour"}),
               ("Cheers.", set())],
        "T4": [("I passed my driving test on the first try!", {"driving"}),
               ("The conference went well, nobody asked anything too hard.", {"conference"}),
               ("Flights to Lagos are booked for December.", {"mother"}),
               ("Thank you, goodbye.", set())],
    },
    "en8": {
        "T1": [("Hey, I'm Jake, first year biology at Cardiff.", {"name", "study"}),
               ("I'm really homesick, I miss my family and our old labrador Max.", {"home", "dog"}),
               ("I play rugby for the university second team.", {"rugby"}),
               ("I work weekends at a café to pay for stuff.", {"cafe"}),
               ("I failed my first chemistry test and I'm scared I'll fail the year.", {"exam", "study"}),
               ("I'm allergic to cats, which is awkward because my flatmate has one.", {"allergy", "flatmate"}),
               ("Had pasta again tonight.", {"dinner"}),
               ("Yeah ok.", set())],
        "T2": [("Mum sent me a photo of Max sleeping on my bed.", {"home", "dog"}),
               ("We won our match on Saturday, I scored a try!", {"rugby"}),
               ("My eyes were itching all evening after sitting on the sofa.", {"allergy"}),
               ("What do you remember?", set()),
               ("Thanks.", set())],
        "T3": [("Can you help me make a revision plan for the chemistry resit?", {"exam", "study"}),
               ("My manager wants me to work Sundays too, how do I say no?", {"cafe"}),
               ("Should I ask my flatmate to keep her pet out of the living room?", {"flatmate", "allergy"}),
               ("The library was packed today.", {"library"}),
               ("Got it.", set())],
        "T4": [("I passed the chemistry resit!", {"exam", "study"}),
               ("Going home for reading week, can't wait to see everyone.", {"home"}),
               ("Coach picked me for the first team.", {"rugby"}),
               ("Cheers for the chats, bye.", set())],
    },
    # Added for the calibrated relevance model (issue 9): four more participants per language, written
    # before the model was first fitted. Their later messages mix the two ways people come back to a
    # topic: naming it again ("豆包", "the allotment") and paraphrasing it ("我家那只小狗", "my green patch").
    "zh9": {
        "T1": [("我叫许诺，在广州做会计，今年二十八岁。", {"name", "work"}),
               ("我养了一只柴犬叫豆包，每天下班都要带它去江边散步。", {"dog"}),
               ("我对芒果过敏，嘴唇一碰就肿。", {"allergy"}),
               ("我弟弟今年高考，全家都很紧张。", {"brother"}),
               ("最近迷上了做陶艺，周末去工作室拉坯。", {"pottery"}),
               ("年底想换个大一点的房子，正在看首付。", {"house"}),
               ("今天地铁特别挤。", {"commute"}),
               ("哈哈，好的。", set())],
        "T2": [("豆包昨天在江边追鸽子，差点掉水里。", {"dog"}),
               ("我弟这次模拟考进步了三十分！", {"brother"}),
               ("我做的第一个杯子烧出来了，歪歪扭扭的。", {"pottery"}),
               ("朋友送了我一箱热带水果，我该怎么处理？", {"allergy"}),
               ("好的，谢谢。", set())],
        "T3": [("帮我做一个月的存钱计划吧，我想攒首付。", {"house"}),
               ("我家那只小狗最近掉毛特别厉害，怎么办？", {"dog"}),
               ("高考还有一个月，我能为家里做点什么？", {"brother"}),
               ("今天报税报到很晚。", {"work"}),
               ("嗯，明白了。", set())],
        "T4": [("我弟考上了中山大学！", {"brother"}),
               ("我们看中了一套两居室，下周签合同。", {"house"}),
               ("我在陶艺工作室办了年卡。", {"pottery"}),
               ("谢谢你，拜拜。", set())],
    },
    "zh10": {
        "T1": [("我是何佳，在西安读研一，专业是考古。", {"name", "study"}),
               ("我有偏头痛，一熬夜就犯。", {"migraine"}),
               ("宿舍楼下有只流浪猫，我每天都去喂它，给它起名叫煤球。", {"cat"}),
               ("导师让我暑假跟着去工地发掘，我有点怕晒。", {"dig", "study"}),
               ("我和男朋友是高中同学，他现在在北京工作。", {"partner"}),
               ("我喜欢弹古筝，已经考到了八级。", {"guzheng"}),
               ("今天食堂的肉夹馍很好吃。", {"canteen"}),
               ("嗯嗯。", set())],
        "T2": [("昨晚赶论文到两点，今天头疼得厉害。", {"migraine"}),
               ("煤球今天居然让我摸它了！", {"cat"}),
               ("他说下个月来西安看我。", {"partner"}),
               ("你还记得我说过什么吗？", set())],
        "T3": [("帮我列一个去野外考古要带的东西清单。", {"dig", "study"}),
               ("楼下那个小家伙好几天没出现了，我好担心。", {"cat"}),
               ("想在学院的晚会上表演个节目，弹什么曲子好？", {"guzheng"}),
               ("今天图书馆没位置了。", {"library"}),
               ("好的好的。", set())],
        "T4": [("工地发掘结束了，晒黑了好几个度。", {"dig"}),
               ("晚会上我弹了《渔舟唱晚》，大家都鼓掌了。", {"guzheng"}),
               ("我们决定毕业后一起去北京。", {"partner"}),
               ("先这样，再见。", set())],
    },
    "zh11": {
        "T1": [("我叫马可欣，在重庆一家幼儿园当老师。", {"name", "work"}),
               ("我不能喝酒，一喝就全身发红。", {"alcohol"}),
               ("家里有两只兔子，一只叫糯米，一只叫芝麻。", {"rabbit"}),
               ("我外婆八十多岁了，一个人住在乡下，我很放心不下。", {"grandma"}),
               ("在准备教师资格面试，讲课的时候总是紧张。", {"interview"}),
               ("周末喜欢和朋友去爬缙云山。", {"hiking"}),
               ("今天下午下了一场暴雨。", {"weather"}),
               ("好滴。", set())],
        "T2": [("同事聚餐非要让我喝几杯，我该怎么推？", {"alcohol"}),
               ("糯米这两天不太吃草。", {"rabbit"}),
               ("给老人家打了电话，她说腿又疼了。", {"grandma"}),
               ("好的呀。", set())],
        "T3": [("帮我模拟一下试讲吧，题目是认识颜色。", {"interview"}),
               ("我想周末回去看她，给她带点什么好？", {"grandma"}),
               ("家里那两个毛团子总打架，怎么办？", {"rabbit"}),
               ("今天班上有个小朋友哭了一上午。", {"work"}),
               ("嗯，好吧。", set())],
        "T4": [("面试通过了，下个月拿证！", {"interview"}),
               ("我把外婆接到城里住了几天。", {"grandma"}),
               ("周末又去爬山了，这次登顶了。", {"hiking"}),
               ("谢谢你，下次聊。", set())],
    },
    "zh12": {
        "T1": [("你好，我是吴迪，在苏州一家工厂做质检。", {"name", "work"}),
               ("我有糖尿病，吃东西要控制糖分。", {"diabetes"}),
               ("我女儿今年上小学一年级，每天接送她是我最开心的时候。", {"daughter"}),
               ("我在自学编程，想以后转行做软件测试。", {"coding", "work"}),
               ("我喜欢钓鱼，经常去太湖边上钓一整天。", {"fishing"}),
               ("最近腰不好，站久了就疼。", {"back"}),
               ("今天厂里发了月饼。", {"factory"}),
               ("行吧。", set())],
        "T2": [("孩子今天在学校得了一朵小红花。", {"daughter"}),
               ("Python的循环我终于弄明白了。", {"coding"}),
               ("上周末在湖边坐了一天，只钓到两条小鲫鱼。", {"fishing"}),
               ("你还记得我吗？", set()),
               ("嗯。", set())],
        "T3": [("能帮我安排一周的早餐吗？我得注意血糖。", {"diabetes"}),
               ("想给我家小姑娘报个兴趣班，有什么建议？", {"daughter"}),
               ("我投了三份测试岗位的简历。", {"coding", "work"}),
               ("今天加班到九点。", {"factory"}),
               ("明白啦。", set())],
        "T4": [("我拿到了一家软件公司的测试岗位录用！", {"coding", "work"}),
               ("做了两周理疗，腰好多了。", {"back"}),
               ("女儿期末考了双百。", {"daughter"}),
               ("拜拜。", set())],
    },
    "en9": {
        "T1": [("I'm Priya, I'm a junior doctor in Birmingham.", {"name", "work"}),
               ("I'm allergic to penicillin, which is ironic given my job.", {"allergy"}),
               ("I have a rescue greyhound called Pixel who is scared of stairs.", {"dog"}),
               ("I'm saving up for a trip to Japan next spring.", {"japan"}),
               ("My dad had a heart attack last year and I still worry about him constantly.", {"father"}),
               ("I sing in a choir on Tuesday evenings.", {"choir"}),
               ("The hospital canteen ran out of soup today.", {"canteen"}),
               ("Ok, cool.", set())],
        "T2": [("Pixel finally managed the stairs to my flat today!", {"dog"}),
               ("The doctor wants to prescribe me antibiotics for a chest infection, anything I should mention?",
                {"allergy"}),
               ("Dad started cardiac rehab this week.", {"father"}),
               ("What do you remember about me?", set()),
               ("Thanks.", set())],
        "T3": [("Can you help me plan two weeks in Kyoto and Tokyo?", {"japan"}),
               ("We have a concert in a month and I keep missing the high notes.", {"choir"}),
               ("My long-legged housemate has started chewing the furniture.", {"dog"}),
               ("Night shifts again this week.", {"work"}),
               ("Alright.", set())],
        "T4": [("Booked the flights to Osaka!", {"japan"}),
               ("Dad walked five kilometres yesterday, I'm so relieved.", {"father"}),
               ("The choir concert went really well.", {"choir"}),
               ("Bye for now, thanks.", set())],
    },
    "en10": {
        "T1": [("Hello, I'm Tom, a carpenter in Galway.", {"name", "work"}),
               ("I can't eat gluten, I have coeliac disease.", {"diet"}),
               ("I keep an allotment where I grow tomatoes and beans.", {"garden"}),
               ("My partner and I are expecting our first baby in May.", {"baby"}),
               ("I've been learning Irish at evening classes.", {"irish"}),
               ("My knee has been sore since I fell off a ladder.", {"knee", "work"}),
               ("It's windy as usual here.", {"weather"}),
               ("Grand.", set())],
        "T2": [("The slugs ate half my green patch this week.", {"garden"}),
               ("We had the twenty-week scan, everything looks fine.", {"baby"}),
               ("Went to a pub quiz and they served only normal bread, I couldn't eat a thing.", {"diet"}),
               ("Do you remember me?", set())],
        "T3": [("Can you help me make a list of things we need before the little one arrives?", {"baby"}),
               ("I want to build a raised bed for the allotment, what wood should I use?", {"garden", "work"}),
               ("My teacher wants me to give a two-minute talk in Irish.", {"irish"}),
               ("The van broke down on the motorway.", {"van"}),
               ("Right.", set())],
        "T4": [("The raised beds are finished and planted.", {"garden"}),
               ("I gave my talk as Gaeilge and didn't forget a word.", {"irish"}),
               ("The physio says my knee is healing well.", {"knee"}),
               ("Thanks, see you.", set())],
    },
    "en11": {
        "T1": [("Hi, I'm Nadia, I study law at Edinburgh.", {"name", "study"}),
               ("I'm vegan and have been for three years.", {"diet"}),
               ("My little brother has autism and I help my mum look after him at weekends.", {"brother"}),
               ("I have a moot court competition next month and I'm terrified.", {"moot", "study"}),
               ("I run a book club with five friends.", {"books"}),
               ("I have a hamster named Biscuit who escapes every week.", {"hamster"}),
               ("The heating in my flat is broken.", {"flat"}),
               ("Haha, true.", set())],
        "T2": [("Our book club picked a nine-hundred-page novel, what were we thinking.", {"books"}),
               ("The tiny escape artist got behind the fridge again.", {"hamster"}),
               ("Took my brother to the aquarium, he loved the jellyfish.", {"brother"}),
               ("Cool, thanks.", set())],
        "T3": [("Can you help me rehearse my opening submission for the competition?", {"moot"}),
               ("I'm hosting dinner for friends, what can I cook without any animal products?", {"diet"}),
               ("How can I explain big changes to a child who likes routine?", {"brother"}),
               ("My landlord still hasn't fixed anything.", {"flat"}),
               ("Noted.", set())],
        "T4": [("We made it to the moot final!", {"moot"}),
               ("Finally finished that enormous novel for book club.", {"books"}),
               ("Biscuit turned two today.", {"hamster"}),
               ("Bye, take care.", set())],
    },
    "en12": {
        "T1": [("I'm Oliver, I drive buses in Leeds.", {"name", "work"}),
               ("I've got high blood pressure, so the doctor wants me to cut down on salt.", {"health"}),
               ("My wife and I just celebrated our twentieth anniversary.", {"wife"}),
               ("I'm training to walk the Yorkshire Three Peaks for charity.", {"walk"}),
               ("My daughter is moving to Australia next month and I'm dreading it.", {"daughter"}),
               ("I collect old vinyl records.", {"vinyl"}),
               ("Traffic was terrible on my route today.", {"work"}),
               ("Aye, fair enough.", set())],
        "T2": [("Did a twenty-mile practice walk in the Dales on Sunday.", {"walk"}),
               ("Found a first pressing of a Beatles album at a car boot sale!", {"vinyl"}),
               ("We had a farewell dinner for her before she flies to Sydney.", {"daughter"}),
               ("What do you know about me?", set()),
               ("Ok.", set())],
        "T3": [("Can you plan me a week of dinners that are easy on the sodium?", {"health"}),
               ("How do I keep in touch with someone on the other side of the world?", {"daughter"}),
               ("What should I pack for a long day on the fells?", {"walk"}),
               ("My shift pattern changed again.", {"work"}),
               ("Right, thanks.", set())],
        "T4": [("We finished the three peaks in eleven hours and raised eight hundred pounds!", {"walk"}),
               ("My daughter rang from Sydney, she's settling in.", {"daughter"}),
               ("My blood pressure readings are down this month.", {"health"}),
               ("Cheers, bye.", set())],
    },
}
SAMPLE.update({participant: {task_id: [(text, topics, None) for text, topics in messages]
                             for task_id, messages in tasks.items()}
               for participant, tasks in _MORE.items()})
# Participants written for the fourth round (data/calibration/recall_probes.json), in the shape of the study's
# tasks: T2 a memory trigger test, T3 personalised help, T4 a review. Messages come back to earlier topics in other
# words, half of them asking the assistant to remember ("你还记得…", "as I told you…"), and each participant also
# asks to remember something never said. Written by someone who had seen no score, before they were first
# measured; all held out (nothing is fitted or chosen on them), so they test how the deployed preset generalises.
PROBES_FILE = REPO_ROOT / "data" / "calibration" / "recall_probes.json"


def _load_probes(path: Path) -> tuple[dict[str, dict[str, list[tuple[str, set[str], None]]]], set[str]]:
    raw = json.loads(path.read_text(encoding="utf-8"))["participants"]
    sample = {name: {task: [(text, set(topics), None) for text, topics in person[task]]
                     for task in ("T1", "T2", "T3", "T4")} for name, person in raw.items()}
    return sample, {name for name, person in raw.items() if person["split"] == "held-out"}


_PROBES, _PROBES_HELD_OUT = _load_probes(PROBES_FILE)
SAMPLE.update(_PROBES)
SAMPLE_LANGUAGE = {participant: "en" if participant.startswith("en") else "zh" for participant in SAMPLE}
# Bounds are chosen on the development participants; the held-out ones, fixed before any bound was tried,
# only report how the choice generalises.
HELD_OUT = frozenset({"zh5", "zh6", "zh7", "zh8", "zh11", "zh12", "en5", "en6", "en7", "en8", "en11", "en12",
                      *_PROBES_HELD_OUT})
SPLITS = ("dev", "held-out")


def split_of(participant: str) -> str:
    return "held-out" if participant in HELD_OUT else "dev"

# Checks of the candidate rule (services.recall_model.CandidateRule): short messages a participant might send,
# labelled by hand as content-free (acknowledgements, thanks, greetings, farewells) or carrying content. The
# conversational vocabulary was extended until the "dev" lists were judged right; each "held-out" list was
# written before it was first measured and never used to change the vocabulary (the leave-taking ones after
# the leave-taking phrases were added).
RULE_CHECK: dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "dev": {
        "zh": (("好嘞", "没问题！", "OK的", "嗯哼", "是的是的", "对对对", "可以可以", "好呀，谢谢你",
                "太好了，谢谢！", "哈哈哈哈哈", "懂了懂了", "知道啦", "了解，谢谢", "辛苦啦", "晚安！", "早上好呀",
                "嗨，又来找你聊天了", "在吗？", "好的呢", "谢谢你听我说这些", "那今天就先这样吧", "改天再聊",
                "拜拜～", "嗯，有道理", "原来如此", "是这样啊", "你说得对", "好主意", "那我试试看", "没事没事",
                "嗯呢", "好哦", "OK，明白", "哈哈哈好的", "你说的有道理", "好，那就这样", "谢谢你，真的很有帮助",
                "嗯，我知道了", "收到收到", "哦，这样啊", "可以的", "那好吧", "哈哈，是吗", "我懂你的意思",
                "没事，不用道歉", "晚安啦", "早呀", "我又来啦", "那先这样，拜拜", "下回再聊", "嗯嗯嗯", "了解了解",
                "真的吗？", "好的好的，谢谢", "嗯，谢谢你的回答", "对，就是这样", "好吧好吧", "那行", "太棒了！",
                "好的，我记住了",
                # exposed by the fourth round's blind participants (the vocabulary was extended for them)
                "好的，谢谢你听我说这么多。", "行，你说的我记下了。"),
               ("我怕狗", "我失恋了", "今天面试了", "我妈住院了", "我考研上岸了！", "猫又吐了", "我胖了五斤",
                "我不吃辣", "好想家啊", "我搬家了", "头好疼", "刚分手", "我升职了", "在学钢琴", "明天考试",
                "我生日快到了", "腰疼了一整天", "好累啊，加班到现在", "女儿发烧了", "我戒烟一周了", "我的腿骨折了",
                "明天要去体检", "小狗丢了", "我被裁员了", "刚拿到驾照", "下个月我要结婚了", "最近在减肥", "我怀孕了",
                "论文被拒了", "我爸今天生日", "我过敏又犯了", "搬到北京了", "我开始学游泳了", "今天被老板骂了",
                "房租又涨了", "我养了一只兔子", "奶奶住院了", "我考过了六级", "失眠好几天了", "我想辞职")),
        "en": (("Sounds great!", "Sure, why not.", "Okay then.", "Makes sense.", "Fair point.", "Gotcha.", "Mm-hmm.",
                "Lol.", "Hahaha, true.", "Thanks so much!", "Much appreciated.", "Perfect, thank you.", "Good night!",
                "Morning!", "Hi again!", "Are you there?", "Talk soon.", "Catch you later.", "See ya.",
                "That's it for now.", "Thanks for listening.", "Good idea.", "I'll give it a try.", "You're right.",
                "No worries.", "Oh I see.", "Interesting.", "Great, thanks!", "Okie dokie.", "Will do.",
                "Okay, cool.", "Right, I see.", "Ah, got it.", "Sure thing, thanks!", "Ha, nice one.",
                "Yep, exactly.", "Alright then, bye.", "Thank you so much.", "Oh, really?", "Hmm, okay.",
                "No problem at all.", "That makes sense, thanks.", "Good morning!", "Hey there!", "I'm back!",
                "See you tomorrow.", "Okay, I'll try that.", "Cheers mate.", "Fair enough, thanks.", "Good to know.",
                "Ok, bye for now.", "Haha, yeah.", "Thanks, that helps.", "Sounds like a plan.",
                "Brilliant, thank you!", "Oh okay.", "Right then.", "You're welcome.", "Lovely, thanks.",
                "Alright, sounds good.",
                # exposed by the fourth round's blind participants (the vocabulary was extended for them)
                "Grand, thanks for that.", "That's grand, thanks a million.", "Sweet, thanks.", "Ta, that's helpful.",
                "Brill, thanks.", "Mind yourself now, and goodbye.", "Anyway, thanks for everything, take it easy."),
               ("I hate spiders.", "My dog died.", "I got the job!", "I'm pregnant.", "Exams tomorrow.",
                "I quit smoking.", "My back hurts.", "I'm vegan.", "Mum's in hospital.", "We broke up.",
                "I failed my driving test.", "I'm moving to Berlin.", "Still homesick.", "My cat threw up again.",
                "Promotion came through!", "I'm so tired of overtime.", "My daughter has a fever.", "Learning piano.",
                "Birthday next week.", "I miss my grandad.", "I broke my leg.", "Doctor's appointment tomorrow.",
                "Our dog ran away.", "I got laid off.", "Just got my driving licence.",
                "I'm getting married next month.", "Trying to lose weight.", "My paper got rejected.",
                "It's my dad's birthday.", "My hay fever is back.", "Moved to London.", "Started swimming lessons.",
                "My boss yelled at me.", "Rent went up again.", "I adopted a rabbit.", "Grandma is in hospital.",
                "I passed the exam.", "Can't sleep for days.", "I want to quit my job.", "I'm pregnant with twins.")),
    },
    "held-out": {
        "zh": (("嗯好", "好的，了解", "哈哈哈，太逗了", "谢谢啦，你真好", "好，我明白你的意思了", "嗯嗯，对的",
                "好的呀", "知道了，谢谢提醒", "行吧，那就这样", "再聊哦", "哦哦，原来是这样", "好的没问题",
                "拜拜，下次聊", "是呀是呀", "好的，收到啦", "嗯，好吧", "哈哈，确实", "谢谢，晚安", "嗯，你继续说",
                "好滴好滴", "我先去忙了，拜拜", "先这样吧，我去睡觉了", "我先下了，明天再聊", "好啦我先撤了",
                "改天再聊哦", "那我先去休息啦", "我先走了，谢谢你", "先到这吧", "回头再聊，晚安",
                "我去准备了，下次聊"),
               ("我今天去医院拔牙了", "我的猫生小猫了", "公司要搬到郊区了", "我开始学做饭了", "我爷爷八十岁了",
                "考试没考好", "我喜欢上一个人", "我在戒糖", "下周去云南旅游", "我的电脑坏了",
                "我先去医院了，妈妈又发烧了", "我得先去准备明天的面试了", "我去睡觉了，明天要早起赶飞机",
                "先这样，我去接孩子放学", "我先去健身房了", "我去休息了，今天加班太累")),
        "en": (("Okay, thanks a lot.", "Ha, that's funny.", "Thanks, you're very kind.", "Got you.",
                "Yes, that's right.", "Ok, see you soon!", "Oh nice.", "Alright, I understand.",
                "Thanks for the reminder.", "Sure, go on.", "Yeah, true.", "Hello again!", "Right, thanks a bunch.",
                "Bye bye!", "Ok, noted, thanks.", "Hmm, interesting.", "Great, cheers!", "I see, thanks.",
                "Night night!", "Absolutely, thanks.", "I have to go now, bye!", "Gotta run, talk soon.",
                "Time to log off, good night!", "I'll head off now, thanks.", "I need to go, talk to you tomorrow.",
                "Okay, I should get going.", "Talk later!", "Alright, I'll go now.", "I must go, see you.",
                "Got to go, cheers."),
               ("I had a tooth pulled today.", "My cat had kittens.", "My office is moving out of town.",
                "I'm learning to cook.", "My grandpa turns eighty.", "I did badly in my exam.",
                "I have a crush on someone.", "I'm cutting out sugar.", "Going to Scotland next week.",
                "My laptop broke.", "I have to go to the dentist now.", "I need to go pick up my son from school.",
                "Gotta run, my train leaves in ten minutes.", "I'll head off to the gym now.",
                "Time to go to bed, I have an exam tomorrow.", "I should get going, my shift starts at six.")),
    },
}

MemoryKey = tuple[str, int]  # (sample participant, index of the memory in that participant's store)
FEATURE_NAMES = ("fused", "cosine", "lexical_z", "dense_z")


@dataclass
class Memory:
    """One consolidated exchange of a sample participant."""

    text: str  # the participant's message
    topics: set[str]
    task_id: str
    created_at: datetime
    salience: float
    g0: float
    admitted: bool  # a recall candidate under the candidate rule


@dataclass
class Query:
    """One later message of a sample participant and the retriever's top-k over its earlier memories."""

    task_id: str
    at: datetime
    text: str
    topics: set[str]
    language: str | None
    candidates: list[tuple[int, dict[str, float]]]  # (memory index, the retriever's scores), best first
    relevant: set[int]  # earlier memories sharing a topic with the message


@dataclass
class Trace:
    """A sample participant walked through the schedule: memories and the candidates of every query.
    Ranking does not depend on recall, so a trace is computed once and replayed per configuration."""

    participant: str
    language: str
    split: str
    memories: list[Memory]
    queries: list[Query]


@dataclass
class TaskOutcome:
    """What recall did during one task, over a group of sample participants."""

    task_id: str
    memories: int = 0  # stored memories, summed over the task's participants
    excluded: int = 0  # of those, not recall candidates under the candidate rule
    recalled: set[MemoryKey] = field(default_factory=set)
    relevant: set[MemoryKey] = field(default_factory=set)
    t1_relevant: set[MemoryKey] = field(default_factory=set)  # relevant memories created at T1
    unrelated_memories: set[MemoryKey] = field(default_factory=set)  # candidates relevant to no message
    reinforced: set[MemoryKey] = field(default_factory=set)  # relevant, recalled here and at an earlier task
    unrelated_recalls: int = 0
    echo_recalls: int = 0
    unrelated_candidates: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def relevant_recalled(self) -> set[MemoryKey]:
        return self.recalled & self.relevant

    def share(self) -> float:
        """Share of all stored memories recalled at least once during the task."""
        return len(self.recalled) / self.memories if self.memories else 0.0

    def relevant_share(self) -> float:
        """Share of the memories relevant to some message of the task that were recalled."""
        return len(self.relevant_recalled) / len(self.relevant) if self.relevant else 0.0

    def t1_share(self) -> float:
        """The same for the relevant memories created at T1: their age is the task's unlock day."""
        return len(self.recalled & self.t1_relevant) / len(self.t1_relevant) if self.t1_relevant else 0.0

    def unrelated_rate(self) -> float:
        """Unrelated recalls per unrelated candidate (a memory sharing no topic with the message)."""
        return self.unrelated_recalls / self.unrelated_candidates if self.unrelated_candidates else 0.0

    def unrelated_memory_share(self) -> float:
        """Share of the recall candidates relevant to no message of the task that were recalled."""
        if not self.unrelated_memories:
            return 0.0
        return len(self.recalled & self.unrelated_memories) / len(self.unrelated_memories)

    @classmethod
    def merged(cls, task_id: str, parts: list[TaskOutcome]) -> TaskOutcome:
        total = cls(task_id)
        for part in parts:
            total.memories += part.memories
            total.excluded += part.excluded
            for name in ("recalled", "relevant", "t1_relevant", "unrelated_memories", "reinforced"):
                getattr(total, name).update(getattr(part, name))
            total.unrelated_recalls += part.unrelated_recalls
            total.echo_recalls += part.echo_recalls
            total.unrelated_candidates += part.unrelated_candidates
            total.events.extend(part.events)
        return total


Outcomes = dict[tuple[str, str], dict[str, TaskOutcome]]  # (split, language) -> task -> outcome


def group_outcomes(outcomes: Outcomes, split: str | None = None, language: str | None = None) -> dict[str, TaskOutcome]:
    """Outcomes per task, merged over the participants of a split and/or a language (None: all)."""
    task_ids = list(dict.fromkeys(t for tasks in outcomes.values() for t in tasks))
    chosen = [tasks for (s, lang), tasks in outcomes.items() if split in (None, s) and language in (None, lang)]
    return {t: TaskOutcome.merged(t, [tasks[t] for tasks in chosen if t in tasks]) for t in task_ids}


def target_failures(tasks: dict[str, TaskOutcome], label: str) -> list[str]:
    """Where one group misses the pre-registered targets (TARGETS, UNRELATED_MAX, falling with age)."""
    failures = []
    for task_id, minimum in TARGETS.items():
        o = tasks.get(task_id)
        if o is None or o.relevant_share() < minimum:
            got = f"{o.relevant_share():.0%}" if o else "no data"
            failures.append(f"{label} {task_id}: relevant recalled {got} < {minimum:.0%}")
        elif o.unrelated_rate() > UNRELATED_MAX:
            failures.append(f"{label} {task_id}: {o.unrelated_rate():.1%} of unrelated candidates recalled "
                            f"> {UNRELATED_MAX:.0%}")
    ages = [tasks[t].t1_share() for t in TARGETS if t in tasks]
    if any(later > earlier for earlier, later in zip(ages, ages[1:], strict=False)):
        failures.append(f"{label}: recall of T1 memories does not fall with their age "
                        f"({' / '.join(f'{a:.0%}' for a in ages)})")
    return failures


# Scores the ceiling is computed for: "r" is the preset's relevance at t = 0 (for a logistic preset a
# monotone function of its linear score, so of any r built from the same features), the others raw.
CEILING_SCORES = ("r", "dense_z", "cosine", "fused")


@dataclass(frozen=True)
class Ceiling:
    """The most relevant memories of one task a single threshold on one score recalls while it recalls at
    most UNRELATED_MAX of the task's unrelated candidates."""

    recalled: int
    relevant: int

    def share(self) -> float:
        return self.recalled / self.relevant if self.relevant else 0.0


def recall_ceiling(traces: list[Trace], task_id: str, score: Callable[[Query, dict[str, float]], float]) -> Ceiling:
    """What the best single threshold on ``score`` reaches at ``task_id``, chosen on these very participants
    (an oracle): the most any r that rises with ``score`` alone could recall if every candidate faced the
    same bar. It is not a strict bound on the curve: time and salience give each memory a bar of its own
    (a younger or more salient memory's is lower), which can recall a few memories more or fewer at the
    same unrelated share (held-out English T3 in the fourth round: 15 recalled against a ceiling of 11).
    A relevant memory counts once however many messages rank it, as in the targets; echo pairs (two
    topic-less messages) are left out, as in the replay."""
    scored: list[tuple[float, MemoryKey | None]] = []
    relevant: set[MemoryKey] = set()
    for trace in traces:
        for query in (q for q in trace.queries if q.task_id == task_id):
            relevant |= {(trace.participant, i) for i in query.relevant}
            scored += [(score(query, scores), (trace.participant, index) if index in query.relevant else None)
                       for index, scores in query.candidates
                       if query.topics or trace.memories[index].topics]
    allowed = UNRELATED_MAX * sum(key is None for _, key in scored)
    recalled: set[MemoryKey] = set()
    unrelated = 0
    for _, group in groupby(sorted(scored, key=lambda item: -item[0]), key=lambda item: item[0]):
        keys = [key for _, key in group]
        unrelated += keys.count(None)
        if unrelated > allowed:
            break
        recalled.update(k for k in keys if k is not None)
    return Ceiling(len(recalled), len(relevant))


def ceiling_score(name: str, params: rm.RecallParams) -> Callable[[Query, dict[str, float]], float]:
    if name != "r":
        return lambda query, scores: scores[name]

    def relevance(query: Query, scores: dict[str, float]) -> float:
        others = {f: np.array([scores[f]]) for f in FEATURE_NAMES if f != "cosine"}
        return float(np.atleast_1d(params.relevance.to_r(np.array([scores["cosine"]]), query.language, others))[0])
    return relevance


Ceilings = dict[tuple[str, str], dict[str, dict[str, Ceiling]]]  # (split, language) -> score -> task -> Ceiling


def recall_ceilings(traces: list[Trace], params: rm.RecallParams) -> Ceilings:
    """The ceiling of every score of CEILING_SCORES, per split, language and task."""
    groups = sorted({(t.split, t.language) for t in traces})
    return {(split, language): {
        name: {task: recall_ceiling([t for t in traces if (t.split, t.language) == (split, language)], task,
                                    ceiling_score(name, params)) for task in TARGETS}
        for name in CEILING_SCORES} for split, language in groups}


@dataclass
class CalibrationReport:
    params: rm.RecallParams
    retrieval: rm.RetrievalSettings
    embedder_model: str
    day_seconds: float
    pairs: dict[tuple[str, str], dict[str, np.ndarray]]  # (split, language) -> features, "label", "r"
    gaps: list[float]
    outcomes: Outcomes
    without_reinforcement: Outcomes  # the same replay with recall neither resetting t nor raising g
    rule_check: dict[str, dict[str, dict[str, list[str]]]]  # split -> language -> kind -> misjudged messages
    excluded_memories: list[str] = field(default_factory=list)  # sample messages the candidate rule leaves out
    search: list[dict[str, Any]] = field(default_factory=list)  # --fit: the time scales tried on dev
    ceilings: Ceilings = field(default_factory=dict)  # the best a threshold on each score can do (recall_ceiling)

    def group(self, split: str | None = None, language: str | None = None) -> dict[str, TaskOutcome]:
        return group_outcomes(self.outcomes, split, language)

    @property
    def tasks(self) -> dict[str, TaskOutcome]:
        return self.group()

    @property
    def languages(self) -> list[str]:
        return sorted({lang for _, lang in self.outcomes})

    @property
    def impossible(self) -> bool:
        return all(not outcome.recalled for outcome in self.tasks.values())

    @property
    def universal(self) -> bool:
        return any(o.unrelated_rate() > UNRELATED_TOLERANCE or o.share() >= UNIVERSAL_SHARE
                   or o.relevant_share() >= UNIVERSAL_SHARE
                   for language in self.languages for o in self.group(language=language).values())

    def target_failures(self) -> list[str]:
        """The pre-registered targets, checked on the held-out participants of each language."""
        return [f for language in self.languages
                for f in target_failures(self.group("held-out", language), f"held-out {language}")]

    def unreachable_targets(self) -> list[str]:
        """Held-out targets that no single threshold on any of the scores reaches, even chosen on the held-out
        participants themselves: a refit of r on these scores is not expected to meet them (per-memory bars
        from time and salience move a ceiling by a few memories, not tens of points)."""
        found = []
        for (split, language), by_score in sorted(self.ceilings.items()):
            for task_id, minimum in TARGETS.items() if split == "held-out" else ():
                best = max(by_score.values(), key=lambda tasks: tasks[task_id].share())[task_id]
                if best.share() < minimum:
                    found.append(f"held-out {language} {task_id}: at most {best.recalled}/{best.relevant} "
                                 f"({best.share():.0%}) of the relevant memories < {minimum:.0%}")
        return found

    def warnings(self) -> list[str]:
        found = []
        if self.impossible:
            found.append("recall is IMPOSSIBLE: no memory is recalled at any task, so L4 equals L3")
        for language in self.languages:
            for task_id, o in self.group(language=language).items():
                if o.unrelated_rate() > UNRELATED_TOLERANCE:
                    found.append(f"recall is UNIVERSAL at {task_id} ({language}): {o.unrelated_recalls} of "
                                 f"{o.unrelated_candidates} unrelated candidates recalled")
                if o.share() >= UNIVERSAL_SHARE or o.relevant_share() >= UNIVERSAL_SHARE:
                    found.append(f"recall is UNIVERSAL at {task_id} ({language}): {o.share():.0%} of memories, "
                                 f"{o.relevant_share():.0%} of relevant ones recalled")
        found += [f"target missed: {f}" for f in self.target_failures()]
        found += [f"target beyond the best single threshold on these scores: {f}"
                  for f in self.unreachable_targets()]
        if not self.params.relevance.measured_for(self.embedder_model):
            found.append(f"the relevance model was fitted for {self.params.relevance.embedder_model!r}, "
                         f"not for {self.embedder_model!r}: refit with --fit")
        fitted = (self.params.relevance.fitted_for or {}).get("retrieval")
        if fitted and fitted != self.retrieval.to_dict():
            found.append(f"the relevance model was fitted for retrieval settings {fitted}, the study uses "
                         f"{self.retrieval.to_dict()}: refit with --fit")
        return found


class MemoEmbedder:
    """Wraps an embedder so every sample sentence is embedded once per process (queries and passages apart)."""

    def __init__(self, embedder) -> None:
        self.embedder = embedder
        self.model = getattr(embedder, "model", "?")
        self._vectors: dict[tuple[bool, str], np.ndarray] = {}

    def _embed(self, texts: list[str], is_query: bool) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if (is_query, t) not in self._vectors))
        if missing:
            encode = self.embedder.embed_queries if is_query else self.embedder.embed_passages
            for text, vector in zip(missing, encode(missing), strict=True):
                self._vectors[(is_query, text)] = np.asarray(vector, dtype=np.float32)
        return np.stack([self._vectors[(is_query, t)] for t in texts])

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, True)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, False)


def _schedule(study: Study) -> dict[str, float]:
    return {task.id: float(task.unlock_offset_days) for task in study.tasks}


def study_gaps(study: Study) -> list[float]:
    """0 and every gap (days) between two task unlocks of the schedule."""
    offsets = sorted(set(_schedule(study).values()))
    return sorted({0.0} | {b - a for i, a in enumerate(offsets) for b in offsets[i + 1:]})


def _t(params: rm.RecallParams, gap_days: float, day_seconds: float) -> float:
    return float(rm.elapsed_time(gap_days * day_seconds, unit=params.time_unit, time_scale=params.time_scale,
                                 day_seconds=day_seconds, turns=gap_days))


def p_table(params: rm.RecallParams, gaps: list[float], *, salience: float = 0.0,
            day_seconds: float = SECONDS_PER_DAY) -> list[dict[str, Any]]:
    """p_final at each gap (days, or turns when t counts turns) for a grid of r, for a never-recalled
    memory with g = g0(salience)."""
    g0 = rm.initial_g(salience, params.g0_base, params.g0_salience)
    rows = []
    for r in R_GRID:
        cells = []
        for gap in gaps:
            p = float(rm.recall_probability(r, _t(params, gap, day_seconds), g0))
            p_final = float(rm.final_probability(p, salience, params.salience_bonus))
            cells.append({"gap": gap, "p_final": p_final, "recalled": p_final >= params.threshold})
        rows.append({"r": r, "cells": cells})
    return rows


def _sample_salience(text: str, scores: tuple[float, float, float] | None,
                     weights: dict[str, float] | None) -> float:
    """Hand scores where the sample gives them, else the offline lexicon scorer's (as offline consolidation)."""
    if scores is None:
        lexicon = lexicon_scores(text)
        scores = (lexicon.intensity, lexicon.disclosure, lexicon.value)
    return rm.emotional_salience(*scores, weights=weights)


@lru_cache(maxsize=4096)
def sample_reply(text: str, language: str) -> str:
    """The reply an exchange of the sample carries: the offline responder's, given no memory (the sample
    has no assistant turns; a pilot run's replies come from the same responder)."""
    from services.llm.types import ChatRequest
    from services.providers.offline import OfflineChatProvider

    request = ChatRequest(messages=[{"role": "user", "content": text}], language=language)
    return OfflineChatProvider().complete(request).text


def trace_participant(participant: str, study: Study, embedder, params: rm.RecallParams,
                      retrieval: rm.RetrievalSettings, *, day_seconds: float = SECONDS_PER_DAY,
                      message_gap_seconds: float = 60.0,
                      start: datetime = datetime(2026, 3, 2, 9, 0, 0)) -> Trace:
    """Walk one sample participant through the schedule on a ManualClock.

    A task's exchanges are consolidated when it ends (index text with task tag and study day, the
    neighbouring exchanges of the task, the passage vector of the participant's message, salience,
    g0); every later message with content is ranked against the earlier memories that are recall
    candidates by the hybrid retriever, as L4 ranks them. Study time runs ``day_seconds`` real
    seconds per day, as in pilot mode."""
    schedule = _schedule(study)
    order = sorted(schedule, key=schedule.get)
    language = SAMPLE_LANGUAGE[participant]
    weights = dict(study.memory.salience_weights)
    step = message_gap_seconds * day_seconds / SECONDS_PER_DAY
    clock = ManualClock(start)
    memories: list[Memory] = []
    docs: list[RetrievalDoc] = []
    queries: list[Query] = []
    for task_id in order:
        messages = SAMPLE[participant].get(task_id, [])
        if not messages:
            continue
        clock.set(start + timedelta(seconds=schedule[task_id] * day_seconds))
        admitted = [d for d, m in zip(docs, memories, strict=True) if m.admitted]
        retriever = HybridRetriever(admitted, retrieval.fusion, retrieval.k1, retrieval.b) if admitted else None
        vectors = embedder.embed_queries([m[0] for m in messages]) if retriever else None
        sent_at = []
        for i, (text, topics, _scores) in enumerate(messages):
            sent_at.append(clock.advance(step))
            if task_id == order[0]:
                continue
            ranked = (retriever.rank(text, vectors[i], params.top_k)
                      if retriever is not None and params.candidates.admits_query(text) else [])
            queries.append(Query(
                task_id, sent_at[-1], text, topics, rm.text_language(text),
                [(s.memory_id, {"fused": s.fused, "cosine": s.cosine, "lexical_z": s.lexical_z,
                                "dense_z": s.dense_z}) for s in ranked],
                {j for j, m in enumerate(memories) if topics & m.topics}))
        exchanges = [exchange_text(text, sample_reply(text, language), task_id, int(schedule[task_id]))
                     for text, _, _ in messages]
        passages = embedder.embed_passages([m[0] for m in messages])
        for i, ((text, topics, scores), created_at) in enumerate(zip(messages, sent_at, strict=True)):
            salience = _sample_salience(text, scores, weights)
            docs.append(RetrievalDoc(len(memories), exchanges[i],
                                     neighbour_text(exchanges[:i], retrieval.neighbour_turns), passages[i]))
            memories.append(Memory(text, topics, task_id, created_at, salience,
                                   float(rm.initial_g(salience, params.g0_base, params.g0_salience)),
                                   params.candidates.admits_text(text, salience)))
    return Trace(participant, language, split_of(participant), memories, queries)


def _candidate_scores(query: Query) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    scores = {name: np.array([c[name] for _, c in query.candidates]) for name in FEATURE_NAMES}
    return scores.pop("cosine"), scores


def replay(trace: Trace, params: rm.RecallParams, study: Study, *, day_seconds: float = SECONDS_PER_DAY,
           reinforcement: bool = True) -> dict[str, TaskOutcome]:
    """Recall along a trace: the forgetting curve on each query's candidates, with g updated and t reset
    on every recall (``reinforcement=False``: neither, so every memory ages from its creation)."""
    schedule = _schedule(study)
    outcomes = {t: TaskOutcome(t) for t in sorted(schedule, key=schedule.get)[1:]}
    g = np.array([m.g0 for m in trace.memories])
    salience = np.array([m.salience for m in trace.memories])
    last: list[datetime | None] = [None] * len(trace.memories)
    recalled_in: dict[int, set[str]] = defaultdict(set)
    for task_id, outcome in outcomes.items():
        queries = [q for q in trace.queries if q.task_id == task_id]
        earlier = [i for i, m in enumerate(trace.memories) if schedule[m.task_id] < schedule[task_id]]
        outcome.memories = len(earlier)
        outcome.excluded = sum(not trace.memories[i].admitted for i in earlier)
        relevant = set().union(*(q.relevant for q in queries)) if queries else set()
        outcome.relevant = {(trace.participant, i) for i in relevant}
        outcome.t1_relevant = {(trace.participant, i) for i in relevant if trace.memories[i].task_id == "T1"}
        outcome.unrelated_memories = {(trace.participant, i) for i in earlier
                                      if i not in relevant and trace.memories[i].admitted}
        for query in queries:
            if query.candidates:
                _recall_once(trace, query, params, g, salience, last, recalled_in, outcome,
                             day_seconds=day_seconds, reinforcement=reinforcement)
    return outcomes


def _recall_once(trace: Trace, query: Query, params: rm.RecallParams, g: np.ndarray, salience: np.ndarray,
                 last: list[datetime | None], recalled_in: dict[int, set[str]], outcome: TaskOutcome, *,
                 day_seconds: float, reinforcement: bool) -> None:
    chosen = [i for i, _ in query.candidates]
    refs = [(last[i] if reinforcement else None) or trace.memories[i].created_at for i in chosen]
    t = np.atleast_1d(rm.elapsed_time(np.array([(query.at - ref).total_seconds() for ref in refs]),
                                      unit=params.time_unit, time_scale=params.time_scale,
                                      day_seconds=day_seconds, turns=np.zeros(len(chosen))))
    cosine, scores = _candidate_scores(query)
    result = rm.score_candidates(cosine, t, g[chosen], salience[chosen], params, query.language, scores)
    for rank, index in enumerate(chosen):
        memory = trace.memories[index]
        relevant = index in query.relevant
        # Two topic-less messages ("OK" / "好的") are near-paraphrases to any embedder: an echo, not a
        # memory recalled for the wrong topic, and counted apart.
        echo = not query.topics and not memory.topics
        recalled = bool(result.recalled[rank])
        outcome.unrelated_candidates += not relevant and not echo
        outcome.events.append({
            "participant": trace.participant, "query": query.text, "memory": memory.text,
            "memory_task": memory.task_id, "relevant": relevant, "echo": echo, "rank": rank + 1,
            "fused": float(scores["fused"][rank]), "cosine": float(cosine[rank]), "r": float(result.r[rank]),
            "t": float(t[rank]), "g_before": float(g[index]), "g_after": float(result.g_after[rank]),
            "p_final": float(result.p_final[rank]), "recalled": recalled,
        })
        if not recalled:
            continue
        key = (trace.participant, index)
        outcome.recalled.add(key)
        outcome.unrelated_recalls += not relevant and not echo
        outcome.echo_recalls += echo
        if relevant and recalled_in[index] - {query.task_id}:
            outcome.reinforced.add(key)
        recalled_in[index].add(query.task_id)
        if reinforcement:
            g[index] = float(result.g_after[rank])
            last[index] = query.at


def replay_all(traces: list[Trace], params: rm.RecallParams, study: Study, *,
               day_seconds: float = SECONDS_PER_DAY, reinforcement: bool = True) -> Outcomes:
    outcomes: Outcomes = {}
    for trace in traces:
        tasks = replay(trace, params, study, day_seconds=day_seconds, reinforcement=reinforcement)
        group = outcomes.setdefault((trace.split, trace.language), {})
        for task_id, outcome in tasks.items():
            group[task_id] = TaskOutcome.merged(task_id, [group[task_id], outcome] if task_id in group else [outcome])
    return outcomes


def labelled_pairs(traces: list[Trace]) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """Every (message, top-k candidate) pair of the traces with its scores and label (1: a shared topic),
    per (split, language): what the relevance model is fitted on and checked against."""
    rows: dict[tuple[str, str], list[tuple[float, ...]]] = defaultdict(list)
    for trace in traces:
        for query in trace.queries:
            for index, scores in query.candidates:
                rows[(trace.split, trace.language)].append(
                    tuple(scores[f] for f in FEATURE_NAMES) + (float(index in query.relevant),))
    pairs = {}
    for key, values in rows.items():
        matrix = np.array(values, dtype=np.float64)
        pairs[key] = {name: matrix[:, i] for i, name in enumerate(FEATURE_NAMES)} | {"label": matrix[:, -1]}
    return pairs


def fit_relevance(pairs: dict[tuple[str, str], dict[str, np.ndarray]], features: tuple[str, ...],
                  split: str = "dev") -> LogisticRelevance:
    """Per-language logistic models on the ``split`` pairs, and a pooled one as the default."""
    def pooled(keys: list[tuple[str, str]]) -> dict[str, np.ndarray]:
        return {name: np.concatenate([pairs[k][name] for k in keys]) for name in (*FEATURE_NAMES, "label")}

    keys = [k for k in pairs if k[0] == split]
    by_language = {}
    for language in sorted({lang for _, lang in keys}):
        data = pooled([k for k in keys if k[1] == language])
        by_language[language] = fit_monotone(data, data["label"], features)
    everything = pooled(keys)
    return LogisticRelevance(fit_monotone(everything, everything["label"], features), by_language)


def logistic_params(base: rm.RecallParams, model: LogisticRelevance, days_per_unit: float, embedder_model: str,
                    retrieval: rm.RetrievalSettings, preset: str = "fitted") -> rm.RecallParams:
    relevance = rm.RelevanceMapping("logistic", model=model, embedder_model=embedder_model,
                                    fitted_for={"retrieval": retrieval.to_dict()})
    return replace(base, preset=preset, time_unit="days", time_scale=1.0 / days_per_unit, relevance=relevance)


def search_time_scale(traces: list[Trace], params: rm.RecallParams, model: LogisticRelevance,
                      study: Study, embedder_model: str, retrieval: rm.RetrievalSettings, *,
                      day_seconds: float = SECONDS_PER_DAY) -> tuple[float, list[dict[str, Any]]]:
    """The time unit, chosen on the development participants: the shortest unit (the fastest
    forgetting) under which both languages meet the targets; if none does, among the units within
    UNRELATED_MAX the one whose worst (share / target) over languages and tasks is highest (ties: one
    under which recall of T1 memories falls with their age, then the shorter unit)."""
    dev = [t for t in traces if t.split == "dev"]
    tried = []
    for days in TIME_UNIT_GRID_DAYS:
        outcomes = replay_all(dev, logistic_params(params, model, days, embedder_model, retrieval), study,
                              day_seconds=day_seconds)
        languages = sorted({lang for _, lang in outcomes})
        failures = [f for lang in languages for f in target_failures(group_outcomes(outcomes, "dev", lang),
                                                                      f"dev {lang}")]
        worst = min((group_outcomes(outcomes, "dev", lang)[t].relevant_share() / minimum
                     for lang in languages for t, minimum in TARGETS.items()), default=0.0)
        unrelated = max((o.unrelated_rate() for lang in languages
                         for o in group_outcomes(outcomes, "dev", lang).values()), default=0.0)
        falls = not any("fall with their age" in f for f in failures)
        tried.append({"days_per_unit": days, "failures": failures, "worst_ratio": worst, "unrelated": unrelated,
                      "falls_with_age": falls,
                      "shares": {lang: {t: o.relevant_share() for t, o in group_outcomes(outcomes, "dev", lang).items()}
                                 for lang in languages}})
    passing = [row for row in tried if not row["failures"]]
    if passing:
        return passing[0]["days_per_unit"], tried
    allowed = [row for row in tried if row["unrelated"] <= UNRELATED_MAX] or tried
    best = max(allowed, key=lambda row: (round(row["worst_ratio"], 6), row["falls_with_age"], -row["days_per_unit"]))
    return best["days_per_unit"], tried


def check_candidate_rule(rule: rm.CandidateRule) -> dict[str, dict[str, dict[str, list[str]]]]:
    """The RULE_CHECK messages the rule misjudges: content-free ones it keeps, content it drops
    (salience 0, i.e. by their words alone)."""
    result: dict[str, dict[str, dict[str, list[str]]]] = {}
    for split, languages in RULE_CHECK.items():
        for language, (content_free, content) in languages.items():
            result.setdefault(split, {})[language] = {
                "content_free_kept": [m for m in content_free if rule.admits_text(m, 0.0)],
                "content_dropped": [m for m in content if not rule.admits_text(m, 0.0)],
            }
    return result


def traces_for(study: Study, embedder, params: rm.RecallParams, retrieval: rm.RetrievalSettings, *,
               day_seconds: float = SECONDS_PER_DAY) -> list[Trace]:
    texts = [m[0] for tasks in SAMPLE.values() for messages in tasks.values() for m in messages]
    embedder.embed_queries(texts)  # one batch each: far faster than a task at a time
    embedder.embed_passages(texts)
    return [trace_participant(p, study, embedder, params, retrieval, day_seconds=day_seconds) for p in SAMPLE]


def calibrate(study: Study | None = None, *, preset: str | None = None, embedder=None,
              day_seconds: float = SECONDS_PER_DAY, overrides: dict[str, Any] | None = None,
              fit: bool = False, features: tuple[str, ...] = DEFAULT_FEATURES,
              traces: list[Trace] | None = None) -> CalibrationReport:
    """Everything the script prints, for the given study (default: the configured one).

    ``fit``: fit the relevance model and choose the time unit on the development participants
    (the report's ``params`` are then the fitted preset, named "fitted")."""
    study = study or load_study()
    params = rm.resolve_recall_params(study.memory.recall_config, preset=preset, overrides=overrides)
    retrieval = study.memory.retrieval
    weights = dict(study.memory.salience_weights)
    if embedder is None:
        embedder = configured_embedder()
    if not isinstance(embedder, MemoEmbedder):
        embedder = MemoEmbedder(embedder)
    traces = traces if traces is not None else traces_for(study, embedder, params, retrieval, day_seconds=day_seconds)
    pairs = labelled_pairs(traces)
    search: list[dict[str, Any]] = []
    if fit:
        model = fit_relevance(pairs, features)
        days, search = search_time_scale(traces, params, model, study, embedder.model, retrieval,
                                         day_seconds=day_seconds)
        params = logistic_params(params, model, days, embedder.model, retrieval)
    for key, data in pairs.items():
        data["r"] = np.atleast_1d(params.relevance.to_r(
            data["cosine"], key[1], {f: data[f] for f in FEATURE_NAMES if f != "cosine"}))
    excluded = [text for tasks in SAMPLE.values() for task_id in ("T1", "T2", "T3")
                for text, _, scores in tasks[task_id]
                if not params.candidates.admits_text(text, _sample_salience(text, scores, weights))]
    gaps = list(TURN_GAPS) if params.time_unit == "turns" else study_gaps(study)
    return CalibrationReport(
        params, retrieval, embedder.model, day_seconds, pairs, gaps,
        replay_all(traces, params, study, day_seconds=day_seconds),
        replay_all(traces, params, study, day_seconds=day_seconds, reinforcement=False),
        check_candidate_rule(params.candidates), excluded, search, recall_ceilings(traces, params))


def _outcome_row(label: str, o: TaskOutcome) -> str:
    return (f"  {label:18s} {o.task_id:4s} {o.memories:8d} {o.memories - o.excluded:10d} {len(o.recalled):8d} "
            f"{o.share():5.0%}  {len(o.relevant):8d} {len(o.relevant_recalled):8d}  {o.relevant_share():5.0%}  "
            f"{len(o.recalled & o.t1_relevant):3d}/{len(o.t1_relevant):<3d} {o.t1_share():4.0%}  "
            f"{o.unrelated_recalls:4d} of {o.unrelated_candidates:3d} {o.unrelated_rate():5.1%}  "
            f"{len(o.recalled & o.unrelated_memories):3d}/{len(o.unrelated_memories):<3d}  "
            f"{len(o.reinforced):4d} {o.echo_recalls:6d}")


def _format_header(report: CalibrationReport, verbose: bool) -> list[str]:
    params = report.params
    out = [f"recall preset: {params.preset}   embedder: {report.embedder_model}",
           f"threshold {params.threshold}  top_k {params.top_k}  bonus {params.salience_bonus}  "
           f"g0 = {params.g0_base} + {params.g0_salience}·e  g += S(t)·(1 + {params.g_update_salience}·e)",
           f"t = study {params.time_unit} × {params.time_scale:.4g}"
           + (f" (one curve unit = {1 / params.time_scale:g} days)" if params.time_unit == "days" else ""),
           f"relevance: {params.relevance.method}"
           + (f" {json.dumps(params.relevance.model.to_dict())}" if params.relevance.model else
              f" {params.relevance.to_dict()}"),
           f"candidates: hybrid retriever {report.retrieval.to_dict()}; rule {params.candidates.to_dict()}", ""]
    stored = sum(len(tasks[t]) for tasks in SAMPLE.values() for t in ("T1", "T2", "T3"))
    out.append(f"candidate rule: {len(report.excluded_memories)} of the sample's {stored} stored messages are not "
               "recall candidates" + (": " + " | ".join(report.excluded_memories) if verbose else ""))
    for split, languages in report.rule_check.items():
        for language, misjudged in languages.items():
            content_free, content = RULE_CHECK[split][language]
            out.append(f"  {split:8s} {language}: content-free messages excluded "
                       f"{len(content_free) - len(misjudged['content_free_kept'])}/{len(content_free)}, "
                       f"messages with content kept {len(content) - len(misjudged['content_dropped'])}/{len(content)}"
                       + (f"  misjudged: {misjudged['content_free_kept'] + misjudged['content_dropped']}"
                          if verbose and any(misjudged.values()) else ""))
    return out


def _format_pairs(report: CalibrationReport) -> list[str]:
    x_star = float(rm.required_relevance(0.0, report.params.g0_base, 0.0, report.params.threshold,
                                         report.params.salience_bonus))
    out = ["", f"labelled (message, top-{report.params.top_k} candidate) pairs: r = the preset's relevance; "
               f"r ≥ {x_star:.3f} is recalled at t = 0 (e = 0)"]
    for (split, language), data in sorted(report.pairs.items()):
        label = data["label"] == 1
        pos, neg = data["fused"][label], data["fused"][~label]
        auc = float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()) \
            if pos.size and neg.size else float("nan")
        out.append(f"  {language} {split:8s} related {int(label.sum()):4d} "
                   f"(median r {np.median(data['r'][label]):.2f}, "
                   f"r ≥ x* {np.mean(data['r'][label] >= x_star):4.0%})  unrelated {int((~label).sum()):4d} "
                   f"(median r {np.median(data['r'][~label]):.2f}, r ≥ x* {np.mean(data['r'][~label] >= x_star):4.1%})"
                   f"  fused-score AUC {auc:.3f}")
    return out


def _format_curve(report: CalibrationReport) -> list[str]:
    params = report.params
    unit = "turns" if params.time_unit == "turns" else "days"
    out = ["", f"p_final for a never-recalled memory (e = 0, g = {params.g0_base}); "
               f"* = recalled (≥ {params.threshold})",
           "     r  " + "".join(f"{gap:>5g} {unit[0]} " for gap in report.gaps)]
    for row in p_table(params, report.gaps, day_seconds=report.day_seconds):
        out.append(f"  {row['r']:4.2f}  " + "".join(f"{c['p_final']:6.3f}{'*' if c['recalled'] else ' '} "
                                                   for c in row["cells"]))
    out += ["", "r needed for recall (never-recalled memory, g = g0(e)); above 1 = impossible",
            "     e    g0  " + "".join(f"{gap:>6g} {unit[0]}" for gap in report.gaps)]
    for e in (0.0, 0.5, 1.0):
        g0 = float(rm.initial_g(e, params.g0_base, params.g0_salience))
        needed = [float(rm.required_relevance(_t(params, gap, report.day_seconds), g0, e, params.threshold,
                                              params.salience_bonus)) for gap in report.gaps]
        out.append(f"  {e:4.1f}  {g0:4.2f}  " + "".join(f"{r:8.3f}" if r < 100 else f"{'>100':>8s}" for r in needed))
    return out


def _format_outcomes(report: CalibrationReport) -> list[str]:
    out = ["", "simulated schedule (T1 day 0, T2 day 2, T3 day 9, T4 day 16; dev = participants the model and the "
               "time unit were chosen on)",
           f"  {'participants':18s} task memories candidates recalled share  relevant recalled  share  "
           "T1-relevant recalled  unrelated (per candidate)  unrel.memories  reinf. echoes"]
    for split in SPLITS:
        for language in report.languages:
            out += [_outcome_row(f"{split} {language}", o) for o in report.group(split, language).values()]
    for language in report.languages:
        out += [_outcome_row(f"all {language}", o) for o in report.group(language=language).values()]
    out += ["", "reinforcement: relevant memories recalled, with recall resetting t and raising g / without "
                "(every memory ages from its creation)"]
    for split in SPLITS:
        for language in report.languages:
            with_ = report.group(split, language)
            without = group_outcomes(report.without_reinforcement, split, language)
            out.append(f"  {split:8s} {language}  " + "  ".join(
                f"{t} {len(with_[t].relevant_recalled)}/{len(with_[t].relevant)} vs "
                f"{len(without[t].relevant_recalled)}/{len(without[t].relevant)}" for t in with_))
    out += ["", "pre-registered targets (held-out participants, each language): relevant recalled ≥ "
                + " / ".join(f"{t} {v:.0%}" for t, v in TARGETS.items())
                + f", falling with age; unrelated candidates recalled ≤ {UNRELATED_MAX:.0%}"]
    for language in report.languages:
        failures = target_failures(report.group("held-out", language), f"held-out {language}")
        shares = " / ".join(f"{t} {o.relevant_share():.0%}" for t, o in report.group("held-out", language).items())
        unrelated = max((o.unrelated_rate() for o in report.group("held-out", language).values()), default=0.0)
        out.append(f"  {language}: relevant {shares}; unrelated ≤ {unrelated:.1%}  -> "
                   + ("MET" if not failures else "NOT MET: " + "; ".join(failures)))
    return out


def _format_ceilings(report: CalibrationReport) -> list[str]:
    out = ["", f"ceiling per task: the most relevant memories one threshold on a score recalls while recalling at most "
               f"{UNRELATED_MAX:.0%} of the task's unrelated candidates, the threshold chosen on these very "
               "participants (no time, no salience; not a strict bound: time and salience give each memory its "
               "own bar) (r: this preset's relevance)"]
    for (split, language), by_score in sorted(report.ceilings.items()):
        for name, tasks in by_score.items():
            out.append(f"  {split:8s} {language}  {name:8s} " + "   ".join(
                f"{t} {c.recalled:2d}/{c.relevant:<2d} {c.share():4.0%}" for t, c in tasks.items()))
    unreachable = report.unreachable_targets()
    out.append("  held-out targets within reach of some score" if not unreachable else
               "  BEYOND ONE THRESHOLD: " + "; ".join(unreachable))
    return out


def format_report(report: CalibrationReport, *, verbose: bool = False) -> str:
    out = _format_header(report, verbose) + _format_pairs(report) + _format_curve(report)
    if report.search:
        out += ["", "time unit search on the development participants (relevant recalled T2 / T3 / T4 per language)"]
        for row in report.search:
            shares = "  ".join(f"{lang} " + "/".join(f"{v:.0%}" for v in s.values())
                               for lang, s in row["shares"].items())
            out.append(f"  1 unit = {row['days_per_unit']:>4g} d  {shares}  max unrelated {row['unrelated']:.1%}  "
                       f"{'falls with age' if row['falls_with_age'] else 'does not fall with age':22s}  "
                       + ("meets the targets" if not row["failures"] else f"{len(row['failures'])} target(s) missed"))
    out += _format_outcomes(report) + _format_ceilings(report)
    if verbose:
        for task_id, o in report.tasks.items():
            out.append(f"\n  {task_id} candidates")
            for ev in o.events:
                tag = "rel" if ev["relevant"] else "echo" if ev["echo"] else ""
                out.append(f"    {'RECALL' if ev['recalled'] else '      '} {tag:4s} {ev['participant']:4s} "
                           f"fused {ev['fused']:5.2f} cos {ev['cosine']:.3f} r {ev['r']:.2f} t {ev['t']:.3f} "
                           f"g {ev['g_before']:.2f}→{ev['g_after']:.2f} pf {ev['p_final']:.3f}  "
                           f"{ev['query'][:24]} | {ev['memory'][:24]}")
    return "\n".join(out)


def _rounded(value: Any, digits: int = 4) -> Any:
    """Coefficients to four decimals, as the study file keeps them (r moves by < 1e-3)."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    return value


def preset_dict(report: CalibrationReport) -> dict[str, Any]:
    """The fitted preset as it goes into the study definition (``memory.recall.presets.NAME``)."""
    params = report.params
    relevance = params.relevance
    if relevance.method != "logistic" or relevance.model is None:
        raise ValueError("only a fitted (logistic) preset can be written; run with --fit")
    return {
        "time_unit": params.time_unit, "time_scale": params.time_scale,
        "relevance": {"method": "logistic", "model": _rounded(relevance.model.to_dict()),
                      "embedder_model": relevance.embedder_model, "fitted_for": relevance.fitted_for},
    }


def write_preset(path: Path, name: str, preset: dict[str, Any]) -> None:
    """Put ``preset`` into a JSON or YAML study file as ``memory.recall.presets.<name>`` (created if absent),
    keeping everything else in it."""
    if path.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}
    else:
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    data = data or {}
    data.setdefault("memory", {}).setdefault("recall", {}).setdefault("presets", {})[name] = preset
    if path.suffix in (".yaml", ".yml"):
        import yaml

        path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    else:
        path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def save_plot(report: CalibrationReport, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = report.params
    fig, (curves, bars) = plt.subplots(1, 2, figsize=(11, 4.2))
    unit = "turns" if params.time_unit == "turns" else "days"
    span = np.linspace(0, max(report.gaps) if report.gaps else 1.0, 200)
    t = rm.elapsed_time(span * SECONDS_PER_DAY, unit=params.time_unit, time_scale=params.time_scale,
                        day_seconds=SECONDS_PER_DAY, turns=span)
    for r, g in ((1.0, 2.0), (1.0, 1.0), (0.95, 1.0), (0.9, 1.0), (0.8, 1.0)):
        curves.plot(span, rm.recall_probability(r, t, g), label=f"r {r:.2f}, g {g:.1f}")
    curves.axhline(params.threshold, color="black", linestyle="--", linewidth=1, label="threshold")
    for gap in report.gaps:
        curves.axvline(gap, color="grey", alpha=0.2)
    curves.set(xlabel=f"gap since creation or last recall ({unit})", ylabel="p (e = 0)", ylim=(0, 1.02),
               title=f"forgetting curve, preset {params.preset}")
    curves.legend(fontsize=7)
    task_ids = list(report.tasks)
    x = np.arange(len(task_ids))
    series = [(f"relevant, held-out {lang}", report.group("held-out", lang)) for lang in report.languages]
    width = 0.8 / max(len(series), 1)
    for i, (label, outcomes) in enumerate(series):
        bars.bar(x - 0.4 + (i + 0.5) * width, [outcomes[k].relevant_share() for k in task_ids], width, label=label)
    bars.step(np.arange(len(TARGETS) + 1) - 0.5, list(TARGETS.values()) + [list(TARGETS.values())[-1]],
              where="post", color="red", linestyle=":", label="target")
    bars.set(xticks=x, xticklabels=task_ids, ylim=(0, 1), ylabel="share recalled during the task",
             title="sample conversations, simulated schedule")
    bars.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def configured_embedder(name: str | None = None):
    """The study's embedder (``EMBEDDING_PROVIDER``, offline by default)."""
    name = name or os.environ.get("EMBEDDING_PROVIDER") or "offline"
    if name == "offline":
        from services.providers.offline import OfflineEmbeddingProvider

        return OfflineEmbeddingProvider()
    from config import Settings
    from services.embedding_service import build_embedder

    return build_embedder(Settings.from_env(embedding_provider=name))


def main(argv: list[str] | None = None, *, embedder=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", help="recall preset to evaluate (default: the study's)")
    parser.add_argument("--study", help="study definition file (default: STUDY_CONFIG or the built-in one)")
    parser.add_argument("--embedder", help="embedding provider (default: EMBEDDING_PROVIDER, else offline)")
    parser.add_argument("--fit", action="store_true",
                        help="fit the relevance model and choose the time unit on the development participants")
    parser.add_argument("--features", default=",".join(DEFAULT_FEATURES),
                        help=f"with --fit: the model's features, from {', '.join(FEATURE_NAMES)} "
                             f"(default {','.join(DEFAULT_FEATURES)})")
    parser.add_argument("--write-preset", metavar="NAME", help="with --fit: write the fitted preset as NAME into "
                        "the study file (--preset-file)")
    parser.add_argument("--preset-file", type=Path,
                        help="JSON or YAML study file the preset is written into (default: --study, else "
                             f"STUDY_CONFIG, else {DEFAULT_STUDY_FILE.relative_to(REPO_ROOT)})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"PNG path (default {DEFAULT_OUT})")
    parser.add_argument("--day-seconds", type=float, default=SECONDS_PER_DAY,
                        help="real seconds per study day, as PILOT_DAY_SECONDS (default 86400)")
    parser.add_argument("--verbose", action="store_true", help="print every simulated candidate")
    parser.add_argument("--strict", action="store_true",
                        help="exit 2 when recall is impossible or universal, or a pre-registered target is missed")
    args = parser.parse_args(argv)
    if args.write_preset and not args.fit:
        parser.error("--write-preset needs --fit")
    embedder = embedder or configured_embedder(args.embedder)
    report = calibrate(load_study(args.study), preset=args.preset, embedder=embedder, day_seconds=args.day_seconds,
                       fit=args.fit, features=tuple(f.strip() for f in args.features.split(",") if f.strip()))
    print(format_report(report, verbose=args.verbose))
    print(f"\nplot saved to {save_plot(report, args.out)}")
    if args.fit:
        print("\nfitted preset:\n" + json.dumps(preset_dict(report), ensure_ascii=False, indent=2))
    if args.write_preset:
        target = args.preset_file or Path(args.study or os.environ.get("STUDY_CONFIG") or DEFAULT_STUDY_FILE)
        write_preset(target, args.write_preset, preset_dict(report))
        print(f"written to {target} as memory.recall.presets.{args.write_preset}")
    for warning in report.warnings():
        print(f"\n!!! WARNING: {warning} !!!", file=sys.stderr)
    if args.strict and (report.impossible or report.universal or report.target_failures()):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
