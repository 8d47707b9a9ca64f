"""Make a clean MuST-C-layout corpus look like real MuST-C releases (``--mustc-like-perturb``).

The synthetic generator writes every pair ``en-XX`` with *identical* segments. Real MuST-C pairs
were segmented independently. :func:`perturb_mustc_like` rewrites the per-pair yaml/text files (and
moves/pads a few wavs) deterministically under a seed so that:

- the reference pair (first language) is left segment-for-segment intact, and 3+ pairs share most
  segments (every segment not touched below);
- in every other pair, some segments are shifted by 5 ms (within the default 10 ms tolerance: the
  fast path), some by 40 ms (IoU path: only segments >= 1 s, so IoU >= 0.96), and some are split in
  two at a word boundary (English and translation halves, time cut proportional to word count);
- one train talk is present in the last pair only;
- one dev talk sits in ``train`` for the second pair (its lines and wav moved there) and in ``dev``
  for every other pair;
- one train talk has offsets on both sides of 10 s (e.g. 9.x and 10.x), so sorting the yaml offset
  strings differs from sorting numbers; if no talk naturally straddles 10 s, one talk's wav is
  prepended with silence in every pair and its offsets shifted accordingly;
- yaml lines carry MuST-C's extra keys ``rW`` (word count) and ``uW`` (0), which readers must ignore.

Offsets and durations are seconds. The function writes ``ROOT/mustc_perturb.json`` (what it did,
plus the expected alignment counts under default settings) and refuses to perturb twice.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Sequence

from mmst.atomic import atomic_path, atomic_write_json, atomic_write_lines
from mmst.corpora.mustc_layout import normalize_text, parse_yaml_line, split_paths

log = logging.getLogger(__name__)

MARKER = "mustc_perturb.json"

_SHIFT_SMALL_S = 0.005
_SHIFT_LARGE_S = 0.040


def _read(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def _write(path: str, lines: Sequence[str]) -> None:
    atomic_write_lines(path, lines)


def _fmt(x: float) -> str:
    return f"{x:.6f}"


def _yaml_line(d: dict) -> str:
    """MuST-C yaml line; key order duration, offset, rW, uW, speaker_id, wav, then any other keys."""
    keys = ["duration", "offset", "rW", "uW", "speaker_id", "wav"]
    keys += [k for k in d if k not in keys]
    parts = []
    for k in keys:
        if k not in d:
            continue
        v = d[k]
        parts.append(f"{k}: {_fmt(v) if isinstance(v, float) else v}")
    return "- {" + ", ".join(parts) + "}"


def _load_pair_split(root: str, lang: str, split: str) -> list[dict] | None:
    p = split_paths(root, lang, split)
    if not all(os.path.isfile(p[k]) for k in ("yaml", "en", "tgt")):
        return None
    ys, es, ts = _read(p["yaml"]), _read(p["en"]), _read(p["tgt"])
    if not (len(ys) == len(es) == len(ts)):
        raise ValueError(f"{p['yaml']}: yaml/en/{lang} line counts differ ({len(ys)}/{len(es)}/{len(ts)})")
    rows = []
    for i, (y, e, t) in enumerate(zip(ys, es, ts)):
        d = parse_yaml_line(y, p["yaml"], i + 1)
        d.setdefault("rW", len(e.split()))
        d.setdefault("uW", 0)
        rows.append({"y": d, "en": e, "tgt": t})
    return rows


def _save_pair_split(root: str, lang: str, split: str, rows: list[dict]) -> None:
    p = split_paths(root, lang, split)
    os.makedirs(os.path.dirname(p["yaml"]), exist_ok=True)
    _write(p["yaml"], [_yaml_line(r["y"]) for r in rows])
    _write(p["en"], [r["en"] for r in rows])
    _write(p["tgt"], [r["tgt"] for r in rows])


def _talk(r: dict) -> str:
    return os.path.splitext(str(r["y"]["wav"]))[0]


def _pad_wav(path: str, pad_s: float, done: set) -> None:
    """Prepend ``pad_s`` seconds of silence to a wav (once per resolved path).

    The file is replaced atomically at its resolved path; symlinks to it see the change once.
    Hard links (the synthetic writer links one wav into every pair) are separate directory entries:
    each is rewritten on its own, because replacing one entry does not change the others.
    """
    import numpy as np
    import soundfile as sf

    real = os.path.realpath(path)
    if real in done:
        return
    done.add(real)
    info = sf.info(real)
    data, sr = sf.read(real, dtype="float32", always_2d=True)
    n = int(round(pad_s * sr))
    data = np.concatenate([np.zeros((n, data.shape[1]), dtype=data.dtype), data], axis=0)
    with atomic_path(real) as tmp:
        sf.write(tmp, data, sr, subtype=info.subtype, format=info.format)


def _split_row(r: dict) -> tuple[dict, dict] | None:
    """Split a row in two at the middle word; None when it cannot be split cleanly."""
    ew, tw = r["en"].split(), r["tgt"].split()
    if len(ew) < 4 or len(tw) < 2 or r["y"]["duration"] < 1.0:
        return None
    h, ht = len(ew) // 2, len(tw) // 2
    e1, e2 = " ".join(ew[:h]), " ".join(ew[h:])
    if not normalize_text(e1) or not normalize_text(e2):
        return None
    if f"{normalize_text(e1)} {normalize_text(e2)}" != normalize_text(r["en"]):
        return None
    off, dur = r["y"]["offset"], r["y"]["duration"]
    cut = round(off + dur * h / len(ew), 3)
    y1 = dict(r["y"], offset=off, duration=round(cut - off, 6), rW=h)
    y2 = dict(r["y"], offset=cut, duration=round(off + dur - cut, 6), rW=len(ew) - h)
    return {"y": y1, "en": e1, "tgt": " ".join(tw[:ht])}, {"y": y2, "en": e2, "tgt": " ".join(tw[ht:])}


def _shift(r: dict, s: float) -> None:
    """Shift a segment by ``s`` seconds, earlier when possible (so it stays inside the wav)."""
    y = r["y"]
    if y["offset"] >= s:
        y["offset"] = round(y["offset"] - s, 6)
    else:  # cannot move earlier: move the start later, keep the end
        y["offset"] = round(y["offset"] + s, 6)
        y["duration"] = round(y["duration"] - s, 6)


def perturb_mustc_like(
    raw_root: str,
    langs: Sequence[str],
    seed: int = 0,
    splits: Sequence[str] = ("train", "dev", "tst-COMMON", "tst-HE"),
    frac_shift: float = 0.08,
    frac_split: float = 0.04,
) -> dict:
    """Rewrite a clean MuST-C-layout corpus in place so its pairs disagree like real MuST-C pairs.

    Hook for ``data_prep/synthesize_corpus.py --mustc-like-perturb``: call it once, after every
    pair's wav/yaml/text files are written. Deterministic for a given corpus and ``seed``.

    Args:
        raw_root: root holding ``en-XX/data/<split>/{txt,wav}``; all pairs must carry identical
            segments (same yaml lines and English in the same order).
        langs: target languages, reference first (the first pair is never perturbed per segment).
            2 languages work (no single-pair talk then); 3+ give every perturbation.
        seed: RNG seed.
        splits: split names to consider (absent ones are ignored).
        frac_shift: fraction of a non-reference pair's segments shifted by 5 ms, and again by 40 ms
            (at least 1 each per pair/split when possible).
        frac_split: fraction split in two (at least 1 per pair/split when possible).

    Returns:
        summary dict (also written to ``raw_root/mustc_perturb.json``): ``offset_sort_talk``,
        ``padded_s``, ``single_pair_talk``, ``cross_split_talk``, per-language counts
        ``shift_5ms``, ``shift_40ms``, ``split_in_two``, and ``expected_kept`` = ``{split: n}``
        utterances an alignment with default parameters (all languages, merge_splits on) must keep.

    Raises:
        FileExistsError: the corpus was already perturbed (marker file present).
        FileNotFoundError: a pair directory is missing.
        ValueError: fewer than 2 languages, or pairs that do not carry identical segments.
    """
    langs = list(langs)
    if len(langs) < 2:
        raise ValueError("perturb_mustc_like needs at least 2 target languages")
    marker = os.path.join(raw_root, MARKER)
    if os.path.exists(marker):
        raise FileExistsError(f"{marker}: corpus already perturbed; regenerate it first")
    for lang in langs:
        d = os.path.join(raw_root, f"en-{lang}")
        if not os.path.isdir(d):
            raise FileNotFoundError(f"{d}: pair en-{lang} missing")
    rng = random.Random(seed)
    ref = langs[0]
    data: dict[str, dict[str, list[dict]]] = {lang: {} for lang in langs}
    for split in splits:
        for lang in langs:
            rows = _load_pair_split(raw_root, lang, split)
            if rows is not None:
                data[lang][split] = rows
        present = [lg for lg in langs if split in data[lg]]
        if present and len(present) != len(langs):
            raise ValueError(f"split {split} present for {present} only; perturbation needs every pair")
        if present:
            base = [(r["y"]["wav"], r["y"]["offset"], r["y"]["duration"], r["en"]) for r in data[ref][split]]
            for lg in present[1:]:
                other = [(r["y"]["wav"], r["y"]["offset"], r["y"]["duration"], r["en"]) for r in data[lg][split]]
                if other != base:
                    raise ValueError(f"en-{lg}/{split} does not carry the same segments as en-{ref}/{split}")
    used_splits = [s for s in splits if s in data[ref]]

    def talks(split: str) -> list[str]:
        seen: dict[str, None] = {}
        for r in data[ref].get(split, []):
            seen.setdefault(_talk(r), None)
        return list(seen)

    summary: dict = {"seed": seed, "langs": langs, "reference": ref}

    # 1. a talk whose offsets straddle 10 s (string sort != numeric sort)
    train_talks = talks("train") if "train" in data[ref] else (talks(used_splits[0]) if used_splits else [])
    tr_split = "train" if "train" in data[ref] else (used_splits[0] if used_splits else None)
    sort_talk, padded = None, 0.0
    for t in train_talks:
        offs = sorted(r["y"]["offset"] for r in data[ref][tr_split] if _talk(r) == t)
        if any(o < 10 for o in offs) and any(o >= 10 for o in offs):
            sort_talk = t
            break
    if sort_talk is None and tr_split is not None:
        multi = [t for t in train_talks if sum(_talk(r) == t for r in data[ref][tr_split]) >= 2]
        if multi:
            sort_talk = multi[0]
            offs = sorted(r["y"]["offset"] for r in data[ref][tr_split] if _talk(r) == sort_talk)
            gap = offs[1] - offs[0]
            padded = round(10.0 - offs[1] + min(0.2, gap / 2), 3)
            done: set = set()
            for lang in langs:
                wav = None
                for r in data[lang][tr_split]:
                    if _talk(r) == sort_talk:
                        r["y"]["offset"] = round(r["y"]["offset"] + padded, 6)
                        wav = str(r["y"]["wav"])
                _pad_wav(os.path.join(split_paths(raw_root, lang, tr_split)["wav_dir"], wav), padded, done)
    summary["offset_sort_talk"] = sort_talk
    summary["padded_s"] = padded

    # 2. a train talk present in the last pair only (needs 3+ pairs and 3+ train talks)
    single = None
    if len(langs) >= 3 and tr_split is not None:
        cands = [t for t in train_talks if t != sort_talk]
        if len(cands) >= 2:
            single = rng.choice(cands)
            for lang in langs[:-1]:
                rows = data[lang][tr_split]
                wav = next(str(r["y"]["wav"]) for r in rows if _talk(r) == single)
                data[lang][tr_split] = [r for r in rows if _talk(r) != single]
                wp = os.path.join(split_paths(raw_root, lang, tr_split)["wav_dir"], wav)
                if os.path.lexists(wp):
                    os.remove(wp)
    summary["single_pair_talk"] = (
        {"talk": single, "lang": langs[-1], "split": tr_split} if single else None
    )

    # 3. a dev talk that sits in train for the second pair
    cross = None
    if "dev" in data[ref] and "train" in data[ref] and talks("dev"):
        cross = rng.choice(talks("dev"))
        lang = langs[1]
        moved = [r for r in data[lang]["dev"] if _talk(r) == cross]
        data[lang]["dev"] = [r for r in data[lang]["dev"] if _talk(r) != cross]
        data[lang]["train"].extend(moved)
        src = os.path.join(split_paths(raw_root, lang, "dev")["wav_dir"], str(moved[0]["y"]["wav"]))
        dst_dir = split_paths(raw_root, lang, "train")["wav_dir"]
        os.makedirs(dst_dir, exist_ok=True)
        os.replace(src, os.path.join(dst_dir, os.path.basename(src)))
    summary["cross_split_talk"] = (
        {"talk": cross, "lang": langs[1], "in_split": "train", "other_pairs_split": "dev"} if cross else None
    )

    # 4. per-segment perturbations in non-reference pairs
    shift5, shift40, split2 = {}, {}, {}
    for lang in langs[1:]:
        shift5[lang] = shift40[lang] = split2[lang] = 0
        for split in used_splits:
            rows = data[lang][split]
            idx = [i for i, r in enumerate(rows) if _talk(r) not in (single, cross)]
            n = len(idx)
            if n == 0:
                continue
            k_shift = max(1, round(frac_shift * n))
            k_split = max(1, round(frac_split * n))
            order = idx[:]
            rng.shuffle(order)
            splittable = [i for i in order if _split_row(rows[i]) is not None][:k_split]
            rest = [i for i in order if i not in set(splittable)]
            s5 = rest[:k_shift]
            s40 = [i for i in rest[k_shift:] if rows[i]["y"]["duration"] >= 1.0][:k_shift]
            for i in s5:
                _shift(rows[i], _SHIFT_SMALL_S)
            for i in s40:
                _shift(rows[i], _SHIFT_LARGE_S)
            shift5[lang] += len(s5)
            shift40[lang] += len(s40)
            split2[lang] += len(splittable)
            sp = set(splittable)
            new_rows = []
            for i, r in enumerate(rows):
                if i in sp:
                    new_rows.extend(_split_row(r))
                else:
                    new_rows.append(r)
            data[lang][split] = new_rows
    summary["shift_5ms"] = shift5
    summary["shift_40ms"] = shift40
    summary["split_in_two"] = split2

    expected = {}
    for split in used_splits:
        expected[split] = sum(1 for r in data[ref][split] if _talk(r) != single)
    summary["expected_kept"] = expected

    for lang in langs:
        for split, rows in data[lang].items():
            _save_pair_split(raw_root, lang, split, rows)
    atomic_write_json(marker, summary)
    log.info("MuST-C-like perturbation: %s", json.dumps(summary, sort_keys=True))
    return summary
