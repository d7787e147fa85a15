"""AI Memory Lab: the Flask app factory, and ``python app.py`` to serve it.

``create_app(settings)`` builds the same app for the server, the ``flask`` CLI,
the scheduler and the tests. ``python app.py`` applies migrations, creates the
first admin (printing a generated password once) and serves on
127.0.0.1:$PORT (8000) with waitress (threads and connection limits: services/hosting/serving.py).
``scripts/serve.py`` (``make serve``) serves the same app with gunicorn on PostgreSQL.
"""
from __future__ import annotations

import functools
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click
from flask import Flask, jsonify, request
from flask_login import LoginManager
from flask_wtf.csrf import CSRFError, CSRFProtect
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import HTTPException

from config import Settings
from database.db_manager import is_unavailable
from database.participant_lock import ParticipantErased
from routes import error_pages, http_safety, i18n
from routes.access import (
    DbIdConverter,
    close_db_session,
    db_session,
    limit_retry_after,
    limiter,
    release_db_session,
    request_transaction,
)
from services.hosting.runtime import build_runtime
from services.hosting.serving import warm_up
from services.llm.chain import LLMService
from services.participants.account_service import session_user
from services.platform.backpressure import BACKPRESSURE, retry_after
from services.platform.clock import Clock
from services.platform.errors import StudyError, Unavailable
from services.research import preflight
from services.study.definition import StudyDefinitionError
from services.text.catalogs import catalogs_at

log = logging.getLogger("memory_lab")
csrf = CSRFProtect()


def create_app(settings: Settings | None = None, *, clock: Clock | None = None, llm: LLMService | None = None,
               embedder=None) -> Flask:
    settings = settings or Settings.from_env()
    app = Flask(__name__, static_folder="static", static_url_path="/static")
    app.config.update(
        SECRET_KEY=settings.secret_key,
        TESTING=settings.testing,
        MAX_CONTENT_LENGTH=1024 * 1024,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.cookie_secure,
        REMEMBER_COOKIE_SECURE=settings.cookie_secure,
        REMEMBER_COOKIE_SAMESITE="Lax",
        WTF_CSRF_TIME_LIMIT=None,  # a participant's page stays open for a whole task
        WTF_CSRF_HEADERS=["X-CSRFToken", "X-CSRF-Token"],
        RATELIMIT_ENABLED=settings.rate_limits_enabled,
        MEMORY_LAB_RATE_LIMITS=settings.rate_limits,
        JSON_AS_ASCII=False,
    )
    http_safety.install(app)
    app.url_map.converters["id"] = DbIdConverter
    _trust_proxies(app, settings.serving.proxy_hops)
    runtime = build_runtime(settings, clock=clock, llm=llm)
    if embedder is not None:
        runtime.embedder = embedder
    if settings.run_migrations_on_start and settings.database_url.startswith("sqlite"):
        runtime.db.upgrade()
    runtime.start_study_versions()
    app.extensions["memory_lab"] = runtime
    BACKPRESSURE.configure(capacity=runtime.db.connections)
    _warn_about_allowlist(runtime)

    csrf.init_app(app)
    i18n.install(app, catalogs_at(settings.translations_dir))
    app.config.update(_limiter_storage(settings, runtime))
    limiter.init_app(app)
    # after_request hooks run newest first: the request's connection goes back to the pool before the
    # limiter's hook counts a failure or reads its window for the headers (a second connection)
    app.after_request(release_db_session)
    login = LoginManager(app)

    @login.user_loader
    def load_user(cookie_id: str):
        # in the request's session: its transaction goes on with the rate limiter's count and the view's
        # own work, on one connection (docs/benchmarks.md, "CPU per reply, session 7")
        return session_user(db_session(), cookie_id)

    app.teardown_appcontext(close_db_session)
    _serve_live_study(app, runtime)
    _register_errors(app)
    _register_blueprints(app)
    _register_cli(app)
    _register_payments_cli(app)
    _register_preflight_cli(app)
    _register_reporting_cli(app)
    return app


def _serve_live_study(app: Flask, runtime: Any) -> None:
    """Each request runs under one study version: the live one (checked every STUDY_REFRESH_SECONDS), unless a
    view pins a running task's own version (routes.access.pin_study)."""
    from flask import g

    @app.before_request
    def live_study():
        if runtime.studies is not None:
            runtime.studies.refresh()
            g.study_pins = [runtime.studies.pin_request(runtime.settings.study)]

    @app.teardown_request
    def unpin_study(_exc: BaseException | None = None):
        for token in reversed(g.pop("study_pins", [])):
            try:
                runtime.studies.unpin(token)
            except ValueError:  # a streamed reply ended in another context: nothing is pinned there
                pass


def _warn_about_allowlist(runtime: Any) -> None:
    """A PANEL_ALLOWLIST that cannot be used lets no new panel id in (each try answers 503): say so now."""
    from services.participants.panel_service import AllowlistUnavailable, load_allowlist

    try:
        load_allowlist(runtime.settings.panel_allowlist_path, runtime.study)
    except AllowlistUnavailable as exc:
        log.warning("%s: no new panel participant can enter until it is fixed", exc)


def _trust_proxies(app: Flask, hops: int) -> None:
    """Behind PROXY_HOPS reverse proxies the client's address and scheme come from X-Forwarded-*
    (per-address rate limits would otherwise see every participant as the proxy)."""
    if hops:
        from werkzeug.middleware.proxy_fix import ProxyFix

        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops)


def _register_blueprints(app: Flask) -> None:
    from routes import admin, admin_tools, auth, pages, panel, participant, rights, staff, study_admin

    for module in (auth, participant, admin, admin_tools, pages, panel, rights, staff, study_admin):
        app.register_blueprint(module.bp)
    app.register_blueprint(study_admin.pages)


def _error(code: str, message: str, status: int, details: dict | None = None):
    body = {"error": code, "message": message}
    if details:
        body["details"] = details
    return jsonify(body), status


def _http_error(app: Flask, exc: HTTPException):
    """A page gets the app's own error page in the reader's language (with the exception's Allow and
    Retry-After headers); /api gets JSON {"error", "message"}."""
    if exc.code is None or exc.code < 400:  # a routing redirect (e.g. a missing trailing slash)
        return exc
    # a 429's header and body say the same wait (the limit's window; flask-limiter's own header is renamed)
    wait = limit_retry_after() if exc.code == 429 else None
    if not error_pages.wants_json():
        kept = {k: v for k, v in exc.get_response().headers.items() if k.lower() in ("allow", "retry-after")}
        if wait is not None:
            kept["Retry-After"] = str(wait)
        return error_pages.error_page(exc.code, app.extensions["memory_lab"].study, kept)
    codes = {404: "not_found", 405: "method_not_allowed", 413: "too_large", 429: "too_many_requests"}
    if wait is not None:
        response, status = _error("too_many_requests", exc.description, 429, {"retry_after_seconds": wait})
        response.headers["Retry-After"] = str(wait)
        return response, status
    return _error(codes.get(exc.code, exc.name.lower().replace(" ", "_")), exc.description, exc.code)


def _register_errors(app: Flask) -> None:
    @app.errorhandler(StudyError)
    def study_error(exc: StudyError):
        close_db_session()
        if not isinstance(exc, Unavailable):
            return _error(exc.code, exc.message, exc.status, exc.details)
        # back-pressure: the wait grows with this process's recent refusals and is spread by jitter
        seconds = retry_after()
        response, status = _error(exc.code, exc.message, exc.status, {**exc.details, "retry_after_seconds": seconds})
        response.headers["Retry-After"] = str(seconds)
        return response, status

    @app.errorhandler(ParticipantErased)
    def participant_erased(_exc: ParticipantErased):
        # a request under way when the participant was erased: nothing of it was stored
        db_session().rollback()
        return _error("participant_erased", "this participant's data has been erased", 410)

    @app.errorhandler(CSRFError)
    def csrf_error(exc: CSRFError):
        return _error("csrf_failed", exc.description or "missing or invalid CSRF token", 400)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        return _http_error(app, exc)

    @app.errorhandler(SQLAlchemyError)
    def database_error(exc: SQLAlchemyError):
        close_db_session()
        if not is_unavailable(exc):
            return unexpected(exc)
        log.warning("database unavailable on %s %s: %s", request.method, request.path, getattr(exc, "orig", exc))
        seconds = retry_after()
        if not error_pages.wants_json():
            return error_pages.error_page(503, app.extensions["memory_lab"].study, {"Retry-After": str(seconds)})
        response = jsonify(http_safety.unavailable_body(seconds))
        response.headers["Retry-After"] = str(seconds)
        return response, 503

    @app.errorhandler(Exception)
    def unexpected(exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.path)
        db_session().rollback()
        if not error_pages.wants_json():
            return error_pages.error_page(500, app.extensions["memory_lab"].study)
        return _error("internal_error", "something went wrong on the server; it has been logged", 500)


def _register_cli(app: Flask) -> None:
    runtime = app.extensions["memory_lab"]

    @app.cli.command("create-admin")
    @click.argument("username")
    def create_admin_command(username: str) -> None:
        """Create an admin (password from ADMIN_PASSWORD, or prompted)."""
        from services.participants.account_service import create_admin

        password = os.environ.get("ADMIN_PASSWORD") or click.prompt(
            "Password", hide_input=True, confirmation_prompt=True)
        with runtime.db.Session() as session:
            try:
                user = create_admin(session, username, password, runtime.clock)
            except StudyError as exc:
                raise click.ClickException(exc.message) from exc
        click.echo(f"admin {user.username} is ready")

    @app.cli.command("consolidate")
    @click.option("--user", help="a participant's username or id: consolidate their pending tasks")
    @click.option("--all-pending", is_flag=True, help="every finished task not yet consolidated")
    @click.option("--dry-run", is_flag=True, help="print what would change; write nothing")
    def consolidate_command(user: str | None, all_pending: bool, dry_run: bool) -> None:
        """Consolidate finished tasks by hand (same as scripts/manual_consolidation.py)."""
        from services.memory.consolidation_service import ConsolidationService, describe, manual_consolidation

        service = ConsolidationService(runtime.db, runtime.settings, llm=runtime.consolidation_llm,
                                       embedder=runtime.embedder, clock=runtime.clock)
        try:
            summaries = manual_consolidation(service, user=user, all_pending=all_pending, dry_run=dry_run)
        except (LookupError, ValueError) as exc:
            raise click.UsageError(str(exc)) from exc
        for summary in summaries:
            click.echo(describe(summary))
        if not summaries:
            click.echo("nothing to consolidate")
        if any(s.status == "failed" for s in summaries):
            raise SystemExit(1)

    @app.cli.command("db-upgrade")
    @click.option("--revision", default="head")
    def db_upgrade_command(revision: str) -> None:
        """Apply database migrations (Alembic) up to REVISION."""
        runtime.db.upgrade(revision)
        click.echo(f"database at {runtime.db.current_revision()}")

    @app.cli.command("export")
    @click.option("--out", required=True, type=click.Path(dir_okay=False), help="zip file to write")
    @click.option("--bom", is_flag=True, help="UTF-8 with byte-order mark (Excel)")
    @click.option("--exclude-pii", is_flag=True, help="leave out usernames and free-text columns")
    @click.option("--include-test", is_flag=True, help="also the test (pilot) participants")
    @click.option("--no-escape-formulas", is_flag=True,
                  help="keep CSV cells starting with = + - @ as they are (escaped with ' by default)")
    def export_command(out: str, bom: bool, exclude_pii: bool, include_test: bool, no_escape_formulas: bool) -> None:
        """Export the study data (CSV long and wide, codebook, study config) as a zip."""
        from services.reporting.export_service import ExportOptions, write_export

        options = ExportOptions(bom=bom, exclude_pii=exclude_pii, include_test=include_test,
                                escape_formulas=not no_escape_formulas)
        result = write_export(runtime, out, options=options)
        click.echo(f"wrote {out}: " + ", ".join(f"{name} {rows}" for name, rows in result.files.items()))

    @app.cli.command("run-jobs")
    @click.option("--reminders", is_flag=True, help="also send reminder e-mails (needs REMINDERS_ENABLED=1)")
    def run_jobs_command(reminders: bool) -> None:
        """Run the scheduler's jobs once: consolidation sweep, overdue marking (e.g. from cron)."""
        from services.operations.scheduler import run_jobs_once

        click.echo(_run_jobs_summary(run_jobs_once(runtime, reminders=reminders)))


def _limiter_storage(settings: Settings, runtime: Any) -> dict[str, Any]:
    """flask-limiter's store: per process in memory, or in the database for several processes."""
    if settings.rate_limit_storage == "database":
        from database import rate_limit_store

        rate_limit_store.track_counts(runtime.db.Session)  # a count made in a request's transaction (access.py)
        # a counter the database cannot write now must not turn an answered request into a 500 (the
        # failure count after the response, the headers): it is logged, and the request's own database
        # work answers 503 if the database is really down
        return {"RATELIMIT_STORAGE_URI": f"{rate_limit_store.SCHEME}://",
                "RATELIMIT_STORAGE_OPTIONS": {"engine": runtime.db.engine, "request_session": request_transaction},
                "RATELIMIT_SWALLOW_ERRORS": True}
    from services.platform import memory_rate_limits

    return {"RATELIMIT_STORAGE_URI": f"{memory_rate_limits.SCHEME}://", "RATELIMIT_STORAGE_OPTIONS": {}}


def _run_jobs_summary(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"nothing done: {result['skipped']}"
    runs = result["sweep"]["runs"]
    lines = [f"closed {len(result['sweep']['closed'])} abandoned chat(s); {len(runs)} consolidation run(s)"
             f" ({', '.join(sorted({r['status'] for r in runs})) or 'none'}); {len(result['overdue'])} newly overdue"]
    if "reminders" in result:
        lines.append(f"reminders sent: {len(result['reminders']['sent'])}, "
                     f"failed: {len(result['reminders']['failed'])}")
    return "\n".join(lines)


def _register_payments_cli(app: Flask) -> None:
    runtime = app.extensions["memory_lab"]

    @app.cli.command("payments")
    @click.option("--out", required=True, type=click.Path(dir_okay=False), help="CSV file to write")
    @click.option("--upload", is_flag=True, help="only id,amount rows for the panel's bulk payment upload")
    def payments_command(out: str, upload: bool) -> None:
        """What each participant is owed: per-task compensation and completion bonus (study file)."""
        from services.participants.payments import payment_rows, payments_csv

        with runtime.db.Session() as session:
            rows = payment_rows(session, runtime.study)
        Path(out).write_bytes(payments_csv(rows, upload=upload).encode("utf-8"))
        click.echo(f"wrote {out}: {len(rows)} participant(s)")


def password_notice(username: str, password: str) -> str:
    """The one-time admin password as a framed block that stands out among log lines."""
    lines = ["ADMIN PASSWORD (shown once)", "",
             f"First start: created admin '{username}' with password: {password}",
             "", "It is shown only this once: write it down now.",
             "Change it with: .venv/bin/flask --app app create-admin admin",
             "Sign in at /admin/login"]
    width = max(len(line) for line in lines) + 4
    border = "#" * width
    body = [f"# {line.ljust(width - 4)} #" for line in lines]
    return "\n".join(["", border, *body, border, ""])


def _register_preflight_cli(app: Flask) -> None:
    runtime = app.extensions["memory_lab"]

    @app.cli.command("preflight")
    @click.option("--per-group", default=1, show_default=True, help="bots per enabled condition and language")
    @click.option("--day-seconds", default=5.0, show_default=True, help="pilot day of the bots' temporary server")
    def preflight_command(per_group: int, day_seconds: float) -> None:
        """Prove the manipulation before recruiting: calibration of the active recall preset for the configured
        embedder, then the bot manipulation check of every enabled condition (a temporary database, the
        environment's providers); the report is stored in the study's database. Exit 1 when a check fails."""
        # the bots' temporary servers keep the study's providers (simulation._temporary_settings), so they share
        # this app's embedder rather than loading the same model again for each server
        make_app = functools.partial(create_app, embedder=runtime.embedder)
        outcome = preflight.run_preflight(runtime.settings, runtime.db.session, make_app, clock=runtime.clock,
                                          embedder=runtime.embedder, per_group=per_group, day_seconds=day_seconds,
                                          log_line=click.echo)
        click.echo(preflight.describe(outcome))
        if outcome.refused:
            raise click.ClickException(outcome.refused)
        if not outcome.passed:
            raise SystemExit(1)


def _register_reporting_cli(app: Flask) -> None:
    """``report`` and ``prereg-bundle`` (docs/report.md)."""
    runtime = app.extensions["memory_lab"]

    @app.cli.command("report")
    @click.option("--out", required=True, type=click.Path(file_okay=False), help="folder for report.html and .json")
    @click.option("--language", type=click.Choice(["zh", "en"]), default=None,
                  help="language of report.html (default: the study's default language)")
    @click.option("--from-export", "from_export", type=click.Path(exists=True), default=None,
                  help="build it from this export (zip or unpacked folder) instead of the study's database")
    def report_command(out: str, language: str | None, from_export: str | None) -> None:
        """The study report from the export: CONSORT flow and attrition, manipulation checks, outcome models."""
        from services.reporting.report import ExportUnreadable, build_report, load_export, report_runtime, write_report

        if from_export:
            try:
                report = build_report(load_export(from_export), generated_at=runtime.clock.now())
            except ExportUnreadable as exc:
                raise click.UsageError(str(exc)) from exc
        else:
            report = report_runtime(runtime, channel="cli")
        paths = write_report(report, out, language=language or runtime.study.default_language)
        fitted = sum(1 for m in report["models"] if m["status"] == "fitted")
        click.echo(f"wrote {paths['html']} and {paths['json']}: {fitted} of {len(report['models'])} scale models "
                   f"fitted, {len(report['outcomes'])} contrasts against {report['study']['reference_condition']}")

    @app.cli.command("prereg-bundle")
    @click.option("--out", required=True, type=click.Path(dir_okay=False), help="zip file to write")
    def prereg_bundle_command(out: str) -> None:
        """The pre-registration bundle: study definition and hash, prompts, providers and models, the latest
        pre-flight report, the codebook, and the analysis in Python and R."""
        from services.reporting.prereg import write_bundle

        names = write_bundle(runtime, out)
        click.echo(f"wrote {out}: {', '.join(names)}")


def bootstrap_admin_once(app: Flask) -> None:
    """Print a generated admin password once, on the first start with no admin."""
    from services.participants.account_service import bootstrap_admin

    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        created = bootstrap_admin(session, runtime.clock)
    if created:
        print(password_notice(*created), flush=True)


def configure_console_logging(environ: dict[str, str] | None = None) -> None:
    """INFO for the app, WARNING for Alembic and (unless SCHEDULER_LOG_LEVEL says otherwise) for APScheduler:
    a line per job run every few seconds would bury the one-time admin password and real warnings."""
    env = os.environ if environ is None else environ
    level = (env.get("SCHEDULER_LOG_LEVEL") or "WARNING").strip().upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise SystemExit(f"SCHEDULER_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not {level!r}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # one line per migration plugin is noise
    logging.getLogger("apscheduler").setLevel(level)
    for jobs in ("scheduler", "overdue", "reminders"):
        logging.getLogger(f"services.operations.{jobs}").setLevel(level)


def check_time_scale_on_start(app: Flask) -> None:
    """Refuse (SystemExit) a PILOT_DAY_SECONDS other than the one the database was run with, unless allowed."""
    from services.platform.time_scale import TimeScaleChanged, check_time_scale

    runtime = app.extensions["memory_lab"]
    settings = runtime.settings
    with runtime.db.Session() as session:
        try:
            result = check_time_scale(session, settings.day_seconds, runtime.clock,
                                      allow_change=settings.allow_time_scale_change)
        except TimeScaleChanged as exc:
            raise SystemExit(f"time scale refused: {exc}") from exc
    if result.outcome == "changed":
        log.warning("time scale changed on purpose (ALLOW_TIME_SCALE_CHANGE=1): 1 study day = %g s, was %g s; "
                    "recorded in the audit log", result.day_seconds, result.previous)


def main() -> int:
    configure_console_logging()
    try:
        return _serve()
    except KeyboardInterrupt:  # Ctrl-C before serving began (warm-up): a stop, not a crash
        print("AI Memory Lab stopped.", flush=True)
        return 0


def _serve() -> int:
    try:
        app = create_app()
    except StudyDefinitionError as exc:  # refuse to serve a study that cannot run, before anything starts
        raise SystemExit(f"study definition refused: {exc}") from exc
    except ValueError as exc:  # a setting that cannot work, e.g. reminders without PUBLIC_BASE_URL
        raise SystemExit(f"configuration refused: {exc}") from exc
    check_time_scale_on_start(app)
    runtime = app.extensions["memory_lab"]
    warm_up(runtime)  # the embedder (and its pin check) and jieba, before the first participant
    if runtime.settings.scheduler_enabled:
        from services.operations.scheduler import start_scheduler

        start_scheduler(app)
    port = int(os.environ.get("PORT", "8000"))
    host = os.environ.get("HOST", "127.0.0.1")
    settings = runtime.settings
    mode = f"pilot mode, 1 study day = {settings.day_seconds:g} s" if settings.pilot_mode else "real time"
    print(f"AI Memory Lab on http://{host}:{port}  ({mode}; reply chain: "
          f"{','.join(runtime.settings.llm_providers)}; embedder: {runtime.settings.embedding_provider}); "
          "Ctrl-C stops it", flush=True)
    bootstrap_admin_once(app)  # last before serving, so nothing scrolls it away
    from waitress import serve

    from services.hosting.serving import raise_open_file_limit

    serving = settings.serving
    raise_open_file_limit(serving.connection_limit)
    serve(app, host=host, port=port, **serving.waitress_options())  # returns on Ctrl-C (waitress catches it)
    print("AI Memory Lab stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
