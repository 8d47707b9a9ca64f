"""Feature store: one uncompressed zip of ``.npy`` members, addressed by byte offsets (fairseq form).

Layout: ``DATA/fbank80.zip`` holds one member ``<utterance id>.npy`` per utterance, stored with
``ZIP_STORED`` (no compression), each an ordinary ``.npy`` file of float32 ``(T, 80)`` raw fbank
(no CMVN). A manifest ``audio`` cell ``fbank80.zip:<offset>:<size>`` gives the byte offset of the
member's data inside the zip and its byte size, so a reader does one ``seek`` + ``read`` and
``np.load`` on the bytes, without parsing the zip directory. This is exactly fairseq's
``speech_to_text`` convention (``get_zip_manifest`` / ``read_from_stored_zip``), so fairseq can
read our manifests unchanged.

Why one zip rather than one ``.npy`` per utterance: a 400-hour corpus is ~250k utterances; one
file keeps the file count (and inode/NFS metadata cost) low, copies as one object, and random
access costs the same (one seek). The per-utterance ``.npy`` files still exist transiently as the
resumable cache of the prep (``DATA/.cache/fbank80/``), packed into the zip atomically at the end.
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import zipfile
from collections.abc import Iterable

import numpy as np
from tqdm import tqdm

from mmst.atomic import atomic_path

NPY_MAGIC = b"\x93NUMPY"
#: the time stamp of every packed member (the zip format's earliest), so a rebuilt store is byte-identical
FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_LOCAL_HEADER_SIG = b"PK\x03\x04"


class FeatureStoreError(ValueError):
    """A feature store entry is malformed or does not match its manifest ``audio`` cell."""


def parse_audio_field(audio_field: str) -> tuple[str, int | None, int | None]:
    """Split a manifest ``audio`` cell into ``(path, byte_offset, byte_size)``.

    ``"fbank80.zip:1234:5678"`` -> ``("fbank80.zip", 1234, 5678)``; a plain path (``"x/u1.npy"``)
    -> ``("x/u1.npy", None, None)``.

    Raises:
        FeatureStoreError: an ``a:b:c`` form whose offset/size are not non-negative integers.
    """
    parts = audio_field.rsplit(":", 2)
    if len(parts) == 3 and parts[1].lstrip("-").isdigit() and parts[2].lstrip("-").isdigit():
        off, size = int(parts[1]), int(parts[2])
        if off < 0 or size <= 0:
            raise FeatureStoreError(f"bad audio field {audio_field!r}: offset/size must be >= 0 / > 0")
        return parts[0], off, size
    if len(parts) == 3 and parts[0].endswith(".zip"):
        raise FeatureStoreError(f"bad audio field {audio_field!r}: expected <zip>:<offset>:<size>")
    return audio_field, None, None


def format_audio_field(zip_name: str, offset: int, size: int) -> str:
    """Inverse of :func:`parse_audio_field` for a zip entry."""
    return f"{zip_name}:{offset}:{size}"


def load_npy_bytes(data: bytes, where: str = "") -> np.ndarray:
    """Decode the bytes of an ``.npy`` file into a float32 array.

    Raises:
        FeatureStoreError: not ``.npy`` data (bad offset) or not a 2-D array.
    """
    if not data.startswith(NPY_MAGIC):
        raise FeatureStoreError(f"{where}: bytes are not .npy data (wrong offset/size?)")
    arr = np.load(io.BytesIO(data), allow_pickle=False)
    if arr.ndim != 2:
        raise FeatureStoreError(f"{where}: expected a 2-D (T, D) array, got shape {arr.shape}")
    return arr.astype(np.float32, copy=False)


def read_feature(data_dir: str | os.PathLike[str], audio_field: str) -> np.ndarray:
    """Read one utterance's raw fbank from the store.

    Args:
        data_dir: the DATA directory (manifest paths are relative to it; absolute paths also work).
        audio_field: manifest ``audio`` cell: ``fbank80.zip:<offset>:<size>`` or a ``.npy`` path.

    Returns:
        float32 ``(T, 80)`` raw fbank (apply :class:`mmst.features.GlobalCMVN` yourself).

    Raises:
        FileNotFoundError: missing store file.
        FeatureStoreError: malformed field, or bytes at that offset are not an ``.npy`` array.
    """
    path, off, size = parse_audio_field(audio_field)
    full = os.path.join(os.fspath(data_dir), path)
    if off is None:
        return load_npy_bytes(open(full, "rb").read(), full)
    with open(full, "rb") as fh:
        fh.seek(off)
        data = fh.read(size)
    if len(data) != size:
        raise FeatureStoreError(f"{full}:{off}:{size}: short read ({len(data)} bytes), store truncated?")
    return load_npy_bytes(data, f"{full}:{off}:{size}")


def zip_member_offsets(zip_path: str | os.PathLike[str]) -> dict[str, tuple[int, int]]:
    """Byte ``(offset, size)`` of every stored member's data, keyed by member name.

    The data offset is read from each member's local header (``30 + name length + extra length``
    bytes after the header start), so zip64 extras are handled.

    Raises:
        FeatureStoreError: a compressed member (the store must be ``ZIP_STORED``) or a bad header.
    """
    out: dict[str, tuple[int, int]] = {}
    with zipfile.ZipFile(os.fspath(zip_path)) as zf, open(os.fspath(zip_path), "rb") as fh:
        for info in zf.infolist():
            if info.compress_type != zipfile.ZIP_STORED:
                raise FeatureStoreError(f"{zip_path}: member {info.filename} is compressed; expected ZIP_STORED")
            fh.seek(info.header_offset)
            hdr = fh.read(30)
            if len(hdr) != 30 or hdr[:4] != _LOCAL_HEADER_SIG:
                raise FeatureStoreError(f"{zip_path}: bad local header for {info.filename}")
            name_len, extra_len = struct.unpack("<HH", hdr[26:30])
            out[info.filename] = (info.header_offset + 30 + name_len + extra_len, info.file_size)
    return out


def pack_npy_files(zip_path: str | os.PathLike[str], members: Iterable[tuple[str, str]],
                   progress: bool = True) -> dict[str, str]:
    """Pack ``.npy`` files into an uncompressed zip, atomically, and return their audio fields.

    Args:
        zip_path: destination zip (e.g. ``DATA/fbank80.zip``); the ``audio`` fields use its basename.
        members: ``(member_name, npy_file_path)`` pairs; names must be unique and end in ``.npy``.
        progress: show a tqdm bar.

    Returns:
        ``{member_name: "fbank80.zip:<offset>:<size>"}``.

    Raises:
        ValueError: duplicate member names. FeatureStoreError: a packed member fails verification.
    """
    members = list(members)
    names = [m for m, _ in members]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[:5]
        raise ValueError(f"{zip_path}: duplicate member names {dup}")
    zip_name = os.path.basename(os.fspath(zip_path))
    with atomic_path(zip_path) as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, src in tqdm(members, desc=f"pack {zip_name}", unit="utt", disable=not progress,
                                  mininterval=1.0):
                # a fixed entry time (not the file's mtime), so a rebuilt store is byte-identical
                info = zipfile.ZipInfo(name, date_time=FIXED_ZIP_TIME)
                info.compress_type = zipfile.ZIP_STORED
                info.external_attr = 0o644 << 16
                info.file_size = os.path.getsize(src)
                with open(src, "rb") as fin, zf.open(info, "w", force_zip64=info.file_size > 0x7FFFFFFF) as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
        offsets = zip_member_offsets(tmp)
        with open(tmp, "rb") as fh:  # verify every member starts with the npy magic
            for name, (off, _size) in offsets.items():
                fh.seek(off)
                if fh.read(len(NPY_MAGIC)) != NPY_MAGIC:
                    raise FeatureStoreError(f"{zip_path}: member {name} does not start with .npy magic")
    return {name: format_audio_field(zip_name, off, size) for name, (off, size) in offsets.items()}
