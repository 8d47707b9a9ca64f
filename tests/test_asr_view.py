"""English ASR view of a multi-way DATA directory (mmst/corpora/asr_view.py, data_prep/make_asr_view.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from fixtures_data import build_feature_corpus

from mmst.corpora.asr_view import AsrViewError, make_asr_view
from mmst.data.corpus import load_data_config
from mmst.data.dataset import MultiwayDataset
from mmst.data.manifest import read_manifest
from mmst.data.store import read_feature
from mmst.data.vocab import Vocab

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / "data_prep" / "make_asr_view.py"


@pytest.fixture(scope="module")
def src_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("asr_view") / "data"
    build_feature_corpus(root, langs=("de", "es"), n_train=24, n_dev=6)
    # one utterance without transcript: dropped from the view
    rows = read_manifest(root / "dev.tsv")
    rows[0]["src_text"] = ""
    from mmst.data.manifest import write_manifest

    write_manifest(root / "dev.tsv", rows, list(rows[0].keys()))
    return root


def test_symlink_view_layout_and_features(src_data, tmp_path):
    out = tmp_path / "data_asr"
    summary = make_asr_view(src_data, out)
    assert summary["splits"]["train"] == {"utterances": 24, "dropped_empty": 0,
                                          "frames": sum(int(r["n_frames"]) for r in read_manifest(src_data / "train.tsv"))}
    assert summary["splits"]["dev"]["utterances"] == 5 and summary["splits"]["dev"]["dropped_empty"] == 1
    # no copies: relative symlinks
    for name in ("fbank80.zip", "gcmvn.npz", "spm_src.model"):
        p = out / name
        assert p.is_symlink() and not os.path.isabs(os.readlink(p))
    assert (out / "fbank80.zip").resolve() == (src_data / "fbank80.zip").resolve()
    cfg = load_data_config(out)
    assert cfg["tgt_langs"] == ["en"] and cfg["src_lang"] == "en"
    assert cfg["vocab"] == {"joint": "spm_src.model", "src": "spm_src.model", "per_lang": {"en": "spm_src.model"}}
    assert cfg["splits"] == ["train", "dev"] and cfg["prepend_tgt_lang_tag"] is False
    src_rows = {r["id"]: r for r in read_manifest(src_data / "train.tsv")}
    rows = read_manifest(out / "train.tsv")
    assert list(rows[0].keys()) == ["id", "audio", "n_frames", "speaker", "src_text", "tgt_text_en", "wav",
                                    "offset", "duration"]
    for r in rows:
        s = src_rows[r["id"]]
        assert r["tgt_text_en"] == r["src_text"] == s["src_text"]
        assert r["audio"] == s["audio"] and r["n_frames"] == s["n_frames"] and r["wav"] == s["wav"]
        np.testing.assert_array_equal(read_feature(out, r["audio"]), read_feature(src_data, s["audio"]))
    fs = read_manifest(out / "train_asr.tsv")
    assert list(fs[0].keys()) == ["id", "audio", "n_frames", "tgt_text", "speaker"] and len(fs) == 24
    # the dataset reads it with the English vocab as target vocab
    ds = MultiwayDataset(out, "train", vocab_mode="joint")
    en = Vocab.load(src_data / "spm_src.model")
    item = ds[0]
    assert ds.tgt_langs == ["en"] and item["tokens"]["en"] == en.encode(rows[0]["src_text"]) == item["src_tokens"]
    # rerun is idempotent
    assert make_asr_view(src_data, out) == summary


def test_relpath_view_has_no_links(src_data, tmp_path):
    out = tmp_path / "v"
    make_asr_view(src_data, out, link="relpath", splits=["train"])
    assert not any(p.is_symlink() for p in out.iterdir())
    cfg = load_data_config(out)
    rel = os.path.relpath(src_data.resolve(), out.resolve())
    assert cfg["features"] == f"{rel}/fbank80.zip" and cfg["vocab"]["src"] == f"{rel}/spm_src.model"
    rows = read_manifest(out / "train.tsv")
    src = read_manifest(src_data / "train.tsv")
    assert rows[0]["audio"] == f"{rel}/{src[0]['audio']}"
    np.testing.assert_array_equal(read_feature(out, rows[0]["audio"]), read_feature(src_data, src[0]["audio"]))
    ds = MultiwayDataset(out, "train")
    assert ds.features(0).shape == (int(rows[0]["n_frames"]), 80)


def test_errors(src_data, tmp_path):
    with pytest.raises(AsrViewError, match="new directory"):
        make_asr_view(src_data, src_data)
    with pytest.raises(AsrViewError, match="no manifest"):
        make_asr_view(src_data, tmp_path / "x", splits=["tst-COMMON"])
    with pytest.raises(AsrViewError, match="link must be"):
        make_asr_view(src_data, tmp_path / "y", link="copy")
    bad = tmp_path / "bad"
    bad.mkdir()
    cfg = yaml.safe_load((src_data / "config.yaml").read_text())
    cfg["vocab"].pop("src")
    (bad / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(AsrViewError, match="vocab.src"):
        make_asr_view(bad, tmp_path / "z")
    p = subprocess.run([sys.executable, str(CLI), "--data", str(bad), "--out", str(tmp_path / "z")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stderr.startswith("error:") and "vocab.src" in p.stderr


def test_cli_help_and_run(src_data, tmp_path):
    p = subprocess.run([sys.executable, str(CLI), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--data" in p.stdout and "--link" in p.stdout
    p = subprocess.run([sys.executable, str(CLI), "--data", str(src_data), "--out", str(tmp_path / "v")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert '"utterances": 24' in p.stdout


@pytest.mark.slow
def test_train_asr_on_view_then_init_st_encoder(src_data, tmp_path):
    """5 updates of mmst-train (separate, CTC + attention on en) on the view; its encoder initialises an
    ST model on the source DATA.

    Slow: mmst-train in a subprocess (5 updates), then an ST trainer built from its encoder."""
    view = tmp_path / "asr"
    make_asr_view(src_data, view)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    p = subprocess.run(["mmst-train", "--data", str(view), "--save-dir", str(tmp_path / "asr_model"),
                        "model.arch=separate", "optim.max_update=5", "optim.warmup_updates=2",
                        "criterion.ctc_weight=0.3", "num_threads=1", "data.max_tokens=2000",
                        "valid.bleu_subset=2", "logging.progress_bar=false", "logging.tensorboard=false"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    ckpt = tmp_path / "asr_model" / "checkpoint_last.pt"
    from mmst.training.checkpoint import load_checkpoint

    asr = load_checkpoint(ckpt)
    assert asr["train_state"]["num_updates"] == 5 and asr["tgt_langs"] == ["en"]
    assert asr["model_cfg"]["arch"] == "separate" and asr["model_cfg"]["src_vocab_size"] > 0

    from mmst.training.config import load_config
    from mmst.training.trainer import build_trainer

    cfg = load_config(None, ["model.arch=unified", "num_threads=1", "logging.tensorboard=false",
                             f"checkpoint.load_pretrained_encoder_from={ckpt}"])
    tr = build_trainer(cfg, src_data, tmp_path / "st")
    enc = {k[len("encoder."):]: v for k, v in asr["model"].items() if k.startswith("encoder.")}
    n = 0
    for k, v in tr.model.encoder.state_dict().items():
        if k in enc and v.dtype.is_floating_point and "pos" not in k:
            assert torch.equal(v, enc[k]), k
            n += 1
    assert n > 20
