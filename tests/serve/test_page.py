"""The page in a real browser: headless Chromium (Debian's package) driven by Playwright, against a real
``python -m seqmap.serve`` process on a free loopback port.

Skips, saying why, where Chromium or Playwright's Python package is missing (.ci/run installs both).
Set SEQMAP_SCREENSHOT=path.png to save a screenshot of the page with an output token hovered.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import torch

CHROMIUM = next((p for p in (os.environ.get("SEQMAP_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium")
                 if p and Path(p).is_file()), None)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package is not installed "
                               "(pip install playwright; no browser download is needed)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed: apt-get install -y chromium "
                                "chromium-driver (.ci/run does this), or set SEQMAP_CHROMIUM to its path")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(run_dir, *options: str):
    """``python -m seqmap.serve RUN_DIR [OPTIONS]`` on a free loopback port; its base URL once /health answers."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "seqmap.serve", str(run_dir), "--port", str(port),
                                "--threads", "1", "--wait-ms", "2", *options], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited with {process.returncode}:\n{process.stdout.read()}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("the server did not answer /health within 60 s")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module (Playwright's sync API allows one running instance at a time)."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield browser
        browser.close()


@contextmanager
def browser_page(browser, url):
    """A page at ``url``; JavaScript errors on it fail the test that used it."""
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url + "/")
    yield page
    page.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture(scope="module")
def server(translation_run_dir):
    with serving(translation_run_dir) as url:
        yield url


@pytest.fixture(scope="module")
def page(browser, server):
    with browser_page(browser, server) as page:
        yield page


def attended_most(attention: dict, row: int, layer: int | None, head: int | None) -> int:
    """The source index the page should mark for ``row``: argmax of the selected (or averaged) map."""
    w = torch.tensor(attention["weights"], dtype=torch.float64)  # (L, H, T, S)
    w = w.mean(0) if layer is None else w[layer]
    w = w.mean(0) if head is None else w[head]
    return int(w[row].argmax())


def test_translate_then_hover_highlights_the_attended_source_token(server, page):
    expect = sync_api.expect
    expect(page.locator("#translate-panel")).to_be_visible()
    expect(page.locator("#model-info")).to_contain_text("transformer")
    sentence = "a b c d e f"
    page.fill("#source-text", sentence)
    page.click("#translate-button")
    expect(page.locator(".translation-item .translation")).to_have_count(1)

    api = httpx.post(f"{server}/translate", json={"text": sentence, "attention": True}).json()["translations"][0]
    expect(page.locator(".translation-item .translation")).to_have_text(api["translation"])
    attention = api["attention"]
    rows, cols = len(attention["output_tokens"]), len(attention["source_tokens"])
    expect(page.locator("#heatmap td.cell")).to_have_count(rows * cols)
    expect(page.locator("#source-tokens .src-token")).to_have_text(attention["source_tokens"])
    assert page.locator("#layer-select option").all_inner_texts() == ["average of layers", "layer 0", "layer 1"]

    # default view: the last layer, heads averaged (as `seqmap translate --align`)
    for row in range(rows):
        page.hover(f"#output-tokens .out-token[data-index='{row}']")
        best = page.locator("#source-tokens .src-token.attended-max")
        expect(best).to_have_count(1)
        assert int(best.get_attribute("data-index")) == attended_most(attention, row, 1, None)
        assert page.locator("#heatmap tr.active-row").count() == 1
    page.hover("h1")
    expect(page.locator("#attention-panel .attended")).to_have_count(0)  # leaving clears the marks

    page.select_option("#layer-select", "0")
    page.select_option("#head-select", "1")
    page.hover("#heatmap td.cell[data-row='0'][data-col='0']")  # a heatmap cell marks its row too
    best = page.locator("#source-tokens .src-token.attended-max")
    assert int(best.get_attribute("data-index")) == attended_most(attention, 0, 0, 1)

    page.select_option("#layer-select", "avg")
    page.select_option("#head-select", "avg")
    page.hover("#output-tokens .out-token[data-index='0']")
    assert int(best.get_attribute("data-index")) == attended_most(attention, 0, None, None)
    screenshot = os.environ.get("SEQMAP_SCREENSHOT")
    if screenshot:
        page.select_option("#layer-select", "1")
        page.hover("#output-tokens .out-token[data-index='1']")
        page.screenshot(path=screenshot, full_page=True)


def test_the_page_says_when_the_export_searches(browser, translation_run, translation_run_dir, tmp_path):
    pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed: pip install -e \".[ct2]\"")
    from seqmap.hub.ct2 import export_ct2

    export_ct2(translation_run, tmp_path / "ct2")
    with serving(translation_run_dir, "--ct2", str(tmp_path / "ct2")) as url, browser_page(browser, url) as page:
        expect = sync_api.expect
        expect(page.locator("#model-info")).to_contain_text(f"searched by CTranslate2 ({tmp_path / 'ct2'}, float32)")
        page.fill("#source-text", "a b c d")
        page.click("#translate-button")
        api = httpx.post(f"{url}/translate", json={"text": "a b c d"}).json()["translations"][0]
        expect(page.locator(".translation-item .translation")).to_have_text(api["translation"])
        expect(page.locator("#heatmap td.cell")).not_to_have_count(0)  # attention, from the run itself


def test_bad_input_shows_the_servers_message(page):
    page.fill("#source-text", "a b")
    page.fill("#beam-size", "2")
    page.fill("#n-best", "3")
    page.click("#translate-button")
    sync_api.expect(page.locator("#error")).to_contain_text("n_best 3 needs beam_size >= 3")
    page.fill("#n-best", "2")
    page.click("#translate-button")
    sync_api.expect(page.locator("#error")).to_be_hidden()
    sync_api.expect(page.locator(".translation-item .nbest li")).to_have_count(2)


def test_the_page_classifies_a_text_and_weights_its_tokens(browser, text_classifier_run_dir):
    with serving(text_classifier_run_dir) as url, browser_page(browser, url) as page:
        page.wait_for_selector("#classify-panel:not([hidden])")
        assert page.is_hidden("#translate-panel") and page.is_hidden("#generate-panel")
        page.fill("#classify-text", "a b red c")
        page.click("#classify-button")
        page.wait_for_selector("#prediction-panel:not([hidden])")
        expected = httpx.post(url + "/classify", json={"text": "a b red c", "top": 3, "attention": True}).json()
        best = expected["classifications"][0]
        assert page.inner_text("#classes li:first-child").startswith(f"{best['label']} {best['probability']:.3f}")
        tokens = page.query_selector_all("#token-weights .weighted-token")
        assert [t.inner_text() for t in tokens] == best["attention"]["tokens"]
        shown = [float(t.get_attribute("data-weight")) for t in tokens]
        assert shown == pytest.approx(best["attention"]["rollout"], abs=1e-4)
        page.select_option("#map-select", "last_layer")
        shown = [float(t.get_attribute("data-weight")) for t in page.query_selector_all(".weighted-token")]
        assert shown == pytest.approx(best["attention"]["last_layer"], abs=1e-4)


def test_the_page_classifies_an_uploaded_image(browser, image_classifier_run_dir, tmp_path):
    import numpy as np
    from PIL import Image

    image = np.full((8, 8), 10, np.uint8)
    image[:, 6:8] = 250
    Image.fromarray(image).save(tmp_path / "bar.png")
    with serving(image_classifier_run_dir) as url, browser_page(browser, url) as page:
        page.wait_for_selector("#classify-image:not([hidden])")
        assert page.is_hidden("#classify-text")
        page.set_input_files("#classify-image", str(tmp_path / "bar.png"))
        page.click("#classify-button")
        page.wait_for_selector("#image-attention[data-drawn='1']")
        assert page.inner_text("#classes li:first-child").startswith("right ")


def test_the_page_transcribes_an_uploaded_recording_and_draws_where_each_token_listened(
        browser, speech_run_dir, speech_task, tmp_path):
    import base64

    import numpy as np

    rng = np.random.default_rng(7)
    silence = np.zeros(int(0.05 * speech_task.RATE), np.int16)
    words = [np.concatenate([speech_task.tone(speech_task.WORDS[w], rng, 0.13), silence]) for w in ("mid", "low")]
    path = speech_task.wav_file(tmp_path / "said.wav", np.concatenate([silence, *words]))
    with serving(speech_run_dir) as url, browser_page(browser, url) as page:
        page.wait_for_selector("#transcribe-panel:not([hidden])")
        assert page.is_hidden("#translate-panel") and page.is_hidden("#classify-panel")
        sync_api.expect(page.locator("#model-info")).to_contain_text("speech recognizer")
        page.set_input_files("#transcribe-audio", path)
        page.click("#transcribe-button")
        page.wait_for_selector("#speech-attention[data-drawn='1']")
        audio = base64.b64encode(Path(path).read_bytes()).decode()
        beam = int(page.input_value("#transcribe-beam"))
        expected = httpx.post(url + "/transcribe", json={"audio": [audio], "beam_size": beam, "attention": True})
        best = expected.json()["transcriptions"][0]
        assert page.inner_text("#transcript") == best["transcript"] == "mid low"
        attention = best["attention"]
        tokens = page.locator("#speech-tokens .out-token")
        assert tokens.all_inner_texts() == attention["output_tokens"]
        canvas = page.locator("#speech-attention")
        assert canvas.get_attribute("data-rows") == str(len(attention["output_tokens"]))
        assert canvas.get_attribute("data-frames") == str(attention["frames"])
        for row in range(len(attention["output_tokens"])):  # the last layer, heads averaged, by default
            page.hover(f"#speech-tokens .out-token[data-index='{row}']")
            assert int(canvas.get_attribute("data-best")) == attended_most(attention, row, 0, None)
            assert page.inner_text("#speech-hover").startswith(attention["output_tokens"][row])
        page.select_option("#speech-head-select", "1")
        page.hover("#speech-tokens .out-token[data-index='0']")
        assert int(canvas.get_attribute("data-best")) == attended_most(attention, 0, 0, 1)
        painted = page.evaluate("""() => {
            const c = document.getElementById('speech-attention');
            const d = c.getContext('2d').getImageData(100, 10, c.width - 120, 100).data;
            let dark = 0;
            for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] < 600) dark++;
            return dark;
        }""")
        assert painted > 1000  # the spectrogram is drawn, not a blank canvas
        screenshot = os.environ.get("SEQMAP_SPEECH_SCREENSHOT")
        if screenshot:
            page.screenshot(path=screenshot, full_page=True)
