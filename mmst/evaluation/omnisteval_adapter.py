"""IWSLT 2026 scoring through OmniSTEval: YAAL and degeneracy diagnostics (segmented), SoftSegmenter and
LongYAAL (long form), chrF.

The numbers are OmniSTEval's (``omnisteval`` 0.1.10, Polák et al., 2025, "Better Late Than Never:
Evaluation of Latency Metrics for Simultaneous Speech-to-Text Translation", arXiv:2509.17349); this
module only hands it mmst's outputs and renames its keys. It calls:

- ``omnisteval.Instance.from_dict`` and ``omnisteval.evaluate_instances(is_longform=False)`` for
  segmented output (:func:`shortform_scores`): YAAL (computation-unaware and -aware), chrF and the
  degeneracy diagnostics SWF, EFSW, DSPTV (``ShortformDegeneracyScorer``);
- ``omnisteval.io.load_resegmentation_inputs`` (internal: the same loader the ``omnisteval longform``
  command runs on the same files), ``omnisteval.resegment`` (SoftSegmenter: Moses tokenization per
  language, the alignment, one hypothesis per reference sentence) and
  ``omnisteval.evaluate_instances(is_longform=True)`` for long-form output (:func:`longform_scores`):
  LongYAAL, LongAL, LongLAAL (both variants), BLEU and chrF.

The internal loader is why the version is pinned (:data:`OMNISTEVAL_VERSION`; another version is an
:class:`OmniSTEvalError`).

Definitions (OmniSTEval's):

- **YAAL** (Yet Another Average Lagging), per sentence with delays ``d_i`` (ms), source length ``|X|`` (ms),
  hypothesis length ``|Y|`` and reference length ``|Y*|`` (units: words ``len(ref.split(" "))``, or
  characters ``len(ref.strip())`` for ja/zh)::

      gamma = max(|Y|, |Y*|) / |X|
      tau   = |{ i : d_i < |X| }|      (the units written before the source ended; counting stops at the
                                        first d_i >= |X|)
      YAAL  = 1/tau * sum_{i=1..tau} ( d_i - (i-1) / gamma )

  i.e. LAAL without the first unit written at or after the end of the source; a sentence whose first unit
  comes at or after the end is left out. The corpus value is the mean over sentences. ``YAAL_CA`` uses ``elapsed``.
- **LongYAAL**: YAAL of each reference sentence after SoftSegmenter resegmentation, delays relative to
  the sentence's start, where the cut-off is the end of the recording's last reference sentence instead
  of the sentence's own end (so words written late, in the next sentence's time, still count).
- **SWF** (simultaneous words fraction, %): ``100 * sum |{d_i < |X|}| / sum |Y|`` over the corpus;
  **EFSW** (expected simultaneous words fraction, %): ``100 * sum max(0, |X| - YAAL) / sum |X|``;
  **DSPTV** = EFSW - SWF; a policy is *likely degenerate* when ``|DSPTV| > 20``
  (:data:`DEGENERATE_DSPTV`): its YAAL says it is simultaneous, its words say otherwise (one burst at
  the end, or a few early words and the rest after the source ended).
- **chrF**: sacrebleu's ``CHRF()`` (character 6-grams, beta 2; Popović, 2015).

Units: ``delays``/``elapsed``/``source_length`` in ms of source audio. ja/zh are scored at character level
(``--char_level``; the hypothesis is the characters without spaces, one delay per character), other
languages at word level with the Moses tokenizer of the target language for the alignment
(``--lang``); BLEU uses :func:`mmst.evaluation.quality.bleu_tokenizer_for` (``13a``, ``zh``, ``ja-mecab``),
passed to OmniSTEval as ``--bleu_tokenizer``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmst.atomic import atomic_write_lines
from mmst.evaluation.latency import join_units
from mmst.evaluation.quality import NO_SPACE_LANGS, bleu_tokenizer_for
from mmst.evaluation.resegment import TimedUnit

logger = logging.getLogger("mmst.evaluation.omnisteval_adapter")

#: The OmniSTEval release this module was written against (it calls an internal loader).
OMNISTEVAL_VERSION = "0.1.10"
#: ``|DSPTV|`` above this (percentage points) flags a likely degenerate policy (OmniSTEval's threshold).
DEGENERATE_DSPTV = 20.0

#: OmniSTEval's score keys -> mmst's, segmented output.
SHORTFORM_KEYS = {"yaal": "YAAL", "ca_yaal": "YAAL_CA", "chrf": "chrF", "swf": "SWF", "efsw": "EFSW",
                  "dsptv": "DSPTV"}
#: OmniSTEval's score keys -> mmst's, long form (BLEU and chrF after SoftSegmenter).
LONGFORM_KEYS = {"long_yaal": "LongYAAL", "ca_long_yaal": "LongYAAL_CA", "long_laal": "LongLAAL",
                 "ca_long_laal": "LongLAAL_CA", "long_al": "LongAL", "ca_long_al": "LongAL_CA",
                 "bleu": "SoftSeg_BLEU", "chrf": "SoftSeg_chrF"}

#: File names written under ``OUT/<lang>/`` for long form (the ``omnisteval longform`` inputs and output).
HYPOTHESIS_FILE = "omnisteval.jsonl"
SEGMENTS_FILE = "segments.yaml"
REFERENCES_FILE = "references.txt"
RESEGMENTED_FILE = "instances.resegmented.jsonl"


class OmniSTEvalError(RuntimeError):
    """OmniSTEval is missing or of another version, or rejected its input (the message says which)."""


class _NoEmissionFixHint(logging.Filter):
    """Drops OmniSTEval's hint to pass ``--fix_simuleval_emission_ca`` when CA-YAAL exceeds YAAL by 2 s: mmst's
    computation-aware times are emission times already (docs/longform.md), and the flag changes no
    segmented score."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "fix_simuleval_emission_ca" not in record.getMessage()


def _omnisteval():
    """The ``omnisteval`` package, checked against :data:`OMNISTEVAL_VERSION`."""
    try:
        import omnisteval
    except ImportError as e:
        raise OmniSTEvalError(f"omnisteval is not installed ({e}): pip install omnisteval=={OMNISTEVAL_VERSION}") \
            from None
    if omnisteval.__version__ != OMNISTEVAL_VERSION:
        raise OmniSTEvalError(f"mmst needs omnisteval=={OMNISTEVAL_VERSION}, found {omnisteval.__version__}: "
                              f"pip install omnisteval=={OMNISTEVAL_VERSION}")
    logging.getLogger("mosestokenizer").setLevel(logging.WARNING)  # one INFO line per Moses call otherwise
    scoring_log = logging.getLogger("omnisteval.scoring")
    if not any(isinstance(f, _NoEmissionFixHint) for f in scoring_log.filters):
        scoring_log.addFilter(_NoEmissionFixHint())
    return omnisteval


def _base_lang(lang: str | None) -> str | None:
    return (lang or "").lower().replace("_", "-").split("-")[0] or None


def char_level(lang: str | None, unit: str | None = None) -> bool:
    """True when OmniSTEval scores ``lang`` at character level (``--char_level``): the ``char`` latency unit,
    or by default ja/zh."""
    return unit == "char" if unit else _base_lang(lang) in NO_SPACE_LANGS


def _finite(scores: Mapping[str, float], keys: Mapping[str, str]) -> dict[str, float]:
    return {new: float(scores[old]) for old, new in keys.items()
            if old in scores and scores[old] is not None and not math.isnan(scores[old])}


def likely_degenerate(dsptv: float | None) -> bool | None:
    """``|DSPTV| > 20`` (:data:`DEGENERATE_DSPTV`); None when DSPTV is unknown."""
    return None if dsptv is None or math.isnan(dsptv) else abs(dsptv) > DEGENERATE_DSPTV


def shortform_scores(instances: Sequence[Mapping[str, Any]], lang: str | None = None, unit: str = "word",
                     bleu_tokenizer: str | None = None) -> dict[str, Any]:
    """OmniSTEval's segmented (``omnisteval shortform``) scores of SimulEval-1.1 instances.

    Args:
        instances: instance dicts (``prediction``, ``delays``, ``elapsed``, ``reference``, ``source_length``
            in ms), e.g. from :func:`mmst.evaluation.instances.read_instances`. Instances without a
            reference are left out (OmniSTEval needs one per line), with a warning.
        lang: target language (chooses the BLEU tokenizer when ``bleu_tokenizer`` is None).
        unit: ``word`` or ``char``: how OmniSTEval counts the reference (``--word_level`` /
            ``--char_level``).
        bleu_tokenizer: sacrebleu tokenizer (``--bleu_tokenizer``).

    Returns:
        ``{"YAAL", "YAAL_CA", "chrF", "SWF", "EFSW", "DSPTV", "likely_degenerate"}`` (ms, chrF 0-100,
        percentages; ``likely_degenerate`` a bool); a metric OmniSTEval cannot compute (NaN: no
        instance with delays) is absent. Empty when no instance has a reference.

    Raises:
        OmniSTEvalError: OmniSTEval missing or of another version.
    """
    om = _omnisteval()
    rows = [ins for ins in instances if ins.get("reference") is not None]
    if len(rows) < len(instances):
        logger.warning("%d of %d instances have no reference: left out of YAAL, chrF and the degeneracy "
                       "diagnostics", len(instances) - len(rows), len(instances))
    if not rows:
        return {}
    objs = []
    for i, ins in enumerate(rows):  # the fields omnisteval.io.load_shortform_instances takes from a line
        info: dict[str, Any] = {"index": i, "prediction": ins.get("prediction") or "",
                                "reference": str(ins["reference"]).strip()}
        if ins.get("source_length") is not None:
            info["source_length"] = ins["source_length"]
        if ins.get("delays") is not None:
            info["emission_cu"] = list(ins["delays"])
        if ins.get("elapsed") is not None:
            info["emission_ca"] = list(ins["elapsed"])
        objs.append(om.Instance.from_dict(info, latency_unit="char" if unit == "char" else "word"))
    scores, _, _ = om.evaluate_instances(objs, is_longform=False,
                                         bleu_tokenizer=bleu_tokenizer or bleu_tokenizer_for(lang)[0])
    out: dict[str, Any] = _finite(scores, SHORTFORM_KEYS)
    flag = likely_degenerate(out.get("DSPTV"))
    if flag is not None:
        out["likely_degenerate"] = flag
    return out


# ----------------------------------------------------------------------------------------------- long form
@dataclass(frozen=True)
class Recording:
    """One recording's output in one language, for OmniSTEval.

    Attributes:
        wav: the recording's path (its file name is the ``source`` and the segments' ``wav``; names must
            differ between recordings).
        units: the hypothesis as latency units in writing order, objects with ``text``, ``time_ms`` and
            ``time_ca_ms`` (ms since the recording's start), e.g.
            :func:`mmst.evaluation.resegment.timed_units`.
        source_length_ms: the recording's length in ms.
        sentences: its reference sentences with their positions
            (:class:`mmst.evaluation.resegment.RefSentence`: ``text``, ``offset_ms``, ``duration_ms``);
            empty = none.
    """

    wav: str
    units: Sequence[Any]
    source_length_ms: float
    sentences: Sequence[Any] = ()


@dataclass(frozen=True)
class LongformFiles:
    """The ``omnisteval longform`` inputs written by :func:`write_longform_files` (``segments`` and
    ``references`` None when there are no timed references)."""

    hypothesis: Path
    segments: Path | None
    references: Path | None


def _seconds(ms: float) -> str:
    return repr(round(float(ms) / 1000.0, 6))


def write_longform_files(out_dir: str | os.PathLike, recordings: Sequence[Recording],
                         unit: str = "word") -> LongformFiles:
    """Write ``OUT/omnisteval.jsonl`` and, when every recording has timed references, ``OUT/segments.yaml``
    and ``OUT/references.txt``: the files ``omnisteval longform`` reads.

    ``omnisteval.jsonl``: one line per recording, ``{"source": file name, "prediction": units joined (words
    by spaces, characters by ''), "delays": [ms per unit], "elapsed": [computation-aware ms per unit],
    "source_length": ms}``, times since the recording's start. ``segments.yaml``: MuST-C style,
    ``- {duration: s, offset: s, speaker_id: name, wav: file name}`` per reference sentence, recording
    after recording; ``references.txt``: the sentences, one a line, in the same order. When only some
    recordings have references, the three files hold those recordings.

    Raises:
        ValueError: two recordings with the same file name; a reference sentence without a position, or
            with a line break.
    """
    out = Path(out_dir)
    names = [Path(r.wav).name for r in recordings]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"recordings must have distinct file names for OmniSTEval (its 'source' and 'wav' "
                         f"fields): {', '.join(dup)} repeats")
    timed = [r for r in recordings if r.sentences]
    rows = timed or list(recordings)
    lines = []
    for r in rows:
        lines.append(json.dumps({"source": Path(r.wav).name, "prediction": join_units([u.text for u in r.units], unit),
                                 "delays": [round(float(u.time_ms), 3) for u in r.units],
                                 "elapsed": [round(float(u.time_ca_ms), 3) for u in r.units],
                                 "source_length": round(float(r.source_length_ms), 3)}, ensure_ascii=False))
    atomic_write_lines(out / HYPOTHESIS_FILE, lines)
    if not timed:
        return LongformFiles(out / HYPOTHESIS_FILE, None, None)
    segs, refs = [], []
    for r in timed:
        name = Path(r.wav).name
        for j, s in enumerate(r.sentences):
            if math.isnan(s.offset_ms) or math.isnan(s.duration_ms):
                raise ValueError(f"{r.wav}: reference sentence {j + 1} has no position in the audio")
            if "\n" in s.text or "\r" in s.text:
                raise ValueError(f"{r.wav}: reference sentence {j + 1} contains a line break")
            segs.append(f"- {{duration: {_seconds(s.duration_ms)}, offset: {_seconds(s.offset_ms)}, "
                        f"speaker_id: {json.dumps(Path(r.wav).stem)}, wav: {json.dumps(name)}}}")
            refs.append(s.text.strip())
    atomic_write_lines(out / SEGMENTS_FILE, segs)
    atomic_write_lines(out / REFERENCES_FILE, refs)
    return LongformFiles(out / HYPOTHESIS_FILE, out / SEGMENTS_FILE, out / REFERENCES_FILE)


def cli_command(files: LongformFiles, lang: str | None, unit: str = "word", bleu_tokenizer: str | None = None,
                output_folder: str | os.PathLike | None = None) -> list[str]:
    """The ``omnisteval longform`` command that scores ``files`` as :func:`longform_scores` does."""
    cmd = ["omnisteval", "longform", "--speech_segmentation", str(files.segments), "--ref_sentences_file",
           str(files.references), "--hypothesis_file", str(files.hypothesis)]
    base = _base_lang(lang)
    if base:
        cmd += ["--lang", base]
    cmd += ["--bleu_tokenizer", bleu_tokenizer or bleu_tokenizer_for(lang)[0],
            "--char_level" if char_level(lang, unit) else "--word_level"]
    if output_folder is not None:
        cmd += ["--output_folder", str(output_folder)]
    return cmd


def longform_scores(files: LongformFiles, lang: str | None, unit: str = "word",
                    bleu_tokenizer: str | None = None, write_resegmented: bool = True) -> dict[str, Any]:
    """SoftSegmenter resegmentation and OmniSTEval's long-form scores of :func:`write_longform_files`'s
    files, as ``omnisteval longform`` computes them (:func:`cli_command`); writes OmniSTEval's
    ``instances.resegmented.jsonl`` beside them (one line per reference sentence: its hypothesis words,
    delays relative to the sentence's start).

    Args:
        files: the written files (with segments and references).
        lang: target language: Moses tokenizer for the alignment (none for ja/zh) and BLEU tokenizer.
        unit: ``word`` or ``char`` (``--word_level`` / ``--char_level``).
        bleu_tokenizer: sacrebleu tokenizer; default :func:`mmst.evaluation.quality.bleu_tokenizer_for`.
        write_resegmented: write ``instances.resegmented.jsonl`` beside ``files.hypothesis``.

    Returns:
        ``{"LongYAAL", "LongYAAL_CA", "LongAL", "LongAL_CA", "LongLAAL", "LongLAAL_CA", "SoftSeg_BLEU",
        "SoftSeg_chrF"}`` (ms; BLEU and chrF 0-100) and ``"n_empty_sentences"`` (reference sentences that
        received no word); a latency OmniSTEval cannot compute is absent.

    Raises:
        OmniSTEvalError: OmniSTEval missing or of another version, or it rejects the files (message
            names them).
        ValueError: ``files`` without segments or references.
    """
    if files.segments is None or files.references is None:
        raise ValueError("LongYAAL needs the reference sentences and their positions (segments)")
    om = _omnisteval()
    from omnisteval.io import load_resegmentation_inputs

    chars = char_level(lang, unit)
    tok = bleu_tokenizer or bleu_tokenizer_for(lang)[0]
    try:
        ref_words, hyp_words, segmentation, ref_sentences = load_resegmentation_inputs(
            str(files.segments), None, str(files.references), str(files.hypothesis), hypothesis_format="jsonl",
            char_level=chars, offset_delays=False, fix_emission_ca_flag=False)
        instances, dicts = om.resegment(ref_words=ref_words, hyp_words=hyp_words, segmentation=segmentation,
                                        ref_sentences=ref_sentences, char_level=chars, lang=_base_lang(lang))
        scores, _, _ = om.evaluate_instances(instances, is_longform=True, bleu_tokenizer=tok)
    except (AssertionError, ValueError, KeyError) as e:
        raise OmniSTEvalError(f"omnisteval rejected {files.hypothesis} with {files.segments}: {e}") from None
    except OSError as e:  # the Moses tokenizer is a perl script run as a subprocess
        raise OmniSTEvalError(f"omnisteval could not run on {files.hypothesis} ({e}); its Moses tokenizer needs perl")\
            from None
    if write_resegmented:
        atomic_write_lines(files.hypothesis.parent / RESEGMENTED_FILE,
                           (json.dumps(d, ensure_ascii=False) for d in dicts))
    out: dict[str, Any] = _finite(scores, LONGFORM_KEYS)
    out["n_empty_sentences"] = sum(1 for ins in instances if not ins.prediction.strip())
    return out


def score_recordings(out_dir: str | os.PathLike, recordings: Sequence[Recording], lang: str, unit: str = "word",
                     bleu_tokenizer: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`write_longform_files` then, with timed references, :func:`longform_scores`: what
    ``mmst-eval-longform`` does per language.

    Returns:
        ``(metrics, info)``: the metrics of :func:`longform_scores` (empty without timed references) and
        ``{"omnisteval": version, "omnisteval_command": the equivalent command line, "bleu_tokenizer_softseg",
        "n_empty_sentences_softseg"}`` (or ``{"omnisteval_error": message}``: the metrics are then absent
        and the reason logged).
    """
    files = write_longform_files(out_dir, recordings, unit)
    if files.segments is None:
        return {}, {}
    tok = bleu_tokenizer or bleu_tokenizer_for(lang)[0]
    info: dict[str, Any] = {"omnisteval": OMNISTEVAL_VERSION, "bleu_tokenizer_softseg": tok,
                            "omnisteval_command": shlex.join(cli_command(files, lang, unit, tok))}
    try:
        m = longform_scores(files, lang, unit, tok)
    except OmniSTEvalError as e:
        logger.warning("%s: LongYAAL not computed: %s", lang, e)
        return {}, {"omnisteval_error": str(e)}
    info["n_empty_sentences_softseg"] = m.pop("n_empty_sentences")
    return m, info


def read_hypothesis_jsonl(path: str | os.PathLike, unit: str = "word") -> dict[str, list[TimedUnit]]:
    """An ``omnisteval.jsonl`` (one line per recording, :func:`write_longform_files`; or any OmniSTEval JSONL
    hypothesis file with ``delays`` and ``elapsed``) as ``{recording file name: [TimedUnit, ...]}``.

    Units as OmniSTEval splits them: ``prediction.split()`` for words, ``list(prediction)`` for characters;
    ``elapsed`` defaults to ``delays``. ``source`` may be a name or a list whose first item is the name (as
    SimulEval writes it); the key is its file name.

    Raises:
        ValueError: a line that is not a JSON object, lacks ``source``, ``prediction`` or ``delays``, whose
            delays do not match its units in number, or repeats a recording (the message names the file and line).
    """
    p = Path(path)
    out: dict[str, list[TimedUnit]] = {}
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            h = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{i}: not valid JSON ({e.msg})") from None
        if not isinstance(h, dict) or not all(k in h for k in ("source", "prediction", "delays")):
            raise ValueError(f"{p}:{i}: expected an object with source, prediction and delays")
        src = h["source"][0] if isinstance(h["source"], list) else h["source"]
        name = Path(str(src)).name
        units = list(h["prediction"]) if unit == "char" else h["prediction"].split()
        delays, elapsed = h["delays"], h.get("elapsed", h["delays"])
        if not len(units) == len(delays) == len(elapsed):
            raise ValueError(f"{p}:{i}: {len(units)} {unit}s in prediction but {len(delays)} delays and "
                             f"{len(elapsed)} elapsed")
        if name in out:
            raise ValueError(f"{p}:{i}: recording {name} repeats")
        out[name] = [TimedUnit(u, float(d), float(e)) for u, d, e in zip(units, delays, elapsed)]
    return out


def read_scores_tsv(path: str | os.PathLike) -> dict[str, float]:
    """The ``scores.tsv`` that ``omnisteval ... --output_folder DIR`` writes, as ``{display name: value}``
    (``YES``/``NO`` of the degeneracy flag as 1.0/0.0), for comparing with this module's numbers."""
    out = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines()[1:]:
        name, _, value = line.rpartition("\t")
        flags = {"YES": 1.0, "NO": 0.0, "N/A": math.nan, "": math.nan}
        out[name] = flags[value] if value in flags else float(value)
    return out


#: ``scores.tsv`` display names of the keys this module reports.
TSV_NAMES = {"YAAL": "YAAL (CU)", "YAAL_CA": "YAAL (CA)", "chrF": "chrF", "SWF": "Simultaneous Words Fraction (%)",
             "EFSW": "Expected Simul. Words Fraction (%)", "DSPTV": "Degeneracy Test Value",
             "LongYAAL": "LongYAAL (CU)", "LongYAAL_CA": "LongYAAL (CA)", "LongAL": "LongAL (CU)",
             "LongAL_CA": "LongAL (CA)", "LongLAAL": "LongLAAL (CU)", "LongLAAL_CA": "LongLAAL (CA)",
             "SoftSeg_BLEU": "BLEU", "SoftSeg_chrF": "chrF"}

