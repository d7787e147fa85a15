"""The study: its typed, frozen definition, the deployment's typed settings that carry it (``settings``), the
tasks and their server-side timer, balanced assignment to memory conditions, and the questionnaires.

May import: ``services.platform``, ``services.text``, ``services.llm``, ``services.recall`` (a definition holds
recall presets).

Public names: ``definition`` (``Study``, ``load_study``, ``StudyDefinitionError``), ``settings`` (``Settings``,
``ReminderConfig``, ``ServingConfig``; built from the environment by ``config.py`` alone), ``preflight_gate``
(``require_open``, ``preflight_status``: is the study open, from the stored pre-flight reports), ``timer_service``
(``TaskService``), ``assignment_service`` (``assign``), ``questionnaire_service`` (``items_for_task``).
"""
