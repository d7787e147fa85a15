"""The deployment's settings as one typed object: the facts of this deployment (database, secrets, providers,
pilot time scale, limits) and the study definition it runs.

Nothing under services/ reads the environment: the entry point (``config.Settings.from_env``) reads it once
into this object, and services receive it (or the typed values they need) from the caller.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from services.platform.clock import SECONDS_PER_DAY
from services.study.definition import Study, load_study

CONSOLIDATION_LEASE_SECONDS = 900.0  # a consolidation run that stopped without finishing holds its task this long
PILOT_CONSOLIDATION_LEASE_FLOOR = 60.0  # ... scaled by pilot time, but never below a slow model's run


@dataclass
class Settings:
    database_url: str = ""
    secret_key: str = ""
    testing: bool = False
    # Pilot mode: one study day lasts this many real seconds (86400 = real time).
    day_seconds: float = SECONDS_PER_DAY
    # Pilot mode compresses task timers like days unless PILOT_TIMER_SCALE says otherwise
    # (e.g. 0.1: a 900 s task lasts 90 s, so a person can walk through a pilot in the browser).
    pilot_timer_scale: float | None = None
    language: str = "zh"
    llm_providers: list[str] = field(default_factory=lambda: ["offline"])
    consolidation_providers: list[str] | None = None
    embedding_provider: str = "offline"
    dashscope_api_key: str | None = None
    dashscope_base_url: str | None = None
    dashscope_chat_model: str = "qwen-plus"
    dashscope_embedding_model: str = "text-embedding-v3"
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    openai_chat_model: str = "deepseek-chat"
    openai_embedding_model: str = "text-embedding-3-small"
    llm_timeout_seconds: float = 30.0
    llm_max_retries: int = 2
    llm_temperature: float = 0.7
    llm_max_tokens: int = 600
    scheduler_enabled: bool = True
    consolidate_inline: bool = False  # tests: run consolidation synchronously after the response
    assignment_seed: int | None = None
    rate_limits_enabled: bool = True
    # where rate-limit counters live: "memory" (per process; make run) or "database" (shared by every
    # process and host; make serve)
    rate_limit_storage: str = "memory"
    cookie_secure: bool = False  # set SESSION_COOKIE_SECURE=1 when served over HTTPS
    # the address participants reach the study at, for return links sent by reminders
    # (pages use the address the request came to when this is unset)
    public_base_url: str | None = None
    # Fernet key for participants' contact details (services.participants.contacts); unset: none are stored
    contact_encryption_key: str | None = None
    # seconds a SQLite write waits for a lock before the request answers 503 "not saved, try again"
    db_busy_timeout_seconds: float = 10.0
    # the lab's CSV of expected panel ids (exported from the panel); unset: any well-formed id may enter
    panel_allowlist_path: str | None = None
    run_migrations_on_start: bool = True
    # ALLOW_TIME_SCALE_CHANGE=1: start although the database was run under another PILOT_DAY_SECONDS
    # (services.platform.time_scale records the change in the audit log); refused otherwise
    allow_time_scale_change: bool = False
    # CONSOLIDATION_LEASE_SECONDS: how long a consolidation run that died holds its task (default 900 s; in pilot
    # mode scaled with the day, at least 60 s)
    consolidation_lease_seconds: float | None = None
    # TASK_START_CONSOLIDATION_WAIT_SECONDS: starting a task first runs (or waits for) the consolidation of the
    # participant's earlier tasks, at most this long (0: never wait)
    task_start_consolidation_wait_seconds: float = 5.0
    # REQUIRE_PREFLIGHT=1: registration and panel entry answer 503 study_not_open until a passing pre-flight
    # report exists for the current study definition (flask --app app preflight)
    require_preflight: bool = False
    study: Study = field(default_factory=load_study)

    @property
    def consolidation_lease(self) -> float:
        """Real seconds a consolidation run's claim lasts without finishing (CONSOLIDATION_LEASE_SECONDS)."""
        if self.consolidation_lease_seconds is not None:
            return self.consolidation_lease_seconds
        if self.pilot_mode:
            return max(PILOT_CONSOLIDATION_LEASE_FLOOR, CONSOLIDATION_LEASE_SECONDS * self.time_scale)
        return CONSOLIDATION_LEASE_SECONDS

    @property
    def time_scale(self) -> float:
        """Real seconds per study second: 1.0 normally, N/86400 in pilot mode."""
        return self.day_seconds / SECONDS_PER_DAY

    @property
    def timer_scale(self) -> float:
        """Real seconds per study second for task timers."""
        if self.pilot_mode and self.pilot_timer_scale is not None:
            return self.pilot_timer_scale
        return self.time_scale

    @property
    def pilot_mode(self) -> bool:
        return self.day_seconds != SECONDS_PER_DAY
