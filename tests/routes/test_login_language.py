"""Issue 28 item 14: the login request may carry the language chosen on the login page; the account keeps it as
the newest explicit choice. Without one the account's language stays; an unknown one is refused."""
from __future__ import annotations

import pytest

from tests.conftest import ApiClient


@pytest.mark.postgres
def test_a_language_chosen_on_the_login_page_is_kept_by_the_account(app):
    first = ApiClient(app.test_client())
    assert first.register("lang_login", language="zh").status_code == 201
    second = ApiClient(app.test_client())
    response = second.post("/api/auth/login", json={"username": "lang_login", "password": "correct-horse-1",
                                                    "language": "en"})
    assert response.status_code == 200 and response.get_json()["user"]["language"] == "en"
    third = ApiClient(app.test_client())
    assert third.login("lang_login", "correct-horse-1").get_json()["user"]["language"] == "en"
    refused = ApiClient(app.test_client()).post("/api/auth/login", json={
        "username": "lang_login", "password": "correct-horse-1", "language": "fr"})
    assert (refused.status_code, refused.get_json()["error"]) == (400, "invalid_language")
