"""Tests for mmst.corpora.synthetic: grammar translations/reordering, TTS, MuST-C corpus writer."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from mmst.corpora.synthetic import LANGS, Grammar, realize, speaker_pool
from mmst.corpora.synthetic.grammar import ADJECTIVES, NOUNS, NP, VERBS, Clause, Sentence
from mmst.corpora.synthetic.writer import (
    CorpusConfigError,
    grammar_segments,
    plan_talks,
    read_multiway_text,
    split_voice_pool,
    synthesize_grammar_corpus,
)

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed")
SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def _noun(en):
    return next(n for n in NOUNS if n.en == en)


def _adj(en):
    return next(a for a in ADJECTIVES if a.en == en)


def _verb(en):
    return next(v for v in VERBS if v.en == en)


def test_exact_translations_simple():
    s = Sentence("simple", Clause(NP(_noun("dog"), _adj("big")), _verb("eats"), NP(_noun("bread"), _adj("fresh")),
                                  [("in", NP(_noun("kitchen")))]))
    got = {lang: realize(s, lang) for lang in LANGS}
    assert got == {
        "en": "The big dog eats the fresh bread in the kitchen.",
        "de": "Der große Hund isst das frische Brot in der Küche.",
        "nl": "De grote hond eet het verse brood in de keuken.",
        "es": "El perro grande come el pan fresco en la cocina.",
        "fr": "Le grand chien mange le pain frais dans la cuisine.",
        "it": "Il cane grande mangia il pane fresco nella cucina.",
        "pt": "O cão grande come o pão fresco na cozinha.",
        "ja": "大きい犬は台所で新鮮なパンを食べます。",
    }


def test_subordinate_and_relative_clauses():
    sub = Clause(NP(_noun("teacher")), _verb("reads"), NP(_noun("letter"), mod=("of", NP(_noun("man")))),
                 [("in", NP(_noun("garden")))], tense="perf")
    s = Sentence("that", Clause(NP(_noun("woman")), next(v for v in VERBS if v.en == "sees")), sub)
    de = realize(s, "de")
    assert de == "Die Frau sieht, dass der Lehrer den Brief des Mannes im Garten gelesen hat."
    assert realize(s, "nl") == "De vrouw ziet dat de leraar de brief van de man in de tuin heeft gelezen."
    rel = NP(_noun("man"), rel=Clause(None, _verb("eats"), NP(_noun("apple"))))
    s2 = Sentence("because", Clause(rel, _verb("sleeps")), Clause(NP(_noun("dog")), _verb("sleeps")))
    assert realize(s2, "en") == "The man who eats the apple sleeps because the dog sleeps."
    assert realize(s2, "de") == "Der Mann, der den Apfel isst, schläft, weil der Hund schläft."
    assert realize(s2, "ja") == "犬が寝るから、りんごを食べる男は寝ます。"
    assert realize(s2, "fr") == "L'homme qui mange la pomme dort parce que le chien dort."
    assert realize(s2, "it") == "L'uomo che mangia la mela dorme perché il cane dorme."


def test_grammar_deterministic():
    a = [Grammar("hard", seed=5).sample() for _ in range(1)] + [Grammar("hard", seed=5).sample()]
    assert a[0] == a[1]
    g1, g2 = Grammar("hard", seed=7), Grammar("hard", seed=7)
    assert [g1.sample() for _ in range(20)] == [g2.sample() for _ in range(20)]
    assert set(a[0]) == set(LANGS)


def test_reordering_properties():
    g = Grammar("hard", seed=11)
    es_post = {a.forms["es"][0]: a.en for a in ADJECTIVES} | {a.forms["es"][1]: a.en for a in ADJECTIVES}
    n_sub = 0
    for _ in range(300):
        tree = g.sample_tree()
        out = {lang: realize(tree, lang) for lang in LANGS}
        # ja: SOV, ends with a polite verb
        assert out["ja"].endswith(("ます。", "ました。"))
        assert " " not in out["ja"]
        # es: adjective follows its noun: the word before an adjective is never an article
        w = out["es"].rstrip(".").lower().replace(",", "").split()
        for i, x in enumerate(w):
            if x in es_post and i > 0:
                assert w[i - 1] not in ("el", "la", "al", "del"), out["es"]
        # de/nl subordinate clause ends with the (finite or participle+aux) verb
        if tree.kind in ("that", "because"):
            n_sub += 1
            sub = tree.sub
            de_tail = out["de"].rstrip(".").split()[-1]
            assert de_tail in (sub.verb.pres["de"], "hat"), out["de"]
            nl_tail = out["nl"].rstrip(".").split()[-1]
            assert nl_tail in (sub.verb.pres["nl"], sub.verb.perf["nl"]), out["nl"]
        assert len(out["en"].split()) <= 25
    assert n_sub > 100


def test_presets_vocab_and_length():
    hard = Grammar("hard", seed=0)
    assert len(hard.vocabulary("en")) >= 200 and hard.n_lexemes >= 200
    lens = [len(hard.sample()["en"].split()) for _ in range(300)]
    assert max(lens) <= 25 and max(lens) >= 22 and np.mean(lens) > 12
    easy = Grammar("easy", seed=0)
    assert len(easy.vocabulary("en")) < 80
    assert max(len(easy.sample()["en"].split()) for _ in range(200)) <= 8
    knob = Grammar("hard", seed=0, max_words=12, reorder_distance=5)
    assert max(len(knob.sample()["en"].split()) for _ in range(100)) <= 12


def test_heldout_voices_disjoint():
    tr, ho = speaker_pool("train"), speaker_pool("heldout")
    assert {s.voice for s in tr}.isdisjoint({s.voice for s in ho})
    assert {s.variant for s in tr}.isdisjoint({s.variant for s in ho})
    assert {s.speaker_id for s in tr}.isdisjoint({s.speaker_id for s in ho})


def test_unseen_split_voices():
    """tst-unseen is spoken by held-out voices only, and then no other split may use them."""
    assert split_voice_pool("tst-unseen", False, True) == "heldout"
    assert split_voice_pool("tst-COMMON", True, True) == "train"  # the unseen split wins over --heldout-voices
    assert split_voice_pool("dev", True, False) == "heldout" and split_voice_pool("train", True, False) == "train"
    assert split_voice_pool("dev", False, False) == "all"
    num = {"train": 60, "dev": 10, "tst-COMMON": 10, "tst-unseen": 12}
    segs = grammar_segments(num, seed=3, difficulty="easy")
    assert {k: len(v) for k, v in segs.items()} == num
    en = {k: {s["en"] for s in v} for k, v in segs.items()}
    assert en["tst-unseen"].isdisjoint(en["train"] | en["dev"] | en["tst-COMMON"])
    talks = plan_talks(segs, seed=3, heldout_voices=False, segments_per_talk=(1, 2))
    spk = {}
    for t in talks:
        spk.setdefault(t["split"], set()).add((t["speaker"]["voice"], t["speaker"]["variant"]))
    ho = {(s.voice, s.variant) for s in speaker_pool("heldout")}
    assert spk["tst-unseen"] <= ho
    assert all(spk[k].isdisjoint(ho) for k in ("train", "dev", "tst-COMMON"))
    # without the unseen split nothing changes: no tst-unseen talks, old behaviour for the rest
    segs.pop("tst-unseen")
    assert not [t for t in plan_talks(segs, seed=3, heldout_voices=False) if t["split"] == "tst-unseen"]


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


@needs_espeak
def test_tiny_corpus(tmp_path):
    kw = dict(num_train=6, num_dev=3, num_test=3, difficulty="easy", seed=4, heldout_voices=True,
              segments_per_talk=(2, 3), progress=False)
    s1 = synthesize_grammar_corpus(tmp_path / "a", ["de", "ja"], jobs=2, **kw)
    assert s1["segments"] == {"train": 6, "dev": 3, "tst-COMMON": 3}
    root = tmp_path / "a"
    spk = {}
    for split, n in (("train", 6), ("dev", 3), ("tst-COMMON", 3)):
        txt = {lang: (root / "en-de" / "data" / split / "txt" / f"{split}.{lang}").read_text().splitlines()
               for lang in ("en", "de")}
        ja = (root / "en-ja" / "data" / split / "txt" / f"{split}.ja").read_text().splitlines()
        segs = yaml.safe_load((root / "en-de" / "data" / split / "txt" / f"{split}.yaml").read_text())
        assert len(segs) == len(txt["en"]) == len(txt["de"]) == len(ja) == n
        assert (root / "en-ja" / "data" / split / "txt" / f"{split}.yaml").read_text() == \
            (root / "en-de" / "data" / split / "txt" / f"{split}.yaml").read_text()
        for seg in segs:
            wav = root / "en-de" / "data" / split / "wav" / seg["wav"]
            info = sf.info(str(wav))
            assert info.samplerate == 16000 and info.channels == 1 and info.subtype == "PCM_16"
            assert seg["offset"] > 0 and seg["offset"] + seg["duration"] <= info.duration + 1e-6
            assert (root / "en-ja" / "data" / split / "wav" / seg["wav"]).exists()
            spk.setdefault(split, set()).add(seg["speaker_id"])
            x, _ = sf.read(str(wav), dtype="int16")
            assert (x == 0).mean() < 0.2  # dithered: pauses are not digital silence
    assert spk["train"].isdisjoint(spk["dev"] | spk["tst-COMMON"])
    # determinism: same bytes twice
    synthesize_grammar_corpus(tmp_path / "b", ["de", "ja"], jobs=1, **kw)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    # resumable: rerun skips all talks; other parameters are refused
    assert synthesize_grammar_corpus(root, ["de", "ja"], jobs=1, **kw)["talks_synthesized"] == 0
    with pytest.raises(CorpusConfigError):
        synthesize_grammar_corpus(root, ["de"], jobs=1, **{**kw, "seed": 5})


def test_text_dir_reader(tmp_path):
    (tmp_path / "eng.devtest").write_text("a\nb\nc\n")
    (tmp_path / "deu.devtest").write_text("A\nB\nC\n")
    rows = read_multiway_text(tmp_path, "eng", {"deu": "de"})
    assert rows[1] == {"en": "b", "de": "B"}
    (tmp_path / "fra.devtest").write_text("x\n")
    with pytest.raises(CorpusConfigError, match="line counts"):
        read_multiway_text(tmp_path, "eng", {"deu": "de", "fra": "fr"})
    (tmp_path / "ita.devtest").write_bytes(b"ok\n\xff\xfe\nz\n")
    with pytest.raises(CorpusConfigError, match="ita.devtest:2"):
        read_multiway_text(tmp_path, "eng", {"ita": "it"})


def test_text_dir_flores():
    d = SHARED / "flores101_devtest"
    if not d.exists():
        pytest.skip(f"{d} not present")
    rows = read_multiway_text(d, "eng", {"deu": "de", "jpn": "ja"})
    assert len(rows) == 1007 and all(r["en"] and r["ja"] for r in rows)


def test_missing_espeak_message(monkeypatch):
    from mmst.corpora.synthetic import tts

    monkeypatch.setattr(tts.shutil, "which", lambda name: None)
    with pytest.raises(tts.EspeakNotFoundError, match="Debian package `espeak-ng`"):
        tts.synthesize("hello", speaker_pool("train")[0])
