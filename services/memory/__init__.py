"""The memory conditions, the manipulated variable: one module per condition (``sensory`` L1, ``working`` L2,
``gist`` L3, ``hybrid`` L4, ``structured_summary`` S1, ``recursive_summary`` R1), registered in ``registry``;
the interface they implement (``base``), the context of one reply (``context``, ``engine``), what a finished
task leaves in long-term memory (``consolidation_service``) and the user profile (``profile/``).
See docs/architecture.md.

May import: ``services.platform``, ``services.text``, ``services.llm``, ``services.recall``, ``services.study``.

Public names: ``registry`` (``get``, ``register``, ``ids``, ``check_study``), ``engine`` (``MemoryEngine``), ``context``
(``MemoryContext``), ``base`` (``MemoryCondition``, ``Upkeep``, ``ManipulationCheck``),
``consolidation_service`` (``ConsolidationService``), ``hybrid`` (``ForgettingCurveSearch``).
"""
