"""The L3/L4 user profile (the gist): its schema and rendering, the offline rule-based extraction, and the
model's merge of a task's conversation into it. Written by consolidation, read by the conditions.

May import: ``services.platform``, ``services.text``, ``services.llm`` (the request types).

Public names: ``schema`` (the profile's fields, validation, incremental merge, rendering), ``extraction``
(``extract_profile_delta``, offline and rule-based), ``llm_merge`` (``parse_profile_answer``).
"""
