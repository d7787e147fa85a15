"""Calibrate L4 forgetting-curve recall for the configured embedder, schedule and parameters.

Prints (1) how the recall-candidate rule judges hand-labelled short messages
and how many sample messages it leaves out, (2) the relevance r of related and
unrelated (message, candidate) pairs of a bundled bilingual sample (32
participants; development, held-out and blind-written ones), (3) p over the
study's real gaps for a range of r, and (4) the share of the sample's memories
recalled at T2, T3 and T4, per language and split, when the schedule is
simulated on a ManualClock with g updates, and the pre-registered targets judged
on each language's held-out and blind participants pooled: each target met,
within error or missed (one-sided 95 % Wilson bounds, services/study/evidence.py),
and T2 above T4 by more than its error; each group alone is reported for
information. Saves the curves and shares as a PNG. Warns loudly on stderr when the
configuration makes recall impossible (nothing at any task) or universal (more
than 5 % of the unrelated candidates recalled, or 90 % or more of the memories),
names every missed target and every target within error; ``--strict`` exits 2
only when a target is missed or the shape fails.

    .venv/bin/python scripts/calibrate_recall.py [--strict] [--preset seed_literal]
    .venv/bin/python scripts/calibrate_recall.py --fit [--bootstrap 20] [--write-preset NAME]
    .venv/bin/python scripts/calibrate_recall.py --curve   # what each false-recall budget costs, per language

The logic lives in services/research/recall_calibration*.py; the numbers and the reasoning behind the default
preset: docs/recall_calibration.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from config import SECONDS_PER_DAY
from services.research.recall_calibration import calibrate, configured_embedder, preset_dict, write_preset
from services.research.recall_calibration_fit import CV_FOLDS, DEFAULT_FEATURES
from services.research.recall_calibration_replay import FEATURE_NAMES
from services.research.recall_calibration_report import format_report, save_plot
from services.research.recall_operating_curve import NotAnchored
from services.study.definition import DEFAULT_STUDY_FILE, load_study

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "docs" / "_generated" / "recall_calibration.png"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", help="recall preset to evaluate (default: the study's)")
    parser.add_argument("--study", help="study definition file (default: STUDY_CONFIG or the built-in one)")
    parser.add_argument("--embedder", help="embedding provider (default: EMBEDDING_PROVIDER, else offline)")
    parser.add_argument("--fit", action="store_true",
                        help="fit the anchored relevance and choose the false-recall budget and the time unit on "
                             "the development participants")
    parser.add_argument("--bootstrap", type=int, default=0, metavar="N",
                        help="with --fit: refit on N bootstrap resamples of the development participants and "
                             "print the spread of the chosen unit and of held-out recall (the docs use 20)")
    parser.add_argument("--folds", type=int, default=CV_FOLDS, metavar="K",
                        help=f"with --fit: judge the budget and the time unit on K folds' out-of-fold counts, each "
                             f"development participant replayed under a model fitted without them (default "
                             f"{CV_FOLDS}; 0: on the counts of the fit itself, as rounds five to eight did)")
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
    parser.add_argument("--one-budget", action="store_true",
                        help="with --fit: one false-recall budget for every language (default: one per language)")
    parser.add_argument("--curve", action="store_true",
                        help="also print what each false-recall budget costs: the preset (or the fit) replayed with "
                             "only its budget changed, per language and split (an anchored preset only)")
    parser.add_argument("--verbose", action="store_true", help="print every simulated candidate")
    parser.add_argument("--strict", action="store_true",
                        help="exit 2 when a pre-registered target is missed, or T2 is not above T4 by more than its "
                             "error, on a language's held-out and blind participants pooled (a target within error "
                             "does not fail)")
    return parser


def main(argv: list[str] | None = None, *, embedder=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.write_preset and not args.fit:
        parser.error("--write-preset needs --fit")
    if args.one_budget and not args.fit:
        parser.error("--one-budget needs --fit")
    if args.bootstrap and not args.fit:
        parser.error("--bootstrap needs --fit")
    if args.bootstrap < 0:
        parser.error("--bootstrap must be 0 or more")
    if args.folds < 0 or args.folds == 1:
        parser.error("--folds must be 0 (in-sample) or at least 2")
    embedder = embedder or configured_embedder(args.embedder)
    try:
        report = calibrate(load_study(args.study), preset=args.preset, embedder=embedder,
                           day_seconds=args.day_seconds, fit=args.fit,
                           features=tuple(f.strip() for f in args.features.split(",") if f.strip()),
                           resamples=args.bootstrap, folds=args.folds, curve=args.curve,
                           per_language=not args.one_budget)
    except NotAnchored as exc:
        parser.error(f"--curve: {exc}")
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
    if args.strict and report.target_failures():
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
