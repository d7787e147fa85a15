"""Calibrate L4 forgetting-curve recall for the configured embedder, schedule and parameters.

Prints (1) the measured cosine of related and unrelated pairs in a bundled
bilingual sample, (2) p over the study's real gaps for a range of raw cosines
and their mapped r, and (3) the share of the sample's memories recalled at T2,
T3 and T4 when the schedule is simulated on a ManualClock with g updates. Saves
the curves and shares as a PNG. Warns loudly on stderr when the configuration
makes recall impossible (nothing at any task) or universal (unrelated memories
recalled, or 90 % or more of the memories); ``--strict`` turns that into exit
code 2.

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

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from config import SECONDS_PER_DAY, load_study  # noqa: E402
from services import recall_model as rm  # noqa: E402
from services.clock import ManualClock  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "docs" / "_generated" / "recall_calibration.png"
UNIVERSAL_SHARE = 0.9
COSINE_GRID = {
    "zh": (0.84, 0.86, 0.87, 0.88, 0.89, 0.90, 0.91, 0.92, 0.94),
    "en": (0.76, 0.78, 0.80, 0.81, 0.82, 0.83, 0.84, 0.86, 0.88),
}
TURN_GAPS = (0.0, 3.0, 10.0, 20.0, 40.0)

# A bundled sample: two Chinese participants and one English one. Each message is
# (text, topics, (intensity, disclosure, value)); a stored memory is relevant to a
# probe when they share a topic. Filler has no topic, so it is relevant to nothing.
_FILLER = (0.0, 0.0, 0.0)
SAMPLE: dict[str, dict[str, list[tuple[str, set[str], tuple[float, float, float]]]]] = {
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

SAMPLE_LANGUAGE = {"zh": "zh", "zh2": "zh", "en": "en"}

MemoryKey = tuple[str, int]  # (sample participant, index of the memory in that participant's store)


@dataclass
class Memory:
    text: str
    topics: set[str]
    task_id: str
    created_at: datetime
    salience: float
    g: float
    vector: np.ndarray
    last_recall_at: datetime | None = None
    recall_count: int = 0


@dataclass
class TaskOutcome:
    """What recall did during one task, over all sample participants."""

    task_id: str
    memories: int = 0
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
        """Share of the memories relevant to some probe of the task that were recalled."""
        return len(self.relevant_recalled) / len(self.relevant) if self.relevant else 0.0


@dataclass
class CalibrationReport:
    params: rm.RecallParams
    embedder_model: str
    day_seconds: float
    pair_cosines: dict[str, dict[str, list[float]]]  # language -> related / unrelated / echo
    gaps: list[float]
    p_tables: dict[str, list[dict[str, Any]]]
    tasks: dict[str, TaskOutcome]

    @property
    def impossible(self) -> bool:
        return all(not outcome.recalled for outcome in self.tasks.values())

    @property
    def universal(self) -> bool:
        return any(o.unrelated_recalls > 0 or o.share() >= UNIVERSAL_SHARE or o.relevant_share() >= UNIVERSAL_SHARE
                   for o in self.tasks.values())

    def warnings(self) -> list[str]:
        found = []
        if self.impossible:
            found.append("recall is IMPOSSIBLE: no memory is recalled at any task, so L4 equals L3")
        for task_id, o in self.tasks.items():
            if o.unrelated_recalls:
                found.append(f"recall is UNIVERSAL at {task_id}: {o.unrelated_recalls} unrelated memories recalled")
            if o.share() >= UNIVERSAL_SHARE or o.relevant_share() >= UNIVERSAL_SHARE:
                found.append(f"recall is UNIVERSAL at {task_id}: {o.share():.0%} of memories, "
                             f"{o.relevant_share():.0%} of relevant ones recalled")
            if not o.recalled and not self.impossible:
                found.append(f"nothing recalled at {task_id}")
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


def _schedule(study: dict[str, Any]) -> dict[str, float]:
    return {task["id"]: float(task["unlock_offset_days"]) for task in study["tasks"]}


def study_gaps(study: dict[str, Any]) -> list[float]:
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


def pair_cosines(embedder, participant: str) -> dict[str, list[float]]:
    """Cosines of every (probe, earlier message) pair of one sample participant: related (a shared
    topic), unrelated, and echo (two topic-less messages such as "OK" and "好的")."""
    tasks = SAMPLE[participant]
    stored = [m for task_id in ("T1", "T2", "T3") for m in tasks[task_id]]
    probes = [m for task_id in ("T2", "T3", "T4") for m in tasks[task_id]]
    cos = embedder.embed_queries([p[0] for p in probes]) @ embedder.embed_passages([m[0] for m in stored]).T
    pairs: dict[str, list[float]] = {"related": [], "unrelated": [], "echo": []}
    for i, probe in enumerate(probes):
        for j, memory in enumerate(stored):
            if memory[0] == probe[0]:
                continue
            kind = "related" if probe[1] & memory[1] else "echo" if not (probe[1] or memory[1]) else "unrelated"
            pairs[kind].append(float(cos[i, j]))
    return pairs


def simulate_schedule(params: rm.RecallParams, study: dict[str, Any], embedder, *,
                      day_seconds: float = SECONDS_PER_DAY, message_gap_seconds: float = 60.0,
                      start: datetime = datetime(2026, 3, 2, 9, 0, 0)) -> dict[str, TaskOutcome]:
    """Run each sample participant through the study's schedule on a ManualClock.

    A task's user messages are consolidated (embedded; g0 from salience) when the
    task ends; every later message is a recall query over the earlier tasks'
    memories, scored by the VectorStore's core (top-k, threshold, g update with S(t),
    last recall time). Study time runs ``day_seconds`` real seconds per day, as in pilot mode."""
    schedule = _schedule(study)
    order = sorted(schedule, key=schedule.get)
    weights = study["memory"].get("salience_weights")
    outcomes = {task_id: TaskOutcome(task_id) for task_id in order[1:]}
    step = message_gap_seconds * day_seconds / SECONDS_PER_DAY
    for participant, tasks in SAMPLE.items():
        clock = ManualClock(start)
        memories: list[Memory] = []
        sent_at: list[datetime] = []
        for task_id in order:
            messages = tasks.get(task_id, [])
            if not messages:
                continue
            clock.set(start + timedelta(seconds=schedule[task_id] * day_seconds))
            outcome = outcomes.get(task_id)
            recalling = outcome is not None and bool(memories)
            query_vectors = embedder.embed_queries([m[0] for m in messages]) if recalling else None
            if outcome is not None:
                outcome.memories += len(memories)
            for i, (text, topics, _scores) in enumerate(messages):
                sent_at.append(clock.advance(step))
                if recalling:
                    _recall_once(params, participant, memories, query_vectors[i], text, topics, clock.now(),
                                 sent_at, day_seconds, outcome)
            for (text, topics, scores), vector, created_at in zip(
                    messages, embedder.embed_passages([m[0] for m in messages]), sent_at[-len(messages):], strict=True):
                salience = rm.emotional_salience(*scores, weights=weights)
                g0 = float(rm.initial_g(salience, params.g0_base, params.g0_salience))
                memories.append(Memory(text, topics, task_id, created_at, salience, g0, vector))
    return outcomes


def _recall_once(params: rm.RecallParams, participant: str, memories: list[Memory], query_vector: np.ndarray,
                 text: str, topics: set[str], now: datetime, sent_at: list[datetime], day_seconds: float,
                 outcome: TaskOutcome) -> None:
    cosines = np.stack([m.vector for m in memories]) @ query_vector
    chosen = rm.top_k_indices(cosines, params.top_k)
    refs = [memories[i].last_recall_at or memories[i].created_at for i in chosen]
    elapsed = np.array([(now - ref).total_seconds() for ref in refs])
    turns = np.array([sum(ref < s <= now for s in sent_at) for ref in refs], dtype=np.float64)
    t = np.atleast_1d(rm.elapsed_time(elapsed, unit=params.time_unit, time_scale=params.time_scale,
                                      day_seconds=day_seconds, turns=turns))
    g = np.array([memories[i].g for i in chosen])
    e = np.array([memories[i].salience for i in chosen])
    scores = rm.score_candidates(cosines[chosen], t, g, e, params, rm.text_language(text))
    outcome.relevant |= {(participant, i) for i, m in enumerate(memories) if topics & m.topics}
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


def calibrate(study: dict[str, Any] | None = None, *, preset: str | None = None, embedder=None,
              day_seconds: float = SECONDS_PER_DAY) -> CalibrationReport:
    """Everything the script prints, for the given study (default: the configured one)."""
    study = study or load_study()
    params = rm.resolve_recall_params(study, preset=preset)
    if embedder is None:
        from services.providers.offline import OfflineEmbeddingProvider

        embedder = OfflineEmbeddingProvider()
    if not isinstance(embedder, MemoEmbedder):
        embedder = MemoEmbedder(embedder)
    pairs: dict[str, dict[str, list[float]]] = {}
    for participant in SAMPLE:
        pooled = pairs.setdefault(SAMPLE_LANGUAGE[participant], {"related": [], "unrelated": [], "echo": []})
        for kind, values in pair_cosines(embedder, participant).items():
            pooled[kind].extend(values)
    gaps = list(TURN_GAPS) if params.time_unit == "turns" else study_gaps(study)
    tables = {language: p_table(params, gaps, language, day_seconds=day_seconds) for language in COSINE_GRID}
    tasks = simulate_schedule(params, study, embedder, day_seconds=day_seconds)
    return CalibrationReport(params, embedder.model, day_seconds, pairs, gaps, tables, tasks)


def format_report(report: CalibrationReport, *, verbose: bool = False) -> str:
    params = report.params
    out = [f"recall preset: {params.preset}   embedder: {report.embedder_model}",
           f"threshold {params.threshold}  top_k {params.top_k}  bonus {params.salience_bonus}  "
           f"g0 = {params.g0_base} + {params.g0_salience}·e  g += S(t)·(1 + {params.g_update_salience}·e)",
           f"t = study {params.time_unit} × {params.time_scale:.4g}   relevance: {params.relevance.to_dict()}", ""]
    out.append("measured cosines in the sample (query vs stored passage)")
    for language, pairs in report.pair_cosines.items():
        for kind, values in pairs.items():
            arr = np.array(values)
            if arr.size:
                out.append(f"  {language} {kind:9s} n={arr.size:3d}  min {arr.min():.3f}  median {np.median(arr):.3f}  "
                           f"p90 {np.percentile(arr, 90):.3f}  p95 {np.percentile(arr, 95):.3f}  max {arr.max():.3f}")
        floor, ceiling = params.relevance.bounds(language)
        if params.relevance.method == "linear":
            out.append(f"  {language} mapping: floor {floor:.3f} → r = 0, ceiling {ceiling:.3f} → r = 1")
    unit = "turns" if params.time_unit == "turns" else "days"
    for language, rows in report.p_tables.items():
        out.append("")
        out.append(f"p_final for a never-recalled memory (e = 0, g = {params.g0_base}), {language} query; "
                   f"* = recalled (≥ {params.threshold})")
        out.append("  cosine     r  " + "".join(f"{gap:>5g} {unit[0]} " for gap in report.gaps))
        for row in rows:
            cells = "".join(f"{c['p_final']:6.3f}{'*' if c['recalled'] else ' '} " for c in row["cells"])
            out.append(f"  {row['cosine']:.2f}  {row['r']:5.2f}  {cells}")
    out.append("")
    out.append("r needed for recall (never-recalled memory, g = g0(e)); above 1 = impossible")
    out.append("     e    g0  " + "".join(f"{gap:>6g} {unit[0]}" for gap in report.gaps))
    for e in (0.0, 0.5, 1.0):
        g0 = float(rm.initial_g(e, params.g0_base, params.g0_salience))
        needed = []
        for gap in report.gaps:
            t = float(rm.elapsed_time(gap * report.day_seconds, unit=params.time_unit, time_scale=params.time_scale,
                                      day_seconds=report.day_seconds, turns=gap))
            needed.append(float(rm.required_relevance(t, g0, e, params.threshold, params.salience_bonus)))
        out.append(f"  {e:4.1f}  {g0:4.2f}  " + "".join(f"{r:8.3f}" if r < 100 else f"{'>100':>8s}" for r in needed))
    out.append("")
    out.append("simulated schedule (sample conversations of all participants)")
    out.append("  task  memories  recalled  share  relevant  relevant-recalled  share  unrelated-recalled  echoes")
    for task_id, o in report.tasks.items():
        out.append(f"  {task_id:4s}  {o.memories:8d}  {len(o.recalled):8d}  {o.share():5.0%}  {len(o.relevant):8d}  "
                   f"{len(o.relevant_recalled):17d}  {o.relevant_share():5.0%}  "
                   f"{o.unrelated_recalls:4d} of {o.unrelated_candidates:3d}  {o.echo_recalls:6d}")
    if verbose:
        for task_id, o in report.tasks.items():
            out.append(f"\n  {task_id} candidates")
            for ev in o.events:
                tag = "rel" if ev["relevant"] else "echo" if ev["echo"] else ""
                out.append(f"    {'RECALL' if ev['recalled'] else '      '} {tag:4s} "
                           f"cos {ev['cosine']:.3f} r {ev['r']:.2f} t {ev['t']:.3f} g {ev['g_before']:.2f}"
                           f"→{ev['g_after']:.2f} p {ev['p']:.3f} pf {ev['p_final']:.3f}  "
                           f"{ev['query'][:24]} | {ev['memory'][:24]}")
    return "\n".join(out)


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
    bars.bar(x - 0.2, [report.tasks[k].share() for k in task_ids], 0.4, label="all memories")
    bars.bar(x + 0.2, [report.tasks[k].relevant_share() for k in task_ids], 0.4, label="relevant memories")
    bars.axhline(UNIVERSAL_SHARE, color="red", linestyle=":", linewidth=1, label="universal")
    bars.set(xticks=x, xticklabels=task_ids, ylim=(0, 1), ylabel="share recalled during the task",
             title="sample conversation, simulated schedule")
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
