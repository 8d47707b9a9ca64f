"""Synthetic multi-way speech-translation corpora: grammar (text), espeak-ng TTS, MuST-C layout writer."""

from mmst.corpora.synthetic.grammar import LANGS, PRESETS, Difficulty, Grammar, realize
from mmst.corpora.synthetic.tts import EspeakNotFoundError, Speaker, speaker_pool, synthesize
from mmst.corpora.synthetic.writer import (
    CorpusConfigError,
    grammar_segments,
    read_multiway_text,
    synthesize_corpus,
    synthesize_grammar_corpus,
    synthesize_text_corpus,
)

__all__ = [
    "LANGS", "PRESETS", "Difficulty", "Grammar", "realize", "EspeakNotFoundError", "Speaker", "speaker_pool",
    "synthesize", "CorpusConfigError", "grammar_segments", "read_multiway_text", "synthesize_corpus",
    "synthesize_grammar_corpus", "synthesize_text_corpus",
]
