"""Admin research tools (admin role only): provider failures, usage and cost inputs, the data export, plots, the
study report."""
from __future__ import annotations

from flask import Blueprint, Response, current_app, request

from routes.access import current, db_session, json_body, ok, runtime, staff_permission
from services.operations import admin_service
from services.participants import payments, staff
from services.participants.input_checks import bounded_int
from services.platform.clock import utc_iso
from services.platform.errors import BadInput
from services.reporting import plots
from services.reporting.export_service import ExportOptions, export_runtime

bp = Blueprint("admin_tools", __name__, url_prefix="/api/admin")


def _flag(name: str) -> bool:
    raw = request.args.get(name, "0").strip().lower()
    if raw in ("1", "true", "yes"):
        return True
    if raw in ("0", "false", "no", ""):
        return False
    raise BadInput(f"{name} must be 1 or 0", code="invalid_flag", details={name: raw})


@bp.get("/failures")
@staff_permission("monitor")
def failures():
    limit = bounded_int(request.args.get("limit"), name="limit", low=1, high=10000, default=500)
    return ok(admin_service.failure_log(db_session(), limit=limit))


@bp.get("/usage")
@staff_permission("monitor")
def usage():
    payload = admin_service.usage(db_session())
    payload["generated_at"] = utc_iso(runtime().clock.now())
    return ok(payload)


@bp.get("/export")
@staff_permission("export_deidentified")
def export():
    """The data export as a zip: ?bom=1 for Excel, ?exclude_pii=1 without usernames and free text,
    ?escape_formulas=0 to keep cells starting with = + - @ unescaped (they are escaped by default)."""
    rt = runtime()
    if not _flag("exclude_pii"):  # an assistant may take the export without usernames and free text only
        staff.require(current(), "export")
    options = ExportOptions(bom=_flag("bom"), exclude_pii=_flag("exclude_pii"),
                            escape_formulas=request.args.get("escape_formulas") is None or _flag("escape_formulas"))
    result = export_runtime(rt, options=options, actor_id=current().id, channel="api")
    stamp = result.generated_at.strftime("%Y%m%d-%H%M%S")
    suffix = "-nopii" if options.exclude_pii else ""
    return Response(result.data, mimetype="application/zip", headers={
        "Content-Disposition": f'attachment; filename="memory-lab-export-{stamp}{suffix}.zip"',
        "Cache-Control": "no-store",
    })


@bp.get("/payments.csv")
@staff_permission("payments")
def payments_export():
    """What each participant is owed (?upload=1: the id,amount rows a panel takes)."""
    rt = runtime()
    upload = _flag("upload")
    rows = payments.payment_rows(db_session(), rt.study)
    text = payments.payments_csv(rows, upload=upload)
    payments.record_download(db_session(), actor_id=current().id, now=rt.clock.now(), upload=upload, rows=len(rows))
    db_session().commit()
    name = "payments-upload.csv" if upload else "payments.csv"
    return Response(text.encode("utf-8"), mimetype="text/csv", headers={
        "Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"})


@bp.get("/plots/<name>.png")
@staff_permission("monitor")
def plot(name: str):
    """A chart in ?lang=zh|en (default: the admin's language), cached until its data change: the ETag names
    the data version, so an unchanged chart answers 304; X-Plot-Cache says hit or miss."""
    rt = runtime()
    if name == "forgetting_curves":  # one participant's memories, with their words in the legend
        staff.require(current(), "read_conversations")
    cache = current_app.extensions.setdefault("memory_lab_plot_cache", plots.PlotCache())
    language = plots.plot_language(request.args.get("lang"), current().language)
    png, etag, hit = cache.get(name, db_session(), rt.study, args=request.args.to_dict(), now=rt.clock.now(),
                               day_seconds=rt.settings.day_seconds, language=language)
    response = Response(png, mimetype="image/png", headers={"Cache-Control": "private, no-cache",
                                                            "X-Plot-Cache": "hit" if hit else "miss"})
    response.set_etag(etag)
    return response.make_conditional(request)


@bp.post("/report")
@staff_permission("report")
def report():
    """The study report built from an export made now: a zip with report.html (self-contained, in the body's
    ``language``, default the admin's) and report.json. The audit log records it."""
    from services.reporting.report import report_runtime, report_zip  # statsmodels loads on first use only

    language = plots.plot_language(json_body().get("language"), current().language)
    rt = runtime()
    data = report_zip(report_runtime(rt, actor_id=current().id, channel="api"), language=language)
    stamp = rt.clock.now().strftime("%Y%m%d-%H%M%S")
    return Response(data, mimetype="application/zip", headers={
        "Content-Disposition": f'attachment; filename="memory-lab-report-{stamp}-{language}.zip"',
        "Cache-Control": "no-store"})
