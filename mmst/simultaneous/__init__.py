"""Simultaneous (streaming) inference: read/write policies (wait-k, AlignAtt, EDAtt, local agreement,
hold-n, CTC wait-k), incremental encoding, joint multilingual decoding with one policy per language,
detokenisation with delays, long-form streaming with VAD segmentation, and batch greedy / beam decoders."""

from .detok import CHAR_LANGS, Detokenizer, Word
from .incremental import StreamingFrontEnd
from .joint import StreamingTranslator
from .longform import LongFormTranslator, LongFormWord, OracleSegmenter, SegmentEnd
from .policies import (
    AlignAttPolicy,
    CTCWaitKPolicy,
    EDAttPolicy,
    HoldNPolicy,
    LocalAgreementPolicy,
    Policy,
    PolicyState,
    WaitKPolicy,
)
from .policy_spec import POLICIES, PolicySpec, build_policy, make_spec, parse_per_lang, policy_sweep
from .search import beam_search, decode_offline, greedy_waitk_decode, max_lengths
from .vad import StreamingVad, VadEvent

__all__ = [
    "CHAR_LANGS",
    "POLICIES",
    "AlignAttPolicy",
    "CTCWaitKPolicy",
    "Detokenizer",
    "EDAttPolicy",
    "HoldNPolicy",
    "LocalAgreementPolicy",
    "LongFormTranslator",
    "LongFormWord",
    "OracleSegmenter",
    "Policy",
    "PolicySpec",
    "PolicyState",
    "SegmentEnd",
    "StreamingFrontEnd",
    "StreamingTranslator",
    "StreamingVad",
    "VadEvent",
    "WaitKPolicy",
    "Word",
    "beam_search",
    "build_policy",
    "decode_offline",
    "greedy_waitk_decode",
    "make_spec",
    "max_lengths",
    "parse_per_lang",
    "policy_sweep",
]
