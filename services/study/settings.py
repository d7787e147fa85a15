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
class ReminderConfig:
    """Reminders (services.operations.reminders): the REMINDER_* and SMTP_* variables."""

    enabled: bool = False
    smtp_host: str = "localhost"
    smtp_port: int = 25
    smtp_user: str | None = None
    smtp_password: str | None = None
    starttls: bool = False
    sender: str = "memory-lab@localhost"
    contacts_path: str | None = None
    digest_to: str | None = None
    resend_hours: float = 24.0  # the lab's digest of overdue codes goes out at most this often
    base_url: str | None = None
    channels: tuple[str, ...] = ("email",)
    webhook_url: str | None = None
    webhook_token: str | None = None
    webhook_timeout: float = 10.0


# Replies that can wait for the model at once on one host, when WEB_THREADS is not set (ServingConfig)
HOST_THREADS = 256
MIN_THREADS = 16


@dataclass(frozen=True)
class ServingConfig:
    """Web server settings (env vars documented in README, "Serving a class")."""

    # WEB_THREADS: threads per process. Unset: HOST_THREADS per host, shared by its processes (make run's
    # one process 256; make serve's 4 workers 64 each). Every thread of a process contends for one
    # interpreter lock: on two cores 4 x 256 threads spent more CPU per reply handing it over than
    # replying (docs/benchmarks.md, "Threads per worker")
    threads: int | None = None
    connection_limit: int = 2000  # open connections per process, idle ones included
    idle_timeout: int = 30  # seconds an idle keep-alive connection stays open
    workers: int = 4  # make serve: processes (each with `threads` threads)
    db_pool_size: int = 10  # per process; PostgreSQL's default max_connections is 100 (connection_budget)
    db_max_overflow: int = 5
    db_pool_timeout: int = 10  # seconds a request waits for a pooled connection before a 503
    proxy_hops: int = 0  # reverse proxies in front that set X-Forwarded-For/-Proto
    hosts: int = 1  # machines running `make serve` on the same database (the connection budget)
    db_prepared_statements: bool = True  # off behind pgbouncer < 1.21 in transaction mode
    # DB_MAX_CONNECTIONS: what the deployment may use (a pooler's max_client_conn); None: ask the server
    max_connections: int | None = None
    # DRAIN_SECONDS: on SIGTERM, make serve answers /readyz 503 this long before its graceful stop
    # (services.hosting.drain)
    drain_seconds: float = 5.0

    def threads_per_process(self, processes: int) -> int:
        """WEB_THREADS when set, else the host's HOST_THREADS shared by ``processes`` (at least MIN_THREADS)."""
        if self.threads is not None:
            return self.threads
        return max(MIN_THREADS, HOST_THREADS // max(1, processes))

    def waitress_options(self) -> dict[str, object]:
        return {
            "threads": self.threads_per_process(1),
            "connection_limit": self.connection_limit,
            # waitress's event loop, not a thread, watches idle connections; this closes them
            "channel_timeout": self.idle_timeout,
            "cleanup_interval": max(1, min(30, self.idle_timeout // 2)),
            # select() cannot watch descriptors above 1024; poll() can (2000 connections)
            "asyncore_use_poll": True,
            "backlog": 2048,
            "ident": "ai-memory-lab",
        }

    def gunicorn_options(self, bind: str) -> dict[str, object]:
        return {
            "bind": bind,
            "workers": self.workers,
            "worker_class": "gthread",
            "threads": self.threads_per_process(self.workers),
            "worker_connections": self.connection_limit,
            "keepalive": self.idle_timeout,
            "backlog": 2048,
            # each worker its own listening socket: the kernel spreads new connections evenly, instead
            # of the first worker to wake up taking most of a class's long-lived keep-alive connections
            "reuse_port": True,
            # a worker whose main loop stops for this long is restarted; requests waiting on the
            # model do not count (their threads are separate from the loop that heartbeats)
            "timeout": 60,
            "graceful_timeout": 30,
            "preload_app": False,  # each worker builds its own app: engine, pools, scheduler
            "accesslog": None,
            "forwarded_allow_ips": "127.0.0.1,::1",
            # gunicorn's admin socket is a file in $HOME shared by every server on the host; unused here
            "control_socket_disable": True,
        }


# The rate limits (flask-limiter strings such as "1000 per hour") and the variable that sets each.
RATE_LIMIT_DEFAULTS = {
    # A class on a campus network shares one public address: per-address caps on successful
    # registrations must let a whole cohort in at once (200 within two minutes), while failed
    # attempts (taken names, bad passwords, missing consent) are capped tightly.
    "register": ("RATE_LIMIT_REGISTER_PER_ADDRESS", "1000 per hour"),
    "register_failures": ("RATE_LIMIT_REGISTER_FAILURES_PER_ADDRESS", "30 per minute"),
    # per account, so a cohort behind one address never shares it
    "messages": ("RATE_LIMIT_MESSAGES_PER_ACCOUNT", "30 per minute"),
    # new participants entering through the panel's link from one address (a campus shares one);
    # returning visits (device cookie, login session) are not counted
    "panel_entries": ("RATE_LIMIT_PANEL_ENTRIES_PER_ADDRESS", "60 per minute"),
    # password logins: per (account, address), and failures per account from all addresses together
    # (not counted where the account logged in before, so guesses never lock the owner out there)
    "login_per_account_address": ("RATE_LIMIT_LOGIN_PER_ACCOUNT_ADDRESS", "10 per minute"),
    "login_failures_per_account": ("RATE_LIMIT_LOGIN_FAILURES_PER_ACCOUNT", "100 per hour"),
}


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
    # where the app's pages and GET /i18n/messages.json read the interface's catalogs (<dir>/<lang>/LC_MESSAGES/
    # messages.po); None: translations/. Tests point it at a copy with a dummy language; services outside a
    # request (reminders, the report) read translations/ itself
    translations_dir: str | None = None
    # the scheduler's intervals in seconds (SCHEDULER_*_SECONDS); None: its defaults (services.operations.scheduler)
    scheduler_intervals: dict[str, float] = field(default_factory=dict)
    reminders: ReminderConfig = field(default_factory=ReminderConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)
    rate_limits: dict[str, str] = field(default_factory=lambda: {n: d for n, (_, d) in RATE_LIMIT_DEFAULTS.items()})
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
