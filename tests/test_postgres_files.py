"""Which files the PostgreSQL pass collects (tests/postgres_files.py), and the SQLite pass's check that no test
marked ``postgres`` is left out of them (tests/conftest.py)."""
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest
from tests.postgres_files import MARK, TESTS, postgres_files


def _item(path: Path, marked: bool):
    return SimpleNamespace(path=path, get_closest_marker=lambda name: object() if marked and name == "postgres"
                           else None, getparent=lambda kind: None)


def test_the_files_naming_the_mark_are_the_pass_s_files_and_the_others_are_not(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_marked.py").write_text(f"import pytest\n\n@{MARK}\ndef test_x():\n    pass\n")
    (tmp_path / "test_param.py").write_text(f"P = [1, pytest.param(2, marks={MARK})]\n")
    (tmp_path / "test_plain.py").write_text("def test_x():\n    pass\n")
    (tmp_path / "helper.py").write_text(f"# {MARK}\n")
    assert postgres_files(tmp_path) == [tmp_path / "sub" / "test_marked.py", tmp_path / "test_param.py"]


def test_the_module_prints_this_suite_s_files_relative_to_the_repository():
    done = subprocess.run([sys.executable, "-m", "tests.postgres_files"], cwd=TESTS.parent, capture_output=True,
                          text=True, check=True)
    listed = done.stdout.split()
    assert "tests/test_database_reset.py" in listed and "tests/test_postgres_files.py" not in listed
    assert listed == [str(path.relative_to(TESTS.parent)) for path in postgres_files()]


def test_a_marked_test_in_a_file_the_pass_would_not_collect_stops_the_run(tmp_path):
    hidden = tmp_path / "test_hidden.py"
    hidden.write_text("postgres = __import__('pytest').mark.postgres\n")
    named = tmp_path / "test_named.py"
    named.write_text(f"pytestmark = {MARK}\n")
    conftest.pytest_collection_modifyitems(None, [_item(named, True), _item(hidden, False)])
    with pytest.raises(pytest.UsageError, match="test_hidden.py"):
        conftest.pytest_collection_modifyitems(None, [_item(named, True), _item(hidden, True)])


def test_every_marked_test_of_this_run_is_in_a_file_the_pass_collects(request):
    marked = {item.path for item in request.session.items if item.get_closest_marker("postgres")}
    assert marked <= set(postgres_files())
