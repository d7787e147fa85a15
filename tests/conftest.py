"""Shared fixtures: a migrated database per test, the study definition, a manual clock.

App-level fixtures (``app``, ``client``, ``auth``) are added below by the platform tests.
Set ``TEST_DATABASE_URL`` to a PostgreSQL URL to run the suite against PostgreSQL;
``make test`` does that for the tests marked ``postgres``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import sys
import threading
from datetime import datetime
from pathlib import Path

import numpy as np
import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from config import Settings
from database.db_manager import Database
from services.platform.clock import ManualClock
from services.study.definition import load_study
from tests.postgres_files import MARK as POSTGRES_MARK
from tests.postgres_files import names_the_mark


def pytest_configure(config):
    """Under pytest-xdist (``-n``) each worker process gets its own PostgreSQL database, ``<name>_gw0``,
    ``<name>_gw1``, ... on the server of ``TEST_DATABASE_URL``: a test resets its database's schema, so two
    workers sharing one would drop each other's tables. The variable is rewritten for the worker, so tests
    that read it, and the servers they start, use that database too."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    url = os.environ.get("TEST_DATABASE_URL", "")
    if worker and url.startswith("postgresql"):
        os.environ["TEST_DATABASE_URL"] = _worker_database(url, worker)
    _cheap_password_hashes()
    _embeddings_once_per_process()
    _chinese_segmented_once_per_process()
    _url_builders_on_first_use()
    _hypothesis_without_timing()


def _hypothesis_without_timing() -> None:
    """Property tests judge what a function returns, not how fast: no per-example deadline and no "too slow"
    health check, which a loaded machine (two passes on two cores) trips for code that is correct. Tests that set
    their own ``@settings`` keep them."""
    from hypothesis import HealthCheck, settings

    settings.register_profile("memory-lab", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("memory-lab")


# scrypt with N = 128 instead of 2^15: the same algorithm through the same code, 1/256 of the work (werkzeug's
# memory bound refuses a smaller N). Every registration and log-in of the suite hashed at the production cost,
# ~0.13 s of CPU each, thousands of times over. Servers the tests start as subprocesses (make serve, make run)
# keep the production cost, and tests/services/participants/test_account_service.py checks that a fresh
# process hashes with it.
TEST_PASSWORD_METHOD = "scrypt:128:8:1"


def _cheap_password_hashes() -> None:
    from services.participants import account_service

    account_service.PASSWORD_METHOD = TEST_PASSWORD_METHOD


def _chinese_segmented_once_per_process() -> None:
    """jieba segments each Chinese run once per test process: retrieval indexes and the calibration replays
    tokenize the same memories in test after test (~0.1 ms a run; the calibration sample's traces 3.6 s -> ~1.8 s
    when built again, docs/benchmarks.md, "Test suite time, session 15"). A run's words depend on the run alone.
    The platform does not cache them (services/text/keywords.py: erased words must not stay in a process)."""
    import functools

    from services.text import keywords

    keywords._segment_chinese = functools.lru_cache(maxsize=None)(keywords._segment_chinese)


def _embeddings_once_per_process() -> None:
    """The offline embedder (multilingual-e5-small on the CPU) embeds each text once per test process: the same
    bot scripts, task messages and consolidated exchanges come back in test after test, through a new app (and a
    new provider) each time, and each costs ~20-100 ms of the model's CPU (~47 s over tests/routes alone,
    docs/benchmarks.md, "Test suite time, session 15"). A text still gets the vector the model gives it here, once:
    the model is deterministic, and queries and passages (e5 prefixes them apart) are kept apart."""
    from services.llm.providers.offline import OfflineEmbeddingProvider

    encode = OfflineEmbeddingProvider._encode
    vectors: dict[tuple[bool, str], np.ndarray] = {}

    def encode_once(self, texts: list[str], is_query: bool) -> np.ndarray:
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if (is_query, t) not in vectors))
        if missing:
            vectors.update(zip(((is_query, t) for t in missing), encode(self, missing, is_query), strict=True))
        if not texts:
            return encode(self, texts, is_query)
        return np.stack([vectors[(is_query, t)] for t in texts])

    OfflineEmbeddingProvider._encode = encode_once


def _url_builders_on_first_use() -> None:
    """Each URL rule's two builder functions (what ``url_for`` runs) are compiled when first used, not when the rule
    is added: werkzeug writes and compiles them for each of the app's ~80 rules, ~45 % of an app's creation
    (~0.05 s of CPU), and the suite creates an app for most of its tests, which build a few URLs at most. The
    functions compiled are werkzeug's own; only the moment they are compiled changes."""
    import flask
    from werkzeug.routing import Rule

    class BuildersOnFirstUse(Rule):
        def _compile_builder(self, append_unknown: bool = True):
            compiled = None
            compile_builder = super()._compile_builder

            def build(rule: Rule, *args, **kwargs):
                nonlocal compiled
                if compiled is None:
                    compiled = compile_builder(append_unknown).__get__(rule, None)
                return compiled(*args, **kwargs)

            return build

    flask.Flask.url_rule_class = BuildersOnFirstUse


def _worker_database(url: str, worker: str) -> str:
    """Create (afresh) the database ``<name>_<worker>`` next to ``url``'s and return its URL."""
    base = make_url(url)
    name = f"{base.database}_{worker}"
    _drop_and_create(url, name)
    return base.set(database=name).render_as_string(hide_password=False)


TESTS = Path(__file__).resolve().parent
# Folders whose modules all run untraced, as if each carried ``pytestmark = pytest.mark.untraced``: the browser
# tests serve the app from threads of the pytest process while Chromium drives its pages, and the lines those
# requests run are counted by the route and service tests (docs/testing.md, "Coverage").
UNTRACED_FOLDERS = (TESTS / "browser",)


def pytest_collection_modifyitems(config, items):
    """The files holding a test marked ``slow`` run first (each file's tests stay together and in order): with
    several workers (scripts/run_tests.sh) the long files then overlap the many short ones instead of running
    alone at the end while the other workers wait. The modules under UNTRACED_FOLDERS get the ``untraced``
    marker. A test marked ``postgres`` in a file the PostgreSQL pass would not collect (tests/postgres_files.py)
    stops the run."""
    marked_files = {item.path for item in items if item.get_closest_marker("postgres")}
    unpicked = sorted(os.path.relpath(path, TESTS.parent) for path in marked_files if not names_the_mark(path))
    if unpicked:
        raise pytest.UsageError(f"tests marked postgres in files that do not name {POSTGRES_MARK}, which the "
                                f"PostgreSQL pass of scripts/run_tests.sh would not collect: {', '.join(unpicked)}")
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
    for module in {item.getparent(pytest.Module) for item in items}:
        if module is not None and any(module.path.is_relative_to(folder) for folder in UNTRACED_FOLDERS):
            module.add_marker(pytest.mark.untraced)


def pytest_sessionfinish(session, exitstatus):
    """With FAIL_ON_SKIP=1 (the PostgreSQL pass of scripts/run_tests.sh) a skipped test fails the run:
    a PostgreSQL test that skips has not shown that PostgreSQL works."""
    if os.environ.get("FAIL_ON_SKIP") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        reporter.write_line(f"FAIL_ON_SKIP: {len(skipped)} test(s) skipped in a run where every test must run:",
                            red=True)
        for report in skipped:
            reporter.write_line(f"  {report.nodeid}: {report.longrepr[-1] if report.longrepr else ''}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@functools.cache
def _default_study():
    """The default study (data/study), built and validated once per test process: a ``Study`` is frozen, and
    tests change theirs with ``with_overrides``, which builds a new one. Reading and validating it is ~5 ms,
    twice for most tests (``study`` and ``settings``)."""
    return load_study()


@pytest.fixture
def study():
    return _default_study()


@pytest.fixture
def clock():
    return ManualClock(datetime(2026, 3, 2, 9, 0, 0))


@pytest.fixture
def database_url(tmp_path):
    return os.environ.get("TEST_DATABASE_URL") or f"sqlite:///{tmp_path / 'test.db'}"


@contextlib.contextmanager
def untraced():
    """No trace function (coverage's tracer, when the run measures coverage: scripts/run_tests.sh) around work
    that tracing slows several times over and whose lines other tests count: the ``untraced`` modules
    (docs/testing.md, "Coverage"). The tracer is set aside and put back, not stopped through coverage's API: an
    xdist worker of pytest-cov runs more than one Coverage instance, and stopping the latest leaves the other's
    tracer in place. Threads started inside get no trace function either (``threading.settrace``)."""
    saved, saved_for_threads = sys.gettrace(), threading.gettrace()
    sys.settrace(None)
    threading.settrace(None)
    try:
        yield
    finally:
        sys.settrace(saved)
        threading.settrace(saved_for_threads)


@pytest.fixture(scope="module", autouse=True)
def _untraced_module(request):
    """A module marked ``untraced`` (``pytestmark``, or a folder of UNTRACED_FOLDERS) runs without the trace
    function: its module and function fixtures, its tests and the threads they start (a live server's request
    threads). Session fixtures it is the first to use are built before, traced. Only the module's mark counts:
    a mark on one test would come after its module's fixtures were built."""
    if request.node.get_closest_marker("untraced") is None:
        yield
        return
    with untraced():
        yield


@pytest.fixture(scope="session")
def calibration_embedder():
    """The offline embedder (multilingual-e5-small) answering from the checked-in vectors of
    tests/fixtures/embeddings.npz (tests/embedding_cache.py) and remembering every text it embedded: the
    calibration tests and the pre-flight's calibration check embed the same sample sentences, and none of them
    waits for the CPU model unless the file lacks a text. With EMBEDDING_CACHE_RECORD set (``python -m
    tests.embedding_cache``) it writes what it served there when the session ends."""
    from services.research.recall_calibration_replay import MemoEmbedder
    from tests.embedding_cache import RECORD_ENV, CachedEmbedder

    cached = CachedEmbedder.offline()
    yield MemoEmbedder(cached)
    if os.environ.get(RECORD_ENV):
        cached.write(Path(os.environ[RECORD_ENV]))


@pytest.fixture(scope="session")
def migrated_sqlite_template(tmp_path_factory):
    """One SQLite file migrated to head per test run; each test gets a copy (migrating is the slow part)."""
    path = tmp_path_factory.mktemp("template") / "template.db"
    db = Database(f"sqlite:///{path}")
    db.upgrade()
    db.dispose()
    return path


@pytest.fixture(scope="session")
def migrated_postgres_template():
    """With a PostgreSQL ``TEST_DATABASE_URL``: the database ``<name>_template`` on its server, migrated to head
    once per test run (per worker), and what the ``database`` fixture resets each test's database to."""
    url = os.environ.get("TEST_DATABASE_URL", "")
    if not url.startswith("postgresql"):
        return None
    template = f"{make_url(url).database}_template"
    _drop_and_create(url, template)
    db = Database(make_url(url).set(database=template).render_as_string(hide_password=False))
    db.upgrade()
    db.dispose()
    return PostgresTemplate.read(url, template)


@pytest.fixture
def database(database_url, migrated_sqlite_template, migrated_postgres_template):
    if database_url.startswith("sqlite:///"):
        shutil.copyfile(migrated_sqlite_template, database_url.removeprefix("sqlite:///"))
    else:
        migrated_postgres_template.reset(database_url)
    db = Database(database_url)
    yield db
    db.dispose()


def _drop_and_create(url: str, name: str, template: str | None = None) -> None:
    """Drop the database ``name`` on ``url``'s PostgreSQL server (closing its connections) and create it again,
    empty or as a copy of ``template``. Run from the server's ``postgres`` database. FILE_COPY copies the
    template's files (PostgreSQL 15's default, WAL_LOG, writes every page of the copy to the write-ahead log)."""
    engine = sa.create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'
                                 + (f' TEMPLATE "{template}" STRATEGY FILE_COPY' if template else "")))
    finally:
        engine.dispose()


# What a database's schema is made of, as one text: the non-system schemas, every relation of them (tables,
# indexes, sequences, views) by oid with its columns, the constraints, the functions, triggers and types, and
# the Alembic revision. A copy of the template has the template's oids, and dropping and creating anything
# again gives it new ones, so a database whose schema a test changed (a migration test, a schema reset, an ALTER)
# differs from the template's here even when it was put back to the same shape.
SCHEMA_FINGERPRINT = """
SELECT md5(string_agg(part, E'\\n' ORDER BY part)) FROM (
  SELECT format('schema %s %s %s', n.oid, n.nspname, n.nspowner) AS part FROM pg_namespace n
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') AND n.nspname NOT LIKE 'pg_temp%'
     AND n.nspname NOT LIKE 'pg_toast_temp%'
  UNION ALL
  SELECT format('rel %s %s.%s %s %s', c.oid, c.relnamespace, c.relname, c.relkind, string_agg(
           format('%s:%s:%s:%s:%s', a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  pg_get_expr(d.adbin, d.adrelid)), ',' ORDER BY a.attnum))
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') AND n.nspname NOT LIKE 'pg_temp%'
     AND n.nspname NOT LIKE 'pg_toast_temp%'
   GROUP BY c.oid, c.relnamespace, c.relname, c.relkind
  UNION ALL
  SELECT format('constraint %s %s %s %s', oid, conrelid, conname, pg_get_constraintdef(oid)) FROM pg_constraint
   WHERE connamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  UNION ALL
  SELECT format('function %s %s', p.oid, p.proname) FROM pg_proc p
   WHERE p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  UNION ALL
  SELECT format('trigger %s %s', t.oid, t.tgname) FROM pg_trigger t WHERE NOT t.tgisinternal
  UNION ALL
  SELECT format('type %s %s', t.oid, t.typname) FROM pg_type t
   WHERE t.typnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace,
                                'pg_toast'::regnamespace) AND t.typtype IN ('e', 'd', 'r', 'm')
  UNION ALL
  SELECT 'extension ' || extname || ' ' || extversion FROM pg_extension
  UNION ALL
  SELECT 'alembic ' || version_num FROM public.alembic_version
) parts
"""


@dataclasses.dataclass(frozen=True)
class PostgresTemplate:
    """The migrated template database, read once: its tables, the rows the migrations put in some of them (the
    slot counter's) as COPY text, its sequences' states and its schema's fingerprint.

    ``reset`` makes a test's database equal to a fresh copy of the template, as far as the app and the tests
    can see: when its schema is still the template's (SCHEMA_FINGERPRINT), every row is deleted, the template's
    rows copied in and every sequence set back; otherwise (the first test, or after a test that changed the
    schema) the database is dropped and copied from the template again. In place it costs the server ~40 ms of
    CPU (~90 ms wall: connecting, ending the connections left, the fingerprint, the deletes); a drop and copy
    cost ~350-480 ms of its CPU and ~1 s wall, as much as many of the tests themselves (docs/benchmarks.md,
    "Test suite time, session 14")."""

    name: str
    tables: tuple[str, ...]
    rows: dict[str, bytes]
    sequences: dict[str, tuple[int, bool]]
    fingerprint: str

    @classmethod
    def read(cls, url: str, name: str) -> PostgresTemplate:
        with psycopg.connect(_libpq(url, name), autocommit=True) as conn:
            tables = tuple(row[0] for row in conn.execute(
                "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables"
                " WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1"))
            rows = {}
            for table in tables:
                if conn.execute(f"SELECT EXISTS (SELECT FROM {table})").fetchone()[0]:
                    with conn.cursor().copy(f"COPY {table} TO STDOUT") as copy:
                        rows[table] = b"".join(bytes(block) for block in copy)
            sequences = {row[0]: (row[1], row[2]) for row in conn.execute(
                "SELECT quote_ident(schemaname) || '.' || quote_ident(sequencename),"
                " coalesce(last_value, start_value), last_value IS NOT NULL FROM pg_sequences")}
            fingerprint = conn.execute(SCHEMA_FINGERPRINT).fetchone()[0]
        return cls(name, tables, rows, sequences, fingerprint)

    def reset(self, url: str) -> None:
        if not self._empty_in_place(url):
            _drop_and_create(url, make_url(url).database, template=self.name)

    def _empty_in_place(self, url: str) -> bool:
        """Bring ``url``'s database back to the template's rows and sequences if its schema is the template's;
        False when it is not (or the database cannot be reached or locked), for the caller to copy it afresh."""
        try:
            with psycopg.connect(_libpq(url), autocommit=True) as conn:
                # what DROP DATABASE ... WITH (FORCE) did: no connection left from an earlier test
                conn.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
                             " WHERE datname = current_database() AND pid <> pg_backend_pid()")
                if conn.execute(SCHEMA_FINGERPRINT).fetchone()[0] != self.fingerprint:
                    return False
                with conn.transaction():
                    conn.execute("SET LOCAL lock_timeout = '10s'")
                    # replica: no foreign-key triggers, so the tables can be emptied in any order
                    conn.execute("SET LOCAL session_replication_role = replica")
                    conn.execute("; ".join(f"DELETE FROM {table}" for table in self.tables))
                    for table, text in self.rows.items():
                        with conn.cursor().copy(f"COPY {table} FROM STDIN") as copy:
                            copy.write(text)
                    if self.sequences:
                        conn.execute("SELECT " + ", ".join(
                            f"setval('{name}', {value}, {called})"
                            for name, (value, called) in self.sequences.items()))
            return True
        except (psycopg.OperationalError, psycopg.errors.UndefinedTable, psycopg.errors.LockNotAvailable):
            return False


def _libpq(url: str, database: str | None = None) -> str:
    """``url`` (SQLAlchemy's form) as a libpq connection string, for psycopg itself."""
    parsed = make_url(url)
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture
def settings(database_url, tmp_path):
    # STUDY_CONFIG set: Settings.from_env loads that file, as the app does
    default = {} if os.environ.get("STUDY_CONFIG") else {"study": _default_study()}
    return Settings.from_env(
        **default,
        database_url=database_url,
        secret_key="test-secret",
        testing=True,
        scheduler_enabled=False,
        consolidate_inline=True,
        assignment_seed=1234,
        llm_providers=["offline"],
        embedding_provider="offline",
        rate_limits_enabled=False,
    )


@pytest.fixture
def db_session(database):
    with database.session() as session:
        yield session


def _reset_schema(db: Database) -> None:
    with db.engine.begin() as conn:
        conn.execute(sa.text("DROP SCHEMA public CASCADE"))
        conn.execute(sa.text("CREATE SCHEMA public"))


# ---------------------------------------------------------------------------
# App-level fixtures
# ---------------------------------------------------------------------------


class ApiClient:
    """A Flask test client that fetches a CSRF token and sends it with every POST, like the pages do."""

    def __init__(self, flask_client) -> None:
        self.raw = flask_client
        self.token: str | None = None

    def csrf(self) -> str:
        if self.token is None:
            self.token = self.raw.get("/api/auth/csrf").get_json()["csrf_token"]
        return self.token

    def get(self, path: str, **kwargs):
        return self.raw.get(path, **kwargs)

    def post(self, path: str, json=None, **kwargs):
        headers = {"X-CSRFToken": self.csrf(), **kwargs.pop("headers", {})}
        response = self.raw.post(path, json=json, headers=headers, **kwargs)
        body = response.get_json(silent=True) or {}
        if isinstance(body, dict) and body.get("csrf_token"):
            self.token = body["csrf_token"]
        return response

    def register(self, username: str, password: str = "correct-horse-1", **extra):
        return self.post("/api/auth/register",
                         json={"username": username, "password": password, "consent": True, **extra})

    def login(self, username: str, password: str):
        return self.post("/api/auth/login", json={"username": username, "password": password})


@pytest.fixture
def app(settings, clock, database):
    from app import create_app

    settings.run_migrations_on_start = False  # ``database`` is a migrated copy: Alembic would find nothing to do
    flask_app = create_app(settings, clock=clock)
    yield flask_app
    runtime = flask_app.extensions["memory_lab"]
    runtime.background.shutdown()
    runtime.record_failure.flush()
    runtime.db.dispose()


@pytest.fixture
def client(app):
    return ApiClient(app.test_client())


@pytest.fixture
def make_participant(app):
    """make_participant("name") -> a logged-in ApiClient for a new participant."""
    counter = {"n": 0}

    def factory(username: str | None = None, **extra) -> ApiClient:
        counter["n"] += 1
        api = ApiClient(app.test_client())
        response = api.register(username or f"participant{counter['n']:03d}", **extra)
        assert response.status_code == 201, response.get_json()
        return api

    return factory


ADMIN_PASSWORD = "admin-password-1"


@pytest.fixture
def admin_client(app):
    from services.participants.account_service import create_admin

    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        create_admin(session, "labadmin", ADMIN_PASSWORD, runtime.clock)
    api = ApiClient(app.test_client())
    assert api.login("labadmin", ADMIN_PASSWORD).status_code == 200
    return api


def walk_task(api: ApiClient, clock, task_id: str, messages: list[str], *, study) -> dict:
    """Do one task through the API: start, chat, wait the minimum time, finish, answer the questionnaire."""
    assert api.post(f"/api/tasks/{task_id}/start").status_code == 201
    step = study.timing.min_active_seconds / max(len(messages), 1) + 1
    for text in messages:
        clock.advance(min(step, study.timing.idle_gap_seconds))
        response = api.post(f"/api/tasks/{task_id}/messages", json={"content": text})
        assert response.status_code == 201, response.get_json()
    while True:
        clock.advance(study.timing.idle_gap_seconds - 1)
        response = api.post(f"/api/tasks/{task_id}/finish")
        if response.status_code == 200:
            break
        assert response.get_json()["error"] == "too_early"
    items = api.get(f"/api/tasks/{task_id}/questionnaire").get_json()["items"]
    answers = {i["id"]: answer_for(i) for i in items}
    response = api.post(f"/api/tasks/{task_id}/questionnaire", json={"answers": answers})
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def answer_for(item: dict):
    """A valid answer to any questionnaire item."""
    if item["type"] in ("likert", "ios") or (item["type"] == "attention" and not item["options"]):
        return item["min"]
    if item["type"] in ("choice", "attention"):
        return item["options"][0]["value"]
    return "fine"
