"""The runs ``scripts/memory_bench.py`` makes: the benchmark context from the study definition (L4's and S1's
parameters, the fused ranker, the cached offline embedder), LoCoMo and MemoryBank through the retrieval methods
of ``memory_bench``, and every condition's deployed context through ``memory_bench_deployed``.

Each run takes typed options (``BenchRun``) and returns ``(result, report)``: what the script writes as JSON and
the lines it prints. Progress goes to the ``progress`` callback the script passes (standard error).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from services.recall.parameters import resolve_recall_params
from services.research import memory_bench as mb
from services.study.definition import Study

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BenchRun:
    """What one run of scripts/memory_bench.py evaluates (its command line, parsed and checked)."""

    data: Path  # the benchmark folder (locomo/, memorybank/)
    methods: list[str]
    k: list[int]
    conversations: list[int]  # LoCoMo conversation indices
    limit_qa: int | None = None  # LoCoMo: only the first N QA items per conversation
    deployed: bool = True  # also build every condition's real context
    deployed_qa: int | None = None  # LoCoMo: real contexts for only the first N QA items per conversation
    language: str = "zh"  # MemoryBank: zh or en
    evidence: Path | None = None  # MemoryBank: labelled questions


def _quiet(message: str) -> None:
    return None


def build_context(study: Study, methods: list[str], ks: list[int], cache_dir: Path, l4_preset: str | None = None,
                  fusion: mb.FusionSettings | None = None, progress: Progress = _quiet) -> mb.BenchContext:
    """The study's L4 and S1 parameters and the cached offline embedder, for the methods that need them."""
    ctx = mb.BenchContext(methods=methods, ks=ks, fusion=fusion or mb.FusionSettings())
    if not mb.EMBEDDING_METHODS & set(methods):
        return ctx
    from services.llm.providers.offline import OfflineEmbeddingProvider
    from services.memory.structured_summary import s1_settings, semantic_mapping, time_weight

    embedder = OfflineEmbeddingProvider()
    ctx.cache = mb.EmbeddingCache(cache_dir, embedder, progress=progress)
    ctx.recall_params = resolve_recall_params(study.memory.recall_config, preset=l4_preset)
    ctx.salience_weights = dict(study.memory.salience_weights)
    s1 = s1_settings(study)
    ctx.fuzzy = mb.FuzzyScoring(
        weights=s1["weights"],
        semantic=semantic_mapping(embedder.model, s1["semantic_bounds"]),
        time_weight=partial(time_weight, floor=s1["time_weight_floor"], decay_hours=s1["time_decay_hours"]),
        threshold=float(s1["threshold"]),
        max_fragments=int(s1["max_fragments"]),
        candidate_pool=int(s1["candidate_pool"]) if s1.get("candidate_pool") else None,
    )
    return ctx


def fusion_settings(study: Study, *, lexical_weight: float | None = None, dense_weight: float | None = None,
                    window: int | None = None) -> mb.FusionSettings:
    """The fused ranker as the study configures L4's retriever, but for the values given."""
    retrieval = study.memory.retrieval

    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    weights = mb.FusionWeights(lexical=pick(lexical_weight, retrieval.fusion.lexical),
                               dense=pick(dense_weight, retrieval.fusion.dense))
    return mb.FusionSettings(weights=weights, window=pick(window, retrieval.neighbour_turns),
                             k1=retrieval.k1, b=retrieval.b)


def deployed_run(histories: list[Any], ctx: mb.BenchContext, progress: Progress = _quiet
                 ) -> dict[str, dict[str, Any]]:
    """Every study condition's real context for every probe of ``histories`` (the memory_bench_deployed
    harness), per condition: evidence share, items and tokens per question."""
    from services.research import memory_bench_deployed as md

    with md.deployed_runtime(md.CachedEmbedder(ctx.cache)) as runtime:
        bench = md.DeployedBench(runtime)
        for history in histories:
            started = time.perf_counter()
            bench.run(history)
            progress(f"deployed: {history.name}, {len(history.probes)} questions x {len(bench.conditions)} conditions, "
                f"{time.perf_counter() - started:.1f} s")
        return {c: {**o.to_dict(), "per_probe": o.per_probe} for c, o in bench.outcomes.items()}


def format_deployed(deployed: dict[str, dict[str, Any]],
                    ranking: dict[str, dict[str, float]] | None = None) -> list[str]:
    """One row per condition: what its real context hands the model (and, where a ranker stands for
    the condition, that ranker's recall@5/@10 from ``ranking`` in percent)."""
    lines = ["| condition | ranking recall@5 | ranking recall@10 | evidence among its candidates "
             "| evidence share of the context | items / question | tokens / question |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for condition, row in deployed.items():
        ranked = (ranking or {}).get(condition.lower())
        r5, r10 = (f"{ranked['recall@5']:.1f}", f"{ranked['recall@10']:.1f}") if ranked else ("-", "-")
        candidates = (f"{100 * row['candidate_evidence_share']:.1f} % of {row['candidates_per_question']:.1f}"
                      if "candidate_evidence_share" in row else "-")
        lines.append(f"| {condition} | {r5} | {r10} | {candidates} | {100 * row['evidence_share']:.1f} % | "
                     f"{row['items_per_question']:.2f} | {row['tokens_per_question']:.0f} |")
    return lines


def deployed_possible(run: BenchRun, ctx: mb.BenchContext, progress: Progress = _quiet) -> bool:
    if run.deployed and ctx.cache is None:
        progress("deployed contexts skipped: building them needs the embedder (run an embedding method, e.g. fused)")
    return bool(run.deployed and ctx.cache is not None)


def run_locomo(run: BenchRun, ctx: mb.BenchContext, progress: Progress = _quiet) -> tuple[dict[str, Any], list[str]]:
    """Evidence recall@k per method on the LoCoMo conversations, then (unless told not to) every condition's real
    context; returns the JSON result and the report's lines."""
    conversations, report = mb.load_locomo(run.data, run.conversations)
    results: list[mb.ItemResult] = []
    for conv in conversations:
        conv_started = time.perf_counter()
        items = mb.evaluate_conversation(conv, ctx, run.limit_qa)
        results.extend(items)
        progress(f"conversation {conv.index} ({conv.sample_id}): {len(conv.turns)} turns, "
                 f"{len(items) // max(len(run.methods), 1)} QA items, {time.perf_counter() - conv_started:.1f} s")
    summary = mb.summarise(results, run.k)
    out: dict[str, Any] = {"dataset": "locomo", "conversations": run.conversations, "summary": summary,
                           "evidence": report.to_dict(), "evidence_age_days": ctx.evidence_ages,
                           "items": [{"method": r.method, "conversation": r.conversation, "qa": r.qa,
                                      "category": r.category, "recall": {str(k): v for k, v in r.recall.items()}}
                                     for r in results]}
    lines = [*report.lines(), "", *mb.format_tables(summary, run.methods, run.k)]
    if deployed_possible(run, ctx, progress):
        from services.research import memory_bench_deployed as md

        histories = []
        for conv in conversations:
            conv.questions = conv.questions[:run.deployed_qa] if run.deployed_qa else conv.questions
            histories.append(md.locomo_history(conv))
        out["deployed"] = {split: deployed_run([h for h, c in zip(histories, conversations, strict=True)
                                                if mb.split_of(c.index) == split], ctx, progress)
                           for split in ("dev", "held-out") if any(mb.split_of(c.index) == split
                                                                  for c in conversations)}
        for split, deployed in out["deployed"].items():
            ranking = {m: rows["overall"] for m, rows in summary[split].items()}
            lines += [f"LoCoMo {mb.SPLIT_TITLES[split]}: what each condition's real context hands the model",
                      *format_deployed(deployed, ranking), ""]
    if ctx.evidence_ages:
        ages = sorted(ctx.evidence_ages)
        quartiles = [ages[int(q * (len(ages) - 1))] for q in (0.25, 0.5, 0.75)]
        last = sum(1 for a in ages if a == 0) / len(ages)
        lines.append(f"Evidence turns: {len(ages)}, age before the question (days) quartiles "
                     f"{quartiles[0]:.0f} / {quartiles[1]:.0f} / {quartiles[2]:.0f}; {100 * last:.1f} % in the last "
                     "session")
    return out, lines


def run_memorybank(run: BenchRun, ctx: mb.BenchContext, progress: Progress = _quiet
                   ) -> tuple[dict[str, Any], list[str]]:
    """Which stored days each method retrieves, or with labelled evidence its recall@k and (unless told not to)
    every condition's real context; returns the JSON result and the report's lines."""
    users, problems = mb.load_memorybank(run.data, run.language)
    for problem in problems:
        progress(f"MemoryBank: {problem}")
    if run.evidence is None:
        report = {**mb.describe_memorybank(users, ctx), "language": run.language, "problems": problems}
        return {"dataset": "memorybank", "memorybank": report}, mb.format_memorybank(report, run.language)
    from services.research import memory_bench_deployed as md

    labelled = mb.load_labelled_evidence(run.evidence, users)
    methods = mb.method_recalls(mb.evaluate_labelled(users, labelled, ctx), run.k)
    out: dict[str, Any] = {"dataset": "memorybank", "language": run.language, "questions": len(labelled),
                           "methods": methods}
    lines = [f"MemoryBank ({run.language}), {len(labelled)} labelled questions from {run.evidence}: evidence recall",
             "| method | " + " | ".join(f"recall@{k}" for k in run.k) + " |",
             "|" + " --- |" * (len(run.k) + 1)]
    for method, row in methods.items():
        lines.append(f"| {method} | " + " | ".join(f"{100 * row[f'recall@{k}']:.1f}" for k in run.k) + " |")
    lines.append("")
    if deployed_possible(run, ctx, progress):
        language = "zh" if mb.MEMORYBANK_LANGUAGES[run.language] == "cn" else "en"
        histories = []
        for user in users:
            probes = [md.Probe(q.qid, q.question, q.evidence) for q in labelled if q.user == user.name]
            if probes:
                histories.append(md.memorybank_history(user, probes, language))
        out["deployed"] = deployed_run(histories, ctx, progress)
        ranking = {m: {k: 100 * v for k, v in row.items()} for m, row in methods.items()}
        lines += [f"MemoryBank ({run.language}): what each condition's real context hands the model",
                  *format_deployed(out["deployed"], ranking)]
    return out, lines
