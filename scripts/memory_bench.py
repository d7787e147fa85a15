"""Benchmark the memory components' retrieval, and what each condition really hands the model.

LoCoMo (default): for every QA item each method ranks the turns of the item's conversation
against the question; the script prints evidence recall@k overall and per category for the dev
conversations (0-4, the only ones tuned on), the held-out ones (5-9) and all together, beside the
LoCoMo paper's DRAGON reference, plus what the evidence normalisation repaired and dropped.
Methods: bm25, dense (offline embedder), fused (the hybrid retriever of services/recall/retrieval.py),
l4 (the forgetting curve re-ranking dense), l4_t0 (the same with t = 0), s1 (fuzzy score).

MemoryBank (--dataset memorybank --language zh|en): with --evidence FILE (labelled questions, a JSON
list of {"user", "qid": "<user>#<i>", "evidence": [{"date", "index"}]}) the same recall@k per method;
without it, only which stored days each method retrieves.

Unless --no-deployed, every study condition is then run through its real code on a throwaway
database (services/research/memory_bench_deployed.py) and the script reports, per condition, the evidence
share of the context it builds, items and tokens per question. Logic: services/research/memory_bench.py.

    .venv/bin/python scripts/memory_bench.py [--data ../shared/bench] [--methods bm25,dense,fused,l4,l4_t0,s1]
        [--conversations 0-9] [--limit-qa N] [--deployed-qa N] [--k 5,10,25] [--json-out FILE]
        [--fusion-window 2] [--lexical-weight 1.5] [--dense-weight 1.0] [--l4-preset NAME] [--no-deployed]
        [--cache-dir data/bench_cache]
    .venv/bin/python scripts/memory_bench.py --dataset memorybank --language zh --evidence FILE --json-out OUT

The data are read in place (default: ../shared/bench beside the repository), never copied.
Vectors are cached under data/bench_cache/ (gitignored); the first full LoCoMo run embeds about
7,900 texts, which takes a while on two cores. Results: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from services.recall.recall_model import resolve_recall_params
from services.research import memory_bench as mb
from services.study.definition import load_study

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
    parser.add_argument("--dataset", choices=("locomo", "memorybank"), default="locomo",
                        help="locomo (default) or memorybank")
    parser.add_argument("--language", choices=sorted(mb.MEMORYBANK_LANGUAGES), default="zh",
                        help="memorybank: zh (the _cn files, default) or en")
    parser.add_argument("--evidence", type=Path, default=None,
                        help="memorybank: labelled questions, a JSON list of {user, qid: '<user>#<i>', "
                             "evidence: [{date, index}]}; without it the run only describes the retrieved days")
    parser.add_argument("--no-deployed", dest="deployed", action="store_false",
                        help="skip building every condition's real context (the slow part)")
    parser.add_argument("--deployed-qa", type=int, default=None,
                        help="locomo: build the real contexts for only the first N QA items per conversation")
    parser.add_argument("--l4-preset", default=None,
                        help="recall preset for l4 (default: the study's, e.g. calibrated; or seed_literal)")
    parser.add_argument("--fusion-window", type=int, default=None,
                        help="fused: previous turns of the same session indexed with a turn "
                             "(default: the study's memory.retrieval.neighbour_turns)")
    parser.add_argument("--lexical-weight", type=float, default=None,
                        help="fused: weight of z(BM25) (default: the study's memory.retrieval.fusion)")
    parser.add_argument("--dense-weight", type=float, default=None,
                        help="fused: weight of z(cosine) (default: the study's memory.retrieval.fusion)")
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
    if args.deployed_qa is not None and args.deployed_qa < 1:
        parser.error("--deployed-qa must be at least 1")
    if args.fusion_window is not None and args.fusion_window < 0:
        parser.error("--fusion-window must be at least 0")
    if args.limit_qa is not None and args.limit_qa < 1:
        parser.error("--limit-qa must be at least 1")
    if args.dataset == "locomo" and not (args.data / mb.LOCOMO_FILE).is_file():
        parser.error(f"{args.data / mb.LOCOMO_FILE} not found (pass --data; see ../shared/bench/README.md)")
    if args.dataset == "memorybank":
        for name in mb.MEMORYBANK_FILES[mb.MEMORYBANK_LANGUAGES[args.language]]:
            if not (args.data / name).is_file():
                parser.error(f"{args.data / name} not found (pass --data; see ../shared/bench/README.md)")
    if args.evidence is not None and not args.evidence.is_file():
        parser.error(f"--evidence {args.evidence}: no such file")

    return args


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_context(methods: list[str], ks: list[int], cache_dir: Path, l4_preset: str | None = None,
                  fusion: mb.FusionSettings | None = None) -> mb.BenchContext:
    """The study's L4 and S1 parameters and the cached offline embedder, for the methods that need them."""
    ctx = mb.BenchContext(methods=methods, ks=ks, fusion=fusion or mb.FusionSettings())
    if not mb.EMBEDDING_METHODS & set(methods):
        return ctx
    from services.llm.providers.offline import OfflineEmbeddingProvider
    from services.memory.structured_summary import s1_settings, semantic_mapping, time_weight

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
        candidate_pool=int(s1["candidate_pool"]) if s1.get("candidate_pool") else None,
    )
    return ctx


def fusion_settings(args: argparse.Namespace) -> mb.FusionSettings:
    """The fused ranker as the study configures L4's retriever, unless the options override it."""
    study = load_study().memory.retrieval

    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    weights = mb.FusionWeights(lexical=pick(args.lexical_weight, study.fusion.lexical),
                               dense=pick(args.dense_weight, study.fusion.dense))
    return mb.FusionSettings(weights=weights, window=pick(args.fusion_window, study.neighbour_turns),
                             k1=study.k1, b=study.b)


def deployed_run(histories: list[Any], ctx: mb.BenchContext) -> dict[str, dict[str, Any]]:
    """Every study condition's real context for every probe of ``histories`` (the memory_bench_deployed
    harness), per condition: evidence share, items and tokens per question."""
    from services.research import memory_bench_deployed as md

    with md.deployed_runtime(md.CachedEmbedder(ctx.cache)) as runtime:
        bench = md.DeployedBench(runtime)
        for history in histories:
            started = time.perf_counter()
            bench.run(history)
            log(f"deployed: {history.name}, {len(history.probes)} questions x {len(bench.conditions)} conditions, "
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


def deployed_possible(args: argparse.Namespace, ctx: mb.BenchContext) -> bool:
    if args.deployed and ctx.cache is None:
        log("deployed contexts skipped: building them needs the embedder (run an embedding method, e.g. fused)")
    return bool(args.deployed and ctx.cache is not None)


def run_locomo(args: argparse.Namespace, ctx: mb.BenchContext) -> dict[str, Any]:
    conversations, report = mb.load_locomo(args.data, args.conversations)
    results: list[mb.ItemResult] = []
    for conv in conversations:
        conv_started = time.perf_counter()
        items = mb.evaluate_conversation(conv, ctx, args.limit_qa)
        results.extend(items)
        log(f"conversation {conv.index} ({conv.sample_id}): {len(conv.turns)} turns, "
            f"{len(items) // max(len(args.methods), 1)} QA items, {time.perf_counter() - conv_started:.1f} s")
    summary = mb.summarise(results, args.k)
    out: dict[str, Any] = {"dataset": "locomo", "conversations": args.conversations, "summary": summary,
                           "evidence": report.to_dict(), "evidence_age_days": ctx.evidence_ages,
                           "items": [{"method": r.method, "conversation": r.conversation, "qa": r.qa,
                                      "category": r.category, "recall": {str(k): v for k, v in r.recall.items()}}
                                     for r in results]}
    print("\n".join(report.lines()))
    print()
    print("\n".join(mb.format_tables(summary, args.methods, args.k)))
    if deployed_possible(args, ctx):
        from services.research import memory_bench_deployed as md

        histories = []
        for conv in conversations:
            conv.questions = conv.questions[:args.deployed_qa] if args.deployed_qa else conv.questions
            histories.append(md.locomo_history(conv))
        out["deployed"] = {split: deployed_run([h for h, c in zip(histories, conversations, strict=True)
                                                if mb.split_of(c.index) == split], ctx)
                           for split in ("dev", "held-out") if any(mb.split_of(c.index) == split
                                                                  for c in conversations)}
        for split, deployed in out["deployed"].items():
            ranking = {m: rows["overall"] for m, rows in summary[split].items()}
            print(f"LoCoMo {mb.SPLIT_TITLES[split]}: what each condition's real context hands the model")
            print("\n".join(format_deployed(deployed, ranking)))
            print()
    if ctx.evidence_ages:
        ages = sorted(ctx.evidence_ages)
        quartiles = [ages[int(q * (len(ages) - 1))] for q in (0.25, 0.5, 0.75)]
        last = sum(1 for a in ages if a == 0) / len(ages)
        print(f"Evidence turns: {len(ages)}, age before the question (days) quartiles "
              f"{quartiles[0]:.0f} / {quartiles[1]:.0f} / {quartiles[2]:.0f}; {100 * last:.1f} % in the last session")
    return out


def run_memorybank(args: argparse.Namespace, ctx: mb.BenchContext) -> dict[str, Any]:
    users, problems = mb.load_memorybank(args.data, args.language)
    for problem in problems:
        log(f"MemoryBank: {problem}")
    if args.evidence is None:
        report = {**mb.describe_memorybank(users, ctx), "language": args.language, "problems": problems}
        print("\n".join(mb.format_memorybank(report, args.language)))
        return {"dataset": "memorybank", "memorybank": report}
    from services.research import memory_bench_deployed as md

    labelled = mb.load_labelled_evidence(args.evidence, users)
    methods = mb.method_recalls(mb.evaluate_labelled(users, labelled, ctx), args.k)
    out: dict[str, Any] = {"dataset": "memorybank", "language": args.language, "questions": len(labelled),
                           "methods": methods}
    print(f"MemoryBank ({args.language}), {len(labelled)} labelled questions from {args.evidence}: evidence recall")
    print("| method | " + " | ".join(f"recall@{k}" for k in args.k) + " |")
    print("|" + " --- |" * (len(args.k) + 1))
    for method, row in methods.items():
        print(f"| {method} | " + " | ".join(f"{100 * row[f'recall@{k}']:.1f}" for k in args.k) + " |")
    print()
    if deployed_possible(args, ctx):
        language = "zh" if mb.MEMORYBANK_LANGUAGES[args.language] == "cn" else "en"
        histories = []
        for user in users:
            probes = [md.Probe(q.qid, q.question, q.evidence) for q in labelled if q.user == user.name]
            if probes:
                histories.append(md.memorybank_history(user, probes, language))
        out["deployed"] = deployed_run(histories, ctx)
        ranking = {m: {k: 100 * v for k, v in row.items()} for m, row in methods.items()}
        print(f"MemoryBank ({args.language}): what each condition's real context hands the model")
        print("\n".join(format_deployed(out["deployed"], ranking)))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    ctx = build_context(args.methods, args.k, args.cache_dir, args.l4_preset, fusion_settings(args))
    out = run_locomo(args, ctx) if args.dataset == "locomo" else run_memorybank(args, ctx)
    elapsed = time.perf_counter() - started
    out.update({
        "command": " ".join([".venv/bin/python scripts/memory_bench.py", *sys.argv[1:]]),
        "methods_run": args.methods, "ks": args.k, "limit_qa": args.limit_qa, "fusion": ctx.fusion.to_dict(),
        "seconds": {"total": elapsed, **dict(ctx.timings)},
        "embedding_cache": None if ctx.cache is None else {
            "hits": ctx.cache.hits, "computed": ctx.cache.computed, "seconds": ctx.cache.seconds},
        "recall_params": None if ctx.recall_params is None else ctx.recall_params.to_dict(),
    })
    if ctx.recall_params is not None:
        p = ctx.recall_params
        print(f"L4 parameters: preset {p.preset}, t in {p.time_unit} x {p.time_scale:g}, "
              f"relevance {p.relevance.method} {p.relevance.floor}-{p.relevance.ceiling} "
              f"(by language {p.relevance.by_language}), g0 = {p.g0_base} + {p.g0_salience}·e (lexicon salience)")
    print(f"Fused ranker: {ctx.fusion.to_dict()}")
    timing = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in ctx.timings.items())
    print(f"Time: {elapsed:.1f} s in total ({timing})")
    if ctx.cache is not None:
        print(f"Embedding cache: {ctx.cache.hits} hits, {ctx.cache.computed} embedded in {ctx.cache.seconds:.1f} s "
              f"({args.cache_dir})")
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
