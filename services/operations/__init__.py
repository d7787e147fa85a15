"""Running the study day to day: what admins see and do (the monitor, a participant's whole record, usage
and failures) and the scheduled jobs (consolidation sweep, overdue tasks, reminder e-mails).

May import: every package of ``services`` except ``services.research``.

Public names: ``admin_service``, ``scheduler`` (``start_scheduler``, ``run_jobs_once``), ``overdue``
(``mark_overdue``, ``open_tasks``), ``reminders`` (``send_reminders``, ``ReminderConfig``).
"""
