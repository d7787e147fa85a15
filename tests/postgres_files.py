"""The test files the PostgreSQL pass of scripts/run_tests.sh collects: those whose text names the ``postgres`` mark.

Collecting the whole suite to keep the marked tests imports every test module and what it imports (~22 s of CPU
against ~15 s for these files, docs/benchmarks.md, "Test suite time, session 15"). A test marked some other way
(a mark kept in a variable, a conftest adding it) would drop out of that pass without a word, so the SQLite pass,
which collects everything, fails when a test marked ``postgres`` is in a file this rule does not pick
(tests/conftest.py, ``pytest_collection_modifyitems``).

``python -m tests.postgres_files`` prints them, one a line, relative to the repository.
"""
from __future__ import annotations

import sys
from pathlib import Path

MARK = "pytest.mark.postgres"
TESTS = Path(__file__).resolve().parent


def names_the_mark(path: Path) -> bool:
    return MARK in path.read_text(encoding="utf-8")


def postgres_files(root: Path = TESTS) -> list[Path]:
    return sorted(path for path in root.rglob("test_*.py") if names_the_mark(path))


if __name__ == "__main__":
    for path in postgres_files():
        sys.stdout.write(f"{path.relative_to(TESTS.parent)}\n")
