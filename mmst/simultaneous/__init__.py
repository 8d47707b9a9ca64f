"""Simultaneous (streaming) inference: wait-k over fixed pre-decision chunks, incremental encoding,
joint multilingual decoding, detokenisation with delays, and batch greedy / beam decoders."""

from .detok import CHAR_LANGS, Detokenizer, Word
from .incremental import StreamingFrontEnd
from .joint import StreamingTranslator
from .policies import WaitKPolicy
from .search import beam_search, decode_offline, greedy_waitk_decode, max_lengths

__all__ = [
    "CHAR_LANGS",
    "Detokenizer",
    "StreamingFrontEnd",
    "StreamingTranslator",
    "WaitKPolicy",
    "Word",
    "beam_search",
    "decode_offline",
    "greedy_waitk_decode",
    "max_lengths",
]
