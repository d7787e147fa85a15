"""Fuzzing (issue 11): schemathesis generates requests for every operation in /api/openapi.json, valid
and invalid, and sends each one as a logged-in participant and as an admin. No answer may be a 5xx.

Bounded: FUZZ_EXAMPLES examples per operation and mode (default 10), no example database, so a run takes about
a minute; ``FUZZ_EXAMPLES=200 pytest tests/routes/test_fuzz_openapi.py`` digs deeper by hand.
"""
from __future__ import annotations

import json
import os
import shutil
from datetime import datetime
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from tests.conftest import ADMIN_PASSWORD, ApiClient

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "10"))
# Logging in, registering or logging out would change who the shared clients are; those operations
# are sent from a fresh anonymous client instead.
ACCOUNT_OPERATIONS = {"/api/auth/register", "/api/auth/login", "/api/auth/logout"}


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory, migrated_sqlite_template):
    """One app for the whole module (building one per operation would take most of the minute)."""
    from app import create_app
    from config import Settings
    from services.participants.account_service import create_admin
    from services.platform.clock import ManualClock

    path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    shutil.copyfile(migrated_sqlite_template, path)
    app = create_app(Settings.from_env(
        database_url=f"sqlite:///{path}", secret_key="fuzz-secret", testing=True, scheduler_enabled=False,
        consolidate_inline=True, assignment_seed=1234, llm_providers=["offline"], embedding_provider="offline",
        rate_limits_enabled=False), clock=ManualClock(datetime(2026, 3, 2, 9, 0, 0)))
    participant = ApiClient(app.test_client())
    assert participant.register("fuzzed01").status_code == 201
    participant.post("/api/tasks/T1/start")
    participant.post("/api/tasks/T1/messages", json={"content": "我喜欢在周末爬山。"})
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        create_admin(session, "fuzzadmin", ADMIN_PASSWORD, runtime.clock)
    admin = ApiClient(app.test_client())
    assert admin.login("fuzzadmin", ADMIN_PASSWORD).status_code == 200
    yield app, {"participant": participant, "admin": admin}
    runtime.background.shutdown()
    runtime.db.dispose()


@pytest.fixture(scope="module")
def fuzz_schema(fuzz_target):
    """The app's OpenAPI document loaded once: the loaded schema keeps the constants schemathesis draws examples
    from, which it finds by parsing the app's modules (most of the module's time when loaded per operation)."""
    app, _ = fuzz_target
    return schemathesis.openapi.from_wsgi("/api/openapi.json", app)


OPENAPI = json.loads((Path(__file__).resolve().parents[2] / "static" / "openapi.json").read_text(encoding="utf-8"))
METHODS = ("get", "post", "put", "patch", "delete")


def _cases() -> list:
    """(mode, method, path): valid requests for every operation, invalid ones where there is input to spoil."""
    cases = []
    for path, item in OPENAPI["paths"].items():
        for method, operation in item.items():
            if method not in METHODS:
                continue
            label = f"{method.upper()} {path}"
            cases.append(pytest.param(GenerationMode.POSITIVE, method.upper(), path, id=f"valid {label}"))
            if item.get("parameters") or operation.get("parameters") or operation.get("requestBody"):
                cases.append(pytest.param(GenerationMode.NEGATIVE, method.upper(), path, id=f"invalid {label}"))
    return cases


# The schemathesis pytest plugin does not run on this pytest; its Hypothesis strategies are used directly.
@pytest.mark.parametrize(("mode", "method", "path"), _cases())
def test_no_request_gets_a_server_error(fuzz_target, fuzz_schema, mode, method, path):
    app, clients = fuzz_target
    operation = fuzz_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    def send(case):
        for role, api in clients.items():
            client = ApiClient(app.test_client()) if path in ACCOUNT_OPERATIONS else api
            response = case.call(session=client.raw, headers={"X-CSRFToken": client.csrf()})
            assert response.status_code < 500, (role, case.method, case.formatted_path, response.text[:300])

    send()


HOSTILE_TEXT = "=cmd|'/C calc'!A0 \udc80\x00"
HOSTILE_NUMBER = "9" * 23


def _hostile_value(schema: dict):
    resolved = schema
    if "$ref" in schema:
        resolved = OPENAPI["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    if resolved.get("type") == "object":
        return {name: _hostile_value(sub) for name, sub in resolved.get("properties", {}).items()}
    if resolved.get("type") in ("integer", "number"):
        return 10**30
    if resolved.get("type") == "array":
        return [_hostile_value(resolved.get("items", {}))]
    return HOSTILE_TEXT


def _hostile_requests(method: str, path: str) -> list[dict]:
    """The probe's findings as fixed requests: huge ids, '²' and 30-digit numbers, unstorable text, deep JSON."""
    item = OPENAPI["paths"][path]
    operation = item[method.lower()]
    parameters = [*item.get("parameters", []), *operation.get("parameters", [])]
    url = path
    query = {}
    for parameter in parameters:
        integer = parameter.get("schema", {}).get("type") == "integer"
        if parameter["in"] == "path":
            url = url.replace("{" + parameter["name"] + "}", HOSTILE_NUMBER if integer else "T1")
        elif parameter["in"] == "query":
            query[parameter["name"]] = "²"
    requests = [{"path": url, "query_string": query}, {"path": url, "query_string": {k: "9" * 30 for k in query}}]
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body is not None:
        requests.append({"path": url, "json": _hostile_value(body)})
        requests.append({"path": url, "data": "[" * 100_000 + "]" * 100_000,
                         "headers": {"Content-Type": "application/json"}})
    return requests


@pytest.mark.parametrize(("method", "path"), [(m.upper(), p) for p, item in OPENAPI["paths"].items()
                                              for m in item if m in METHODS])
def test_hostile_requests_found_by_the_outside_probe_get_no_server_error(fuzz_target, method, path):
    app, clients = fuzz_target
    for request in _hostile_requests(method, path):
        for role, api in clients.items():
            client = ApiClient(app.test_client()) if path in ACCOUNT_OPERATIONS else api
            headers = {"X-CSRFToken": client.csrf(), **request.get("headers", {})}
            kwargs = {k: v for k, v in request.items() if k not in ("path", "headers")}
            response = client.raw.open(request["path"], method=method, headers=headers, **kwargs)
            assert response.status_code < 500, (role, method, request["path"], response.get_data(as_text=True)[:300])
