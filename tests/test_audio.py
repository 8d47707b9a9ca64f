"""Tests of mmst.audio: formats, downmix, resampling, the one int16 scaling, bad-input errors."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from mmst.audio import AudioError, audio_info, load_audio, resample, to_mono, write_audio


def _tone(n: int, sr: int, f: float = 440.0, amp: float = 0.5) -> np.ndarray:
    return (amp * np.sin(2 * np.pi * f * np.arange(n) / sr)).astype(np.float32)


@pytest.mark.parametrize("ext,fmt,subtype,lossless", [
    ("wav", "WAV", "PCM_16", True),
    ("flac", "FLAC", "PCM_24", True),
    ("ogg", "OGG", "VORBIS", False),
    ("opus", "OGG", "OPUS", False),
    ("mp3", "MP3", "MPEG_LAYER_III", False),
])
def test_formats_load_as_16k_mono_float(tmp_path, ext, fmt, subtype, lossless) -> None:
    if fmt not in sf.available_formats() or subtype not in sf.available_subtypes(fmt):
        pytest.skip(f"libsndfile {sf.__libsndfile_version__} cannot write {fmt}/{subtype}")
    sr = 48000 if subtype == "OPUS" else 16000
    x = _tone(sr, sr)
    p = tmp_path / f"a.{ext}"
    sf.write(p, x, sr, format=fmt, subtype=subtype)
    y = load_audio(p)
    assert y.dtype == np.float32 and y.ndim == 1
    assert abs(y.size - 16000) < 1200  # mp3/opus may add encoder delay/padding
    assert np.abs(y).max() <= 1.0
    ref = _tone(16000, 16000)
    if lossless:
        np.testing.assert_allclose(y, ref, atol=2e-4)
    else:  # lossy: same level
        assert abs(float(np.sqrt(np.mean(y ** 2))) - float(np.sqrt(np.mean(ref ** 2)))) < 0.05


def test_int16_scaling_happens_once(tmp_path) -> None:
    p = tmp_path / "i.wav"
    sf.write(p, np.array([16384, -32768, 0, 32767] * 100, np.int16), 16000, subtype="PCM_16")
    y = load_audio(p)
    np.testing.assert_allclose(y[:4], [0.5, -1.0, 0.0, 32767 / 32768], atol=1e-7)
    with pytest.raises(TypeError):
        to_mono(np.zeros(4, np.int16))
    with pytest.raises(TypeError):
        resample(np.zeros(4, np.int16), 8000)


def test_stereo_44k1_downmix_and_resample(tmp_path) -> None:
    sr = 44100
    left, right = _tone(sr, sr, 300, 0.4), _tone(sr, sr, 300, 0.2)
    p = tmp_path / "s.flac"
    sf.write(p, np.stack([left, right], axis=1), sr, subtype="PCM_24")
    info = audio_info(p)
    assert (info.channels, info.sample_rate, info.num_samples) == (2, sr, sr)
    y = load_audio(p)
    assert y.size == 16000
    ref = _tone(16000, 16000, 300, 0.3)
    np.testing.assert_allclose(y[200:-200], ref[200:-200], atol=2e-3)


def test_segment_read_equals_slice(tmp_path) -> None:
    x = (np.random.default_rng(0).standard_normal(48000) * 0.1).astype(np.float32)
    p = tmp_path / "l.wav"
    write_audio(p, x, subtype="FLOAT")
    full = load_audio(p)
    seg = load_audio(p, offset_s=1.25, duration_s=0.5)
    np.testing.assert_array_equal(seg, full[20000:28000])
    # within tolerance past the end: shortened; beyond: error
    assert load_audio(p, 2.9, 0.105, end_tolerance_s=0.01).size == 1600
    with pytest.raises(AudioError, match="past the end"):
        load_audio(p, 2.9, 0.2, end_tolerance_s=0.01)
    with pytest.raises(AudioError, match="past the end"):
        load_audio(p, 3.5, 0.2)


def test_bad_audio_errors_name_the_file(tmp_path) -> None:
    with pytest.raises(AudioError, match="not found"):
        load_audio(tmp_path / "missing.wav")
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"RIFF\x00\x00not really a wav file")
    with pytest.raises(AudioError, match="junk.wav: unreadable"):
        load_audio(junk)
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(AudioError, match="empty.wav"):
        load_audio(empty)
    zero = tmp_path / "zero.wav"
    sf.write(zero, np.zeros(0, np.float32), 16000, subtype="PCM_16")
    with pytest.raises(AudioError, match="zero.wav: empty audio"):
        load_audio(zero)
    ok = tmp_path / "ok.wav"
    sf.write(ok, np.zeros(16000, np.float32), 16000, subtype="PCM_16")
    with pytest.raises(AudioError, match="zero-length"):
        load_audio(ok, 0.5, 0.0)
    for bad in (np.nan, np.inf):
        x = np.zeros(16000, np.float32)
        x[8000] = bad
        p = tmp_path / f"bad_{bad}.wav"
        sf.write(p, x, 16000, subtype="FLOAT")
        with pytest.raises(AudioError, match="NaN or Inf .*0.500s"):
            load_audio(p)
        assert load_audio(p, 0.0, 0.4).size == 6400  # the clean part reads fine
