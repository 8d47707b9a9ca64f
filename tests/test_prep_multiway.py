"""Tests of the multi-way builder (mmst.corpora.multiway, mmst.corpora.mustc_layout, data_prep/prep_multiway.py).

Uses a tiny MuST-C-layout corpus written by ``tests/conftest.py`` (tones with digital silence).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fixtures_data import data_prep_main

from mmst.corpora.multiway import BuildError, build_from_rows, join_pairs, read_and_join
from mmst.corpora.mustc_layout import PairSegment, RawCorpusError
from mmst.corpora.mustc_layout import read_pair_split_strict as read_pair_split
from mmst.data.corpus import load_data_config
from mmst.data.manifest import read_manifest, read_manifest_header
from mmst.data.store import read_feature
from mmst.data.vocab import Vocab
from mmst.features import CMVNAccumulator, GlobalCMVN, num_frames


def _prep_main():
    return data_prep_main("prep_multiway")


def _run(raw: Path, out: Path, *extra: str) -> int:
    return _prep_main()(["--mustc-root", str(raw), "--out", str(out), "--no-progress", *extra])


def _report(out: Path) -> dict:
    return json.loads((out / "prep_report.json").read_text(encoding="utf-8"))


def test_build_align_reload_exact_counts(make_mustc, tmp_path) -> None:
    raw, segs = make_mustc(langs=("de", "es", "ja"))
    out = tmp_path / "data"
    assert _run(raw, out, "--tgt-langs", "de,es,ja", "--per-lang-vocab") == 0
    cfg = load_data_config(out)
    assert cfg["tgt_langs"] == ["de", "es", "ja"] and cfg["splits"] == ["train", "dev", "tst-COMMON"]
    assert cfg["vocab"] == {"joint": "spm_joint.model", "src": "spm_src.model",
                            "per_lang": {"de": "spm_de.model", "es": "spm_es.model", "ja": "spm_ja.model"}}
    assert cfg["bpe_tokenizer"]["sentencepiece_model"] == "spm_joint.model" and cfg["fbank"]["dither"] == 1.0
    acc = CMVNAccumulator()
    for split, n in (("train", 6), ("dev", 2), ("tst-COMMON", 2)):
        rows = read_manifest(out / f"{split}.tsv")
        assert len(rows) == n
        assert read_manifest_header(out / f"{split}.tsv") == [
            "id", "audio", "n_frames", "speaker", "src_text", "tgt_text_de", "tgt_text_es", "tgt_text_ja",
            "wav", "offset", "duration"]
        for r, (talk, off, dur) in zip(rows, segs[split]):
            assert r["id"].startswith(talk + "_") and float(r["offset"]) == off and float(r["duration"]) == dur
            assert r["wav"].endswith(f"{talk}.wav") and Path(r["wav"]).is_absolute()
            k = r["id"].rsplit("_", 1)[1]
            assert r["src_text"] == f"talk {talk} segment {k} words here"
            assert r["tgt_text_ja"] == f"[ja] {talk} {k} wort palabra"
            f = read_feature(out, r["audio"])
            assert f.shape == (int(r["n_frames"]), 80) == (num_frames(round(dur * 16000)), 80)
            assert r["audio"].startswith("fbank80.zip:")
            if split == "train":
                acc.add(f)
        for lang in ("de", "es", "ja"):
            st = read_manifest(out / f"{split}_st_{lang}.tsv")
            assert [x["id"] for x in st] == [x["id"] for x in rows]
            assert list(st[0]) == ["id", "audio", "n_frames", "tgt_text", "speaker", "src_text", "tgt_lang"]
    g = GlobalCMVN.load(out / "gcmvn.npz")
    ref = acc.finalize()
    np.testing.assert_allclose(g.mean, ref.mean, rtol=1e-5)
    np.testing.assert_allclose(g.std, ref.std, rtol=1e-4)
    assert g.mean.min() > -10  # dither: digital silence does not sit at the log floor (-15.9)
    v = Vocab.load(out / "spm_joint.model")
    assert [v.lang_tag_id(x) for x in ("de", "es", "ja")] == [4, 5, 6]
    assert v.decode(v.encode("[de] ted_1 0 wort palabra")) == "[de] ted_1 0 wort palabra"
    rep = _report(out)
    assert rep["splits"]["train"]["kept"] == 6 and rep["skipped"] == [] and rep["vocab"]["joint"]["actual"] == len(v)
    assert rep["join"]["splits"]["train"]["utterances"] == 6


def test_rerun_skips_finished_work_and_jobs_match(make_mustc, tmp_path) -> None:
    raw, _ = make_mustc()
    out = tmp_path / "data"
    assert _run(raw, out) == 0
    first = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != "prep_report.json"}
    assert _run(raw, out) == 0
    rep = _report(out)
    assert rep["features"]["extracted"] == 0 and rep["features"]["from_cache"] == 10
    assert rep["features"]["zip_reused"] and rep["vocab"]["joint"]["skipped"]
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != "prep_report.json"} == first
    # an interrupted run: zip never written, two utterances not extracted yet -> only those are redone
    (out / "fbank80.zip").unlink()
    for p in sorted((out / ".cache" / "fbank80").glob("ted_1_*.npy"))[:2]:
        p.unlink()
    assert _run(raw, out) == 0
    rep = _report(out)
    assert rep["features"]["extracted"] == 2 and rep["features"]["from_cache"] == 8
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != "prep_report.json"} == first
    out2 = tmp_path / "data2"
    assert _run(raw, out2, "--jobs", "2") == 0
    for a, b in zip(read_manifest(out / "train.tsv"), read_manifest(out2 / "train.tsv")):
        np.testing.assert_array_equal(read_feature(out, a["audio"]), read_feature(out2, b["audio"]))
    g1, g2 = GlobalCMVN.load(out / "gcmvn.npz"), GlobalCMVN.load(out2 / "gcmvn.npz")
    np.testing.assert_array_equal(g1.mean, g2.mean)
    np.testing.assert_array_equal(g1.std, g2.std)
    assert not list(out.glob(".*.tmp")) and not list(out.glob("*.tmp"))


def _shift_yaml(raw: Path, lang: str, split: str, line: int, delta_s: float) -> None:
    p = raw / f"en-{lang}" / "data" / split / "txt" / f"{split}.yaml"
    lines = p.read_text().splitlines(keepends=True)
    d = read_pair_split(raw, lang, split)[line - 1]
    lines[line - 1] = lines[line - 1].replace(f"offset: {d.offset}", f"offset: {round(d.offset + delta_s, 3)}")
    p.write_text("".join(lines))


def test_join_tolerance_inner_outer(make_mustc) -> None:
    raw, _ = make_mustc()
    _shift_yaml(raw, "es", "train", 2, 0.005)  # within 10 ms: still the same segment
    _shift_yaml(raw, "es", "train", 3, 0.050)  # beyond: different segment
    rows, rep = read_and_join(raw, ["de", "es"], ["train"], tolerance_ms=10, progress=False)
    assert len(rows["train"]) == 5 and rep["splits"]["train"]["incomplete_dropped"] == 2
    assert rep["splits"]["train"]["unmatched"] == {"de": 1, "es": 1}
    rows, _ = read_and_join(raw, ["de", "es"], ["train"], tolerance_ms=10, how="outer", progress=False)
    assert len(rows["train"]) == 7
    lonely = [r for r in rows["train"] if not r["tgt_text_es"] or not r["tgt_text_de"]]
    assert len(lonely) == 2
    rows, _ = read_and_join(raw, ["de", "es"], ["train"], tolerance_ms=60, progress=False)
    assert len(rows["train"]) == 6


def _seg(talk: str, off: float, dur: float, line: int, lang: str = "de", split: str = "train") -> PairSegment:
    return PairSegment(lang, split, talk, f"/x/{talk}.wav", off, dur, "s", f"en {off}", f"{lang} {off}", "y.yaml", line)


def test_offsets_sorted_numerically() -> None:
    segs = [_seg("t", 10.2, 1.0, 1), _seg("t", 9.5, 0.5, 2), _seg("t", 100.0, 1.0, 3)]
    rows, _ = join_pairs({"de": segs}, ["de"])
    assert [(r["id"], r["offset"]) for r in rows["train"]] == [("t_0", 9.5), ("t_1", 10.2), ("t_2", 100.0)]


# ---------------------------------------------------------------- bad input: raw layout errors


def test_language_missing_from_root(make_mustc) -> None:
    raw, _ = make_mustc()
    with pytest.raises(RawCorpusError, match=r"en-fr: language 'fr' missing .*pairs present: de, es"):
        read_and_join(raw, ["de", "fr"], ["train"], progress=False)


def test_yaml_text_line_count_mismatch(make_mustc, tmp_path) -> None:
    raw, _ = make_mustc()
    p = raw / "en-es" / "data" / "dev" / "txt" / "dev.es"
    p.write_text(p.read_text() + "one line too many\n")
    with pytest.raises(RawCorpusError, match=r"dev.yaml: line count mismatch: 2 yaml segments, 2 lines .*3 lines in .*dev.es"):
        read_and_join(raw, ["de", "es"], ["train", "dev"], progress=False)
    assert _run(raw, tmp_path / "d", "--tgt-langs", "de,es") == 1


def test_missing_yaml_key(make_mustc) -> None:
    raw, _ = make_mustc()
    p = raw / "en-de" / "data" / "train" / "txt" / "train.yaml"
    lines = p.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace(" offset: 1.2,", "")
    p.write_text("".join(lines))
    with pytest.raises(RawCorpusError, match=r"train.yaml:2: missing key 'offset'"):
        read_pair_split(raw, "de", "train")


def test_bad_yaml_values_and_extra_keys(make_mustc) -> None:
    raw, _ = make_mustc()
    p = raw / "en-de" / "data" / "train" / "txt" / "train.yaml"
    lines = p.read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace("{duration", "{rW: 10, uW: 0, duration")  # extra keys: ignored
    lines[1] = lines[1].replace("{", "{note: 'a, b: c', ")  # quoted value: slow path, still fine
    p.write_text("".join(lines))
    assert len(read_pair_split(raw, "de", "train")) == 6
    lines[2] = lines[2].replace("duration: 0.8", "duration: abc")
    p.write_text("".join(lines))
    with pytest.raises(RawCorpusError, match=r"train.yaml:3: field 'duration' is not a number: 'abc'"):
        read_pair_split(raw, "de", "train")
    lines[2] = lines[2].replace("duration: abc", "duration: -1")
    p.write_text("".join(lines))
    with pytest.raises(RawCorpusError, match=r"train.yaml:3: field 'duration' must be finite and >= 0"):
        read_pair_split(raw, "de", "train")


def test_non_utf8_text(make_mustc) -> None:
    raw, _ = make_mustc()
    p = raw / "en-es" / "data" / "train" / "txt" / "train.es"
    lines = p.read_bytes().split(b"\n")
    lines[3] = "[es] año".encode("latin-1")
    p.write_bytes(b"\n".join(lines))
    with pytest.raises(RawCorpusError, match=r"train.es:4: text is not valid UTF-8 \(byte column 7"):
        read_pair_split(raw, "es", "train")


def test_unicode_line_separator_does_not_split(make_mustc) -> None:
    raw, _ = make_mustc()
    p = raw / "en-de" / "data" / "train" / "txt" / "train.de"
    lines = p.read_text(encoding="utf-8").split("\n")
    lines[0] = "erste\u2028zeile\x85x"
    p.write_text("\n".join(lines), encoding="utf-8")
    segs = read_pair_split(raw, "de", "train")
    assert len(segs) == 6 and segs[1].tgt_text == "[de] ted_1 1 wort palabra"


def test_duplicate_ids(make_mustc, tmp_path) -> None:
    raw, _ = make_mustc()
    # the same segment twice in one yaml
    base = raw / "en-de" / "data" / "train" / "txt"
    for suffix in ("yaml", "en", "de"):
        p = base / f"train.{suffix}"
        lines = p.read_text().splitlines(keepends=True)
        p.write_text("".join(lines + lines[:1]))
    with pytest.raises(RawCorpusError, match=r"train.yaml:7: duplicate segment .*train.yaml:1"):
        read_and_join(raw, ["de"], ["train"], progress=False)
    # a talk in two splits
    segs = {"de": [_seg("t", 1.0, 1.0, 1), _seg("t", 5.0, 1.0, 1, split="dev")]}
    with pytest.raises(RawCorpusError, match=r"talk 't' is in split 'dev' but also in split 'train'"):
        join_pairs(segs, ["de"])
    # duplicate ids handed to the builder
    row = {"id": "u1", "wav": "/x.wav", "offset": 0, "duration": 1, "speaker": "s", "src_text": "a", "tgt_text_de": "b"}
    with pytest.raises(BuildError, match=r"duplicate id 'u1'"):
        build_from_rows({"train": [row], "dev": [dict(row)]}, tmp_path / "o", ["de"], progress=False)
    with pytest.raises(BuildError, match=r"not usable as a file name"):
        build_from_rows({"train": [{**row, "id": "../evil"}]}, tmp_path / "o", ["de"], progress=False)


# ---------------------------------------------------------------- bad input: audio problems -> skips


def _skips(out: Path) -> dict[str, dict]:
    return {s["id"]: s for s in _report(out)["skipped"]}


def test_bad_audio_is_skipped_and_reported(make_mustc, tmp_path) -> None:
    raw, _ = make_mustc(langs=("de",), talks={"train": [("ted_1", 3), ("ted_2", 2), ("ted_5", 2), ("ted_6", 2),
                                                        ("ted_7", 2)], "tst-COMMON": [("ted_4", 2)]})
    wav = raw / "en-de" / "data" / "train" / "wav"
    (wav / "ted_2.wav").write_bytes(b"RIFF garbage")  # unreadable
    sf.write(wav / "ted_5.wav", np.zeros(0, np.float32), 16000, subtype="PCM_16")  # zero-length file
    x, sr = sf.read(wav / "ted_6.wav", dtype="float32")
    x[int(1.3 * sr)] = np.nan  # NaN inside segment 1 of ted_6
    sf.write(wav / "ted_6.wav", x, sr, subtype="FLOAT")
    (wav / "ted_7.wav").unlink()  # missing file
    y = raw / "en-de" / "data" / "train" / "txt" / "train.yaml"
    lines = y.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace("duration: 0.7", "duration: 0")  # zero-length segment
    lines[2] = lines[2].replace("offset: 2.2", "offset: 99.0")  # past the end of the wav
    y.write_text("".join(lines))
    out = tmp_path / "data"
    assert _run(raw, out, "--tgt-langs", "de", "--splits", "train,tst-COMMON") == 0
    sk = _skips(out)
    assert set(sk) == {"ted_1_1", "ted_1_2", "ted_2_0", "ted_2_1", "ted_5_0", "ted_5_1", "ted_6_1", "ted_7_0", "ted_7_1"}
    assert all(s["reason"] == "audio_error" and s["split"] == "train" for s in sk.values())
    assert "zero-length" in sk["ted_1_1"]["detail"] and "train.yaml:2" in sk["ted_1_1"]["source"]
    assert "past the end" in sk["ted_1_2"]["detail"] and "ted_1.wav" in sk["ted_1_2"]["detail"]
    assert "ted_2.wav: unreadable" in sk["ted_2_0"]["detail"]
    assert "ted_5.wav: empty audio" in sk["ted_5_0"]["detail"]
    assert "NaN or Inf" in sk["ted_6_1"]["detail"] and "ted_6.wav" in sk["ted_6_1"]["detail"]
    assert "ted_7.wav: audio file not found" in sk["ted_7_0"]["detail"]
    assert [r["id"] for r in read_manifest(out / "train.tsv")] == ["ted_1_0", "ted_6_0"]
    assert _report(out)["splits"]["train"]["dropped"] == {"audio_error": 9}
    # the same problem in a test split is an error: test sets are never silently shrunk
    (raw / "en-de" / "data" / "tst-COMMON" / "wav" / "ted_4.wav").write_bytes(b"junk")
    with pytest.raises(BuildError, match=r"(?s)audio error\(s\) in test split.*ted_4.wav: unreadable"):
        rows, _ = read_and_join(raw, ["de"], ["train", "tst-COMMON"], progress=False)
        build_from_rows(rows, tmp_path / "data2", ["de"], progress=False)


def test_length_and_empty_filters(make_mustc, tmp_path) -> None:
    raw, _ = make_mustc(langs=("de",), seg_s=0.6)
    rows, _ = read_and_join(raw, ["de"], ["train", "dev", "tst-COMMON"], progress=False)
    rows["train"][0]["tgt_text_de"] = ""  # no translation at all: dropped in train
    rows["train"][1]["src_text"] = ""  # no transcript: dropped in train
    rows["tst-COMMON"][0]["tgt_text_de"] = ""  # kept in test, with a warning
    short = dict(rows["dev"][0], id="short_dev", duration=0.04)  # 2 frames
    rows["dev"].append(short)
    rows["tst-COMMON"].append(dict(short, id="short_tst"))
    out = tmp_path / "data"
    build_from_rows(rows, out, ["de"], max_frames=65, progress=False)  # 0.7 s = 68 frames, 0.8 s = 78
    sk = _skips(out)
    assert sk["ted_1_0"]["reason"] == "empty_text" and sk["ted_1_1"]["reason"] == "empty_src_text"
    assert sk["short_dev"]["reason"] == "too_short"
    assert {k for k, v in sk.items() if v["reason"] == "too_long"} == {"ted_1_2", "ted_2_1", "ted_2_2"}
    assert [r["id"] for r in read_manifest(out / "train.tsv")] == ["ted_2_0"]
    dev = read_manifest(out / "dev.tsv")
    assert [r["id"] for r in dev] == ["ted_3_0", "ted_3_1"]  # long dev items kept, short one dropped
    tst = read_manifest(out / "tst-COMMON.tsv")
    assert [r["id"] for r in tst] == ["ted_4_0", "ted_4_1", "short_tst"]  # never filtered
    assert tst[0]["tgt_text_de"] == "" and tst[2]["n_frames"] == "2"
    assert len(read_manifest(out / "tst-COMMON_st_de.tsv")) == 2  # fairseq file omits the missing language
    warn = {w["id"]: w["reason"] for w in _report(out)["warnings"]}
    assert warn == {"ted_4_0": "empty_text", "short_tst": "too_short"}


def test_needs_train_split_or_vocab_from(make_mustc, tmp_path) -> None:
    raw, _ = make_mustc(langs=("de",))
    assert _run(raw, tmp_path / "a", "--splits", "dev,tst-COMMON") == 1
    assert _run(raw, tmp_path / "b", "--splits", "train") == 0
    assert _run(raw, tmp_path / "c", "--splits", "dev,tst-COMMON", "--vocab-from", str(tmp_path / "b")) == 0
    assert (tmp_path / "c" / "spm_joint.model").read_bytes() == (tmp_path / "b" / "spm_joint.model").read_bytes()
    assert load_data_config(tmp_path / "c")["vocab_from"] == str((tmp_path / "b").resolve())
