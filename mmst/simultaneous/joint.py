"""Joint multilingual streaming translation: one encoder pass feeds every target language in lockstep.

:class:`StreamingTranslator` = :class:`~mmst.simultaneous.incremental.StreamingFrontEnd` (online fbank,
CMVN, incremental or re-encoding encoder) + wait-k (:class:`~mmst.simultaneous.policies.WaitKPolicy`)
+ joint incremental decoding (separate model: N decoders; unified model: the N ``<lang:xx>``-prefixed
streams batched together, batch dim = languages, sharing the encoder's cross-attention keys/values)
+ :class:`~mmst.simultaneous.detok.Detokenizer` per language.

Write rule (Ma et al. 2019 wait-k over fixed pre-decision chunks, Ma et al. 2020): token i (1-based) is
written as soon as ``k + i - 1`` chunks have been read (or the source is finished) and attends the
states of chunks ``1..min(k+i-1, n_chunks)``; so with a chunk-causal encoder the written tokens are
exactly those of :func:`mmst.simultaneous.search.greedy_waitk_decode` (tested). Once the source is
finished every language writes until EOS or ``floor(max_len_a * S + max_len_b)`` tokens (S = encoder
states). A language that wrote EOS stops; the others continue. A source shorter than k chunks is
translated in full when it finishes.

Async unified models: language j (0-based in ``async_order``) runs at lag
``k + j * async_delta``; elements are written in (t, j) emission order into one shared cache, so a
lagging language reads the words the leading ones already wrote; once the source is finished the
languages continue in that order (round-robin; a language whose lag exceeds the source joins at its
virtual step) until each wrote EOS or reached the length cap. Equal to the masked batch decoder.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from mmst.models.encoder import EncoderOut

from .detok import CHAR_LANGS, Detokenizer, Word
from .incremental import StreamingFrontEnd
from .policies import WaitKPolicy
from .search import banned_ids, beam_search, constrain_logits


class StreamingTranslator:
    """Streaming speech translation into one or several target languages at once.

    Args:
        model: an ``MMSTModel`` (set to eval mode here).
        vocabs: target vocab (``mmst.data.vocab.Vocab``) shared by all languages, or ``{lang: Vocab}``,
            or None (tokens only; :meth:`accept_audio` then returns no words).
        tgt_langs: languages to decode (default: all of the model's).
        waitk: lagging k in pre-decision chunks, or None for offline (read all, then decode).
        cmvn: global CMVN callable for fbank ``(n, 80)`` (``mmst.features.GlobalCMVN``) or None.
        max_len_a, max_len_b: length cap ``floor(a * S + b)`` tokens (EOS excluded), S = encoder states.
        beam: beam size for offline decoding (waitk=None); streaming decoding is greedy.
        lenpen: length penalty of the offline beam search.
        encoder_mode: ``"auto"``, ``"incremental"`` or ``"reencode"`` (see :mod:`.incremental`).
        min_len: suppress EOS before this many tokens (for cost benchmarks of untrained models).
        char_langs: languages detokenised per character.

    Raises:
        ValueError: unknown language, bad k, bad encoder mode, or a vocab missing for a language.

    Usage::

        tr = StreamingTranslator(model, vocab, ["de", "es"], waitk=3, cmvn=cmvn)
        for seg, last in segments:                 # float32 16 kHz, e.g. 320 ms each
            words = tr.accept_audio(seg, finished=last)   # {lang: [Word, ...]} completed now
        tr.reset()                                 # next utterance
    """

    def __init__(
        self,
        model,
        vocabs=None,
        tgt_langs: list[str] | None = None,
        waitk: int | None = 3,
        cmvn=None,
        max_len_a: float = 0.0,
        max_len_b: int = 200,
        beam: int = 1,
        lenpen: float = 1.0,
        encoder_mode: str = "auto",
        min_len: int = 0,
        char_langs: tuple[str, ...] = CHAR_LANGS,
    ) -> None:
        self.model = model.eval()
        self.tgt_langs = list(tgt_langs) if tgt_langs else list(model.tgt_langs)
        model.check_langs(self.tgt_langs)
        self.policy = WaitKPolicy(waitk, model.pre_decision_ratio)
        if vocabs is not None and not isinstance(vocabs, dict):
            vocabs = {lang: vocabs for lang in self.tgt_langs}
        if vocabs is not None:
            missing = [lang for lang in self.tgt_langs if lang not in vocabs]
            if missing:
                raise ValueError(f"no target vocab for {missing}")
        self.vocabs = vocabs
        self.max_len_a, self.max_len_b = float(max_len_a), int(max_len_b)
        self.beam, self.lenpen, self.min_len = int(beam), float(lenpen), int(min_len)
        self._banned = banned_ids(model, next(model.parameters()).device)  # pad, bos, <lang:xx>
        self.char_langs = tuple(char_langs)
        self.frontend = StreamingFrontEnd(model, cmvn, encoder_mode)
        self.reset()

    @property
    def waitk(self) -> int | None:
        """The lagging k (None = offline)."""
        return self.policy.k

    def to(self, device) -> StreamingTranslator:
        """Move the model to ``device`` and reset."""
        self.model.to(device)
        self.reset()
        return self

    def reset(self) -> None:
        """Forget the current utterance (call between utterances; no state leaks)."""
        self.frontend.reset()
        self.state = self.model.init_decoder_state(self.tgt_langs, 1)
        self._version = self.frontend.version
        self.tokens: dict[str, list[int]] = {lang: [] for lang in self.tgt_langs}
        self.token_delays: dict[str, list[float]] = {lang: [] for lang in self.tgt_langs}
        self.done = {lang: False for lang in self.tgt_langs}
        self._last = {lang: self.model.start_token_id(lang) for lang in self.tgt_langs}
        self._step = 0
        self._pos = {lang: 0 for lang in self.tgt_langs}  # async: elements fed per language
        self._compute_s = 0.0
        self._closed = False
        self.detok = None
        if self.vocabs is not None:
            self.detok = {
                lang: Detokenizer(self.vocabs[lang], char_level=lang in self.char_langs) for lang in self.tgt_langs
            }

    # ------------------------------------------------------------------ main entry
    def accept_audio(self, samples: np.ndarray, finished: bool = False) -> dict[str, list[Word]]:
        """Consume new audio and write what the policy allows.

        Args:
            samples: float32 ``(n,)`` in [-1, 1], 16 kHz (n may be 0).
            finished: True with the last samples: everything left is written (until EOS / max length).

        Returns:
            ``{lang: [Word, ...]}`` words COMPLETED by this call: a word ends when the next piece starts
            a new word, when its language writes EOS, or when the source is finished (then all the
            remaining ones).

        Raises:
            ValueError: audio after the source finished (call :meth:`reset`).
        """
        t0 = time.perf_counter()
        self.frontend.accept_audio(samples, finished)
        new_tokens = self._write(t0)
        words: dict[str, list[Word]] = {lang: [] for lang in self.tgt_langs}
        if self.detok is not None:
            for lang, toks in new_tokens.items():
                for tok, delay, comp in toks:
                    words[lang].extend(self.detok[lang].push(tok, delay, comp))
            for lang in self.tgt_langs:
                # a language that wrote EOS has no more pieces to come: its last word is complete now,
                # not when the source ends (its delay is the time it was written)
                if finished or self.done[lang]:
                    words[lang].extend(self.detok[lang].flush())
        self._compute_s += time.perf_counter() - t0
        return words

    def translate(self, audio: np.ndarray, segment_ms: float = 320.0) -> dict[str, list[Word]]:
        """Stream a whole waveform in ``segment_ms`` segments (after :meth:`reset`); all words per language."""
        self.reset()
        n = max(1, int(np.ceil(segment_ms / 1000.0 * self.frontend.sample_rate)))
        out: dict[str, list[Word]] = {lang: [] for lang in self.tgt_langs}
        starts = list(range(0, len(audio), n)) or [0]
        for j, s in enumerate(starts):
            res = self.accept_audio(audio[s : s + n], finished=j == len(starts) - 1)
            for lang, ws in res.items():
                out[lang].extend(ws)
        return out

    # ------------------------------------------------------------------ decoding
    def _max_len(self, n_states: int) -> int:
        return max(0, int(np.floor(self.max_len_a * n_states + self.max_len_b)))

    @torch.no_grad()
    def _write(self, t0: float) -> dict[str, list[tuple[int, float, float]]]:
        fe = self.frontend
        out: dict[str, list[tuple[int, float, float]]] = {lang: [] for lang in self.tgt_langs}
        if self._closed:
            return out
        if fe.finished and fe.num_states == 0:  # empty / too short audio: nothing to attend
            self._closed = True
            return out
        if self.policy.k is None:
            if fe.finished:
                self._write_offline(t0, out)
            return out
        if getattr(self.model, "is_async", False):
            self._write_async(t0, out)
            if fe.finished:
                self._closed = True
            return out
        eos = int(self.model.cfg.eos_id)
        dev = next(self.model.parameters()).device
        while True:
            active = [lang for lang in self.tgt_langs if not self.done[lang]]
            if not active:
                break
            i = self._step + 1
            n_states = fe.num_states
            if not self.policy.can_write(i, fe.num_chunks, fe.finished):
                break
            if self._step >= self._max_len(n_states):
                if fe.finished:
                    for lang in active:
                        self.done[lang] = True
                break
            states = fe.states()
            if fe.version != self._version:  # re-encoded: cached cross keys/values are stale
                self.state.invalidate_cross()
                self._version = fe.version
            n_vis = self.policy.visible_states(i, states.size(1))
            toks = {lang: torch.tensor([[self._last[lang]]], device=dev) for lang in self.tgt_langs}
            logits = self.model.decoder_step(self.state, toks, states[:, :n_vis])
            delay = fe.source_ms
            comp = (self._compute_s + time.perf_counter() - t0) * 1000.0
            for lang in active:
                lg = constrain_logits(logits[lang][0, -1], self._banned.to(dev), eos, self._step < self.min_len)
                tok = int(lg.argmax())
                self._last[lang] = tok
                if tok == eos:
                    self.done[lang] = True
                else:
                    self.tokens[lang].append(tok)
                    self.token_delays[lang].append(delay)
                    out[lang].append((tok, delay, comp))
            self._step += 1
        if fe.finished:
            self._closed = True
        return out

    def _write_async(self, t0: float, out) -> None:
        """Async unified model: write elements in (t, j) order, t = j * delta + i; language
        j writes its token i+1 once ``k + j * delta + i`` chunks are read (or the source is finished),
        attending exactly those chunks; each element goes into the ONE shared cache at once."""
        fe, m = self.frontend, self.model
        eos = int(m.cfg.eos_id)
        delta = int(m.cfg.async_delta)
        dev = next(m.parameters()).device
        ratio = m.pre_decision_ratio
        while True:
            active = [lang for lang in self.tgt_langs if not self.done[lang]]
            if not active:
                break
            lang = min(active, key=lambda x: (m.async_index(x) * delta + self._pos[x], m.async_index(x)))
            p = self._pos[lang]
            lag = m.async_lag(lang, self.policy.k)
            if not fe.finished and lag + p > fe.num_chunks:
                break
            cap = self._max_len(fe.num_states)
            if not fe.finished and p >= cap:
                break
            states = fe.states()
            if fe.version != self._version:
                self.state.invalidate_cross()
                self._version = fe.version
            s = states.size(1)
            n_vis = min((lag + p) * ratio, s)
            mask = (torch.arange(s, device=dev) < n_vis)[None, None, :]
            tok_in = torch.tensor([[self._last[lang]]], device=dev)
            lg = m.async_step(self.state, lang, tok_in, states, mask)[0, -1]
            lg = constrain_logits(lg, self._banned.to(dev), eos, p < self.min_len)
            tok = eos if p >= cap else int(lg.argmax())
            self._last[lang] = tok
            self._pos[lang] = p + 1
            if tok == eos:
                self.done[lang] = True
            else:
                delay = fe.source_ms
                comp = (self._compute_s + time.perf_counter() - t0) * 1000.0
                self.tokens[lang].append(tok)
                self.token_delays[lang].append(delay)
                out[lang].append((tok, delay, comp))

    def _write_offline(self, t0: float, out) -> None:
        fe = self.frontend
        states = fe.states()
        n = states.size(1)
        enc = EncoderOut(
            states,
            torch.zeros(1, n, dtype=torch.bool, device=states.device),
            torch.tensor([n], device=states.device),
        )
        if self.beam > 1:
            hyps = {lang: beam_search(self.model, enc, lang, self.beam, self.max_len_a, self.max_len_b, self.lenpen)[0]
                    for lang in self.tgt_langs}
        else:
            from .search import greedy_waitk_decode

            res = greedy_waitk_decode(
                self.model, None, None, self.tgt_langs, None, self.max_len_a, self.max_len_b, self.min_len, enc
            )
            hyps = {lang: res[lang][0] for lang in self.tgt_langs}
        comp = (self._compute_s + time.perf_counter() - t0) * 1000.0
        for lang, toks in hyps.items():
            self.tokens[lang] = list(toks)
            self.token_delays[lang] = [fe.source_ms] * len(toks)
            out[lang].extend((tok, fe.source_ms, comp) for tok in toks)
            self.done[lang] = True
        self._closed = True
