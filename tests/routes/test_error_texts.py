"""Every error a participant can be shown has a text in Chinese and in English (issue 20, item 5).

The codes are read from the server's own source (every ``code="..."``, ``"error": "..."`` and
``_error("...")`` in app.py, routes/ and services/, and the f-string codes expanded over the values they
take), so a new error code without a text fails here. The page shows the catalogs' ``error_code.<code>``
text (static/js/error_texts.js asks i18n.js), never the server's English message. zxcvbn's password
feedback is read from the installed package, so an upgrade that adds a sentence fails here too.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import zxcvbn.feedback

from services.text.catalogs import Catalogs

ROOT = Path(__file__).resolve().parents[2]
CATALOGS = Catalogs(ROOT / "translations")

LITERAL_CODES = [
    re.compile(r"\bcode\s*=\s*\"([a-z_]+)\""),           # raise Conflict(..., code="time_up"); class code = "..."
    re.compile(r"\"error\":\s*\"([a-z_]+)\""),           # {"error": "database_busy", ...}
    re.compile(r"\b_error\(\"([a-z_]+)\""),              # app.py: _error("csrf_failed", ...)
    re.compile(r"\b\d{3}:\s*\"([a-z_]+)\""),             # app.py: {404: "not_found", ...}
]
DYNAMIC_CODE = re.compile(r"\bcode\s*=\s*f\"([a-z_]*)\{")
# The values each f-string code takes: a task's status, a chat's phase, a closed account's status,
# and the query parameters bounded_int() checks.
DYNAMIC_VALUES = {
    "task_": ["locked", "available", "in_progress", "done"],
    "task_phase_": ["chat", "questionnaire", "closed"],
    "participant_": ["withdrawn", "erased"],
    "invalid_": None,  # filled from the bounded_int(name=...) calls below
}
# Codes that are not errors a page can receive: a benchmark's participant-code pattern.
NOT_API_ERRORS = {"services/research/memory_bench_deployed.py"}


def server_sources() -> list[Path]:
    files = [ROOT / "app.py", *sorted((ROOT / "routes").rglob("*.py")), *sorted((ROOT / "services").rglob("*.py"))]
    return [f for f in files if str(f.relative_to(ROOT)) not in NOT_API_ERRORS]


def server_error_codes() -> set[str]:
    codes: set[str] = set()
    prefixes: set[str] = set()
    bounded_names: set[str] = set()
    for path in server_sources():
        text = path.read_text(encoding="utf-8")
        for pattern in LITERAL_CODES:
            codes.update(pattern.findall(text))
        prefixes.update(DYNAMIC_CODE.findall(text))
        bounded_names.update(re.findall(r"bounded_int\((?:.|\n){0,200}?name=\"([a-z_]+)\"", text))
    assert prefixes <= set(DYNAMIC_VALUES), f"a new f-string error code: {prefixes - set(DYNAMIC_VALUES)}"
    for prefix in prefixes:
        values = DYNAMIC_VALUES[prefix] if DYNAMIC_VALUES[prefix] is not None else sorted(bounded_names)
        codes.update(prefix + value for value in values)
    return codes


def error_texts() -> dict[str, set[str]]:
    """Per catalog, the codes its error_code.* keys give a text for."""
    return {lang: {key.removeprefix("error_code.") for key, text in CATALOGS.catalog(lang).texts.items()
                   if key.startswith("error_code.") and text.strip()}
            for lang in CATALOGS.languages()}


def zxcvbn_sentences() -> set[str]:
    source = Path(zxcvbn.feedback.__file__).read_text(encoding="utf-8")
    sentences = set()
    for call in re.finditer(r"_\(((?:\s*(?:'[^']*'|\"[^\"]*\")\s*\\?\s*)+)\)", source):
        sentences.add("".join(ast.literal_eval(part) for part in re.findall(r"'[^']*'|\"[^\"]*\"", call.group(1))))
    return sentences


def test_the_code_list_is_read_from_the_server_and_holds_the_participant_errors():
    codes = server_error_codes()
    # a sample the participant page meets; the list itself comes from the source
    assert {"weak_password", "time_up", "task_locked", "task_phase_questionnaire", "message_too_long",
            "csrf_failed", "database_busy", "provider_unavailable", "internal_error"} <= codes
    assert len(codes) > 50


def test_every_error_code_has_a_chinese_and_an_english_text():
    texts = error_texts()
    codes = server_error_codes()
    assert {"zh", "en"} <= set(texts)
    for lang in texts:
        missing = sorted(codes - texts[lang])
        assert not missing, f"error codes without a {lang} text in translations/{lang}: {missing}"
        assert "unknown_code" in texts[lang]


def test_the_chinese_texts_are_chinese_and_the_english_texts_have_no_chinese():
    for key, value in CATALOGS.catalog("zh").texts.items():
        if key.startswith(("error_code.", "zxcvbn.")):
            assert re.search(r"[\u4e00-\u9fff]", value), (key, value)
    for key, value in CATALOGS.catalog("en").texts.items():
        if key.startswith(("error_code.", "zxcvbn.")):
            assert not re.search(r"[\u4e00-\u9fff]", value), (key, value)


def test_every_zxcvbn_feedback_sentence_has_a_chinese_text_and_its_own_english():
    zh, en = CATALOGS.catalog("zh").texts, CATALOGS.catalog("en").texts
    sentences = zxcvbn_sentences()
    assert len(sentences) > 20
    assert not sorted(s for s in sentences if f"zxcvbn.{s}" not in zh), "zxcvbn sentences without a Chinese text"
    assert all(en[f"zxcvbn.{s}"] == s for s in sentences)


def test_a_weak_password_is_refused_with_zxcvbns_warning_in_the_details(client):
    from tests.conftest import ApiClient

    response = ApiClient(client).register("weak_pw_user", password="password")
    body = response.get_json()
    assert response.status_code == 400 and body["error"] == "weak_password"
    assert body["details"]["warning"] in zxcvbn_sentences()
    assert set(body["details"]["suggestions"]) <= zxcvbn_sentences()


def questionnaire_problem_codes() -> set[str]:
    """The codes services/study/questionnaire_service.py puts in details.items: what validate_answers stores in
    ``problems[...]`` and what _check returns."""
    tree = ast.parse((ROOT / "services" / "study" / "questionnaire_service.py").read_text(encoding="utf-8"))
    codes = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)
                and ast.unparse(node.targets[0].value) == "problems" and isinstance(node.value, ast.Constant)):
            codes.add(node.value.value)
        if isinstance(node, ast.FunctionDef) and node.name == "_check":
            codes.update(r.value.value for r in ast.walk(node)
                         if isinstance(r, ast.Return) and isinstance(r.value, ast.Constant) and r.value.value)
    return codes


def test_every_questionnaire_problem_code_has_a_text_in_every_catalog():
    codes = questionnaire_problem_codes()
    assert {"required", "out_of_range", "not_shown", "unknown_item", "too_long"} <= codes
    for lang in CATALOGS.languages():
        texts = CATALOGS.catalog(lang).texts
        assert not sorted(c for c in codes if f"item_problem.{c}" not in texts), lang
    assert CATALOGS.text("zh", "item_problem.out_of_range", min=1, max=7) == "请选择 1 到 7 之间的数字。"
