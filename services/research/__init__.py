"""The researchers' tools: the data export and its codebook, the admin charts, the retrieval benchmarks,
L4's recall calibration, the bot participants' manipulation check and the pre-flight that runs both.

May import: every package of ``services``. Nothing in ``services`` outside this package imports it (routes,
the CLI and scripts may).

Public names: ``export_service`` (``build_export``, ``ExportOptions``), ``codebook``, ``plots``,
``memory_bench`` and ``memory_bench_deployed``, ``recall_calibration`` (with ``_fit``, ``_replay``,
``_report``), ``simulation``, ``preflight``.
"""
