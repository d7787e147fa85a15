"""The researchers' offline tools: the retrieval benchmarks, L4's recall calibration, the bot participants'
manipulation check and the pre-flight that runs both.

May import: every package of ``services``. Nothing outside this package imports it but the CLI and scripts/
(``routes/`` neither: ``not_for_routes`` in pyproject.toml).

Public names: ``memory_bench`` and ``memory_bench_deployed``, ``recall_calibration`` (with ``_fit``, ``_replay``,
``_report``), ``simulation``, ``preflight``.
"""
