"""Panel entry, personal return links and contact details (participants; issue 12)."""
from __future__ import annotations

from flask import Blueprint, Response, current_app, redirect, render_template, request, send_from_directory
from flask_login import current_user, login_user, logout_user
from flask_wtf.csrf import generate_csrf

from routes.access import (
    configured_limit,
    current,
    db_session,
    json_body,
    limiter,
    ok,
    participant_required,
    runtime,
)
from routes.auth import user_view
from routes.i18n import html_lang, page_language, text
from services.chat.chat_service import task_service
from services.participants import account_service, contacts, panel_service
from services.platform.clock import parse_utc_iso, utc_iso
from services.platform.errors import BadInput, NotFound
from services.study import preflight_gate
from services.text.catalogs import FALLBACK_LANGUAGE

bp = Blueprint("panel", __name__)


def _message_page(status: int, which: str) -> Response:
    """A page saying why a link cannot be used, before anyone is known: in the page's language and, below it,
    in English when that is another (the catalogs' panel_page.<which>.*)."""
    languages = list(dict.fromkeys((page_language(), FALLBACK_LANGUAGE)))
    return _render_message(status, [(lang, text(f"panel_page.{which}.title", lang),
                                     text(f"panel_page.{which}.text", lang), text("panel_page.log_in", lang))
                                    for lang in languages])


def _render_message(status: int, texts: list[tuple[str, str, str, str]]) -> Response:
    """templates/panel_message.html with (language, title, text, log-in link) in each language."""
    html = render_template("panel_message.html", texts=[(html_lang(lang), *rest) for lang, *rest in texts])
    return Response(html, status=status, mimetype="text/html", headers={"Cache-Control": "no-store"})


def _closed_page() -> Response:
    """A withdrawn or erased panel id's link: a page in the participant's language with the panel's
    "no places" code and its way back (issue 28 item 2)."""
    lang = page_language()
    details = panel_service.full_details(runtime().study)
    html = render_template("panel_closed.html", lang=html_lang(lang), title=text("panel_page.closed.title"),
                           text=text("panel_page.closed.text"), code_note=text("panel_page.closed.code_note"),
                           code=details["completion_code"], back=text("panel_page.closed.back"),
                           back_url=details["redirect_url"])
    return Response(html, status=403, mimetype="text/html", headers={"Cache-Control": "no-store"})


def base_url() -> str:
    """PUBLIC_BASE_URL, or this request's address when its host is allowed (panel_service.link_base_url)."""
    settings = runtime().settings
    return panel_service.link_base_url(settings.public_base_url, settings.public_hosts, host=request.host,
                                       url_root=request.url_root)


@bp.get("/enter")
def enter():
    """The panel's link. A missing, malformed or doubled id gets a page saying so; a good one, the consent page."""
    study = runtime().study
    values = request.args.getlist(study.panel.id_parameter)
    try:
        if len(set(values)) > 1:
            raise BadInput("the link carries two different participant ids", code="invalid_panel_id")
        external_id = panel_service.check_external_id(study, values[0] if values else None)
    except BadInput:
        return _message_page(400, "invalid_link")
    if panel_service.id_closed(db_session(), study, external_id, runtime().settings.secret_key):
        return _closed_page()
    return send_from_directory(current_app.static_folder, "index.html")


def _entrant() -> panel_service.Entrant:
    logged_in = current_user.id if current_user.is_authenticated and current_user.role == "participant" else None
    return panel_service.Entrant(device_token=request.cookies.get(panel_service.DEVICE_COOKIE),
                                 session_user_id=logged_in,
                                 allowlist_path=runtime().settings.panel_allowlist_path)


def _returning_visit() -> bool:
    """A participant coming back from their own browser is not counted against the entry cap."""
    data = request.get_json(silent=True)
    raw = data.get("external_id") if isinstance(data, dict) else None
    return panel_service.is_returning(db_session(), runtime().study, raw, _entrant())


def _set_device_cookie(response: Response, token: str) -> Response:
    response.set_cookie(panel_service.DEVICE_COOKIE, token, max_age=panel_service.DEVICE_COOKIE_DAYS * 86400,
                        httponly=True, samesite="Lax", secure=runtime().settings.cookie_secure, path="/")
    return response


@bp.post("/api/auth/panel")
@limiter.limit(configured_limit("panel_entries"), key_func=lambda: f"panel:{request.remote_addr}",
               exempt_when=_returning_visit)
def panel_login():
    """Enter with a panel id: a new id after consent; a known one only from the browser that entered as it
    before (device cookie) or its login session, without a new consent. Others get 403 panel_reentry_refused."""
    data = json_body()
    rt = runtime()
    entered = panel_service.enter_panel(
        db_session(), external_id=data.get("external_id"), consent=data.get("consent"),
        language=data.get("language"), params=data.get("session"), entrant=_entrant(), study=rt.study,
        clock=rt.clock, seed=rt.settings.assignment_seed, secret=rt.settings.secret_key,
        # REQUIRE_PREFLIGHT: a new id gets 503 study_not_open until verified; returning participants never do
        gate=lambda: preflight_gate.require_open(db_session(), rt.settings))
    login_user(entered.user)
    response, status = ok({"user": user_view(entered.user), "created": entered.created,
                           "csrf_token": generate_csrf()}, 201 if entered.created else 200)
    return _set_device_cookie(response, entered.device_token), status


def _switch_page(token: str) -> Response:
    """Someone else is signed in here: ask before the link switches the login and the device binding (in the
    signed-in account's language: routes.i18n.page_language)."""
    html = render_template("panel_switch.html", lang=html_lang(page_language()),
                           title=text("panel_page.switch.title"),
                           text=text("panel_page.switch.text", code=current_user.participant_code or "admin"),
                           token=token, csrf_token=generate_csrf(), go=text("panel_page.switch.go"),
                           stay=text("panel_page.switch.stay"))
    return Response(html, status=200, mimetype="text/html", headers={"Cache-Control": "no-store"})


def _link_gone() -> Response:
    return _message_page(404, "link_gone")


@bp.get("/r/<token>")
def return_link(token: str):
    """Open a personal return link: log in, go to the next task. No password. With someone else signed in
    in this browser, a page asks first (POST /r/<token> confirms)."""
    session = db_session()
    try:
        user, _link = panel_service.redeem(session, token, runtime().clock.now())
    except NotFound:
        return _link_gone()
    if current_user.is_authenticated and current_user.id != user.id:
        session.rollback()  # nothing changes until they confirm
        return _switch_page(token)
    return _follow_link(token)


@bp.post("/r/<token>")
def confirm_return_link(token: str):
    """The confirmation from the switch page (a form with the CSRF token): sign out whoever is signed in
    and follow the link."""
    return _follow_link(token)


def _follow_link(token: str) -> Response:
    session = db_session()
    rt = runtime()
    try:
        user, link = panel_service.redeem(session, token, rt.clock.now())
        device = panel_service.remember_device(session, user.id, request.cookies.get(panel_service.DEVICE_COOKIE),
                                               rt.clock.now(), via_link=link.id)
    except NotFound:
        return _link_gone()
    session.commit()
    if current_user.is_authenticated:
        logout_user()
    login_user(user)
    return _set_device_cookie(redirect(panel_service.landing_path(task_service(session, rt), user)), device)


@bp.get("/api/me/return-link")
@participant_required
def my_return_link():
    """A fresh personal link for the logged-in participant, with their next task and its unlock time."""
    base = base_url()  # before a link is stored
    session = db_session()
    tasks = task_service(session, runtime())
    user = current()
    link = panel_service.issue_return_link(session, user, tasks, purpose="task_end")
    session.commit()
    return ok({"url": link.url(base), "expires_at": utc_iso(link.expires_at),
               "next_task": panel_service.next_task(tasks, user), "calendar_url": "/api/me/next-task.ics"})


@bp.get("/api/me/next-task.ics")
@participant_required
def next_task_calendar():
    """The next task's unlock time as a calendar event carrying a personal return link."""
    base = base_url()  # before a link is stored
    session = db_session()
    rt = runtime()
    tasks = task_service(session, rt)
    user = current()
    task = panel_service.next_task(tasks, user)
    if task is None or task["available_at"] is None:
        raise NotFound("there is no upcoming task with a known unlock time", code="no_upcoming_task")
    link = panel_service.issue_return_link(session, user, tasks, purpose="calendar")
    body = panel_service.calendar_file(
        study_name=rt.study.name, task=task, url=link.url(base), language=user.language,
        unlock_at=parse_utc_iso(task["available_at"]), now=rt.clock.now())
    session.commit()
    return Response(body, mimetype="text/calendar", headers={
        "Content-Disposition": f'attachment; filename="{task["id"]}.ics"', "Cache-Control": "no-store"})


@bp.post("/api/me/time-zone")
@participant_required
def set_time_zone():
    """The participant's page reports its time zone ({"time_zone": "Europe/London"}); reminders use it."""
    session = db_session()
    user = current()
    account_service.set_time_zone(user, json_body().get("time_zone"))
    session.commit()
    return ok({"time_zone": user.time_zone})


@bp.post("/api/me/contact")
@participant_required
def set_contact():
    """Give (or, with an empty value, remove) an address for reminders: {"channel": "email", "value": ...}."""
    data = json_body()
    session = db_session()
    rt = runtime()
    user = current()
    contacts.set_contact(session, user, data.get("channel"), data.get("value"),
                         key=rt.settings.contact_encryption_key, now=rt.clock.now())
    session.commit()
    return ok({"channels": contacts.has_contacts(session, user.id)})
