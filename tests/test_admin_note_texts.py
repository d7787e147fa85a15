"""Every note a memory condition stores with a reply's context has its words in both admin languages: the
console matches the stored (English) note against static/js/admin.js's NOTE_TEXTS and shows the i18n text.
The notes are read from the memory modules' source, so a new note without a translation fails here."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADMIN_JS = ROOT / "static" / "js" / "admin.js"
I18N_JS = ROOT / "static" / "js" / "i18n.js"


def note_patterns() -> list[tuple[re.Pattern[str], str]]:
    block = ADMIN_JS.read_text(encoding="utf-8").split("const NOTE_TEXTS = [", 1)[1].split("\n];", 1)[0]
    pairs = re.findall(r"\[/(.+?)/(s?),\s*\"(admin\.note\.\w+)\"\]", block, re.S)
    return [(re.compile(source.replace("(?<", "(?P<"), re.S if flags else 0), key) for source, flags, key in pairs]


def stored_notes() -> list[str]:
    """Each ``notes.append(...)`` of services/memory, its f-string fields filled with a number."""
    notes = []
    for path in sorted((ROOT / "services" / "memory").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
                    and ast.unparse(node.func.value).endswith("notes")):
                argument = node.args[0]
                if isinstance(argument, ast.Constant):
                    notes.append(argument.value)
                else:
                    notes.append("".join(part.value if isinstance(part, ast.Constant) else "7"
                                         for part in argument.values))
    return notes


def i18n_keys(language: str) -> set[str]:
    text = I18N_JS.read_text(encoding="utf-8")
    body = text.split(f"\n  {language}: {{", 1)[1].split("\n  },", 1)[0]
    return set(re.findall(r"\n    \"([\w.]+)\": ", body))


def test_every_stored_memory_note_has_a_text_in_both_languages():
    patterns = note_patterns()
    notes = stored_notes()
    assert len(notes) >= 9, notes
    for note in notes:
        keys = [key for pattern, key in patterns if pattern.fullmatch(note)]
        assert keys, f"no NOTE_TEXTS pattern in admin.js for the memory note {note!r}"
        for language in ("zh", "en"):
            assert keys[0] in i18n_keys(language), f"{keys[0]} has no {language} text in i18n.js"


def test_the_chinese_note_texts_fill_every_field_the_pattern_captures():
    zh = I18N_JS.read_text(encoding="utf-8")
    for pattern, key in note_patterns():
        text = re.search(rf"\"{re.escape(key)}\": \"([^\"]*)\"", zh).group(1)
        assert set(pattern.groupindex) == set(re.findall(r"\{(\w+)\}", text)), key
