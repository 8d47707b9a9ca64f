"""Builds a :class:`~mmst.training.loop.Trainer` from a config and a DATA directory (:func:`build_trainer`), and the
checks a resumed run makes of its config."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import torch

from mmst.data.batching import EpochBatchIterator
from mmst.training.checkpoint import check_vocab_compat, load_checkpoint
from mmst.training.compile import TrainingCompiler, pad_batch_to_buckets
from mmst.training.config import ConfigError, TrainConfig
from mmst.training.loop import Trainer, resolve_device, seed_everything
from mmst.training.optim import InverseSqrtSchedule, build_optimizer, layerwise_param_groups
from mmst.training.step import bf16_warning
from mmst.training.validation import Validator

logger = logging.getLogger("mmst.train")


def training_augmentation(cfg: TrainConfig, data_dir: str | Path) -> tuple[str, Any]:
    """The training manifest and feature augmentation that ``cfg.data.augment`` asks for.

    Returns:
        ``(split, augment)``: ``data.train_subset``, or the name of its speed-perturbed manifest when
        ``data.augment.speed_perturb`` is set; a :class:`mmst.data.augment.FeatureAugment` (SpecAugment,
        seeded with ``cfg.seed``) or ``None``.

    Raises:
        mmst.data.augment.SpeedPerturbError: the DATA has no speed-perturbed copy with those factors.
    """
    from mmst.data.augment import FeatureAugment, specaugment_from_config, speed_perturbed_split
    from mmst.data.dataset import load_data_config

    acfg = cfg.data.augment
    split = cfg.data.train_subset
    if acfg.speed_perturb is not None and sorted(acfg.speed_perturb) != [1.0]:
        split = speed_perturbed_split(load_data_config(data_dir), split, acfg.speed_perturb, str(data_dir))
    spec = specaugment_from_config(acfg.specaugment_policy, acfg.specaugment, where="data.augment.specaugment")
    augment = FeatureAugment(spec, cfg.seed) if spec is not None and spec.active else None
    if augment is not None or split != cfg.data.train_subset:
        logger.info("training augmentation: manifest %s.tsv; SpecAugment %s", split,
                    spec.to_dict() if augment is not None and spec is not None else "off")
    return split, augment


def waveform_time_masks(augment: Any, speed_perturbed: bool) -> Any:
    """The SpecAugment time masks of ``augment`` for a waveform (pretrained) encoder, which applies them
    to its own frames (:meth:`mmst.models.hf_encoder.HFSpeechEncoder.set_time_masking`); None when off.

    Raises:
        ConfigError: frequency masks or time warping (they need fbank features), or speed perturbation
            (its copies exist as fbank only).
    """
    if speed_perturbed:
        raise ConfigError("data.augment.speed_perturb: the speed-perturbed copies are fbank features; a "
                          "waveform encoder (encoder_type: hf) reads the original audio (remove speed_perturb)")
    spec = None if augment is None else augment.specaugment
    if spec is None:
        return None
    if spec.freq_mask_N or spec.time_warp_W:
        raise ConfigError("data.augment.specaugment: a waveform encoder (encoder_type: hf) takes time masks "
                          "only (set freq_mask_N: 0 and time_warp_W: 0)")
    return spec if spec.time_mask_N else None


def build_trainer(cfg: TrainConfig, data_dir: str | Path, save_dir: str | Path, strategy: Any = None) -> Trainer:
    """Build every component from ``cfg`` + DATA, resume from ``SAVE_DIR/checkpoint_last.pt`` if present,
    else start from ``checkpoint.init_from`` (a model folder or checkpoint: its architecture and weights)
    or from scratch (with ``checkpoint.load_pretrained_encoder_from``: the encoder's weights).

    Raises:
        mmst.models.checkpoint.CheckpointError: an unreadable ``checkpoint.init_from`` model.
        LanguageMismatchError: the manifest languages differ from the checkpoint model's.
        VocabMismatchError: the DATA vocab differs from the checkpoint's (or the ``init_from`` model's).
        mmst.training.config.ConfigError / ValueError: invalid model overrides (message names the key).
    """
    from mmst.data.dataset import MultiwayDataset, check_languages
    from mmst.losses import MultilingualCriterion
    from mmst.models import ModelConfig, build_model, model_config_for_size
    from mmst.models.checkpoint import load_model
    from mmst.training.pretrained import load_pretrained_encoder

    data_dir, save_dir = Path(data_dir), Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    device = resolve_device(cfg.device)
    slow_bf16 = bf16_warning(device, cfg.precision)
    if slow_bf16:
        logger.warning("%s", slow_bf16)
    seed_everything(cfg.seed)

    resume_ckpt = None
    last = save_dir / "checkpoint_last.pt"
    if cfg.checkpoint.resume and last.is_file():
        resume_ckpt = load_checkpoint(last)

    arch = cfg.model.arch
    model_cfg = None
    vocab_mode = "per_lang" if cfg.model.vocab == "per_lang" else "joint"
    init_model, init_info = None, None
    if resume_ckpt is not None and resume_ckpt.get("model_cfg"):
        model_cfg = ModelConfig.from_dict(resume_ckpt["model_cfg"])
        warn_override_changes(cfg, resume_ckpt, last)
        arch = model_cfg.arch
    elif resume_ckpt is None and cfg.checkpoint.init_from:
        init_model, init_info = load_model(cfg.checkpoint.init_from)  # a model folder or a checkpoint
        model_cfg = ModelConfig.from_dict(init_info["model_cfg"])
        arch, vocab_mode = model_cfg.arch, init_info.get("vocab_mode") or vocab_mode
    tgt_langs = cfg.data.tgt_langs
    if model_cfg is not None:
        from mmst.data.dataset import load_data_config

        data_langs = tgt_langs or list(load_data_config(data_dir)["tgt_langs"])
        check_languages(data_langs, model_cfg.tgt_langs, what=f"DATA {data_dir}",
                        against="checkpoint model" if init_model is None else f"model {cfg.checkpoint.init_from}")
        tgt_langs = list(model_cfg.tgt_langs)
    with_src = cfg.criterion.ctc_weight > 0
    input_kind = (model_cfg or ModelConfig(**cfg.model.overrides.as_dict())).input_kind
    common = dict(tgt_langs=tgt_langs, vocab_mode=vocab_mode, lang_tag_start=(arch == "unified"), with_src=with_src,
                  input_kind=input_kind)
    train_split, augment = training_augmentation(cfg, data_dir)
    time_mask = None
    if input_kind == "waveform":  # SpecAugment's time masks move to the pretrained encoder's frames
        time_mask, augment = waveform_time_masks(augment, train_split != cfg.data.train_subset), None
    train_ds = MultiwayDataset(data_dir, train_split, max_frames=min(cfg.data.max_frames, cfg.data.max_tokens),
                               cache_features=cfg.data.cache_features, augment=augment, **common)
    if train_ds.n_dropped:
        logger.warning("dropped %d training utterances longer than %d frames", train_ds.n_dropped,
                       min(cfg.data.max_frames, cfg.data.max_tokens))
    valid_ds = None
    if cfg.data.valid_subset and (data_dir / f"{cfg.data.valid_subset}.tsv").is_file():
        valid_ds = MultiwayDataset(data_dir, cfg.data.valid_subset, cache_features=cfg.data.cache_features, **common)

    if model_cfg is None:
        kw: dict[str, Any] = {}
        if vocab_mode == "per_lang":
            kw["vocab_sizes"] = {lang: len(v) for lang, v in train_ds.tgt_vocabs.items()}
            kw["vocab_size"] = max(kw["vocab_sizes"].values())
        else:
            kw["vocab_size"] = len(train_ds.joint_vocab)
            # every <lang:xx> of the joint vocab (also languages this model does not train): the unified
            # model starts each stream with its tag (the dataset's start ids are these tags), and
            # decoding of any model never writes a tag
            kw["lang_tag_ids"] = {lang: train_ds.joint_vocab.lang_tag_id(lang) for lang in train_ds.joint_vocab.langs}
        kw["src_vocab_size"] = len(train_ds.src_vocab) if (with_src and train_ds.src_vocab is not None) else 0
        try:
            model_cfg = model_config_for_size(cfg.model.size, arch=arch, tgt_langs=train_ds.tgt_langs,
                                              **kw, **cfg.model.overrides.as_dict())
            model_cfg = model_cfg.with_absolute_hf_encoder_path()  # checkpoints load from any directory
        except (TypeError, ValueError) as e:
            raise ValueError(f"model.overrides: {e}") from e
    # resumed or initialised: every weight comes from that model, a pretrained encoder's folder gives its config
    model = build_model(model_cfg, pretrained_weights=resume_ckpt is None and init_model is None)
    if time_mask is not None:
        model.encoder.set_time_masking(time_mask.time_mask_N, time_mask.time_mask_T, time_mask.time_mask_p)
    check_languages(train_ds.tgt_langs, model.tgt_langs, what=f"manifest {train_ds.split}.tsv")
    for ds in (train_ds, valid_ds):  # the model decides the first decoder input (bos or <lang:xx>)
        if ds is not None:
            ds.start_token_ids = {lang: model.start_token_id(lang) for lang in ds.tgt_langs}
    model.to(device)
    criterion = MultilingualCriterion(label_smoothing=cfg.criterion.label_smoothing,
                                      lang_weights=cfg.criterion.lang_weights, ctc_weight=cfg.criterion.ctc_weight,
                                      pad_id=model_cfg.pad_id)
    try:
        groups = layerwise_param_groups(model, cfg.optim.layer_lr_decay)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    optimizer = build_optimizer(groups, cfg.optim.lr, cfg.optim.betas, cfg.optim.eps,
                                cfg.optim.weight_decay, cfg.optim.implementation)
    scheduler = InverseSqrtSchedule(optimizer, cfg.optim.lr, cfg.optim.warmup_updates, cfg.optim.warmup_init_lr)
    train_items = train_ds
    if cfg.data.concat_utterances > 1 or cfg.data.concat_edge_ms is not None:
        # multi-sentence training (items are spans of consecutive utterances) and/or edge silences
        from mmst.data.spans import build_span_dataset, describe_spans

        train_items = build_span_dataset(train_ds, cfg.data.concat_utterances, cfg.seed, group=cfg.data.concat_group,
                                         pause_ms=cfg.data.concat_pause_ms,
                                         max_frames=min(cfg.data.max_frames, cfg.data.max_tokens),
                                         edge_ms=cfg.data.concat_edge_ms)
        logger.info("multi-sentence training: %s", describe_spans(train_items.spans))
    train_iter = EpochBatchIterator(train_items, train_items.n_frames, train_items.collater, cfg.data.max_tokens,
                                    cfg.data.max_sentences, seed=cfg.seed, num_workers=cfg.data.num_workers)
    vocab_info = train_ds.vocab_info()
    extra = {"data_dir": str(data_dir.resolve()), "vocab": vocab_info, "tgt_langs": list(model.tgt_langs),
             "vocab_mode": vocab_mode}
    validator = Validator(valid_ds, criterion, cfg, device) if valid_ds is not None else None
    compiler = TrainingCompiler(cfg.compile, model, criterion, device, model_cfg.pad_id)
    if validator is not None and compiler.mode is True:  # the same buckets, not counted in bucket_pad_pct
        validator.prepare = functools.partial(pad_batch_to_buckets, pad_id=model_cfg.pad_id)
    trainer = Trainer(cfg, model, criterion, optimizer, scheduler, train_iter, save_dir, device, validator,
                      strategy, extra, compiler=compiler)
    if resume_ckpt is not None:
        check_vocab_compat(resume_ckpt.get("vocab", {}), vocab_info, where=f"checkpoint {last}")
        trainer.load_state_dict(resume_ckpt)
        n_dropped = trainer.log.resume_at(trainer.state.num_updates)
        if n_dropped:
            logger.info("train_log.jsonl: removed %d records logged after update %d by the interrupted run",
                        n_dropped, trainer.state.num_updates)
        logger.info("resumed from %s at update %d (epoch %d, offset %d)", last, trainer.state.num_updates,
                    train_iter.epoch, train_iter.offset)
        trainer.log.log("event", trainer.state.num_updates, {"resumed_from": str(last)})
    elif init_model is not None:
        check_vocab_compat(init_info.get("vocab") or {}, vocab_info, where=f"model {cfg.checkpoint.init_from} "
                           "(prepare the DATA with --vocab-from MODEL_DIR)")
        model.load_state_dict(init_model.state_dict())
        trainer.log.log("event", 0, {"init_from": str(cfg.checkpoint.init_from)})
        logger.info("initialised every weight from %s", cfg.checkpoint.init_from)
    elif cfg.checkpoint.load_pretrained_encoder_from:
        rep = load_pretrained_encoder(model, cfg.checkpoint.load_pretrained_encoder_from,
                                      allow_unsafe_pickle=cfg.checkpoint.allow_unsafe_pickle)
        trainer.log.log("event", 0, {"pretrained_encoder": cfg.checkpoint.load_pretrained_encoder_from,
                                     "loaded": len(rep.loaded), "not_loaded": rep.not_loaded,
                                     "missing": rep.missing})
    logger.info("model %s/%s: %d parameters; %d train utterances (%d batches/epoch); device %s",
                model_cfg.arch, model_cfg.size, sum(p.numel() for p in model.parameters()), len(train_ds),
                len(train_iter), device)
    return trainer


def override_changes(current: dict[str, Any], saved: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{field: (checkpoint value, current value)}`` for every ``model.overrides`` field that differs.

    Both arguments are ``{field: value}`` of the fields that are set (``None`` entries are ignored).
    """
    cur = {k: v for k, v in current.items() if v is not None}
    old = {k: v for k, v in (saved or {}).items() if v is not None}
    return {k: (old.get(k), cur.get(k)) for k in sorted(set(cur) | set(old)) if cur.get(k) != old.get(k)}


def warn_override_changes(cfg: TrainConfig, ckpt: dict[str, Any], path: str | Path) -> dict[str, tuple[Any, Any]]:
    """Warn (naming each field) when ``cfg.model.overrides`` differs from the checkpoint's.

    A resumed run rebuilds the model from the checkpoint's ``model_cfg``, so changed overrides have no
    effect; the warning says so. Returns the differences (see :func:`override_changes`).
    """
    saved = ((ckpt.get("config") or {}).get("model") or {}).get("overrides") or {}
    diff = override_changes(cfg.model.overrides.as_dict(), saved)
    if diff:
        logger.warning(
            "resuming from %s: model.overrides differ from the checkpoint's (%s); the model is rebuilt from the "
            "checkpoint, so these changes are ignored", path,
            ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items()))
    return diff
