"""The one loader (:func:`mmst.evaluation.bundle.load_bundle`): what its bundle holds, from a model folder
and from a checkpoint plus its DATA; one ``mmst-eval`` run loads once and reads each model or DATA file
once; with a model folder the DATA directory is read for the test utterances and nothing else."""

from __future__ import annotations

import builtins
import io
import json
import shutil
from pathlib import Path

import pytest
from cli_runner import run_main


@pytest.fixture(scope="module")
def folder(tiny_system, tmp_path_factory) -> Path:
    """The model folder ``mmst-export`` writes for the shared evaluation checkpoint."""
    from mmst.export import export_model

    return export_model(tiny_system["ckpt"], tmp_path_factory.mktemp("bundle") / "model_export").resolve()


def test_bundle_from_a_folder_and_from_a_checkpoint(tiny_system, folder) -> None:
    """Both describe themselves: languages, vocabulary and CMVN files, feature settings, where they came from."""
    from mmst.evaluation.bundle import ModelBundle, load_bundle
    from mmst.evaluation.loading import EvalSystem, load_system

    data = Path(tiny_system["data"])
    b = load_bundle(folder, tgt_langs=["es"])
    assert isinstance(b, ModelBundle) and EvalSystem is ModelBundle
    assert b.is_model_dir and b.source == folder and b.resources_dir == folder and b.data_dir is None
    assert b.tgt_langs == ["es"] and list(b.vocabs) == ["es"]
    assert b.vocab_paths == {"es": folder / "spm_joint.model"} and b.cmvn_path == folder / "gcmvn.npz"
    assert b.fbank_kwargs == {"dither": 0.0, "dither_mode": "all"} and b.peak_normalize is None
    c = load_system(tiny_system["ckpt"])  # the data_dir the checkpoint records
    assert not c.is_model_dir and c.source == Path(tiny_system["ckpt"]) and c.data_dir == data
    assert c.resources_dir == data and c.tgt_langs == ["de", "es"]
    assert c.vocab_paths == {"de": data / "spm_joint.model", "es": data / "spm_joint.model"}
    assert c.vocabs["de"] is c.vocabs["es"]  # one joint vocabulary, loaded once
    assert c.cmvn_path == data / "gcmvn.npz" and c.data_cfg["gcmvn"] == "gcmvn.npz"


def _eval(model, data, out: Path) -> dict[str, list[str]]:
    """One ``mmst-eval`` run (k=3, de, two utterances); returns what its loader read: ``{reader: [path, ...]}``
    for the loader itself, the model, ``config.yaml`` and the CMVN, and ``opened``: every file opened from
    Python (the vocabulary, the manifest, a folder's ``config.json``; not the weights, read by safetensors)."""
    import mmst.cmvn
    import mmst.data.corpus
    import mmst.evaluation.bundle
    import mmst.models.checkpoint
    from mmst.cli.simultaneous_eval import main

    reads: dict[str, list[str]] = {"opened": []}
    real_open = builtins.open

    def recording_open(file, *a, **k):  # builtins.open and io.open (Path.read_bytes, numpy, yaml) are one function
        if isinstance(file, (str, Path)):
            reads["opened"].append(str(Path(file).resolve()))
        return real_open(file, *a, **k)

    def spy(key, fn):
        def wrapper(path, *a, **k):
            reads.setdefault(key, []).append(str(Path(path).resolve()))
            return fn(path, *a, **k)
        return wrapper

    with pytest.MonkeyPatch.context() as mp:
        for owner, name in [(mmst.evaluation.bundle, "load_bundle"), (mmst.models.checkpoint, "load_model"),
                            (mmst.data.corpus, "load_data_config")]:
            mp.setattr(owner, name, spy(name, getattr(owner, name)))
        cmvn = spy("GlobalCMVN", mmst.cmvn.GlobalCMVN.load)
        mp.setattr(mmst.cmvn.GlobalCMVN, "load", classmethod(lambda cls, path: cmvn(path)))
        mp.setattr(builtins, "open", recording_open)
        mp.setattr(io, "open", recording_open)
        p = run_main(main, ["--model", model, "--data", data, "--tgt-langs", "de", "--waitk-lagging", "3",
                            "--max-len-b", "4", "--max-utterances", "2", "--out", out, "--no-progress",
                            "--threads", "1"])
    assert p.returncode == 0, p.stderr[-3000:]
    return reads


def _under(paths: list[str], folder: Path) -> list[str]:
    return sorted(x for x in paths if Path(x).is_relative_to(folder))


def test_one_eval_run_loads_once_and_reads_each_file_once(tiny_system, folder, tmp_path) -> None:
    """A checkpoint: the loader once, the checkpoint once, DATA/config.yaml, the vocabulary and the CMVN once
    each; the DATA otherwise gives the test manifest only (the audio is outside it)."""
    data, ckpt = Path(tiny_system["data"]).resolve(), str(Path(tiny_system["ckpt"]).resolve())
    r = _eval(tiny_system["ckpt"], data, tmp_path / "ckpt")
    assert r["load_bundle"] == [ckpt] and r["load_model"] == [ckpt]
    assert r["load_data_config"] == [str(data)]
    assert r["GlobalCMVN"] == [str(data / "gcmvn.npz")]
    # each once: the configuration, the manifest, the CMVN stats, the vocabulary (loaded and fingerprinted)
    assert _under(r["opened"], data) == sorted(str(data / n) for n in ("config.yaml", "gcmvn.npz", "spm_joint.model",
                                                                      "tst-COMMON.tsv"))


def test_a_model_folder_reads_data_only_for_test_utterances(tiny_system, folder, tmp_path) -> None:
    """A model folder with a DATA directory that holds only the test manifest (no config.yaml, vocabulary,
    CMVN or features): the run reads the manifest from it, everything else from the folder, once each, and
    writes the same hypotheses as the checkpoint with its full DATA."""
    data = (tmp_path / "DATA").resolve()
    data.mkdir()
    shutil.copy(Path(tiny_system["data"]) / "tst-COMMON.tsv", data / "tst-COMMON.tsv")
    r = _eval(folder, data, tmp_path / "folder")
    assert r["load_bundle"] == [str(folder)] and r["load_model"] == [str(folder)]
    assert "load_data_config" not in r  # no config.yaml read from anywhere
    assert r["GlobalCMVN"] == [str(folder / "gcmvn.npz")]
    assert _under(r["opened"], data) == [str(data / "tst-COMMON.tsv")]
    assert _under(r["opened"], folder) == sorted(str(folder / n) for n in ("config.json", "gcmvn.npz",
                                                                           "spm_joint.model"))
    _eval(tiny_system["ckpt"], tiny_system["data"], tmp_path / "ckpt")
    got = {name: [(d["prediction"], d["delays"]) for d in map(json.loads, (tmp_path / name / "de" / "instances.log")
                                                              .read_text().splitlines())] for name in ("ckpt", "folder")}
    assert got["ckpt"] == got["folder"] and len(got["ckpt"]) == 2
