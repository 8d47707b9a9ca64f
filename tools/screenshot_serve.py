#!/usr/bin/env python
"""Screenshot of the mmst-serve page for the docs (docs/images/serve.png); not a test.

Starts ``python -m mmst.serve`` with the given model, opens the page in headless Chromium (Selenium,
Debian's chromium-driver) with a wav as the fake microphone, presses Start, waits until every language
column has ``--min-words`` words (or ``--seconds`` pass), and saves the window. Japanese captions need a
CJK font on the machine (Debian: ``fonts-noto-cjk``, which ``make test`` installs), otherwise they show as boxes.

Usage::

    python tools/screenshot_serve.py --model exp/synthetic/model/checkpoint_best.pt \\
        --data exp/synthetic/data --wav TALK.wav
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mmst.cli_help import ArgumentParser, add_model_arguments  # noqa: E402
from mmst.serve.process import server_process  # noqa: E402


def build_parser() -> ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="tools/screenshot_serve.py", description=__doc__)
    add_model_arguments(p, data_required=True, langs_default=None)
    p.add_argument("--wav", required=True, help="speech played as the microphone (wav)")
    p.add_argument("--out", default=str(REPO / "docs" / "images" / "serve.png"), help="PNG to write")
    p.add_argument("--min-words", type=int, default=12, help="words per language column before the screenshot")
    p.add_argument("--seconds", type=float, default=40.0, help="longest wait for the words")
    p.add_argument("--size", default="1280,720", help="window size W,H in pixels")
    return p


def main(argv: list[str] | None = None) -> int:
    """Make the screenshot; exit 1 with a message when chromium or the server is missing."""
    args = build_parser().parse_args(argv)
    chromium = shutil.which("chromium")
    if not chromium or not Path("/usr/bin/chromedriver").is_file():
        print("screenshot_serve: needs the Debian packages chromium and chromium-driver", file=sys.stderr)
        return 1
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    log = Path(tempfile.mkdtemp()) / "server.log"
    with contextlib.ExitStack() as stack:
        try:
            _, port = stack.enter_context(server_process(["--model", args.model, "--data", args.data,
                                                          "--quantize", args.quantize],
                                                         log, stop_timeout_s=60.0))
        except RuntimeError:
            print(f"screenshot_serve: the server did not start (log: {log})", file=sys.stderr)
            return 1
        opts = webdriver.ChromeOptions()
        opts.binary_location = chromium
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                     "--disable-component-update", "--use-fake-ui-for-media-stream",
                     "--use-fake-device-for-media-stream", f"--use-file-for-fake-audio-capture={args.wav}",
                     f"--window-size={args.size}", "--hide-scrollbars"):
            opts.add_argument(flag)
        browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        try:
            browser.get(f"http://127.0.0.1:{port}/")
            t = time.monotonic()
            while browser.execute_script("return document.getElementById('status').textContent") != "ready":
                if time.monotonic() - t > 30:
                    raise RuntimeError("the page did not load its configuration")
                time.sleep(0.2)
            browser.find_element("id", "mic").click()
            t = time.monotonic()
            while time.monotonic() - t < args.seconds:
                n = browser.execute_script("const w = window.mmstState.words; "
                                           "return Math.min(...window.mmstState.langs.map(l => (w[l] || []).length))")
                if n >= args.min_words:
                    break
                time.sleep(0.5)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(args.out)
        finally:
            browser.quit()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
