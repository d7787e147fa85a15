"""Print the test run's line coverage: the total, then one line per package (services/ by its subpackages).

    python scripts/coverage_summary.py [DATA_FILE]     # default: $COVERAGE_FILE, else .coverage

scripts/run_tests.sh calls it after the SQLite pass, which ran with ``--cov`` (the measured sources:
pyproject.toml ``[tool.coverage.run]``). The per-file table of ``--cov-report=term`` runs to hundreds of lines;
this keeps the figure to read in a screenful.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import coverage

ROOT = Path(__file__).resolve().parent.parent


def package_of(path: str) -> str:
    """``services/memory/engine.py`` -> ``services/memory``; ``routes/admin.py`` -> ``routes``; ``app.py`` -> itself."""
    parts = Path(path).parts
    if parts[0] == "services" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else path


def summary(files: dict[str, dict]) -> list[tuple[str, int, int]]:
    """(package, statements, covered) per package, from a coverage JSON report's ``files``."""
    by_package: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for path, data in files.items():
        counts = by_package[package_of(path)]
        counts[0] += data["summary"]["num_statements"]
        counts[1] += data["summary"]["covered_lines"]
    return sorted((name, total, covered) for name, (total, covered) in by_package.items())


def main(argv: list[str]) -> int:
    data_file = argv[0] if argv else os.environ.get("COVERAGE_FILE", ".coverage")
    if not Path(data_file).exists():
        print(f"no coverage data at {data_file}", file=sys.stderr)
        return 1
    cov = coverage.Coverage(data_file=data_file, config_file=str(ROOT / "pyproject.toml"))
    cov.load()
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "coverage.json"
        cov.json_report(outfile=str(report))
        files = json.loads(report.read_text(encoding="utf-8"))["files"]
    rows = summary(files)
    statements, covered = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(f"== coverage (lines, SQLite pass): {100 * covered / statements:.1f}% of {statements} statements")
    for name, total, hit in rows:
        if total == 0:  # a package of empty __init__ files
            continue
        print(f"   {name:<24} {100 * hit / total:5.1f}%  {total - hit:5d} of {total:5d} lines missed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
