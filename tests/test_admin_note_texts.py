"""The notes a memory condition stores with a reply's context are codes with parameters, and every catalog has
words for each (``admin.note.<code>``) naming exactly the parameters the code is written with. The codes are read
from the memory modules' own ``note(...)`` calls, so a new note without a text fails here. Notes stored before
they were codes (English sentences) are read back as the same codes."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from services.memory.context import LEGACY_NOTES, coded_notes, note, with_coded_notes
from services.text.catalogs import PLACEHOLDER, Catalogs

ROOT = Path(__file__).resolve().parent.parent
CATALOGS = Catalogs(ROOT / "translations")


def written_notes() -> dict[str, set[str]]:
    """Each ``note("code", name=...)`` call under services/memory: code -> the parameter names it passes."""
    notes: dict[str, set[str]] = {}
    for path in sorted((ROOT / "services" / "memory").rglob("*.py")):
        if path.name == "context.py":  # where note() is defined and old sentences are read back (below)
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "note":
                assert isinstance(node.args[0], ast.Constant), f"{path}: a note's code is a literal"
                notes.setdefault(node.args[0].value, set()).update(k.arg for k in node.keywords)
    return notes


def test_every_note_code_has_a_text_naming_its_parameters_in_every_catalog():
    notes = written_notes()
    assert len(notes) >= 10, notes
    assert {"excluded", "s1_fuzzy", "r1_empty"} <= set(notes)
    assert {code for _pattern, code in LEGACY_NOTES} <= set(notes)  # an old sentence reads back as a live code
    notes["text"] = {"text"}  # an old sentence that is none of them
    for language in CATALOGS.languages():
        texts = CATALOGS.catalog(language).texts
        for code, params in notes.items():
            key = f"admin.note.{code}"
            assert key in texts, f"{key} has no {language} text"
            assert set(PLACEHOLDER.findall(texts[key])) == params, (language, key, params)


def test_a_note_is_shown_in_the_readers_language_with_its_parameters():
    stored = note("s1_fuzzy", scored=4, total=9, chosen=2, threshold=0.35)
    assert CATALOGS.text("zh", f"admin.note.{stored['code']}", **stored["params"]) == \
        "S1 模糊回忆：9 条早先消息中 4 条候选，2 条达到阈值 0.35"
    assert CATALOGS.text("en", f"admin.note.{stored['code']}", **stored["params"]) == \
        "S1 fuzzy recall: 4 candidates of 9 earlier messages, 2 at or above 0.35"


@pytest.mark.parametrize(("sentence", "code", "params"), [
    ("no consolidated profile yet", "no_profile", {}),
    ("R1: no memory from earlier tasks yet", "r1_empty", {}),
    ("3 earlier message(s) without content are not recall candidates (recall candidate rule)", "excluded",
     {"n": 3}),
    ("S1 recall: embedding failed (timeout (30 s)); semantic similarity counted as 0", "s1_embedding_failed",
     {"error": "timeout (30 s)"}),
    ("S1 fuzzy recall: 12 candidates of 40 earlier messages, 3 at or above 0.42", "s1_fuzzy",
     {"scored": 12, "total": 40, "chosen": 3, "threshold": 0.42}),
    ("something a later version wrote", "text", {"text": "something a later version wrote"}),
])
def test_a_note_stored_as_an_english_sentence_is_read_back_as_its_code(sentence, code, params):
    assert coded_notes([sentence]) == [{"code": code, "params": params}]


def test_the_english_catalog_says_what_the_old_sentences_said():
    """The codes replace the sentences without changing what an English console shows."""
    for sentence in ("no consolidated profile yet",
                     "3 earlier message(s) without content are not recall candidates (recall candidate rule)",
                     "S1 fuzzy recall: 12 candidates of 40 earlier messages, 3 at or above 0.42"):
        (coded,) = coded_notes([sentence])
        shown = CATALOGS.text("en", f"admin.note.{coded['code']}", **coded["params"])
        assert shown == sentence


def test_a_stored_context_is_served_with_coded_notes_whatever_its_age():
    old = {"group": "L4", "notes": ["no consolidated profile yet"], "recalled": []}
    new = {"group": "L4", "notes": [note("no_profile")], "recalled": []}
    assert with_coded_notes(old) == with_coded_notes(new) == new
    assert with_coded_notes(None) is None and with_coded_notes({"group": "L1"}) == {"group": "L1"}
