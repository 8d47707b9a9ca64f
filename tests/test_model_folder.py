"""The model folder (``mmst-export``, :mod:`mmst.export`) and the one loader
(:func:`mmst.models.checkpoint.load_model`): export -> load gives the same weights and the same words
on a stream; loading never unpickles; a wrong tensor or a missing file is named; every consumer takes
``--model`` (with ``--checkpoint`` as the same option); training starts from a folder
(``checkpoint.init_from``)."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from eval_fixtures import make_tiny_system
from safetensors.torch import load_file, save_file

from mmst.cli_help import ArgumentParser, add_model_arguments
from mmst.evaluation.loading import LoadError, load_system
from mmst.export import ExportError, export_model
from mmst.export import main as export_main
from mmst.models.checkpoint import CheckpointError, load_model


@pytest.fixture(scope="module")
def system(tmp_path_factory) -> dict:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("model_folder")
    s = make_tiny_system(root, langs=("de", "es"))
    s["folder"] = export_model(s["ckpt"], root / "model_export")
    return s


def _copy_folder(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _stream(system_, x: np.ndarray) -> list[dict]:
    tr = system_.translator(3, max_len_b=6)
    tr.reset()
    out = []
    for i in range(0, len(x), 5120):  # 320 ms segments
        words = tr.accept_audio(x[i:i + 5120], finished=i + 5120 >= len(x))
        out.append({lang: [(w.text, w.delay_ms, tuple(w.tokens)) for w in ws] for lang, ws in words.items()})
    return out


def test_export_writes_the_folder(system) -> None:
    d = system["folder"]
    assert sorted(p.name for p in d.iterdir()) == ["README.md", "config.json", "gcmvn.npz", "model.safetensors",
                                                   "spm_joint.model", "spm_joint.txt"]
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["format"] == "mmst-model" and cfg["tgt_langs"] == ["de", "es"] and cfg["vocab_mode"] == "joint"
    assert cfg["data"]["vocab"] == {"joint": "spm_joint.model"} and cfg["data"]["gcmvn"] == "gcmvn.npz"
    ckpt = torch.load(system["ckpt"], weights_only=True)
    assert cfg["vocab"]["tgt"]["de"]["sha256"] == ckpt["vocab"]["tgt"]["de"]["sha256"]
    assert (d / "spm_joint.model").read_bytes() == (system["data"] / "spm_joint.model").read_bytes()
    card = (d / "README.md").read_text()
    assert "English speech -> de, es" in card and "## Export" in card and "mmst-serve --model" in card


def test_export_folder_gets_the_umask_mode(system, tmp_path) -> None:
    import os
    import stat

    old = os.umask(0o022)
    try:
        d = export_model(system["ckpt"], tmp_path / "shared")
    finally:
        os.umask(old)
    assert stat.S_IMODE(d.stat().st_mode) == 0o755
    assert stat.S_IMODE((d / "config.json").stat().st_mode) == 0o644


def test_model_card_states_the_real_dimensions(system) -> None:
    from mmst.export import model_card
    from mmst.models.config import SIZES

    card = (system["folder"] / "README.md").read_text()
    line = next(x for x in card.splitlines() if x.startswith("- architecture:"))
    # the tiny model is built from size xs with overrides (d=64, 2 + 1 layers): not an xs model
    assert "`xs`" not in line and "d_model 64" in line and "encoder 2 layers" in line and "decoder 1 layers" in line
    cfg = json.loads((system["folder"] / "config.json").read_text())
    cfg["model"].update(SIZES["xs"])
    line = next(x for x in model_card(cfg, None).splitlines() if x.startswith("- architecture:"))
    assert "size `xs`" in line and "d_model 192" in line and "encoder 4 layers" in line


def test_export_names_the_moved_data_directory_of_the_checkpoint(tmp_path) -> None:
    import shutil

    s = make_tiny_system(tmp_path / "sys", langs=("de",))
    moved = tmp_path / "DATA_moved"
    shutil.move(s["data"], moved)
    with pytest.raises(ExportError) as e:
        export_model(s["ckpt"], tmp_path / "out")
    msg = str(e.value)
    assert f"DATA directory {s['data']} recorded in the checkpoint" in msg and "pass --data" in msg
    assert not (tmp_path / "out").exists()
    assert export_model(s["ckpt"], tmp_path / "out", data_dir=moved).is_dir()


def test_export_load_same_weights_and_same_words_on_a_stream(system) -> None:
    ckpt = torch.load(system["ckpt"], weights_only=True)
    model, info = load_model(system["folder"])
    assert info["data_dir"] is None and Path(info["model_dir"]) == system["folder"].resolve()
    state = model.state_dict()
    assert set(state) == set(ckpt["model"])
    for k, v in ckpt["model"].items():
        assert torch.equal(state[k], v), k
    a, b = load_system(system["ckpt"]), load_system(system["folder"])
    assert b.data_dir is None and b.tgt_langs == ["de", "es"]
    np.testing.assert_array_equal(a.cmvn.mean, b.cmvn.mean)
    x = sf.read(system["wavs"][1], dtype="float32")[0]
    ra, rb = _stream(a, x), _stream(b, x)
    assert ra == rb
    assert sum(len(ws) for step in ra for ws in step.values()) > 0  # words were written


def test_folder_loading_never_unpickles(system, monkeypatch) -> None:
    def no_pickle(*a, **k):
        raise AssertionError("torch.load called while loading a model folder")

    monkeypatch.setattr(torch, "load", no_pickle)
    model, _ = load_model(system["folder"])
    assert model.tgt_langs == ["de", "es"]


def test_wrong_shape_tensor_is_named(system, tmp_path) -> None:
    d = _copy_folder(system["folder"], tmp_path / "m")
    state = load_file(d / "model.safetensors")
    name = next(k for k in state if k.endswith(".weight") and state[k].dim() == 2)
    state[name] = torch.zeros(state[name].shape[0] + 1, state[name].shape[1])
    save_file(state, str(d / "model.safetensors"))
    shape = tuple(state[name].shape)
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    msg = str(e.value)
    assert str(d / "model.safetensors") in msg and repr(name) in msg and str(shape) in msg
    with pytest.raises(LoadError, match="model.safetensors does not match"):
        load_system(d)


@pytest.mark.parametrize("missing", ["model.safetensors", "spm_joint.model", "gcmvn.npz", "config.json"])
def test_missing_file_is_named(system, tmp_path, missing) -> None:
    d = _copy_folder(system["folder"], tmp_path / "m")
    (d / missing).unlink()
    with pytest.raises(CheckpointError, match=str(d / missing).replace(".", r"\.")):
        load_model(d)


def test_export_refuses_data_with_another_vocabulary(system, tmp_path) -> None:
    other = make_tiny_system(tmp_path / "other", langs=("de", "ja"))
    with pytest.raises(ExportError, match="not the DATA this checkpoint was trained on"):
        export_model(system["ckpt"], tmp_path / "out", data_dir=other["data"])
    assert not (tmp_path / "out").exists()
    assert export_main(["--checkpoint", str(tmp_path / "nope.pt"), "--out", str(tmp_path / "o")]) == 1


def test_model_option_and_checkpoint_alias(capsys) -> None:
    """``--model`` names the model in every consumer; ``--checkpoint`` is its old spelling, with a warning."""
    p = ArgumentParser(prog="tool")
    add_model_arguments(p)
    assert p.parse_args(["--model", "M"]).model == "M"
    assert capsys.readouterr().err == ""
    assert p.parse_args(["--checkpoint", "C"]).model == "C"
    assert capsys.readouterr().err == "tool: warning: --checkpoint is deprecated; use --model\n"
    assert "--checkpoint" not in p.format_help()
    with pytest.raises(SystemExit):
        p.parse_args([])


def test_folder_with_data_only_for_utterances(system) -> None:
    from mmst.evaluation.utterances import load_utterances

    s = load_system(system["folder"], data_dir=system["data"])
    assert s.data_dir == system["data"]
    assert len(load_utterances(s.data_dir, "tst-COMMON", ["de"])) == 3
    with pytest.raises(LoadError, match="--data DATA names the prepared test data"):
        load_utterances(load_system(system["folder"]).data_dir, "tst-COMMON", ["de"])


def test_agent_takes_a_model_folder(system) -> None:
    from mmst.agents import AgentConfigError, build_translator_from_args

    base = dict(mmst_data=None, waitk_lagging=3, max_len_a=0.0, max_len_b=4, min_len=0, beam=1, policy=None,
                policy_args=None, policy_per_lang=[])
    tr = build_translator_from_args(Namespace(model=str(system["folder"]), checkpoint=None, **base), ["de"])
    assert list(tr.tgt_langs) == ["de"]
    with pytest.raises(AgentConfigError, match="not both"):
        build_translator_from_args(Namespace(model=str(system["folder"]), checkpoint=str(system["ckpt"]), **base),
                                   ["de"])


def test_training_starts_from_a_model_folder(tiny_feature_data, tmp_path) -> None:
    """``checkpoint.init_from``: the model is the folder's (architecture and every weight), and a DATA
    with another vocabulary is refused."""
    from mmst.models.checkpoint import VocabMismatchError
    from mmst.training.config import ConfigError, load_config
    from mmst.training.trainer import build_trainer

    ov = ["model.size=xs", "model.overrides.d_model=32", "model.overrides.encoder_layers=1",
          "model.overrides.decoder_layers=1", "model.overrides.attention_heads=2", "model.overrides.ffn_dim=64",
          "model.overrides.conv_channels=32", "optim.max_update=1", "valid.bleu_subset=0", "logging.tensorboard=false",
          "logging.progress_bar=false", "data.max_tokens=2000"]
    first = build_trainer(load_config(None, ov), tiny_feature_data, tmp_path / "a")
    first.save()
    folder = export_model(tmp_path / "a" / "checkpoint_last.pt", tmp_path / "folder")
    # the second run asks for another size: init_from wins (the folder's architecture and weights)
    second = build_trainer(load_config(None, ["model.overrides.d_model=64", "logging.tensorboard=false",
                                              f"checkpoint.init_from={folder}"]), tiny_feature_data, tmp_path / "b")
    assert second.model.cfg.d_model == 32
    for k, v in first.model.state_dict().items():
        assert torch.equal(second.model.state_dict()[k].cpu(), v.cpu()), k
    other = make_tiny_system(tmp_path / "other", langs=("de", "es"))
    other_data = tmp_path / "other_data"
    import shutil

    shutil.copytree(tiny_feature_data, other_data)
    shutil.copy(other["data"] / "spm_joint.model", other_data / "spm_joint.model")
    with pytest.raises(VocabMismatchError, match="--vocab-from MODEL_DIR"):
        build_trainer(load_config(None, [f"checkpoint.init_from={folder}", "logging.tensorboard=false"]), other_data,
                      tmp_path / "c")
    with pytest.raises(ConfigError, match="give one"):
        load_config(None, [f"checkpoint.init_from={folder}", f"checkpoint.load_pretrained_encoder_from={folder}"])
