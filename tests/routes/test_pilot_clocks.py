"""Issue 28 item 16: in pilot mode the admin view shows real time with the study time labelled, task_sessions.csv
exports both (clearly named, in the codebook), and manifest.json / codebook.md record PILOT_TIMER_SCALE and
PILOT_DAY_SECONDS."""
from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest

from services.reporting.export_service import ExportOptions, export_runtime


@pytest.fixture
def settings(settings):
    settings.day_seconds = 600  # a pilot day of ten minutes
    settings.pilot_timer_scale = 0.1  # a task timer runs ten study seconds per real second
    return settings


def _rows(archive: zipfile.ZipFile, name: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(archive.read(name).decode("utf-8"))))


@pytest.mark.postgres
def test_a_31_second_pilot_chat_reads_31_real_seconds_with_310_study_seconds_labelled(
        app, make_participant, admin_client, clock):
    api = make_participant("pilot_clock")
    user_id = api.get("/api/auth/me").get_json()["user"]["id"]
    assert api.post("/api/tasks/T1/start").status_code == 201
    for _ in range(3):
        clock.advance(10)
        assert api.post("/api/tasks/T1/messages", json={"content": "我在试用这个系统。"}).status_code == 201
    clock.advance(1)
    assert api.post("/api/tasks/T1/heartbeat").status_code == 200  # 31 real seconds of chat

    def timer() -> dict:
        rows = admin_client.get("/api/admin/participants").get_json()["participants"]
        detail = next(r for r in rows if r["id"] == user_id)["task_details"][0]
        return detail["timer"]

    shown = timer()
    assert shown["timer_scale"] == pytest.approx(0.1)
    assert shown["credited_active_real_seconds"] == pytest.approx(31)
    assert shown["credited_active_seconds"] == pytest.approx(310)
    clock.advance(40)  # a pause still under the 120 s idle-gap threshold: what the next action would credit
    assert timer()["active_real_seconds"] == pytest.approx(71)
    clock.advance(90)  # now an idle gap: nothing more is credited, and the credited time does not drop back
    later = timer()
    assert later["credited_active_real_seconds"] == pytest.approx(31)
    assert later["active_real_seconds"] == pytest.approx(31)

    assert api.post("/api/tasks/T1/finish").status_code == 200
    record = admin_client.get(f"/api/admin/participants/{user_id}").get_json()
    session = record["task_sessions"][0]
    assert (session["active_real_seconds"], session["active_seconds"]) == (31.0, 310.0)
    assert session["chat_wall_seconds"] == pytest.approx(161)
    assert record["timer_scale"] == pytest.approx(0.1)

    archive = zipfile.ZipFile(io.BytesIO(export_runtime(app.extensions["memory_lab"], options=ExportOptions()).data))
    row = _rows(archive, "task_sessions.csv")[0]
    assert (row["active_real_seconds"], row["active_study_seconds"], row["active_seconds"]) == ("31", "310", "310")
    assert row["chat_wall_seconds"] == "161"
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["deployment"]["pilot_timer_scale"] == pytest.approx(0.1)
    assert manifest["deployment"]["pilot_day_seconds"] == 600
    assert manifest["deployment"]["timer_scale"] == pytest.approx(0.1)
    codebook = {(r["file"], r["column"]): r["description"] for r in _rows(archive, "codebook.csv")}
    assert "real (wall-clock) seconds" in codebook[("task_sessions.csv", "active_real_seconds")]
    assert "study seconds" in codebook[("task_sessions.csv", "active_study_seconds")]
    notes = archive.read("codebook.md").decode("utf-8")
    assert "PILOT_TIMER_SCALE=0.1" in notes and "PILOT_DAY_SECONDS=600" in notes
