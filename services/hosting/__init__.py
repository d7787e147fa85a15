"""How the app is put together and served: the composition root (one ``Runtime`` per Flask app: settings,
database, clock, providers, embedder, background runner) and the serving configuration of ``make run`` and
``make serve`` (pool sizes, the connection budget, production checks, warm-up).

May import: ``services.platform``, ``services.text``, ``services.llm``, ``services.recall``, ``services.study``,
``services.memory`` (the condition registry).

Public names: ``runtime`` (``Runtime``, ``build_runtime``), ``serving`` (``connection_budget``,
``production_problems``, ``warm_up``; ``ServingConfig`` itself is part of ``services.study.settings``), ``drain``
(``DRAIN``, ``readiness``: `/readyz` and the graceful stop of `make serve`).
"""
