"""What the lab reads out of the study: the data export and its codebook, the admin charts, the study report and
the pre-registration bundle (docs/report.md).

May import: every package of ``services`` below ``research`` (``research`` may import this package, not the
reverse).

Public names: ``export_service`` (``build_export``, ``ExportOptions``), ``codebook``, ``plots``,
``preflight_record`` (the stored pre-flight reports, read), ``analysis`` (the statistics; imports nothing from
the project, so the bundle ships it as it is), ``report`` (``build_report``, ``load_export``, ``write_report``,
``report_runtime``), ``report_html``, ``report_charts``, ``prereg`` (``write_bundle``).
"""
