"""MMSTSpeechToTextAgent: SimulEval contract, no state leak, input scaling, resampling, dataloader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from simuleval.data.segments import EmptySegment, SpeechSegment

from mmst.agents import MMSTSpeechToTextAgent, MMSTSpeechToTextDataloader


class FakeTranslator:
    """Emits one word per 5120 samples (320 ms at 16 kHz) received, and 'end' words when finished."""

    tgt_langs = ["de", "es"]

    def __init__(self) -> None:
        self.resets = 0
        self.chunks: list[np.ndarray] = []  # every chunk received, across resets
        self.reset()

    def reset(self) -> None:
        self.resets += 1
        self.n = 0
        self.emitted = 0

    def accept_audio(self, samples: np.ndarray, finished: bool) -> dict[str, list[str]]:
        assert samples.dtype == np.float32 and samples.ndim == 1
        self.chunks.append(samples.copy())
        self.n += samples.size
        k = self.n // 5120 - self.emitted
        words = [f"w{self.emitted + i}" for i in range(k)]
        self.emitted += k
        if finished:
            words += ["end1", "end2"]
        return {"de": words, "es": [w.upper() for w in words]}


def _agent(**kw) -> tuple[MMSTSpeechToTextAgent, FakeTranslator]:
    tr = FakeTranslator()
    args = Namespace(tgt_lang=kw.pop("tgt_lang", "de"), input_scale=kw.pop("input_scale", "auto"))
    return MMSTSpeechToTextAgent(args, translator=tr), tr


def _run(agent: MMSTSpeechToTextAgent, audio: np.ndarray, sr: int = 16000, seg_ms: int = 320, lang: str = "de"):
    """Drive the agent like SimulEval's evaluator; returns [(text, finished)] of the writes."""
    n = int(np.ceil(seg_ms / 1000 * sr))
    out, step = [], 0
    while True:
        if step >= audio.size:
            seg = EmptySegment(finished=True)
        else:
            chunk = audio[step : step + n]
            step += n
            seg = SpeechSegment(content=chunk.tolist(), sample_rate=sr, finished=step >= audio.size, tgt_lang=lang)
        o = agent.pushpop(seg)
        if not o.is_empty:
            out.append((o.content, o.finished))
        if seg.finished:
            break
    return out


def test_contract_writes_everything_with_finished():
    agent, tr = _agent()
    audio = (np.random.default_rng(0).standard_normal(16000 * 2) * 0.1).astype(np.float32)
    writes = _run(agent, audio)
    assert writes[-1][1] is True
    assert all(not f for _, f in writes[:-1])
    words = " ".join(t for t, _ in writes).split()
    assert words == [f"w{i}" for i in range(6)] + ["end1", "end2"]
    assert sum(c.size for c in tr.chunks) == audio.size


def test_no_state_leak_across_instances():
    agent, tr = _agent()
    audio = np.zeros(16000, dtype=np.float32) + 0.01
    first = _run(agent, audio)
    agent.reset()  # SimulEval resets between instances; the agent also resets itself after finishing
    second = _run(agent, audio)
    assert first == second
    agent.reset()
    assert agent._consumed == 0 and agent.states.source == [] and not agent.states.target_finished


def test_empty_source():
    agent, tr = _agent()
    out = agent.pushpop(EmptySegment(finished=True))
    assert out.finished and out.content == "end1 end2"


def test_other_language_and_segment_lang():
    agent, _ = _agent(tgt_lang="de,es")
    writes = _run(agent, np.full(6000, 0.1, np.float32), lang="es")
    assert " ".join(t for t, _ in writes).split() == ["W0", "END1", "END2"]


@pytest.mark.parametrize("mode", ["auto", "int16"])
def test_int16_scaled_input(mode):
    agent, tr = _agent(input_scale=mode)
    x = (np.sin(np.arange(8000) / 10) * 0.5).astype(np.float32)
    _run(agent, x * 32767.0)
    got = np.concatenate(tr.chunks)
    np.testing.assert_allclose(got, x * 32767.0 / 32768.0, atol=1e-6)


def test_float_input_untouched():
    agent, tr = _agent()
    x = (np.sin(np.arange(8000) / 10) * 0.5).astype(np.float32)
    _run(agent, x)
    np.testing.assert_allclose(np.concatenate(tr.chunks), x, atol=0)


@pytest.mark.parametrize("sr", [8000, 44100])
def test_resampled_to_16k(sr):
    agent, tr = _agent()
    x = (np.sin(2 * np.pi * 440 * np.arange(sr) / sr) * 0.3).astype(np.float32)
    _run(agent, x, sr=sr)
    got = np.concatenate(tr.chunks)
    assert abs(got.size - 16000) <= 2
    ref = np.sin(2 * np.pi * 440 * np.arange(16000) / 16000) * 0.3
    assert np.abs(got[2000:14000] - ref[2000:14000]).max() < 0.02


def test_dataloader_stereo_and_lang_code(tmp_path: Path):
    wav = tmp_path / "st.wav"
    stereo = np.stack([np.full(1600, 0.5), np.full(1600, -0.1)], axis=1)
    sf.write(wav, stereo, 44100)
    (tmp_path / "src.list").write_text(f"{wav}\n{wav}\n")
    (tmp_path / "tgt.txt").write_text("a\nb\n")
    dl = MMSTSpeechToTextDataloader.from_files(tmp_path / "src.list", tmp_path / "tgt.txt", "de")
    assert dl.tgt_lang_list == ["de", "de"]
    item = dl[0]
    assert len(item["source"]) == 1600 and item["source"][0] == pytest.approx(0.2, abs=1e-4)
    (tmp_path / "langs").write_text("de\nes\n")
    dl = MMSTSpeechToTextDataloader.from_files(tmp_path / "src.list", tmp_path / "tgt.txt", str(tmp_path / "langs"))
    assert dl.tgt_lang_list == ["de", "es"]


def test_missing_checkpoint_is_clear_exit():
    with pytest.raises(SystemExit, match="--model is required"):
        MMSTSpeechToTextAgent.from_args(Namespace(tgt_lang="de", checkpoint=None))


@pytest.fixture
def tiny(tiny_system):
    """The shared evaluation system of conftest.py, restricted to its 16 kHz mono speech utterances."""
    keep = [i for i, w in enumerate(tiny_system["wavs"]) if w.stem[3:].isdigit()]  # utt0, utt1, ...
    return {**tiny_system, "wavs": [tiny_system["wavs"][i] for i in keep],
            "rows": [tiny_system["rows"][i] for i in keep],
            "refs": {lang: [r[i] for i in keep] for lang, r in tiny_system["refs"].items()}}


def _args(tiny, **kw) -> Namespace:
    base = dict(checkpoint=str(tiny["ckpt"]), mmst_data=None, tgt_lang="de", waitk_lagging=3, max_len_a=0.0,
                max_len_b=8, min_len=0, input_scale="auto")
    base.update(kw)
    return Namespace(**base)


def test_real_checkpoint_agent_streams(tiny):
    agent = MMSTSpeechToTextAgent.from_args(_args(tiny, min_len=8))
    x = sf.read(tiny["wavs"][1], dtype="float32")[0]
    writes = _run(agent, x)
    assert writes[-1][1] is True
    words = " ".join(t for t, _ in writes).split()
    assert len(words) >= 1
    agent.reset()
    assert _run(agent, x) == writes  # deterministic, nothing carried over


def test_unknown_language_exits_cleanly(tiny):
    with pytest.raises(SystemExit, match="fr not in the model"):
        MMSTSpeechToTextAgent.from_args(_args(tiny, tgt_lang="fr"))


def test_other_vocab_exits_cleanly(tiny, tmp_path):
    import shutil

    from mmst.data.vocab import lang_tag, train_sentencepiece

    other = tmp_path / "D"
    shutil.copytree(tiny["data"], other)
    train_sentencepiece(["voellig andere saetze", "frases muy distintas"] * 3, other / "spm_joint.model", 40,
                        user_defined_symbols=[lang_tag("de"), lang_tag("es")])
    with pytest.raises(SystemExit, match="another vocabulary"):
        MMSTSpeechToTextAgent.from_args(_args(tiny, mmst_data=str(other)))


SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def test_real_44k_stereo_clip_through_dataloader_and_agent(tiny):
    """Real recording (44.1 kHz stereo FLAC) from the shared data: downmix, resample, stream."""
    clip = SHARED / "en_asr_only" / "whisper_jfk.flac"
    if not clip.is_file():
        pytest.skip(f"shared data not found: {clip}")
    info = sf.info(clip)
    (Path(tiny["data"]).parent / "src.list").write_text(f"{clip}\n")
    (Path(tiny["data"]).parent / "tgt.txt").write_text("x\n")
    dl = MMSTSpeechToTextDataloader.from_files(Path(tiny["data"]).parent / "src.list",
                                               Path(tiny["data"]).parent / "tgt.txt", "de")
    samples = np.asarray(dl[0]["source"], dtype=np.float32)
    assert samples.ndim == 1 and samples.size == info.frames
    agent = MMSTSpeechToTextAgent.from_args(_args(tiny, min_len=4))
    seen = []
    orig = agent.longform.push  # the long-form driver (sentence restarts, the default) reads every sample

    def spy(x):
        seen.append(np.asarray(x).size)
        return orig(x)

    agent.longform.push = spy
    writes = _run(agent, samples, sr=info.samplerate)
    assert writes[-1][1] is True
    assert abs(sum(seen) - info.frames * 16000 / info.samplerate) <= 2  # resampled to 16 kHz


# ------------------------------------------------------------------ through the real simuleval CLI
SIMULEVAL = Path(sys.executable).parent / "simuleval"
ROOT = Path(__file__).resolve().parents[1]
CLI_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
CLI_COMMON = ["--waitk-lagging", "3", "--max-len-b", "6", "--min-len", "6", "--source-segment-size", "320"]


def _simuleval_cli(ckpt: Path, data: Path, wavs: list, refs: list, out: Path) -> subprocess.CompletedProcess:
    if not SIMULEVAL.is_file():
        pytest.skip(f"simuleval CLI not found at {SIMULEVAL}")
    src, tgt = out.parent / f"{out.name}.src", out.parent / f"{out.name}.tgt"
    src.write_text("".join(f"{w}\n" for w in wavs))
    tgt.write_text("".join(f"{r}\n" for r in refs))
    cmd = [str(SIMULEVAL), "--agent-class", "mmst.agents.MMSTSpeechToTextAgent", "--model", str(ckpt),
           "--mmst-data", str(data), "--tgt-lang", "de", "--source", str(src), "--target", str(tgt),
           "--output", str(out), "--no-progress-bar", *CLI_COMMON]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=CLI_ENV, cwd=str(out.parent))


def _instances(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.slow
def test_simuleval_cli_mmst_data_option(tiny, tmp_path):
    """The documented command: ``simuleval ... --mmst-data DATA`` uses that DATA, not the checkpoint's."""
    import shutil

    import torch

    data = tmp_path / "moved_DATA"
    shutil.copytree(tiny["data"], data)
    ckpt = torch.load(tiny["ckpt"], map_location="cpu", weights_only=False)
    ckpt["data_dir"] = str(tmp_path / "no_such_DATA")  # only --mmst-data can make this work
    torch.save(ckpt, tmp_path / "ckpt.pt")
    r = _simuleval_cli(tmp_path / "ckpt.pt", data, tiny["wavs"], tiny["refs"]["de"], tmp_path / "out")
    assert r.returncode == 0, r.stderr[-3000:]
    ins = _instances(tmp_path / "out" / "instances.log")
    assert len(ins) == len(tiny["wavs"])
    assert all(len(d["prediction"].split()) >= 1 for d in ins)


@pytest.mark.slow
def test_agent_equals_simultaneous_eval_on_quiet_peak_normalised_data(tiny, tmp_path):
    """Same DATA with ``fbank.peak_normalize``, quiet recordings: the agent (through simuleval) and
    ``eval/simultaneous_eval.py`` write identical hypotheses with identical delays."""
    import yaml

    from mmst.data.manifest import manifest_columns, write_manifest

    data = tmp_path / "DATA"
    data.mkdir()
    for name in ("gcmvn.npz", "spm_joint.model", "spm_joint.vocab"):
        if (Path(tiny["data"]) / name).exists():
            (data / name).write_bytes((Path(tiny["data"]) / name).read_bytes())
    cfg = yaml.safe_load((Path(tiny["data"]) / "config.yaml").read_text())
    cfg["fbank"] = {"dither": 0.0, "dither_mode": "all", "peak_normalize": 0.5}
    (data / "config.yaml").write_text(yaml.safe_dump(cfg))
    wavs, rows = [], []
    for i, (w, row) in enumerate(zip(tiny["wavs"], tiny["rows"])):
        x = sf.read(w, dtype="float32")[0] * np.float32(0.004)  # peak ~ 0.0013 (-58 dBFS): very quiet
        q = tmp_path / f"quiet{i}.wav"
        sf.write(q, x, 16000, subtype="FLOAT")
        wavs.append(q)
        rows.append(dict(row, wav=str(q)))
    write_manifest(data / "tst-COMMON.tsv", rows, manifest_columns(["de", "es"]))

    ev = tmp_path / "eval"
    r = subprocess.run([sys.executable, str(ROOT / "eval" / "simultaneous_eval.py"), "--model",
                        str(tiny["ckpt"]), "--data", str(data), "--tgt-langs", "de", "--out", str(ev), "--threads",
                        "1", "--no-progress", *CLI_COMMON], capture_output=True, text=True, timeout=180, env=CLI_ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    ag = _simuleval_cli(tiny["ckpt"], data, wavs, tiny["refs"]["de"], tmp_path / "agent")
    assert ag.returncode == 0, ag.stderr[-3000:]
    ours = _instances(ev / "de" / "instances.log")
    theirs = _instances(tmp_path / "agent" / "instances.log")
    assert len(ours) == len(theirs) == len(wavs)
    for a, b in zip(ours, theirs):
        assert a["prediction"] == b["prediction"]
        assert a["delays"] == pytest.approx(b["delays"], abs=1e-6)
    assert "very quiet input" in r.stderr and "very quiet input" in ag.stderr
