"""Check the package layers of services/ against the rules in pyproject.toml ([tool.layers]).

    python scripts/check_layers.py                 # this repository
    python scripts/check_layers.py --root DIR      # another tree (the tests' fixtures), same rules

Beyond ../shared/tools/layers.py (cycles, database -> services, condition ids) it checks that every module of
services/ sits in a package named in the rules (no loose module but __init__.py); that each import from one
package into another is one the importing package may make; that nothing outside a package named in
``only_imported_by_itself`` imports it; that routes/ import no package named in ``not_for_routes`` (but the
``not_for_routes_pending`` imports listed, each of which must still exist); that database/ imports neither
services nor routes and services/ does not import routes; that no folder holds more than
``max_modules_per_folder`` modules; and that no script in scripts/ is longer than ``max_script_lines``. Exit 0
when clean, 1 with the problems.
"""
from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_names(path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every absolute import in a file, ``from a import b`` giving ``a.b``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)


def package_of(dotted: str) -> str | None:
    """``services.memory.engine`` -> ``memory``; None outside services or for ``services`` itself."""
    parts = dotted.split(".")
    return parts[1] if parts[0] == "services" and len(parts) > 1 else None


def check_imports(root: Path, rules: dict) -> list[str]:
    allowed, closed = rules["may_import"], set(rules.get("only_imported_by_itself", []))
    http_only = [f"services.{name}" for name in rules.get("http_only", [])]
    problems = []
    for path in sorted((root / "services").rglob("*.py")):
        rel = path.relative_to(root)
        if len(rel.parts) == 2:
            if rel.name != "__init__.py":
                problems.append(f"{rel}: a loose module in services/; put it in a package")
            continue
        here = rel.parts[1]
        if here not in allowed:
            problems.append(f"{rel}: package {here!r} has no rule in [tool.layers.may_import]")
            continue
        module = ".".join(rel.with_suffix("").parts)
        sealed = next((p for p in http_only if module == p or module.startswith(p + ".")), None)
        for line, name in imported_names(path):
            there = package_of(name)
            if sealed and name.startswith("services.") and not name.startswith(sealed + "."):
                problems.append(f"{rel}:{line}: {name}: {sealed} speaks HTTP only and imports nothing from services")
            elif name.split(".")[0] == "routes":
                problems.append(f"{rel}:{line}: services import routes ({name})")
            elif there and there != here and there in allowed and there not in allowed.get(here, []):
                reason = f"only {there} imports {there}" if there in closed else f"{here} may not import {there}"
                problems.append(f"{rel}:{line}: {name}: {reason}")
    for path in sorted((root / "database").rglob("*.py")) if (root / "database").is_dir() else []:
        for line, name in imported_names(path):
            if name.split(".")[0] in ("services", "routes"):
                problems.append(f"{path.relative_to(root)}:{line}: database imports {name}")
    return problems + check_routes(root, rules)


def check_routes(root: Path, rules: dict) -> list[str]:
    """routes/ import no package named in ``not_for_routes``, but for the ``not_for_routes_pending`` entries
    (``"routes/x.py: services.pkg.module"``), each of which must still be there."""
    closed, pending = set(rules.get("not_for_routes", [])), set(rules.get("not_for_routes_pending", []))
    if not (root / "routes").is_dir():
        return []
    problems, seen = [], set()
    for path in sorted((root / "routes").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for line, name in imported_names(path):
            if package_of(name) in closed:
                if f"{rel}: {name}" in pending:
                    seen.add(f"{rel}: {name}")
                else:
                    problems.append(f"{rel}:{line}: {name}: routes serve live requests: no {package_of(name)}")
    problems += [f"not_for_routes_pending lists {entry!r}, which is gone: drop it" for entry in sorted(pending - seen)]
    return problems


def check_sizes(root: Path, rules: dict) -> list[str]:
    problems = []
    limit, lines = rules["max_modules_per_folder"], rules["max_script_lines"]
    for folder in [root / "services", *sorted(p for p in (root / "services").rglob("*") if p.is_dir())]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > limit:
            problems.append(f"{folder.relative_to(root)}: {len(modules)} modules (at most {limit})")
    for script in sorted((root / "scripts").glob("*.py")) if (root / "scripts").is_dir() else []:
        count = len(script.read_text(encoding="utf-8").splitlines())
        if count > lines:
            problems.append(f"{script.relative_to(root)}: {count} lines (a script is an entry point: at most {lines})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the tree to check (default: this repository)")
    parser.add_argument("--rules", type=Path, default=ROOT / "pyproject.toml", help="the file with [tool.layers]")
    args = parser.parse_args(argv)
    rules = tomllib.loads(args.rules.read_text(encoding="utf-8"))["tool"]["layers"]
    problems = check_imports(args.root, rules) + check_sizes(args.root, rules)
    packages = sorted(p.name for p in (args.root / "services").iterdir() if (p / "__init__.py").is_file())
    print(f"{len(packages)} packages ({', '.join(packages)}), {len(problems)} problems")
    for problem in problems:
        print(" -", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
