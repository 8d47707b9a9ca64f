"""Pretrained Hugging Face speech encoders under the MMST decoders: wav2vec 2.0, HuBERT, WavLM, Whisper.

``ModelConfig.encoder_type = "hf"`` builds :class:`HFSpeechEncoder` from ``hf_encoder_path``, a local
folder written by ``save_pretrained``, read with ``use_safetensors=True``. mmst never downloads: every
``from_pretrained`` call passes ``local_files_only=True``, and a path that is not an existing folder stops
with one line naming it before ``transformers`` is called (a hub id is not a folder). This is the only
module of mmst that imports ``transformers`` (the ``hf`` extra); the registry imports it only for this
encoder type.

Input: the raw 16 kHz waveform ``(B, T_samples)`` (or ``(B, T_samples, 1)``), zero padded, with its
lengths in samples.

* ``Wav2Vec2Model`` / ``HubertModel`` / ``WavLMModel`` read the samples (one frame per 320 samples =
  20 ms for the released models: ``prod(conv_stride)`` samples in general). The attention mask is passed
  only to models with ``feat_extract_norm == "layer"``; the ``"group"`` models (the base models) read
  zero-padded input without one, as their model cards say, so a padded batch row is not exactly the
  utterance alone.
* ``WhisperModel.encoder`` reads its log-mel spectrogram computed by ``transformers``'
  ``WhisperFeatureExtractor`` (the folder's ``preprocessor_config.json``, or one built from the model's
  ``num_mel_bins`` and ``max_source_positions``) over a window that is always padded to
  ``2 * max_source_positions`` mel frames (30 s for the released models): constant cost, and an input
  longer than the window is an error. The valid frames of an utterance of ``L`` samples are
  ``ceil(ceil(L / 160) / 2)`` (20 ms each); the rest of the window is cut off.

Then the hidden state chosen by ``hf_layer`` (the last, a layer index, or a learned softmax-weighted sum of
all of them, SUPERB, Yang et al. 2021) goes through the length adapter: a linear projection to
``d_model``, ``len(conv_kernel_sizes)`` (1 to 3) stride-2 Conv1d + GLU layers (mmst's conv subsampler,
:class:`~mmst.models.encoder.Conv1dSubsampler`, as fairseq's ``Conv1dAdaptor`` in ``xm_transformer``)
and a layer norm. One adapter output state covers ``frame_ms * 2 ** len(conv_kernel_sizes)`` ms (40 ms
with one convolution over 20 ms frames, the unit of mmst's own encoder); the pre-decision ratio R and
the wait-k masks count these states.

Training-time SpecAugment time masks (:meth:`HFSpeechEncoder.set_time_masking`) are applied to the
adapter's input (the chosen hidden states), fairseq's time-mask rule with widths converted from 10 ms
fbank frames to the encoder's frames. The models' own masking (``apply_spec_augment``) is switched off.

``hf_freeze``: ``all`` (the pretrained encoder is frozen and runs in eval mode, without gradients),
``feature_extractor`` (its convolutional front end, and Whisper's convolutions and positions, are
frozen), ``none``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from torch import nn

from .config import ModelConfig
from .encoder import Conv1dSubsampler, EncoderOut, _conv_out_len
from .layers import init_linear
from .masks import lengths_to_padding_mask

SAMPLE_RATE = 16000

#: ``config.json`` ``model_type`` -> the ``transformers`` model class that is loaded.
HF_MODEL_CLASSES = {
    "wav2vec2": "Wav2Vec2Model",
    "hubert": "HubertModel",
    "wavlm": "WavLMModel",
    "whisper": "WhisperModel",
}

#: ``model_type`` -> the ``transformers`` config class (random encoders of :data:`HF_SIZES`).
HF_CONFIG_CLASSES = {"wav2vec2": "Wav2Vec2Config", "hubert": "HubertConfig", "wavlm": "WavLMConfig"}

#: Named sizes of random pretrained-style encoders that :func:`write_random_encoder` writes (to pretrain
#: here, e.g. ``recipes/synthetic/run_backbones.sh``). ``wav2vec2-tiny``: the wav2vec 2.0 architecture
#: (Baevski et al. 2020) at CPU scale, 20 ms frames (conv strides 5 x 4 x 4 x 4 = 320 samples),
#: 4 layers of width 144 (about 1.2M parameters).
HF_SIZES: dict[str, dict] = {
    "wav2vec2-tiny": dict(model_type="wav2vec2", hidden_size=144, num_hidden_layers=4, num_attention_heads=4,
                          intermediate_size=576, conv_dim=(64, 64, 64, 64), conv_stride=(5, 4, 4, 4),
                          conv_kernel=(10, 8, 8, 8), num_conv_pos_embeddings=32, num_conv_pos_embedding_groups=4,
                          feat_extract_norm="layer", do_stable_layer_norm=True),
}


def write_random_encoder(folder: str | Path, size: str, seed: int = 0) -> Path:
    """Write a randomly initialised encoder of the named ``size`` (:data:`HF_SIZES`) to ``folder`` with
    ``save_pretrained`` (safetensors); returns ``folder``.

    Raises:
        ValueError: an unknown size (the message lists the known ones).
    """
    if size not in HF_SIZES:
        raise ValueError(f"unknown encoder size {size!r}; known: {sorted(HF_SIZES)}")
    spec = dict(HF_SIZES[size])
    model_type = spec.pop("model_type")
    torch.manual_seed(seed)
    cfg = getattr(transformers, HF_CONFIG_CLASSES[model_type])(**spec)
    getattr(transformers, HF_MODEL_CLASSES[model_type])(cfg).save_pretrained(folder, safe_serialization=True)
    return Path(folder)


def check_local_folder(path: str) -> None:
    """Raise ``FileNotFoundError`` (one line naming ``hf_encoder_path`` and ``path``) when ``path`` is not
    an existing local folder: mmst reads pretrained encoders from local folders only, so a hub id or a
    relative path read from another directory stops here, before ``transformers`` is called."""
    if not Path(path).is_dir():
        raise FileNotFoundError(f"model config: hf_encoder_path {path!r}: no such folder (mmst reads pretrained "
                                "encoders from local folders only; give the folder's path)")


def load_hf_config(path: str):
    """The ``transformers`` config of the local folder ``path`` (``local_files_only=True``).

    Raises:
        FileNotFoundError: ``path`` is not an existing folder (:func:`check_local_folder`), or has no
            ``config.json``.
        ValueError: the model type is not one of :data:`HF_MODEL_CLASSES` (the message names the folder
            and the supported types).
    """
    check_local_folder(path)
    if not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(f"hf_encoder_path {path}: no config.json (write the folder with save_pretrained)")
    cfg = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    if cfg.model_type not in HF_MODEL_CLASSES:
        raise ValueError(f"hf_encoder_path {path}: model_type {cfg.model_type!r} is not a supported speech "
                         f"encoder (supported: {', '.join(HF_MODEL_CLASSES)})")
    return cfg


class HFSpeechEncoder(nn.Module):
    """Pretrained speech encoder + length adapter; ``forward(wave (B, T), lengths (B,)) -> EncoderOut``.

    Attributes:
        input_kind: ``"waveform"`` (16 kHz samples).
        attention: ``"offline"`` (streaming re-encodes the received audio, :mod:`mmst.simultaneous`).
        model_type: ``wav2vec2``, ``hubert``, ``wavlm`` or ``whisper``.
        frame_ms: duration of one pretrained-encoder frame (20 ms for the released models).
        state_ms: duration of one output state, ``frame_ms * 2 ** len(conv_kernel_sizes)``.
        max_input_samples: Whisper's window in samples (longer input is an error); None = unbounded.

    Args:
        cfg: the model config (``hf_encoder_path``, ``hf_freeze``, ``hf_layer``, adapter sizes).
        pretrained_weights: read the pretrained weights from ``hf_encoder_path`` (training from the
            folder); False builds the encoder from the folder's ``config.json`` alone, for a model whose
            every weight is loaded next (a training checkpoint, an exported model folder).

    Raises:
        ImportError / OSError: the folder cannot be read by ``transformers``.
        FileNotFoundError: ``hf_encoder_path`` is not an existing local folder; ``pretrained_weights`` and a
            folder without ``model.safetensors``.
        ValueError: an unsupported model type.
    """

    input_kind = "waveform"
    attention = "offline"

    def __init__(self, cfg: ModelConfig, pretrained_weights: bool = True) -> None:
        super().__init__()
        path = str(cfg.hf_encoder_path)
        hf_cfg = load_hf_config(path)
        self.model_type = hf_cfg.model_type
        cls = getattr(transformers, HF_MODEL_CLASSES[self.model_type])
        if pretrained_weights:
            _check_has_weights(path)
        if self.model_type == "whisper":
            self.hf = _hf_module(cls, path, hf_cfg, pretrained_weights).get_encoder()
            self.feature_extractor = _whisper_feature_extractor(path, hf_cfg)
            self.frame_ms = 2 * self.feature_extractor.hop_length * 1000.0 / SAMPLE_RATE
            self.max_input_samples: int | None = 2 * hf_cfg.max_source_positions * self.feature_extractor.hop_length
            hidden = hf_cfg.d_model
        else:
            self._apply_spec_augment = hf_cfg.apply_spec_augment  # restored in the folders we write
            hf_cfg.apply_spec_augment = False  # masking is mmst's (set_time_masking)
            self.hf = _hf_module(cls, path, hf_cfg, pretrained_weights)
            self.feature_extractor = None
            self.frame_ms = math.prod(hf_cfg.conv_stride) * 1000.0 / SAMPLE_RATE
            self.max_input_samples = None
            hidden = hf_cfg.hidden_size
        self.num_hidden_states = hf_cfg.num_hidden_layers + 1 if self.model_type != "whisper" else hf_cfg.encoder_layers + 1
        self.hf_layer = cfg.hf_layer
        if isinstance(self.hf_layer, int) and self.hf_layer >= self.num_hidden_states:
            raise ValueError(f"model config: hf_layer={self.hf_layer}: {path} has hidden states 0..{self.num_hidden_states - 1}")
        self.layer_weights = nn.Parameter(torch.zeros(self.num_hidden_states)) if self.hf_layer == "weighted" else None
        self.freeze = cfg.hf_freeze
        self._apply_freeze()
        d = cfg.d_model
        self.proj = init_linear(nn.Linear(hidden, d))
        self.subsample = Conv1dSubsampler(d, cfg.conv_channels, d, cfg.conv_kernel_sizes)
        self.layer_norm = nn.LayerNorm(d)
        self.dropout = cfg.dropout
        self.d_model = d
        self.ratio = cfg.pre_decision_ratio
        self.state_ms = self.frame_ms * 2 ** len(cfg.conv_kernel_sizes)
        self.time_mask = None  # (time_mask_N, max width in frames, time_mask_p), set_time_masking

    # ------------------------------------------------------------------ configuration
    def _apply_freeze(self) -> None:
        if self.freeze == "all":
            self.hf.requires_grad_(False)
        elif self.freeze == "feature_extractor":
            if self.model_type == "whisper":
                for m in (self.hf.conv1, self.hf.conv2, self.hf.embed_positions):
                    m.requires_grad_(False)
            else:  # the convolutional feature encoder (its _freeze_parameters also skips its input grads)
                self.hf.feature_extractor._freeze_parameters()

    def train(self, mode: bool = True) -> HFSpeechEncoder:
        """As ``nn.Module.train``; a fully frozen (``hf_freeze: all``) pretrained encoder stays in eval mode."""
        super().train(mode)
        if self.freeze == "all":
            self.hf.eval()
        return self

    def set_time_masking(self, time_mask_N: int, time_mask_T: int, time_mask_p: float = 1.0) -> None:
        """Training-time time masks on the adapter's input (SpecAugment, Park et al. 2019; fairseq's rule):
        ``time_mask_N`` masks, each narrower than ``min(T', floor(time_mask_p * F))`` frames, where ``T'``
        is ``time_mask_T`` 10 ms fbank frames converted to encoder frames (``frame_ms``); masked frames are
        set to the utterance's mean. ``time_mask_N = 0`` switches masking off. Draws come from torch's
        generator (seeded by the trainer)."""
        if time_mask_N <= 0:
            self.time_mask = None
            return
        width = max(1, int(round(time_mask_T * 10.0 / self.frame_ms)))
        self.time_mask = (int(time_mask_N), width, float(time_mask_p))

    def lr_depths(self) -> list[tuple[list[nn.Parameter], int]]:
        """Parameters of the pretrained encoder by depth from the top, for layer-wise learning-rate decay
        (``optim.layer_lr_decay``; Clark et al. 2020): layer ``i`` of ``L`` (1-based) has depth ``L - i``,
        the front end and positions depth ``L``. Parameters outside (adapter, layer weights) are not listed."""
        layers = self.hf.layers if self.model_type == "whisper" else self.hf.encoder.layers
        n = len(layers)
        out, seen = [], set()
        for i, layer in enumerate(layers):
            ps = [p for p in layer.parameters() if p.requires_grad]
            seen.update(id(p) for p in layer.parameters())
            out.append((ps, n - 1 - i))
        rest = [p for p in self.hf.parameters() if id(p) not in seen and p.requires_grad]
        # the final layer norm of the pretrained stack sits with the top layer; the rest is the front end
        top_norm = self.hf.layer_norm if self.model_type == "whisper" else self.hf.encoder.layer_norm
        top = {id(p) for p in top_norm.parameters()}
        out.append(([p for p in rest if id(p) in top], 0))
        out.append(([p for p in rest if id(p) not in top], n))
        return [(ps, depth) for ps, depth in out if ps]

    def save_config(self, folder: str | Path) -> None:
        """Write the pretrained encoder's ``transformers`` config to ``folder`` with ``save_pretrained``
        (``config.json``; Whisper also its ``preprocessor_config.json``): what :class:`HFSpeechEncoder`
        needs, with ``pretrained_weights=False``, to rebuild this encoder without its original folder.
        The weights are not written (an exported model holds them in its ``model.safetensors``)."""
        self.hf.config.save_pretrained(folder)
        if self.feature_extractor is not None:
            self.feature_extractor.save_pretrained(folder)

    def save_pretrained(self, folder: str | Path) -> Path:
        """Write the pretrained encoder, with its current (trained) weights, as a ``transformers`` folder
        (``save_pretrained``, safetensors): the adapter and the decoders are not in it. Another model starts
        from it with ``model.overrides.hf_encoder_path``; ``transformers`` loads it as the model class of
        :data:`HF_MODEL_CLASSES`. Returns ``folder``.

        Raises:
            ValueError: a Whisper encoder (its folder would need the Whisper decoder as well).
        """
        if self.model_type == "whisper":
            raise ValueError("writing a Whisper encoder alone as a Hugging Face folder is not supported "
                             "(WhisperModel folders hold the decoder too)")
        cfg = self.hf.config
        cfg.apply_spec_augment, saved = self._apply_spec_augment, cfg.apply_spec_augment
        try:
            self.hf.save_pretrained(folder, safe_serialization=True)
        finally:
            cfg.apply_spec_augment = saved
        return Path(folder)

    # ------------------------------------------------------------------ lengths
    def hf_lengths(self, samples: torch.Tensor) -> torch.Tensor:
        """``(B,)`` samples -> ``(B,)`` pretrained-encoder frames of a finished input."""
        samples = samples.long()
        if self.model_type == "whisper":
            hop = self.feature_extractor.hop_length
            mel = torch.div(samples + hop - 1, hop, rounding_mode="floor")
            return torch.div(mel + 1, 2, rounding_mode="floor")
        return self.hf._get_feat_extract_output_lengths(samples).long()

    def out_lengths(self, samples: torch.Tensor) -> torch.Tensor:
        """``(B,)`` samples -> ``(B,)`` output states (adapter frames)."""
        return self.subsample.out_lengths(self.hf_lengths(samples))

    def num_states(self, num_inputs: int, finished: bool) -> int:
        """Output states of ``num_inputs`` received samples: all (``finished``), else those whose adapter
        receptive field lies inside the complete encoder frames (a state may still change when more audio
        arrives, since the encoder attends the whole input; streaming re-encodes)."""
        if num_inputs <= 0:
            return 0
        n = int(self.hf_lengths(torch.tensor([num_inputs]))[0])
        if not finished and self.model_type == "whisper":
            n = num_inputs // self.feature_extractor.hop_length // 2
        for k in self.subsample.kernel_sizes:
            n = _conv_out_len(n, k, finished=finished)
        return n

    # ------------------------------------------------------------------ forward
    def _hidden(self, wave: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Chosen hidden states ``(B, F, H)`` of the pretrained encoder."""
        need_all = self.hf_layer != -1
        if self.model_type == "whisper":
            if self.max_input_samples is not None and int(lengths.max()) > self.max_input_samples:
                raise ValueError(f"the Whisper encoder reads at most {self.max_input_samples / SAMPLE_RATE:g} s; got "
                                 f"{int(lengths.max()) / SAMPLE_RATE:g} s (long-form: set --max-segment-s at most "
                                 f"{self.max_input_samples / SAMPLE_RATE:g})")
            rows = [w[: int(n)].detach().float().cpu().numpy() for w, n in zip(wave, lengths)]
            feats = self.feature_extractor(rows, sampling_rate=SAMPLE_RATE, return_tensors="pt",
                                           padding="max_length", device="cpu").input_features
            out = self.hf(feats.to(device=wave.device, dtype=wave.dtype), output_hidden_states=need_all)
        else:
            mask = lengths_to_padding_mask(lengths, wave.size(1))
            wave = wave.masked_fill(mask, 0.0)
            attn = (~mask).long() if self.hf.config.feat_extract_norm == "layer" else None
            out = self.hf(wave, attention_mask=attn, output_hidden_states=need_all)
        if self.hf_layer == -1:
            return out.last_hidden_state
        if self.hf_layer == "weighted":
            w = torch.softmax(self.layer_weights, 0)
            return sum(w[i] * h for i, h in enumerate(out.hidden_states))
        return out.hidden_states[int(self.hf_layer)]

    def _mask_time(self, h: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """SpecAugment time masks on ``h (B, F, H)`` (valid frames ``n (B,)``); returns a new tensor."""
        count, width, p = self.time_mask
        seed = int(torch.randint(0, 2**31 - 1, (), device="cpu"))
        rng = np.random.default_rng(seed)
        keep = torch.ones(h.shape[:2], dtype=torch.bool, device=h.device)
        for b, nb in enumerate(n.tolist()):
            max_t = min(width, math.floor(nb * p))
            for _ in range(count if max_t >= 1 else 0):
                t = int(rng.integers(0, max_t))
                t0 = int(rng.integers(0, nb - t))
                keep[b, t0 : t0 + t] = False
        valid = ~lengths_to_padding_mask(n, h.size(1))
        mean = (h * valid[..., None]).sum(1, keepdim=True) / n.clamp(min=1)[:, None, None].to(h.dtype)
        return torch.where(keep[..., None], h, mean)

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor) -> EncoderOut:
        """Encode a padded batch.

        Args:
            wave: ``(B, T)`` or ``(B, T, 1)`` float samples at 16 kHz in [-1, 1], zero padded.
            lengths: ``(B,)`` samples (>= 1).

        Returns:
            :class:`~mmst.models.encoder.EncoderOut` with ``states (B, S, d_model)``, ``S`` adapter frames.

        Raises:
            ValueError: Whisper input longer than its window.
        """
        if wave.dim() == 3:
            wave = wave.squeeze(-1)
        lengths = lengths.to(wave.device)
        if self.freeze == "all":
            with torch.no_grad():
                h = self._hidden(wave, lengths)
        else:
            h = self._hidden(wave, lengths)
        n = self.hf_lengths(lengths).clamp(max=h.size(1))
        h = h[:, : int(n.max())]  # (B, F, H)
        if self.training and self.time_mask is not None:
            h = self._mask_time(h, n)
        x = F.dropout(self.proj(h), self.dropout, self.training)  # (B, F, D)
        x, s = self.subsample(x, n)  # (B, S, D)
        return EncoderOut(self.layer_norm(x), lengths_to_padding_mask(s, x.size(1)), s)


def _check_has_weights(path: str) -> None:
    """Raise ``FileNotFoundError`` when the local folder ``path`` has a config but no safetensors weights
    (e.g. the ``hf_encoder/`` of an exported model folder, whose weights are in the model's own file)."""
    d = Path(path)
    if d.is_dir() and not any((d / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json")):
        raise FileNotFoundError(
            f"hf_encoder_path {path}: no model.safetensors (a pretrained encoder is read from safetensors only; "
            "the hf_encoder/ folder of an exported mmst model holds only the config: start from the model "
            "folder with checkpoint.init_from=MODEL_DIR)")


def _hf_module(cls, path: str, hf_cfg, pretrained_weights: bool):
    """``cls`` with the weights of ``path`` (``use_safetensors=True``), or built from ``hf_cfg`` alone
    (its weights initialised at random, to be overwritten by the caller) in eval mode like a loaded one."""
    if pretrained_weights:
        return cls.from_pretrained(path, config=hf_cfg, use_safetensors=True, local_files_only=True)
    return cls(hf_cfg).eval()


def _whisper_feature_extractor(path: str, hf_cfg):
    """The folder's ``WhisperFeatureExtractor``, or one matching the model config when the folder has none;
    raises ``ValueError`` when its window differs from the encoder's."""
    if (Path(path) / "preprocessor_config.json").is_file():
        fe = transformers.WhisperFeatureExtractor.from_pretrained(path, local_files_only=True)
    else:
        hop = 160
        fe = transformers.WhisperFeatureExtractor(feature_size=hf_cfg.num_mel_bins, hop_length=hop,
                                                  chunk_length=2 * hf_cfg.max_source_positions * hop // SAMPLE_RATE)
    if fe.nb_max_frames != 2 * hf_cfg.max_source_positions or fe.feature_size != hf_cfg.num_mel_bins:
        raise ValueError(f"hf_encoder_path {path}: the feature extractor gives {fe.feature_size} x {fe.nb_max_frames} "
                         f"mel frames; the encoder expects {hf_cfg.num_mel_bins} x {2 * hf_cfg.max_source_positions}")
    return fe
