"""Benchmark the memory components' retrieval on LoCoMo (evidence recall@k over dialog turns).

For every LoCoMo QA item, each method ranks the turns of the item's conversation
against the question; the script prints evidence recall@k overall and per
category for the dev conversations (0-4), the held-out ones (5-9) and all
together, beside the LoCoMo paper's DRAGON reference, plus what the evidence
normalisation repaired and dropped and what L4 and S1 would hand the model with
their deployed cut-offs. Methods: bm25, dense (offline embedder), l4 (the
forgetting curve re-ranking dense), l4_t0 (the same with t = 0: no time decay),
s1 (fuzzy score). Logic: services/memory_bench.py.

    .venv/bin/python scripts/memory_bench.py [--data ../shared/bench] [--methods bm25,dense,l4,l4_t0,s1]
        [--conversations 0-9] [--limit-qa N] [--k 5,10,25] [--json-out FILE] [--cache-dir data/bench_cache]
        [--l4-preset calibrated|seed_literal] [--memorybank cn|en]

The data are read in place (default: ../shared/bench beside the repository), never copied.
Turn and question vectors are cached under data/bench_cache/ (gitignored); the first full
run embeds about 7,900 texts, which takes a while on two cores. Results: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from services import memory_bench as mb
from services.recall_model import resolve_recall_params
from services.study import load_study

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "bench"
DEFAULT_CACHE = REPO_ROOT / "data" / "bench_cache"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="benchmark folder holding locomo/locomo10.json (default: ../shared/bench)")
    parser.add_argument("--methods", default=",".join(mb.METHODS),
                        help=f"comma-separated, from {', '.join(mb.METHODS)} (default: all)")
    parser.add_argument("--conversations", default="0-9", help="LoCoMo conversation indices, e.g. 0-4 or 0,5-9")
    parser.add_argument("--limit-qa", type=int, default=None,
                        help="evaluate only the first N QA items per conversation")
    parser.add_argument("--k", default=",".join(str(k) for k in mb.DEFAULT_KS), help="cut-offs, e.g. 5,10,25")
    parser.add_argument("--json-out", type=Path, default=None, help="also write summary, drops and per-item results")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE,
                        help="embedding cache (default: data/bench_cache)")
    parser.add_argument("--memorybank", choices=sorted(mb.MEMORYBANK_FILES), default=None,
                        help="also describe which stored days MemoryBank's probing questions retrieve (no gold)")
    parser.add_argument("--l4-preset", default=None,
                        help="recall preset for l4 (default: the study's, e.g. calibrated; or seed_literal)")
    args = parser.parse_args(argv)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in args.methods if m not in mb.METHODS]
    if unknown or not args.methods:
        parser.error(f"unknown methods {unknown}; choose from {', '.join(mb.METHODS)}")
    try:
        args.conversations = mb.parse_index_ranges(args.conversations)
        args.k = mb.parse_index_ranges(args.k)
    except ValueError as exc:
        parser.error(str(exc))
    if min(args.k) < 1:
        parser.error("k must be at least 1")
    if args.limit_qa is not None and args.limit_qa < 1:
        parser.error("--limit-qa must be at least 1")
    if not (args.data / mb.LOCOMO_FILE).is_file():
        parser.error(f"{args.data / mb.LOCOMO_FILE} not found (pass --data; see ../shared/bench/README.md)")
    return args


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_context(methods: list[str], ks: list[int], cache_dir: Path, l4_preset: str | None = None) -> mb.BenchContext:
    """The study's L4 and S1 parameters and the cached offline embedder, for the methods that need them."""
    ctx = mb.BenchContext(methods=methods, ks=ks)
    if not mb.EMBEDDING_METHODS & set(methods):
        return ctx
    from services.memory.structured_summary import s1_settings, semantic_mapping, time_weight
    from services.providers.offline import OfflineEmbeddingProvider

    embedder = OfflineEmbeddingProvider()
    ctx.cache = mb.EmbeddingCache(cache_dir, embedder, progress=log)
    study = load_study()
    ctx.recall_params = resolve_recall_params(study.memory.recall_config, preset=l4_preset)
    ctx.salience_weights = dict(study.memory.salience_weights)
    s1 = s1_settings(study)
    ctx.fuzzy = mb.FuzzyScoring(
        weights=s1["weights"],
        semantic=semantic_mapping(embedder.model, s1["semantic_bounds"]),
        time_weight=partial(time_weight, floor=s1["time_weight_floor"], decay_hours=s1["time_decay_hours"]),
        threshold=float(s1["threshold"]),
        max_fragments=int(s1["max_fragments"]),
    )
    return ctx


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    conversations, report = mb.load_locomo(args.data, args.conversations)
    ctx = build_context(args.methods, args.k, args.cache_dir, args.l4_preset)
    results: list[mb.ItemResult] = []
    for conv in conversations:
        conv_started = time.perf_counter()
        items = mb.evaluate_conversation(conv, ctx, args.limit_qa)
        results.extend(items)
        log(f"conversation {conv.index} ({conv.sample_id}): {len(conv.turns)} turns, "
            f"{len(items) // max(len(args.methods), 1)} QA items, {time.perf_counter() - conv_started:.1f} s")
    memorybank: dict[str, Any] | None = None
    if args.memorybank:
        users, problems = mb.load_memorybank(args.data, args.memorybank)
        for problem in problems:
            log(f"MemoryBank: {problem}")
        memorybank = {**mb.describe_memorybank(users, ctx), "language": args.memorybank, "problems": problems}
        log(f"MemoryBank ({args.memorybank}): {len(users)} users, "
            f"{sum(len(u.questions) for u in users)} probing questions")
    elapsed = time.perf_counter() - started
    summary = mb.summarise(results, args.k)
    out: dict[str, Any] = {
        "command": " ".join([".venv/bin/python scripts/memory_bench.py", *sys.argv[1:]]),
        "conversations": args.conversations,
        "methods": args.methods,
        "ks": args.k,
        "limit_qa": args.limit_qa,
        "summary": summary,
        "evidence": report.to_dict(),
        "deployed": [g.to_dict() for g in ctx.gates.values()],
        "seconds": {"total": elapsed, **dict(ctx.timings)},
        "evidence_age_days": ctx.evidence_ages,
        "embedding_cache": None if ctx.cache is None else {
            "hits": ctx.cache.hits, "computed": ctx.cache.computed, "seconds": ctx.cache.seconds},
        "memorybank": memorybank,
        "recall_params": None if ctx.recall_params is None else ctx.recall_params.to_dict(),
        "items": [{"method": r.method, "conversation": r.conversation, "qa": r.qa, "category": r.category,
                   "recall": {str(k): v for k, v in r.recall.items()}} for r in results],
    }
    print("\n".join(report.lines()))
    print()
    print("\n".join(mb.format_tables(summary, args.methods, args.k)))
    if ctx.gates:
        print("LoCoMo, deployed cut-offs (what the condition would put in the memory context):")
        for gate in out["deployed"]:
            print(f"  {gate['method']}: {gate['description']}: {gate['mean_returned']:.2f} turns per question, "
                  f"evidence recall of that set {gate['evidence_recall_percent']:.1f} %")
    if ctx.recall_params is not None:
        p = ctx.recall_params
        print(f"L4 parameters: preset {p.preset}, t in {p.time_unit} x {p.time_scale:g}, "
              f"relevance {p.relevance.method} {p.relevance.floor}-{p.relevance.ceiling} "
              f"(by language {p.relevance.by_language}), g0 = {p.g0_base} + {p.g0_salience}·e (lexicon salience)")
    if ctx.evidence_ages:
        ages = sorted(ctx.evidence_ages)
        quartiles = [ages[int(q * (len(ages) - 1))] for q in (0.25, 0.5, 0.75)]
        last = sum(1 for a in ages if a == 0) / len(ages)
        print(f"Evidence turns: {len(ages)}, age before the question (days) quartiles "
              f"{quartiles[0]:.0f} / {quartiles[1]:.0f} / {quartiles[2]:.0f}; {100 * last:.1f} % in the last session")
    timing = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in ctx.timings.items())
    print(f"Time: {elapsed:.1f} s in total ({timing})")
    if ctx.cache is not None:
        print(f"Embedding cache: {ctx.cache.hits} hits, {ctx.cache.computed} embedded in {ctx.cache.seconds:.1f} s "
              f"({args.cache_dir})")
    if memorybank is not None:
        print()
        print("\n".join(mb.format_memorybank(memorybank, args.memorybank)))
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8")
        print(f"JSON written to {args.json_out}")
    return out


def main(argv: list[str] | None = None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
