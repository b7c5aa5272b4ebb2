"""``GET /docs`` works without the internet: Swagger UI from an installed swagger-ui-bundle's assets, or, without
it, our page listing the routes of /openapi.json, which says so. Nothing it loads comes from another host."""

import re
import sys
import types

import pytest
from fastapi.testclient import TestClient

from seqmap.serve.app import STATIC_DIR, create_app


def _client(run) -> TestClient:
    return TestClient(create_app(run, wait_ms=2))


def _external(text: str) -> list[str]:
    return re.findall(r"https?://[^\s\"'<>)]+", text)


def test_without_swagger_ui_assets_docs_is_a_page_of_ours(translation_run, monkeypatch):
    monkeypatch.setitem(sys.modules, "swagger_ui_bundle", None)  # not installed
    with _client(translation_run) as client:
        docs = client.get("/docs")
        assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
        assert "works offline" in docs.text and "pip install swagger-ui-bundle" in docs.text  # it says what it is
        assert '<script src="/static/docs.js">' in docs.text and client.get("/static/docs.js").status_code == 200
        assert client.get("/redoc").status_code == 404  # FastAPI's ReDoc page needs a CDN too: not offered
    for name in ("docs.html", "docs.js"):  # nothing fetched from another host
        assert _external((STATIC_DIR / name).read_text()) == []


def test_with_swagger_ui_assets_installed_docs_serves_them_from_here(translation_run, monkeypatch, tmp_path):
    (tmp_path / "swagger-ui-bundle.js").write_text("window.SwaggerUIBundle = function () {};")
    (tmp_path / "swagger-ui.css").write_text("body {}")
    bundle = types.ModuleType("swagger_ui_bundle")
    bundle.swagger_ui_path = tmp_path
    monkeypatch.setitem(sys.modules, "swagger_ui_bundle", bundle)
    with _client(translation_run) as client:
        docs = client.get("/docs")
        assert docs.status_code == 200 and "SwaggerUIBundle" in docs.text
        assert "/docs/assets/swagger-ui-bundle.js" in docs.text and "/openapi.json" in docs.text
        assert not [url for url in _external(docs.text) if "swagger-ui" in url]  # the assets are not a CDN's
        assert client.get("/docs/assets/swagger-ui-bundle.js").text == "window.SwaggerUIBundle = function () {};"


def test_the_offline_page_lists_the_routes_in_a_browser_with_no_internet(translation_run_dir):
    page_tests = pytest.importorskip("tests.serve.test_page", reason="the browser tests' module is not importable")
    if page_tests.CHROMIUM is None:
        pytest.skip("Chromium is not installed: apt-get install -y chromium")
    with page_tests.serving(translation_run_dir) as url, page_tests.sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=page_tests.CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        elsewhere, errors = [], []
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(url)
                   else (elsewhere.append(route.request.url), route.abort()))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url + "/docs")
        expect = page_tests.sync_api.expect
        expect(page.locator("#routes h2").first).to_be_visible()
        titles = page.locator("#routes h2").all_inner_texts()
        assert {"POST /translate", "POST /generate", "GET /health", "GET /info"} <= set(titles)
        translate = page.locator("section", has=page.locator("h2", has_text="POST /translate"))
        expect(translate.locator("table.fields")).to_contain_text("an empty (or blank) sentence is not translated")
        browser.close()
    assert elsewhere == [] and errors == []
