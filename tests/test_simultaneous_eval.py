"""eval/simultaneous_eval.py end to end on a tiny untrained model (its ``main`` in this process, and the script
once as a process), and its bad-input handling."""

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
from cli_runner import run_main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny(tiny_system):
    """The shared evaluation system of conftest.py."""
    return tiny_system


def _main(argv) -> subprocess.CompletedProcess:
    """Run ``mmst-eval``'s ``main(argv)`` in this process (``cli_runner.run_main``: exit status, stdout,
    stderr with the log lines); ``test_the_script_runs_as_a_process`` runs the script file itself."""
    from mmst.cli.simultaneous_eval import main

    return run_main(main, argv)


def test_the_script_runs_as_a_process(tiny, tmp_path):
    """``python eval/simultaneous_eval.py`` as users run it: a separate process, one k."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    p = subprocess.run([sys.executable, str(ROOT / "eval" / "simultaneous_eval.py"), "--model",
                        str(tiny["ckpt"]), "--data", str(tiny["data"]), "--tgt-langs", "de", "--waitk-lagging", "3",
                        "--max-len-b", "4", "--max-utterances", "2", "--out", str(tmp_path / "o"), "--no-progress",
                        "--threads", "1"], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((tmp_path / "o" / "scores.json").read_text())["timing"]["n_utterances"] == 2


def test_sweep_writes_everything(tiny, tmp_path):
    out = tmp_path / "out"
    p = _main(["--model", tiny["ckpt"], "--data", tiny["data"], "--tgt-langs", "de,es",
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


def test_jobs_decode_in_other_processes_and_give_the_same_instances(tiny, tmp_path):
    """``--jobs 2`` shares the utterances out to two forked processes; every hypothesis and delay is the one
    ``--jobs 1`` writes, in the same order (the elapsed times differ: they are measured)."""
    outs = {}
    for jobs in (1, 2):
        out = tmp_path / f"j{jobs}"
        p = _main(["--model", tiny["ckpt"], "--data", tiny["data"], "--tgt-langs", "de,es", "--waitk-lagging",
                   "3", "--max-len-b", "6", "--out", out, "--no-progress", "--threads", "1", "--jobs", str(jobs)])
        assert p.returncode == 0, p.stderr[-3000:]
        outs[jobs] = out
        assert json.loads((out / "scores.json").read_text())["config"]["jobs"] == jobs
    for lang in ("de", "es"):
        one, two = ([json.loads(x) for x in (outs[j] / lang / "instances.log").read_text().splitlines()] for j in (1, 2))
        assert len(one) == len(tiny["rows"])
        assert [(d["index"], d["source"], d["prediction"], d["delays"]) for d in one] == \
            [(d["index"], d["source"], d["prediction"], d["delays"]) for d in two]
    p = _main(["--model", tiny["ckpt"], "--data", tiny["data"], "--out", tmp_path / "bad", "--jobs", "0"])
    assert p.returncode == 1 and "--jobs must be >= 1" in p.stderr


def test_stream_all_keeps_the_order_and_uses_the_worker_processes():
    """A scripted translator writes its process id and the utterance length: with ``jobs=2`` every
    utterance is decoded in a child process, and the results come back in utterance order."""
    from mmst.evaluation.runner import _stream_all

    class PidTranslator:
        def reset(self):
            self.n = 0

        def accept_audio(self, samples, finished=False):
            self.n += samples.size
            return {"de": [f"{os.getpid()}", f"n{self.n}"]} if finished else {}

    sizes = [800, 16000, 3200, 160, 9600, 4800]
    utts = [{"id": f"u{i}"} for i in range(len(sizes))]
    audios = [np.zeros(n, np.float32) for n in sizes]
    res = _stream_all(PidTranslator(), utts, audios, ["de"], {"de": "word"}, 320.0, False, "t", False, jobs=2)
    assert [r.per_lang["de"].units[1] for r in res] == [f"n{n}" for n in sizes]
    assert all(r.per_lang["de"].units[0] != str(os.getpid()) for r in res)
    one = _stream_all(PidTranslator(), utts, audios, ["de"], {"de": "word"}, 320.0, False, "t", False, jobs=1)
    assert {r.per_lang["de"].units[0] for r in one} == {str(os.getpid())}


def test_offline(tiny, tmp_path):
    out = tmp_path / "off"
    p = _main(["--model", tiny["ckpt"], "--tgt-langs", "es", "--offline", "--beam", "2", "--max-len-b", "6",
                "--min-len", "3", "--out", out, "--no-progress", "--threads", "1"])
    assert p.returncode == 0, p.stderr[-3000:]
    for line in (out / "es" / "instances.log").read_text().splitlines():
        d = json.loads(line)
        assert all(x == d["source_length"] for x in d["delays"])  # offline: everything at the end
    s = json.loads((out / "scores.json").read_text())
    es = s["per_lang"]["es"]
    assert es["EndOffset"] == 0 and es["AL"] == pytest.approx(es["StartOffset"])  # AL = |X| per sentence


def test_unknown_language_is_clear_error(tiny, tmp_path):
    p = _main(["--model", tiny["ckpt"], "--tgt-langs", "de,fr", "--out", tmp_path / "x", "--no-progress"])
    err = p.stderr
    assert p.returncode == 1 and "fr not in the model" in err and "Traceback" not in err


def test_missing_checkpoint_is_clear_error(tmp_path):
    p = _main(["--model", tmp_path / "nope.pt", "--out", tmp_path / "x", "--no-progress"])
    err = p.stderr
    assert p.returncode == 1 and "checkpoint not found" in err


def test_other_vocab_is_clear_error(tiny, tmp_path):
    from mmst.data.vocab import lang_tag, train_sentencepiece

    other = tmp_path / "DATA2"
    shutil.copytree(tiny["data"], other)
    train_sentencepiece(["ganz andere saetze hier", "otra cosa completamente distinta"] * 3,
                        other / "spm_joint.model", 40, user_defined_symbols=[lang_tag("de"), lang_tag("es")])
    p = _main(["--model", tiny["ckpt"], "--data", other, "--out", tmp_path / "x", "--no-progress"])
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
    p = _main(["--model", tiny["ckpt"], "--data", data, "--tgt-langs", "de", "--max-len-b", "5",
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


def test_policy_sweep_names_policy_and_per_lang(tiny, tmp_path):
    out = tmp_path / "pol"
    p = _main(["--model", tiny["ckpt"], "--data", tiny["data"], "--tgt-langs", "de,es",
               "--policy", "alignatt", "--policy-args", "frames=2,6", "--extract-attn-from-layer", "0",
               "--policy-per-lang", "es=holdn:n=2", "--max-len-b", "8", "--out", out, "--no-progress"])
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads((out / "scores.json").read_text())
    assert summary["policy"] == "alignatt" and summary["swept_param"] == "frames" and summary["values"] == [2, 6]
    assert sorted(summary["sweep"]) == ["alignatt-frames2-layer0", "alignatt-frames6-layer0"]
    assert summary["policy_per_lang"] == {"es": "holdn(n=2)"}
    point = json.loads((out / "alignatt-frames6-layer0" / "scores.json").read_text())
    assert point["config"]["policy_params"] == {"frames": 6, "layer": 0}
    assert point["config"]["policy_per_lang"]["es"] == {"policy": "holdn", "params": {"n": 2}}
    md = (out / "alignatt-frames6-layer0" / "scores.md").read_text()
    assert md.startswith("# Simultaneous evaluation (alignatt(frames=6, layer=0); es: holdn(n=2))")
    assert (out / "latency_quality_ca.png").stat().st_size > 1000


@pytest.mark.parametrize("argv,msg", [
    (["--policy", "alignat"], "unknown policy 'alignat'"),
    (["--policy", "edatt", "--policy-args", "alpha=2"], "policy parameter alpha"),
    (["--policy", "la", "--frame-num", "3"], "policy la has no parameter frames"),
    (["--policy", "ctc"], "needs a CTC head"),
    (["--policy", "waitk", "--beam", "3"], "beam search while streaming"),
])
def test_bad_policy_is_clear_error(tiny, tmp_path, capsys, argv, msg):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eval"))
    import simultaneous_eval  # in-process: these fail before any decoding

    rc = simultaneous_eval.main([str(a) for a in ["--model", tiny["ckpt"], "--tgt-langs", "de", "--out",
                                                  tmp_path / "x", "--no-progress", "--max-utterances", "1", *argv]])
    err = capsys.readouterr().err
    assert rc == 1 and msg in err and "Traceback" not in err
