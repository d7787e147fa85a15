"""Probe recall: does L4 bring back the fact a participant comes back to? (issue 27, part 3)

    python scripts/probe_recall.py [--language zh|en|both] [--split dev,held-out,blind] [--condition L4|L3|L1]
                                   [--files A.json B.json] [--day-seconds 5] [--json] [--json-out FILE]

Each probe persona (data/probes/probe_personas_{zh,en}.json; format in services/research/probe_personas.py)
walks T1-T4 as one bot through the HTTP API of a temporary server in pilot mode, every persona in
``--condition``; the stored memory context of each reply says whether the probed fact's T1 message came back
(services/research/probe_recall.py). Prints the hit rates per language and task with Wilson intervals and
the targets' verdicts (T2 hit >= 50 %; facts an earlier probe recalled >= 40 % at T3, >= 30 % at T4; controls <= 5 %).

Exit 0 when no target is missed, 1 when one is, 2 when the run could not happen (bad probe file, no server).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from app import create_app
from config import Settings
from services.research.bots.client import ApiError
from services.research.probes.personas import DEFAULT_FILES, SPLITS, ProbeFileError, load_probe_files, select
from services.research.probes.recall import comparison_conditions, format_table, measure, run_personas


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=("zh", "en", "both"), default="both")
    parser.add_argument("--split", default="dev",
                        help=f"comma-separated splits among {', '.join(SPLITS)} (default dev)")
    parser.add_argument("--condition", choices=comparison_conditions(), default=comparison_conditions()[0],
                        help="the condition every persona is assigned to (default: the recalling one, L4)")
    parser.add_argument("--files", nargs="+", help="probe files (default: data/probes/probe_personas_zh/en.json)")
    parser.add_argument("--day-seconds", type=float, default=5.0, help="pilot day of the temporary server")
    parser.add_argument("--providers", choices=("offline", "env"), default="offline")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    parser.add_argument("--json-out", help="also write the run and the result as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    languages = ["zh", "en"] if args.language == "both" else [args.language]
    files = args.files or [DEFAULT_FILES[lang] for lang in languages]
    try:
        personas = select(load_probe_files(files), languages=languages,
                          splits=[s.strip() for s in args.split.split(",") if s.strip()])
        if not personas:
            raise ValueError(f"no personas of language {args.language} and split {args.split} in "
                             + ", ".join(map(str, files)))
        log = (lambda text: print(text, file=sys.stderr, flush=True)) if args.json else \
            (lambda text: print(text, flush=True))
        run = run_personas(personas, condition=args.condition, make_app=create_app, day_seconds=args.day_seconds,
                           settings=Settings.from_env() if args.providers == "env" else None, log=log)
    except (ProbeFileError, ApiError, RuntimeError, ValueError, OSError) as exc:
        print(f"probe recall failed: {exc}", file=sys.stderr)
        return 2
    result = measure(run)
    print(json.dumps(result, ensure_ascii=False, indent=2) if args.json else format_table(result, run))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"run": run, "result": result}, ensure_ascii=False, indent=2),
                                       encoding="utf-8")
    if not result["passed"]:
        print("probe recall: target missed: " + "; ".join(result["missed"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
