"""Admin API for designing the study (issue 29): the live definition, drafts, publishing, versions and diffs,
import and export as JSON or YAML; previews, demo links and test participants, with the two pages their links
open (``/preview/<token>``, ``/demo/<token>``).

Every route here needs ``design_required``: today the admin role; a role system refines it in this one place.
"""
from __future__ import annotations

from datetime import timedelta

from flask import Blueprint, Response, redirect, request
from flask_login import login_user

from routes.access import current, db_session, json_body, limiter, ok, runtime, staff_permission
from services.memory import registry
from services.operations import preview
from services.participants import panel_service
from services.platform.clock import utc_iso
from services.platform.errors import BadInput, NotFound
from services.study import versions

bp = Blueprint("study_admin", __name__, url_prefix="/api/admin")

# who may read and edit drafts, preview, and publish: routes.access.staff_permission (docs/staff.md)
FORMATS = ("json", "yaml")
DEMO_OPENINGS = "30 per hour"  # per address


def _refresh_now() -> None:
    """This process serves a newly published version at once; the others within STUDY_REFRESH_SECONDS."""
    if runtime().studies is not None:
        runtime().studies.refresh(force=True)


@bp.get("/study")
@staff_permission("edit_drafts")
def live_study():
    """The live definition: {definition, hash, version}."""
    study = runtime().settings.study
    return ok({"definition": study.as_dict(), "hash": versions.definition_hash(study.definition),
               "version": study.version})


@bp.get("/study/versions")
@staff_permission("edit_drafts")
def list_versions():
    """Every published version (newest first, the live one marked) and every saved draft."""
    return ok(versions.listing(db_session()))


@bp.get("/study/versions/<ref>")
@staff_permission("edit_drafts")
def one_version(ref: str):
    """One version (``v3``), draft (``d5``) or ``live``: its definition and hash."""
    name, definition = versions.definition_of(db_session(), ref)
    return ok({"ref": name, "definition": definition, "hash": versions.definition_hash(definition)})


@bp.get("/study/diff")
@staff_permission("edit_drafts")
def diff_versions():
    """?from=v1&to=d4 (versions ``v<n>``, drafts ``d<id>``, ``live``): the changes with their paths."""
    session = db_session()
    before_ref, before = versions.definition_of(session, request.args.get("from"))
    after_ref, after = versions.definition_of(session, request.args.get("to"))
    return ok({"from": before_ref, "to": after_ref, "changes": versions.diff(before, after)})


@bp.get("/study/export")
@staff_permission("edit_drafts")
def export_definition():
    """?ref=v3|d5|live&format=json|yaml: the definition as a file STUDY_CONFIG can name."""
    fmt = request.args.get("format", "json")
    if fmt not in FORMATS:
        raise BadInput("format must be json or yaml", code="invalid_format")
    ref, definition = versions.definition_of(db_session(), request.args.get("ref"))
    body = versions.render(definition, fmt)
    mimetype = "application/json" if fmt == "json" else "application/yaml"
    return Response(body, mimetype=mimetype,
                    headers={"Content-Disposition": f'attachment; filename="study_{ref}.{fmt}"'})


@bp.post("/study/drafts")
@staff_permission("edit_drafts")
def save_draft():
    """{definition} (or {source, format}: JSON or YAML text) -> 201 {draft_id, problems: []}, or 400
    {problems: [{key, message, code}]} naming each bad key."""
    data = json_body()
    definition = (versions.parse_source(data.get("source"), data.get("format", "yaml"))
                  if "source" in data and "definition" not in data else data.get("definition"))
    session = db_session()
    rt = runtime()
    draft, problems = versions.save_draft(session, definition, actor=current(), clock=rt.clock,
                                          runnable=registry.check_study)
    if draft is None:
        listed = [p.as_dict() for p in problems]
        return ok({"error": "invalid_definition", "message": "the definition has problems", "problems": listed,
                   "details": {"problems": listed}}, 400)
    session.commit()
    return ok({"draft_id": draft.id, "hash": draft.study_hash, "problems": []}, 201)


@bp.post("/study/drafts/<id:draft_id>/publish")
@staff_permission("publish")
def publish_draft(draft_id: int):
    """{reason} -> 200 {hash, version}: the draft is the live definition in every process from now on."""
    session = db_session()
    row = versions.publish(session, draft_id, reason=json_body().get("reason"), actor=current(),
                           clock=runtime().clock, runnable=registry.check_study)
    session.commit()
    _refresh_now()
    return ok({"hash": row.study_hash, "version": row.version})


# -- preview, demo links, test participants (issue 29 §2) -------------------------------------------------------

pages = Blueprint("study_pages", __name__)


def _base_url() -> str:
    return (runtime().settings.public_base_url or request.url_root).rstrip("/")


@bp.post("/preview")
@staff_permission("preview")
def create_preview():
    """{condition, task, language} -> 200 {url, expires_at, preview_id}: open ``url`` to do the task as a
    participant of that condition (a preview account: never counted, exported or reported)."""
    data = json_body()
    session = db_session()
    rt = runtime()
    user, link = preview.create_preview(session, rt.study, condition=data.get("condition"), task=data.get("task"),
                                        language=data.get("language"), actor=current(), now=rt.clock.now())
    session.commit()
    return ok({"url": f"{_base_url()}/preview/{link.token}?task={data['task']}", "preview_id": user.id,
               "expires_at": utc_iso(link.expires_at)})


@bp.get("/previews")
@staff_permission("preview")
def list_previews():
    return ok({"previews": preview.preview_listing(db_session(), runtime().clock.now()),
               "delete_after_hours": preview.PREVIEW_HOURS})


@bp.post("/previews/delete")
@staff_permission("preview")
def delete_previews():
    """Delete every preview account now, with everything it wrote."""
    session = db_session()
    deleted = preview.delete_previews(session, now=runtime().clock.now())
    session.commit()
    return ok({"deleted": deleted})


@bp.get("/demo-links")
@staff_permission("preview")
def list_demo_links():
    return ok({"demo_links": preview.demo_links(db_session(), runtime().clock.now())})


@bp.post("/demo-links")
@staff_permission("preview")
def create_demo_link():
    """{condition, language, days?, label?} -> 201 {url, ...}: shown once; each opening is a fresh preview."""
    data = json_body()
    session = db_session()
    rt = runtime()
    link, token = preview.create_demo_link(session, rt.study, condition=data.get("condition"),
                                           language=data.get("language"), days=data.get("days"),
                                           label=data.get("label"), actor=current(), now=rt.clock.now())
    session.commit()
    return ok({**preview.demo_link_view(link, rt.clock.now()), "url": f"{_base_url()}/demo/{token}"}, 201)


@bp.post("/demo-links/<id:link_id>/revoke")
@staff_permission("preview")
def revoke_demo_link(link_id: int):
    session = db_session()
    now = runtime().clock.now()
    link = preview.revoke_demo_link(session, link_id, actor=current(), now=now)
    session.commit()
    return ok(preview.demo_link_view(link, now))


@bp.post("/test-participants")
@staff_permission("preview")
def create_test_participant():
    """{condition, language} -> 201 {id, participant_code, url}: a pilot participant forced into the group,
    logged in by ``url``; counted apart and exported only with include_test=1."""
    data = json_body()
    session = db_session()
    rt = runtime()
    now = rt.clock.now()
    expires = now + timedelta(days=_study_days(rt.study) * rt.settings.time_scale)
    user, link = preview.create_test_participant(session, rt.study, condition=data.get("condition"),
                                                 language=data.get("language"), actor=current(), now=now,
                                                 expires=expires)
    session.commit()
    return ok({"id": user.id, "participant_code": user.participant_code, "url": link.url(_base_url()),
               "expires_at": utc_iso(link.expires_at)}, 201)


def _study_days(study) -> float:
    return max(t.unlock_offset_days for t in study.tasks) + study.panel.return_link_grace_days


@pages.get("/preview/<token>")
def open_preview(token: str):
    """An admin's preview link: log in as the preview account and open the task."""
    session = db_session()
    rt = runtime()
    try:
        user, _link = panel_service.redeem(session, token, rt.clock.now())
    except NotFound:
        return _gone()
    if user.role != "preview":
        return _gone()
    session.commit()
    login_user(user)
    task = request.args.get("task")
    return redirect(f"/#/task/{task}" if task in rt.study.task_ids else "/#/tasks")


@pages.get("/demo/<token>")
@limiter.limit(DEMO_OPENINGS)  # each opening makes an account: a shared link must not fill the database
def open_demo(token: str):
    """A demo link: a fresh preview account of the link's condition, logged in, at the first task."""
    session = db_session()
    rt = runtime()
    try:
        user = preview.open_demo_link(session, rt.study, token, now=rt.clock.now())
    except NotFound:
        return _gone()
    session.commit()
    login_user(user)
    return redirect(f"/#/task/{rt.study.task_ids[0]}")


def _gone():
    return Response("<!doctype html><html lang=\"zh\"><head><meta charset=\"utf-8\"><title>链接已失效 · Link no "
                    "longer valid</title><link rel=\"stylesheet\" href=\"/static/css/base.css\"></head><body><main "
                    "class=\"page\"><section class=\"card narrow\"><h1>链接已失效 · Link no longer valid</h1><p>"
                    "这个预览或演示链接无效、已过期或已被撤销。</p><p lang=\"en\">This preview or demo link is not "
                    "valid, has expired or was revoked.</p></section></main></body></html>", status=404,
                    mimetype="text/html", headers={"Cache-Control": "no-store"})
