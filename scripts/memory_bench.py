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
share of the context it builds, items and tokens per question. Logic: services/research/memory_bench.py
and memory_bench_runs.py.

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
import os
import sys
import time
from pathlib import Path
from typing import Any

from services.research import memory_bench as mb
from services.research.memory_bench_runs import BenchRun, build_context, fusion_settings, run_locomo, run_memorybank
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


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    study = load_study(os.environ.get("STUDY_CONFIG"))
    fusion = fusion_settings(study, lexical_weight=args.lexical_weight, dense_weight=args.dense_weight,
                             window=args.fusion_window)
    ctx = build_context(study, args.methods, args.k, args.cache_dir, args.l4_preset, fusion, progress=log)
    bench = BenchRun(data=args.data, methods=args.methods, k=args.k, conversations=args.conversations,
                     limit_qa=args.limit_qa, deployed=args.deployed, deployed_qa=args.deployed_qa,
                     language=args.language, evidence=args.evidence)
    out, lines = (run_locomo if args.dataset == "locomo" else run_memorybank)(bench, ctx, progress=log)
    print("\n".join(lines))
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
