"""Joint multilingual streaming translation: one encoder pass feeds every target language, each under
its own read/write policy.

:class:`StreamingTranslator` = :class:`~mmst.simultaneous.incremental.StreamingFrontEnd` (online fbank,
CMVN, incremental or re-encoding encoder) + one policy per language (:mod:`.policies`: wait-k,
AlignAtt, EDAtt, CTC wait-k, local agreement, hold-n) + joint incremental decoding + a
:class:`~mmst.simultaneous.detok.Detokenizer` per language.

Token policies (wait-k, AlignAtt, EDAtt, CTC wait-k; greedy): the languages whose policy may write
are stepped together (:class:`~mmst.simultaneous.stepper.LanguageStepper`: unified model = one batched
decoder call, rows = languages); each candidate is written or, on READ, rolled back. A waiting
language never blocks the others, and each language's tokens and delays equal decoding it alone with
the same policy (tested). Hypothesis policies (local agreement, hold-n; AlignAtt/EDAtt with beam > 1)
re-decode the continuation of the written prefix whenever new encoder states arrive
(:mod:`.continuation`). Written tokens are never revised.

wait-k (Ma et al. 2019 over fixed pre-decision chunks, Ma et al. 2020): token i (1-based) is written as
soon as ``k + i - 1`` chunks have been read (or the source is finished) and attends the states of
chunks ``1..min(k+i-1, n_chunks)``; so with a chunk-causal encoder the written tokens are exactly
those of :func:`mmst.simultaneous.search.greedy_waitk_decode` (tested). Once the source is finished
every language writes until EOS or ``floor(max_len_a * S + max_len_b)`` tokens (S = encoder states).
A wait-k language that wrote EOS stops; an adaptive policy's EOS before the source ends means READ.

Partial input (the source not finished): the length cap is :func:`~.policies.partial_cap`,
``min(floor(a * S + b), S + 2)``. A token policy READs at the cap. A hypothesis policy's continuation
that reaches the cap was cut, not ended: the language READs (nothing is written from it), so EOS forced
by the cap is never taken for a decision; that chunk has no hypothesis, so local agreement, which compares
each chunk's hypothesis with the previous chunk's (Polák et al. 2022), READs on the next chunk too.
AlignAtt/EDAtt with ``prefix=redecode`` (``--attn-prefix redecode``) decode as hypothesis policies: the
written prefix is re-decoded over all received states at every new chunk, as FBK's agents do.

Async unified models (wait-k only, the same k for all languages): language j (0-based in
``async_order``) runs at lag ``k + j * async_delta``; elements are written in (t, j) emission order
into one shared cache, so a lagging language reads the words the leading ones already wrote; once
the source is finished the languages continue in that order (round-robin; a language whose lag
exceeds the source joins at its virtual step) until each wrote EOS or reached the length cap. Equal to
the masked batch decoder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from mmst.models.encoder import EncoderOut
from mmst.models.stacked import Steps, run_alone

from .continuation import (
    decode_continuations_beam,
    decode_continuations_greedy,
    forced_cross_attention,
    forced_cross_attention_rows,
)
from .detok import CHAR_LANGS, Detokenizer, Word
from .incremental import StreamingFrontEnd
from .policies import Policy, PolicyState, WaitKPolicy, ctc_greedy_count, partial_cap
from .policy_spec import PolicySpec, build_policy
from .search import banned_ids, beam_search, constrain_logits
from .stepper import LanguageStepper

#: policies that may decode with beam search while streaming
BEAM_POLICIES = ("alignatt", "edatt", "la", "holdn")

#: why a sentence ended: EOS written, the length cap reached, or (adaptive policies) EOS predicted on partial
#: input for several chunks and ended by the caller (:meth:`StreamingTranslator.end_sentence`)
END_REASONS = ("eos", "cap", "eos-partial")


@dataclass(frozen=True)
class SentenceEnd:
    """When a language's current sentence ended.

    Attributes:
        reason: one of :data:`END_REASONS`.
        source_ms: audio of the utterance received when it ended, ms (for ``eos-partial``: when EOS was first
            predicted in the run of chunks that ended it).
        n_states: encoder states received then (the states its attention evidence covers).
        partial: it ended before the source was finished (on partial input).
    """

    reason: str
    source_ms: float
    n_states: int
    partial: bool = False


@dataclass
class Sentence:
    """A finished sentence of one language inside one utterance (kept when the language restarts).

    Attributes:
        origin: first encoder state it could attend (0, or its restart point).
        tokens, delays: its written tokens and their delays (ms of the utterance read).
        end: how it ended.
    """

    origin: int
    tokens: list[int] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    end: SentenceEnd | None = None


class StreamingTranslator:
    """Streaming speech translation into one or several target languages at once.

    Args:
        model: an ``MMSTModel`` (set to eval mode here).
        vocabs: target vocab (``mmst.data.vocab.Vocab``) shared by all languages, or ``{lang: Vocab}``,
            or None (tokens only; :meth:`accept_audio` then returns no words).
        tgt_langs: languages to decode (default: all of the model's).
        waitk: lagging k in pre-decision chunks, or None for offline (read all, then decode); used
            when ``policy`` is None.
        cmvn: global CMVN callable for fbank ``(n, 80)`` (``mmst.features.GlobalCMVN``) or None.
        max_len_a, max_len_b: length cap ``floor(a * S + b)`` tokens (EOS excluded), S = encoder states;
            before the source ends, at most ``S + 2`` (:func:`~.policies.partial_cap`).
        beam: beam size: offline decoding (waitk=None), or streaming with alignatt, edatt, la, holdn
            (default 1 = greedy).
        lenpen: length penalty of beam search.
        encoder_mode: ``"auto"``, ``"incremental"`` or ``"reencode"`` (see :mod:`.incremental`).
        min_len: suppress EOS before this many tokens (for cost benchmarks of untrained models).
        char_langs: languages detokenised per character.
        policy: a :class:`~.policies.Policy`, :class:`~.policy_spec.PolicySpec` or ``"name:k=v,..."``
            for every language, or ``{lang: policy}`` (languages left out get ``waitk``); default
            wait-k with lagging ``waitk``.

    Raises:
        ValueError: unknown language, bad k, bad encoder mode, a vocab missing for a language, a bad
            policy (unknown, out-of-range parameter, ``ctc`` without a CTC head), beam search with a
            policy outside alignatt/edatt/la/holdn, or a policy other than one wait-k on an async model.

    Usage::

        tr = StreamingTranslator(model, vocab, ["de", "es"], waitk=3, cmvn=cmvn)
        tr = StreamingTranslator(model, vocab, ["de", "ja"], cmvn=cmvn,
                                 policy={"de": "waitk:k=3", "ja": "alignatt:frames=4"})
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
        policy: Policy | PolicySpec | str | dict | None = None,
    ) -> None:
        self.model = model.eval()
        self.tgt_langs = list(tgt_langs) if tgt_langs else list(model.tgt_langs)
        model.check_langs(self.tgt_langs)
        self.beam = int(beam)
        self.policies = self._make_policies(policy, waitk)
        self.policy = self.policies[self.tgt_langs[0]]
        if vocabs is not None and not isinstance(vocabs, dict):
            vocabs = {lang: vocabs for lang in self.tgt_langs}
        if vocabs is not None:
            missing = [lang for lang in self.tgt_langs if lang not in vocabs]
            if missing:
                raise ValueError(f"no target vocab for {missing}")
        self.vocabs = vocabs
        self.max_len_a, self.max_len_b = float(max_len_a), int(max_len_b)
        self.lenpen, self.min_len = float(lenpen), int(min_len)
        self._banned = banned_ids(model, next(model.parameters()).device)  # pad, bos, <lang:xx>
        self.char_langs = tuple(char_langs)
        self.frontend = StreamingFrontEnd(model, cmvn, encoder_mode)
        self.reset()

    def _make_policies(self, policy, waitk) -> dict[str, Policy]:
        m = self.model
        per = policy if isinstance(policy, dict) else {}
        unknown = [lang for lang in per if lang not in self.tgt_langs]
        if unknown:
            raise ValueError(f"policy given for {unknown}, which are not decoded (languages: {self.tgt_langs})")
        default = policy if policy is not None and not isinstance(policy, dict) else WaitKPolicy(waitk, m.pre_decision_ratio)
        pols = {lang: build_policy(per.get(lang, default), m) for lang in self.tgt_langs}
        offline = [isinstance(p, WaitKPolicy) and p.k is None for p in pols.values()]
        if any(offline) and not all(offline):
            raise ValueError("offline decoding (wait-k k=None) applies to every language or none")
        if not all(offline) and self.beam > 1:
            bad = sorted({p.name for p in pols.values() if p.name not in BEAM_POLICIES})
            if bad:
                raise ValueError(f"beam search while streaming works with {', '.join(BEAM_POLICIES)}; "
                                 f"not with {', '.join(bad)} (use beam 1)")
        if getattr(m, "is_async", False):
            ks = {p.k if isinstance(p, WaitKPolicy) else "x" for p in pols.values()}
            if len(ks) != 1 or "x" in ks:
                raise ValueError("async unified models decode with one wait-k policy for all languages "
                                 f"(their languages share one decoder cache); got {sorted(p.describe() for p in pols.values())}")
        return pols

    @property
    def waitk(self) -> int | None:
        """The wait-k lagging k of the first language (None = offline, or not a wait-k policy)."""
        return getattr(self.policy, "k", None) if isinstance(self.policy, WaitKPolicy) else None

    @property
    def offline(self) -> bool:
        """Offline decoding (read everything, then decode)."""
        return isinstance(self.policy, WaitKPolicy) and self.policy.k is None

    def _kind(self, lang: str) -> str:
        pol = self.policies[lang]
        redecode = getattr(pol, "prefix", "cache") == "redecode"  # AlignAtt/EDAtt re-decoding the written prefix
        return "hypothesis" if pol.kind == "hypothesis" or redecode or (self.beam > 1 and pol.name in BEAM_POLICIES) \
            else "token"

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
        self._stepper = None if getattr(self.model, "is_async", False) else LanguageStepper(self.model, self.tgt_langs)
        self._read_at = {lang: -1 for lang in self.tgt_langs}  # encoder states when the language last READ
        self._history: dict[str, list[list[int]]] = {lang: [] for lang in self.tgt_langs}
        self._src_tokens = {lang: 0 for lang in self.tgt_langs}
        self._origin = {lang: 0 for lang in self.tgt_langs}  # first state the current sentence attends
        self.sentences: dict[str, list[Sentence]] = {lang: [] for lang in self.tgt_langs}  # finished, restarted
        self.ended: dict[str, SentenceEnd | None] = {lang: None for lang in self.tgt_langs}
        self.eos_chunks = {lang: 0 for lang in self.tgt_langs}  # adaptive: consecutive READs on a predicted EOS
        self.eos_since: dict[str, float | None] = {lang: None for lang in self.tgt_langs}
        self._held_words: dict[str, list[Word]] = {lang: [] for lang in self.tgt_langs}
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
            ValueError: audio after the source finished (call :meth:`reset`); a call without samples after
                it writes what restarted languages (:meth:`restart`) allow.
        """
        return run_alone(self.accept_audio_steps(samples, finished))

    def accept_audio_steps(self, samples: np.ndarray, finished: bool = False) -> Steps:
        """:meth:`accept_audio` as a generator (:mod:`mmst.models.stacked`): the incremental encoder's
        block and the token policies' decoder steps are yielded requests, so a server can stack them
        with other streams' (same arguments and value as :meth:`accept_audio`). Other decoding
        (hypothesis policies, beam search, async and offline models, re-encoding) runs inside."""
        t0 = time.perf_counter()
        if np.asarray(samples).size or (finished and not self.frontend.finished):  # no audio: write only
            yield from self.frontend.accept_audio_steps(samples, finished)
        new_tokens = yield from self._write(t0)
        words: dict[str, list[Word]] = {lang: [] for lang in self.tgt_langs}
        for lang, held in self._held_words.items():  # the last words of sentences ended between calls
            words[lang].extend(held)
            held.clear()
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
        """Length cap over ``n_states`` received states (the partial cap until the source is finished)."""
        return partial_cap(n_states, self.max_len_a, self.max_len_b, self.frontend.finished)

    def _write(self, t0: float) -> Steps:
        fe = self.frontend
        out: dict[str, list[tuple[int, float, float]]] = {lang: [] for lang in self.tgt_langs}
        if self._closed:
            return out
        if fe.finished and fe.num_states == 0:  # empty / too short audio: nothing to attend
            self._closed = True
            return out
        if self.offline:
            if fe.finished:
                with torch.no_grad():
                    self._write_offline(t0, out)
            return out
        if getattr(self.model, "is_async", False):
            with torch.no_grad():
                self._write_async(t0, out)
            if fe.finished:
                self._closed = True
            return out
        ctc_langs = [lang for lang in self.tgt_langs if self.policies[lang].needs_ctc and not self.done[lang]]
        if ctc_langs and fe.num_states:
            enc = fe.states()
            base = self._states_start()
            counts: dict[int, int] = {}
            for lang in ctc_langs:  # over the states of the language's sentence (from its restart point)
                o = self._origin[lang]
                if o not in counts:
                    with torch.no_grad():  # a running maximum: a later greedy path may be shorter
                        counts[o] = ctc_greedy_count(self.model.ctc_proj(enc[0, o - base:]),
                                                     blank=int(self.model.cfg.bos_id))
                self._src_tokens[lang] = max(self._src_tokens[lang], counts[o])
        yield from self._write_tokens(t0, out, [lang for lang in self.tgt_langs if self._kind(lang) == "token"])
        with torch.no_grad():
            self._write_hypotheses(t0, out, [lang for lang in self.tgt_langs if self._kind(lang) == "hypothesis"])
        if fe.finished:
            self._closed = True
        return out

    def _states_start(self) -> int:
        """Stream state of the first row of :meth:`_states` (states before it were freed, :meth:`release_states`)."""
        return int(getattr(self.frontend, "states_start", 0))

    def _states(self) -> torch.Tensor:
        """Usable encoder states kept, from state :meth:`_states_start` on; drops cached cross keys/values when
        the prefix was re-encoded."""
        fe = self.frontend
        states = fe.states()
        if fe.version != self._version:  # re-encoded: cached cross keys/values are stale
            self.state.invalidate_cross()
            if self._stepper is not None:
                self._stepper.invalidate_cross()
            self._version = fe.version
        return states

    def _emit(self, lang: str, tok: int, t0: float, out) -> None:
        delay = self.frontend.source_ms
        comp = (self._compute_s + time.perf_counter() - t0) * 1000.0
        self.tokens[lang].append(tok)
        self.token_delays[lang].append(delay)
        out[lang].append((tok, delay, comp))

    def _write_tokens(self, t0: float, out, langs: list[str]) -> Steps:
        """Token policies: step the languages that may write together; write or roll back each candidate
        (a generator: the decoder steps are yielded requests)."""
        fe = self.frontend
        eos = int(self.model.cfg.eos_id)
        dev = next(self.model.parameters()).device
        n_layers = int(self.model.cfg.decoder_layers)
        while True:
            n_states = fe.num_states
            want = []
            for lang in langs:
                if self.done[lang] or (self._read_at[lang] == n_states and not fe.finished):
                    continue
                o = self._origin[lang]
                i = len(self.tokens[lang]) + 1
                if n_states - o <= 0 or i - 1 >= self._max_len(n_states - o):
                    if fe.finished:
                        self._end(lang, "cap")
                    continue
                if not self.policies[lang].ready(i, self._rel_chunks(o), fe.finished, self._src_tokens[lang]):
                    continue
                want.append(lang)
            if not want:  # nothing to attend yet
                break
            states = self._states()
            base = self._states_start()
            s = base + states.size(1)  # stream states received
            first = {lang: self._origin[lang] for lang in want}
            n_vis = {lang: first[lang] + self.policies[lang].visible_states(len(self.tokens[lang]) + 1, s - first[lang])
                     for lang in want}
            layers = tuple(sorted({self._layer(lang, n_layers) for lang in want if self.policies[lang].needs_attn}))
            logits, attn = yield from self._stepper.step_steps(want, self._last, states, n_vis, layers,
                                                               first_visible=first, states_start=base)
            for lang in want:
                pol = self.policies[lang]
                i = len(self.tokens[lang]) + 1
                lg = constrain_logits(logits[lang], self._banned.to(dev), eos, i - 1 < self.min_len)
                tok = int(lg.argmax())
                if tok != eos:
                    self.eos_chunks[lang], self.eos_since[lang] = 0, None
                if fe.finished:
                    write = 1
                elif tok == eos and pol.adaptive:
                    write = 0
                    if self.eos_chunks[lang] == 0:
                        self.eos_since[lang] = fe.source_ms
                    self.eos_chunks[lang] += 1
                else:
                    a = attn[lang].get(self._layer(lang, n_layers)) if pol.needs_attn else None  # (H, S)
                    if a is not None:
                        a = (a if pol.heads is None else a[list(pol.heads)]).mean(dim=0)
                    score = float(torch.log_softmax(lg.float(), -1)[tok])
                    o = first[lang]
                    write = pol.decide(PolicyState(i=i, n_chunks=self._rel_chunks(o), n_states=s - o,
                                                   source_finished=False, written=self.tokens[lang], candidates=[tok],
                                                   scores=[score], attn=None if a is None else a[None],
                                                   src_tokens=self._src_tokens[lang], eos=eos))
                if not write:
                    self._stepper.rollback(lang)
                    self._read_at[lang] = n_states
                    continue
                self._last[lang] = tok
                if tok == eos:
                    self._end(lang, "eos")
                else:
                    self._emit(lang, tok, t0, out)

    def _rel_chunks(self, origin: int) -> int:
        """Pre-decision chunks read from state ``origin`` on: complete ones; once finished, a partial last too."""
        fe = self.frontend
        n = max(0, fe.num_states - origin)
        return -(-n // fe.ratio) if fe.finished else n // fe.ratio

    def _end(self, lang: str, reason: str, source_ms: float | None = None) -> None:
        """The current sentence of ``lang`` ended (it writes nothing more until :meth:`restart`)."""
        self.done[lang] = True
        fe = self.frontend
        self.ended[lang] = SentenceEnd(reason, fe.source_ms if source_ms is None else float(source_ms), fe.num_states,
                                       not fe.finished)

    # ------------------------------------------------------------------ sentence restarts
    @property
    def supports_restart(self) -> bool:
        """Whether :meth:`restart` works: streaming (not offline) decoding with a sync model."""
        return not self.offline and not getattr(self.model, "is_async", False)

    def end_sentence(self, lang: str) -> None:
        """End the current sentence of ``lang`` now (an adaptive policy's EOS predicted on partial input for
        :attr:`eos_chunks` chunks, decided by the caller): reason ``eos-partial``, at the time EOS was first
        predicted in that run. Its last word is returned by the next call."""
        if self.done[lang]:
            return
        self._end(lang, "eos-partial", self.eos_since[lang])
        if self.detok is not None:
            self._held_words[lang].extend(self.detok[lang].flush())

    def sentence_evidence(self, lang: str) -> tuple[torch.Tensor, torch.Tensor | None, int, int]:
        """:meth:`sentence_evidence_many` of one language."""
        return self.sentence_evidence_many([lang])[lang]

    @torch.no_grad()
    def sentence_evidence_many(self, langs: list[str]) -> dict[str, tuple[torch.Tensor, torch.Tensor | None, int, int]]:
        """The signals that locate where the current sentence of each language of ``langs`` ended in the source.

        Returns:
            ``{lang: (attn, ctc_labels, origin, n_states)}``: ``attn`` ``(T, n_states - origin)``, the
            cross-attention of each written token of the sentence (decoder layer of its policy, or ``L // 2``;
            mean over heads) over the states ``[origin, n_states)`` it could attend, ``n_states`` = the states
            received when it ended (now, if it has not); ``ctc_labels`` ``(n_states - origin,)``, the greedy
            source-CTC label per state, or None without a CTC head. The teacher-forced decoder calls of all
            the languages are one call for a unified model
            (:func:`~mmst.simultaneous.continuation.forced_cross_attention_rows`), and the CTC head runs once.
        """
        fe = self.frontend
        out: dict[str, tuple[torch.Tensor, torch.Tensor | None, int, int]] = {}
        windows: dict[str, tuple[int, int]] = {}
        for lang in langs:
            o = self._origin[lang]
            end = self.ended[lang]
            hi = min(fe.num_states, end.n_states if end is not None else fe.num_states)
            if hi <= o or not self.tokens[lang]:
                out[lang] = (torch.zeros(len(self.tokens[lang]), max(0, hi - o)), None, o, hi)
            else:
                windows[lang] = (o, hi)
        if not windows:
            return out
        base = self._states_start()
        states = self._states()
        n_layers = int(self.model.cfg.decoder_layers)
        attn = forced_cross_attention_rows(
            self.model, {lang: list(self.tokens[lang]) for lang in windows}, states,
            {lang: (o - base, hi - base) for lang, (o, hi) in windows.items()},
            {lang: self._layer(lang, n_layers) for lang in windows})
        ctc = getattr(self.model, "ctc_proj", None)
        labels = None
        if ctc is not None:
            lo = min(o for o, _ in windows.values())
            hi_all = max(hi for _, hi in windows.values())
            labels = ctc(states[0, lo - base:hi_all - base]).argmax(dim=-1).cpu()
        for lang, (o, hi) in windows.items():
            out[lang] = (attn[lang].float().cpu(), None if labels is None else labels[o - lo:hi - lo], o, hi)
        return out

    def restart(self, lang: str, state: int) -> None:
        """Start a new sentence of ``lang`` that attends the encoder states from ``state`` on (the states of
        the utterance, 40 ms each). Its earlier sentence moves to :attr:`sentences`; nothing written is
        revised. The language's decoder starts from its start token, its policy counts chunks and tokens
        from the restart, and the other languages are untouched.

        Raises:
            ValueError: offline or async decoding (:attr:`supports_restart`), or ``state`` before the current
                sentence's first state or after the states received.
        """
        if not self.supports_restart:
            raise ValueError("sentence restarts need streaming decoding with a sync model (not offline, not async)")
        o, n = self._origin[lang], self.frontend.num_states
        if not o <= int(state) <= n:
            raise ValueError(f"{lang}: restart state {state} outside [{o}, {n}] (the current sentence's first "
                             "state, the states received)")
        if self.detok is not None:  # the new sentence is detokenised on its own (work per piece stays bounded)
            self._held_words[lang].extend(self.detok[lang].flush())
            self.detok[lang].reset()
        self.sentences[lang].append(Sentence(o, self.tokens[lang], self.token_delays[lang], self.ended[lang]))
        self.tokens[lang], self.token_delays[lang] = [], []
        self._origin[lang] = int(state)
        self.done[lang], self.ended[lang] = False, None
        self._last[lang] = self.model.start_token_id(lang)
        self._read_at[lang] = -1
        self._history[lang] = []
        self._src_tokens[lang] = 0
        self.eos_chunks[lang], self.eos_since[lang] = 0, None
        if self._stepper is not None:
            self._stepper.restart(lang)
        self._closed = False
        self.release_states()

    def release_states(self) -> int:
        """Free the state no language can attend any more: the encoder states before every language's current
        sentence (``min`` over languages of :meth:`origin`; incremental encoding only) and the decoder inputs
        of ended sentences (:meth:`~.stepper.LanguageStepper.forget`). Called by :meth:`restart`; with
        restarts and a bounded encoder left context (``encoder_left_chunks``) the state stays bounded on an
        endless stream. State indices stay stream positions. Returns the encoder states freed now
        (amortised: 0 until enough are dead)."""
        if not self.supports_restart:
            return 0
        forget = getattr(self.frontend, "forget_states_before", None)
        dropped = forget(min(self._origin.values())) if forget is not None else 0
        if self._stepper is not None:
            self._stepper.forget(dropped)
        return dropped

    def origin(self, lang: str) -> int:
        """First encoder state the current sentence of ``lang`` attends (0 until it restarts)."""
        return self._origin[lang]

    def _layer(self, lang: str, n_layers: int) -> int:
        layer = getattr(self.policies[lang], "layer", None)
        return n_layers // 2 if layer is None else int(layer)

    def _write_hypotheses(self, t0: float, out, langs: list[str]) -> None:
        """Hypothesis policies: re-decode each continuation once per new encoder states (greedy: all
        languages with the same restart point in one batched decode, over the states from that point);
        write the prefix the policy picks."""
        fe = self.frontend
        n_states = fe.num_states
        groups: dict[int, list[str]] = {}
        for lang in langs:
            if self.done[lang] or n_states == 0 or (self._read_at[lang] == n_states and not fe.finished):
                continue
            self._read_at[lang] = n_states
            o = self._origin[lang]
            if n_states - o <= 0 or len(self.tokens[lang]) >= self._max_len(n_states - o):
                if fe.finished:
                    self._end(lang, "cap")
                self._history[lang].clear()  # no hypothesis on this chunk
                continue
            groups.setdefault(o, []).append(lang)
        for o, todo in groups.items():
            self._write_hypotheses_from(t0, out, todo, o)

    def _write_hypotheses_from(self, t0: float, out, todo: list[str], o: int) -> None:
        """:meth:`_write_hypotheses` for the languages ``todo``, whose sentences attend the states from ``o``."""
        fe = self.frontend
        eos = int(self.model.cfg.eos_id)
        states = self._states()[:, o - self._states_start():]
        banned = self._banned.to(states.device)
        cap = self._max_len(states.size(1))
        if self.beam == 1:
            conts = decode_continuations_greedy(
                self.model, {lang: self.tokens[lang] for lang in todo}, states,
                {lang: cap - len(self.tokens[lang]) for lang in todo}, banned,
                {lang: max(0, self.min_len - len(self.tokens[lang])) for lang in todo})
        else:
            conts = decode_continuations_beam(
                self.model, {lang: self.tokens[lang] for lang in todo}, states,
                {lang: cap - len(self.tokens[lang]) for lang in todo}, banned, self.beam, self.lenpen,
                {lang: max(0, self.min_len - len(self.tokens[lang])) for lang in todo})
        for lang in todo:
            cont, scores = conts[lang]
            written = list(self.tokens[lang])
            pol = self.policies[lang]
            if cont[:1] == [eos] and not fe.finished:  # the model would end the sentence here
                if self.eos_chunks[lang] == 0:
                    self.eos_since[lang] = fe.source_ms
                self.eos_chunks[lang] += 1
            else:
                self.eos_chunks[lang], self.eos_since[lang] = 0, None
            if fe.finished:
                n = len(cont)
            elif len(cont) - int(bool(cont) and cont[-1] == eos) >= cap - len(written) or eos not in cont:
                n = 0  # cut by the cap, not ended: no hypothesis on this chunk (READ), so none to agree with next
                self._history[lang].clear()
            else:
                attn = None
                if pol.needs_attn:
                    layer = self._layer(lang, int(self.model.cfg.decoder_layers))
                    attn = forced_cross_attention(self.model, lang, written, cont, states, layer, pol.heads)
                n = pol.decide(PolicyState(i=len(written) + 1, n_chunks=self._rel_chunks(o), n_states=states.size(1),
                                           source_finished=False, written=written, candidates=cont, scores=scores,
                                           attn=attn, history=self._history[lang], src_tokens=self._src_tokens[lang],
                                           eos=eos))
                if eos in cont[:n]:
                    n = cont.index(eos)
                self._history[lang].append(written + list(cont))
            for tok in cont[:n]:
                if tok == eos:
                    self._end(lang, "eos")
                    break
                self._emit(lang, tok, t0, out)
            if fe.finished and not self.done[lang]:
                self._end(lang, "cap")

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
            lag = m.async_lag(lang, self.policy.k)  # one wait-k policy for all languages
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
                self._end(lang, "eos")
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
            self._end(lang, "eos")
        self._closed = True
