"""mmst-prep-lists (mmst.corpora.lists): lists of recordings -> a training DATA directory.

A tiny corpus of generated speech-like audio: two long recordings cut into segments by the ``offset``
and ``duration`` columns, plus whole short clips; vocabulary and CMVN must come from the train list
only; bad rows and bad audio are named by file and line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fixtures_data import data_prep_main

from mmst.corpora.audiolist import AudioListError
from mmst.corpora.lists import build_from_lists, parse_test_lists
from mmst.corpora.multiway import BuildError, format_summary
from mmst.data.manifest import read_manifest
from mmst.data.store import read_feature
from mmst.features import GlobalCMVN

HEADER = "id\taudio\toffset\tduration\tspeaker\ten\tde\tes"
WORDS = ["cat", "dog", "bird", "fish", "sees", "likes", "the", "a", "big", "small"]


def _speechlike(seconds: float, seed: int, peak: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(seconds * 16000)
    t = np.arange(n) / 16000
    x = (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) * (np.sin(2 * np.pi * (150 + 40 * seed) * t)
                                                    + 0.2 * rng.standard_normal(n))
    return (peak * x / np.abs(x).max()).astype(np.float32)


def _row(uid: str, audio: str, off: str, dur: str, spk: str, i: int) -> str:
    en = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(3))
    return f"{uid}\t{audio}\t{off}\t{dur}\t{spk}\t{en}\tde {en}\tes {en}"


def _corpus(root: Path) -> dict[str, Path]:
    """train: 6 segments of talk0.wav (3 s, peak 0.5) + 2 whole clips; dev: 2 segments of talk1.wav; test:
    2 whole clips with a loud peak (so CMVN over all splits would differ from CMVN over train)."""
    (root / "audio").mkdir(parents=True)
    sf.write(root / "audio" / "talk0.wav", _speechlike(3.0, 0, 0.5), 16000)
    sf.write(root / "audio" / "talk1.wav", _speechlike(1.2, 1, 0.5), 16000)
    for i in range(2):
        sf.write(root / "audio" / f"clip{i}.flac", _speechlike(0.6, 2 + i, 0.3), 16000)
        sf.write(root / "audio" / f"test{i}.wav", _speechlike(0.7, 4 + i, 0.9), 16000)
    train = [_row(f"t0_{k}", "audio/talk0.wav", f"{0.5 * k:g}", "0.45", "alice", k) for k in range(6)]
    train += [_row(f"c{i}", f"audio/clip{i}.flac", "", "", "", 6 + i) for i in range(2)]
    dev = [_row(f"t1_{k}", "audio/talk1.wav", f"{0.6 * k:g}", "0.5", "bob", k) for k in range(2)]
    test = [_row(f"x{i}", f"audio/test{i}.wav", "", "", "carol", i) for i in range(2)]
    out = {}
    for name, rows in (("train", train), ("dev", dev), ("tst", test)):
        out[name] = root / f"{name}.tsv"
        out[name].write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return out


def test_lists_to_training_corpus(tmp_path) -> None:
    lists = _corpus(tmp_path / "lists")
    out = tmp_path / "DATA"
    rc = data_prep_main("prep_lists")(["--train", str(lists["train"]), "--dev", str(lists["dev"]),
                                       "--test", f"tst-COMMON={lists['tst']}", "--tgt-langs", "de,es",
                                       "--out", str(out), "--no-progress"])
    assert rc == 0
    cfg = json.loads((out / "prep_report.json").read_text())
    assert {s: v["kept"] for s, v in cfg["splits"].items()} == {"train": 8, "dev": 2, "tst-COMMON": 2}
    assert cfg["tool"] == "prep_lists" and cfg["splits"]["tst-COMMON"]["no_filter"] is True
    train = read_manifest(out / "train.tsv")
    seg = {r["id"]: r for r in train}
    assert seg["t0_3"]["offset"] == "1.5" and seg["t0_3"]["duration"] == "0.45" and seg["t0_3"]["speaker"] == "alice"
    assert seg["c1"]["speaker"] == "unknown" and seg["c1"]["offset"] == "0" and seg["c1"]["duration"] == "0.6"
    # 0.45 s at 10 ms shift, 25 ms window: 1 + (7200 - 400) // 160 = 43 frames, read from talk0.wav at 1.5 s
    assert int(seg["t0_3"]["n_frames"]) == 43 == read_feature(out, seg["t0_3"]["audio"]).shape[0]
    # CMVN: exactly the statistics of the train features (the louder test clips are not in it)
    feats = np.concatenate([read_feature(out, r["audio"]).astype(np.float64) for r in train])
    g = GlobalCMVN.load(out / "gcmvn.npz")
    np.testing.assert_allclose(g.mean, feats.mean(0), rtol=1e-5, atol=1e-4)
    assert cfg["gcmvn"]["utterances"] == 8 and cfg["gcmvn"]["split"] == "train"
    # SentencePiece: trained on the train list's text only (8 utterances: 8 English, 2 x 8 target sentences)
    assert cfg["vocab"]["src"]["num_sentences"] == 8 and cfg["vocab"]["joint"]["num_sentences"] == 16
    assert read_manifest(out / "tst-COMMON.tsv")[0]["tgt_text_es"].startswith("es ")


def test_vocab_from_an_exported_model_folder(tmp_path) -> None:
    """Fine-tuning data: --vocab-from MODEL_DIR copies the folder's SentencePiece models and CMVN."""
    from eval_fixtures import make_tiny_system

    from mmst.export import export_model

    s = make_tiny_system(tmp_path / "sys", langs=("de", "es"))
    folder = export_model(s["ckpt"], tmp_path / "model_export")
    lists = _corpus(tmp_path / "lists")
    build_from_lists(lists["train"], tmp_path / "DATA", tgt_langs=["de", "es"], vocab_from=str(folder),
                     progress=False)
    assert (tmp_path / "DATA" / "spm_joint.model").read_bytes() == (folder / "spm_joint.model").read_bytes()
    assert (tmp_path / "DATA" / "gcmvn.npz").read_bytes() == (folder / "gcmvn.npz").read_bytes()


@pytest.mark.parametrize("cell,field", [("abc", "offset"), ("-1", "offset"), ("0", "duration"), ("x", "duration")])
def test_bad_segment_cell_names_file_line_field(tmp_path, cell, field) -> None:
    lists = _corpus(tmp_path / "lists")
    lines = lists["train"].read_text().splitlines()
    cells = lines[2].split("\t")
    cells[HEADER.split("\t").index(field)] = cell
    lines[2] = "\t".join(cells)
    lists["train"].write_text("\n".join(lines) + "\n")
    with pytest.raises(AudioListError, match=rf"train\.tsv:3: field '{field}' is not a"):
        build_from_lists(lists["train"], tmp_path / "DATA", progress=False)


def test_bad_audio_stops_or_is_skipped_with_a_report(tmp_path) -> None:
    lists = _corpus(tmp_path / "lists")
    with open(lists["train"], "a") as fh:  # a segment past the end of talk0.wav (3 s)
        fh.write(_row("late", "audio/talk0.wav", "2.9", "0.5", "alice", 0) + "\n")
    with pytest.raises(AudioListError, match=r"train\.tsv:10 \(id late\): .*past the end"):
        build_from_lists(lists["train"], tmp_path / "A", dev=lists["dev"], progress=False)
    rep = build_from_lists(lists["train"], tmp_path / "B", dev=lists["dev"], skip_bad=True, progress=False)
    assert [(b["id"], b["split"]) for b in rep["skipped_bad_audio"]] == [("late", "train")]
    assert rep["splits"]["train"]["kept"] == 8
    # rows_in: the data rows of the list (8 + the bad one); the bad clip is counted in dropped
    assert rep["splits"]["train"]["rows_in"] == 9 and rep["splits"]["train"]["dropped"] == {"bad_audio": 1}
    saved = json.loads((tmp_path / "B" / "prep_report.json").read_text())
    assert saved["splits"]["train"] == rep["splits"]["train"]
    assert rep["splits"]["dev"]["dropped"] == {}
    line = next(x for x in format_summary(rep).splitlines() if x.startswith("train "))
    assert line.split()[1:3] == ["9", "8"] and line.endswith("bad_audio=1")


def test_id_in_two_lists_and_bad_test_names(tmp_path) -> None:
    lists = _corpus(tmp_path / "lists")
    with pytest.raises(BuildError, match="duplicate id 't0_0'"):
        build_from_lists(lists["train"], tmp_path / "DATA", tests={"tst-A": lists["train"]}, progress=False)
    assert parse_test_lists(["tst-COMMON=a.tsv", "my_set=b.tsv"]) == {"tst-COMMON": "a.tsv", "my_set": "b.tsv"}
    for bad in (["tst.tsv"], ["dev=a.tsv"], ["a/b=x.tsv"], ["t=a.tsv", "t=b.tsv"]):
        with pytest.raises(AudioListError, match="--test"):
            parse_test_lists(bad)


def test_vocabulary_options_help_matches_the_code() -> None:
    """--vocab-size's help states the automatic rule auto_vocab_size applies; --vocab-from names model folders."""
    from mmst.cli.prep_lists import build_parser
    from mmst.corpora.multiway import DEFAULT_VOCAB_CAPS, auto_vocab_size

    text = " ".join(build_parser().format_help().split())
    assert "min(cap, max(64, word types of the train text)), cap 10000 joint, 8000 per language" in text
    assert "min(5000, max(64, English word types))" in text and "word types / 2" not in text
    assert "or of an exported model folder" in text
    assert (DEFAULT_VOCAB_CAPS["joint"], DEFAULT_VOCAB_CAPS["per_lang"], DEFAULT_VOCAB_CAPS["src"]) == (10000, 8000, 5000)
    words = [f"w{i}" for i in range(300)]
    assert auto_vocab_size(["a b a"], 10000) == 64
    assert auto_vocab_size([" ".join(words)], 10000) == 300 and auto_vocab_size([" ".join(words)], 200) == 200
