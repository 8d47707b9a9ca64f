"""The one loader: a trained model with everything needed to run it, as one self-describing object.

:func:`load_bundle` takes what ``--model`` names, an exported model folder (``mmst-export``; layout in
:mod:`mmst.models.checkpoint`) or a training checkpoint, and returns a :class:`ModelBundle`: the model,
its target vocabularies, its CMVN, the feature settings the training data was computed with (fbank
dither, causal peak gain), the languages to decode and where each of them came from. In the spirit of
Hugging Face ``from_pretrained(dir)``, a model folder carries all of it; a training checkpoint takes
them from its DATA directory (``data_dir``, default the one the checkpoint records). Either way a DATA
directory given with a model folder is read only for test utterances (:mod:`mmst.evaluation.utterances`).

Every consumer loads through here, once per run: ``mmst-eval``, ``mmst-eval-longform``,
``mmst-transcribe-stream``, the SimulEval agent (:mod:`mmst.agents`), ``mmst-serve`` and the
benchmarks. :mod:`mmst.evaluation.loading` keeps the older names (``load_system``, ``EvalSystem``).

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

from mmst.evaluation.translator_input import FeatureMatchedTranslator, PeakGainTranslator

logger = logging.getLogger("mmst.evaluation.loading")  # the name users' logging configuration knows


class LoadError(RuntimeError):
    """A model/DATA/language problem, with a one-line message naming the file or key."""


def _resolve(base: Path, p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else base / q


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
    """Validate requested languages against the model's (duplicates dropped, order kept).

    Raises:
        LoadError: a requested language is not decoded by the model.
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


def _load_vocabs(data_dir: Path, ckpt: dict[str, Any], model: Any, langs: list[str],
                 dcfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Path]]:
    """``({lang: Vocab}, {lang: its SentencePiece file})``; see :func:`load_target_vocabs`. Each file is read
    once: the vocabulary and its SHA-256 fingerprint come from the same bytes."""
    from mmst.data.vocab import Vocab, vocab_fingerprint
    from mmst.models.checkpoint import VocabMismatchError, check_vocab_compat

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
    protos: dict[Path, bytes] = {}
    cache: dict[Path, Any] = {}
    for lang, p in paths.items():
        if not p.is_file():
            raise LoadError(f"vocabulary file not found: {p}")
        if p not in cache:
            protos[p] = p.read_bytes()
            cache[p] = Vocab(protos[p], str(p))
        vocabs[lang] = cache[p]
    saved = ckpt.get("vocab") or {}
    if saved.get("tgt"):
        current = {"tgt": {lang: vocab_fingerprint(paths[lang], len(vocabs[lang]), protos[paths[lang]])
                           for lang in langs}}
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
    return vocabs, paths


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
    return _load_vocabs(data_dir, ckpt, model, langs, _data_config(data_dir, dcfg))[0]


def _cmvn_path(data_dir: Path, dcfg: dict[str, Any]) -> Path | None:
    """The ``gcmvn`` file named by ``dcfg`` (None when absent, with a warning).

    Raises:
        LoadError: the file is named but missing.
    """
    p = dcfg.get("gcmvn") or dcfg.get("global_cmvn")
    if isinstance(p, dict):
        p = p.get("stats_npz_path")
    if not p:
        logger.warning("%s: no gcmvn in config.yaml; features are not normalised", data_dir)
        return None
    path = _resolve(data_dir, p)
    if not path.is_file():
        raise LoadError(f"CMVN stats not found: {path}")
    return path


def load_cmvn(data_dir: Path, dcfg: dict[str, Any] | None = None) -> Any:
    """``mmst.features.GlobalCMVN`` from the ``gcmvn`` entry of ``dcfg`` (default ``DATA/config.yaml``;
    paths relative to ``data_dir``); None when absent, with a warning.

    Raises:
        LoadError: no ``config.yaml``, or the stats file it names is missing.
    """
    from mmst.cmvn import GlobalCMVN

    path = _cmvn_path(data_dir, _data_config(data_dir, dcfg))
    return None if path is None else GlobalCMVN.load(path)


class ModelBundle:
    """A loaded model with everything needed to run it; builds :class:`mmst.simultaneous.StreamingTranslator` s.

    Made by :func:`load_bundle` (``mmst.evaluation.loading.EvalSystem`` is this class).

    Attributes:
        model: the ``MMSTModel`` (eval mode, on its device).
        ckpt: the checkpoint dict, or a model folder's info (:func:`mmst.models.checkpoint.load_model_dir`).
        data_dir: DATA directory of the test utterances; ``None`` for a model folder loaded without one.
        tgt_langs: selected target languages (validated against the model).
        vocabs: ``{lang: Vocab}``; ``cmvn``: ``GlobalCMVN`` or None.
        data_cfg: the data section the features were made with (a folder's ``config.json`` ``data``, or
            ``DATA/config.yaml``).
        fbank_kwargs: fbank settings of those features (``dither``, ``dither_mode``).
        peak_normalize: target peak of the features' causal gain (``mmst.features.CausalPeakGain``;
            None = off).
        source: the model folder or checkpoint it was loaded from (as given); None when built by hand.
        resources_dir: where the vocabularies and CMVN were read (the model folder, or the checkpoint's
            DATA directory).
        vocab_paths: ``{lang: SentencePiece model file}``; ``cmvn_path``: the CMVN stats file or None.
    """

    def __init__(self, model: Any, ckpt: dict[str, Any], data_dir: Path | None, tgt_langs: list[str],
                 vocabs: dict[str, Any], cmvn: Any, data_cfg: dict[str, Any] | None = None, *,
                 source: str | Path | None = None, resources_dir: Path | None = None,
                 vocab_paths: dict[str, Path] | None = None, cmvn_path: Path | None = None) -> None:
        from mmst.features import fbank_kwargs_from_config

        self.model, self.ckpt, self.data_dir = model, ckpt, data_dir
        self.tgt_langs, self.vocabs, self.cmvn = tgt_langs, vocabs, cmvn
        self.data_cfg = data_cfg or {}
        self.source = Path(source) if source is not None else None
        self.resources_dir = resources_dir
        self.vocab_paths = dict(vocab_paths or {})
        self.cmvn_path = cmvn_path
        self.fbank_kwargs: dict[str, Any] = fbank_kwargs_from_config(self.data_cfg)
        fb = self.data_cfg.get("fbank") or {}
        self.peak_normalize: float | None = fb.get("peak_normalize")

    @property
    def is_model_dir(self) -> bool:
        """True when loaded from an exported model folder (not a training checkpoint)."""
        return bool(self.ckpt.get("model_dir"))

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

        Its features reproduce the training data's (:attr:`fbank_kwargs`): passed to the translator when
        it accepts ``fbank_kwargs``, otherwise applied to the waveform by
        :class:`~mmst.evaluation.translator_input.FeatureMatchedTranslator`. When the data was prepared
        with ``fbank.peak_normalize``, the translator is wrapped in
        :class:`~mmst.evaluation.translator_input.PeakGainTranslator` (the same causal gain as the prep),
        so every consumer streams the same features.

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


def load_bundle(
    model: str | Path,
    data_dir: str | Path | None = None,
    tgt_langs: list[str] | None = None,
    device: str = "cpu",
    quantize: str = "none",
) -> ModelBundle:
    """Load ``model`` with its vocabularies (checked against it), CMVN and feature settings, reading each
    file once.

    Args:
        model: a model folder (``mmst-export``) or an mmst training checkpoint (``--model``).
        data_dir: a model folder: the DATA directory of the test utterances only (may be ``None``; nothing
            else is read from it); a checkpoint: its DATA directory (vocabularies, CMVN, feature
            settings, test utterances), default the one it records.
        tgt_langs: languages to decode (default: all of the model's).
        device: torch device.
        quantize: ``none`` or ``int8`` (``--quantize``; see :func:`mmst.models.quantize.quantize_model`).

    Raises:
        LoadError: see the module docstring; ``quantize`` unknown or ``int8`` off the CPU.
    """
    from mmst.cmvn import GlobalCMVN

    net, ckpt = load_checkpoint_model(model, device, quantize)
    langs = select_langs(list(net.tgt_langs), tgt_langs)
    if ckpt.get("model_dir"):  # a model folder carries its own vocabularies, CMVN and feature settings
        res_dir, dcfg = Path(ckpt["model_dir"]), ckpt["data_config"]
        ddir = Path(data_dir) if data_dir is not None else None
    else:
        ddir = res_dir = resolve_data_dir(model, data_dir, ckpt)
        dcfg = _data_config(res_dir, None)
    vocabs, vocab_paths = _load_vocabs(res_dir, ckpt, net, langs, dcfg)
    cmvn_path = _cmvn_path(res_dir, dcfg)
    cmvn = None if cmvn_path is None else GlobalCMVN.load(cmvn_path)
    return ModelBundle(net, ckpt, ddir, langs, vocabs, cmvn, dcfg, source=model, resources_dir=res_dir,
                       vocab_paths=vocab_paths, cmvn_path=cmvn_path)
