"""Training configuration: a tree of dataclasses loaded from YAML with ``key=value`` overrides.

Every leaf field carries a ``doc`` string (shown by ``mmst-train --help``) and optional range
metadata (``min``, ``max``, ``choices``). Loading is strict:

* an unknown key (in YAML or on the command line) raises :class:`ConfigError` naming the dotted key;
* a value of the wrong type raises :class:`ConfigError` naming the key, the expected type and the value;
* a value out of range raises :class:`ConfigError` naming the key and the allowed range.

Command-line overrides use dotted keys, e.g. ``optim.lr=1e-3 model.arch=separate
waitk_lagging=[1,3,offline]``; the value is parsed as YAML (so ``[1,2]``, ``true``, ``null`` work).

Usage::

    cfg = load_config("train.yaml", overrides=["optim.lr=1e-3"])
    d = config_to_dict(cfg)          # primitive containers only (stored in checkpoints)
    cfg2 = config_from_dict(d)       # strict again
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from mmst.models.config import ModelConfig
from mmst.simultaneous.waitk import parse_waitk_list


class ConfigError(ValueError):
    """A configuration key is unknown, has the wrong type, or is out of range (message names the key)."""


def _f(default: Any = dataclasses.MISSING, *, doc: str, default_factory: Any = dataclasses.MISSING,
       **meta: Any) -> Any:
    """Declare a config field with documentation and range metadata (``min``, ``max``, ``choices``)."""
    md = {"doc": doc, **meta}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=md)
    return field(default=default, metadata=md)


# --------------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------------


#: ModelConfig fields that the trainer derives from DATA / model.arch / model.size (not overridable).
DERIVED_MODEL_FIELDS = ("arch", "size", "tgt_langs", "vocab_size", "vocab_sizes", "lang_tag_ids", "src_vocab_size")


def _model_overrides_class() -> type:
    """``ModelOverrides``: one optional field per overridable :class:`mmst.models.ModelConfig` field.

    Built from ModelConfig itself, so the two cannot drift: same names, same types (``| None``),
    ``None`` = keep the size preset's value.
    """
    hints = typing.get_type_hints(ModelConfig)
    fields = []
    for f in dataclasses.fields(ModelConfig):
        if f.name in DERIVED_MODEL_FIELDS:
            continue
        fields.append((f.name, hints[f.name] | None,
                       _f(None, doc=f"ModelConfig.{f.name} (null = the model.size preset's value)")))

    def as_dict(self: Any) -> dict[str, Any]:
        """The fields that are set (not ``None``), as ``build_model`` keyword arguments."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    return dataclasses.make_dataclass(
        "ModelOverrides", fields, namespace={
            "as_dict": as_dict,
            "__doc__": "Typed ``model.overrides`` section: any ModelConfig field except the derived ones "
                       "(``DERIVED_MODEL_FIELDS``); ``None`` keeps the size preset.",
            "__module__": __name__})


ModelOverrides = _model_overrides_class()


@dataclass
class ModelSection:
    """Which model to build (see ``mmst.models``); unlisted ModelConfig fields keep the size preset."""

    arch: str = _f("unified", doc="model architecture: 'separate' (one decoder per language) or "
                   "'unified' (one decoder, <lang:xx> tag replaces BOS)", choices=["separate", "unified"])
    size: str = _f("xs", doc="size preset: xs (tests/CPU), s (s2t_transformer_s-like), m",
                   choices=["xs", "s", "m"])
    vocab: str = _f("auto", doc="target vocabulary: 'joint' (DATA vocab.joint), 'per_lang' "
                    "(DATA vocab.per_lang, separate only) or 'auto' (joint)",
                    choices=["auto", "joint", "per_lang"])
    overrides: ModelOverrides = _f(default_factory=ModelOverrides,  # type: ignore[valid-type]
                                   doc="ModelConfig fields to override, e.g. {dropout: 0.1, "
                                   "encoder_attention: offline, pre_decision_ratio: 7}")


@dataclass
class AugmentSection:
    """Training-time data augmentation (docs/augmentation.md). Validation and inference never augment."""

    specaugment_policy: str = _f("none", doc="SpecAugment preset applied per utterance after CMVN: none, LB, LD, "
                                 "SM or SS (fairseq's policies; LB = 1 freq mask F=27 + 1 time mask T=100, "
                                 "LD = 2 + 2; time warp off)", choices=["none", "LB", "LD", "SM", "SS"])
    specaugment: dict[str, float | None] | None = _f(
        None, doc="fairseq SpecAugmentTransform keys overriding the preset's values: freq_mask_N, freq_mask_F, "
        "time_mask_N, time_mask_T, time_mask_p, time_warp_W (the paper's W=80), mask_value (null = "
        "utterance mean); e.g. {time_warp_W: 80}. time_wrap_W (fairseq's config writer's spelling) is "
        "read as time_warp_W with a warning")
    speed_perturb: list[float] | None = _f(
        None, doc="speed perturbation factors, e.g. [0.9, 1.0, 1.1] (Ko et al. 2015): train on the "
        "speed-perturbed copies of data.train_subset that data_prep/speed_perturb.py wrote into DATA "
        "(listed in DATA/config.yaml speed_perturb); null = the plain split")

    def __post_init__(self) -> None:
        """Validate the SpecAugment keys (and normalise ``time_wrap_W``) and the speed factors."""
        from mmst.data.augment import MISSPELLED_KEYS, specaugment_from_config

        try:
            specaugment_from_config(self.specaugment_policy, self.specaugment, where="data.augment.specaugment")
        except ValueError as e:
            raise ConfigError(str(e)) from e
        if self.specaugment:
            self.specaugment = {MISSPELLED_KEYS.get(k, k): v for k, v in self.specaugment.items()}
        if self.speed_perturb is not None:
            if not self.speed_perturb or any(not 0.5 <= f <= 2.0 for f in self.speed_perturb):
                raise ConfigError("data.augment.speed_perturb: expected factors in [0.5, 2.0], e.g. "
                                  f"[0.9, 1.0, 1.1], got {self.speed_perturb}")


@dataclass
class DataSection:
    """What to read from the DATA directory and how to batch it."""

    train_subset: str = _f("train", doc="training split name (DATA/<split>.tsv)")
    valid_subset: str = _f("dev", doc="validation split name; empty string disables validation")
    tgt_langs: list[str] | None = _f(None, doc="target languages to train (default: all of DATA "
                                     "config tgt_langs, in that order)")
    max_tokens: int = _f(20000, doc="max padded feature frames (10 ms each) per micro-batch", min=1)
    max_sentences: int = _f(0, doc="max utterances per micro-batch (0 = no limit)", min=0)
    max_frames: int = _f(6000, doc="utterances longer than this many frames are dropped from "
                         "training (logged)", min=1)
    num_workers: int = _f(0, doc="DataLoader worker processes for feature loading (0 = in-process)",
                          min=0)
    cache_features: bool = _f(False, doc="keep loaded fbank matrices in memory (small corpora)")
    concat_utterances: int = _f(1, doc="multi-sentence training (long-form streams): each training item joins "
                                "1..N consecutive utterances of one talk or speaker (concat_group), N drawn "
                                "uniformly per item from the seed, their audio joined as concat_pause_ms says and "
                                "each language's sentences joined; validation stays per utterance; 1 = off",
                                min=1)
    concat_group: str = _f("talk", doc="what concat_utterances joins: 'talk' = utterances of one recording "
                           "(manifest wav), in offset order; 'speaker' = utterances of one speaker (manifest "
                           "speaker), in manifest order", choices=["talk", "speaker"])
    concat_pause_ms: list[float] | None = _f(None, doc="pause between joined utterances: null = the recording's "
                                             "own audio between them (utterances in different recordings, or "
                                             "overlapping, are not joined); [lo, hi] = digital silence of a length "
                                             "drawn uniformly from lo..hi ms")
    concat_edge_ms: list[float] | None = _f(None, doc="silence before the first and after the last utterance of "
                                            "every training item, each drawn uniformly from lo..hi ms ([lo, hi]; "
                                            "single utterances too, also with concat_utterances 1): a stream "
                                            "segment's edges vary with the VAD's padding and the speaker's pauses, "
                                            "while the clips carry edges of one length; null = none")
    augment: AugmentSection = field(default_factory=AugmentSection)

    def __post_init__(self) -> None:
        """Validate the multi-sentence keys (pause and edge ranges; no speed perturbation with spans read from
        the recordings: concat_utterances > 1 or concat_edge_ms)."""
        p = self.concat_pause_ms
        if p is not None and not (len(p) == 2 and 0 <= p[0] <= p[1]):
            raise ConfigError(f"data.concat_pause_ms: expected [lo, hi] with 0 <= lo <= hi (ms), got {p}")
        e = self.concat_edge_ms
        if e is not None and not (len(e) == 2 and 0 <= e[0] <= e[1]):
            raise ConfigError(f"data.concat_edge_ms: expected [lo, hi] with 0 <= lo <= hi (ms), got {e}")
        sp = self.augment.speed_perturb if isinstance(self.augment, AugmentSection) else None
        if (self.concat_utterances > 1 or e is not None) and sp is not None and sorted(sp) != [1.0]:
            raise ConfigError("data.concat_utterances > 1 and data.concat_edge_ms read each span's audio from its "
                              "recording; the speed-perturbed copies (data.augment.speed_perturb) exist as features "
                              "only: set one of them back (concat_utterances: 1 and concat_edge_ms: null, or "
                              "speed_perturb: null)")


@dataclass
class OptimSection:
    """AdamW + inverse-sqrt schedule with linear warmup (fairseq 'inverse_sqrt')."""

    lr: float = _f(2e-3, doc="peak learning rate, reached at warmup_updates", min=0.0)
    warmup_updates: int = _f(1000, doc="linear warmup updates (lr from warmup_init_lr to lr); "
                             "afterwards lr * sqrt(warmup_updates / update)", min=0)
    warmup_init_lr: float = _f(1e-7, doc="learning rate at update 0", min=0.0)
    betas: list[float] = _f(default_factory=lambda: [0.9, 0.98], doc="AdamW betas [b1, b2]")
    eps: float = _f(1e-8, doc="AdamW epsilon", min=0.0)
    weight_decay: float = _f(1e-4, doc="AdamW decoupled weight decay", min=0.0)
    clip_norm: float = _f(10.0, doc="clip the global gradient L2 norm to this (0 = no clipping)",
                          min=0.0)
    implementation: str = _f("fused", doc="AdamW kernel: 'fused' (one kernel over all parameters; "
                             "~3x faster steps than 'for-loop' on CPU, measured), 'foreach' or 'for-loop' "
                             "(per-parameter, the earlier default); all are deterministic, their results "
                             "differ in the last bits",
                             choices=["fused", "foreach", "for-loop"])
    layer_lr_decay: float = _f(1.0, doc="layer-wise learning-rate decay of a pretrained encoder "
                               "(model.overrides.encoder_type: hf): a layer n below the top trains at lr * "
                               "layer_lr_decay ** n, its front end at the lowest rate; 1 = off", min=0.0, max=1.0)
    update_freq: int = _f(1, doc="gradient accumulation: micro-batches per update", min=1)
    max_update: int = _f(10000, doc="stop after this many updates", min=1)
    max_epoch: int = _f(0, doc="stop after this many epochs (0 = no limit)", min=0)
    stop_time_hours: float = _f(0.0, doc="stop after this much cumulative training wall time in hours, "
                                "validation excluded, counted across resumes (fairseq --stop-time-hours; "
                                "0 = no limit); a time-limited run is not bit-reproducible", min=0.0)
    max_consecutive_nan: int = _f(5, doc="NaN/inf loss: the update is skipped and counted; this many "
                                  "skipped updates in a row stop training with an error naming "
                                  "the batch ids", min=1)


@dataclass
class CriterionSection:
    """Loss options (``mmst.losses.MultilingualCriterion``)."""

    label_smoothing: float = _f(0.1, doc="label smoothing epsilon", min=0.0, max=0.999)
    ctc_weight: float = _f(0.0, doc="weight of the auxiliary English CTC loss on the encoder",
                           min=0.0)
    lang_weights: dict[str, float] | None = _f(None, doc="per-language loss weights, e.g. "
                                               "{de: 1.0, ja: 2.0} (default: all 1)")


@dataclass
class ValidSection:
    """Validation: per-language loss plus greedy wait-k BLEU on a subset."""

    interval_updates: int = _f(1000, doc="validate every this many updates (0 = only at the end)",
                               min=0)
    waitk: int | str | None = _f(None, doc="wait-k used for the validation loss (null/'offline' = "
                                 "full attention)")
    bleu_waitk: list[int | str] = _f(default_factory=lambda: [3], doc="wait-k values decoded "
                                     "greedily for validation BLEU ('offline' allowed)")
    bleu_subset: int = _f(64, doc="number of validation utterances decoded for BLEU (0 = no BLEU)",
                          min=0)
    max_len_a: float = _f(0.5, doc="decode length cap = max_len_a * S + max_len_b tokens, S = encoder "
                          "states (40 ms each); an untrained model never emits EOS", min=0.0)
    max_len_b: int = _f(10, doc="see max_len_a", min=1)
    best_metric: str = _f("loss", doc="checkpoint_best.pt criterion: 'loss' (mean over languages, "
                          "lower is better) or 'bleu' (mean over languages and bleu_waitk, higher "
                          "is better)", choices=["loss", "bleu"])
    max_sentences: int = _f(32, doc="utterances per validation batch", min=1)


@dataclass
class CheckpointSection:
    """Checkpointing (see ``mmst.training.checkpoint``)."""

    save_interval_updates: int = _f(1000, doc="write checkpoint_<update>.pt and checkpoint_last.pt "
                                    "every this many updates (0 = only at the end)", min=0)
    keep_last: int = _f(5, doc="keep this many most recent checkpoint_<update>.pt files (0 = all)",
                        min=0)
    resume: bool = _f(True, doc="resume from SAVE_DIR/checkpoint_last.pt when it exists")
    load_pretrained_encoder_from: str | None = _f(None, doc="initialise the encoder from this "
                                                  "checkpoint (fairseq s2t_transformer or mmst); the rest of "
                                                  "the model is built from model.* and starts from scratch")
    init_from: str | None = _f(None, doc="start from this exported model folder (mmst-export) or mmst "
                               "checkpoint: its architecture and ALL its weights (fine-tuning; model.* is "
                               "ignored), fresh optimiser and schedule; the DATA must use its vocabularies "
                               "(prepare it with --vocab-from MODEL_DIR). Not together with "
                               "load_pretrained_encoder_from (which copies only encoder weights into the "
                               "model.* model); a resumed run (checkpoint_last.pt) ignores both")
    allow_unsafe_pickle: bool = _f(False, doc="allow torch.load(weights_only=False) for a FOREIGN "
                                   "(fairseq) pretrained checkpoint that needs it; only for files "
                                   "you trust (same as TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1)")


@dataclass
class LoggingSection:
    """Console/JSONL/TensorBoard logging."""

    log_interval: int = _f(10, doc="write a training log line every this many updates", min=1)
    tensorboard: bool = _f(True, doc="write TensorBoard events under SAVE_DIR/tensorboard")
    progress_bar: bool = _f(True, doc="show a tqdm progress bar")


@dataclass
class DistributedSection:
    """Options of the ``--distributed`` update strategy (see ``mmst.distributed``)."""

    options: dict[str, Any] = _f(default_factory=dict, doc="options of the --distributed strategy "
                                 "(see mmst.training.distributed): dist_timeout (s), backend, "
                                 "compute_threshold (TAU s|auto|inf), auto_steps, auto_warmup_steps (updates "
                                 "run before the auto_steps recorded ones, default 5), max_drop_rate, "
                                 "max_staleness (SSP bound, default W workers; inf = none), lr_per_push "
                                 "(param-server learning rate of a push: per_worker (default, lr/W), full or "
                                 "staleness), staleness_lr (true = lr_per_push staleness), "
                                 "worker_timeout (s), straggler_delay, straggler_fraction, straggler_base_ms, "
                                 "slow_rank (R:factor), seed, find_unused_parameters, fail_at_update and "
                                 "fail_rank (fault injection for tests); unknown keys are an error naming "
                                 "the known ones")


@dataclass
class TrainConfig:
    """Root of the ``mmst-train`` configuration (all sections; see ``mmst-train --help``)."""

    seed: int = _f(1, doc="seed for parameter init, data order, dropout and wait-k sampling")
    device: str = _f("auto", doc="'auto' (cuda if available), 'cpu' or 'cuda'",
                     choices=["auto", "cpu", "cuda"])
    num_threads: int = _f(0, doc="torch CPU threads (0 = torch default)", min=0)
    precision: str = _f("auto", doc="forward precision: 'auto' (bf16 autocast on CUDA, fp32 on CPU), 'fp32', "
                        "or 'bf16' (bf16 autocast with fp32 weights and loss on any device; pays on CPUs "
                        "with AMX/AVX512-BF16, see docs/performance.md)",
                        choices=["auto", "fp32", "bf16"])
    compile: bool | str = _f(False, doc="torch.compile: false (eager), true (the whole model, one graph per "
                             "batch shape; batches padded to length buckets) or blocks (only the elementwise "
                             "blocks and the loss); falls back to eager with a warning where inductor cannot "
                             "run; see docs/performance.md", choices=[False, True, "blocks"])
    waitk_lagging: list[int | str] | int | str | None = _f(
        None, doc="training wait-k: an int, 'offline'/null (full attention) or a list (multi-k: one "
        "k drawn per micro-batch, 'offline' allowed as an element)")
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    optim: OptimSection = field(default_factory=OptimSection)
    criterion: CriterionSection = field(default_factory=CriterionSection)
    valid: ValidSection = field(default_factory=ValidSection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)
    logging: LoggingSection = field(default_factory=LoggingSection)
    distributed: DistributedSection = field(default_factory=DistributedSection)

    def __post_init__(self) -> None:
        """Cross-field checks (raise :class:`ConfigError`)."""
        normalize_waitk_list(self.waitk_lagging, key="waitk_lagging")
        normalize_waitk_list(self.valid.waitk, key="valid.waitk")
        normalize_waitk_list(self.valid.bleu_waitk, key="valid.bleu_waitk")
        if len(self.optim.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.optim.betas):
            raise ConfigError(f"optim.betas: expected two values in [0, 1), got {self.optim.betas}")
        if self.optim.warmup_updates > 0 and self.optim.warmup_init_lr > self.optim.lr:
            raise ConfigError("optim.warmup_init_lr: must be <= optim.lr "
                              f"({self.optim.warmup_init_lr} > {self.optim.lr})")
        if self.model.vocab == "per_lang" and self.model.arch == "unified":
            raise ConfigError("model.vocab: 'per_lang' needs model.arch=separate (unified uses the joint vocab)")
        if self.checkpoint.init_from and self.checkpoint.load_pretrained_encoder_from:
            raise ConfigError("checkpoint.init_from and checkpoint.load_pretrained_encoder_from: give one (init_from "
                              "loads the whole model, encoder included)")
        if self.valid.best_metric == "bleu" and self.valid.bleu_subset == 0:
            raise ConfigError("valid.best_metric: 'bleu' needs valid.bleu_subset > 0")
        if self.criterion.lang_weights is not None:
            for k, v in self.criterion.lang_weights.items():
                if v < 0:
                    raise ConfigError(f"criterion.lang_weights.{k}: must be >= 0, got {v}")


def normalize_waitk_list(value: Any, key: str = "waitk_lagging") -> list[int | None]:
    """A config wait-k spec as ``list[int | None]`` (:func:`mmst.simultaneous.waitk.parse_waitk_list`).

    Raises:
        ConfigError: an empty spec or a value that is not an int >= 1 / ``offline`` (names ``key``).
    """
    try:
        return parse_waitk_list(value, key)
    except ValueError as e:
        raise ConfigError(str(e)) from None


# --------------------------------------------------------------------------------------------------
# Generic strict (de)serialisation
# --------------------------------------------------------------------------------------------------


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _check_value(value: Any, tp: Any, key: str) -> Any:
    """Return ``value`` converted to ``tp`` or raise ConfigError (supports the types used above)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        errors = []
        for arg in typing.get_args(tp):
            try:
                return _check_value(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")
    if tp is type(None):
        if value is None:
            return None
        raise ConfigError(f"{key}: expected null, got {value!r}")
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (arg,) = typing.get_args(tp) or (Any,)
        return [_check_value(v, arg, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        kt, vt = typing.get_args(tp) or (Any, Any)
        return {_check_value(k, kt, key): _check_value(v, vt, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    raise ConfigError(f"{key}: unsupported type {_type_name(tp)}")


def _check_range(value: Any, meta: typing.Mapping[str, Any], key: str) -> None:
    if value is None:
        return
    if "choices" in meta and value not in meta["choices"]:
        raise ConfigError(f"{key}: {value!r} is not one of {meta['choices']}")
    if "min" in meta and value < meta["min"]:
        raise ConfigError(f"{key}: {value!r} is out of range (must be >= {meta['min']})")
    if "max" in meta and value > meta["max"]:
        raise ConfigError(f"{key}: {value!r} is out of range (must be <= {meta['max']})")


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or '<root>'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for k in data:
        if k not in fields:
            raise ConfigError(f"unknown config key '{prefix}{k}' (valid keys in this section: "
                              f"{', '.join(sorted(fields))})")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in data:
            continue
        key = prefix + name
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = _build(tp, data[name] if data[name] is not None else {}, key + ".")
        else:
            v = _check_value(data[name], tp, key)
            _check_range(v, f.metadata, key)
            kwargs[name] = v
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except TypeError as e:  # pragma: no cover - missing required fields
        raise ConfigError(f"{prefix or '<root>'}: {e}") from e


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """Build a :class:`TrainConfig` from nested dicts (strict; raises :class:`ConfigError`)."""
    return _build(TrainConfig, data or {}, "")


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """Nested dict of primitives (str/int/float/bool/None/list/dict): safe for ``weights_only`` loads.

    ``model.overrides`` keeps only the fields that are set.
    """
    d = dataclasses.asdict(cfg)
    if isinstance(cfg, TrainConfig):
        d["model"]["overrides"] = cfg.model.overrides.as_dict()
    return d


def _set_dotted(d: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    cls: Any = TrainConfig
    cur = d
    for i, p in enumerate(parts):
        sub = {f.name: f for f in dataclasses.fields(cls)} if cls is not None else None
        if sub is not None and p not in sub:
            raise ConfigError(f"unknown config key '{key}' ('{'.'.join(parts[: i + 1])}' does not exist; "
                              f"valid here: {', '.join(sorted(sub))})")
        if i == len(parts) - 1:
            cur[p] = value
            return
        hint = typing.get_type_hints(cls)[p] if cls is not None else Any
        if cls is not None and not dataclasses.is_dataclass(hint) and typing.get_origin(hint) is not dict \
                and not (typing.get_origin(hint) in (Union, types.UnionType)
                         and any(typing.get_origin(a) is dict for a in typing.get_args(hint))):
            raise ConfigError(f"config key '{'.'.join(parts[: i + 1])}' is not a section; cannot set '{key}'")
        nxt = cur.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[p] = nxt
        cur = nxt
        cls = hint if dataclasses.is_dataclass(hint) else None


#: ``1:2`` or ``3:2.5``: YAML 1.1 would read these as base-60 numbers (``1:2`` -> 62); an override keeps them as text
_SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?")


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``"a.b=value"`` into ``("a.b", parsed)``; the value is parsed as YAML, except that
    ``R:F``-like values (``1:2``, ``3:2.5``) stay strings (YAML 1.1 would read them as base-60 numbers).

    Raises :class:`ConfigError` when there is no ``=`` or the key is empty.
    """
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key=value")
    key, raw = text.split("=", 1)
    key = key.strip().lstrip("-").replace("-", "_") if key.strip().startswith("--") else key.strip()
    if not key:
        raise ConfigError(f"override {text!r}: empty key")
    if _SEXAGESIMAL.fullmatch(raw.strip()):
        return key, raw.strip()
    try:
        value = yaml.safe_load(raw) if raw.strip() != "" else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = (),
                base: dict[str, Any] | None = None) -> TrainConfig:
    """Load a YAML config (optional), apply ``key=value`` overrides, validate.

    Args:
        path: YAML file (a mapping of sections); ``None`` = defaults only.
        overrides: strings ``"dotted.key=value"``; later ones win.
        base: a dict used instead of the YAML file (e.g. a checkpoint's stored config).

    Raises:
        ConfigError: unknown key, wrong type or value out of range (the message names the key).
        FileNotFoundError: ``path`` does not exist.
    """
    data: dict[str, Any] = dict(base or {})
    if path is not None:
        with open(path, encoding="utf-8") as fh:
            loaded = yaml.safe_load(fh)
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level must be a mapping, got {type(loaded).__name__}")
        data = _deep_merge(data, loaded)
    import copy

    data = copy.deepcopy(data)
    for ov in overrides:
        k, v = parse_override(ov)
        _set_dotted(data, k, v)
    return config_from_dict(data)


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "overrides":
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def iter_config_docs(cls: type = TrainConfig, prefix: str = "") -> typing.Iterator[tuple[str, str, Any, str]]:
    """Yield ``(dotted_key, type_name, default, doc)`` for every leaf key (used by ``--help``)."""
    hints = typing.get_type_hints(cls)
    inst = cls()
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from iter_config_docs(tp, prefix + f.name + ".")
            continue
        doc = f.metadata.get("doc", "")
        rng = []
        if "choices" in f.metadata:
            rng.append("one of " + "|".join(map(str, f.metadata["choices"])))
        if "min" in f.metadata:
            rng.append(f">= {f.metadata['min']}")
        if "max" in f.metadata:
            rng.append(f"<= {f.metadata['max']}")
        if rng:
            doc += f" [{', '.join(rng)}]"
        yield prefix + f.name, _type_name(tp), getattr(inst, f.name), doc


def format_config_help() -> str:
    """Multi-line description of every config key: ``key (type, default): doc``."""
    lines = ["config keys (YAML sections or dotted key=value overrides):"]
    for key, tname, default, doc in iter_config_docs():
        lines.append(f"  {key} ({tname}, default {default!r})")
        lines.append(f"      {doc}")
    return "\n".join(lines)
