"""Tests for mmst.training.config and the mmst-train command line (config errors)."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from mmst.training.config import (
    ConfigError,
    TrainConfig,
    config_from_dict,
    config_to_dict,
    format_config_help,
    iter_config_docs,
    load_config,
    normalize_waitk_list,
)


def test_defaults_and_roundtrip():
    cfg = load_config()
    assert isinstance(cfg, TrainConfig)
    d = config_to_dict(cfg)
    assert config_from_dict(d) == cfg


def test_yaml_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("seed: 3\noptim:\n  lr: 0.001\n  update_freq: 2\nmodel:\n  arch: separate\n")
    cfg = load_config(p, ["optim.lr=5e-4", "waitk_lagging=[1, 3, offline]", "model.overrides.dropout=0.2",
                          "valid.bleu_waitk=[offline,5]", "data.tgt_langs=[de,ja]"])
    assert cfg.seed == 3 and cfg.optim.update_freq == 2 and cfg.model.arch == "separate"
    assert cfg.optim.lr == pytest.approx(5e-4)  # override wins over YAML
    assert cfg.waitk_lagging == [1, 3, "offline"]
    assert normalize_waitk_list(cfg.waitk_lagging) == [1, 3, None]
    assert cfg.model.overrides.as_dict() == {"dropout": 0.2} and cfg.model.overrides.dropout == 0.2
    assert cfg.data.tgt_langs == ["de", "ja"]


@pytest.mark.parametrize("override, needle", [
    ("optim.lrr=1", "optim.lrr"),
    ("nosuchkey=1", "nosuchkey"),
    ("data.max_tokens.x=1", "data.max_tokens"),
    ("model.overrides.no_such_field=1", "model.overrides.no_such_field"),
    ("model.overrides.vocab_size=5", "model.overrides.vocab_size"),
])
def test_unknown_key_is_named(override, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_config(None, [override])


def test_unknown_key_in_yaml(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("optim:\n  lr: 0.1\n  warmup: 3\n")
    with pytest.raises(ConfigError, match=r"optim\.warmup"):
        load_config(p)


@pytest.mark.parametrize("override, needle", [
    ("optim.lr=-1", "optim.lr"),
    ("data.max_tokens=0", "data.max_tokens"),
    ("criterion.label_smoothing=1.5", "criterion.label_smoothing"),
    ("model.arch=transformer", "model.arch"),
    ("waitk_lagging=0", "waitk_lagging"),
    ("waitk_lagging=[2,fast]", "waitk_lagging"),
    ("optim.update_freq=1.5", "optim.update_freq"),
    ("optim.betas=[0.9]", "optim.betas"),
    ("logging.tensorboard=maybe", "logging.tensorboard"),
    ("model.overrides.dropout=high", "model.overrides.dropout"),
    ("criterion.lang_weights={de: -1}", "criterion.lang_weights"),
])
def test_bad_values_are_named(override, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_config(None, [override])


def test_override_syntax_error():
    with pytest.raises(ConfigError, match="key=value"):
        load_config(None, ["optim.lr"])


def test_help_lists_every_key():
    text = format_config_help()
    keys = [k for k, *_ in iter_config_docs()]
    assert "optim.lr" in keys and "waitk_lagging" in keys and "checkpoint.load_pretrained_encoder_from" in keys
    for k in keys:
        assert f"  {k} (" in text
    for _, _, _, doc in iter_config_docs():
        assert doc.strip()


def test_cli_help_and_config_error(capsys):
    from mmst.training.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "optim.clip_norm" in out and "valid.bleu_waitk" in out
    assert main(["--data", "nowhere", "--save-dir", "nowhere", "optim.bogus=1"]) == 2
    assert "optim.bogus" in capsys.readouterr().err
    assert main(["--data", "nowhere", "--save-dir", "nowhere", "optim.lr=-3"]) == 2
    assert "out of range" in capsys.readouterr().err


def test_cli_flag_aliases(capsys):
    from mmst.training.cli import alias_overrides, build_parser, main

    args = build_parser().parse_args(["--data", "D", "--save-dir", "S", "--max-tokens", "5000", "--waitk-lagging",
                                      "[1,3,offline]", "--fixed-pre-decision-ratio", "7", "optim.lr=1e-3"])
    cfg = load_config(None, [*alias_overrides(args), *args.overrides])
    assert cfg.data.max_tokens == 5000 and cfg.waitk_lagging == [1, 3, "offline"]
    assert cfg.model.overrides.as_dict() == {"pre_decision_ratio": 7} and cfg.optim.lr == pytest.approx(1e-3)
    assert main(["--data", "D", "--save-dir", "S", "--update-freq", "0"]) == 2
    assert "optim.update_freq" in capsys.readouterr().err


def test_distributed_options_reach_the_strategy_and_are_checked():
    from mmst.training.config import load_config
    from mmst.training.strategy import build_strategy

    cfg = load_config(None, ["distributed.options.compute_threshold=auto", "distributed.options.dist_timeout=30"])
    assert cfg.distributed.options == {"compute_threshold": "auto", "dist_timeout": 30}
    s = build_strategy("dropcompute", **cfg.distributed.options)
    assert type(s).__name__ == "TrainerDropCompute"
    with pytest.raises(ValueError, match="compute_thresholdd"):
        build_strategy("dropcompute", compute_thresholdd=1)
    with pytest.raises(ValueError, match="need --distributed"):
        build_strategy("none", **cfg.distributed.options)


def test_cli_flag_aliases_map_to_distributed_options():
    from mmst.training.cli import alias_overrides, build_parser

    args = build_parser().parse_args(["--data", "D", "--save-dir", "S", "--distributed", "dropcompute",
                                      "--compute-threshold", "0.25", "--max-staleness", "3"])
    assert "distributed.options.compute_threshold=0.25" in alias_overrides(args)
    assert "distributed.options.max_staleness=3" in alias_overrides(args)


def test_model_overrides_are_a_typed_section():
    from mmst.models.config import ModelConfig
    from mmst.training.config import DERIVED_MODEL_FIELDS, ModelOverrides, config_to_dict

    names = {f.name for f in dataclasses.fields(ModelOverrides)}
    assert names == {f.name for f in dataclasses.fields(ModelConfig)} - set(DERIVED_MODEL_FIELDS)
    cfg = load_config(None, ["model.overrides.pre_decision_ratio=7", "model.overrides.encoder_attention=offline"])
    assert cfg.model.overrides.pre_decision_ratio == 7 and cfg.model.overrides.dropout is None
    assert config_to_dict(cfg)["model"]["overrides"] == {"pre_decision_ratio": 7, "encoder_attention": "offline"}
    assert "model.overrides.pre_decision_ratio" in format_config_help()
    with pytest.raises(ConfigError, match=r"model\.overrides\.pre_decision_ratio"):
        load_config(None, ["model.overrides.pre_decision_ratio=seven"])


def test_resume_with_other_overrides_warns_naming_them(caplog):
    from mmst.training.trainer import override_changes, warn_override_changes

    cfg = load_config(None, ["model.overrides.dropout=0.3", "model.overrides.pre_decision_ratio=7"])
    ckpt = {"config": {"model": {"overrides": {"dropout": 0.1, "pre_decision_ratio": 7, "ffn_dim": 64}}}}
    assert override_changes(cfg.model.overrides.as_dict(), ckpt["config"]["model"]["overrides"]) == {
        "dropout": (0.1, 0.3), "ffn_dim": (64, None)}
    with caplog.at_level(logging.WARNING):
        diff = warn_override_changes(cfg, ckpt, "ckpt/checkpoint_last.pt")
    assert set(diff) == {"dropout", "ffn_dim"}
    assert "dropout: 0.1 -> 0.3" in caplog.text and "ffn_dim: 64 -> None" in caplog.text
    assert "pre_decision_ratio" not in caplog.text
    caplog.clear()
    same = {"config": {"model": {"overrides": {"dropout": 0.3, "pre_decision_ratio": 7}}}}
    with caplog.at_level(logging.WARNING):
        assert warn_override_changes(cfg, same, "x") == {}
    assert "model.overrides" not in caplog.text


@pytest.mark.parametrize("spec, want", [
    ("3", [3]), ("1,3, 5", [1, 3, 5]), ("offline", [None]), (2, [2]), (None, [None]), ([1, "offline", "3"], [1, None, 3]),
])
def test_waitk_list_parser(spec, want):
    from mmst.simultaneous.waitk import parse_waitk_list

    assert parse_waitk_list(spec) == want


@pytest.mark.parametrize("spec", ["0", "1,-1", "fast", "", [], True, 2.5])
def test_waitk_list_parser_rejects(spec):
    from mmst.simultaneous.waitk import parse_waitk_list

    with pytest.raises(ValueError, match="--waitk-lagging"):
        parse_waitk_list(spec, "--waitk-lagging")


def test_cli_staleness_lr_and_max_drop_rate_flags_reach_the_options():
    from mmst.training.cli import alias_overrides, build_parser

    args = build_parser().parse_intermixed_args(["--data", "D", "--save-dir", "S", "--distributed", "param-server",
                                                 "--staleness-lr", "--max-drop-rate", "0.2"])
    cfg = load_config(None, [*alias_overrides(args), *args.overrides])
    assert cfg.distributed.options == {"lr_per_push": "staleness", "max_drop_rate": 0.2}
    none = build_parser().parse_args(["--data", "D", "--save-dir", "S"])
    assert alias_overrides(none) == []  # not given: nothing set


def test_lr_per_push_default_alias_and_conflicts():
    from mmst.training.distributed import DEFAULT_LR_PER_PUSH, resolve_lr_per_push

    assert DEFAULT_LR_PER_PUSH == "per_worker" == resolve_lr_per_push()
    assert resolve_lr_per_push(staleness_lr=True) == "staleness" == resolve_lr_per_push("staleness", True)
    assert resolve_lr_per_push("full", False) == "full"
    with pytest.raises(ValueError, match="lr_per_push='per_worker' is also given"):
        resolve_lr_per_push("per_worker", True)
    with pytest.raises(ValueError, match="expected one of"):
        resolve_lr_per_push("half")
