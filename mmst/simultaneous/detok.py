"""Incremental detokenisation of SentencePiece pieces into words with delays.

A word is complete when the next piece starts a new word (``▁`` prefix) or the stream ends; its delay
is the source time (ms of audio consumed) when its LAST piece was written, and ``compute_ms`` the
translator's cumulative compute time at that moment (for computation-aware latency). For languages
written without spaces (``ja``, ``zh``: latency unit = characters) every piece is emitted at once as
the characters it adds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Languages detokenised per character (no word boundaries; SimulEval latency unit = char).
CHAR_LANGS = ("ja", "zh")
SPM_SPACE = "\u2581"


@dataclass
class Word:
    """A detokenised output unit.

    Attributes:
        text: the word (or, for character languages, the new characters; no spaces).
        delay_ms: source audio consumed (ms) when its last piece was written.
        compute_ms: cumulative translator compute time (ms) of this utterance at that moment.
        tokens: its piece ids.
    """

    text: str
    delay_ms: float
    compute_ms: float
    tokens: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        return self.text


class Detokenizer:
    """Turns a stream of piece ids into completed :class:`Word` objects.

    Args:
        vocab: object with ``id_to_piece(i)`` and ``decode(ids)`` (``mmst.data.vocab.Vocab``);
            ``decode`` must drop special ids.
        char_level: emit characters as soon as written (``ja``/``zh``) instead of whole words.
    """

    def __init__(self, vocab, char_level: bool = False) -> None:
        self.vocab = vocab
        self.char_level = char_level
        self.reset()

    def reset(self) -> None:
        """Forget the current utterance (or sentence: a character language decodes every piece since the last
        reset at each new piece, so a stream that never resets would cost more per piece as it goes on)."""
        self._buf: list[int] = []
        self._buf_delay = 0.0
        self._buf_compute = 0.0
        self._all: list[int] = []
        self._emitted_text = ""

    def push(self, token: int, delay_ms: float, compute_ms: float) -> list[Word]:
        """Add one written piece; returns the words it completed (possibly empty)."""
        if self.char_level:
            self._all.append(int(token))
            text = self.vocab.decode(self._all).replace(" ", "")
            if text.endswith("\ufffd"):  # incomplete byte-fallback sequence: wait
                return []
            new = text[len(self._emitted_text) :] if text.startswith(self._emitted_text) else text
            self._emitted_text = text
            return [Word(new, delay_ms, compute_ms, [int(token)])] if new else []
        out: list[Word] = []
        piece = self.vocab.id_to_piece(int(token))
        if piece.startswith(SPM_SPACE) and self._buf:
            out = self._emit()
        self._buf.append(int(token))
        self._buf_delay, self._buf_compute = delay_ms, compute_ms
        return out

    def _emit(self) -> list[Word]:
        text = self.vocab.decode(self._buf).strip()
        words = [Word(t, self._buf_delay, self._buf_compute, list(self._buf)) for t in text.split()]
        self._buf = []
        return words

    def flush(self) -> list[Word]:
        """End of stream: return the last (incomplete-so-far) word, if any."""
        if self.char_level:
            return []
        return self._emit() if self._buf else []
