"""Tests of mmst.features (streaming == offline, an independent numpy reference, dither), mmst.cmvn and mmst.gain."""

from __future__ import annotations

import numpy as np
import pytest

from mmst.cmvn import CMVNAccumulator, GlobalCMVN, utterance_cmvn
from mmst.features import LOG_FLOOR, OnlineFbank, dither_seed_for, fbank, fbank_kwargs_from_config, num_frames


def _signal(n: int = 20800, seed: int = 0) -> np.ndarray:
    """Tone sweep + noise, float32 in [-1, 1] (1.3 s at 16 kHz)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000.0
    x = 0.3 * np.sin(2 * np.pi * (200 + 300 * t) * t) + 0.05 * rng.standard_normal(n)
    return x.astype(np.float32)


@pytest.mark.parametrize("chunk", [1, 160, 4000, 16000])
@pytest.mark.parametrize("dither,mode", [(0.0, "all"), (1.0, "all"), (1.0, "silence")])
def test_streaming_equals_offline(chunk: int, dither: float, mode: str) -> None:
    x = _signal()
    x[5000:9000] = 0.0  # digital silence inside
    ref = fbank(x, dither=dither, dither_seed=7, dither_mode=mode)
    f = OnlineFbank(dither=dither, dither_seed=7, dither_mode=mode)
    got = []
    for i in range(0, x.size, chunk):
        f.accept_waveform(x[i:i + chunk])
        got.append(f.pop_frames())
    f.input_finished()
    got.append(f.pop_frames())
    out = np.concatenate(got)
    assert out.shape == ref.shape == (num_frames(x.size), 80)
    np.testing.assert_allclose(out, ref, atol=1e-4, rtol=0)
    assert f.num_frames_popped == f.num_frames_ready == ref.shape[0]


def test_num_frames_and_short_input() -> None:
    assert num_frames(399) == 0 and num_frames(400) == 1 and num_frames(720) == 3 and num_frames(16000) == 98
    assert fbank(np.zeros(399, np.float32)).shape == (0, 80)
    assert fbank(np.zeros(16000, np.float32)).shape == (98, 80)


def _kaldi_reference(x: np.ndarray, sr: int = 16000, n_mels: int = 80) -> np.ndarray:
    """Independent numpy fbank following Kaldi's feature-window.cc / mel-computations.cc formulas.

    Framing with snip_edges (400-sample window, 160 shift), per frame: remove DC, pre-emphasis
    ``y[i] = x[i] - 0.97 x[i-1]`` with ``y[0] = x[0] - 0.97 x[0]``, Povey window
    ``(0.5 - 0.5 cos(2 pi n / (N - 1)))^0.85``, zero-pad to 512, power spectrum ``|rfft|^2``,
    triangular mel filters in Kaldi's mel scale ``1127 ln(1 + f / 700)`` between 20 Hz and Nyquist
    (evaluated on FFT bins 0..255, weights linear in mel), natural log floored at float32 eps.
    """
    x = x.astype(np.float64) * 32768.0
    win, shift, nfft = 400, 160, 512
    n = 1 + (x.size - win) // shift
    frames = np.stack([x[i * shift:i * shift + win] for i in range(n)])
    frames = frames - frames.mean(axis=1, keepdims=True)
    pre = frames.copy()
    pre[:, 1:] = frames[:, 1:] - 0.97 * frames[:, :-1]
    pre[:, 0] = frames[:, 0] - 0.97 * frames[:, 0]
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / (win - 1))) ** 0.85
    spec = np.abs(np.fft.rfft(pre * window, n=nfft)) ** 2  # (n, 257)

    def mel(f):
        return 1127.0 * np.log(1.0 + f / 700.0)

    lo, hi = mel(20.0), mel(sr / 2.0)
    delta = (hi - lo) / (n_mels + 1)
    bin_mel = mel(np.arange(nfft // 2) * sr / nfft)  # 256 bins, Nyquist excluded as in Kaldi
    banks = np.zeros((n_mels, nfft // 2))
    for m in range(n_mels):
        left, center, right = lo + m * delta, lo + (m + 1) * delta, lo + (m + 2) * delta
        up = (bin_mel > left) & (bin_mel <= center)
        down = (bin_mel > center) & (bin_mel < right)
        banks[m, up] = (bin_mel[up] - left) / (center - left)
        banks[m, down] = (right - bin_mel[down]) / (right - center)
    energies = spec[:, : nfft // 2] @ banks.T
    return np.log(np.maximum(energies, np.finfo(np.float32).eps))


def test_fbank_matches_independent_numpy_reference() -> None:
    x = _signal(8000, seed=3)
    ref = _kaldi_reference(x)
    got = fbank(x)
    assert got.shape == ref.shape
    # float32 (kaldi-native-fbank) vs float64 (numpy); measured max difference ~1e-4 on values of 5-20
    assert np.abs(got - ref).max() < 1e-3, np.abs(got - ref).max()
    # the 32768 scaling happens exactly once: a float signal 1/32768 quieter than ref lands 2*ln(32768) lower
    assert abs(float(np.median(_kaldi_reference(x / 32768.0)) - np.median(ref)) + 2 * np.log(32768)) < 0.05


def test_scaling_is_power_law() -> None:
    x = _signal(8000)
    d = fbank(0.5 * x) - fbank(x)
    np.testing.assert_allclose(d, 2 * np.log(0.5), atol=1e-3)


def test_dither_deterministic_and_lifts_digital_silence() -> None:
    z = np.zeros(16000, np.float32)
    assert np.all(fbank(z) == np.float32(LOG_FLOOR))
    a = fbank(z, dither=1.0, dither_seed=dither_seed_for("utt1"))
    b = fbank(z, dither=1.0, dither_seed=dither_seed_for("utt1"))
    c = fbank(z, dither=1.0, dither_seed=dither_seed_for("utt2"))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.min() > LOG_FLOOR + 5  # 1-LSB noise sits far above the log floor
    # and far below real speech: a tone at -20 dBFS is > 8 nats above the noise in its band
    assert np.median(fbank(_signal(16000))) > np.median(a) + 5
    assert fbank_kwargs_from_config({"fbank": {"dither": 1.0, "dither_mode": "silence"}}) == {
        "dither": 1.0, "dither_mode": "silence"}
    assert fbank_kwargs_from_config(None) == {"dither": 0.0, "dither_mode": "all"}


def test_silence_dither_fills_zeros_and_leaves_speech_alone() -> None:
    x = _signal(16000)
    x[:4000] = 0.0
    plain = fbank(x)
    sil = fbank(x, dither=1.0, dither_seed=1, dither_mode="silence")
    assert np.all(plain[:20] == np.float32(LOG_FLOOR)) and sil[:20].min() > LOG_FLOOR + 5
    np.testing.assert_allclose(sil[30:], plain[30:], atol=1e-3)  # speech frames: (almost) untouched
    quiet = x[4000:] * np.float32(0.01)  # peak ~0.004 like FLEURS: Kaldi dither changes it, silence mode not
    d_all = np.abs(fbank(quiet, dither=1.0, dither_mode="all") - fbank(quiet)).mean()
    d_sil = np.abs(fbank(quiet, dither=1.0, dither_mode="silence") - fbank(quiet)).mean()
    assert d_sil < 0.05 < d_all
    with pytest.raises(ValueError):
        OnlineFbank(dither=1.0, dither_mode="loud")


def test_bad_input() -> None:
    with pytest.raises(TypeError):
        fbank(np.zeros(1000, np.int16))
    with pytest.raises(ValueError, match="NaN"):
        fbank(np.full(1000, np.nan, np.float32))
    with pytest.raises(ValueError):
        fbank(np.zeros((2, 1000), np.float32))
    f = OnlineFbank()
    f.input_finished()
    with pytest.raises(ValueError):
        f.accept_waveform(np.zeros(10, np.float32))


def test_global_cmvn_streaming_sums(tmp_path) -> None:
    rng = np.random.default_rng(0)
    utts = [rng.normal(3.0, 2.0, size=(int(rng.integers(5, 50)), 80)).astype(np.float32) for _ in range(20)]
    acc = CMVNAccumulator()
    for u in utts:
        acc.add(u)
    g = acc.finalize()
    cat = np.concatenate(utts).astype(np.float64)
    np.testing.assert_allclose(g.mean, cat.mean(0), rtol=1e-5)
    np.testing.assert_allclose(g.std, cat.std(0), rtol=1e-4)
    assert g.count == cat.shape[0]
    g.save(tmp_path / "gcmvn.npz")
    g2 = GlobalCMVN.load(tmp_path / "gcmvn.npz")
    np.testing.assert_array_equal(g2.mean, g.mean)
    z = g2(cat.astype(np.float32))
    np.testing.assert_allclose(z.mean(0), 0, atol=1e-3)
    np.testing.assert_allclose(z.std(0), 1, atol=1e-3)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(np.stack([utts[0][:5], utts[1][:5]]))
    out = g2(t)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 5, 80) and out.dtype == torch.float32
    np.testing.assert_allclose(out[0].numpy(), g2.cmvn(utts[0][:5]), atol=1e-6)
    with pytest.raises(ValueError):
        CMVNAccumulator().finalize()


def test_utterance_cmvn() -> None:
    x = np.random.default_rng(1).normal(4.0, 3.0, size=(200, 80)).astype(np.float32)
    y = utterance_cmvn(x)
    np.testing.assert_allclose(y.mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(y.std(0), 1, atol=1e-3)
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(utterance_cmvn(torch.from_numpy(x)).numpy(), y, atol=1e-4)
    np.testing.assert_allclose(utterance_cmvn(x, norm_vars=False).std(0), x.std(0), rtol=1e-5)


def test_causal_peak_gain_is_chunk_invariant_and_causal():
    from mmst.gain import PEAK_GAIN_FLOOR, CausalPeakGain, causal_peak_normalize

    rng = np.random.default_rng(3)
    x = (0.004 * rng.standard_normal(16000)).astype(np.float32)
    x[9000] = 0.02  # the loudest sample arrives late
    whole = causal_peak_normalize(x, 0.5)
    g = CausalPeakGain(0.5)
    chunked = np.concatenate([g(x[i : i + 777]) for i in range(0, x.size, 777)])
    np.testing.assert_array_equal(chunked, whole)
    assert np.abs(whole).max() <= 0.5 + 1e-6
    # causal: before sample 9000 the gain ignores the future peak; from it on it is the clip gain
    p = max(float(np.abs(x[:9000]).max()), PEAK_GAIN_FLOOR)
    np.testing.assert_allclose(whole[8999], x[8999] * 0.5 / p, rtol=1e-6)
    np.testing.assert_allclose(whole[9000:], x[9000:] * (0.5 / 0.02), rtol=1e-6)
    # digital silence is not blown up past target / floor
    assert np.abs(causal_peak_normalize(np.full(100, 1e-5, np.float32), 0.5)).max() <= 0.5 * 1e-5 / PEAK_GAIN_FLOOR + 1e-9
    with pytest.raises(ValueError, match="in \\(0, 1\\]"):
        CausalPeakGain(2.0)


def test_gain_and_cmvn_names_stay_importable_from_features():
    """The gain and CMVN moved to their own modules; code that imports them from mmst.features still works."""
    import mmst.cmvn
    import mmst.features
    import mmst.gain

    for mod, names in ((mmst.cmvn, ("GlobalCMVN", "CMVNAccumulator", "utterance_cmvn")),
                       (mmst.gain, ("CausalPeakGain", "causal_peak_normalize", "PEAK_GAIN_FLOOR", "QUIET_PEAK"))):
        for name in names:
            assert getattr(mmst.features, name) is getattr(mod, name), name
