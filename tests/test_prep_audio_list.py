"""Tests of data_prep/prep_audio_list.py (mmst.corpora.audiolist + the builder), incl. the real FLEURS list."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fixtures_data import data_prep_main

from mmst.corpora.audiolist import AudioListError, infer_tgt_langs, read_audio_list
from mmst.data.corpus import load_data_config
from mmst.data.manifest import read_manifest, read_manifest_header
from mmst.data.store import read_feature
from mmst.features import LOG_FLOOR, GlobalCMVN, fbank


def _main():
    return data_prep_main("prep_audio_list")


def _quiet_speechlike(n: int, peak: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    env = 0.5 * (1 + np.sin(2 * np.pi * 3 * t))  # syllable-like amplitude modulation
    x = env * (np.sin(2 * np.pi * 180 * t) + 0.5 * np.sin(2 * np.pi * 900 * t) + 0.2 * rng.standard_normal(n))
    return (peak * x / np.abs(x).max()).astype(np.float32)


def _write_list(tmp_path: Path, rows: list[tuple[str, str, str, str, str]] | None = None) -> Path:
    d = tmp_path / "list"
    (d / "audio").mkdir(parents=True)
    specs = [("c0", "ogg", "OGG", "OPUS", 0.004), ("c1", "wav", "WAV", "PCM_16", 0.01), ("c2", "flac", "FLAC", "PCM_16", 0.03)]
    lines = ["id\taudio\tduration_s\ten\tnotes\tde\tes"]
    for i, (cid, ext, fmt, sub, peak) in enumerate(specs):
        sf.write(d / "audio" / f"{cid}.{ext}", _quiet_speechlike(16000 + 4000 * i, peak, i), 16000, format=fmt,
                 subtype=sub)
        dur = (16000 + 4000 * i) / 16000
        lines.append(f"{cid}\taudio/{cid}.{ext}\t{dur:g}\tenglish {i}\tx\tdeutsch {i}\tespañol {i}")
    p = d / "list.tsv"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_audio_list_with_vocab_from(make_mustc, tmp_path) -> None:
    from test_prep_multiway import _run

    raw, _ = make_mustc(langs=("de", "es"))
    train = tmp_path / "train_data"
    assert _run(raw, train) == 0
    tsv = _write_list(tmp_path)
    out = tmp_path / "eval"
    assert _main()(["--tsv", str(tsv), "--out", str(out), "--vocab-from", str(train), "--no-progress"]) == 0
    cfg = load_data_config(out)
    assert cfg["tgt_langs"] == ["de", "es"] and cfg["splits"] == ["list"] and cfg["vocab_from"] == str(train.resolve())
    assert (out / "spm_joint.model").read_bytes() == (train / "spm_joint.model").read_bytes()
    np.testing.assert_array_equal(GlobalCMVN.load(out / "gcmvn.npz").mean, GlobalCMVN.load(train / "gcmvn.npz").mean)
    assert read_manifest_header(out / "list.tsv") == ["id", "audio", "n_frames", "speaker", "src_text", "tgt_text_de",
                                                      "tgt_text_es", "wav", "offset", "duration"]
    rows = read_manifest(out / "list.tsv")
    assert [r["id"] for r in rows] == ["c0", "c1", "c2"]
    assert rows[1]["src_text"] == "english 1" and rows[2]["tgt_text_es"] == "español 2"
    for r, n in zip(rows, (16000, 20000, 24000)):
        f = read_feature(out, r["audio"])
        assert abs(f.shape[0] - (n - 400) // 160 - 1) <= 3  # opus may pad a few samples
        assert Path(r["wav"]).is_absolute() and r["offset"] == "0"
        assert np.median(f) > LOG_FLOOR + 15  # quiet (peak 0.004) is not silence
    assert json.loads((out / "prep_report.json").read_text())["splits"]["list"]["no_filter"] is True


def test_audio_list_with_vocab_from_a_model_folder_and_no_tgt_langs(tmp_path) -> None:
    """--vocab-from MODEL_DIR alone: the languages come from the folder's config (those the list has), its
    vocabulary and CMVN are copied."""
    from eval_fixtures import make_tiny_system

    from mmst.export import export_model

    folder = export_model(make_tiny_system(tmp_path / "sys", langs=("de", "ja"))["ckpt"], tmp_path / "model")
    tsv = _write_list(tmp_path)  # columns de, es
    out = tmp_path / "eval"
    assert _main()(["--tsv", str(tsv), "--out", str(out), "--vocab-from", str(folder), "--no-progress"]) == 0
    assert load_data_config(out)["tgt_langs"] == ["de"]
    assert (out / "spm_joint.model").read_bytes() == (folder / "spm_joint.model").read_bytes()
    assert (out / "gcmvn.npz").read_bytes() == (folder / "gcmvn.npz").read_bytes()


def test_audio_list_without_vocab_from_and_peak_normalize(tmp_path) -> None:
    tsv = _write_list(tmp_path)
    out, out2 = tmp_path / "a", tmp_path / "b"
    assert _main()(["--tsv", str(tsv), "--out", str(out), "--split", "fl", "--no-progress"]) == 0
    assert _main()(["--tsv", str(tsv), "--out", str(out2), "--split", "fl", "--peak-normalize", "0.5",
                    "--no-progress"]) == 0
    a, b = read_manifest(out / "fl.tsv")[0], read_manifest(out2 / "fl.tsv")[0]
    fa, fb = read_feature(out, a["audio"]), read_feature(out2, b["audio"])
    gain = 0.5 / 0.004
    # log-mel shifts by 2 ln(gain) under a gain change (up to opus rounding and the dither floor)
    assert abs(float(np.median(fb - fa)) - 2 * np.log(gain)) < 0.5
    assert load_data_config(out2)["fbank"]["peak_normalize"] == 0.5
    # the stored features are the causal gain's (the rule the evaluation and the agent apply chunk by chunk)
    from mmst.audio import load_audio
    from mmst.features import causal_peak_normalize, dither_seed_for

    wave = causal_peak_normalize(load_audio(b["wav"]), 0.5)
    want = fbank(wave, dither=1.0, dither_seed=dither_seed_for(b["id"]), dither_mode="silence")
    np.testing.assert_allclose(fb, want, atol=1e-4)


def test_audio_list_bad_input(tmp_path) -> None:
    tsv = _write_list(tmp_path)
    assert infer_tgt_langs(["id", "audio", "en", "de", "en_fleurs_normalized", "ja", "duration_s"]) == ["de", "ja"]
    text = tsv.read_text(encoding="utf-8").splitlines()
    tsv.write_text("\n".join(text + [text[2]]) + "\n", encoding="utf-8")
    with pytest.raises(AudioListError, match=r"list.tsv:5: duplicate id 'c1' \(first on line 3\)"):
        read_audio_list(tsv)
    tsv.write_text("\n".join(text[:2] + ["c9\taudio/c9.wav\t1.0\ttoo few cells"]) + "\n", encoding="utf-8")
    with pytest.raises(AudioListError, match=r"list.tsv:3: expected 7 cells, got 4"):
        read_audio_list(tsv)
    with pytest.raises(AudioListError, match=r"no column for language 'fr'"):
        read_audio_list(tsv, ["fr"])
    tsv.write_bytes(("\n".join(text) + "\n").encode("utf-8") + b"c9\taudio/c0.ogg\t1\t\xe9\tx\ty\tz\n")
    with pytest.raises(AudioListError, match=r"list.tsv:5: text is not valid UTF-8"):
        read_audio_list(tsv)
    # a missing clip is an error (evaluation lists are never filtered)
    tsv.write_text("\n".join(text + ["c9\taudio/nope.wav\t1.0\ten\tx\tde\tes"]) + "\n", encoding="utf-8")
    assert _main()(["--tsv", str(tsv), "--out", str(tmp_path / "o"), "--no-progress"]) == 1


def test_real_fleurs_list(shared_data, tmp_path) -> None:
    tsv = shared_data / "fleurs_flores" / "fleurs_flores.tsv"
    if not tsv.is_file():
        pytest.skip(f"{tsv} not found")
    out = tmp_path / "fleurs"
    assert _main()(["--tsv", str(tsv), "--out", str(out), "--tgt-langs", "de,es,fr,ja", "--no-progress"]) == 0
    rows = read_manifest(out / "fleurs_flores.tsv")
    src = {r["id"]: r for r in read_audio_list(tsv, ["de"])[0]}
    assert len(rows) == len(src) == 7
    exts = {Path(r["wav"]).suffix for r in rows}
    assert exts == {".ogg", ".wav"}
    noise = fbank(np.zeros(16000, np.float32), dither=1.0, dither_seed=1)  # 1-LSB white noise
    noise_low = float(np.median(noise[:, :40].mean(axis=1)))  # speech band, bins 0-39 (< ~1.7 kHz)
    from mmst.audio import load_audio
    for r in rows:
        f = read_feature(out, r["audio"])
        dur = float(r["duration"])
        assert abs(f.shape[0] - dur * 100) <= 3 and np.isfinite(f).all()
        assert r["src_text"] == src[r["id"]]["src_text"] and r["tgt_text_ja"]
        # quiet speech (peak 0.003-0.04) must not look like silence: speech-band energy of the louder
        # frames is far above the 1-LSB noise level, and typical frames far above the log floor
        low = f[:, :40].mean(axis=1)
        assert np.percentile(low, 75) > noise_low + 4, (r["id"], np.percentile(low, 75), noise_low)
        assert np.median(low) > LOG_FLOOR + 15
        frame_energy = np.log(np.exp(f.astype(np.float64)).sum(axis=1))
        assert np.median(frame_energy) > LOG_FLOOR + 20
        # the prep's silence-only dither leaves the speech frames (nearly) as they are
        plain = fbank(load_audio(r["wav"]))
        top = np.argsort(plain.mean(axis=1))[f.shape[0] // 2:]
        assert np.abs(plain[top] - f[top]).mean() < 0.15  # Kaldi-style dither: 0.2-0.7


def test_bad_audio_truncated_opus_and_silence_reported_and_skipped(tmp_path, caplog) -> None:
    """A truncated Ogg/Opus clip (decodes short of duration_s) and an all-zero clip are bad audio:
    an error naming both without --skip-bad; with it, both are left out and reported, others aligned."""
    tsv = _write_list(tmp_path)
    d = tsv.parent
    x = _quiet_speechlike(int(2.13 * 16000), 0.3, 7)
    sf.write(d / "audio" / "cut.ogg", x, 16000, format="OGG", subtype="OPUS")
    raw = (d / "audio" / "cut.ogg").read_bytes()
    pages = [i for i in range(len(raw)) if raw.startswith(b"OggS", i)]
    assert len(pages) > 4
    # cut at an Ogg page boundary: libsndfile opens and decodes it without error, about 1 s of 2.13 s
    (d / "audio" / "cut.ogg").write_bytes(raw[: pages[3]])
    assert sf.read(d / "audio" / "cut.ogg")[0].shape[0] < 1.5 * 16000
    sf.write(d / "audio" / "zero.wav", np.zeros(16000, np.float32), 16000, subtype="PCM_16")
    text = tsv.read_text(encoding="utf-8").splitlines()
    text.insert(2, "cut\taudio/cut.ogg\t2.13\tenglish cut\tx\tdeutsch cut\tespañol cut")
    text.append("zero\taudio/zero.wav\t1.0\tenglish zero\tx\tdeutsch zero\tespañol zero")
    tsv.write_text("\n".join(text) + "\n", encoding="utf-8")

    caplog.set_level("WARNING")
    assert _main()(["--tsv", str(tsv), "--out", str(tmp_path / "strict"), "--split", "fl", "--no-progress"]) == 1
    msg = caplog.text
    assert "2 bad clip(s)" in msg and "list.tsv:3 (id cut)" in msg and "duration_s=2.13" in msg
    assert "list.tsv:6 (id zero)" in msg and "silent audio" in msg
    assert not (tmp_path / "strict" / "fl.tsv").exists()

    caplog.clear()
    out = tmp_path / "skip"
    assert _main()(["--tsv", str(tsv), "--out", str(out), "--split", "fl", "--skip-bad", "--no-progress"]) == 0
    rows = read_manifest(out / "fl.tsv")
    assert [r["id"] for r in rows] == ["c0", "c1", "c2"]
    assert [(r["src_text"], r["tgt_text_de"], r["tgt_text_es"]) for r in rows] == [
        (f"english {i}", f"deutsch {i}", f"español {i}") for i in range(3)]
    for lang in ("de", "es"):
        st = read_manifest(out / f"fl_st_{lang}.tsv")
        assert [r["id"] for r in st] == ["c0", "c1", "c2"]
    rep = json.loads((out / "prep_report.json").read_text())
    assert sorted(b["id"] for b in rep["skipped_bad_audio"]) == ["cut", "zero"]
    assert rep["splits"]["fl"]["rows_in"] == 5 and rep["splits"]["fl"]["dropped"] == {"bad_audio": 2}
    assert "(id cut)" in caplog.text and "(id zero)" in caplog.text
    assert "near-silent audio" in caplog.text  # c0 peaks at 0.004
