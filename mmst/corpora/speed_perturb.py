"""Speed perturbation of a DATA split at prep time: feature copies at factors 0.9/1.0/1.1 (Ko et al. 2015).

Speed perturbation by ``f`` plays the audio ``f`` times faster: tempo and pitch both change, as with
``sox speed f`` in Kaldi's and ESPnet's recipes. Here the waveform is resampled with soxr ("HQ") from
``16000 * f`` Hz to 16000 Hz, so an utterance of ``N`` samples gets ``round(N / f)`` samples and
its fbank about ``round(n_frames / f)`` frames (within one frame: the 25 ms window).

Why prep-time copies (as ESPnet) and not on the fly: the DATA directory holds fbank features, not audio,
so an on-the-fly perturbation must read the audio, resample it and compute fbank for every utterance of
every epoch; ``bench/bench_train.py`` measures that cost as a share of a training step (far above
the 5% budget of the data path on CPU), while copies cost disk (x3 for the split) and prep time once.

:func:`build_speed_perturbed` adds to a DATA directory (docs/CONTRACTS.md):

* ``fbank80_<split>_sp.zip``: the perturbed features (``f != 1``), raw fbank with the DATA's own
  dither settings and, when the DATA has ``fbank.peak_normalize``, its causal peak gain applied to the
  perturbed audio; utterance ids ``sp<f>-<id>`` (Kaldi's naming);
* ``<split>_sp.tsv``: a multi-way manifest of the original utterances (factor 1.0, unchanged rows) and
  every copy, each with its own ``n_frames`` and ``duration``, speaker ``sp<f>-<speaker>``; ``wav``,
  ``offset`` keep naming the source segment;
* ``config.yaml``: ``speed_perturb: {<split>: {manifest, factors, features}}``, read by the trainer
  for ``data.augment.speed_perturb`` (:func:`mmst.data.augment.speed_perturbed_split`);
* ``speed_perturb_<split>.json``: a report.

Global CMVN stays the one of the original split (``gcmvn.npz``), so every model on this DATA, with or
without perturbation, normalises its input identically. A rerun with the same factors returns the
stored report (``"reused": true``); otherwise it reuses the cached copies (``DATA/.cache/fbank80_sp/``).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import soxr
from tqdm import tqdm

from mmst.atomic import atomic_save_npy, atomic_write_json, atomic_write_text
from mmst.audio import AudioError, load_audio
from mmst.data.corpus import load_data_config
from mmst.data.manifest import manifest_columns, read_manifest, tgt_langs_of, write_manifest
from mmst.data.store import pack_npy_files
from mmst.features import dither_seed_for, fbank, fbank_kwargs_from_config
from mmst.gain import PEAK_GAIN_FLOOR, causal_peak_normalize
from mmst.provenance import run_record

#: The source paths that make the speed-perturbed copies (recorded with their digests in the report's
#: ``provenance.depends_on``).
DEPENDS_ON = ("mmst/cli/speed_perturb.py", "mmst/corpora/speed_perturb.py", "mmst/audio.py", "mmst/features.py",
              "mmst/gain.py", "mmst/cmvn.py", "mmst/data/corpus.py", "mmst/data/manifest.py", "mmst/data/store.py")

DEFAULT_FACTORS = (0.9, 1.0, 1.1)
SAMPLE_RATE = 16000


class SpeedPerturbBuildError(ValueError):
    """A split cannot be speed-perturbed (missing manifest, audio error); the message names the file/row."""


def speed_perturb(wave: np.ndarray, factor: float, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Speed-perturb a waveform by ``factor`` (> 1 = faster and higher, as ``sox speed``).

    Args:
        wave: float ``(N,)`` mono samples.
        factor: speed factor, e.g. 0.9 or 1.1 (1.0 returns ``wave``).
        sample_rate: rate of ``wave`` and of the result, Hz.

    Returns:
        float32 ``(M,)`` with ``M = round(N / factor)`` (soxr's output length; within one sample).

    Raises:
        ValueError: ``factor <= 0``.
    """
    if factor <= 0:
        raise ValueError(f"speed factor must be > 0, got {factor}")
    x = np.ascontiguousarray(wave, dtype=np.float32)
    if factor == 1.0 or x.size == 0:
        return x
    return soxr.resample(x, sample_rate * factor, sample_rate, quality="HQ").astype(np.float32, copy=False)


def perturbed_id(utt_id: str, factor: float) -> str:
    """Id of the copy of ``utt_id`` at ``factor``: ``sp0.9-<id>`` (the original for 1.0)."""
    return utt_id if factor == 1.0 else f"sp{factor:g}-{utt_id}"


def _cache_key(row: dict[str, str], factor: float, fb: dict[str, Any], peak: Any) -> str:
    gain = None if peak is None else f"causal-peak:{peak}:{PEAK_GAIN_FLOOR}"
    s = f"sp-v1|{os.path.abspath(row['wav'])}|{row['offset']}|{row['duration']}|{factor:g}|{fb}|{gain}"
    return hashlib.sha1(s.encode("utf-8")).hexdigest()[:12]


def _extract(args: tuple[dict[str, str], float, str, dict[str, Any], Any, float]) -> dict[str, Any]:
    """Worker: fbank of one perturbed copy (cached as ``.npy``); ``{"id", "n_frames", "error"}``."""
    row, factor, cache, fb, peak, end_tol_s = args
    new_id = perturbed_id(row["id"], factor)
    res: dict[str, Any] = {"id": new_id, "n_frames": 0, "error": None, "cache": cache}
    try:
        if os.path.exists(cache):
            res["n_frames"] = int(np.load(cache, mmap_mode="r").shape[0])
            res["cached"] = True
            return res
        dur = float(row["duration"]) if row.get("duration") not in (None, "") else None
        wave = speed_perturb(load_audio(row["wav"], float(row.get("offset") or 0.0), dur, end_tolerance_s=end_tol_s),
                             factor)
        if peak is not None:  # the prep's (and the streaming front end's) causal gain, on the perturbed audio
            wave = causal_peak_normalize(wave, float(peak))
        feats = fbank(wave, dither_seed=dither_seed_for(new_id), **fb)
        atomic_save_npy(cache, feats)
        res["n_frames"] = int(feats.shape[0])
    except (AudioError, OSError, ValueError) as e:
        res["error"] = f"{row['wav']}: {type(e).__name__}: {e}"
    return res


def build_speed_perturbed(data_dir: str | os.PathLike[str], split: str = "train",
                          factors: Sequence[float] = DEFAULT_FACTORS, jobs: int = 1,
                          progress: bool = True) -> dict[str, Any]:
    """Add speed-perturbed copies of ``split`` to a DATA directory (see the module docstring).

    Args:
        data_dir: a multi-way DATA directory whose ``<split>.tsv`` rows name their source audio
            (``wav``, ``offset``, ``duration``).
        split: the split to perturb (normally ``train``).
        factors: speed factors; ``1.0`` keeps the original utterances in the new manifest.
        jobs: feature extraction processes.
        progress: tqdm bar.

    Returns:
        the report (also ``DATA/speed_perturb_<split>.json``): factors, manifest, features, utterances and
        frames per factor, seconds, and ``provenance`` (:func:`mmst.provenance.run_record`: this process's
        command line, date, git commit, machine).

    Raises:
        SpeedPerturbBuildError: no manifest, a row without ``wav``, or audio errors (listed).
        ValueError: empty or non-positive factors.
    """
    t0 = time.time()
    out = Path(data_dir)
    factors = [float(f) for f in factors]
    if not factors or any(f <= 0 for f in factors) or len(set(factors)) != len(factors):
        raise ValueError(f"speed factors must be distinct and > 0, got {factors}")
    cfg = load_data_config(out)
    entry = (cfg.get("speed_perturb") or {}).get(split) or {}
    rep_file = out / f"speed_perturb_{split}.json"
    if (entry.get("factors") == factors and (out / f"{entry.get('manifest')}.tsv").is_file() and rep_file.is_file()
            and (not entry.get("features") or (out / entry["features"]).is_file())):
        report = json.loads(rep_file.read_text(encoding="utf-8"))
        if report.get("factors") == factors:
            return {**report, "reused": True}  # built before with the same factors
    manifest = out / f"{split}.tsv"
    if not manifest.is_file():
        raise SpeedPerturbBuildError(f"{manifest}: no manifest for split {split!r}")
    rows = read_manifest(manifest)
    for i, r in enumerate(rows, start=2):
        if not r.get("wav"):
            raise SpeedPerturbBuildError(f"{manifest}:{i}: field 'wav' is empty (the source audio is needed)")
    fb = fbank_kwargs_from_config(cfg)
    peak = (cfg.get("fbank") or {}).get("peak_normalize")
    report_opts = {}
    rep_path = out / "prep_report.json"
    if rep_path.is_file():
        report_opts = json.loads(rep_path.read_text(encoding="utf-8")).get("options", {})
    end_tol_s = float(report_opts.get("end_tolerance_ms", 10.0)) / 1000.0
    cache_dir = out / ".cache" / "fbank80_sp"
    cache_dir.mkdir(parents=True, exist_ok=True)
    tasks = [(r, f, os.fspath(cache_dir / f"{perturbed_id(r['id'], f)}.{_cache_key(r, f, fb, peak)}.npy"), fb, peak,
              end_tol_s) for f in factors if f != 1.0 for r in rows]
    results: dict[str, dict[str, Any]] = {}
    t_feat = time.time()
    bar = tqdm(total=len(tasks), desc=f"speed perturb {split}", unit="utt", disable=not progress, mininterval=1.0)
    if jobs > 1 and len(tasks) > 1:
        with mp.get_context("forkserver" if os.name == "posix" else "spawn").Pool(jobs) as pool:
            for res in pool.imap_unordered(_extract, tasks, chunksize=16):
                results[res["id"]] = res
                bar.update(1)
    else:
        for t in tasks:
            res = _extract(t)
            results[res["id"]] = res
            bar.update(1)
    bar.close()
    t_feat = time.time() - t_feat
    errors = [r["error"] for r in results.values() if r["error"]]
    if errors:
        raise SpeedPerturbBuildError(f"{len(errors)} audio error(s) while perturbing {manifest}:\n  "
                                     + "\n  ".join(errors[:20]))
    zip_name = f"fbank80_{split}_sp.zip"
    fields: dict[str, str] = {}
    if results:
        fields = pack_npy_files(out / zip_name, sorted((f"{k}.npy", v["cache"]) for k, v in results.items()),
                                progress=progress)
    out_rows: list[dict[str, Any]] = []
    per_factor: dict[str, dict[str, int]] = {}
    for f in factors:
        n_utt = n_frames = 0
        for r in rows:
            if f == 1.0:
                row: dict[str, Any] = dict(r)
            else:
                new_id = perturbed_id(r["id"], f)
                dur = r.get("duration")
                row = {**r, "id": new_id, "audio": fields[f"{new_id}.npy"], "n_frames": results[new_id]["n_frames"],
                       "speaker": f"sp{f:g}-{r.get('speaker', '')}",
                       "duration": f"{float(dur) / f:.3f}" if dur not in (None, "") else ""}
            out_rows.append(row)
            n_utt += 1
            n_frames += int(row["n_frames"])
        per_factor[f"{f:g}"] = {"utterances": n_utt, "frames": n_frames}
    new_manifest = f"{split}_sp"
    langs = tgt_langs_of(rows[0].keys()) if rows else list(cfg.get("tgt_langs", []))
    write_manifest(out / f"{new_manifest}.tsv", out_rows, manifest_columns(langs))
    sp = dict(cfg.get("speed_perturb") or {})
    sp[split] = {"manifest": new_manifest, "factors": factors, "features": zip_name if results else None}
    cfg["speed_perturb"] = sp
    import yaml

    atomic_write_text(out / "config.yaml", yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    report = {"split": split, "manifest": f"{new_manifest}.tsv", "features": zip_name if results else None,
              "factors": factors, "per_factor": per_factor,
              "extracted": sum(1 for r in results.values() if not r.get("cached")),
              "from_cache": sum(1 for r in results.values() if r.get("cached")), "feature_seconds": round(t_feat, 2), "jobs": jobs,
              "resampler": f"soxr {soxr.__version__} HQ", "seconds": round(time.time() - t0, 2),
              "provenance": run_record(depends_on=DEPENDS_ON)}
    atomic_write_json(out / f"speed_perturb_{split}.json", report)
    return report
