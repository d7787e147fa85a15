"""A dummy third catalog for the tests that show a language is one catalog: Esperanto (``eo``, a locale babel
knows and the study does not speak), its every text the English one in ⟦brackets⟧ - placeholders kept - except
the keys left untranslated, which fall back to English."""
from __future__ import annotations

import shutil
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parent.parent
PSEUDO = "eo"
UNTRANSLATED = ("admin.login.intro",)


def pseudo(text: str) -> str:
    return f"⟦{text}⟧"


def translations_with_a_third_language(directory: Path) -> Path:
    """``directory``/translations: the repository's catalogs plus the dummy one; nothing else is added."""
    target = directory / "translations"
    shutil.copytree(ROOT / "translations", target)
    with (ROOT / "translations" / "en" / "LC_MESSAGES" / "messages.po").open("rb") as handle:
        english = read_po(handle, locale="en")
    catalog = Catalog(locale=PSEUDO, project="AI Memory Lab pseudo-locale")
    for message in english:
        if message.id and message.id not in UNTRANSLATED:
            catalog.add(message.id, pseudo(message.string))
    path = target / PSEUDO / "LC_MESSAGES" / "messages.po"
    path.parent.mkdir(parents=True)
    with path.open("wb") as handle:
        write_po(handle, catalog)
    return target
