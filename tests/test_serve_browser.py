"""The mmst-serve page in headless Chromium (Selenium + Debian's chromium-driver): a wav played as the
microphone (Chromium's fake capture device) goes through getUserMedia, the AudioWorklet and the
in-page resampler to the server; captions must appear in every language column and equal, word for
word, the long-form CLI (``eval/longform_eval.py``) run on the PCM the server saved for that stream.
The server wants a token, which the page takes from its address's fragment (``#token=``) and sends in
the WebSocket subprotocol and the ``Authorization`` header, never in a URL.

Skips when chromium / chromedriver / selenium are missing (tools/ensure_system_packages.sh installs them).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import soundfile as sf
from serve_fixtures import longform_cli_words, serve_args, speech

from mmst.serve.process import server_process

CHROMEDRIVER = "/usr/bin/chromedriver"


def _chrome(wav: Path):
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (shutil.which("chromium") and Path(CHROMEDRIVER).is_file()):
        pytest.skip("chromium / chromium-driver not installed (tools/ensure_system_packages.sh installs them)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                 "--autoplay-policy=no-user-gesture-required", f"--use-file-for-fake-audio-capture={wav}"):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def _wait(fn, timeout_s: float, what: str):
    t = time.monotonic()
    while time.monotonic() - t < timeout_s:
        v = fn()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@pytest.mark.slow
def test_microphone_captions_equal_the_long_form_driver(tiny_system, tmp_path):
    """Slow: it starts headless Chromium and a live server, and streams a recording through the page."""
    wav = tmp_path / "mic.wav"
    sf.write(wav, speech(), 16000, subtype="PCM_16")
    saved = tmp_path / "received"
    token = "sécret"
    with server_process(serve_args(tiny_system, "--save-audio", str(saved), "--token", token),
                        tmp_path / "server.log") as (_, port):
        browser = _chrome(wav)
        try:
            base = f"http://127.0.0.1:{port}/"
            browser.get(base + "#token=s%C3%A9cret")
            _wait(lambda: browser.execute_script("return document.getElementById('status').textContent") == "ready",
                  30, "the page to load its configuration")
            langs = browser.execute_script("return window.mmstState.langs")
            assert langs == ["de", "es"]
            browser.find_element("id", "mic").click()
            _wait(lambda: browser.execute_script(
                "const w = window.mmstState.words; return window.mmstState.langs.every(l => (w[l] || []).length > 0)"),
                90, "captions in every language column")
            browser.find_element("id", "stop").click()
            _wait(lambda: browser.execute_script("return window.mmstState.closeCode"), 60, "the end of the stream")
            state = browser.execute_script("return window.mmstState")
            dom = {lang: [e.text for e in browser.find_elements(
                "css selector", f'.col[data-lang="{lang}"] .captions .w .t')] for lang in langs}
            resources = browser.execute_script(
                "return performance.getEntriesByType('resource').map(e => e.name)")
        finally:
            browser.quit()
    assert state["closeCode"] == 1000 and state["summary"] is not None
    assert all(r.startswith(base) or r.startswith(f"ws://127.0.0.1:{port}/") for r in resources), resources
    assert not [r for r in resources if "token" in r], resources
    got = [(w["lang"], w["text"], w["segment"], w["start_ms"]) for lang in langs for w in state["words"][lang]]
    for lang in langs:
        assert dom[lang] == [w["text"] for w in state["words"][lang]] and dom[lang]
    # the server saved exactly the PCM it translated; the long-form CLI reads it offline
    files = sorted(saved.glob("*.wav"))
    assert len(files) == 1
    pcm, sr = sf.read(files[0], dtype="float32")
    assert sr == 16000 and len(pcm) > 16000
    assert got == longform_cli_words(tiny_system, files[0], langs, tmp_path / "longform")
