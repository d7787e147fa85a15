"""scripts/check_layers.py: the repository keeps its package layers, and a module that breaks them is named."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scripts.check_layers import main

FIXTURE = Path(__file__).parent / "fixtures" / "layers_leak"


def test_the_repository_keeps_its_layers(capsys):
    assert main([]) == 0, capsys.readouterr().out


def test_memory_importing_research_is_refused(capsys):
    assert main(["--root", str(FIXTURE)]) == 1
    out = capsys.readouterr().out
    assert "services/memory/leak.py:2: services.research.export.build: only research imports research" in out
    assert "research/export.py" not in out  # research may import memory


@pytest.mark.parametrize(("path", "text", "expected"), [
    ("services/loose.py", '"""x"""\n', "a loose module in services/"),
    ("services/study/upward.py", "from services.memory import leak\n", "study may not import memory"),
    ("services/newpkg/__init__.py", '"""x"""\n', "package 'newpkg' has no rule"),
    ("services/study/to_routes.py", "import routes.pages\n", "services import routes"),
    ("services/research/bots/client.py", "from services.study import definition\n",
     "services.research.bots speaks HTTP only and imports nothing from services"),
])
def test_each_rule_names_what_breaks_it(tmp_path, capsys, path, text, expected):
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    (tree / "services/memory/leak.py").write_text('"""clean now"""\n')
    assert main(["--root", str(tree)]) == 0
    (tree / path).parent.mkdir(parents=True, exist_ok=True)
    (tree / path).write_text(text)
    assert main(["--root", str(tree)]) == 1
    assert expected in capsys.readouterr().out


def test_too_many_modules_in_a_folder_and_a_long_script_are_refused(tmp_path, capsys):
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    (tree / "services/memory/leak.py").write_text('"""clean now"""\n')
    for n in range(14):
        (tree / f"services/study/m{n}.py").write_text('"""x"""\n')
    (tree / "scripts").mkdir()
    (tree / "scripts/long.py").write_text("x = 1\n" * 221)
    assert main(["--root", str(tree)]) == 1
    out = capsys.readouterr().out
    assert "services/study: 15 modules (at most 13)" in out and "scripts/long.py: 221 lines" in out


RULE_FIXTURES = Path(__file__).parent / "fixtures" / "layers"


@pytest.mark.parametrize(("tree", "expected"), [
    # a relative import is resolved and checked like an absolute one (its own package stays allowed)
    ("relative_import", "services/study/timer.py:2: services.memory.engine: study may not import memory"),
    # scripts in a subfolder of scripts/ are entry points too
    ("long_script", "scripts/load_bots/load.py: 221 lines (a script is an entry point: at most 220)"),
    ("environment", "services/study/definition.py:4: services read no environment"),
    ("routes_research", "routes/auth.py:2: services.research.preflight.require_open: routes serve live requests: "
                        "no research"),
])
def test_a_fixture_tree_for_each_rule_is_refused_with_its_reason(capsys, tree, expected):
    assert main(["--root", str(RULE_FIXTURES / tree)]) == 1
    problems = [line for line in capsys.readouterr().out.splitlines() if line.startswith(" - ")]
    assert [p for p in problems if expected in p], problems


@pytest.mark.parametrize("text", [
    "from os import environ\n", "from os import getenv\n", "import os\nos.getenv('X')\n",
    "import os\nos.environ['X'] = '1'\n",
])
def test_every_way_of_reading_the_environment_is_refused_under_services(tmp_path, capsys, text):
    tree = tmp_path / "tree"
    shutil.copytree(RULE_FIXTURES / "environment", tree)
    (tree / "services/study/definition.py").write_text('"""clean now"""\nimport os\n\nSEP = os.sep\n')
    assert main(["--root", str(tree)]) == 0
    (tree / "services/study/definition.py").write_text(text)
    assert main(["--root", str(tree)]) == 1
    assert "services read no environment" in capsys.readouterr().out


def test_a_relative_import_inside_its_own_package_passes(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(RULE_FIXTURES / "relative_import", tree)
    (tree / "services/study/timer.py").write_text('"""x"""\nfrom . import definition  # noqa: F401\n')
    assert main(["--root", str(tree)]) == 0
    (tree / "services/study/timer.py").write_text('"""x"""\nfrom ..memory.engine import x  # noqa: F401\n')
    assert main(["--root", str(tree)]) == 1
