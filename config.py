"""Settings from the environment.

``Settings`` holds deployment facts read from environment variables (or an
untracked ``.env`` file): database URL, secrets, provider chain, pilot mode,
and the study definition in use - loaded and validated once by
``services.study.definition.load_study`` from ``data/study/default_study.json`` and the
file named in ``STUDY_CONFIG``.
"""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.study.definition import Study, load_study

BASE_DIR = Path(__file__).resolve().parent
DATA_DIR = BASE_DIR / "data"
SECONDS_PER_DAY = 86400
CONSOLIDATION_LEASE_SECONDS = 900.0  # a consolidation run that stopped without finishing holds its task this long
PILOT_CONSOLIDATION_LEASE_FLOOR = 60.0  # ... scaled by pilot time, but never below a slow model's run

try:  # secrets may come from an untracked .env file; the environment wins
    from dotenv import load_dotenv

    load_dotenv(BASE_DIR / ".env", override=False)
except ImportError:  # pragma: no cover - python-dotenv is a pinned requirement
    pass


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _env_float(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return float(raw)


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated once and kept in data/ (untracked)."""
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    path = DATA_DIR / ".secret_key"
    if not path.exists():
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path.read_text().strip()


def _check_reminder_links(env: Any, public_base_url: str | None) -> None:
    """Reminders without a base URL could carry no personal link, and panel participants have no password
    to log in with: refuse to start rather than send reminders nobody can act on."""
    if _env_bool("REMINDERS_ENABLED", False) and not (public_base_url or env.get("REMINDER_BASE_URL")):
        raise ValueError("REMINDERS_ENABLED=1 needs PUBLIC_BASE_URL (the address participants reach the study at, "
                         "e.g. https://study.example.org): every reminder carries a personal link built from it, "
                         "and panel participants have no password to log in with otherwise. Set PUBLIC_BASE_URL "
                         "or turn reminders off (REMINDERS_ENABLED=0).")


# ---------------------------------------------------------------------------
# Deployment settings
# ---------------------------------------------------------------------------


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
    # PUBLIC_HOSTS=study.example.org,lab.example.org:8443: without PUBLIC_BASE_URL, the only hosts (besides
    # localhost) personal links may be built from; a request to any other Host gets no link (issue 28 item 10)
    public_hosts: tuple[str, ...] = ()
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
    # REQUIRE_PREFLIGHT=1: new enrolment (registration, a new panel id) answers 503 study_not_open until a passing
    # pre-flight report exists for the current study definition (flask --app app preflight); returning
    # participants are never stopped
    require_preflight: bool = False
    # STUDY_REFRESH_SECONDS: how often a process checks for a newly published study version (one small query)
    study_refresh_seconds: float = 2.0
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

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        seed = os.environ.get("ASSIGNMENT_SEED")
        chain = os.environ.get("LLM_PROVIDERS", "offline")
        consolidation_chain = os.environ.get("CONSOLIDATION_PROVIDERS")
        values: dict[str, Any] = dict(
            database_url=os.environ.get("DATABASE_URL") or f"sqlite:///{DATA_DIR / 'experiment.db'}",
            secret_key=_secret_key(),
            day_seconds=_env_float("PILOT_DAY_SECONDS", SECONDS_PER_DAY),
            pilot_timer_scale=_env_float("PILOT_TIMER_SCALE", None),
            language=os.environ.get("STUDY_LANGUAGE", "zh"),
            llm_providers=[p.strip() for p in chain.split(",") if p.strip()],
            consolidation_providers=(
                [p.strip() for p in consolidation_chain.split(",") if p.strip()] if consolidation_chain else None
            ),
            embedding_provider=os.environ.get("EMBEDDING_PROVIDER", "offline"),
            dashscope_api_key=os.environ.get("DASHSCOPE_API_KEY") or None,
            dashscope_base_url=os.environ.get("DASHSCOPE_BASE_URL") or None,
            dashscope_chat_model=os.environ.get("DASHSCOPE_CHAT_MODEL", "qwen-plus"),
            dashscope_embedding_model=os.environ.get("DASHSCOPE_EMBEDDING_MODEL", "text-embedding-v3"),
            openai_api_key=os.environ.get("OPENAI_API_KEY") or None,
            openai_base_url=os.environ.get("OPENAI_BASE_URL") or None,
            openai_chat_model=os.environ.get("OPENAI_CHAT_MODEL", "deepseek-chat"),
            openai_embedding_model=os.environ.get("OPENAI_EMBEDDING_MODEL", "text-embedding-3-small"),
            llm_timeout_seconds=_env_float("LLM_TIMEOUT_SECONDS", 30.0),
            llm_max_retries=int(os.environ.get("LLM_MAX_RETRIES", "2")),
            llm_temperature=_env_float("LLM_TEMPERATURE", 0.7),
            llm_max_tokens=int(os.environ.get("LLM_MAX_TOKENS", "600")),
            scheduler_enabled=_env_bool("SCHEDULER_ENABLED", True),
            assignment_seed=int(seed) if seed else None,
            rate_limits_enabled=_env_bool("RATE_LIMITS_ENABLED", True),
            rate_limit_storage=os.environ.get("RATE_LIMIT_STORAGE", "memory").strip().lower(),
            cookie_secure=_env_bool("SESSION_COOKIE_SECURE", False),
            public_base_url=os.environ.get("PUBLIC_BASE_URL") or None,
            public_hosts=tuple(h.strip().lower() for h in os.environ.get("PUBLIC_HOSTS", "").split(",") if h.strip()),
            contact_encryption_key=os.environ.get("CONTACT_ENCRYPTION_KEY") or None,
            db_busy_timeout_seconds=_env_float("DB_BUSY_TIMEOUT_SECONDS", 10.0),
            allow_time_scale_change=_env_bool("ALLOW_TIME_SCALE_CHANGE", False),
            panel_allowlist_path=os.environ.get("PANEL_ALLOWLIST") or None,
            consolidation_lease_seconds=_env_float("CONSOLIDATION_LEASE_SECONDS", None),
            task_start_consolidation_wait_seconds=_env_float("TASK_START_CONSOLIDATION_WAIT_SECONDS", 5.0),
            require_preflight=_env_bool("REQUIRE_PREFLIGHT", False),
            study_refresh_seconds=_env_float("STUDY_REFRESH_SECONDS", 2.0),
        )
        values.update(overrides)
        _check_reminder_links(os.environ, values["public_base_url"])
        if values["panel_allowlist_path"] and not Path(values["panel_allowlist_path"]).is_file():
            raise ValueError(f"PANEL_ALLOWLIST={values['panel_allowlist_path']} is not a readable file (the "
                             "lab's CSV of expected panel ids)")
        if values["day_seconds"] is None or values["day_seconds"] <= 0:
            raise ValueError("PILOT_DAY_SECONDS must be a positive number of seconds")
        if values["rate_limit_storage"] not in ("memory", "database"):
            raise ValueError("RATE_LIMIT_STORAGE must be 'memory' or 'database'")
        lease = values["consolidation_lease_seconds"]
        if lease is not None and lease <= 0:
            raise ValueError("CONSOLIDATION_LEASE_SECONDS must be a positive number of seconds")
        if values["task_start_consolidation_wait_seconds"] < 0:
            raise ValueError("TASK_START_CONSOLIDATION_WAIT_SECONDS must be 0 or more seconds")
        if values["study_refresh_seconds"] is None or values["study_refresh_seconds"] < 0:
            raise ValueError("STUDY_REFRESH_SECONDS must be 0 or more seconds")
        if values["pilot_timer_scale"] is not None and values["pilot_timer_scale"] <= 0:
            raise ValueError("PILOT_TIMER_SCALE must be a positive factor")
        return cls(**values)
