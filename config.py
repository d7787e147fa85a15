"""Settings from the environment: the one place it is read (with app.py's and the scripts' own command lines).

``Settings.from_env`` reads the environment variables (or an untracked ``.env`` file) once into the typed
``services.study.settings.Settings``: database URL, secrets, provider chain, pilot mode, the scheduler, reminders,
serving and rate limits, and the study definition in use - loaded and validated once by
``services.study.definition.load_study`` from ``data/study/default_study.json`` and the file named in
``STUDY_CONFIG``. Services receive that object (or the typed values they need); nothing under services/ reads
the environment (scripts/check_layers.py refuses it).
"""
from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from services.platform.clock import SECONDS_PER_DAY
from services.study import settings
from services.study.definition import load_study
from services.study.settings import RATE_LIMIT_DEFAULTS, ReminderConfig, ServingConfig

BASE_DIR = Path(__file__).resolve().parent
DATA_DIR = BASE_DIR / "data"

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


def _truthy(raw: str | None) -> bool:
    return (raw or "").strip().lower() in {"1", "true", "yes", "on"}


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    value = int(raw)
    if value < 0:
        raise ValueError(f"{name} must not be negative")
    return value


def _non_negative(env: Mapping[str, str], name: str, default: float) -> float:
    raw = (env.get(name) or "").strip()
    value = float(raw) if raw else default
    if value < 0:
        raise ValueError(f"{name} must not be negative")
    return value


def serving_from_env(environ: Mapping[str, str] | None = None) -> ServingConfig:
    """The web server's settings (WEB_*, DB_POOL_*, DB_MAX_OVERFLOW, DB_PREPARED_STATEMENTS, PROXY_HOPS,
    WEB_HOSTS, DB_MAX_CONNECTIONS, DRAIN_SECONDS): scripts/serve.py reads them before any app exists."""
    env = os.environ if environ is None else environ
    d = ServingConfig()
    return ServingConfig(
        threads=max(1, _int(env, "WEB_THREADS", 0)) if (env.get("WEB_THREADS") or "").strip() else None,
        connection_limit=max(10, _int(env, "WEB_CONNECTION_LIMIT", d.connection_limit)),
        idle_timeout=max(1, _int(env, "WEB_IDLE_TIMEOUT", d.idle_timeout)),
        workers=max(1, _int(env, "WEB_WORKERS", d.workers)),
        db_pool_size=max(1, _int(env, "DB_POOL_SIZE", d.db_pool_size)),
        db_max_overflow=_int(env, "DB_MAX_OVERFLOW", d.db_max_overflow),
        db_pool_timeout=max(1, _int(env, "DB_POOL_TIMEOUT", d.db_pool_timeout)),
        hosts=max(1, _int(env, "WEB_HOSTS", d.hosts)),
        db_prepared_statements=(env.get("DB_PREPARED_STATEMENTS") or "1").strip().lower() not in ("0", "false"),
        proxy_hops=_int(env, "PROXY_HOPS", d.proxy_hops),
        max_connections=_int(env, "DB_MAX_CONNECTIONS", 0) if (env.get("DB_MAX_CONNECTIONS") or "").strip() else None,
        drain_seconds=_non_negative(env, "DRAIN_SECONDS", d.drain_seconds),
    )


def reminders_from_env(environ: Mapping[str, str] | None = None) -> ReminderConfig:
    """Reminders (services.operations.reminders): REMINDERS_ENABLED, SMTP_*, REMINDER_*."""
    env = os.environ if environ is None else environ
    return ReminderConfig(
        enabled=_truthy(env.get("REMINDERS_ENABLED")),
        smtp_host=env.get("SMTP_HOST", "localhost"),
        smtp_port=int(env.get("SMTP_PORT", "25")),
        smtp_user=env.get("SMTP_USER") or None,
        smtp_password=env.get("SMTP_PASSWORD") or None,
        starttls=_truthy(env.get("SMTP_STARTTLS")),
        sender=env.get("REMINDER_FROM", "memory-lab@localhost"),
        contacts_path=env.get("REMINDER_CONTACTS") or None,
        digest_to=env.get("REMINDER_DIGEST_TO") or None,
        resend_hours=float(env.get("REMINDER_RESEND_HOURS", "24")),
        base_url=env.get("REMINDER_BASE_URL") or None,
        channels=tuple(c.strip() for c in env.get("REMINDER_CHANNELS", "email").split(",") if c.strip()),
        webhook_url=env.get("REMINDER_WEBHOOK_URL") or None,
        webhook_token=env.get("REMINDER_WEBHOOK_TOKEN") or None,
        webhook_timeout=float(env.get("REMINDER_WEBHOOK_TIMEOUT", "10")),
    )


def rate_limits_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The rate limits (flask-limiter strings such as "1000 per hour", RATE_LIMIT_*), checked here."""
    from limits import parse_many

    env = os.environ if environ is None else environ
    chosen = {}
    for name, (variable, default) in RATE_LIMIT_DEFAULTS.items():
        value = (env.get(variable) or "").strip() or default
        try:
            parse_many(value)
        except ValueError as exc:
            raise ValueError(f"{variable}={value!r} is not a rate limit such as '1000 per hour': {exc}") from exc
        chosen[name] = value
    return chosen


# the scheduler's jobs and the variable that sets each one's interval (services.operations.scheduler.job_intervals)
SCHEDULER_INTERVALS = {"consolidation_sweep": "SCHEDULER_SWEEP_SECONDS", "mark_overdue": "SCHEDULER_OVERDUE_SECONDS",
                       "send_reminders": "SCHEDULER_REMINDER_SECONDS", "answer_unanswered": "SCHEDULER_ANSWER_SECONDS"}


def scheduler_intervals_from_env(environ: Mapping[str, str] | None = None) -> dict[str, float]:
    env = os.environ if environ is None else environ
    return {job: float(env[variable]) for job, variable in SCHEDULER_INTERVALS.items() if env.get(variable)}


def _check_reminder_links(reminders: ReminderConfig, public_base_url: str | None) -> None:
    """Reminders without a base URL could carry no personal link, and panel participants have no password
    to log in with: refuse to start rather than send reminders nobody can act on."""
    if reminders.enabled and not (public_base_url or reminders.base_url):
        raise ValueError("REMINDERS_ENABLED=1 needs PUBLIC_BASE_URL (the address participants reach the study at, "
                         "e.g. https://study.example.org): every reminder carries a personal link built from it, "
                         "and panel participants have no password to log in with otherwise. Set PUBLIC_BASE_URL "
                         "or turn reminders off (REMINDERS_ENABLED=0).")


# ---------------------------------------------------------------------------
# Deployment settings
# ---------------------------------------------------------------------------


class Settings(settings.Settings):
    """The settings of this process, read from its environment (services receive the base type)."""

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
            scheduler_intervals=scheduler_intervals_from_env(),
            reminders=reminders_from_env(),
            serving=serving_from_env(),
            rate_limits=rate_limits_from_env(),
        )
        values.update(overrides)
        if "study" not in values:
            values["study"] = load_study(os.environ.get("STUDY_CONFIG") or None)
        _check_reminder_links(values["reminders"], values["public_base_url"])
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
