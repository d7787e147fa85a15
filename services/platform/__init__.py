"""The platform's plumbing, which every domain stands on: the study's clock, domain errors, leases across
processes, the background runner, the failure log, the recorded time scale, in-process rate limits and
back-pressure (how long a refused client waits).

May import: ``database`` only (no other package of ``services``).

Public names:
- ``clock``: ``Clock``, ``ManualClock``, ``utc_iso``, ``parse_utc_iso``;
- ``errors``: ``BadInput``, ``NotFound``, ``Conflict``, ``Unavailable`` (the API turns them into JSON);
- ``leases``: ``participant_guard``, ``LeaseBusy``, ``SchedulerLeadership``;
- ``background``: ``BackgroundRunner``; ``failure_log``: ``make_failure_recorder``;
- ``time_scale``, ``mappings`` (``deep_merge``), ``memory_rate_limits`` (``make run``'s limiter store);
- ``backpressure``: ``BACKPRESSURE``, ``retry_after`` (a 503's ``Retry-After``).
"""
