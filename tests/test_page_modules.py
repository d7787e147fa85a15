"""The pages' ES modules, loaded by the browser with no build step: every page's `<script type="module">`
and every relative import beneath it names a file under static/js, the import graph has no cycle, and the
pure core (static/js/core/, unit-tested by node in tests/js/) imports nothing outside it. A broken path
would otherwise show only as a blank page in the slow browser tests; the server serves each module as
JavaScript under the same Content-Security-Policy as the pages."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "static"
JS = STATIC / "js"
PAGES = [*STATIC.glob("*.html"), *(ROOT / "templates").glob("*.html")]
MODULE_TAG = re.compile(r'<script type="module" src="/static/js/([^"]+)"></script>')
IMPORT = re.compile(r'^\s*(?:import|export)\b[^;]*?\bfrom\s+"([^"]+)"|^\s*import\s+"([^"]+)"', re.M | re.S)


def imports(module: Path) -> list[Path]:
    found = []
    for match in IMPORT.finditer(module.read_text(encoding="utf-8")):
        target = match.group(1) or match.group(2)
        assert target.startswith("./") or target.startswith("../"), f"{module.relative_to(ROOT)} imports {target}"
        found.append((module.parent / target).resolve())
    return found


def entry_modules() -> list[Path]:
    entries = [JS / src for page in PAGES for src in MODULE_TAG.findall(page.read_text(encoding="utf-8"))]
    assert JS / "participant.js" in entries and JS / "admin.js" in entries
    return entries


def import_graph() -> dict[Path, list[Path]]:
    graph: dict[Path, list[Path]] = {}
    todo = entry_modules()
    while todo:
        module = todo.pop()
        if module in graph:
            continue
        assert module.is_file(), f"{module.relative_to(ROOT)} is imported but missing"
        assert STATIC in module.parents, f"{module} lies outside static/"
        # a JSON module (`with { type: "json" }`) is a leaf
        graph[module] = imports(module) if module.suffix == ".js" else []
        todo.extend(graph[module])
    return graph


def test_every_imported_module_exists_and_every_module_is_used():
    graph = import_graph()
    assert {JS / "chat" / "chat.js", JS / "admin" / "monitor.js", JS / "core" / "timing.js"} <= graph.keys()
    unused = sorted(str(path.relative_to(ROOT)) for path in JS.rglob("*.js") if path.resolve() not in graph)
    assert not unused, f"modules no page loads: {unused}"


def test_the_module_graph_has_no_cycle():
    graph = import_graph()
    state: dict[Path, str] = {}

    def visit(module: Path, path: list[Path]) -> None:
        state[module] = "open"
        for target in graph[module]:
            if state.get(target) == "open":
                cycle = [*path[path.index(target):], target] if target in path else [module, target]
                raise AssertionError("import cycle: " + " -> ".join(str(p.relative_to(JS)) for p in cycle))
            if target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [module])


def test_the_core_imports_only_the_core():
    for module in (JS / "core").glob("*.js"):
        for target in imports(module):
            assert target.parent == (JS / "core").resolve(), f"{module.name} imports {target.relative_to(JS)}"


def test_nested_modules_are_served_as_javascript_under_the_pages_policy(client):
    for path in ["/static/js/chat/chat.js", "/static/js/admin/monitor.js", "/static/js/core/timing.js"]:
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.mimetype == "text/javascript", (path, response.mimetype)
        assert "script-src 'self'" in response.headers["Content-Security-Policy"]
