"""Write a synthetic English-speech multi-way corpus in MuST-C layout (thin CLI over mmst.corpora.synthetic).

Examples:
  mmst-synthesize-corpus --out RAW --tgt-langs de,es,fr,ja --grammar --difficulty easy \\
      --num-train 2000 --num-dev 200 --num-test 200 --heldout-voices --seed 1 --jobs 2
  mmst-synthesize-corpus --out RAW_FLORES --text-dir ../shared/data/flores101_devtest \\
      --src-file-code eng --tgt-file-codes deu:de,fra:fr,jpn:ja --num-dev 100 --num-test 200 --jobs 2
"""

from __future__ import annotations

import json
import sys
import time

from mmst.cli_help import ArgumentParser
from mmst.corpora.synthetic import synthesize_grammar_corpus, synthesize_text_corpus
from mmst.corpora.synthetic.grammar import LANGS, PRESETS
from mmst.features import KALDI_INT16_SCALE


def _pair(s: str) -> tuple[int, int] | tuple[float, float]:
    a, b = s.split(",")
    return (float(a), float(b)) if "." in s else (int(a), int(b))


def build_parser() -> ArgumentParser:
    """Command-line options (see ``--help``)."""
    p = ArgumentParser(prog="mmst-synthesize-corpus", description=__doc__)
    p.add_argument("--out", required=True, help="output RAW root (en-XX/data/<split>/... is created)")
    p.add_argument("--tgt-langs", default=None,
                   help=f"comma-separated target languages (grammar: subset of {','.join(LANGS[1:])}, default "
                        "de,es,fr,it,nl,pt,ja; text: filter of --tgt-file-codes, default all)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--grammar", action="store_true", help="use the built-in compositional grammar")
    src.add_argument("--text-dir", help="directory of line-aligned multi-way text files (<code> or <code>.*)")
    p.add_argument("--difficulty", default="easy", choices=sorted(PRESETS), help="grammar preset")
    p.add_argument("--num-content-words", type=int, default=None,
                   help="grammar: content lexemes (nouns + adjectives + verbs) to use (overrides preset)")
    p.add_deprecated_alias("--vocab-size", "--num-content-words")
    p.add_argument("--max-words", type=int, default=None, help="grammar: max English words per sentence")
    p.add_argument("--reorder-distance", type=int, default=None,
                   help="grammar: max English words between a verb and its clause end (overrides preset)")
    p.add_argument("--src-file-code", default="eng", help="text mode: file code of the English source (e.g. eng)")
    p.add_deprecated_alias("--src", "--src-file-code")
    p.add_argument("--tgt-file-codes", default=None,
                   help="text mode: target files as CODE:LANG pairs (file code, language code), e.g. deu:de,fra:fr,jpn:ja")
    p.add_deprecated_alias("--tgt", "--tgt-file-codes")
    p.add_argument("--num-train", type=int, default=None,
                   help="train segments (grammar default 2000; text default: the rest)")
    p.add_argument("--num-dev", type=int, default=None, help="dev segments (grammar default 200; text: --dev-ratio)")
    p.add_argument("--num-test", type=int, default=None,
                   help="tst-COMMON segments (grammar default 200; text: --test-ratio)")
    p.add_argument("--num-test-unseen", type=int, default=0,
                   help="grammar: segments of an extra tst-unseen split spoken by held-out voices (default 0 = no "
                        "such split); when > 0, train/dev/tst-COMMON use train voices only")
    p.add_argument("--dev-ratio", type=float, default=0.1, help="text mode: dev fraction when --num-dev is absent")
    p.add_argument("--test-ratio", type=float, default=0.1, help="text mode: test fraction when --num-test is absent")
    p.add_argument("--heldout-voices", action="store_true",
                   help="dev/tst-COMMON use espeak accents and variants never used in train (ignored with "
                        "--num-test-unseen, whose split is the held-out one)")
    p.add_argument("--segments-per-talk", type=_pair, default=(6, 12), help="min,max segments per talk (6,12)")
    p.add_argument("--pause-s", type=_pair, default=(0.3, 1.0), help="min,max pause between segments in s (0.3,1.0)")
    p.add_argument("--dither", type=float, default=None,
                   help="Gaussian dither std in 16-bit units (1.0 = one LSB, as in mmst-prep-multiway; 0 = off); "
                        "default 6.5536 = 2e-4 of full scale")
    p.add_argument("--seed", type=int, default=0, help="random seed (output is byte-identical for a seed)")
    p.add_argument("--jobs", type=int, default=1, help="synthesis processes")
    p.add_argument("--mustc-like-perturb", action="store_true",
                   help="rewrite the pairs so they disagree like real MuST-C releases (for prep_mustc_multiway.py "
                        "tests); see mmst/corpora/mustc_perturb.py")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for bad options)."""
    p = build_parser()
    a = p.parse_args(argv)

    common = dict(seed=a.seed, heldout_voices=a.heldout_voices, jobs=a.jobs,
                  segments_per_talk=a.segments_per_talk, pause_s=a.pause_s)
    if a.dither is not None and 0 < a.dither < 0.01:
        print(f"{p.prog}: warning: --dither {a.dither:g} is in 16-bit units (1.0 = one LSB); it used to be a "
              f"fraction of full scale, which is now --dither {a.dither * KALDI_INT16_SCALE:g}", file=sys.stderr)
    if a.dither is not None:  # the library takes the std in full-scale units
        common["dither"] = a.dither / KALDI_INT16_SCALE
    t0 = time.time()
    if a.grammar:
        langs = (a.tgt_langs or "de,es,fr,it,nl,pt,ja").split(",")
        summary = synthesize_grammar_corpus(
            a.out, langs, num_train=2000 if a.num_train is None else a.num_train,
            num_dev=200 if a.num_dev is None else a.num_dev, num_test=200 if a.num_test is None else a.num_test,
            num_test_unseen=a.num_test_unseen, difficulty=a.difficulty, vocab_size=a.num_content_words, max_words=a.max_words,
            reorder_distance=a.reorder_distance, **common)
    else:
        if not a.tgt_file_codes:
            p.error("--text-dir needs --tgt-file-codes CODE:LANG,...")
        if a.num_test_unseen:
            p.error("--num-test-unseen is for --grammar corpora only")
        tgt = dict(x.split(":") for x in a.tgt_file_codes.split(","))
        if a.tgt_langs:
            keep = set(a.tgt_langs.split(","))
            tgt = {c: lang for c, lang in tgt.items() if lang in keep}
        langs = list(tgt.values())
        summary = synthesize_text_corpus(a.out, a.text_dir, a.src_file_code, tgt, num_train=a.num_train, num_dev=a.num_dev,
                                         num_test=a.num_test, dev_ratio=a.dev_ratio, test_ratio=a.test_ratio,
                                         **common)
    if a.mustc_like_perturb:
        from mmst.corpora.mustc_perturb import perturb_mustc_like

        summary["mustc_like_perturb"] = perturb_mustc_like(a.out, langs, a.seed)
    summary["wall_s"] = round(time.time() - t0, 1)
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
