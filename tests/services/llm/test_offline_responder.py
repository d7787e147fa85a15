"""The offline template responder (issue 20, item 6): it answers in the message's language, draws on the
task in progress when asked what was said, and stays labelled as an offline component, not a model."""
from __future__ import annotations

import re

from services.llm.providers.offline import OfflineChatProvider
from services.llm.types import ChatRequest

CHINESE = re.compile(r"[\u4e00-\u9fff]")


def reply(messages: list[tuple[str, str]], *, language: str, context: dict | None = None):
    request = ChatRequest(messages=[{"role": "system", "content": "system"}]
                          + [{"role": role, "content": text} for role, text in messages],
                          language=language, memory_context=context or {"language": language})
    return OfflineChatProvider().complete(request)


def test_an_english_message_on_the_chinese_page_is_answered_in_english():
    result = reply([("user", "Hello! I had a long day at the lab today.")], language="zh")
    assert not CHINESE.search(result.text), result.text
    assert result.text.strip()


def test_a_chinese_message_on_the_english_page_is_answered_in_chinese():
    result = reply([("user", "今天在实验室待了一整天，有点累。")], language="en")
    assert CHINESE.search(result.text), result.text
    assert not re.search(r"[A-Za-z]{3,}", result.text), result.text


def test_asked_about_something_said_two_turns_ago_it_says_it_back_instead_of_denying_the_conversation():
    history = [("user", "我养了一只叫团子的猫。"), ("assistant", "谢谢你和我分享这些。能再多说一点吗？"),
               ("user", "它很喜欢晒太阳。"), ("assistant", "我在认真听。你现在感觉怎么样？"),
               ("user", "你还记得我的猫叫什么吗？")]
    text = reply(history, language="zh").text
    assert "不记得" not in text and "没有印象" not in text, text
    assert "团子" in text, text


def test_in_english_too_the_conversation_in_progress_is_drawn_on():
    history = [("user", "My cat is called Mochi and she sleeps all day."), ("assistant", "I'm listening."),
               ("user", "Do you remember what my cat is called?")]
    text = reply(history, language="zh").text
    assert "don't remember" not in text and "Mochi" in text, text
    assert not CHINESE.search(text), text


def test_with_no_memory_and_nothing_said_yet_it_still_says_so_honestly():
    text = reply([("user", "Do you remember me?")], language="en").text
    assert "don't remember" in text


def test_every_reply_is_labelled_as_the_offline_template_responder():
    result = reply([("user", "你好")], language="zh")
    assert (result.provider, result.model) == ("offline", "offline-template-responder")
    assert result.params["is_llm"] is False and result.params["kind"] == "template"
