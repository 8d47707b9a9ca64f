"""Write a synthetic raw corpus in MuST-C layout (whole talks + segment yaml + line-aligned text).

Layout for every target language XX::

    OUT/en-XX/data/{train,dev,tst-COMMON[,tst-unseen]}/wav/<talk>.wav    16 kHz mono PCM16, whole talks
    OUT/en-XX/data/<split>/txt/<split>.yaml                 - {duration: s, offset: s, speaker_id: .., wav: ..}
    OUT/en-XX/data/<split>/txt/<split>.en / <split>.XX      line-aligned with the yaml

and the same corpus as audio lists (the input of ``mmst-prep-lists``; one row per segment of a
talk, every target language a column; ``audio`` relative to the list)::

    OUT/lists/<split>.tsv    id, audio, offset, duration, speaker, en, <lang>...

All pairs share the same talks and segments. Each talk wav is written once to
``OUT/_synth/wav/<split>/<talk>.wav`` and hard-linked into every ``en-XX`` pair (copied if the file
system refuses hard links). ``OUT/_synth/`` also holds ``config.json`` (generation parameters) and one
``<talk>.json`` per finished talk (segment sample offsets) so a rerun skips finished talks.
A talk = lead pause + segment + pause + ... + tail pause; pauses are uniform in ``pause_s``. The whole
talk gets deterministic Gaussian dither (``dither`` = std in full-scale units, default 2e-4 ~ 6.5 LSB of
PCM16, about -74 dBFS) so pauses are never exact digital zeros (espeak emits exact silence, which would
pile up at the fbank log floor and skew CMVN). All files are written atomically (tmp + rename).

Voices (see ``split_voice_pool``): ``tst-unseen`` (written only when asked for) always uses the
held-out speaker pool, and then train/dev/tst-COMMON use the train pool only, so one corpus measures
both seen-voice and unseen-voice quality of one model. Without it, ``heldout_voices`` moves dev and
tst-COMMON to the held-out pool; otherwise every split draws from all voices.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Sequence
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import soundfile as sf
from tqdm import tqdm

from mmst.atomic import atomic_copy, atomic_path, atomic_write_text
from mmst.corpora.synthetic.grammar import LANGS, Grammar
from mmst.corpora.synthetic.tts import (
    SAMPLE_RATE,
    Speaker,
    espeak_binary,
    pick_speaker,
    speaker_pool,
    synthesize,
)

SPLITS = ("train", "dev", "tst-COMMON", "tst-unseen")
_SPLIT_CODE = {"train": "tr", "dev": "dv", "tst-COMMON": "ts", "tst-unseen": "tu"}
UNSEEN_SPLIT = "tst-unseen"


class CorpusConfigError(ValueError):
    """Raised when OUT holds a corpus generated with different parameters, or on bad text input."""


# ----------------------------------------------------------------------------- small utilities
def _link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link ``src`` to ``dst`` atomically (an atomic copy if hard links are not supported)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    if tmp.exists():
        tmp.unlink()
    try:
        os.link(src, tmp)
    except OSError:
        atomic_copy(src, dst)
        return
    os.replace(tmp, dst)


def _seed_int(*parts) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "little")


# ----------------------------------------------------------------------------- text sources
def grammar_segments(num: dict[str, int], seed: int, difficulty: str = "easy", **knobs) -> dict[str, list[dict]]:
    """Sample ``num[split]`` parallel sentences per split (``{lang: text}`` dicts, all of ``LANGS``).

    Test and dev are sampled first (unique English sentences where possible), train never contains a
    dev/test English sentence (train may repeat its own sentences). Deterministic in ``seed``.
    Raises RuntimeError if the grammar is too small to keep train disjoint from dev/test.
    """
    seen: set[str] = set()
    out = {}
    for split in (UNSEEN_SPLIT, "tst-COMMON", "dev", "train"):
        if split == UNSEEN_SPLIT and not num.get(split, 0):
            continue
        g = Grammar(difficulty, seed=f"{seed}:{split}", **knobs)
        items, tries = [], 0
        unique = split != "train"
        while len(items) < num.get(split, 0):
            s = g.sample()
            tries += 1
            if s["en"] in seen and (split == "train" or tries < 50 * (num[split] + 10)):
                if tries > 1000 * (num[split] + 10):
                    raise RuntimeError(f"grammar too small to keep {split} disjoint from dev/test; "
                                       "raise --vocab-size or --max-words")
                continue
            if unique:
                seen.add(s["en"])
            items.append(s)
        out[split] = items
    return out


def _find_lang_file(text_dir: Path, code: str) -> Path:
    cands = sorted(p for p in text_dir.iterdir() if p.is_file() and (p.name == code or p.name.startswith(code + ".")))
    if len(cands) != 1:
        raise CorpusConfigError(f"{text_dir}: expected exactly one file named {code!r} or {code}.*, found "
                                f"{[p.name for p in cands]}")
    return cands[0]


def read_multiway_text(text_dir: str | Path, src: str, tgt: dict[str, str]) -> list[dict[str, str]]:
    """Read line-aligned files ``DIR/<code>[.*]`` -> list of ``{"en": src_line, lang: tgt_line}``.

    ``tgt`` maps file code -> language (e.g. ``{"deu": "de"}``). Raises CorpusConfigError (file name) on
    a missing file or differing line counts, and on non-UTF-8 text (file and line number).
    """
    text_dir = Path(text_dir)
    cols = {"en": _find_lang_file(text_dir, src)} | {lang: _find_lang_file(text_dir, code) for code, lang in tgt.items()}
    lines = {}
    for lang, path in cols.items():
        raw = path.read_bytes().split(b"\n")
        if raw and raw[-1] == b"":
            raw = raw[:-1]
        dec = []
        for i, b in enumerate(raw, 1):
            try:
                dec.append(b.decode("utf-8").rstrip("\r").strip())
            except UnicodeDecodeError as e:
                raise CorpusConfigError(f"{path}:{i}: not UTF-8 ({e})") from e
        lines[lang] = dec
    n = {lang: len(v) for lang, v in lines.items()}
    if len(set(n.values())) != 1:
        raise CorpusConfigError(f"{text_dir}: line counts differ: " + ", ".join(f"{cols[k].name}={v}" for k, v in n.items()))
    return [{lang: lines[lang][i] for lang in cols} for i in range(next(iter(n.values())))]


def split_text_rows(rows: list[dict], num_train: int | None, num_dev: int | None, num_test: int | None,
                    dev_ratio: float = 0.1, test_ratio: float = 0.1) -> tuple[dict[str, list[dict]], int]:
    """Deterministic contiguous split by line number: train = first lines, then dev, then tst-COMMON.

    Rows with an empty English line are skipped. Counts default to ratios of the usable lines.
    Returns (splits, number of skipped rows).
    """
    usable = [r for r in rows if r["en"]]
    n = len(usable)
    nd = num_dev if num_dev is not None else int(round(dev_ratio * n))
    nt = num_test if num_test is not None else int(round(test_ratio * n))
    ntr = num_train if num_train is not None else n - nd - nt
    if ntr + nd + nt > n:
        raise CorpusConfigError(f"asked for {ntr}+{nd}+{nt} segments but only {n} usable lines")
    return {"train": usable[:ntr], "dev": usable[ntr:ntr + nd], "tst-COMMON": usable[ntr + nd:ntr + nd + nt]}, len(rows) - n


# ----------------------------------------------------------------------------- talks
def split_voice_pool(split: str, heldout_voices: bool, has_unseen_split: bool) -> str:
    """Speaker pool name (``train``, ``heldout`` or ``all``, see ``speaker_pool``) for one split.

    ``tst-unseen`` -> ``heldout``; with a ``tst-unseen`` split every other split -> ``train`` (so
    those voices stay unseen); else ``heldout_voices`` puts dev/tst-COMMON on ``heldout`` and train
    on ``train``; else ``all``.
    """
    if split == UNSEEN_SPLIT:
        return "heldout"
    if has_unseen_split:
        return "train"
    if heldout_voices:
        return "train" if split == "train" else "heldout"
    return "all"


def plan_talks(segments: dict[str, list[dict]], seed: int, heldout_voices: bool,
               segments_per_talk: tuple[int, int] = (6, 12), pause_s: tuple[float, float] = (0.3, 1.0)) -> list[dict]:
    """Group segments into talks: list of ``{split, talk, speaker, texts: [en...], pauses_s: [...]}``
    (``len(pauses_s) == len(texts) + 1``: lead, between, tail). One speaker per talk, deterministic."""
    talks = []
    has_unseen = bool(segments.get(UNSEEN_SPLIT))
    for split in SPLITS:
        segs = segments.get(split, [])
        rng = random.Random(f"{seed}:talks:{split}")
        pool = speaker_pool(split_voice_pool(split, heldout_voices, has_unseen))
        i, k = 0, 0
        while i < len(segs):
            n = rng.randint(*segments_per_talk)
            chunk = segs[i:i + n]
            sp = pick_speaker(pool, rng)
            pauses = [round(rng.uniform(*pause_s), 3) for _ in range(len(chunk) + 1)]
            talks.append({"split": split, "talk": f"talk_{_SPLIT_CODE[split]}{k:04d}", "speaker": sp.__dict__,
                          "texts": [s["en"] for s in chunk], "pauses_s": pauses, "first": i})
            i += n
            k += 1
    return talks


def render_talk(talk: dict, seed: int, dither: float = 2e-4) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Synthesize one talk: returns (int16 samples at 16 kHz, [(offset_samples, n_samples)] per segment).

    Dither: ``dither`` std (full scale = 1.0), Gaussian, seeded by (seed, talk id).
    """
    sp = Speaker(**talk["speaker"])
    parts, segs, pos = [], [], 0
    for j, text in enumerate(talk["texts"]):
        gap = np.zeros(int(round(talk["pauses_s"][j] * SAMPLE_RATE)), np.float32)
        parts.append(gap)
        pos += gap.size
        x = synthesize(text, sp)
        parts.append(x)
        segs.append((pos, int(x.size)))
        pos += x.size
    parts.append(np.zeros(int(round(talk["pauses_s"][-1] * SAMPLE_RATE)), np.float32))
    audio = np.concatenate(parts)
    rng = np.random.default_rng(_seed_int(seed, "dither", talk["talk"]))
    audio = audio + rng.normal(0.0, dither, audio.size).astype(np.float32)
    pcm = np.clip(np.round(audio * 32768.0), -32768, 32767).astype(np.int16)
    return pcm, segs


def _work(args) -> tuple[str, str, list, int]:
    talk, seed, dither, master = args
    pcm, segs = render_talk(talk, seed, dither)
    master = Path(master)
    master.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(master) as tmp:
        sf.write(str(tmp), pcm, SAMPLE_RATE, subtype="PCM_16", format="WAV")
    return talk["split"], talk["talk"], segs, len(talk["texts"])


def _fmt(x: float) -> str:
    return f"{x:.6f}"


def synthesize_corpus(out_dir: str | Path, tgt_langs: Sequence[str], segments: dict[str, list[dict]],
                      seed: int = 0, heldout_voices: bool = False, jobs: int = 1, dither: float = 2e-4,
                      segments_per_talk: tuple[int, int] = (6, 12), pause_s: tuple[float, float] = (0.3, 1.0),
                      source_info: dict | None = None, progress: bool = True) -> dict:
    """Write ``segments`` (per split: list of ``{"en": .., lang: ..}``) as a MuST-C-layout corpus.

    Args: out_dir (RAW root); tgt_langs (pairs en-XX to write; each must be a key of the segments);
    seed; heldout_voices (dev/test voices disjoint from train); jobs (processes); dither (std, full
    scale); segments_per_talk (min, max); pause_s (min, max seconds); source_info (stored in config).
    Returns a summary dict (counts, seconds of audio, talks synthesized/skipped).
    Raises CorpusConfigError if OUT holds a corpus from other parameters; EspeakNotFoundError.
    """
    out = Path(out_dir)
    espeak_binary()
    for split, segs in segments.items():
        for s in segs:
            missing = [lang for lang in tgt_langs if lang not in s]
            if missing:
                raise CorpusConfigError(f"split {split}: no text for languages {missing}")
    talks = plan_talks(segments, seed, heldout_voices, segments_per_talk, pause_s)
    fingerprint = hashlib.sha256(json.dumps([talks, dither], sort_keys=True).encode()).hexdigest()
    cfg = {"seed": seed, "heldout_voices": heldout_voices, "dither": dither, "sample_rate": SAMPLE_RATE,
           "segments_per_talk": list(segments_per_talk), "pause_s": list(pause_s), "source": source_info or {},
           "fingerprint": fingerprint}
    cfg_path = out / "_synth" / "config.json"
    if cfg_path.exists():
        old = json.loads(cfg_path.read_text())
        if old.get("fingerprint") != fingerprint:
            raise CorpusConfigError(f"{out} holds a synthetic corpus made with other parameters "
                                    f"({cfg_path}); use a fresh --out directory")
    else:
        atomic_write_text(cfg_path, json.dumps(cfg, indent=1, sort_keys=True, ensure_ascii=False) + "\n")

    meta_dir = out / "_synth" / "meta"
    master = {t["talk"]: out / "_synth" / "wav" / t["split"] / f"{t['talk']}.wav" for t in talks}
    todo = [t for t in talks if not ((meta_dir / f"{t['talk']}.json").exists() and master[t["talk"]].exists())]
    n_todo = sum(len(t["texts"]) for t in todo)
    with tqdm(total=n_todo, unit="utt", desc="synthesize", disable=not progress) as bar:
        args = [(t, seed, dither, str(master[t["talk"]])) for t in todo]
        if jobs > 1 and len(args) > 1:
            pool = get_context("fork").Pool(jobs)
            it = pool.imap_unordered(_work, args)
        else:
            pool, it = None, map(_work, args)
        try:
            for _split, name, segs, n in it:
                atomic_write_text(meta_dir / f"{name}.json", json.dumps({"segments": segs}) + "\n")
                bar.update(n)
        finally:
            if pool is not None:
                pool.close()
                pool.join()

    total_s = 0.0
    counts = {}
    for split in SPLITS:
        st = [t for t in talks if t["split"] == split]
        segs = segments.get(split, [])
        if split == UNSEEN_SPLIT and not segs:
            continue
        yaml_lines, idx, list_rows = [], [], []
        for t in st:
            meta = json.loads((meta_dir / f"{t['talk']}.json").read_text())["segments"]
            sp = Speaker(**t["speaker"])
            for j, (off, n) in enumerate(meta):
                yaml_lines.append(f"- {{duration: {_fmt(n / SAMPLE_RATE)}, offset: {_fmt(off / SAMPLE_RATE)}, "
                                  f"speaker_id: {sp.speaker_id}, wav: {t['talk']}.wav}}")
                i = t["first"] + j
                list_rows.append([f"{t['talk']}_{j}", f"../_synth/wav/{split}/{t['talk']}.wav", _fmt(off / SAMPLE_RATE),
                                  _fmt(n / SAMPLE_RATE), sp.speaker_id, segs[i]["en"]] + [segs[i][lang] for lang in tgt_langs])
                idx.append(i)
                total_s += n / SAMPLE_RATE
        counts[split] = len(yaml_lines)
        if not st:
            continue
        header = ["id", "audio", "offset", "duration", "speaker", "en", *tgt_langs]
        atomic_write_text(out / "lists" / f"{split}.tsv",
                          "".join("\t".join(c.replace("\t", " ") for c in r) + "\n" for r in [header, *list_rows]))
        for lang in tgt_langs:
            base = out / f"en-{lang}" / "data" / split
            for t in st:
                dst = base / "wav" / f"{t['talk']}.wav"
                if not (dst.exists() and os.path.samefile(dst, master[t["talk"]])):
                    _link_or_copy(master[t["talk"]], dst)
            atomic_write_text(base / "txt" / f"{split}.yaml", "\n".join(yaml_lines) + "\n")
            atomic_write_text(base / "txt" / f"{split}.en", "".join(segs[i]["en"] + "\n" for i in idx))
            atomic_write_text(base / "txt" / f"{split}.{lang}", "".join(segs[i][lang] + "\n" for i in idx))
    summary = {"segments": counts, "talks": len(talks), "talks_synthesized": len(todo),
               "talks_skipped": len(talks) - len(todo), "speech_s": round(total_s, 3)}
    atomic_write_text(out / "_synth" / "summary.json", json.dumps(summary, indent=1) + "\n")
    return summary


def synthesize_grammar_corpus(out_dir: str | Path, tgt_langs: Sequence[str], num_train: int = 2000,
                              num_dev: int = 200, num_test: int = 200, num_test_unseen: int = 0,
                              difficulty: str = "easy",
                              vocab_size: int | None = None, max_words: int | None = None,
                              reorder_distance: int | None = None, seed: int = 0, **kw) -> dict:
    """Grammar source: sample sentences (see ``grammar_segments``) and write them with
    ``synthesize_corpus`` (extra keyword arguments are passed on). ``num_test_unseen`` > 0 adds a
    ``tst-unseen`` split spoken by held-out voices (all other splits then use train voices only).
    Raises ValueError on a language the grammar does not produce."""
    bad = [lang for lang in tgt_langs if lang not in LANGS or lang == "en"]
    if bad:
        raise ValueError(f"grammar languages are {LANGS[1:]}, not {bad}")
    knobs = {k: v for k, v in dict(vocab_size=vocab_size, max_words=max_words,
                                   reorder_distance=reorder_distance).items() if v is not None}
    segs = grammar_segments({"train": num_train, "dev": num_dev, "tst-COMMON": num_test,
                             UNSEEN_SPLIT: num_test_unseen}, seed, difficulty, **knobs)
    info = {"type": "grammar", "difficulty": difficulty, **knobs}
    return synthesize_corpus(out_dir, tgt_langs, segs, seed=seed, source_info=info, **kw)


def synthesize_text_corpus(out_dir: str | Path, text_dir: str | Path, src: str, tgt: dict[str, str],
                           num_train: int | None = None, num_dev: int | None = None, num_test: int | None = None,
                           dev_ratio: float = 0.1, test_ratio: float = 0.1, seed: int = 0, **kw) -> dict:
    """Text source: line-aligned multi-way files (``read_multiway_text``), contiguous split by line
    number (``split_text_rows``), then ``synthesize_corpus`` for all languages of ``tgt``."""
    rows = read_multiway_text(text_dir, src, tgt)
    segs, skipped = split_text_rows(rows, num_train, num_dev, num_test, dev_ratio, test_ratio)
    info = {"type": "text", "text_dir": str(Path(text_dir).resolve()), "src": src, "tgt": tgt}
    summary = synthesize_corpus(out_dir, list(tgt.values()), segs, seed=seed, source_info=info, **kw)
    summary["skipped_empty_lines"] = skipped
    return summary
