"""Load a model (an exported model folder, or a checkpoint + its DATA resources) and build the streaming
translator used by evaluation, the SimulEval agent and ``mmst-serve``.

A model folder (``mmst-export``; :mod:`mmst.models.checkpoint`) carries its vocabularies, CMVN and
feature settings; a DATA directory given with it only says where test utterances come from. A
training checkpoint takes them from a DATA directory (``--data``, else the one it records).

Checks done here turn configuration mistakes into one-line :class:`LoadError` messages (the CLIs
print them without a traceback):

- the model is missing, not an mmst model folder or checkpoint, or a file of the folder is missing or
  does not fit (a tensor of the wrong shape);
- a requested target language is not decoded by the model;
- the DATA vocabulary differs from the one the checkpoint was trained with ("a checkpoint from
  another vocab"): SentencePiece model size and SHA-256 must match the checkpoint's fingerprints
  (``mmst.models.checkpoint.check_vocab_compat``); without fingerprints, the vocab sizes must
  match the model's output sizes.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

import numpy as np

from mmst.features import KALDI_INT16_SCALE, Dither, dither_seed_for
from mmst.models.stacked import steps_of

logger = logging.getLogger("mmst.evaluation.loading")


class LoadError(RuntimeError):
    """A checkpoint/DATA/language problem, with a one-line message."""


def _resolve(data_dir: Path, p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else data_dir / q


def load_checkpoint_model(checkpoint: str | Path, device: str = "cpu",
                          quantize: str = "none") -> tuple[Any, dict[str, Any]]:
    """``(model in eval mode, info)`` from a model folder or one of our checkpoints
    (:func:`mmst.models.checkpoint.load_model`; ``info`` is the checkpoint dict or the folder's info).

    ``quantize``: ``none`` (fp32) or ``int8`` (dynamic int8 linear layers,
    :func:`mmst.models.quantize.quantize_model`; CPU only).

    Raises:
        LoadError: missing/unreadable file, not an mmst model, incompatible weights; ``quantize``
            unknown or ``int8`` on a non-CPU device.
    """
    from mmst.models.checkpoint import CheckpointError, load_model
    from mmst.models.quantize import quantize_model

    try:
        model, ckpt = load_model(checkpoint, map_location="cpu")
    except (CheckpointError, ValueError, RuntimeError, KeyError) as e:
        raise LoadError(f"cannot load model {checkpoint}: {e}") from None
    model.to(device)
    model.eval()
    try:
        quantize_model(model, quantize)
    except ValueError as e:
        raise LoadError(str(e)) from None
    return model, ckpt


def resolve_data_dir(checkpoint: str | Path, data_dir: str | Path | None, ckpt: dict[str, Any] | None = None) -> Path:
    """``data_dir`` if given, else the ``data_dir`` stored in the checkpoint.

    Raises:
        LoadError: neither is available or the directory has no ``config.yaml``.
    """
    if data_dir is None:
        if ckpt is None:
            from mmst.models.checkpoint import CheckpointError, load_checkpoint

            try:
                ckpt = load_checkpoint(checkpoint)
            except CheckpointError as e:
                raise LoadError(str(e)) from None
        data_dir = ckpt.get("data_dir")
        if not data_dir:
            raise LoadError(f"{checkpoint} records no data_dir: pass the DATA directory "
                            "(--data; --mmst-data for the SimulEval agent)")
    d = Path(data_dir)
    if not (d / "config.yaml").is_file():
        raise LoadError(f"{d}: no config.yaml (not a DATA directory)")
    return d


def select_langs(model_langs: list[str], requested: list[str] | None) -> list[str]:
    """Validate requested languages against the model's.

    Raises:
        LoadError: a requested language is not decoded by the model, or the list is empty.
    """
    if not requested:
        return list(model_langs)
    bad = [lang for lang in requested if lang not in model_langs]
    if bad:
        raise LoadError(
            f"target language(s) {', '.join(bad)} not in the model (model languages: {', '.join(model_langs)})"
        )
    seen: list[str] = []
    for lang in requested:
        if lang not in seen:
            seen.append(lang)
    return seen


def _data_config(data_dir: Path, dcfg: dict[str, Any] | None) -> dict[str, Any]:
    if dcfg is not None:
        return dcfg
    from mmst.data.dataset import load_data_config

    try:
        return load_data_config(data_dir)
    except (FileNotFoundError, ValueError) as e:
        raise LoadError(str(e)) from None


def load_target_vocabs(data_dir: Path, ckpt: dict[str, Any], model: Any, langs: list[str],
                       dcfg: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{lang: mmst.data.vocab.Vocab}`` from DATA (or a model folder), checked against the checkpoint.

    The vocab mode (``joint`` / ``per_lang``) is the checkpoint's ``vocab_mode`` (default ``joint``).
    ``dcfg``: the configuration naming the files (paths relative to ``data_dir``); default
    ``DATA/config.yaml``.

    Raises:
        LoadError: missing vocab file, or a vocab that differs from the checkpoint's (size/SHA-256),
            or whose size differs from the model's output layer.
    """
    from mmst.data.vocab import Vocab, vocab_fingerprint
    from mmst.models.checkpoint import VocabMismatchError, check_vocab_compat

    dcfg = _data_config(data_dir, dcfg)
    vcfg = dcfg.get("vocab") or {}
    mode = ckpt.get("vocab_mode") or ("per_lang" if model.cfg.vocab_sizes else "joint")
    paths: dict[str, Path] = {}
    for lang in langs:
        if mode == "per_lang":
            p = (vcfg.get("per_lang") or {}).get(lang)
            if not p:
                raise LoadError(f"{data_dir}/config.yaml: no vocab.per_lang entry for {lang!r}")
        else:
            p = vcfg.get("joint")
            if not p:
                raise LoadError(f"{data_dir}/config.yaml: no vocab.joint entry")
        paths[lang] = _resolve(data_dir, p)
    vocabs: dict[str, Any] = {}
    cache: dict[Path, Any] = {}
    for lang, p in paths.items():
        if not p.is_file():
            raise LoadError(f"vocabulary file not found: {p}")
        if p not in cache:
            cache[p] = Vocab.load(p)
        vocabs[lang] = cache[p]
    saved = ckpt.get("vocab") or {}
    if saved.get("tgt"):
        current = {"tgt": {lang: vocab_fingerprint(paths[lang], len(vocabs[lang])) for lang in langs}}
        sub = {"tgt": {lang: fp for lang, fp in saved["tgt"].items() if lang in langs}}
        try:
            check_vocab_compat(sub, current, where="checkpoint")
        except VocabMismatchError as e:
            raise LoadError(f"checkpoint from another vocabulary: {e}") from None
    for lang in langs:
        want = model.vocab_size(lang) if hasattr(model, "vocab_size") else None
        if want is not None and int(want) != len(vocabs[lang]):
            raise LoadError(
                f"checkpoint from another vocabulary: model outputs {want} {lang} tokens, "
                f"{paths[lang]} has {len(vocabs[lang])}"
            )
    return vocabs


def load_cmvn(data_dir: Path, dcfg: dict[str, Any] | None = None) -> Any:
    """``mmst.features.GlobalCMVN`` from the ``gcmvn`` entry of ``dcfg`` (default ``DATA/config.yaml``;
    paths relative to ``data_dir``); None when absent, with a warning."""
    from mmst.cmvn import GlobalCMVN

    dcfg = _data_config(data_dir, dcfg)
    p = dcfg.get("gcmvn") or dcfg.get("global_cmvn")
    if isinstance(p, dict):
        p = p.get("stats_npz_path")
    if not p:
        logger.warning("%s: no gcmvn in config.yaml; features are not normalised", data_dir)
        return None
    path = _resolve(data_dir, p)
    if not path.is_file():
        raise LoadError(f"CMVN stats not found: {path}")
    return GlobalCMVN.load(path)


class EvalSystem:
    """A loaded model with its resources; builds :class:`mmst.simultaneous.StreamingTranslator` s.

    Attributes:
        model: the ``MMSTModel`` (eval mode, on ``device``).
        ckpt: the checkpoint dict (or a model folder's info, :func:`mmst.models.checkpoint.load_model_dir`).
        data_dir: DATA directory of the test utterances (and, for a checkpoint, of vocab and CMVN);
            ``None`` for a model folder loaded without one.
        tgt_langs: selected target languages (validated against the model).
        vocabs: ``{lang: Vocab}``; ``cmvn``: ``GlobalCMVN`` or None.
    """

    def __init__(self, model: Any, ckpt: dict[str, Any], data_dir: Path, tgt_langs: list[str],
                 vocabs: dict[str, Any], cmvn: Any, data_cfg: dict[str, Any] | None = None) -> None:
        self.model, self.ckpt, self.data_dir = model, ckpt, data_dir
        self.tgt_langs, self.vocabs, self.cmvn = tgt_langs, vocabs, cmvn
        self.data_cfg = data_cfg or {}
        from mmst.features import fbank_kwargs_from_config

        #: fbank settings the DATA's features were computed with (``dither``, ``dither_mode``).
        self.fbank_kwargs: dict[str, Any] = fbank_kwargs_from_config(self.data_cfg)
        fb = self.data_cfg.get("fbank") or {}
        #: target peak of the DATA's causal gain (``mmst.features.CausalPeakGain``; None = off).
        self.peak_normalize: float | None = fb.get("peak_normalize")

    def translator(
        self,
        waitk: int | None = 3,
        *,
        tgt_langs: list[str] | None = None,
        max_len_a: float = 0.0,
        max_len_b: int = 200,
        beam: int = 1,
        encoder_mode: str = "auto",
        min_len: int = 0,
        policy: Any = None,
    ) -> Any:
        """A streaming translator (joint decoding of ``tgt_langs``, default all selected languages).

        ``policy``: one policy (``PolicySpec``, policy object or ``"name:k=v"``) for every language, or
        ``{lang: policy}``; None = wait-k with lagging ``waitk``. ``beam`` > 1 with a streaming policy
        = beam search while streaming (alignatt, edatt, la, holdn).

        Its features reproduce the DATA's (:attr:`fbank_kwargs`): passed to the translator when it
        accepts ``fbank_kwargs``, otherwise applied to the waveform by :class:`FeatureMatchedTranslator`.
        When the DATA was prepared with ``fbank.peak_normalize``, the translator is wrapped in
        :class:`PeakGainTranslator` (the same causal gain as the prep), so the evaluation and the
        SimulEval agent, which both get their translator here, stream the same features.

        Raises:
            LoadError: a language outside the selected ones; invalid k, policy or encoder mode.
        """
        from mmst.simultaneous import StreamingTranslator

        langs = select_langs(self.tgt_langs, tgt_langs)
        kw: dict[str, Any] = {}
        native = "fbank_kwargs" in inspect.signature(StreamingTranslator.__init__).parameters
        if native:
            kw["fbank_kwargs"] = dict(self.fbank_kwargs)
        try:
            tr = StreamingTranslator(
                self.model, {lang: self.vocabs[lang] for lang in langs}, langs, waitk=waitk, cmvn=self.cmvn,
                max_len_a=max_len_a, max_len_b=max_len_b, beam=beam, encoder_mode=encoder_mode, min_len=min_len,
                policy=policy, **kw,
            )
        except ValueError as e:
            raise LoadError(str(e)) from None
        if not native and self.fbank_kwargs.get("dither", 0.0) > 0:
            tr = FeatureMatchedTranslator(tr, **self.fbank_kwargs)
        if self.peak_normalize is not None:
            tr = PeakGainTranslator(tr, float(self.peak_normalize))
        return tr


def load_system(
    checkpoint: str | Path,
    data_dir: str | Path | None = None,
    tgt_langs: list[str] | None = None,
    device: str = "cpu",
    quantize: str = "none",
) -> EvalSystem:
    """Load a model and its vocabularies (checked against it) and CMVN.

    Args:
        checkpoint: a model folder (``mmst-export``) or an mmst checkpoint.
        data_dir: a model folder: the DATA directory of the test utterances only (may be ``None``); a
            checkpoint: its DATA directory (vocab, CMVN, features), default the one it records.
        tgt_langs: languages to decode (default: all of the model's).
        device: torch device.
        quantize: ``none`` or ``int8`` (``--quantize``; see :func:`mmst.models.quantize.quantize_model`).

    Raises:
        LoadError: see the module docstring; ``quantize`` unknown or ``int8`` off the CPU.
    """
    model, ckpt = load_checkpoint_model(checkpoint, device, quantize)
    langs = select_langs(list(model.tgt_langs), tgt_langs)
    if ckpt.get("model_dir"):  # a model folder carries its own vocabularies, CMVN and feature settings
        res_dir, dcfg = Path(ckpt["model_dir"]), ckpt["data_config"]
        ddir = Path(data_dir) if data_dir is not None else None
    else:
        ddir = res_dir = resolve_data_dir(checkpoint, data_dir, ckpt)
        dcfg = _data_config(res_dir, None)
    vocabs = load_target_vocabs(res_dir, ckpt, model, langs, dcfg)
    cmvn = load_cmvn(res_dir, dcfg)
    return EvalSystem(model, ckpt, ddir, langs, vocabs, cmvn, dcfg)


def load_streaming_translator(
    checkpoint: str | Path,
    data_dir: str | Path | None = None,
    tgt_langs: list[str] | None = None,
    waitk: int | None = 3,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    beam: int = 1,
    device: str = "cpu",
    encoder_mode: str = "auto",
    min_len: int = 0,
    policy: Any = None,
    quantize: str = "none",
) -> Any:
    """``load_system(...).translator(...)`` in one call (used by the SimulEval agent).

    Raises:
        LoadError: see the module docstring.
    """
    system = load_system(checkpoint, data_dir, tgt_langs, device, quantize)
    return system.translator(waitk, max_len_a=max_len_a, max_len_b=max_len_b, beam=beam,
                             encoder_mode=encoder_mode, min_len=min_len, policy=policy)


def reset_translator(translator: Any, utt_id: str | None = None) -> None:
    """``translator.reset(utt_id)`` when ``reset`` takes an utterance id (dither seed), else ``reset()``."""
    try:
        takes_id = len(inspect.signature(translator.reset).parameters) >= 1
    except (TypeError, ValueError):
        takes_id = False
    if takes_id and utt_id is not None:
        translator.reset(utt_id)
    else:
        translator.reset()


class FeatureMatchedTranslator:
    """Adds the DATA's fbank dither to the waveform before a translator whose front end has none.

    ``mmst.features.OnlineFbank(dither=d, dither_mode=m)`` adds ``N(0, d)`` (16-bit units) to every
    sample (``all``) or to samples with ``|x| < 0.5`` LSB (``silence``, what the data prep uses: espeak
    audio has exact digital zeros).  Adding ``N(0, d) / 32768`` to the same float samples before the
    translator's dither-free fbank gives the same features; with ``reset(utt_id)`` the noise is drawn
    from ``dither_seed_for(utt_id)`` like the prep, so they match the DATA's up to float rounding.
    Every other attribute is the wrapped translator's.

    Args:
        inner: a translator with ``reset()`` and ``accept_audio(samples, finished)``.
        dither: std in 16-bit units (> 0).
        dither_mode: ``"silence"`` or ``"all"``.
    """

    def __init__(self, inner: Any, dither: float, dither_mode: str = "silence") -> None:
        self.inner = inner
        self.dither = float(dither)
        self.dither_mode = dither_mode
        self._dither = Dither(self.dither, dither_mode, 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def reset(self, utt_id: str | None = None) -> None:
        """Reset the translator; seed the dither from ``utt_id`` (CRC32, as the data prep) or 0."""
        self._dither.reseed(dither_seed_for(utt_id) if utt_id is not None else 0)
        self.inner.reset()

    def accept_audio(self, samples: np.ndarray, finished: bool = False) -> Any:
        """Dither ``samples`` (float32 16 kHz) like the DATA's fbank, then feed the translator."""
        return self.inner.accept_audio(self._dithered(samples), finished=finished)

    def accept_audio_steps(self, samples: np.ndarray, finished: bool = False) -> Any:
        """:meth:`accept_audio` as a generator of compute requests (:mod:`mmst.models.stacked`)."""
        return steps_of(self.inner, "accept_audio", self._dithered(samples), finished=finished)

    def _dithered(self, samples: np.ndarray) -> np.ndarray:
        x = np.array(samples, dtype=np.float32, copy=True).reshape(-1)
        if x.size:
            x = self._dither(x * np.float32(KALDI_INT16_SCALE)) / np.float32(KALDI_INT16_SCALE)
        return x


class PeakGainTranslator:
    """Applies the DATA's causal peak gain (:class:`mmst.features.CausalPeakGain`) before a translator.

    The gain state is per utterance (cleared by :meth:`reset`).  When the utterance ends
    (``finished=True``) an input whose peak stayed below :data:`mmst.features.QUIET_PEAK` is reported
    with a warning (the gain is capped at ``target / PEAK_GAIN_FLOOR``, so its features stay far from
    the training data's).  Every other attribute is the wrapped translator's.

    Args:
        inner: a translator with ``reset()`` and ``accept_audio(samples, finished)``.
        target: the DATA's ``fbank.peak_normalize`` (peak in (0, 1]).

    Raises:
        ValueError: ``target`` outside (0, 1].
    """

    def __init__(self, inner: Any, target: float) -> None:
        from mmst.gain import CausalPeakGain

        self.inner = inner
        self.gain = CausalPeakGain(target)
        self._n = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def reset(self, utt_id: str | None = None) -> None:
        """Reset the gain and the wrapped translator (``utt_id`` passed on when it takes one)."""
        self.gain.reset()
        self._n = 0
        reset_translator(self.inner, utt_id)

    def accept_audio(self, samples: np.ndarray, finished: bool = False) -> Any:
        """Scale ``samples`` (float32, 16 kHz, continuing the utterance), then feed the translator."""
        return self.inner.accept_audio(self._scaled(samples, finished), finished=finished)

    def accept_audio_steps(self, samples: np.ndarray, finished: bool = False) -> Any:
        """:meth:`accept_audio` as a generator of compute requests (:mod:`mmst.models.stacked`)."""
        return steps_of(self.inner, "accept_audio", self._scaled(samples, finished), finished=finished)

    def _scaled(self, samples: np.ndarray, finished: bool) -> np.ndarray:
        from mmst.gain import QUIET_PEAK

        x = self.gain(samples)
        self._n += x.size
        if finished and self._n and self.gain.peak < QUIET_PEAK:
            logger.warning(
                "very quiet input (peak %.1e, %.0f dBFS, below %.0f dBFS): gain capped at %.0f, "
                "features are far from the training data's; check the recording level",
                self.gain.peak, 20 * np.log10(max(self.gain.peak, 1e-12)), 20 * np.log10(QUIET_PEAK),
                self.gain.target / self.gain.floor,
            )
        return x
