"""Tests of mmst.data.manifest and mmst.data.store (TSV manifests, fbank80.zip byte offsets)."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from mmst.data.manifest import (
    ManifestError,
    clean_text,
    manifest_columns,
    read_manifest,
    tgt_langs_of,
    write_manifest,
)
from mmst.data.store import FeatureStoreError, pack_npy_files, parse_audio_field, read_feature


def test_manifest_roundtrip(tmp_path) -> None:
    cols = manifest_columns(["de", "ja"])
    assert cols == ["id", "audio", "n_frames", "speaker", "src_text", "tgt_text_de", "tgt_text_ja",
                    "wav", "offset", "duration"]
    assert tgt_langs_of(cols) == ["de", "ja"]
    rows = [{c: f"{c}{i}" for c in cols} for i in range(3)]
    rows[1]["tgt_text_ja"] = ""
    rows[2]["src_text"] = clean_text("a\tb\nc\u2028d  ")
    write_manifest(tmp_path / "m.tsv", rows, cols)
    back = read_manifest(tmp_path / "m.tsv")
    assert back[1]["tgt_text_ja"] == "" and back[2]["src_text"] == "a b c d"
    assert [r["id"] for r in back] == ["id0", "id1", "id2"]
    with pytest.raises(ManifestError, match="tab/newline"):
        write_manifest(tmp_path / "x.tsv", [{**rows[0], "src_text": "a\tb"}], cols)
    (tmp_path / "bad.tsv").write_text("id\taudio\nu1\n", encoding="utf-8")
    with pytest.raises(ManifestError, match="bad.tsv:2"):
        read_manifest(tmp_path / "bad.tsv")


def test_store_offsets_are_fairseq_compatible(tmp_path) -> None:
    rng = np.random.default_rng(0)
    feats = {f"u{i}": rng.standard_normal((10 + i, 80)).astype(np.float32) for i in range(5)}
    members = []
    for k, f in feats.items():
        np.save(tmp_path / f"{k}.npy", f)
        members.append((f"{k}.npy", str(tmp_path / f"{k}.npy")))
    fields = pack_npy_files(tmp_path / "fbank80.zip", members, progress=False)
    with zipfile.ZipFile(tmp_path / "fbank80.zip") as zf:
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
    for k, f in feats.items():
        path, off, size = parse_audio_field(fields[f"{k}.npy"])
        assert path == "fbank80.zip" and size == (tmp_path / f"{k}.npy").stat().st_size
        # fairseq's reader: seek + read + np.load on the bytes
        with open(tmp_path / path, "rb") as fh:
            fh.seek(off)
            assert fh.read(6) == b"\x93NUMPY"
        np.testing.assert_array_equal(read_feature(tmp_path, fields[f"{k}.npy"]), f)
    np.testing.assert_array_equal(read_feature(tmp_path, "u1.npy"), feats["u1"])
    with pytest.raises(FeatureStoreError, match="not .npy"):
        path, off, size = parse_audio_field(fields["u1.npy"])
        read_feature(tmp_path, f"{path}:{off + 1}:{size}")
    with pytest.raises(ValueError, match="duplicate"):
        pack_npy_files(tmp_path / "y.zip", members + members[:1], progress=False)


def test_repacked_store_is_byte_identical_whatever_the_file_times(tmp_path) -> None:
    import os

    srcs = []
    for i in range(3):
        p = tmp_path / f"u{i}.npy"
        np.save(p, np.full((5 + i, 4), i, dtype=np.float32))
        srcs.append((f"u{i}", str(p)))
    a = pack_npy_files(tmp_path / "a.zip", srcs)
    for i, (_, p) in enumerate(srcs):  # re-extracted files: same bytes, new modification times
        os.utime(p, (1_700_000_000 + 97 * i, 1_700_000_000 + 97 * i))
    b = pack_npy_files(tmp_path / "b.zip", srcs)
    assert {k: v.replace("a.zip", "b.zip") for k, v in a.items()} == b
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    assert np.array_equal(read_feature(tmp_path, a["u2"].replace("a.zip", "b.zip")), np.full((7, 4), 2, np.float32))
