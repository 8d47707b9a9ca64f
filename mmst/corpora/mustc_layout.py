"""The one reader of the MuST-C release layout (one release per language pair), strict or lenient.

Layout (``ROOT`` = ``--root``/``--mustc-root``; ``XX`` = target language; ``<split>`` = train, dev,
tst-COMMON, ...)::

    ROOT/en-XX/data/<split>/wav/<talk>.wav       whole talks
    ROOT/en-XX/data/<split>/txt/<split>.yaml     one segment per line (seconds):
                                                 - {duration: 3.5, offset: 16.61, speaker_id: spk.1, wav: ted_1.wav}
    ROOT/en-XX/data/<split>/txt/<split>.en       English transcript, line N <-> yaml segment N
    ROOT/en-XX/data/<split>/txt/<split>.XX       translation,        line N <-> yaml segment N

Units: ``offset``/``duration`` are **seconds** (float) everywhere.

:func:`read_pair_split` reads one pair/split into :class:`Segment` records, in one of two modes:

- **lenient** (``strict=False``, the MuST-C alignment of :mod:`mmst.corpora.mustc`): every problem
  becomes a :class:`PrepIssue` naming file and line and the affected segments are skipped, so a run
  finishes with the rest (kinds: ``split_missing``, ``bad_encoding``, ``line_count_mismatch``,
  ``bad_yaml``, ``bad_interval``, ``missing_wav``, ``duplicate``);
- **strict** (``strict=True``, the exact join of :mod:`mmst.corpora.multiway`): the first problem
  raises :class:`RawCorpusError` whose message names file, 1-based line and field. Strict mode also
  requires ``speaker_id`` and a bare wav file name; it does not look at the audio (the builder
  records audio problems as skips) nor at duplicates (the join finds them within its tolerance).

Text files are split on ``\\n`` only (Unicode line separators inside a line do not split it) and a
UTF-8 byte-order mark is dropped. Yaml lines go through a fast line parser (flow mappings of plain
scalars, about 1 us per line); lines it does not understand (quoted values, unusual spacing) go
through ``yaml.safe_load`` one at a time, so a large yaml never costs a full PyYAML parse. Blank
lines, ``---`` and ``#`` comments are skipped (segments are matched to text lines by segment index;
messages give yaml line numbers). Extra yaml keys (``rW``, ``uW`` ...) are ignored.
"""

from __future__ import annotations

import math
import os
import re
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REQUIRED_YAML_KEYS = ("duration", "offset", "speaker_id", "wav")
"""Keys every yaml segment must have in strict mode (lenient mode needs ``offset``, ``duration``, ``wav``)."""

_KEY_RE = re.compile(r"[A-Za-z_][\w\-]*")


class RawCorpusError(ValueError):
    """Bad corpus input; the message names file, line and field.

    Attributes:
        file: the offending file ('' when unknown).
        line: 1-based line (0 when the whole file is concerned).
    """

    def __init__(self, message: str, file: str = "", line: int = 0) -> None:
        super().__init__(message)
        self.file = file
        self.line = line


class YamlLineError(ValueError):
    """A MuST-C yaml line could not be parsed (message names file and line)."""


# ----------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Segment:
    """One segment of one language pair: a yaml line with its English and target text.

    Attributes:
        lang: target language of the pair (``de`` for ``en-de``).
        split: the split directory the line was read from (``train``, ``dev``, ``tst-COMMON``...).
        talk: talk id = wav file name without extension (``ted_1``).
        wav: absolute path of the talk wav.
        offset: segment start inside the wav, seconds.
        duration: segment length, seconds.
        speaker: ``speaker_id`` from the yaml ('' when absent).
        src: English transcript line (stripped).
        tgt: translation line (stripped).
        file: path of the yaml file the line came from.
        line: 1-based line number in the yaml.
        norm: normalised English (:func:`normalize_text`), the alignment key.
    """

    lang: str
    split: str
    talk: str
    wav: str
    offset: float
    duration: float
    speaker: str
    src: str
    tgt: str
    file: str
    line: int
    norm: str = ""

    @property
    def end(self) -> float:
        """Segment end, seconds (``offset + duration``)."""
        return self.offset + self.duration

    @property
    def src_text(self) -> str:
        """English line (same as :attr:`src`)."""
        return self.src

    @property
    def tgt_text(self) -> str:
        """Translation line (same as :attr:`tgt`)."""
        return self.tgt

    @property
    def source(self) -> str:
        """``yaml_path:line`` for reports."""
        return f"{self.file}:{self.line}"


PairSegment = Segment
"""Name used by the exact join (:func:`mmst.corpora.multiway.join_pairs`)."""


@dataclass(slots=True)
class PrepIssue:
    """A problem found in the input (lenient mode); the run continues and the issue goes to the report.

    Attributes:
        kind: one of :data:`mmst.corpora.mustc.DROP_REASONS` (or ``pair_missing``).
        message: human-readable message naming the file and line.
        file: the offending file ('' when not file-specific).
        line: 1-based line number (0 when the whole file/pair is concerned).
        lang: target language of the pair.
        split: split name ('' when the whole pair is concerned).
        n_segments: number of segments skipped because of this issue.
    """

    kind: str
    message: str
    file: str = ""
    line: int = 0
    lang: str = ""
    split: str = ""
    n_segments: int = 0

    def as_dict(self) -> dict:
        """JSON-serialisable form for ``prep_report.json``."""
        return {
            "kind": self.kind, "message": self.message, "file": self.file, "line": self.line,
            "lang": self.lang, "split": self.split, "n_segments": self.n_segments,
        }


# ----------------------------------------------------------------------------------------------
# Paths
# ----------------------------------------------------------------------------------------------


def available_pairs(root: str | os.PathLike[str], src_lang: str = "en") -> list[str]:
    """Target languages with a ``ROOT/<src>-XX`` directory, sorted."""
    p = Path(root)
    if not p.is_dir():
        return []
    pre = f"{src_lang}-"
    return sorted(d.name[len(pre):] for d in p.iterdir() if d.is_dir() and d.name.startswith(pre))


def pair_path(root: str | os.PathLike[str], lang: str, src_lang: str = "en") -> str:
    """``ROOT/en-XX`` for target language ``lang`` (whether or not it exists)."""
    return os.path.join(os.fspath(root), f"{src_lang}-{lang}")


def pair_dir(root: str | os.PathLike[str], lang: str, src_lang: str = "en") -> Path:
    """``ROOT/en-XX``; raises :class:`RawCorpusError` listing the pairs present when it is missing."""
    d = Path(pair_path(root, lang, src_lang))
    if not d.is_dir():
        have = available_pairs(root, src_lang)
        raise RawCorpusError(
            f"{d}: language {lang!r} missing from --mustc-root {root} (pairs present: {', '.join(have) or 'none'})",
            os.fspath(d),
        )
    return d


def split_paths(root: str | os.PathLike[str], lang: str, split: str, src_lang: str = "en") -> dict[str, str]:
    """Paths of one pair/split: keys ``yaml``, ``src`` (= ``en``, the English file), ``tgt``, ``wav_dir``."""
    base = os.path.join(pair_path(root, lang, src_lang), "data", split)
    txt = os.path.join(base, "txt")
    src = os.path.join(txt, f"{split}.{src_lang}")
    return {"yaml": os.path.join(txt, f"{split}.yaml"), "src": src, "en": src,
            "tgt": os.path.join(txt, f"{split}.{lang}"), "wav_dir": os.path.join(base, "wav")}


# ----------------------------------------------------------------------------------------------
# Text and yaml lines
# ----------------------------------------------------------------------------------------------


def read_text_lines(path: str | os.PathLike[str]) -> list[str]:
    """Lines of a UTF-8 text file, split on ``\\n`` only (a ``\\r`` before it is dropped).

    Unicode line separators (U+2028, U+0085 ...) inside a line do NOT split it: ``str.splitlines``
    would, and silently misalign the file with its yaml. A final newline does not add a line; a
    UTF-8 byte-order mark is dropped.

    Raises:
        RawCorpusError: not valid UTF-8 (message gives line, byte column and the bytes; ``.line`` set).
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
            "re-encode the file as UTF-8", p, line,
        ) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def _unquote(v: str) -> str:
    v = v.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        v = v[1:-1]
    return v


def yaml_fields(line: str, path: str = "<yaml>", lineno: int = 0) -> dict[str, str]:
    """All fields of one yaml segment line as strings, e.g. ``- {duration: 3.5, offset: 16.61, wav: t.wav}``.

    Fast path for flow mappings of plain scalars; anything else (quotes, nesting, block style) goes
    through ``yaml.safe_load`` of that one line.

    Raises:
        YamlLineError: not valid YAML, or not one mapping (message names ``path:lineno``).
    """
    s = line.strip()
    if s.startswith("- {") and s.endswith("}"):
        body = s[3:-1]
        if not any(c in body for c in "{}[]'\"#"):
            out: dict[str, str] = {}
            for part in body.split(","):
                k, sep, v = part.partition(": ")
                k, v = k.strip(), v.strip()
                if not sep or not k or not v or not _KEY_RE.fullmatch(k):
                    out = {}
                    break
                out[k] = v
            if out:
                return out
    import yaml  # slow path, rare

    try:
        parsed = yaml.load(s, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise YamlLineError(f"{path}:{lineno}: cannot parse yaml line {s[:80]!r}: {str(e).splitlines()[0]}") from None
    if isinstance(parsed, list) and len(parsed) == 1:
        parsed = parsed[0]
    if not isinstance(parsed, dict):
        raise YamlLineError(f"{path}:{lineno}: expected '- {{duration: .., offset: .., wav: ..}}', got {s[:80]!r}")
    return {str(k): ("" if v is None else _unquote(v) if isinstance(v, str) else str(v)) for k, v in parsed.items()}


def parse_yaml_line(line: str, path: str = "<yaml>", lineno: int = 0) -> dict[str, str | float]:
    """Parse one MuST-C yaml segment line, e.g. ``- {duration: 3.5, offset: 16.61, rW: 10, wav: t.wav}``.

    Args:
        line: the raw line.
        path: file name for error messages.
        lineno: 1-based line number for error messages.

    Returns:
        dict with at least ``offset`` and ``duration`` as float **seconds** and ``wav`` as str; other
        keys (``rW``, ``uW``, ``speaker_id`` ...) kept as strings.

    Raises:
        YamlLineError: unparsable line, missing ``offset``/``duration``/``wav``, or a non-numeric
            offset/duration. The message names ``path:lineno``.
    """
    out: dict[str, str | float] = dict(yaml_fields(line, path, lineno))
    s = line.strip()
    for key in ("offset", "duration", "wav"):
        if key not in out or out[key] == "":
            raise YamlLineError(f"{path}:{lineno}: missing key {key!r} in yaml line {s[:80]!r}")
    for key in ("offset", "duration"):
        try:
            out[key] = float(out[key])
        except (TypeError, ValueError):
            raise YamlLineError(f"{path}:{lineno}: {key} is not a number: {out[key]!r}") from None
    return out


class _NormTable(dict):
    """``str.translate`` table built lazily: apostrophes deleted, other punctuation/symbols -> space."""

    _APOSTROPHES = "'\u2019\u2018`\u00b4\u02bc"

    def __missing__(self, code: int):
        ch = chr(code)
        if ch in self._APOSTROPHES:
            val = None
        elif unicodedata.category(ch)[0] in "PSZC" and ch not in " ":
            val = " "
        else:
            val = ch
        self[code] = val
        return val


_NORM_TABLE = _NormTable()


def normalize_text(text: str) -> str:
    """Normalise an English transcript for cross-pair matching.

    Steps: Unicode NFKC; casefold; delete apostrophes (``don't`` -> ``dont``, so ``don't``/``don’t``
    agree); every other punctuation, symbol, control or separator character -> space; collapse
    whitespace; strip. Digits and letters (any script) are kept.

    Example: ``"Hello,  World -- it's (Laughter)!"`` -> ``"hello world its laughter"``.
    """
    if text.isascii():
        t = text.lower()
    else:
        t = unicodedata.normalize("NFKC", text).casefold()
    t = t.translate(_NORM_TABLE)
    return " ".join(t.split())


# ----------------------------------------------------------------------------------------------
# The reader
# ----------------------------------------------------------------------------------------------


def _segment_lines(path: str) -> tuple[list[str], list[int]]:
    """Non-blank, non-comment yaml lines and their 1-based line numbers."""
    lines, numbers = [], []
    for lineno, raw in enumerate(read_text_lines(path), start=1):
        s = raw.strip()
        if not s or s == "---" or s.startswith("#"):
            continue
        lines.append(s)
        numbers.append(lineno)
    return lines, numbers


def read_pair_split(
    root: str | os.PathLike[str],
    lang: str,
    split: str,
    check_wavs: bool = True,
    *,
    strict: bool = False,
    src_lang: str = "en",
) -> tuple[list[Segment], list[PrepIssue], int]:
    """Read one pair/split into :class:`Segment` records, in yaml order.

    Args:
        root: corpus root (contains ``en-XX``).
        lang: target language.
        split: split name (directory name, also the file stem).
        check_wavs: lenient mode: check that each named wav exists (one ``os.path.isfile`` per talk);
            its segments are skipped as ``missing_wav`` otherwise. Ignored in strict mode.
        strict: raise on the first problem instead of reporting it (see the module docstring).
        src_lang: source language code (file suffix of the transcript, prefix of the pair directory).

    Returns:
        (segments, issues, number of yaml segments = "segments in"); issues are empty in strict mode.

    Raises:
        RawCorpusError: strict mode only: missing pair (lists the pairs present) or file, non-UTF-8
            text, yaml/text line-count mismatch, an unparsable yaml line, a missing key, a non-numeric,
            negative or non-finite offset/duration, a wav that is not a bare file name.
    """
    root = os.fspath(root)
    tag = f"{src_lang}-{lang}"
    if strict:
        pair_dir(root, lang, src_lang)
    p = split_paths(root, lang, split, src_lang)
    issues: list[PrepIssue] = []
    missing = [p[k] for k in ("yaml", "src", "tgt") if not os.path.isfile(p[k])]
    if missing:
        if strict:
            raise RawCorpusError(f"{missing[0]}: missing ({tag} split {split!r})", missing[0])
        n_in = len(_segment_lines(p["yaml"])[0]) if os.path.isfile(p["yaml"]) else 0
        issues.append(PrepIssue("split_missing", f"{missing[0]}: split {split!r} missing for pair {tag}; "
                                f"skipping {tag}/{split}", missing[0], 0, lang, split, n_in))
        return [], issues, n_in
    try:
        yl, ylines = _segment_lines(p["yaml"])
        el = read_text_lines(p["src"])
        tl = read_text_lines(p["tgt"])
    except RawCorpusError as e:
        if strict:
            raise
        n_in = len(_segment_lines(p["yaml"])[0]) if e.file != p["yaml"] else 0
        issues.append(PrepIssue("bad_encoding", f"{e.file}:{e.line}: not valid UTF-8 ({str(e).split('(', 1)[1]}; "
                                f"skipping {tag}/{split}", e.file, e.line, lang, split, n_in))
        return [], issues, n_in
    n_in = len(yl)
    if not (len(yl) == len(el) == len(tl)):
        if strict:
            raise RawCorpusError(
                f"{p['yaml']}: line count mismatch: {len(yl)} yaml segments, {len(el)} lines in {p['src']}, "
                f"{len(tl)} lines in {p['tgt']}; the files must be line-aligned", p["yaml"])
        counts = {p["yaml"]: len(yl), p["src"]: len(el), p["tgt"]: len(tl)}
        short = min(counts, key=counts.get)
        first_bad = counts[short] + 1
        issues.append(PrepIssue(
            "line_count_mismatch",
            f"{short}:{first_bad}: line counts differ for {tag}/{split} "
            + ", ".join(f"{os.path.basename(k)}={v}" for k, v in counts.items())
            + f"; line {first_bad} is missing from {os.path.basename(short)}; skipping {tag}/{split}",
            short, first_bad, lang, split, n_in))
        return [], issues, n_in
    ypath = p["yaml"]
    wav_dir = os.fspath(Path(p["wav_dir"]).resolve()) if strict else p["wav_dir"]
    segs: list[Segment] = []
    wav_ok: dict[str, bool] = {}
    wav_missing_lines: dict[str, list[int]] = defaultdict(list)
    seen: dict[tuple[str, float, float], int] = {}
    for y, lineno, en, tg in zip(yl, ylines, el, tl):
        try:
            d = yaml_fields(y, ypath, lineno)
        except YamlLineError as e:
            if strict:
                raise RawCorpusError(str(e), ypath, lineno) from None
            issues.append(PrepIssue("bad_yaml", str(e), ypath, lineno, lang, split, 1))
            continue
        need = REQUIRED_YAML_KEYS if strict else ("offset", "duration", "wav")
        absent = [k for k in need if d.get(k, "") == ""]
        if absent:
            msg = f"{ypath}:{lineno}: missing key {absent[0]!r} (have {', '.join(d) or 'none'})"
            if strict:
                raise RawCorpusError(msg, ypath, lineno)
            issues.append(PrepIssue("bad_yaml", msg, ypath, lineno, lang, split, 1))
            continue
        num: dict[str, float] = {}
        bad = ""
        for k in ("offset", "duration"):
            try:
                num[k] = float(d[k])
            except ValueError:
                bad = f"{ypath}:{lineno}: field {k!r} is not a number: {d[k]!r}"
                break
            if not math.isfinite(num[k]) or num[k] < 0:
                bad = f"{ypath}:{lineno}: field {k!r} must be finite and >= 0, got {d[k]!r}"
                break
        if bad:
            if strict:
                raise RawCorpusError(bad, ypath, lineno)
            issues.append(PrepIssue("bad_yaml" if "number" in bad else "bad_interval", bad, ypath, lineno, lang,
                                    split, 1))
            continue
        off, dur, wav = num["offset"], num["duration"], d["wav"].strip()
        if strict:
            if not wav or "/" in wav or "\\" in wav:
                raise RawCorpusError(f"{ypath}:{lineno}: field 'wav' must be a bare file name, got {wav!r}",
                                     ypath, lineno)
        elif dur <= 0:
            issues.append(PrepIssue(
                "bad_interval",
                f"{ypath}:{lineno}: bad interval offset={off} duration={dur} (need offset >= 0, duration > 0)",
                ypath, lineno, lang, split, 1))
            continue
        wav_path = os.path.join(wav_dir, wav)
        if not strict:
            if check_wavs:
                ok = wav_ok.get(wav)
                if ok is None:
                    ok = wav_ok[wav] = os.path.isfile(wav_path)
                if not ok:
                    wav_missing_lines[wav].append(lineno)
                    continue
            prev = seen.get((wav, off, dur))
            if prev is not None:
                issues.append(PrepIssue(
                    "duplicate",
                    f"{ypath}:{lineno}: duplicate segment (wav={wav}, offset={off}, duration={dur}) "
                    f"already at line {prev}; keeping line {prev}",
                    ypath, lineno, lang, split, 1))
                continue
            seen[(wav, off, dur)] = lineno
        src = en.strip()
        segs.append(Segment(lang, split, os.path.splitext(wav)[0], wav_path, off, dur,
                            d.get("speaker_id", "").strip(), src, tg.strip(), ypath, lineno, normalize_text(src)))
    for wav, lines in wav_missing_lines.items():
        issues.append(PrepIssue(
            "missing_wav",
            f"{ypath}:{lines[0]}: wav {os.path.join(wav_dir, wav)} named in the yaml is absent; "
            f"skipping its {len(lines)} segment(s) (lines {lines[0]}..{lines[-1]})",
            ypath, lines[0], lang, split, len(lines)))
    return segs, issues, n_in


def read_pair_split_strict(root: str | os.PathLike[str], lang: str, split: str,
                           src_lang: str = "en") -> list[Segment]:
    """:func:`read_pair_split` in strict mode: the segments, or :class:`RawCorpusError` on the first problem."""
    return read_pair_split(root, lang, split, strict=True, src_lang=src_lang)[0]


def find_pairs(root: str, langs: Sequence[str], src_lang: str = "en") -> tuple[list[str], list[PrepIssue]]:
    """Which requested pairs exist under ``root`` (lenient counterpart of :func:`pair_dir`).

    Returns:
        (present languages in the requested order, issues of kind ``pair_missing`` for the others).
    """
    present, issues = [], []
    for lang in langs:
        d = pair_path(root, lang, src_lang)
        if os.path.isdir(d):
            present.append(lang)
        else:
            issues.append(PrepIssue("pair_missing", f"{d}: pair {src_lang}-{lang} missing from --mustc-root; "
                                    "skipping it", d, 0, lang))
    return present, issues
