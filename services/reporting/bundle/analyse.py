"""The pre-registered analysis, run on a data export: ``python analyse.py EXPORT [--out results.json]``.

EXPORT is the export zip (``flask --app app export``) or the folder it was unpacked into. ``analysis.py`` beside
this file is the analysis module the platform's report runs (``services/reporting/analysis.py``), copied into
the bundle unchanged; this script reads the export's CSV files and study_config.json exactly as the report does
and writes the same figures: ``outcomes`` (one row per scale and contrast against the reference condition:
estimate, 95 % CI, p, n, standardised effect size), ``models``, ``consort`` and ``attrition``. Needs Python 3.11+
with numpy, scipy and statsmodels (versions in requirements.txt beside this file).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import analysis  # noqa: E402  (the copy beside this file)


def read_export(source: Path) -> tuple[dict[str, list[dict[str, str]]], dict]:
    if source.is_dir():
        def read(name):
            return (source / name).read_text(encoding="utf-8") if (source / name).is_file() else None
    else:
        archive = zipfile.ZipFile(source)
        names = set(archive.namelist())

        def read(name):
            return archive.read(name).decode("utf-8") if name in names else None
    tables = {}
    for name in ("participants.csv", "task_sessions.csv", "questionnaires_long.csv"):
        text = read(name)
        if text is None:
            sys.exit(f"{source}: {name} is missing; is this a data export?")
        tables[name] = list(csv.DictReader(io.StringIO(text.lstrip("\ufeff"), newline="")))
    return tables, json.loads(read("study_config.json"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the pre-registered analysis, on a data export")
    parser.add_argument("export", type=Path, help="the export zip or its unpacked folder")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here (default: stdout)")
    args = parser.parse_args(argv)
    tables, study = read_export(args.export)
    participants, answers = tables["participants.csv"], tables["questionnaires_long.csv"]
    results = analysis.outcomes(answers, participants, study)
    payload = {"reference_condition": results["reference"], "outcomes": results["table"],
               "models": [{k: v for k, v in m.items() if k != "by_task"} for m in results["models"]],
               "consort": analysis.consort(participants, tables["task_sessions.csv"], study),
               "attrition": analysis.attrition(participants, study)}
    text = json.dumps(payload, ensure_ascii=False, indent=2)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
