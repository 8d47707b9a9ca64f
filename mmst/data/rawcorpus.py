"""Strict reader of the raw MuST-C corpus layout (one release per language pair).

Layout (``RAW`` = ``--root``; ``XX`` = target language; ``<split>`` = train, dev, tst-COMMON, ...)::

    RAW/en-XX/data/<split>/wav/<talk>.wav       whole talks
    RAW/en-XX/data/<split>/txt/<split>.yaml     one segment per line (seconds):
                                                - {duration: 3.5, offset: 16.61, speaker_id: spk.1, wav: ted_1.wav}
    RAW/en-XX/data/<split>/txt/<split>.en       English transcript, line N <-> yaml segment N
    RAW/en-XX/data/<split>/txt/<split>.XX       translation,        line N <-> yaml segment N

Everything that could misalign text and audio is an error (:class:`RawCorpusError`) whose message
names the file, the 1-based line and the field: missing pair directory (lists the pairs present),
missing split files, non-UTF-8 text (line and byte), yaml/text line-count mismatch, a yaml line that
is not a mapping, a missing required key (``duration``, ``offset``, ``speaker_id``, ``wav``), a
non-numeric, negative or non-finite offset/duration. Extra yaml keys (``rW``, ``uW`` ...) are ignored.
Problems of the *audio* (missing or unreadable wav, segment past the end, NaN) are not detected here;
the builder records them as skips in ``prep_report.json``.

The yaml is parsed with a fast line parser (flow mappings of plain scalars, ~1 us/line); lines it
does not understand (quoted values, unusual spacing) go through ``yaml.safe_load`` one at a time, so
a large yaml never costs a full PyYAML parse. Blank lines, ``---`` and ``#`` comments are skipped
(segments are matched to text lines by segment index, error messages give yaml line numbers).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

REQUIRED_YAML_KEYS = ("duration", "offset", "speaker_id", "wav")
"""Keys every yaml segment must have."""

_KEY_RE = re.compile(r"[A-Za-z_][\w\-]*")


class RawCorpusError(ValueError):
    """Bad raw-corpus input; the message names file, line and field."""


@dataclass(slots=True)
class PairSegment:
    """One segment of one language pair (a yaml line plus its two text lines).

    Attributes:
        lang: target language of the pair (``de`` for ``en-de``).
        split: split name.
        talk: talk id (wav file name without extension).
        wav: absolute path of the talk audio.
        offset: segment start in the talk, seconds.
        duration: segment length, seconds.
        speaker: ``speaker_id``.
        src_text: English line (outer whitespace stripped).
        tgt_text: translation line (outer whitespace stripped).
        file: yaml path (for messages).
        line: 1-based yaml line number.
    """

    lang: str
    split: str
    talk: str
    wav: str
    offset: float
    duration: float
    speaker: str
    src_text: str
    tgt_text: str
    file: str
    line: int

    @property
    def source(self) -> str:
        """``yaml_path:line`` for reports."""
        return f"{self.file}:{self.line}"


def available_pairs(root: str | os.PathLike[str], src_lang: str = "en") -> list[str]:
    """Target languages with a ``RAW/<src>-XX`` directory, sorted."""
    p = Path(root)
    if not p.is_dir():
        return []
    pre = f"{src_lang}-"
    return sorted(d.name[len(pre):] for d in p.iterdir() if d.is_dir() and d.name.startswith(pre))


def pair_dir(root: str | os.PathLike[str], lang: str, src_lang: str = "en") -> Path:
    """``RAW/en-XX``; raises :class:`RawCorpusError` listing the pairs present when it is missing."""
    d = Path(root) / f"{src_lang}-{lang}"
    if not d.is_dir():
        have = available_pairs(root, src_lang)
        raise RawCorpusError(
            f"{d}: language {lang!r} missing from --root {root} (pairs present: {', '.join(have) or 'none'})"
        )
    return d


def split_files(root: str | os.PathLike[str], lang: str, split: str, src_lang: str = "en") -> dict[str, Path]:
    """Paths of one pair/split: ``yaml``, ``src`` (.en), ``tgt`` (.XX) and ``wav_dir``.

    Raises:
        RawCorpusError: the pair or any of the three text files is missing.
    """
    base = pair_dir(root, lang, src_lang) / "data" / split
    txt = base / "txt"
    files = {"yaml": txt / f"{split}.yaml", "src": txt / f"{split}.{src_lang}", "tgt": txt / f"{split}.{lang}",
             "wav_dir": base / "wav"}
    for k in ("yaml", "src", "tgt"):
        if not files[k].is_file():
            raise RawCorpusError(f"{files[k]}: missing ({src_lang}-{lang} split {split!r})")
    return files


def read_text_lines(path: str | os.PathLike[str]) -> list[str]:
    """Lines of a UTF-8 text file, split on ``\\n`` only (a ``\\r`` before it is dropped).

    Unicode line separators (U+2028, U+0085 ...) inside a line do NOT split it: ``str.splitlines``
    would, and silently misalign the file with its yaml. A final newline does not add a line.

    Raises:
        RawCorpusError: not valid UTF-8 (message gives line, byte column and the bytes).
    """
    p = os.fspath(path)
    data = Path(p).read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise RawCorpusError(
            f"{p}:{line}: text is not valid UTF-8 (byte column {col}: {data[e.start:e.end]!r}); "
            "re-encode the file as UTF-8"
        ) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def _parse_flow_line(s: str) -> dict[str, str] | None:
    """Fast path: ``- {k: v, k: v}`` with plain scalars; None if the line needs real YAML."""
    if not (s.startswith("- {") and s.endswith("}")):
        return None
    body = s[3:-1]
    if "{" in body or "}" in body or "[" in body or "'" in body or '"' in body or "#" in body:
        return None
    out: dict[str, str] = {}
    for part in body.split(","):
        k, sep, v = part.partition(": ")
        k, v = k.strip(), v.strip()
        if not sep or not k or not v or not _KEY_RE.fullmatch(k):
            return None
        out[k] = v
    return out


def parse_segment_yaml(path: str | os.PathLike[str]) -> list[tuple[int, dict[str, str]]]:
    """Parse a MuST-C segment yaml into ``[(line_number, {key: value-as-string}), ...]``.

    Raises:
        RawCorpusError: non-UTF-8 file, or a line that is not a one-line mapping (names the line).
    """
    import yaml

    p = os.fspath(path)
    out: list[tuple[int, dict[str, str]]] = []
    for lineno, raw in enumerate(read_text_lines(p), start=1):
        s = raw.strip()
        if not s or s == "---" or s.startswith("#"):
            continue
        d = _parse_flow_line(s)
        if d is None:
            try:
                val = yaml.load(s, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            except yaml.YAMLError as e:
                raise RawCorpusError(f"{p}:{lineno}: not valid YAML ({str(e).splitlines()[0]})") from None
            if isinstance(val, list) and len(val) == 1:
                val = val[0]
            if not isinstance(val, dict):
                raise RawCorpusError(f"{p}:{lineno}: expected one segment mapping per line, got {s[:80]!r}")
            d = {str(k): ("" if v is None else str(v)) for k, v in val.items()}
        out.append((lineno, d))
    return out


def _num(d: dict[str, str], key: str, path: str, lineno: int) -> float:
    v = d.get(key)
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise RawCorpusError(f"{path}:{lineno}: field {key!r} is not a number: {v!r}") from None
    if not math.isfinite(x) or x < 0:
        raise RawCorpusError(f"{path}:{lineno}: field {key!r} must be finite and >= 0, got {v!r}")
    return x


def read_pair_split(root: str | os.PathLike[str], lang: str, split: str, src_lang: str = "en") -> list[PairSegment]:
    """Read and validate one pair/split into :class:`PairSegment` records, in yaml order.

    Raises:
        RawCorpusError: see the module docstring (missing pair/files, line-count mismatch, missing
            key, bad number, non-UTF-8 text).
    """
    f = split_files(root, lang, split, src_lang)
    ypath = os.fspath(f["yaml"])
    segs = parse_segment_yaml(ypath)
    src = read_text_lines(f["src"])
    tgt = read_text_lines(f["tgt"])
    if not (len(segs) == len(src) == len(tgt)):
        raise RawCorpusError(
            f"{ypath}: line count mismatch: {len(segs)} yaml segments, {len(src)} lines in {f['src']}, "
            f"{len(tgt)} lines in {f['tgt']}; the files must be line-aligned"
        )
    wav_dir = f["wav_dir"].resolve()
    out: list[PairSegment] = []
    for (lineno, d), s, t in zip(segs, src, tgt):
        for k in REQUIRED_YAML_KEYS:
            if k not in d:
                raise RawCorpusError(f"{ypath}:{lineno}: missing key {k!r} (have {', '.join(d) or 'none'})")
        wav = d["wav"].strip()
        if not wav or "/" in wav or "\\" in wav:
            raise RawCorpusError(f"{ypath}:{lineno}: field 'wav' must be a bare file name, got {wav!r}")
        out.append(PairSegment(
            lang=lang, split=split, talk=os.path.splitext(wav)[0], wav=os.fspath(wav_dir / wav),
            offset=_num(d, "offset", ypath, lineno), duration=_num(d, "duration", ypath, lineno),
            speaker=d["speaker_id"].strip(), src_text=s.strip(), tgt_text=t.strip(), file=ypath, line=lineno,
        ))
    return out
