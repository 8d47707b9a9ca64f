"""Compositional English -> {de, es, fr, it, nl, pt, ja} grammar with exact translations.

The grammar samples an abstract sentence (clauses, noun phrases, prepositional phrases) and realises it
in every language with language-specific rules (see ``docs/data-and-corpora.md``):

* es/fr/it/pt: adjective after the noun (French ``grand/petit/jeune`` before it), gender agreement of
  articles and adjectives, article contraction (del/du/nel/no...), French/Italian elision (l'),
  Italian lo/il, Spanish personal ``a`` before human objects.
* de/nl: V2 main clauses (inversion after a fronted ``when``-clause), verb-final subordinate and relative
  clauses (finite verb after the whole object and all adverbials; perfect: participle + auxiliary), German
  case (nom/acc/dat/gen) on articles, weak adjective endings and weak nouns.
* ja: SOV with postpositions (は/が/を/で/と/の), relative clauses and possessors before the noun,
  subordinate clauses before the main clause (から, とき), polite main verbs, plain embedded verbs.
  Japanese is written in kana/kanji without spaces, ending in "。".

Sentences are lower-case except the first letter (and German nouns) and end in "." / "。".
Everything is deterministic given the seed (``random.Random``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from mmst.corpora.synthetic import lexicon

LANGS = ("en", "de", "nl", "es", "fr", "it", "pt", "ja")
"""Languages the grammar realises (``en`` is the source)."""

ANIMATE = "pa"


@dataclass(frozen=True)
class Noun:
    """One noun lexeme. ``forms[lang]`` = singular form; ``gender[lang]`` in m/f/n (nl: de/het)."""

    en: str
    forms: dict
    gender: dict
    cls: str
    de_obl: str
    de_gen: str


@dataclass(frozen=True)
class Adj:
    """One adjective lexeme. Romance ``forms[lang] = (masc, fem)``; ``fr_pre`` = French pre-nominal."""

    en: str
    forms: dict
    sel: str
    fr_pre: bool


@dataclass(frozen=True)
class Verb:
    """One verb lexeme: ``pres[lang]`` 3sg present, ``perf[lang]`` participle (pt: preterite),
    ``ja`` = (masu-stem, plain, plain past); ``obj`` = object classes ('' = intransitive)."""

    en: str
    pres: dict
    perf: dict
    ja: tuple
    obj: str


def _fem(lang: str, m: str) -> str:
    if lang == "fr":
        return m if m.endswith("e") else m + "e"
    return m[:-1] + "a" if m.endswith("o") else m


def _parse_nouns(text: str) -> list[Noun]:
    out = []
    for line in text.strip().splitlines():
        en, de, nl, es, fr, it, pt, ja, cls = line.split("|")
        g_de, de_all = de.split(":")
        de_parts = de_all.split("/")
        de_form = de_parts[0]
        de_obl = de_parts[1] if len(de_parts) > 1 else de_form
        if len(de_parts) > 2:
            de_gen = de_parts[2]
        elif g_de == "f":
            de_gen = de_form
        else:
            de_gen = de_form + ("es" if de_form[-1] in "sßxz" else "s")
        forms, gender = {"en": en, "de": de_form, "ja": ja}, {"de": g_de}
        for lang, v in (("nl", nl), ("es", es), ("fr", fr), ("it", it), ("pt", pt)):
            g, f = v.split(":")
            forms[lang], gender[lang] = f, g
        out.append(Noun(en, forms, gender, cls, de_obl, de_gen))
    return out


def _parse_adjs(text: str) -> list[Adj]:
    out = []
    for line in text.strip().splitlines():
        en, de, nl, es, fr, it, pt, ja, sel = line.split("|")
        forms = {"en": en, "de": de, "nl": nl, "ja": ja}
        fr_pre = fr.startswith("^")
        for lang, v in (("es", es), ("fr", fr.lstrip("^")), ("it", it), ("pt", pt)):
            m, f = v.split("/") if "/" in v else (v, _fem(lang, v))
            forms[lang] = (m, f)
        out.append(Adj(en, forms, sel, fr_pre))
    return out


def _parse_verbs(text: str) -> list[Verb]:
    out = []
    for line in text.strip().splitlines():
        p = line.split("|")
        pres = {"en": p[0], "de": p[2], "nl": p[4], "es": p[6], "fr": p[8], "it": p[10], "pt": p[12]}
        perf = {"en": p[1], "de": p[3], "nl": p[5], "es": p[7], "fr": p[9], "it": p[11], "pt": p[13]}
        out.append(Verb(p[0], pres, perf, (p[14], p[15], p[16]), "" if p[17] == "-" else p[17]))
    return out


NOUNS = _parse_nouns(lexicon.NOUNS)
ADJECTIVES = _parse_adjs(lexicon.ADJECTIVES)
VERBS = _parse_verbs(lexicon.VERBS)
SPEECH_VERBS = _parse_verbs(lexicon.SPEECH_VERBS)


# ----------------------------------------------------------------------------- abstract syntax
@dataclass
class NP:
    """Definite singular noun phrase: noun, optional adjective, optional modifier
    (``("of", NP)`` possessor or ``("in", NP)`` location) and optional subject relative clause."""

    noun: Noun
    adj: Adj | None = None
    mod: tuple | None = None
    rel: Clause | None = None


@dataclass
class Clause:
    """Clause: ``subj`` (None for the gap of a relative clause), verb, object NP, PPs
    (list of (``in``|``with``|``next``, NP)), tense ``pres`` | ``perf``."""

    subj: NP | None
    verb: Verb
    obj: NP | None = None
    pps: list = field(default_factory=list)
    tense: str = "pres"


@dataclass
class Sentence:
    """``kind``: ``simple`` (main), ``that`` (main = subj + speech verb; sub = complement),
    ``because`` (main because sub), ``when`` (when sub, main)."""

    kind: str
    main: Clause
    sub: Clause | None = None


# ----------------------------------------------------------------------------- difficulty
@dataclass(frozen=True)
class Difficulty:
    """Difficulty knobs.

    vocab_size: number of content lexemes (nouns + adjectives + verbs) used; None = all (> 200).
    max_words: maximum English words per sentence.
    reorder_distance: maximum English words between a verb and the end of its clause (object + PPs),
        i.e. how far the de/nl verb-final and ja SOV verb moves.
    kinds: sentence-kind weights (simple/that/because/when); p_*: sampling probabilities.
    """

    vocab_size: int | None
    max_words: int
    reorder_distance: int
    kinds: tuple = (("simple", 1.0),)
    p_adj: float = 0.4
    p_mod: float = 0.0
    p_rel: float = 0.0
    p_pp: float = 0.3
    max_pps: int = 1
    p_perfect: float = 0.0
    p_intransitive: float = 0.1
    min_words: int = 0


PRESETS = {
    "easy": Difficulty(vocab_size=40, max_words=8, reorder_distance=4),
    "medium": Difficulty(vocab_size=120, max_words=14, reorder_distance=8,
                         kinds=(("simple", 0.4), ("that", 0.3), ("because", 0.2), ("when", 0.1)),
                         p_adj=0.5, p_mod=0.2, p_rel=0.15, p_pp=0.4, max_pps=1, p_perfect=0.3),
    "hard": Difficulty(vocab_size=None, max_words=25, reorder_distance=16,
                       kinds=(("simple", 0.15), ("that", 0.4), ("because", 0.3), ("when", 0.15)),
                       p_adj=0.6, p_mod=0.4, p_rel=0.35, p_pp=0.6, max_pps=2, p_perfect=0.4,
                       p_intransitive=0.08, min_words=8),
}
"""Named presets. ``easy``: ~2-3 s sentences, ~40 lexemes, SVO + adjective/PP (ja SOV, Romance
adjective order). ``hard``: all lexemes, up to 25 words, complement/causal/temporal subordinate clauses,
relative clauses, possessors, perfect tense (de/nl participle at clause end)."""


class Grammar:
    """Sampler of parallel sentences.

    ``Grammar(difficulty="hard", seed=0, vocab_size=None, max_words=None, reorder_distance=None)``;
    ``sample() -> dict[lang, str]`` for all of ``LANGS``. Overrides replace the preset's knobs.
    Raises ValueError on an unknown preset.
    """

    def __init__(self, difficulty: str | Difficulty = "easy", seed: int | str = 0, vocab_size: int | None = None,
                 max_words: int | None = None, reorder_distance: int | None = None):
        if isinstance(difficulty, str):
            if difficulty not in PRESETS:
                raise ValueError(f"unknown difficulty {difficulty!r}; choose from {sorted(PRESETS)}")
            difficulty = PRESETS[difficulty]
        kw = dict(difficulty.__dict__)
        if vocab_size is not None:
            kw["vocab_size"] = vocab_size
        if max_words is not None:
            kw["max_words"] = max_words
            kw["min_words"] = min(kw["min_words"], max_words // 2)
        if reorder_distance is not None:
            kw["reorder_distance"] = reorder_distance
        self.cfg = Difficulty(**kw)
        self.rng = random.Random(seed)
        self._select_vocab()

    def _select_vocab(self) -> None:
        total = len(NOUNS) + len(ADJECTIVES) + len(VERBS) + len(SPEECH_VERBS)
        frac = 1.0 if self.cfg.vocab_size is None else min(1.0, self.cfg.vocab_size / total)

        def take(items, minimum=2):
            return items[: max(minimum, math.ceil(frac * len(items)))]

        self.nouns = {c: take([n for n in NOUNS if n.cls == c]) for c in "paorfdl"}
        self.adjs = take(ADJECTIVES)
        avail = "".join(c for c in "paorfdl")
        trans = [v for v in VERBS if v.obj and any(c in avail for c in v.obj)]
        self.verbs = take(trans)
        self.intrans = take([v for v in VERBS if not v.obj])
        self.speech = take(SPEECH_VERBS, 1)

    def vocabulary(self, lang: str = "en") -> set[str]:
        """Word types (lower-cased, whitespace-split) the selected lexicon can produce in ``lang``
        (content words only for ja, which has no spaces)."""
        words = set()
        for ns in self.nouns.values():
            for n in ns:
                words.update(n.forms[lang].lower().split())
        for a in self.adjs:
            f = a.forms[lang]
            for x in f if isinstance(f, tuple) else (f,):
                words.update(x.lower().split())
        for v in self.verbs + self.intrans + self.speech:
            if lang == "ja":
                words.update(v.ja)
            else:
                words.update(v.pres[lang].lower().split())
                words.update(v.perf[lang].lower().split())
        return words

    @property
    def n_lexemes(self) -> int:
        """Number of content lexemes in use (nouns + adjectives + verbs)."""
        return sum(len(v) for v in self.nouns.values()) + len(self.adjs) + len(self.verbs) + len(
            self.intrans) + len(self.speech)

    # ------------------------------------------------------------------ sampling
    def _noun(self, classes: str) -> Noun:
        pool = [n for c in classes for n in self.nouns.get(c, [])]
        return self.rng.choice(pool)

    def _np(self, classes: str, depth: int) -> NP:
        cfg, r = self.cfg, self.rng
        n = self._noun(classes)
        np_ = NP(n)
        if r.random() < cfg.p_adj:
            ok = [a for a in self.adjs if a.sel == "*" or (n.cls != "l" and (a.sel == "h") == (n.cls in ANIMATE))]
            np_.adj = r.choice(ok)
        if depth == 0 and r.random() < cfg.p_mod:
            if n.cls in "pl" or r.random() < 0.3:
                np_.mod = ("in", self._np("l", depth + 1)) if n.cls != "l" else ("of", self._np("p", depth + 1))
            else:
                np_.mod = ("of", self._np("pa", depth + 1))
        if depth == 0 and n.cls in ANIMATE and r.random() < cfg.p_rel:
            np_.rel = self._clause(depth + 1, gap=True)
        return np_

    def _clause(self, depth: int, gap: bool = False, tense: str | None = None) -> Clause:
        cfg, r = self.cfg, self.rng
        subj = None if gap else self._np(ANIMATE, depth)
        if r.random() < cfg.p_intransitive:
            c = Clause(subj, r.choice(self.intrans))
        else:
            v = r.choice(self.verbs)
            c = Clause(subj, v, self._np(v.obj, depth))
        kinds = ["in", "with", "next"]
        r.shuffle(kinds)
        for k in kinds[: cfg.max_pps]:
            if r.random() < cfg.p_pp:
                cls = {"in": "l", "with": ANIMATE, "next": "lo"}[k]
                c.pps.append((k, self._np(cls, depth + 1)))
        c.tense = tense or ("perf" if r.random() < cfg.p_perfect else "pres")
        return c

    def _sentence(self) -> Sentence:
        kinds, weights = zip(*self.cfg.kinds)
        kind = self.rng.choices(kinds, weights)[0]
        if kind == "simple":
            return Sentence(kind, self._clause(0))
        if kind == "that":
            tense = "perf" if self.rng.random() < self.cfg.p_perfect else "pres"
            main = Clause(self._np(ANIMATE, 1), self.rng.choice(self.speech), tense=tense)
            return Sentence(kind, main, self._clause(0))
        if kind == "because":
            return Sentence(kind, self._clause(0), self._clause(0))
        return Sentence(kind, self._clause(0, tense="pres"), self._clause(0, tense="pres"))

    def sample_tree(self) -> Sentence:
        """Sample one abstract sentence satisfying max_words / min_words / reorder_distance."""
        best = None
        for _ in range(200):
            s = self._sentence()
            n = len(realize(s, "en").split())
            if n <= self.cfg.max_words and _reorder(s) <= self.cfg.reorder_distance:
                if n >= self.cfg.min_words:
                    return s
                if best is None:
                    best = s
        if best is None:
            raise RuntimeError("grammar could not satisfy max_words/reorder_distance; relax them")
        return best

    def sample(self) -> dict[str, str]:
        """One sentence with its exact translations: ``{lang: text}`` for every lang in ``LANGS``."""
        s = self.sample_tree()
        return {lang: realize(s, lang) for lang in LANGS}


def _np_words(np_: NP | None) -> int:
    return 0 if np_ is None else len(_EN.np(np_))


def _clause_tail(c: Clause) -> int:
    return _np_words(c.obj) + sum(len(_EN.pp(k, x)) for k, x in c.pps)


def _reorder(s: Sentence) -> int:
    """Longest English span (words) between a clause's verb and the clause end."""
    cl = [s.main] + ([s.sub] if s.sub else [])
    return max(_clause_tail(c) for c in cl)


# ----------------------------------------------------------------------------- realizers
def _join(tokens: list[str]) -> str:
    out = ""
    for t in tokens:
        if t in (",", "."):
            out = out.rstrip(",") + t
        elif not out or out.endswith("'"):
            out += t
        else:
            out += " " + t
    out = out.replace(",.", ".")
    return out[0].upper() + out[1:]


class _English:
    def np(self, x: NP) -> list[str]:
        t = ["the"] + ([x.adj.en] if x.adj else []) + [x.noun.en]
        if x.mod:
            t += [x.mod[0]] + self.np(x.mod[1])
        if x.rel:
            t += ["who" if x.noun.cls == "p" else "that"] + self.vp(x.rel)
        return t

    def pp(self, k: str, x: NP) -> list[str]:
        return {"in": ["in"], "with": ["with"], "next": ["next", "to"]}[k] + self.np(x)

    def vp(self, c: Clause) -> list[str]:
        t = [c.verb.pres["en"]] if c.tense == "pres" else ["has", c.verb.perf["en"]]
        if c.obj:
            t += self.np(c.obj)
        for k, x in c.pps:
            t += self.pp(k, x)
        return t

    def clause(self, c: Clause) -> list[str]:
        return self.np(c.subj) + self.vp(c)

    def sentence(self, s: Sentence) -> list[str]:
        if s.kind == "simple":
            return self.clause(s.main) + ["."]
        if s.kind == "that":
            return self.clause(s.main) + ["that"] + self.clause(s.sub) + ["."]
        if s.kind == "because":
            return self.clause(s.main) + ["because"] + self.clause(s.sub) + ["."]
        return ["when"] + self.clause(s.sub) + [","] + self.clause(s.main) + ["."]


_DE_ART = {"nom": {"m": "der", "f": "die", "n": "das"}, "acc": {"m": "den", "f": "die", "n": "das"},
           "dat": {"m": "dem", "f": "der", "n": "dem"}, "gen": {"m": "des", "f": "der", "n": "des"}}


class _German:
    def np(self, x: NP, case: str) -> list[str]:
        g = x.noun.gender["de"]
        t = [_DE_ART[case][g]]
        if x.adj:
            weak_e = case == "nom" or (case == "acc" and g in "fn")
            t.append(x.adj.forms["de"] + ("e" if weak_e else "en"))
        if case == "gen":
            t.append(x.noun.de_gen)
        else:
            t.append(x.noun.forms["de"] if case == "nom" else x.noun.de_obl)
        if x.mod:
            t += self.np(x.mod[1], "gen") if x.mod[0] == "of" else self.pp("in", x.mod[1])
        if x.rel:
            t += [",", _DE_ART["nom"][g]] + self.clause(x.rel, "sub") + [","]
        return t

    def pp(self, k: str, x: NP) -> list[str]:
        t = self.np(x, "dat")
        if k == "in" and t[0] == "dem":
            return ["im"] + t[1:]
        return [{"in": "in", "with": "mit", "next": "neben"}[k]] + t

    def clause(self, c: Clause, mode: str) -> list[str]:
        """mode: main (V2), inv (verb before subject), sub (verb-final; subject omitted if None)."""
        fin = c.verb.pres["de"] if c.tense == "pres" else "hat"
        part = [c.verb.perf["de"]] if c.tense == "perf" else []
        subj = self.np(c.subj, "nom") if c.subj else []
        rest = self.np(c.obj, "acc") if c.obj else []
        for k, x in c.pps:
            rest += self.pp(k, x)
        if mode == "main":
            return subj + [fin] + rest + part
        if mode == "inv":
            return [fin] + subj + rest + part
        return subj + rest + part + [fin]

    def sentence(self, s: Sentence) -> list[str]:
        if s.kind == "simple":
            return self.clause(s.main, "main") + ["."]
        if s.kind == "that":
            return self.clause(s.main, "main") + [",", "dass"] + self.clause(s.sub, "sub") + ["."]
        if s.kind == "because":
            return self.clause(s.main, "main") + [",", "weil"] + self.clause(s.sub, "sub") + ["."]
        return ["wenn"] + self.clause(s.sub, "sub") + [","] + self.clause(s.main, "inv") + ["."]


class _Dutch:
    def np(self, x: NP) -> list[str]:
        het = x.noun.gender["nl"] == "het"
        t = ["het" if het else "de"] + ([x.adj.forms["nl"]] if x.adj else []) + [x.noun.forms["nl"]]
        if x.mod:
            t += (["van"] + self.np(x.mod[1])) if x.mod[0] == "of" else self.pp("in", x.mod[1])
        if x.rel:
            t += ["dat" if het else "die"] + self.clause(x.rel, "sub")
        return t

    def pp(self, k: str, x: NP) -> list[str]:
        return [{"in": "in", "with": "met", "next": "naast"}[k]] + self.np(x)

    def clause(self, c: Clause, mode: str) -> list[str]:
        fin = c.verb.pres["nl"] if c.tense == "pres" else "heeft"
        part = [c.verb.perf["nl"]] if c.tense == "perf" else []
        subj = self.np(c.subj) if c.subj else []
        rest = self.np(c.obj) if c.obj else []
        for k, x in c.pps:
            rest += self.pp(k, x)
        if mode == "main":
            return subj + [fin] + rest + part
        if mode == "inv":
            return [fin] + subj + rest + part
        return subj + rest + [fin] + part

    def sentence(self, s: Sentence) -> list[str]:
        if s.kind == "simple":
            return self.clause(s.main, "main") + ["."]
        if s.kind == "that":
            return self.clause(s.main, "main") + ["dat"] + self.clause(s.sub, "sub") + ["."]
        if s.kind == "because":
            return self.clause(s.main, "main") + ["omdat"] + self.clause(s.sub, "sub") + ["."]
        return ["wanneer"] + self.clause(s.sub, "sub") + [","] + self.clause(s.main, "inv") + ["."]


_VOWELS = "aeiouàâäéèêëîïôöùûüœæáíóúAEIOUÀÂÉÈÊÎÔÛŒ"
_FR_H_MUET = {"homme", "hôpital", "hôtel", "histoire", "horloge", "heure", "herbe"}


def _fr_vowel(word: str) -> bool:
    return word[0] in _VOWELS or word.lower() in _FR_H_MUET


_ROMANCE = {
    "es": dict(preps={"in": ["en"], "with": ["con"], "next": ["al", "lado", "de"], "of": ["de"]},
               contr={("de", "el"): "del", ("a", "el"): "al"}, rel="que", aux="ha",
               that="que", because=["porque"], when="cuando"),
    "fr": dict(preps={"in": ["dans"], "with": ["avec"], "next": ["à", "côté", "de"], "of": ["de"]},
               contr={("de", "le"): "du", ("à", "le"): "au"}, rel="qui", aux="a",
               that="que", because=["parce", "que"], when="quand"),
    "it": dict(preps={"in": ["in"], "with": ["con"], "next": ["accanto", "a"], "of": ["di"]},
               contr={(p, a): c + s for p, c in (("di", "de"), ("in", "ne"), ("a", "a"))
                      for a, s in (("il", "l"), ("lo", "llo"), ("l'", "ll'"), ("la", "lla"))},
               rel="che", aux="ha", that="che", because=["perché"], when="quando"),
    "pt": dict(preps={"in": ["em"], "with": ["com"], "next": ["ao", "lado", "de"], "of": ["de"]},
               contr={("de", "o"): "do", ("de", "a"): "da", ("em", "o"): "no", ("em", "a"): "na",
                      ("a", "o"): "ao", ("a", "a"): "à"},
               rel="que", aux=None, that="que", because=["porque"], when="quando"),
}


class _Romance:
    def __init__(self, lang: str):
        self.lang = lang
        self.t = _ROMANCE[lang]

    def article(self, g: str, nxt: str) -> str:
        lang = self.lang
        if lang == "es":
            return "el" if g == "m" else "la"
        if lang == "pt":
            return "o" if g == "m" else "a"
        if lang == "fr":
            return "l'" if _fr_vowel(nxt) else ("le" if g == "m" else "la")
        if nxt[0] in _VOWELS:
            return "l'"
        if g == "f":
            return "la"
        lo = nxt[0] in "zxy" or nxt[:2] in ("gn", "ps") or (nxt[0] == "s" and nxt[1] not in _VOWELS)
        return "lo" if lo else "il"

    def np(self, x: NP) -> list[str]:
        g = x.noun.gender[self.lang]
        adj = x.adj.forms[self.lang][0 if g == "m" else 1] if x.adj else None
        pre = adj is not None and self.lang == "fr" and x.adj.fr_pre
        body = ([adj] if pre else []) + [x.noun.forms[self.lang]] + ([adj] if adj and not pre else [])
        t = [self.article(g, body[0])] + body
        if x.mod:
            t += self.pp(x.mod[0], x.mod[1])
        if x.rel:
            t += [self.t["rel"]] + self.vp(x.rel)
        return t

    def pp(self, k: str, x: NP) -> list[str]:
        prep = list(self.t["preps"][k]) if k in self.t["preps"] else [k]
        t = self.np(x)
        key = (prep[-1], t[0])
        if key in self.t["contr"]:
            return prep[:-1] + [self.t["contr"][key]] + t[1:]
        return prep + t

    def vp(self, c: Clause) -> list[str]:
        v = c.verb
        if c.tense == "pres":
            t = [v.pres[self.lang]]
        else:
            t = ([self.t["aux"]] if self.t["aux"] else []) + [v.perf[self.lang]]
        if c.obj:
            t += self.pp("a", c.obj) if (self.lang == "es" and c.obj.noun.cls == "p") else self.np(c.obj)
        for k, x in c.pps:
            t += self.pp(k, x)
        return t

    def clause(self, c: Clause) -> list[str]:
        return self.np(c.subj) + self.vp(c)

    def _conj(self, words: list[str], nxt: str) -> list[str]:
        if self.lang == "fr" and words[-1] == "que" and _fr_vowel(nxt):
            return words[:-1] + ["qu'"]
        return words

    def sentence(self, s: Sentence) -> list[str]:
        if s.kind == "simple":
            return self.clause(s.main) + ["."]
        if s.kind in ("that", "because"):
            sub = self.clause(s.sub)
            conj = [self.t["that"]] if s.kind == "that" else list(self.t["because"])
            return self.clause(s.main) + self._conj(conj, sub[0]) + sub + ["."]
        return [self.t["when"]] + self.clause(s.sub) + [","] + self.clause(s.main) + ["."]


class _Japanese:
    def np(self, x: NP) -> str:
        t = self.clause(x.rel, "rel") if x.rel else ""
        if x.mod:
            t += self.np(x.mod[1]) + "の"
        if x.adj:
            t += x.adj.forms["ja"]
        return t + x.noun.forms["ja"]

    def clause(self, c: Clause, mode: str) -> str:
        """mode: main (topic は, polite verb), sub (が, plain verb), rel (no subject, plain verb)."""
        t = ""
        if mode != "rel":
            t += self.np(c.subj) + ("は" if mode == "main" else "が")
        for k, x in c.pps:
            t += self.np(x) + {"in": "で", "with": "と", "next": "の隣で"}[k]
        if c.obj:
            t += self.np(c.obj) + "を"
        stem, plain, past = c.verb.ja
        if mode == "main":
            t += stem + ("ます" if c.tense == "pres" else "ました")
        else:
            t += plain if c.tense == "pres" else past
        return t

    def sentence(self, s: Sentence) -> str:
        if s.kind == "simple":
            return self.clause(s.main, "main") + "。"
        if s.kind == "that":
            m = s.main
            stem = m.verb.ja[0]
            verb = stem + ("ます" if m.tense == "pres" else "ました")
            return self.np(m.subj) + "は" + self.clause(s.sub, "sub") + "と" + verb + "。"
        conj = "から" if s.kind == "because" else "とき"
        return self.clause(s.sub, "sub") + conj + "、" + self.clause(s.main, "main") + "。"


_EN = _English()
_REALIZERS = {"en": _EN, "de": _German(), "nl": _Dutch(), "es": _Romance("es"), "fr": _Romance("fr"),
              "it": _Romance("it"), "pt": _Romance("pt"), "ja": _Japanese()}


def realize(s: Sentence, lang: str) -> str:
    """Realise abstract sentence ``s`` in ``lang`` (one of ``LANGS``). Raises KeyError otherwise."""
    out = _REALIZERS[lang].sentence(s)
    return out if lang == "ja" else _join(out)
