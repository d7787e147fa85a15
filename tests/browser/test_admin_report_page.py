"""The admin console's "Generate report": one click in headless Chromium downloads the report zip (the POST
carries the CSRF token; the page shows what was downloaded)."""
from __future__ import annotations

import json
import zipfile

import pytest
from playwright.sync_api import expect

from tests.browser.test_admin_page import log_in

pytestmark = pytest.mark.browser


def test_generate_report_downloads_report_html_and_json(new_page, live_server, admin_account):
    page = new_page()
    page.goto("/#/login")
    log_in(page, *admin_account)
    expect(page.locator("#participants")).to_be_visible()
    page.click("nav a[data-route=export]")
    expect(page.locator("#report-generate")).to_have_text("生成报告")
    with page.expect_download(timeout=120_000) as download_info:
        page.click("#report-generate")
    download = download_info.value
    assert download.failure() is None and download.suggested_filename.endswith("-zh.zip")
    with zipfile.ZipFile(download.path()) as archive:
        assert set(archive.namelist()) == {"report.html", "report.json"}
        assert "研究报告" in archive.read("report.html").decode("utf-8")
        report = json.loads(archive.read("report.json"))
    assert report["language"] == "zh" and {"consort", "attrition", "outcomes", "latency", "exposure"} <= set(report)
    expect(page.locator("#report-status")).to_contain_text(download.suggested_filename)
    expect(page.locator("#report-generate")).to_be_enabled()
