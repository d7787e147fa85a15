"""Admin plots over HTTP: in the admin's language, cached until the data change (issue 20, items 9 and 11)."""
from __future__ import annotations

import pytest


def _cache(app):
    return app.extensions["memory_lab_plot_cache"]


@pytest.mark.parametrize("name", ["funnel", "questionnaire_means"])
def test_a_repeated_plot_is_served_from_the_cache_until_the_data_change(app, admin_client, make_participant, name):
    make_participant()
    first = admin_client.get(f"/api/admin/plots/{name}.png?lang=zh")
    assert first.status_code == 200 and first.headers["X-Plot-Cache"] == "miss"
    renders = _cache(app).renders
    second = admin_client.get(f"/api/admin/plots/{name}.png?lang=zh")
    assert second.headers["X-Plot-Cache"] == "hit" and second.data == first.data
    assert _cache(app).renders == renders  # nothing was drawn again
    assert second.headers["ETag"] == first.headers["ETag"]
    unchanged = admin_client.get(f"/api/admin/plots/{name}.png?lang=zh",
                                 headers={"If-None-Match": first.headers["ETag"]})
    assert unchanged.status_code == 304
    english = admin_client.get(f"/api/admin/plots/{name}.png?lang=en")
    assert english.headers["X-Plot-Cache"] == "miss"  # another language is another picture

    make_participant()  # new data: the cached chart is stale
    third = admin_client.get(f"/api/admin/plots/{name}.png?lang=zh")
    assert third.headers["X-Plot-Cache"] == "miss" and third.headers["ETag"] != first.headers["ETag"]
    assert _cache(app).renders == renders + 2


def test_plot_language_defaults_to_the_admins_and_is_validated(app, admin_client):
    assert admin_client.get("/api/admin/plots/funnel.png?lang=fr").get_json()["error"] == "invalid_language"
    assert admin_client.post("/api/auth/language", json={"language": "en"}).status_code == 200
    default = admin_client.get("/api/admin/plots/funnel.png")
    assert default.headers["ETag"] == admin_client.get("/api/admin/plots/funnel.png?lang=en").headers["ETag"]
