"""Tests for MuST-C reading, cross-pair alignment, perturbation and the prep CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from mmst.corpora.mustc import (
    AlignParams,
    Segment,
    YamlLineError,
    align_segments,
    align_talk,
    build_report,
    fairseq_string_sort_differs,
    format_report,
    iou,
    normalize_text,
    parse_yaml_line,
    read_corpus,
    read_pair_split,
    resolve_split_conflicts,
    split_rank,
    to_rows,
)
from mmst.corpora.mustc_perturb import perturb_mustc_like

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LANGS = ["de", "es", "fr", "it"]
LAYOUT = {"train": (4, 5), "dev": (2, 4), "tst-COMMON": (2, 3)}  # split -> (talks, segments per talk)
SR = 16000


# ---------------------------------------------------------------------------------------------
# fixture: a tiny MuST-C layout with sine+noise wavs, identical segments in every pair
# ---------------------------------------------------------------------------------------------


def make_mustc(root, langs=LANGS, layout=LAYOUT, seed=0):
    """Write ``root/en-XX/data/<split>/{txt,wav}``; talks ~6-8 s, segments 1.0-1.5 s, 0.3 s pauses."""
    rng = np.random.default_rng(seed)
    tid = 0
    for split, (n_talks, n_segs) in layout.items():
        lines = {"yaml": [], "en": [], **{lg: [] for lg in langs}}
        talks = []
        for t in range(n_talks):
            tid += 1
            talk, t0 = f"ted_{tid}", 0.3
            for i in range(n_segs):
                dur = 1.0 + 0.25 * ((i + t) % 3)
                lines["yaml"].append(
                    f"- {{duration: {dur:.6f}, offset: {t0:.6f}, rW: 7, uW: 0, speaker_id: spk.{tid}, wav: {talk}.wav}}"
                )
                lines["en"].append(f"Speaker {tid} says, sentence number {i} is here!")
                for lg in langs:
                    lines[lg].append(f"{lg} satz {tid} nummer {i} hier")
                t0 += dur + 0.3
            talks.append((talk, t0 + 0.2))
        for lg in langs:
            base = os.path.join(root, f"en-{lg}", "data", split)
            os.makedirs(os.path.join(base, "txt"), exist_ok=True)
            os.makedirs(os.path.join(base, "wav"), exist_ok=True)
            for key, ext in (("yaml", "yaml"), ("en", "en"), (lg, lg)):
                with open(os.path.join(base, "txt", f"{split}.{ext}"), "w", encoding="utf-8") as f:
                    f.write("\n".join(lines[key]) + "\n")
            for talk, length in talks:
                n = int(length * SR)
                x = 0.1 * np.sin(2 * np.pi * 220 * np.arange(n) / SR) + 0.01 * rng.standard_normal(n)
                sf.write(os.path.join(base, "wav", f"{talk}.wav"), x.astype("float32"), SR, subtype="PCM_16")
    return root


@pytest.fixture(scope="module")
def clean_root(tmp_path_factory):
    return make_mustc(str(tmp_path_factory.mktemp("mustc_clean")))


@pytest.fixture(scope="module")
def perturbed(tmp_path_factory):
    root = make_mustc(str(tmp_path_factory.mktemp("mustc_pert")))
    summary = perturb_mustc_like(root, LANGS, seed=1)
    return root, summary


def copy_root(src, dst):
    shutil.copytree(src, dst)
    return str(dst)


def seg(lang, talk, off, dur, en, tgt=None, split="train", line=1):
    return Segment(lang, split, talk, f"/x/{talk}.wav", off, dur, "spk", en, tgt or f"{lang}:{en}",
                   "f.yaml", line, normalize_text(en))


# ---------------------------------------------------------------------------------------------
# parsing / normalisation
# ---------------------------------------------------------------------------------------------


def test_parse_yaml_line_extra_keys_and_fallback():
    d = parse_yaml_line("- {duration: 3.500000, offset: 16.610000, rW: 10, uW: 0, speaker_id: spk.1, wav: ted_1.wav}")
    assert d["duration"] == 3.5 and d["offset"] == 16.61 and d["wav"] == "ted_1.wav" and d["speaker_id"] == "spk.1"
    d = parse_yaml_line("- {duration: 1, offset: 2, speaker_id: 'a, b', wav: \"t.wav\"}")  # quoted -> yaml fallback
    assert d["speaker_id"] == "a, b" and d["wav"] == "t.wav" and d["offset"] == 2.0
    with pytest.raises(YamlLineError, match=r"x\.yaml:7: missing key 'wav'"):
        parse_yaml_line("- {duration: 1.0, offset: 2.0}", "x.yaml", 7)
    with pytest.raises(YamlLineError, match=r"x\.yaml:3: offset is not a number"):
        parse_yaml_line("- {duration: 1.0, offset: abc, wav: t.wav}", "x.yaml", 3)
    with pytest.raises(YamlLineError, match=r"x\.yaml:4:"):
        parse_yaml_line("- {duration: [1.0", "x.yaml", 4)


def test_normalize_text():
    assert normalize_text("Hello,  World -- it's (Laughter)!") == "hello world its laughter"
    assert normalize_text("Don’t STOP.") == normalize_text("don't stop") == "dont stop"
    assert normalize_text("  «Ça va?»\t") == "ça va"
    assert normalize_text("") == ""


def test_offsets_sort_numerically():
    assert fairseq_string_sort_differs(["9.5", "10.2"])
    assert not fairseq_string_sort_differs(["1.5", "2.5"])
    segs = {"de": [seg("de", "t", 10.2, 1.0, "b"), seg("de", "t", 9.5, 0.5, "a")]}
    groups = align_talk(segs, ["de"], AlignParams())
    assert [g.ref.src for g in groups] == ["a", "b"]  # numeric order, not "10.2" < "9.5"


def test_iou_and_split_rank():
    assert iou(0, 1, 0, 1) == 1.0 and iou(0, 1, 2, 3) == 0.0
    assert iou(0, 2, 0.04, 2.04) == pytest.approx(1.96 / 2.04)
    assert split_rank("tst-COMMON") > split_rank("tst-HE") > split_rank("dev") > split_rank("train")


# ---------------------------------------------------------------------------------------------
# alignment on records
# ---------------------------------------------------------------------------------------------


def test_align_exact_iou_merge_and_reject():
    de = [seg("de", "t", 1.0, 2.0, "Hello world, how are you?"), seg("de", "t", 3.5, 2.0, "Fine thanks a lot")]
    es = [seg("es", "t", 1.005, 2.0, "hello world how are you"),  # 5 ms: fast path
          seg("es", "t", 3.54, 2.0, "fine thanks a lot")]  # 40 ms: IoU 0.96
    fr = [seg("fr", "t", 1.0, 1.0, "Hello world,"), seg("fr", "t", 2.0, 1.0, "how are you?"),  # split in two
          seg("fr", "t", 3.5 + 0.4, 2.0, "Fine thanks a lot")]  # 400 ms: IoU 0.67 -> no match
    groups = align_talk({"de": de, "es": es, "fr": fr}, ["de", "es", "fr"], AlignParams())
    g0 = groups[0]
    assert {lg: m.method for lg, m in g0.matches.items()} == {"de": "reference", "es": "exact", "fr": "merge"}
    assert g0.tgt_text("fr") == "fr:Hello world, fr:how are you?"
    g1 = next(g for g in groups if g.ref.src.startswith("Fine") and g.ref.lang == "de")
    assert {lg: m.method for lg, m in g1.matches.items()} == {"de": "reference", "es": "iou"}
    lone = [g for g in groups if g.ref.lang == "fr"]
    assert len(lone) == 1 and lone[0].anchor_reason == "iou_below_min"
    # without merging, the split halves do not match
    groups = align_talk({"de": de, "fr": fr}, ["de", "fr"], AlignParams(merge_splits=False))
    assert sorted(g.anchor_reason for g in groups if g.ref.lang == "fr") == ["iou_below_min", "no_text_match",
                                                                             "no_text_match"]


def test_min_langs_interval_union_and_drop_reasons():
    de = [seg("de", "t", 1.0, 2.0, "a b c"), seg("de", "t", 4.0, 2.0, "d e f")]
    es = [seg("es", "t", 0.96, 2.0, "a b c")]
    fr = [seg("fr", "t", 1.0, 2.04, "a b c"), seg("fr", "t", 4.0, 2.0, "d e f")]
    segs = de + es + fr
    res = align_segments(segs, ["de", "es", "fr"], AlignParams())
    assert len(res.kept) == 1 and res.kept[0].offset == 1.0 and res.kept[0].duration == 2.0
    assert sorted(r for _, r in res.dropped) == ["too_few_langs", "too_few_langs"]
    res = align_segments(segs, ["de", "es", "fr"], AlignParams(min_langs=2, interval="union"))
    assert len(res.kept) == 2
    assert res.kept[0].offset == pytest.approx(0.96) and res.kept[0].duration == pytest.approx(2.08)
    rows = to_rows(res)["train"]
    assert [r["id"] for r in rows] == ["t_0", "t_1"]
    assert rows[1]["tgt_text_es"] == "" and rows[1]["tgt_text_fr"] == "fr:d e f"
    # a segment missing from the reference pair can still anchor a group
    res = align_segments(es + fr, ["de", "es", "fr"], AlignParams(min_langs=2))
    assert len(res.kept) == 1 and res.kept[0].ref.lang == "es" and res.kept[0].tgt_text("de") == ""


def test_split_conflict_move_and_drop():
    segs = [seg("de", "t1", 0, 1, "a", split="dev"), seg("es", "t1", 0, 1, "a", split="train"),
            seg("de", "t2", 0, 1, "b", split="tst-COMMON"), seg("es", "t2", 0, 1, "b", split="dev")]
    kept, dropped, conf = resolve_split_conflicts([*segs], "drop")
    assert [(c.talk, c.resolved) for c in conf] == [("t1", "dev"), ("t2", "tst-COMMON")]
    assert len(kept) == 2 and len(dropped) == 2 and {r for _, r in dropped} == {"split_conflict"}
    res = align_segments(segs, ["de", "es"], AlignParams(), split_conflict="move")
    assert sorted((g.split, g.talk, g.n_langs) for g in res.kept) == [("dev", "t1", 2), ("tst-COMMON", "t2", 2)]


# ---------------------------------------------------------------------------------------------
# perturbed fixture: exact counts
# ---------------------------------------------------------------------------------------------


def test_perturbation_properties(perturbed):
    root, s = perturbed
    assert s["single_pair_talk"] == {"talk": "ted_2", "lang": "it", "split": "train"}
    assert s["cross_split_talk"] == {"talk": "ted_5", "lang": "es", "in_split": "train", "other_pairs_split": "dev"}
    assert s["offset_sort_talk"] == "ted_1" and s["padded_s"] == pytest.approx(8.6)
    assert s["shift_5ms"] == s["shift_40ms"] == s["split_in_two"] == {"es": 3, "fr": 3, "it": 3}
    assert s["expected_kept"] == {"train": 15, "dev": 8, "tst-COMMON": 6}
    segs, issues, _ = read_pair_split(root, "de", "train")
    assert not issues
    offs = [x.offset for x in segs if x.talk == "ted_1"]
    assert fairseq_string_sort_differs([f"{o}" for o in offs])
    assert sf.info(os.path.join(root, "en-de/data/train/wav/ted_1.wav")).duration > 10.0
    assert os.path.isfile(os.path.join(root, "en-es/data/train/wav/ted_5.wav"))
    assert not os.path.exists(os.path.join(root, "en-de/data/train/wav/ted_2.wav"))
    with pytest.raises(FileExistsError):
        perturb_mustc_like(root, LANGS, seed=1)


def test_pad_wav_hardlinks_and_symlinks(tmp_path):
    from mmst.corpora.mustc_perturb import _pad_wav

    a = tmp_path / "a.wav"
    sf.write(a, np.full(1600, 0.5, dtype="float32"), SR, subtype="PCM_16")
    os.link(a, tmp_path / "b.wav")
    os.symlink(a, tmp_path / "c.wav")
    done: set = set()
    for name in ("a.wav", "b.wav", "c.wav"):
        _pad_wav(str(tmp_path / name), 0.05, done)
    for name in ("a.wav", "b.wav", "c.wav"):
        x, _ = sf.read(tmp_path / name, dtype="float32")
        assert len(x) == 2400 and np.all(x[:800] == 0) and x[800] == pytest.approx(0.5, abs=1e-4), name


def test_perturbed_alignment_exact_counts(perturbed):
    root, s = perturbed
    segs, n_in, issues = read_corpus(root, LANGS)
    assert issues == []
    res = align_segments(segs, LANGS, AlignParams())
    rows = to_rows(res)
    assert {k: len(v) for k, v in rows.items()} == s["expected_kept"] == {"train": 15, "dev": 8, "tst-COMMON": 6}
    rep = build_report(res, n_in, issues, AlignParams())
    tr = rep["per_split"]["train"]
    assert {lg: tr[lg]["segments_in"] for lg in LANGS} == {"de": 15, "es": 20, "fr": 16, "it": 21}
    assert {lg: tr[lg]["matched"] for lg in LANGS} == {"de": 15, "es": 20, "fr": 16, "it": 16}
    assert tr["it"]["dropped"] == {"talk_missing_in_pairs": 5}
    assert tr["es"]["match_methods"] == {"exact": 17, "iou": 1, "merge": 2}  # 13 + 4 moved dev lines
    assert rep["per_split"]["dev"]["es"]["segments_in"] == 5
    assert rep["split_conflicts"] == [{"talk": "ted_5", "splits_by_lang": {"de": ["dev"], "es": ["train"],
                                       "fr": ["dev"], "it": ["dev"]}, "resolved": "dev", "action": "move",
                                       "n_segments": 4}]
    assert rep["multiway"]["train"]["4"]["at_least"]["utterances"] == 15
    assert rep["multiway"]["train"]["2"]["at_least"]["utterances"] == 15
    assert rep["utterances"]["dev"]["n"] == 8
    # every dev utterance has all four translations, including the talk es had in train
    assert all(r["tgt_text_es"] for r in rows["dev"])
    # shifted segments use the reference (de) interval by default
    assert [r["offset"] for r in rows["train"] if r["talk"] == "ted_1"][:2] == [8.9, 10.2]
    # --min-langs 1 keeps the single-pair talk with empty cells
    res1 = align_segments(segs, LANGS, AlignParams(min_langs=1))
    rows1 = to_rows(res1)["train"]
    lone = [r for r in rows1 if r["talk"] == "ted_2"]
    assert len(lone) == 5 and all(r["tgt_text_de"] == "" and r["tgt_text_it"] for r in lone)
    # without split merging, the split segments are lost; with a strict IoU, the 40 ms shifts are lost
    res2 = align_segments(segs, LANGS, AlignParams(merge_splits=False))
    assert {k: len(v) for k, v in to_rows(res2).items()} == {"train": 12, "dev": 6, "tst-COMMON": 3}  # 3/2/3 segments split
    res3 = align_segments(segs, LANGS, AlignParams(min_iou=0.99))
    n_iou = sum(any(m.method == "iou" for m in g.matches.values()) for g in res.kept)
    assert n_iou == 8  # 9 shifts by 40 ms, two of them on the same reference segment
    assert sum(len(v) for v in to_rows(res3).values()) == 29 - n_iou
    assert "talk_missing_in_pairs" in format_report(rep)


# ---------------------------------------------------------------------------------------------
# bad input: clear message naming file and line; the rest still aligned and reported
# ---------------------------------------------------------------------------------------------


def _run(root, langs=LANGS, **kw):
    segs, n_in, issues = read_corpus(root, langs)
    present = [lg for lg in langs if lg not in {i.lang for i in issues if i.kind == "pair_missing"}]
    res = align_segments(segs, present, AlignParams(**kw))
    return res, build_report(res, n_in, issues, AlignParams(**kw)), issues


def test_bad_pair_missing(clean_root, tmp_path):
    res, rep, issues = _run(clean_root, LANGS + ["nl"])
    assert [i.kind for i in issues] == ["pair_missing"]
    assert os.path.join(clean_root, "en-nl") in issues[0].message
    assert {g.split for g in res.kept} == {"train", "dev", "tst-COMMON"} and len(res.kept) == 20 + 8 + 6


def test_bad_split_missing_for_one_pair(clean_root, tmp_path):
    root = copy_root(clean_root, tmp_path / "r")
    shutil.rmtree(os.path.join(root, "en-fr", "data", "dev"))
    res, rep, issues = _run(root)
    assert [(i.kind, i.lang, i.split) for i in issues] == [("split_missing", "fr", "dev")]
    assert "en-fr/data/dev/txt/dev.yaml" in issues[0].message
    dev = [g for g in res.kept if g.split == "dev"]
    assert len(dev) == 8 and all(g.tgt_text("fr") == "" and g.tgt_text("de") for g in dev)
    assert rep["min_langs_by_split"] == {"train": 4, "dev": 3, "tst-COMMON": 4}
    assert len(res.kept) == 20 + 8 + 6


def test_bad_line_counts_differ(clean_root, tmp_path):
    root = copy_root(clean_root, tmp_path / "r")
    p = os.path.join(root, "en-es", "data", "train", "txt", "train.es")
    lines = open(p, encoding="utf-8").read().splitlines()
    open(p, "w", encoding="utf-8").write("\n".join(lines[:-1]) + "\n")
    res, rep, issues = _run(root)
    assert [(i.kind, i.file, i.line) for i in issues] == [("line_count_mismatch", p, 20)]
    assert f"{p}:20:" in issues[0].message and "train.yaml=20" in issues[0].message and "train.es=19" in issues[0].message
    assert rep["per_split"]["train"]["es"]["dropped"] == {"line_count_mismatch": 20}
    train = [g for g in res.kept if g.split == "train"]
    assert len(train) == 20 and all(g.tgt_text("es") == "" for g in train)
    assert len(res.kept) == 34


def test_bad_wav_absent(clean_root, tmp_path):
    root = copy_root(clean_root, tmp_path / "r")
    os.remove(os.path.join(root, "en-fr", "data", "train", "wav", "ted_3.wav"))
    res, rep, issues = _run(root)
    yaml_p = os.path.join(root, "en-fr", "data", "train", "txt", "train.yaml")
    assert [(i.kind, i.file, i.line, i.n_segments) for i in issues] == [("missing_wav", yaml_p, 11, 5)]
    assert f"{yaml_p}:11:" in issues[0].message and "ted_3.wav" in issues[0].message
    assert rep["per_split"]["train"]["fr"]["dropped"] == {"missing_wav": 5}
    assert rep["per_split"]["train"]["de"]["dropped"] == {"talk_missing_in_pairs": 5}
    assert sum(g.split == "train" for g in res.kept) == 15
    res2, _, _ = _run(root, min_langs=3)
    assert sum(g.split == "train" for g in res2.kept) == 20


def test_bad_duplicate_segment(clean_root, tmp_path):
    root = copy_root(clean_root, tmp_path / "r")
    txt = os.path.join(root, "en-de", "data", "tst-COMMON", "txt")
    for ext in ("yaml", "en", "de"):
        p = os.path.join(txt, f"tst-COMMON.{ext}")
        lines = open(p, encoding="utf-8").read().splitlines()
        open(p, "w", encoding="utf-8").write("\n".join(lines + [lines[1]]) + "\n")
    res, rep, issues = _run(root)
    yaml_p = os.path.join(txt, "tst-COMMON.yaml")
    assert [(i.kind, i.file, i.line) for i in issues] == [("duplicate", yaml_p, 7)]
    assert f"{yaml_p}:7: duplicate segment" in issues[0].message and "already at line 2" in issues[0].message
    assert rep["per_split"]["tst-COMMON"]["de"]["dropped"] == {"duplicate": 1}
    assert len(res.kept) == 34


def test_bad_yaml_line(clean_root, tmp_path):
    root = copy_root(clean_root, tmp_path / "r")
    p = os.path.join(root, "en-it", "data", "dev", "txt", "dev.yaml")
    lines = open(p, encoding="utf-8").read().splitlines()
    lines[2] = "- {duration: 1.0, wav: ted_5.wav}"
    open(p, "w", encoding="utf-8").write("\n".join(lines) + "\n")
    res, rep, issues = _run(root)
    assert [(i.kind, i.line) for i in issues] == [("bad_yaml", 3)]
    assert f"{p}:3: missing key 'offset'" in issues[0].message
    assert sum(g.split == "dev" for g in res.kept) == 7


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def test_cli_align_only(perturbed, tmp_path):
    root, s = perturbed
    out = tmp_path / "out"
    cmd = [sys.executable, os.path.join(REPO, "data_prep", "prep_mustc_multiway.py"), "--mustc-root", root,
           "--tgt-langs", "de,es,fr,it,nl", "--out", str(out), "--align-only", "--no-progress", "--min-langs", "4"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "pair en-nl missing" in p.stdout + p.stderr
    rep = json.loads((out / "alignment_report.json").read_text())
    assert rep["langs"] == LANGS and rep["requested_langs"] == LANGS + ["nl"]
    header = (out / "aligned" / "train.tsv").read_text().splitlines()[0].split("\t")
    assert header[-4:] == [f"tgt_text_{lg}" for lg in LANGS]
    n = {sp: len((out / "aligned" / f"{sp}.tsv").read_text().splitlines()) - 1 for sp in s["expected_kept"]}
    assert n == s["expected_kept"]


def test_cli_help():
    p = subprocess.run([sys.executable, os.path.join(REPO, "data_prep", "prep_mustc_multiway.py"), "--help"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--min-iou" in p.stdout and "--interval" in p.stdout


def test_bad_encoding(clean_root, tmp_path):
    root = copy_root(clean_root, tmp_path / "r")
    p = os.path.join(root, "en-de", "data", "dev", "txt", "dev.de")
    data = open(p, "rb").read().split(b"\n")
    data[4] = b"caf\xe9 latin-1"
    open(p, "wb").write(b"\n".join(data))
    res, rep, issues = _run(root)
    assert [(i.kind, i.file, i.line) for i in issues] == [("bad_encoding", p, 5)]
    assert f"{p}:5: not valid UTF-8" in issues[0].message
    dev = [g for g in res.kept if g.split == "dev"]
    assert len(dev) == 8 and all(g.tgt_text("de") == "" for g in dev)


def test_cli_full_build_min_langs(perturbed, tmp_path):
    """Aligned rows go through the multi-way builder: manifests, features, vocab, config, report."""
    multiway = pytest.importorskip("mmst.corpora.multiway")
    assert hasattr(multiway, "build_from_rows")
    from mmst.data.corpus import load_data_config
    from mmst.data.manifest import read_manifest
    from mmst.data.store import read_feature

    root, s = perturbed
    out = tmp_path / "data"
    cmd = [sys.executable, os.path.join(REPO, "data_prep", "prep_mustc_multiway.py"), "--mustc-root", root,
           "--tgt-langs", ",".join(LANGS), "--out", str(out), "--no-progress", "--min-langs", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    cfg = load_data_config(out)
    assert cfg["tgt_langs"] == LANGS and cfg["splits"] == ["train", "dev", "tst-COMMON"]
    rows = {sp: read_manifest(out / f"{sp}.tsv") for sp in cfg["splits"]}
    assert {sp: len(r) for sp, r in rows.items()} == {"train": 20, "dev": 8, "tst-COMMON": 6}
    lone = [r for r in rows["train"] if r["id"].startswith("ted_2_")]
    assert len(lone) == 5 and all(r["tgt_text_de"] == "" and r["tgt_text_it"] for r in lone)
    r0 = rows["tst-COMMON"][0]
    feats = read_feature(out, r0["audio"])
    assert feats.shape == (int(r0["n_frames"]), 80)
    assert abs(float(r0["duration"]) * 100 - int(r0["n_frames"])) <= 3
    rep = json.loads((out / "prep_report.json").read_text())
    assert rep["alignment"]["min_langs"] == 1 and rep["alignment"]["utterances"]["train"]["n"] == 20
    assert rep["alignment"]["utterances"]["train"]["per_lang"] == {"de": 15, "es": 15, "fr": 15, "it": 20}
    de_st = read_manifest(out / "train_st_de.tsv")
    assert len(de_st) == 15
    # rerun: resumable, same output
    p2 = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p2.returncode == 0, p2.stderr[-3000:]
    assert read_manifest(out / "train.tsv") == rows["train"]


# ---------------------------------------------------------------------------------------------
# end to end through the synthetic generator (data_prep/synthesize_corpus.py --mustc-like-perturb)
# ---------------------------------------------------------------------------------------------

SYNTH = os.path.join(REPO, "data_prep", "synthesize_corpus.py")


@pytest.mark.slow
def test_synth_mustc_like_end_to_end(tmp_path):
    """synthesize_corpus.py --grammar --difficulty easy [--mustc-like-perturb] -> prep_mustc_multiway.py.

    Uses the CLI flag when the generator has it, else calls :func:`perturb_mustc_like` after
    generation (the same hook). Counts are exact for this generator seed and size.
    """
    if not os.path.isfile(SYNTH):
        pytest.skip("data_prep/synthesize_corpus.py not present yet")
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed (needed by the synthetic generator)")
    help_text = subprocess.run([sys.executable, SYNTH, "--help"], capture_output=True, text=True, timeout=60).stdout
    has_flag = "--mustc-like-perturb" in help_text
    raw = tmp_path / "raw"
    langs = ["de", "es", "fr"]
    cmd = [sys.executable, SYNTH, "--out", str(raw), "--tgt-langs", ",".join(langs), "--grammar",
           "--difficulty", "easy", "--num-train", "24", "--num-dev", "8", "--num-test", "8",
           "--segments-per-talk", "3,5", "--seed", "3"]
    if has_flag:
        cmd.append("--mustc-like-perturb")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    if not has_flag:
        perturb_mustc_like(str(raw), langs, 3)
    s = json.loads((raw / "mustc_perturb.json").read_text())
    assert s["single_pair_talk"]["lang"] == "fr" and s["cross_split_talk"]["lang"] == "es"
    assert s["shift_5ms"] == s["shift_40ms"] == {"es": 4, "fr": 4} and s["split_in_two"] == {"es": 3, "fr": 3}
    assert s["expected_kept"] == {"train": 20, "dev": 8, "tst-COMMON": 8}
    out = tmp_path / "data"
    p = subprocess.run([sys.executable, os.path.join(REPO, "data_prep", "prep_mustc_multiway.py"),
                        "--mustc-root", str(raw), "--tgt-langs", ",".join(langs), "--out", str(out),
                        "--no-progress"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    rep = json.loads((out / "prep_report.json").read_text())
    assert {sp: v["kept"] for sp, v in rep["splits"].items()} == s["expected_kept"]
    al = rep["alignment"]
    assert al["per_split"]["train"]["fr"]["dropped"] == {"talk_missing_in_pairs": 4}
    assert {lg: al["per_split"]["train"][lg]["segments_in"] for lg in langs} == {"de": 20, "es": 24, "fr": 25}
    assert [c["talk"] for c in al["split_conflicts"]] == [s["cross_split_talk"]["talk"]]
    assert al["issues"] == []
