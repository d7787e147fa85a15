"""What the lab reads out of the study: the data export and its codebook, the admin charts, and the report.

May import: every package of ``services`` below ``research`` (``research`` may import this package, not the
reverse).

Public names: ``export_service`` (``build_export``, ``ExportOptions``), ``codebook``, ``plots``.
"""
