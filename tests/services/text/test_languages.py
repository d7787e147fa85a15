"""One language detector for the whole code base (services.text.languages.detect), mixed text included."""
import ast
from pathlib import Path

import pytest

from services.llm.providers.offline import OfflineChatProvider
from services.memory.profile.extraction import extract_message
from services.text.languages import detect

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("text", "expected"), [
    ("我今天很开心", "zh"),
    ("I am happy today", "en"),
    ("我用 Python 写代码", "zh"),             # 5 characters, 1 word
    ("I'm allergic to 海鲜", "en"),          # 2 characters, 3 words ("I", "m", "allergic", "to": 4)
    ("我对 seafood 过敏，真的很严重", "zh"),
    ("Meeting 老王 at the 火锅 place tonight", "en"),
    ("我下周要去 London 出差", "zh"),
])
def test_mixed_text_is_one_language(text, expected):
    assert detect(text) == expected


def test_neither_script_gives_the_default():
    assert detect("🙂 123 !!!") is None
    assert detect("", default="en") == "en"
    assert detect("👍", default="zh") == "zh"


def test_a_list_of_texts_is_judged_as_one_text():
    assert detect(["I like tea", "我叫李明，住在上海"]) == "zh"
    assert detect(["I like tea and coffee", "好"]) == "en"


def test_profile_extraction_and_the_offline_reply_agree_with_the_detector():
    # the English rules take an English sentence with a Chinese object; before, any Chinese character sent it
    # through the Chinese rules (which found nothing) while recall counted it as English
    facts, _, _ = extract_message("I'm allergic to 海鲜")
    assert [f.text for f in facts] == ["allergic to 海鲜"]
    facts, _, _ = extract_message("我对花生过敏")
    assert any("花生" in f.text for f in facts)
    from services.llm.types import ChatRequest

    reply = OfflineChatProvider().complete(ChatRequest(
        messages=[{"role": "user", "content": "I'm allergic to 海鲜, what should I cook?"}], language="zh"))
    assert detect(reply.text) == "en"


def test_no_other_module_defines_a_language_detector():
    """Nothing under services/ defines another detect/language-guessing function."""
    suspects = []
    for path in (ROOT / "services").rglob("*.py"):
        if path.name == "languages.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name in (
                    "detect_language", "message_language", "text_language", "guess_language", "language_of"):
                suspects.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not suspects, suspects
