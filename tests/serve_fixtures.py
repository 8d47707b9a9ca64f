"""Helpers of the mmst-serve tests (not a test module): espeak-ng speech, the tiny system's server options,
an in-process server. The subprocess server is :func:`mmst.serve.process.server_process`.

The tiny checkpoint of ``tiny_system`` is untrained: it writes arbitrary pieces, capped by
``--max-len-b`` per segment, which is enough to check that words flow, are routed per language and
equal an offline run of the long-form driver.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SENTENCES = ["the black woman buys the famous letter", "the doctor eats the apple",
             "the tired student reads a big book"]


def speech(pause_s: float = 0.6) -> np.ndarray:
    """English espeak-ng speech of :data:`SENTENCES` separated by silences (float32, 16 kHz; skips
    the test without espeak-ng)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed (tools/ensure_system_packages.sh installs it)")
    from mmst.corpora.synthetic.tts import Speaker, synthesize

    spk = Speaker("en-us", "m1", 170, 50)
    gap = np.zeros(int(pause_s * 16000), np.float32)
    parts = [gap]
    for s in SENTENCES:
        parts += [synthesize(s, spk), gap]
    return np.concatenate(parts)


def serve_args(system: dict, *extra: str) -> list[str]:
    """``mmst-serve`` options for the tiny system (short writes per segment)."""
    return ["--model", str(system["ckpt"]), "--data", str(system["data"]), "--max-len-b", "6",
            "--waitk-lagging", "2", *extra]


def driver_factory(system: dict, *extra: str):
    """``(make_driver, langs)`` exactly as ``mmst-serve`` builds it from :func:`serve_args`."""
    from mmst.serve.cli import build_parser, make_driver_factory

    return make_driver_factory(build_parser().parse_args(serve_args(system, *extra)))


def offline_words(make_driver, langs: list[str], audio: np.ndarray) -> list[tuple[str, str, int, float]]:
    """``(lang, text, segment, time_ms)`` of every word when the long-form driver reads ``audio`` in one go."""
    from mmst.simultaneous.longform import LongFormWord

    d = make_driver(langs)
    evs = d.push(audio) + d.finish()
    return [(e.lang, e.text, e.segment, e.time_ms) for e in evs if isinstance(e, LongFormWord)]


def longform_cli_words(system: dict, wav: Path, langs: list[str], out: Path) -> list[tuple[str, str, int, float]]:
    """``(lang, text, segment, time_ms)`` of every word of ``eval/longform_eval.py`` on ``wav``, with the
    policy and limits of :func:`serve_args` (languages in ``langs`` order)."""
    import json

    cmd = [sys.executable, str(REPO / "eval" / "longform_eval.py"), "--model", str(system["ckpt"]),
           "--data", str(system["data"]), "--audio", str(wav), "--tgt-langs", ",".join(langs),
           "--max-len-b", "6", "--waitk-lagging", "2", "--out", str(out), "--no-progress"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    words = []
    for lang in langs:
        for line in (out / lang / "hypothesis.jsonl").read_text().splitlines():
            w = json.loads(line)
            words.append((lang, w["text"], w["segment"], round(w["time_ms"], 1)))
    return words
