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
import os
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from config import SECONDS_PER_DAY
from services import recall_model as rm
from services.clock import ManualClock
from services.salience import lexicon_scores
from services.study import Study, load_study

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "docs" / "_generated" / "recall_calibration.png"
UNIVERSAL_SHARE = 0.9
# Unrelated memories recalled, as a share of the unrelated candidates a task's messages saw: the embedder's
# related and unrelated cosines overlap, so "never" is not attainable; above this, recall is not selective.
UNRELATED_TOLERANCE = 0.05
COSINE_GRID = {
    "zh": (0.85, 0.87, 0.875, 0.88, 0.885, 0.89, 0.895, 0.90, 0.92),
    "en": (0.77, 0.79, 0.795, 0.805, 0.815, 0.825, 0.835, 0.85, 0.87),
}
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
}
SAMPLE.update({participant: {task_id: [(text, topics, None) for text, topics in messages]
                             for task_id, messages in tasks.items()}
               for participant, tasks in _MORE.items()})
SAMPLE_LANGUAGE = {participant: "en" if participant.startswith("en") else "zh" for participant in SAMPLE}
# Bounds are chosen on the development participants; the held-out ones, fixed before any bound was tried,
# only report how the choice generalises.
HELD_OUT = frozenset({"zh5", "zh6", "zh7", "zh8", "en5", "en6", "en7", "en8"})
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
                "好的，我记住了"),
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
                "Alright, sounds good."),
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
PAIR_KINDS = ("related", "unrelated", "echo")


@dataclass
class Memory:
    text: str
    topics: set[str]
    task_id: str
    created_at: datetime
    salience: float
    g: float
    vector: np.ndarray
    admitted: bool  # a recall candidate under the candidate rule
    last_recall_at: datetime | None = None
    recall_count: int = 0


@dataclass
class TaskOutcome:
    """What recall did during one task, over a group of sample participants."""

    task_id: str
    memories: int = 0  # stored memories, summed over the task's queries' participants
    excluded: int = 0  # of those, not recall candidates under the candidate rule
    recalled: set[MemoryKey] = field(default_factory=set)
    relevant: set[MemoryKey] = field(default_factory=set)
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

    def unrelated_rate(self) -> float:
        """Unrelated recalls per unrelated candidate (a memory sharing no topic with the message)."""
        return self.unrelated_recalls / self.unrelated_candidates if self.unrelated_candidates else 0.0

    @classmethod
    def merged(cls, task_id: str, parts: list[TaskOutcome]) -> TaskOutcome:
        total = cls(task_id)
        for part in parts:
            total.memories += part.memories
            total.excluded += part.excluded
            total.recalled |= part.recalled
            total.relevant |= part.relevant
            total.unrelated_recalls += part.unrelated_recalls
            total.echo_recalls += part.echo_recalls
            total.unrelated_candidates += part.unrelated_candidates
            total.events.extend(part.events)
        return total


@dataclass
class CalibrationReport:
    params: rm.RecallParams
    embedder_model: str
    day_seconds: float
    pair_cosines: dict[str, dict[str, dict[str, list[float]]]]  # split -> language -> related / unrelated / echo
    gaps: list[float]
    p_tables: dict[str, list[dict[str, Any]]]
    outcomes: dict[tuple[str, str], dict[str, TaskOutcome]]  # (split, language) -> task -> outcome
    rule_check: dict[str, dict[str, dict[str, list[str]]]]  # split -> language -> kind -> misjudged messages
    excluded_memories: list[str] = field(default_factory=list)  # sample messages the candidate rule leaves out

    def group(self, split: str | None = None, language: str | None = None) -> dict[str, TaskOutcome]:
        """Outcomes per task, merged over the participants of a split and/or a language (None: all)."""
        task_ids = list(dict.fromkeys(t for tasks in self.outcomes.values() for t in tasks))
        chosen = [tasks for (s, lang), tasks in self.outcomes.items()
                  if split in (None, s) and language in (None, lang)]
        return {t: TaskOutcome.merged(t, [tasks[t] for tasks in chosen if t in tasks]) for t in task_ids}

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
                if not o.relevant_recalled and not self.impossible:
                    found.append(f"no relevant memory recalled at {task_id} in {language}")
        if not self.params.relevance.measured_for(self.embedder_model):
            found.append(f"the relevance bounds were measured for {self.params.relevance.embedder_model!r}, "
                         f"not for {self.embedder_model!r}: set new ones from the cosines printed above")
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


def p_table(params: rm.RecallParams, gaps: list[float], language: str | None, *, salience: float = 0.0,
            day_seconds: float = SECONDS_PER_DAY) -> list[dict[str, Any]]:
    """p_final at each gap (days, or turns when t counts turns) for each cosine of the grid,
    for a never-recalled memory with g = g0(salience)."""
    g0 = rm.initial_g(salience, params.g0_base, params.g0_salience)
    rows = []
    for cosine in COSINE_GRID.get(language or "", COSINE_GRID["zh"]):
        r = float(params.relevance.to_r(cosine, language))
        cells = []
        for gap in gaps:
            t = float(rm.elapsed_time(gap * day_seconds, unit=params.time_unit, time_scale=params.time_scale,
                                      day_seconds=day_seconds, turns=gap))
            p = float(rm.recall_probability(r, t, g0))
            p_final = float(rm.final_probability(p, salience, params.salience_bonus))
            cells.append({"gap": gap, "t": t, "p": p, "p_final": p_final, "recalled": p_final >= params.threshold})
        rows.append({"cosine": cosine, "r": r, "cells": cells})
    return rows


def _sample_salience(text: str, scores: tuple[float, float, float] | None,
                     weights: dict[str, float] | None) -> float:
    """Hand scores where the sample gives them, else the offline lexicon scorer's (as offline consolidation)."""
    if scores is None:
        lexicon = lexicon_scores(text)
        scores = (lexicon.intensity, lexicon.disclosure, lexicon.value)
    return rm.emotional_salience(*scores, weights=weights)


def pair_cosines(embedder, participant: str, rule: rm.CandidateRule | None = None,
                 weights: dict[str, float] | None = None) -> dict[str, list[float]]:
    """Cosines of every (later message, earlier message) pair of one sample participant whose earlier
    message is a recall candidate under ``rule``: related (a shared topic), unrelated, and echo (two
    topic-less messages)."""
    rule = rule or rm.CandidateRule()
    tasks = SAMPLE[participant]
    stored = [m for task_id in ("T1", "T2", "T3") for m in tasks[task_id]
              if rule.admits_text(m[0], _sample_salience(m[0], m[2], weights))]
    probes = [m for task_id in ("T2", "T3", "T4") for m in tasks[task_id]]
    cos = embedder.embed_queries([p[0] for p in probes]) @ embedder.embed_passages([m[0] for m in stored]).T
    pairs: dict[str, list[float]] = {kind: [] for kind in PAIR_KINDS}
    for i, probe in enumerate(probes):
        for j, memory in enumerate(stored):
            if memory[0] == probe[0]:
                continue
            kind = "related" if probe[1] & memory[1] else "echo" if not (probe[1] or memory[1]) else "unrelated"
            pairs[kind].append(float(cos[i, j]))
    return pairs


def simulate_schedule(params: rm.RecallParams, study: Study, embedder, *,
                      day_seconds: float = SECONDS_PER_DAY, message_gap_seconds: float = 60.0,
                      start: datetime = datetime(2026, 3, 2, 9, 0, 0),
                      participants: list[str] | None = None) -> dict[tuple[str, str], dict[str, TaskOutcome]]:
    """Run each sample participant through the study's schedule on a ManualClock.

    A task's user messages are consolidated (embedded; salience; g0) when the task ends;
    every later message is a recall query over the earlier tasks' memories that are recall
    candidates under the candidate rule, scored by the VectorStore's core (top-k, threshold,
    g update with S(t), last recall time). Study time runs ``day_seconds`` real seconds per
    day, as in pilot mode. Outcomes are kept per (split, language)."""
    schedule = _schedule(study)
    order = sorted(schedule, key=schedule.get)
    weights = dict(study.memory.salience_weights)
    outcomes: dict[tuple[str, str], dict[str, TaskOutcome]] = {}
    step = message_gap_seconds * day_seconds / SECONDS_PER_DAY
    for participant in participants or list(SAMPLE):
        tasks = SAMPLE[participant]
        group = outcomes.setdefault((split_of(participant), SAMPLE_LANGUAGE[participant]),
                                    {task_id: TaskOutcome(task_id) for task_id in order[1:]})
        clock = ManualClock(start)
        memories: list[Memory] = []
        sent_at: list[datetime] = []
        for task_id in order:
            messages = tasks.get(task_id, [])
            if not messages:
                continue
            clock.set(start + timedelta(seconds=schedule[task_id] * day_seconds))
            outcome = group.get(task_id)
            recalling = outcome is not None and bool(memories)
            query_vectors = embedder.embed_queries([m[0] for m in messages]) if recalling else None
            if outcome is not None:
                outcome.memories += len(memories)
                outcome.excluded += sum(not m.admitted for m in memories)
            for i, (text, topics, _scores) in enumerate(messages):
                sent_at.append(clock.advance(step))
                if recalling:
                    _recall_once(params, participant, memories, query_vectors[i], text, topics, clock.now(),
                                 sent_at, day_seconds, outcome)
            for (text, topics, scores), vector, created_at in zip(
                    messages, embedder.embed_passages([m[0] for m in messages]), sent_at[-len(messages):], strict=True):
                salience = _sample_salience(text, scores, weights)
                g0 = float(rm.initial_g(salience, params.g0_base, params.g0_salience))
                memories.append(Memory(text, topics, task_id, created_at, salience, g0, vector,
                                       admitted=params.candidates.admits_text(text, salience)))
    return outcomes


def _recall_once(params: rm.RecallParams, participant: str, memories: list[Memory], query_vector: np.ndarray,
                 text: str, topics: set[str], now: datetime, sent_at: list[datetime], day_seconds: float,
                 outcome: TaskOutcome) -> None:
    outcome.relevant |= {(participant, i) for i, m in enumerate(memories) if topics & m.topics}
    if not params.candidates.admits_query(text):
        return
    cosines = np.stack([m.vector for m in memories]) @ query_vector
    chosen = rm.top_k_indices(cosines, params.top_k, exclude=np.array([not m.admitted for m in memories]))
    if chosen.size == 0:
        return
    refs = [memories[i].last_recall_at or memories[i].created_at for i in chosen]
    elapsed = np.array([(now - ref).total_seconds() for ref in refs])
    turns = np.array([sum(ref < s <= now for s in sent_at) for ref in refs], dtype=np.float64)
    t = np.atleast_1d(rm.elapsed_time(elapsed, unit=params.time_unit, time_scale=params.time_scale,
                                      day_seconds=day_seconds, turns=turns))
    g = np.array([memories[i].g for i in chosen])
    e = np.array([memories[i].salience for i in chosen])
    scores = rm.score_candidates(cosines[chosen], t, g, e, params, rm.text_language(text))
    for rank, index in enumerate(chosen):
        memory = memories[index]
        relevant = bool(topics & memory.topics)
        recalled = bool(scores.recalled[rank])
        # Two topic-less messages ("OK" / "好的") are near-paraphrases to any embedder: an echo, not a
        # memory recalled for the wrong topic, and counted apart.
        echo = not topics and not memory.topics
        outcome.unrelated_candidates += not relevant and not echo
        outcome.events.append({
            "participant": participant, "query": text, "memory": memory.text, "memory_task": memory.task_id,
            "relevant": relevant, "echo": echo, "rank": rank + 1, "cosine": float(cosines[index]),
            "r": float(scores.r[rank]), "t": float(t[rank]), "g_before": float(g[rank]),
            "g_after": float(scores.g_after[rank]), "p": float(scores.p[rank]),
            "p_final": float(scores.p_final[rank]), "recalled": recalled,
        })
        if recalled:
            outcome.recalled.add((participant, int(index)))
            outcome.unrelated_recalls += not relevant and not echo
            outcome.echo_recalls += echo
            memory.g = float(scores.g_after[rank])
            memory.last_recall_at = now
            memory.recall_count += 1


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


def calibrate(study: Study | None = None, *, preset: str | None = None, embedder=None,
              day_seconds: float = SECONDS_PER_DAY, overrides: dict[str, Any] | None = None) -> CalibrationReport:
    """Everything the script prints, for the given study (default: the configured one)."""
    study = study or load_study()
    params = rm.resolve_recall_params(study.memory.recall_config, preset=preset, overrides=overrides)
    weights = dict(study.memory.salience_weights)
    if embedder is None:
        from services.providers.offline import OfflineEmbeddingProvider

        embedder = OfflineEmbeddingProvider()
    if not isinstance(embedder, MemoEmbedder):
        embedder = MemoEmbedder(embedder)
    texts = [m[0] for tasks in SAMPLE.values() for messages in tasks.values() for m in messages]
    embedder.embed_queries(texts)  # one batch each: far faster than a task at a time
    embedder.embed_passages(texts)
    pairs: dict[str, dict[str, dict[str, list[float]]]] = {}
    for participant in SAMPLE:
        pooled = pairs.setdefault(split_of(participant), {}).setdefault(
            SAMPLE_LANGUAGE[participant], {kind: [] for kind in PAIR_KINDS})
        for kind, values in pair_cosines(embedder, participant, params.candidates, weights).items():
            pooled[kind].extend(values)
    excluded = [text for tasks in SAMPLE.values() for task_id in ("T1", "T2", "T3")
                for text, _, scores in tasks[task_id]
                if not params.candidates.admits_text(text, _sample_salience(text, scores, weights))]
    gaps = list(TURN_GAPS) if params.time_unit == "turns" else study_gaps(study)
    tables = {language: p_table(params, gaps, language, day_seconds=day_seconds) for language in COSINE_GRID}
    outcomes = simulate_schedule(params, study, embedder, day_seconds=day_seconds)
    return CalibrationReport(params, embedder.model, day_seconds, pairs, gaps, tables, outcomes,
                             check_candidate_rule(params.candidates), excluded)


def _outcome_row(label: str, o: TaskOutcome) -> str:
    return (f"  {label:18s} {o.task_id:4s} {o.memories:8d} {o.memories - o.excluded:10d} {len(o.recalled):8d} "
            f"{o.share():5.0%}  {len(o.relevant):8d} {len(o.relevant_recalled):8d}  {o.relevant_share():5.0%}  "
            f"{o.unrelated_recalls:4d} of {o.unrelated_candidates:3d}  {o.echo_recalls:6d}")


def format_report(report: CalibrationReport, *, verbose: bool = False) -> str:
    out = _parameter_lines(report, verbose) + [""] + _cosine_lines(report) + _p_table_lines(report)
    out += [""] + _needed_relevance_lines(report) + [""] + _schedule_lines(report)
    if verbose:
        out += _candidate_lines(report)
    return "\n".join(out)


def _parameter_lines(report: CalibrationReport, verbose: bool) -> list[str]:
    params = report.params
    out = [f"recall preset: {params.preset}   embedder: {report.embedder_model}",
           f"threshold {params.threshold}  top_k {params.top_k}  bonus {params.salience_bonus}  "
           f"g0 = {params.g0_base} + {params.g0_salience}·e  g += S(t)·(1 + {params.g_update_salience}·e)",
           f"t = study {params.time_unit} × {params.time_scale:.4g}   relevance: {params.relevance.to_dict()}",
           f"recall candidates: {params.candidates.to_dict()}", ""]
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


def _cosine_lines(report: CalibrationReport) -> list[str]:
    params = report.params
    out = ["measured cosines in the sample (query vs stored passage; stored messages that are recall candidates)"]
    for split, languages in report.pair_cosines.items():
        for language, pairs in languages.items():
            for kind, values in pairs.items():
                arr = np.array(values)
                if arr.size:
                    out.append(f"  {language} {split:8s} {kind:9s} n={arr.size:4d}  min {arr.min():.3f}  "
                               f"median {np.median(arr):.3f}  p90 {np.percentile(arr, 90):.3f}  "
                               f"p95 {np.percentile(arr, 95):.3f}  max {arr.max():.3f}")
    if params.relevance.method == "linear":
        for language in COSINE_GRID:
            floor, ceiling = params.relevance.bounds(language)
            out.append(f"  {language} mapping: floor {floor:.3f} → r = 0, ceiling {ceiling:.3f} → r = 1")
    return out


def _p_table_lines(report: CalibrationReport) -> list[str]:
    params = report.params
    unit = "turns" if params.time_unit == "turns" else "days"
    out: list[str] = []
    for language, rows in report.p_tables.items():
        out.append("")
        out.append(f"p_final for a never-recalled memory (e = 0, g = {params.g0_base}), {language} query; "
                   f"* = recalled (≥ {params.threshold})")
        out.append("  cosine      r  " + "".join(f"{gap:>5g} {unit[0]} " for gap in report.gaps))
        for row in rows:
            cells = "".join(f"{c['p_final']:6.3f}{'*' if c['recalled'] else ' '} " for c in row["cells"])
            out.append(f"  {row['cosine']:.3f}  {row['r']:5.2f}  {cells}")
    return out


def _needed_relevance_lines(report: CalibrationReport) -> list[str]:
    params = report.params
    unit = "turns" if params.time_unit == "turns" else "days"
    out = ["r needed for recall (never-recalled memory, g = g0(e)); above 1 = impossible",
           "     e    g0  " + "".join(f"{gap:>6g} {unit[0]}" for gap in report.gaps)]
    for e in (0.0, 0.5, 1.0):
        g0 = float(rm.initial_g(e, params.g0_base, params.g0_salience))
        needed = []
        for gap in report.gaps:
            t = float(rm.elapsed_time(gap * report.day_seconds, unit=params.time_unit, time_scale=params.time_scale,
                                      day_seconds=report.day_seconds, turns=gap))
            needed.append(float(rm.required_relevance(t, g0, e, params.threshold, params.salience_bonus)))
        out.append(f"  {e:4.1f}  {g0:4.2f}  " + "".join(f"{r:8.3f}" if r < 100 else f"{'>100':>8s}" for r in needed))
    return out


def _schedule_lines(report: CalibrationReport) -> list[str]:
    out = ["simulated schedule (sample conversations; dev = participants the bounds were chosen on)",
           f"  {'participants':18s} task memories candidates recalled share  relevant recalled  share  "
           "unrelated-recalled  echoes"]
    for split in SPLITS:
        for language in report.languages:
            for o in report.group(split, language).values():
                out.append(_outcome_row(f"{split} {language}", o))
    for language in report.languages:
        for o in report.group(language=language).values():
            out.append(_outcome_row(f"all {language}", o))
    for o in report.tasks.values():
        out.append(_outcome_row("all", o))
    return out


def _candidate_lines(report: CalibrationReport) -> list[str]:
    out: list[str] = []
    for task_id, o in report.tasks.items():
        out.append(f"\n  {task_id} candidates")
        for ev in o.events:
            tag = "rel" if ev["relevant"] else "echo" if ev["echo"] else ""
            out.append(f"    {'RECALL' if ev['recalled'] else '      '} {tag:4s} {ev['participant']:4s} "
                       f"cos {ev['cosine']:.3f} r {ev['r']:.2f} t {ev['t']:.3f} g {ev['g_before']:.2f}"
                       f"→{ev['g_after']:.2f} p {ev['p']:.3f} pf {ev['p_final']:.3f}  "
                       f"{ev['query'][:24]} | {ev['memory'][:24]}")
    return out


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
    for r, g in ((1.0, 2.0), (1.0, 1.5), (1.0, 1.0), (0.9, 1.0), (0.75, 1.0)):
        label = f"r {r:.2f}, g {g:.1f}"
        if params.relevance.method == "linear":
            label += "  (cos " + " / ".join(
                f"{lang} {f + r * (c - f):.3f}" for lang in report.p_tables
                for f, c in [params.relevance.bounds(lang)]) + ")"
        curves.plot(span, rm.recall_probability(r, t, g), label=label)
    curves.axhline(params.threshold, color="black", linestyle="--", linewidth=1, label="threshold")
    for gap in report.gaps:
        curves.axvline(gap, color="grey", alpha=0.2)
    curves.set(xlabel=f"gap since creation or last recall ({unit})", ylabel="p (e = 0)", ylim=(0, 1.02),
               title=f"forgetting curve, preset {params.preset}")
    curves.legend(fontsize=7)
    task_ids = list(report.tasks)
    x = np.arange(len(task_ids))
    series = [("all memories", report.tasks, "share")]
    series += [(f"relevant, {lang}", report.group(language=lang), "relevant_share") for lang in report.languages]
    width = 0.8 / len(series)
    for i, (label, outcomes, measure) in enumerate(series):
        bars.bar(x - 0.4 + (i + 0.5) * width, [getattr(outcomes[k], measure)() for k in task_ids], width,
                 label=label)
    bars.axhline(UNIVERSAL_SHARE, color="red", linestyle=":", linewidth=1, label="universal")
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
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"PNG path (default {DEFAULT_OUT})")
    parser.add_argument("--day-seconds", type=float, default=SECONDS_PER_DAY,
                        help="real seconds per study day, as PILOT_DAY_SECONDS (default 86400)")
    parser.add_argument("--verbose", action="store_true", help="print every simulated candidate")
    parser.add_argument("--strict", action="store_true", help="exit 2 when recall is impossible or universal")
    args = parser.parse_args(argv)
    embedder = embedder or configured_embedder(args.embedder)
    report = calibrate(load_study(args.study), preset=args.preset, embedder=embedder, day_seconds=args.day_seconds)
    print(format_report(report, verbose=args.verbose))
    print(f"\nplot saved to {save_plot(report, args.out)}")
    for warning in report.warnings():
        print(f"\n!!! WARNING: {warning} !!!", file=sys.stderr)
    if args.strict and (report.impossible or report.universal):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
