"""The interface's catalogs (translations/): the same keys in every language, the same placeholders in each
key's texts, English behind any text a catalog lacks, and a catalog edited on disk read again."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import write_po

from services.text.catalogs import PLACEHOLDER, Catalogs, fill

ROOT = Path(__file__).resolve().parents[3]
CATALOGS = Catalogs(ROOT / "translations")


def test_chinese_and_english_have_the_same_keys_and_the_same_placeholders():
    zh, en = CATALOGS.catalog("zh").texts, CATALOGS.catalog("en").texts
    assert len(en) > 900
    assert sorted(set(en) ^ set(zh)) == []
    different = [key for key in en if set(PLACEHOLDER.findall(en[key])) != set(PLACEHOLDER.findall(zh[key]))]
    assert different == []


def test_fill_replaces_what_it_is_given_and_leaves_the_rest_as_written():
    assert fill("{n} of {total}", {"n": 3}) == "3 of {total}"
    assert fill("e={e:.2f}", {"e": 0.456}) == "e=0.46"
    assert fill("no placeholders", {"n": 1}) == "no placeholders"


def _write(path: Path, language: str, texts: dict[str, str]) -> None:
    catalog = Catalog(locale=language)
    for key, text in texts.items():
        catalog.add(key, text)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        write_po(handle, catalog)


def test_a_text_a_catalog_lacks_is_the_english_one_and_an_unknown_key_is_itself(tmp_path):
    _write(tmp_path / "en" / "LC_MESSAGES" / "messages.po", "en", {"a": "A {x}", "b": "B"})
    _write(tmp_path / "fr" / "LC_MESSAGES" / "messages.po", "fr", {"a": "A-fr {x}", "b": ""})
    catalogs = Catalogs(tmp_path)
    assert catalogs.languages() == ["en", "fr"]
    assert catalogs.text("fr", "a", x=1) == "A-fr 1" and catalogs.text("fr", "b") == "B"
    assert catalogs.text("fr", "missing") == "missing" and catalogs.text("de", "a", x=2) == "A 2"
    assert catalogs.messages("fr") == {"a": "A-fr {x}", "b": "B"}
    gettext = catalogs.translations("fr").gettext
    assert (gettext("a"), gettext("b"), gettext("missing")) == ("A-fr {x}", "B", "missing")


def test_a_catalog_edited_on_disk_is_read_again(tmp_path):
    po = tmp_path / "en" / "LC_MESSAGES" / "messages.po"
    _write(po, "en", {"a": "first"})
    catalogs = Catalogs(tmp_path)
    assert catalogs.text("en", "a") == "first"
    _write(po, "en", {"a": "second"})
    os.utime(po, (po.stat().st_atime, po.stat().st_mtime + 5))
    assert catalogs.text("en", "a") == "second" and catalogs.translations("en").gettext("a") == "second"
    shutil.rmtree(tmp_path / "en")
    assert catalogs.languages() == [] and catalogs.text("en", "a") == "a"


def test_a_language_s_tag_is_its_catalog_s_language_header_else_its_folder_name(tmp_path):
    assert (CATALOGS.tag("zh"), CATALOGS.tag("en")) == ("zh-CN", "en")  # Chinese pages are simplified Chinese
    _write(tmp_path / "pt_BR" / "LC_MESSAGES" / "messages.po", "pt_BR", {"a": "A"})
    _write(tmp_path / "eo" / "LC_MESSAGES" / "messages.po", "eo", {"a": "A"})
    po = tmp_path / "fr" / "LC_MESSAGES" / "messages.po"
    _write(po, "fr", {"a": "A"})
    po.write_text(po.read_text(encoding="utf-8").replace('"Language: fr\\n"\n', ""), encoding="utf-8")
    catalogs = Catalogs(tmp_path)
    assert [catalogs.tag(lang) for lang in ("pt_BR", "eo", "fr", "de_AT")] == ["pt-BR", "eo", "fr", "de-AT"]


def test_every_catalog_names_its_own_language_for_the_language_button():
    assert CATALOGS.text("zh", "app.language_name") == "中文" and CATALOGS.text("en", "app.language_name") == "English"
    assert CATALOGS.text("zh", "app.switch_to_language") == "切换到中文"
