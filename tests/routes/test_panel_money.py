"""Issue 28 item 1: a panel's completion codes and places go only to panel accounts. Password registration
is closed by default when the panel hands out codes or caps places; opened (``registration.password``), its
accounts count against the cap and never get a panel code or a line in the panel's payment upload."""
from __future__ import annotations

import csv
import io

import pytest

from services.study.definition import StudyDefinitionError, load_study
from tests.conftest import ApiClient, walk_task

PID = "5f8a1c2e9b3d4a0012345678"
THREE = ["你好，我叫小林。", "我喜欢在周末爬山。", "下次再聊吧。"]
PANEL = {"id_parameter": "PROLIFIC_PID", "max_participants": 1, "full_code": "CFULL",
         "full_redirect_url": "https://app.prolific.com/submissions/complete?cc={completion_code}",
         "tasks": {t: {"completion_code": f"C{t[1]}DONE"} for t in ("T1", "T2", "T3", "T4")}}
PAY = {"currency": "GBP", "per_task": {"T1": 1.5, "T2": 2.0, "T3": 2.0, "T4": 2.5}, "completion_bonus": 3.0}


@pytest.fixture
def settings(settings, request):
    override = {"panel": PANEL, "payments": PAY}
    if getattr(request, "param", None) is not None:
        override["registration"] = {"password": request.param}
    settings.study = settings.study.with_overrides(override)
    return settings


def _enter(app, external_id: str = PID):
    api = ApiClient(app.test_client())
    return api, api.post("/api/auth/panel", json={"external_id": external_id, "consent": True})


def test_the_definition_closes_password_registration_by_default_with_a_panel_and_validates_the_key():
    assert load_study().registration.password is True  # no panel codes, no cap: open
    assert load_study(overrides={"panel": PANEL, "payments": PAY}).registration.password is False
    opened = load_study(overrides={"panel": PANEL, "payments": PAY, "registration": {"password": True}})
    assert opened.registration.password is True
    with pytest.raises(StudyDefinitionError, match="registration.password"):
        load_study(overrides={"registration": {"password": "yes"}})
    with pytest.raises(StudyDefinitionError, match="unknown key registration.open"):
        load_study(overrides={"registration": {"open": True}})


@pytest.mark.postgres
def test_a_full_panel_study_refuses_password_registration(app):
    """The probe: study full (409) for the panel, yet /register answered 201 and T1 gave the real code."""
    assert _enter(app)[1].status_code == 201
    assert _enter(app, "someoneelse000000000001")[1].status_code == 409
    refused = ApiClient(app.test_client()).register("bypasser")
    assert refused.status_code == 403 and refused.get_json()["error"] == "password_registration_closed"


@pytest.mark.postgres
@pytest.mark.parametrize("settings", [True], indirect=True)
def test_open_password_registration_counts_against_the_cap_and_earns_no_panel_code(app, clock, admin_client):
    study = app.extensions["memory_lab"].study
    api = ApiClient(app.test_client())
    assert api.register("labvolunteer").status_code == 201  # takes the only place
    full = ApiClient(app.test_client()).register("secondvolunteer")
    assert full.status_code == 409 and full.get_json()["error"] == "study_full"
    assert full.get_json()["details"]["completion_code"] == "CFULL"
    panel_full = _enter(app)[1]
    assert panel_full.status_code == 409 and panel_full.get_json()["error"] == "study_full"

    done = walk_task(api, clock, "T1", THREE, study=study)
    assert done["completion"] is None  # no panel code for a password account
    assert "C1DONE" not in api.get("/api/tasks/T1").get_data(as_text=True)
    sheet = list(csv.DictReader(io.StringIO(admin_client.get("/api/admin/payments.csv").get_data(as_text=True))))
    assert [row["external_id"] for row in sheet] == [""]
    assert admin_client.get("/api/admin/payments.csv?upload=1").get_data(as_text=True) == ""


@pytest.mark.postgres
def test_a_panel_account_still_gets_its_code(app, clock):
    study = app.extensions["memory_lab"].study
    api, entered = _enter(app)
    assert entered.status_code == 201
    assert walk_task(api, clock, "T1", THREE, study=study)["completion"]["completion_code"] == "C1DONE"
