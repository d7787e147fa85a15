"""Chat: store the participant's message first, then build the reply from the condition's memory, answer
through the fallback chain of models, and keep the condition's per-turn upkeep.

May import: ``services.platform``, ``services.text``, ``services.llm``, ``services.recall``, ``services.study``,
``services.memory``, ``services.participants``, ``services.hosting``.

Public names: ``chat_service`` (``accept_or_repeat``, ``accept_message``, ``serialise_message``,
``catch_up_turn_upkeep``).
"""
