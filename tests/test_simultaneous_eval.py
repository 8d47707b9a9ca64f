"""eval/simultaneous_eval.py (a subprocess) end to end on a tiny untrained model, and its bad-input handling."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny(tiny_system):
    """The shared evaluation system of conftest.py."""
    return tiny_system


def _main(argv) -> subprocess.CompletedProcess:
    """Run the command line (a separate process, as users run it)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, str(ROOT / "eval" / "simultaneous_eval.py"), *map(str, argv)],
                          capture_output=True, text=True, timeout=300, env=env)


def test_sweep_writes_everything(tiny, tmp_path):
    out = tmp_path / "out"
    p = _main(["--checkpoint", tiny["ckpt"], "--data", tiny["data"], "--tgt-langs", "de,es",
                "--waitk-lagging", "1,3", "--max-len-b", "8", "--out", out, "--no-progress", "--threads", "1"])
    assert p.returncode == 0, p.stderr[-3000:]
    for k in (1, 3):
        for lang in ("de", "es"):
            lines = (out / f"k{k}" / lang / "instances.log").read_text().splitlines()
            d = json.loads(lines[0])
            assert set(d) == {"index", "prediction", "delays", "elapsed", "prediction_length", "reference",
                              "source", "source_length"}
            assert len(lines) == len(tiny["rows"])
        scores = json.loads((out / f"k{k}" / "scores.json").read_text())
        assert "rtf" in scores and scores["rtf"] > 0
        assert "average" in scores and "per_lang" in scores
        assert (out / f"k{k}" / "scores.md").read_text().startswith("# Simultaneous evaluation")
    assert (out / "latency_quality.png").stat().st_size > 1000
    summary = json.loads((out / "scores.json").read_text())
    assert summary["ks"] == [1, 3] and "AL" in summary["sweep"]["k3"]["per_lang"]["de"]
    assert "| k=1 |" in (out / "scores.md").read_text()
    assert "silent audio" in p.stderr  # the all-zero file is reported


def test_offline(tiny, tmp_path):
    out = tmp_path / "off"
    p = _main(["--checkpoint", tiny["ckpt"], "--tgt-langs", "es", "--offline", "--beam", "2", "--max-len-b", "6",
                "--min-len", "3", "--out", out, "--no-progress", "--threads", "1"])
    assert p.returncode == 0, p.stderr[-3000:]
    for line in (out / "es" / "instances.log").read_text().splitlines():
        d = json.loads(line)
        assert all(x == d["source_length"] for x in d["delays"])  # offline: everything at the end
    s = json.loads((out / "scores.json").read_text())
    es = s["per_lang"]["es"]
    assert es["EndOffset"] == 0 and es["AL"] == pytest.approx(es["StartOffset"])  # AL = |X| per sentence


def test_unknown_language_is_clear_error(tiny, tmp_path):
    p = _main(["--checkpoint", tiny["ckpt"], "--tgt-langs", "de,fr", "--out", tmp_path / "x", "--no-progress"])
    err = p.stderr
    assert p.returncode == 1 and "fr not in the model" in err and "Traceback" not in err


def test_missing_checkpoint_is_clear_error(tmp_path):
    p = _main(["--checkpoint", tmp_path / "nope.pt", "--out", tmp_path / "x", "--no-progress"])
    err = p.stderr
    assert p.returncode == 1 and "checkpoint not found" in err


def test_other_vocab_is_clear_error(tiny, tmp_path):
    from mmst.data.vocab import lang_tag, train_sentencepiece

    other = tmp_path / "DATA2"
    shutil.copytree(tiny["data"], other)
    train_sentencepiece(["ganz andere saetze hier", "otra cosa completamente distinta"] * 3,
                        other / "spm_joint.model", 40, user_defined_symbols=[lang_tag("de"), lang_tag("es")])
    p = _main(["--checkpoint", tiny["ckpt"], "--data", other, "--out", tmp_path / "x", "--no-progress"])
    err = p.stderr
    assert p.returncode == 1 and "another vocabulary" in err and "Traceback" not in err


def test_empty_audio_and_missing_reference(tiny, tmp_path):
    from mmst.data.manifest import read_manifest, read_manifest_header, write_manifest

    data = tmp_path / "DATA3"
    shutil.copytree(tiny["data"], data)
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, np.float32), 16000)
    rows = read_manifest(data / "tst-COMMON.tsv")
    cols = read_manifest_header(data / "tst-COMMON.tsv")
    rows[0]["wav"] = str(empty)
    rows[1]["tgt_text_de"] = ""
    write_manifest(data / "tst-COMMON.tsv", rows, cols)
    out = tmp_path / "o"
    p = _main(["--checkpoint", tiny["ckpt"], "--data", data, "--tgt-langs", "de", "--max-len-b", "5",
                "--min-len", "5", "--out", out, "--no-progress", "--threads", "1"])
    assert p.returncode == 0, p.stderr[-3000:]
    assert "empty" in p.stderr and "no de reference" in p.stderr
    ins = [json.loads(x) for x in (out / "de" / "instances.log").read_text().splitlines()]
    assert ins[0]["prediction"] == "" and ins[1]["reference"] is None


def test_feature_matched_translator_reproduces_data_dither():
    from mmst.evaluation.loading import FeatureMatchedTranslator
    from mmst.features import dither_seed_for, fbank

    class Capture:
        def __init__(self):
            self.chunks = []

        def reset(self):
            self.chunks = []

        def accept_audio(self, samples, finished=False):
            self.chunks.append(np.asarray(samples))
            return {}

    rng = np.random.default_rng(0)
    x = (0.1 * rng.standard_normal(16000)).astype(np.float32)
    x[4000:9000] = 0.0  # digital silence, as espeak writes between words
    tr = FeatureMatchedTranslator(Capture(), dither=1.0, dither_mode="silence")
    tr.reset("utt_7")
    for s in range(0, x.size, 5120):
        tr.accept_audio(x[s : s + 5120], finished=s + 5120 >= x.size)
    streamed = np.concatenate(tr.inner.chunks)
    want = fbank(x, dither=1.0, dither_seed=dither_seed_for("utt_7"), dither_mode="silence")
    got = fbank(streamed, dither=0.0)
    np.testing.assert_allclose(got, want, atol=2e-3)
    assert np.abs(fbank(x, dither=0.0) - want).max() > 1.0  # the dither matters in silent frames


def test_stream_driver_timing_matches_simuleval_rules():
    from mmst.evaluation.streaming import stream_utterance

    class Tr:
        def reset(self):
            self.n = 0

        def accept_audio(self, samples, finished=False):
            self.n += 1
            return {"de": [f"w{self.n}"], "ja": ["日本"] if finished else []}

    t = iter(range(1000))
    res = stream_utterance(Tr(), np.zeros(12000, np.float32), ["de", "ja"], {"ja": "char"}, 320.0,
                           clock=lambda: float(next(t)))
    de, ja = res.per_lang["de"], res.per_lang["ja"]
    assert de.units == ["w1", "w2", "w3"]  # ceil(12000 / 5120) = 3 segments
    assert de.delays == [320.0, 640.0, 750.0]  # samples sent * 1000 / 16000; last = source length
    # clock: start=0, then (t0, t1) = (1, 2), (3, 4), (5, 6): elapsed = delay + (t1 - start) * 1000
    assert de.elapsed == [2320.0, 4640.0, 6750.0]
    assert ja.units == ["日", "本"] and ja.delays == [750.0, 750.0]
    assert res.source_length_ms == 750.0
    empty = stream_utterance(Tr(), np.zeros(0, np.float32), ["de"], None, 320.0)
    assert empty.per_lang["de"].delays == [0.0] and empty.source_length_ms == 0.0
