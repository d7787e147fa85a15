"""Participants and what they are owed: accounts and consent, panel entry and return links, contact
details for reminders, input checks, data-quality signals, payments, withdrawal and erasure.

May import: ``services.platform``, ``services.text``, ``services.llm``, ``services.recall``, ``services.study``,
``services.memory`` (erasure removes memories).

Public names: ``account_service`` (``register``, ``authenticate``, ``create_admin``), ``panel_service``,
``consent``, ``contacts``, ``input_checks`` (``printable``, ``bounded_int``, ``safe_cell``), ``quality``,
``payments``, ``participant_rights`` (withdraw, debrief), ``erasure_service`` (``tombstone``).
"""
