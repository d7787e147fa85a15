"""The interface's words: one gettext catalog per language, ``translations/<lang>/LC_MESSAGES/messages.po``.

Each msgid is a key (``"admin.nav.monitor"``, ``"error_code.time_up"``, ``"note.r1_empty"``); each catalog gives
its language's text, with ``{name}`` placeholders filled from parameters (the browser's ``t()`` fills them the same
way). The server's pages (Flask-Babel, ``routes/i18n.py``), its stored codes (notes, errors) and the browser
(``GET /i18n/messages.json``, which ``static/js/i18n.js`` loads) all read these files, so adding a language is
adding one catalog (docs/translations.md).

The ``.po`` files are compiled in memory when first read (babel's own reader and ``.mo`` writer, no network, no
generated file to keep in step); a catalog edited on disk is read again (its modification time is the cache key).
A text a catalog lacks falls back to the English catalog, then to the key itself.

Not interface text, and so not here: the prompts sent to the model, the offline provider's rule phrases, recall's
word lists and the profile schema's field names are the study's content in each language (services/memory,
services/llm, services/recall, data/study).
"""
from __future__ import annotations

import io
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.support import Translations

TRANSLATIONS_DIR = Path(__file__).resolve().parents[2] / "translations"
FALLBACK_LANGUAGE = "en"
DOMAIN = "messages"
# {name}, or {name:spec} with a Python format spec ({e:.2f}: the server's chart labels only; the browser fills {name})
PLACEHOLDER = re.compile(r"\{(\w+)(?::[^{}]*)?\}")


def fill(text: str, params: Mapping[str, Any] | None = None) -> str:
    """``text`` with each ``{name}`` that ``params`` holds replaced (others are left as written, like the browser)."""
    if not params:
        return text

    def value(match: re.Match[str]) -> str:
        name, _, spec = match.group(0)[1:-1].partition(":")
        return format(params[name], spec) if name in params else match.group(0)

    return PLACEHOLDER.sub(value, text)


@dataclass(frozen=True)
class Catalog:
    language: str
    texts: dict[str, str]  # msgid -> translated text (untranslated entries left out)
    mo: bytes              # the same, compiled (gettext's .mo format), for Flask-Babel and jinja's gettext
    tag: str               # the BCP 47 tag of its language (<html lang>, the browser's dates): its header's Language


def _compile(po_path: Path, language: str) -> Catalog:
    with po_path.open("rb") as handle:
        catalog = read_po(handle, locale=language, domain=DOMAIN)
    texts = {message.id: message.string for message in catalog
             if message.id and isinstance(message.id, str) and message.string and not message.fuzzy}
    compiled = io.BytesIO()
    write_mo(compiled, catalog)
    tag = (catalog.locale_identifier or language).replace("_", "-")  # "Language: zh_CN" -> zh-CN
    return Catalog(language, texts, compiled.getvalue(), tag)


LANGUAGE_TAG = re.compile(r"[A-Za-z]{2,3}(?:_[A-Za-z0-9]{2,8})?")


class Catalogs:
    """The catalogs under one translations directory, each compiled once per version of its file."""

    def __init__(self, directory: Path | str | None = None) -> None:
        self.directory = Path(directory) if directory else TRANSLATIONS_DIR
        self._compiled: dict[str, tuple[float, Catalog]] = {}
        self._chains: dict[str, tuple[tuple[Catalog, ...], Translations]] = {}
        self._lock = threading.Lock()

    def _po(self, language: str) -> Path:
        return self.directory / language / "LC_MESSAGES" / f"{DOMAIN}.po"

    def languages(self) -> list[str]:
        """Every language with a catalog, sorted (a folder name is a language tag: ``zh``, ``en``, ``pt_BR``)."""
        if not self.directory.is_dir():
            return []
        return sorted(entry.name for entry in self.directory.iterdir() if self._po(entry.name).is_file())

    def has(self, language: str | None) -> bool:
        # a language is a tag (``zh``, ``pt_BR``), never a path: a request's value is looked up here
        return bool(language) and bool(LANGUAGE_TAG.fullmatch(str(language))) and self._po(str(language)).is_file()

    def catalog(self, language: str) -> Catalog:
        po = self._po(language)
        mtime = po.stat().st_mtime
        with self._lock:
            cached = self._compiled.get(language)
            if cached is None or cached[0] != mtime:
                cached = (mtime, _compile(po, language))
                self._compiled[language] = cached
        return cached[1]

    def tag(self, language: str) -> str:
        """The BCP 47 tag of ``language`` as its catalog declares it (``zh`` -> ``zh-CN``); else the name as a tag."""
        return self.catalog(language).tag if self.has(language) else language.replace("_", "-")

    def translations(self, language: str) -> Translations:
        """The compiled catalog of ``language`` with the English one behind it (Flask-Babel's ``gettext``)."""
        order = [lang for lang in dict.fromkeys((language, FALLBACK_LANGUAGE)) if self.has(lang)]
        sources = tuple(self.catalog(lang) for lang in order)
        with self._lock:
            cached = self._chains.get(language)
            if cached is not None and len(cached[0]) == len(sources) and all(
                    a is b for a, b in zip(cached[0], sources, strict=True)):
                return cached[1]
        chain = Translations(io.BytesIO(sources[0].mo), domain=DOMAIN) if sources else Translations(domain=DOMAIN)
        for fallback in sources[1:]:
            chain.add_fallback(Translations(io.BytesIO(fallback.mo), domain=DOMAIN))
        with self._lock:
            self._chains[language] = (sources, chain)
        return chain

    def messages(self, language: str) -> dict[str, str]:
        """Every key's text in ``language`` (its catalog, the English catalog for what it lacks)."""
        merged = dict(self.catalog(FALLBACK_LANGUAGE).texts) if self.has(FALLBACK_LANGUAGE) else {}
        if self.has(language):
            merged.update(self.catalog(language).texts)
        return merged

    def text(self, language: str, key: str, **params: Any) -> str:
        """The text for ``key`` in ``language`` with its ``{name}`` placeholders filled; the key when no catalog
        has it."""
        for lang in (language, FALLBACK_LANGUAGE):
            if self.has(lang):
                found = self.catalog(lang).texts.get(key)
                if found is not None:
                    return fill(found, params)
        return key


_SHARED: dict[Path, Catalogs] = {}
_SHARED_LOCK = threading.Lock()


def catalogs_at(directory: Path | str | None = None) -> Catalogs:
    """The one ``Catalogs`` of a directory in this process (every app built here shares its compiled files)."""
    path = Path(directory).resolve() if directory else TRANSLATIONS_DIR
    with _SHARED_LOCK:
        return _SHARED.setdefault(path, Catalogs(path))


CATALOGS = catalogs_at()
