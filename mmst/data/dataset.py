"""Multi-way speech translation dataset over a DATA directory (see docs/CONTRACTS.md).

One item = one English utterance with its translations in every target language:

* fbank ``(T, 80)`` float32 read from ``fbank80.zip`` (raw) with global CMVN (``gcmvn.npz``) applied;
  or, for waveform encoders (``input_kind="waveform"``, the pretrained encoders of
  :mod:`mmst.models.hf_encoder`), the 16 kHz samples ``(N, 1)`` read on the fly from the row's
  ``wav`` / ``offset`` / ``duration`` (the DATA's ``fbank.peak_normalize`` gain applied, causally, as the
  streaming front end applies it); lengths for batching stay the manifest's ``n_frames``;
* ``tokens[lang]``: SentencePiece ids of ``tgt_text_<lang>`` (no bos/eos), or ``None`` when the cell is
  empty (=> an all-pad row after collation, masked out of the loss);
* ``src_tokens``: ids of ``src_text`` with the English vocab (``vocab.src``), for the CTC loss.

Target vocabularies: ``"joint"`` uses ``vocab.joint`` for every language (unified and separate models),
``"per_lang"`` uses ``vocab.per_lang[lang]`` (separate models only).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mmst.data.batching import Batch, collate

#: what the model's encoder reads (``ModelConfig.input_kind``)
INPUT_KINDS = ("fbank", "waveform")
#: a segment may end this far past its audio file (shortened); the corpus builders' default ``end_tolerance_ms``
WAV_END_TOLERANCE_S = 0.01


class LanguageMismatchError(ValueError):
    """The languages of a manifest / DATA directory do not match what the model or config expects."""


def check_languages(available: Sequence[str], expected: Sequence[str], what: str = "manifest",
                    against: str = "model") -> None:
    """Raise :class:`LanguageMismatchError` unless ``available`` == ``expected`` as SETS.

    Order is not required to match (items are keyed by language), but every language of ``expected``
    must be present and nothing else.
    """
    a, e = list(available), list(expected)
    if set(a) != set(e):
        missing = [x for x in e if x not in a]
        extra = [x for x in a if x not in e]
        raise LanguageMismatchError(
            f"{what} languages {a} do not match the {against} languages {e}"
            + (f"; missing {missing}" if missing else "") + (f"; unexpected {extra}" if extra else ""))


def load_data_config(data_dir: str | Path) -> dict[str, Any]:
    """``DATA/config.yaml`` as a dict (``mmst.data.corpus.load_data_config`` when available).

    Raises:
        FileNotFoundError: no ``config.yaml`` in ``data_dir``.
    """
    try:
        from mmst.data.corpus import load_data_config as _load
    except ImportError:
        _load = None
    if _load is not None:
        return _load(data_dir)
    import yaml

    path = Path(data_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"DATA config not found: {path}")
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _resolve(data_dir: Path, p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else data_dir / q


class MultiwayDataset(torch.utils.data.Dataset):
    """Dataset over ``DATA/<split>.tsv``.

    Args:
        data_dir: DATA directory (with ``config.yaml``).
        split: split name (``DATA/<split>.tsv``).
        tgt_langs: target languages to load (default: ``config.yaml`` ``tgt_langs``). Each must have a
            ``tgt_text_<lang>`` column.
        vocab_mode: ``"joint"`` or ``"per_lang"`` (see module docstring).
        start_token_ids: first decoder input per language; default: ``<lang:xx>`` ids of the joint
            vocab when ``lang_tag_start`` else bos (0).
        lang_tag_start: True for the unified model (tag replaces BOS).
        max_frames: drop utterances with more frames than this (``n_dropped`` counts them).
        cache_features: keep CMVN-normalised features in memory after the first read.
        with_src: tokenise ``src_text`` for CTC (needs ``vocab.src``).
        augment: training-time feature augmentation (:class:`mmst.data.augment.FeatureAugment`), applied
            per utterance after CMVN with the epoch set by :meth:`set_epoch`; ``None`` (validation,
            inference) = features as stored. Fbank input only.
        input_kind: ``"fbank"`` (default) or ``"waveform"`` (see the module docstring).

    Raises:
        FileNotFoundError: missing manifest / config / vocab / cmvn file (message names it).
        LanguageMismatchError: a requested language has no ``tgt_text_<lang>`` column.
        ValueError: empty manifest (after filtering); an unknown ``input_kind``; waveform input with an
            ``augment`` or a manifest without a ``wav`` column.
    """

    def __init__(self, data_dir: str | Path, split: str, tgt_langs: Sequence[str] | None = None,
                 vocab_mode: str = "joint", start_token_ids: dict[str, int] | None = None,
                 lang_tag_start: bool = False, max_frames: int | None = None, cache_features: bool = False,
                 with_src: bool = True, augment: Any = None, input_kind: str = "fbank") -> None:
        from mmst.cmvn import GlobalCMVN
        from mmst.data.manifest import read_manifest, tgt_langs_of
        from mmst.data.vocab import Vocab

        self.data_dir = Path(data_dir)
        self.split = split
        self.data_cfg = load_data_config(self.data_dir)
        manifest = self.data_dir / f"{split}.tsv"
        if not manifest.is_file():
            raise FileNotFoundError(f"manifest not found: {manifest}")
        rows = read_manifest(manifest)
        if not rows:
            raise ValueError(f"{manifest}: no utterances")
        if input_kind not in INPUT_KINDS:
            raise ValueError(f"input_kind must be one of {INPUT_KINDS}, got {input_kind!r}")
        if input_kind == "waveform" and augment is not None:
            raise ValueError("waveform input: feature augmentation applies to fbank only (the pretrained "
                             "encoder masks its own frames, HFSpeechEncoder.set_time_masking)")
        if input_kind == "waveform" and "wav" not in rows[0]:
            raise ValueError(f"{manifest}: no 'wav' column; waveform input reads the audio from wav/offset/duration")
        self.input_kind = input_kind
        self.manifest_langs = tgt_langs_of(rows[0].keys())
        self.tgt_langs = list(tgt_langs) if tgt_langs is not None else list(self.data_cfg["tgt_langs"])
        missing = [lang for lang in self.tgt_langs if lang not in self.manifest_langs]
        if missing:
            raise LanguageMismatchError(f"{manifest}: no tgt_text_ column for {missing} "
                                        f"(manifest languages: {self.manifest_langs})")
        vcfg = self.data_cfg.get("vocab", {})
        if vocab_mode not in ("joint", "per_lang"):
            raise ValueError(f"vocab_mode must be 'joint' or 'per_lang', got {vocab_mode!r}")
        self.vocab_mode = vocab_mode
        self.vocab_paths: dict[str, Path] = {}
        if vocab_mode == "joint":
            jp = _resolve(self.data_dir, vcfg["joint"])
            joint = Vocab.load(jp)
            self.joint_vocab = joint
            self.tgt_vocabs = {lang: joint for lang in self.tgt_langs}
            self.vocab_paths = {lang: jp for lang in self.tgt_langs}
        else:
            per = vcfg.get("per_lang") or {}
            self.joint_vocab = None
            self.tgt_vocabs, self.vocab_paths = {}, {}
            for lang in self.tgt_langs:
                if lang not in per:
                    raise FileNotFoundError(f"{self.data_dir}/config.yaml: no vocab.per_lang entry for {lang!r}")
                self.vocab_paths[lang] = _resolve(self.data_dir, per[lang])
                self.tgt_vocabs[lang] = Vocab.load(self.vocab_paths[lang])
        self.src_vocab = None
        self.src_vocab_path: Path | None = None
        if with_src and vcfg.get("src"):
            self.src_vocab_path = _resolve(self.data_dir, vcfg["src"])
            self.src_vocab = Vocab.load(self.src_vocab_path)
        if start_token_ids is None:
            if lang_tag_start:
                if self.joint_vocab is None:
                    raise ValueError("lang_tag_start needs the joint vocab")
                start_token_ids = {lang: self.joint_vocab.lang_tag_id(lang) for lang in self.tgt_langs}
            else:
                start_token_ids = {lang: 0 for lang in self.tgt_langs}
        self.start_token_ids = dict(start_token_ids)
        gpath = self.data_cfg.get("gcmvn")
        self.cmvn = GlobalCMVN.load(_resolve(self.data_dir, gpath)) if gpath else None
        all_frames = np.array([int(r["n_frames"]) for r in rows], dtype=np.int64)
        keep = np.ones(len(rows), dtype=bool) if max_frames is None else all_frames <= max_frames
        self.n_dropped = int((~keep).sum())
        self.rows = [r for r, k in zip(rows, keep.tolist()) if k]
        if not self.rows:
            raise ValueError(f"{manifest}: all {len(rows)} utterances are longer than max_frames={max_frames}")
        self.n_frames = all_frames[keep]
        self.ids = [r["id"] for r in self.rows]
        self.cache_features = cache_features
        self._cache: dict[int, torch.Tensor] = {}
        self.augment = augment
        self.epoch = 1

    def set_epoch(self, epoch: int) -> None:
        """Epoch (1-based) whose augmentation draws :meth:`__getitem__` uses (called by the batch iterator)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        """Number of utterances (after ``max_frames`` filtering)."""
        return len(self.rows)

    def features(self, i: int) -> torch.Tensor:
        """CMVN-normalised fbank of item ``i``: ``(T, 80)`` float32 tensor (waveform input: the samples
        ``(N, 1)``, see :meth:`waveform`)."""
        if i in self._cache:
            return self._cache[i]
        if self.input_kind == "waveform":
            feats = self.waveform(i)[:, None]
        else:
            from mmst.data.store import read_feature

            feats = read_feature(self.data_dir, self.rows[i]["audio"]).astype(np.float32, copy=False)
            if self.cmvn is not None:
                feats = self.cmvn(feats)
        t = torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32))
        if self.cache_features:
            self._cache[i] = t
        return t

    def waveform(self, i: int) -> np.ndarray:
        """16 kHz mono samples ``(N,)`` float32 of item ``i`` from its ``wav``/``offset``/``duration``, with
        the DATA's ``fbank.peak_normalize`` gain (:func:`mmst.features.causal_peak_normalize`) when set.

        Raises:
            ValueError: an empty ``wav`` cell (names the manifest and utterance).
            mmst.audio.AudioError: the file cannot be read or the segment lies outside it.
        """
        from mmst.audio import load_audio
        from mmst.gain import causal_peak_normalize

        row = self.rows[i]
        if not row.get("wav"):
            raise ValueError(f"{self.data_dir / (self.split + '.tsv')}: utterance {row['id']}: field 'wav' is empty")
        dur = float(row["duration"]) if row.get("duration") not in (None, "") else None
        x = load_audio(row["wav"], float(row.get("offset") or 0.0), dur, end_tolerance_s=WAV_END_TOLERANCE_S)
        peak = (self.data_cfg.get("fbank") or {}).get("peak_normalize")
        return causal_peak_normalize(x, float(peak)) if peak is not None else x

    def tokens(self, i: int) -> dict[str, list[int] | None]:
        """Target token ids (no bos/eos) per language of item ``i``; ``None`` = empty cell."""
        row = self.rows[i]
        out: dict[str, list[int] | None] = {}
        for lang in self.tgt_langs:
            text = row.get(f"tgt_text_{lang}", "")
            out[lang] = self.tgt_vocabs[lang].encode(text) if text.strip() else None
        return out

    def reference(self, i: int, lang: str) -> str:
        """The raw reference text of item ``i`` in ``lang`` ('' when missing)."""
        return self.rows[i].get(f"tgt_text_{lang}", "")

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Item dict: ``index``, ``id``, ``fbank (T, 80)`` (waveform input: samples ``(N, 1)``),
        ``tokens {lang: list|None}``, ``src_tokens``.

        ``fbank`` is augmented (a new tensor) when the dataset has an active ``augment``.
        """
        src = None
        if self.src_vocab is not None:
            text = self.rows[i].get("src_text", "")
            src = self.src_vocab.encode(text) if text.strip() else None
        feats = self.features(i)
        if self.augment is not None:
            feats = self.augment(feats, self.epoch, i)
        return {"index": i, "id": self.rows[i]["id"], "fbank": feats, "tokens": self.tokens(i),
                "src_tokens": src}

    def collater(self, items: list[dict[str, Any]]) -> Batch:
        """Collate items into a :class:`mmst.data.batching.Batch` (pad=1, eos=2)."""
        return collate(items, self.tgt_langs, self.start_token_ids)

    def vocab_info(self) -> dict[str, Any]:
        """Fingerprints ``{"tgt": {lang: {"path","size","sha256"}}, "src": ...}`` for checkpoints."""
        from mmst.data.vocab import vocab_fingerprint

        info: dict[str, Any] = {"tgt": {lang: vocab_fingerprint(self.vocab_paths[lang], len(self.tgt_vocabs[lang]))
                                        for lang in self.tgt_langs}, "src": None}
        if self.src_vocab is not None and self.src_vocab_path is not None:
            info["src"] = vocab_fingerprint(self.src_vocab_path, len(self.src_vocab))
        return info
