"""Read/write policies: when one target language may write, given what it has read.

The protocol (SimulEval's habit: a tiny decision). Before each decision the streaming driver
(:class:`mmst.simultaneous.StreamingTranslator`) decodes a *candidate continuation* of the written
prefix from the encoder states received so far, and hands the policy a :class:`PolicyState`; the policy
answers how many leading candidate tokens to WRITE (0 = READ more source). A written token is never
revised. Two kinds of policy:

* ``kind = "token"`` (wait-k, AlignAtt, EDAtt, CTC wait-k ``ctcwaitk``): one candidate at a time (greedy, incremental
  decoder cache); the answer is 0 or 1. :meth:`Policy.ready` lets a policy skip decoding when it
  would READ whatever the candidate (wait-k, CTC wait-k).
* ``kind = "hypothesis"`` (local agreement, hold-n; AlignAtt/EDAtt with ``--beam B > 1``): the whole
  continuation is re-decoded (greedy or beam) whenever new source arrives; the policy picks a prefix.

Common rules, applied by the driver: once the source is finished everything is written (until EOS or
the length cap ``floor(a * S + b)``); an adaptive policy that predicts EOS before the source ends READs (a
wait-k language that predicts EOS stops, as the wait-k training mask implies). Before the source ends
the length cap is the *partial cap* ``min(floor(a * S + b), S + PARTIAL_SLACK)`` (S = encoder states
received, 40 ms each; see :func:`partial_cap`), and a re-decoded continuation that reaches it is not a
hypothesis (it did not end, the cap cut it): the driver READs, whatever the policy. Units: a *chunk* is R encoder
states (the pre-decision ratio, R * 40 ms); a *frame* in AlignAtt/EDAtt is one encoder state (40 ms).
Errors: every constructor raises ``ValueError`` naming the parameter that is out of range.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch

#: tokens allowed beyond one per received encoder state before the source ends (:func:`partial_cap`)
PARTIAL_SLACK = 2
#: attention modes of AlignAtt and EDAtt
ATTN_COMPAT = ("paper", "fbk")
#: how greedy AlignAtt/EDAtt get the decoder states of the written prefix (:class:`AlignAttPolicy`)
ATTN_PREFIX = ("cache", "redecode")


def partial_cap(n_states: int, max_len_a: float, max_len_b: int, source_finished: bool) -> int:
    """Cap on written + continuation tokens (EOS excluded) over ``n_states`` encoder states.

    Source finished: ``floor(a * S + b)`` (fairseq's ``max_len_a``/``max_len_b``). Before that, also at
    most one token per received state plus :data:`PARTIAL_SLACK`: ``min(floor(a * S + b), S + 2)``, so
    that ``b`` (200 by default) never lets a model that does not predict EOS write hundreds of tokens
    from the first chunk.
    """
    full = max(0, int(math.floor(max_len_a * n_states + max_len_b)))
    return full if source_finished else min(full, n_states + PARTIAL_SLACK)


@dataclass
class PolicyState:
    """What a policy sees for ONE language at one decision.

    Attributes:
        i: 1-based index of the first candidate token (tokens already written + 1).
        n_chunks: complete pre-decision chunks read.
        n_states: encoder states received (usable; all of them once the source is finished).
        source_finished: the whole source has been read.
        written: token ids written so far (EOS excluded).
        candidates: candidate continuation: one token (token policies) or the re-decoded continuation,
            possibly ending with EOS (hypothesis policies).
        scores: log-probability of each candidate token.
        attn: ``(len(candidates), n_states)`` cross-attention of each candidate over the received
            encoder states (decoder layer chosen by the policy, averaged over heads; rows sum to 1), or
            None when the policy needs none.
        history: the re-decoded full hypotheses (written prefix + continuation) of the decisions just before
            this one, one per chunk, oldest first (hypothesis policies); a chunk whose continuation the length
            cap cut had no hypothesis, so the history starts again after it.
        src_tokens: source tokens recognised so far by the greedy CTC head, as a running maximum over the
            decisions of the utterance (CTC wait-k only).
        eos: the EOS id.
    """

    i: int
    n_chunks: int
    n_states: int
    source_finished: bool
    written: list[int] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    attn: torch.Tensor | None = None
    history: list[list[int]] = field(default_factory=list)
    src_tokens: int = 0
    eos: int = 2


class Policy:
    """Base of the policies (see the module docstring). Subclasses are frozen dataclasses.

    Class attributes: ``name`` (CLI name), ``kind`` (``"token"`` or ``"hypothesis"``), ``adaptive``
    (True: EOS before the source ends means READ), ``needs_ctc`` (needs the model's CTC head),
    ``needs_attn`` (needs cross-attention from the decoder layer ``self.layer``, None = ``L // 2``,
    averaged over the heads ``self.heads``, None = all).
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "token"
    adaptive: ClassVar[bool] = True
    needs_ctc: ClassVar[bool] = False
    needs_attn: ClassVar[bool] = False

    def ready(self, i: int, n_chunks: int, source_finished: bool, src_tokens: int = 0) -> bool:
        """Cheap pre-check: False when token ``i`` would be READ whatever the candidate."""
        return True

    def visible_states(self, i: int, n_states: int) -> int:
        """Encoder states token ``i`` attends (adaptive policies: all received)."""
        return n_states

    def decide(self, st: PolicyState) -> int:
        """Number of leading ``st.candidates`` to WRITE (0 = READ)."""
        raise NotImplementedError

    def params(self) -> dict:
        """The policy's parameters ``{name: value}`` (for reports)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def describe(self) -> str:
        """``name(k=v, ...)`` (parameters that are None, ``compat=paper`` and ``prefix=cache`` left out; heads as
        ``0+2``)."""
        return f"{self.name}(" + ", ".join(
            f"{k}={'+'.join(map(str, v)) if isinstance(v, tuple) else v}"
            for k, v in self.params().items() if v is not None and (k, v) not in (("compat", "paper"),
                                                                                 ("prefix", "cache"))) + ")"


def _check(cond: bool, param: str, msg: str, value) -> None:
    if not cond:
        raise ValueError(f"policy parameter {param} {msg}, got {value!r}")


def _attention_view(attn: torch.Tensor, n_states: int, compat: str) -> tuple[torch.Tensor, int]:
    """``(attention (T, S'), S')`` the AlignAtt/EDAtt rule reads: ``paper``: as given (S' = S); ``fbk``:
    the last received frame's column dropped (S' = S - 1), as FBK's agents drop the last attention score
    before the rule (``hypo['attention'][:-1]`` in ``simul_offline_alignatt.py``/``..._edatt.py``)."""
    if compat == "fbk":
        return attn[:, : max(0, n_states - 1)], max(0, n_states - 1)
    return attn, n_states


def _check_compat(compat, prefix) -> None:
    _check(compat in ATTN_COMPAT, "compat", f"must be one of {', '.join(ATTN_COMPAT)}", compat)
    _check(prefix in ATTN_PREFIX, "prefix", f"must be one of {', '.join(ATTN_PREFIX)}", prefix)


def _check_layer_heads(layer, heads) -> None:
    if layer is not None:
        _check(layer >= 0, "layer", "must be >= 0", layer)
    if heads is not None:
        _check(len(heads) > 0 and all(h >= 0 for h in heads) and len(set(heads)) == len(heads), "heads",
               "must be distinct heads >= 0", heads)


@dataclass(frozen=True)
class WaitKPolicy(Policy):
    """wait-k (Ma et al. 2019, STACL, ``g(i) = k + i - 1``) over fixed pre-decision chunks (Ma et al.
    2020, SimulST).

    Token i (1-based) is written once ``k + i - 1`` chunks have been read, or once the source is
    finished, and attends the encoder states of chunks ``1 .. min(k + i - 1, n_chunks)`` — exactly the
    training mask of :func:`mmst.models.masks.waitk_cross_mask`. A language that predicts EOS stops.

    Attributes:
        k: lagging in chunks (>= 1), or None for offline (read everything, then write).
        ratio: R, encoder states per chunk.
    """

    k: int | None = 3
    ratio: int = 1
    name: ClassVar[str] = "waitk"
    adaptive: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.k is not None:
            _check(self.k >= 1, "k", "must be >= 1 (or None for offline)", self.k)
        _check(self.ratio >= 1, "ratio", "(pre-decision ratio) must be >= 1", self.ratio)

    def can_write(self, i: int, n_chunks_read: int, source_finished: bool) -> bool:
        """May target token ``i`` (1-based) be written after ``n_chunks_read`` chunks?"""
        if source_finished:
            return True
        return self.k is not None and self.k + i - 1 <= n_chunks_read

    def ready(self, i: int, n_chunks: int, source_finished: bool, src_tokens: int = 0) -> bool:
        """:meth:`can_write`."""
        return self.can_write(i, n_chunks, source_finished)

    def visible_states(self, i: int, n_states: int) -> int:
        """Encoder states visible to token ``i``: ``min((k + i - 1) * R, n_states)`` (all if offline)."""
        if self.k is None:
            return n_states
        return min((self.k + i - 1) * self.ratio, n_states)

    def decide(self, st: PolicyState) -> int:
        """WRITE the candidate when :meth:`can_write`."""
        return int(self.can_write(st.i, st.n_chunks, st.source_finished))

    def params(self) -> dict:
        """``{"k": k}`` (the ratio is the model's)."""
        return {"k": self.k}


@dataclass(frozen=True)
class AlignAttPolicy(Policy):
    """AlignAtt (Papi, Turchi, Negri, Interspeech 2023, "AlignAtt: Using Attention-based Audio-Translation
    Alignments as a Guide for Simultaneous Speech Translation", sec. 2).

    The candidate token y_i is aligned to the encoder frame it attends most,
    ``a_i = argmax_s A(y_i, s)`` (``A``: cross-attention of the chosen decoder layer, averaged over
    heads, over the S frames received). Rule: WRITE y_i if ``a_i < S - f`` (its aligned frame is not
    among the last f received), else READ and stop writing for this step. Frames are encoder states
    (40 ms). Applied token by token from the first candidate; with beam search, to the best hypothesis.
    ``compat="fbk"``: FBK's agent: the last received frame's attention is dropped first, so the rule
    reads ``a_i = argmax_{s < S - 1} A(y_i, s)`` against ``S - 1 - f`` (READ when ``S = 1``).

    The written prefix (greedy decoding, ``prefix``): ``cache`` (default) keeps each written token's decoder
    states in the incremental cache, computed over the frames received when it was written, so a later
    candidate attends an old prefix's self-attention keys; ``redecode`` re-decodes the written prefix over all
    frames received at every new chunk, as FBK's agents do (each chunk they generate the whole hypothesis with
    the written tokens as a forced prefix, then apply the rule token by token). With ``redecode`` the language
    decodes like a hypothesis policy, so a continuation that the partial length cap cuts is no hypothesis
    (READ), where ``cache`` writes token by token up to the cap. Otherwise the two differ only where a written
    token's decoder states depend on the frames it saw: the default deviates from FBK's agents there. With
    ``--beam > 1`` the prefix is always re-decoded.

    Attributes:
        frames: f >= 1 (FBK's ``--frame-num``).
        layer: 0-based decoder layer (FBK's ``--extract-attn-from-layer``); None = ``L // 2`` for an
            L-layer decoder (FBK's layer 3 of 6).
        heads: 0-based attention heads averaged (``heads=0+2`` on the command line); None = all.
        compat: ``"paper"`` (the rule above, default) or ``"fbk"`` (FBK's agents).
        prefix: ``"cache"`` (default) or ``"redecode"`` (FBK's agents), greedy decoding only.
    """

    frames: int = 4
    layer: int | None = None
    heads: tuple[int, ...] | None = None
    compat: str = "paper"
    prefix: str = "cache"
    name: ClassVar[str] = "alignatt"
    needs_attn: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check(isinstance(self.frames, int) and self.frames >= 1, "frames", "must be an integer >= 1", self.frames)
        _check_layer_heads(self.layer, self.heads)
        _check_compat(self.compat, self.prefix)

    def decide(self, st: PolicyState) -> int:
        """Count of leading candidates whose most attended frame lies before the last ``frames``."""
        attn, s = _attention_view(st.attn, st.n_states, self.compat)
        if s == 0:
            return 0
        n = 0
        for row in attn:
            if int(row.argmax()) >= s - self.frames:
                break
            n += 1
        return n


@dataclass(frozen=True)
class EDAttPolicy(Policy):
    """EDAtt, encoder-decoder attention (Papi, Negri, Turchi, ACL 2023, "Attention as a Guide for
    Simultaneous Speech Translation", eq. 1).

    Rule: WRITE the candidate y_i if ``sum_{s = S - lambda}^{S - 1} A(y_i, s) < alpha`` (the attention
    mass on the last lambda received frames is below alpha), else READ. ``A`` as in AlignAtt.
    ``compat="fbk"``: FBK's agent: the last received frame's attention is dropped and each token's
    remaining row is L2-normalised (``F.normalize``, so its squares sum to 1, not its values) before the
    sum over the last lambda of the S - 1 frames is compared with alpha (READ when ``S = 1``).

    Attributes:
        alpha: threshold in (0, 1] (FBK's ``--attn-threshold``); larger = lower latency.
        frames: lambda >= 1 (FBK's ``--frame-num``).
        layer: 0-based decoder layer (FBK's ``--extract-attn-from-layer``); None = ``L // 2``.
        heads: 0-based attention heads averaged; None = all.
        compat: ``"paper"`` (the rule above, default) or ``"fbk"`` (FBK's agents).
        prefix: ``"cache"`` (default) or ``"redecode"``, as in :class:`AlignAttPolicy`.
    """

    alpha: float = 0.2
    frames: int = 2
    layer: int | None = None
    heads: tuple[int, ...] | None = None
    compat: str = "paper"
    prefix: str = "cache"
    name: ClassVar[str] = "edatt"
    needs_attn: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check(0.0 < float(self.alpha) <= 1.0, "alpha", "must be in (0, 1]", self.alpha)
        _check(isinstance(self.frames, int) and self.frames >= 1, "frames", "must be an integer >= 1", self.frames)
        _check_layer_heads(self.layer, self.heads)
        _check_compat(self.compat, self.prefix)

    def decide(self, st: PolicyState) -> int:
        """Count of leading candidates whose attention on the last ``frames`` states is below ``alpha``."""
        attn, s = _attention_view(st.attn, st.n_states, self.compat)
        if s == 0:
            return 0
        if self.compat == "fbk":
            attn = torch.nn.functional.normalize(attn.float(), dim=-1)
        lo = max(0, s - self.frames)
        n = 0
        for row in attn:
            if float(row[lo:].sum()) >= self.alpha:
                break
            n += 1
        return n


def _common_prefix(seqs: list[list[int]]) -> int:
    n = min(len(s) for s in seqs)
    for j in range(n):
        t = seqs[0][j]
        if any(s[j] != t for s in seqs[1:]):
            return j
    return n


@dataclass(frozen=True)
class LocalAgreementPolicy(Policy):
    """Local agreement LA-n (Liu, Spanakis, Niehues, Interspeech 2020, "Low-Latency Sequence-to-Sequence
    Speech Recognition and Translation by Partial Hypothesis Selection"; Polák et al., IWSLT 2022).

    After each new source segment the continuation of the written prefix is re-decoded (greedy or
    beam) over everything received. Rule: WRITE the longest common prefix of the last n full
    hypotheses (this chunk's and those of the n-1 chunks before, Polák et al. 2022), beyond what is
    written. A chunk whose continuation the length cap cut has no hypothesis, so nothing agrees with it:
    the chunk after it READs too (``PolicyState.history`` starts again).

    Attributes:
        n: hypotheses that must agree, >= 1 (LA-2 is the usual choice; LA-1 writes every hypothesis).
    """

    n: int = 2
    name: ClassVar[str] = "la"
    kind: ClassVar[str] = "hypothesis"

    def __post_init__(self) -> None:
        _check(isinstance(self.n, int) and self.n >= 1, "n", "must be an integer >= 1", self.n)

    def decide(self, st: PolicyState) -> int:
        """Length of the agreed prefix beyond ``st.written``."""
        cur = list(st.written) + list(st.candidates)
        hyps = [cur] + [list(h) for h in st.history[-(self.n - 1):]] if self.n > 1 else [cur]
        if len(hyps) < self.n:
            return 0
        return max(0, _common_prefix(hyps) - len(st.written))


@dataclass(frozen=True)
class HoldNPolicy(Policy):
    """hold-n (Liu, Spanakis, Niehues, Interspeech 2020; CMU's IWSLT 2023/2024 systems).

    After each new source segment the continuation is re-decoded (greedy or beam) over everything
    received. Rule: WRITE all but its last n tokens; a trailing EOS is stripped first (as FBK's and
    CMU's agents do), so n counts real tokens: n=1 on ``[5, 6, 7, EOS]`` writes ``[5, 6]``.

    Attributes:
        n: real tokens held back, >= 1.
    """

    n: int = 2
    name: ClassVar[str] = "holdn"
    kind: ClassVar[str] = "hypothesis"

    def __post_init__(self) -> None:
        _check(isinstance(self.n, int) and self.n >= 1, "n", "must be an integer >= 1", self.n)

    def decide(self, st: PolicyState) -> int:
        """``max(0, m - n)``, m = candidates without a trailing EOS."""
        m = len(st.candidates) - int(bool(st.candidates) and st.candidates[-1] == st.eos)
        return max(0, m - self.n)


@dataclass(frozen=True)
class CTCWaitKPolicy(Policy):
    """CTC wait-k: wait-k counted in source tokens recognised by the model's source-side CTC head.

    The CTC head is decoded greedily over the encoder states received so far (argmax per state, repeats
    merged, blanks removed, Graves et al. 2006); ``N`` is the running maximum, over the decisions of the
    utterance, of the number of source tokens recognised (a later greedy path can be shorter; ``N``
    never goes down). Rule: WRITE target token i once ``N >= k + i - 1``, or once the source is
    finished; every received state is visible. Needs a checkpoint with a CTC head
    (``src_vocab_size > 0``).

    Not StreamSpeech's rule (Zhang et al., ACL 2024, sec. 3.3): StreamSpeech counts the *target-side*
    CTC output (a non-autoregressive CTC decoder over the target vocabulary) and writes as many
    autoregressive tokens as that count allows, with a stride; this policy counts *source* tokens as a
    wait-k lag. ``ctc`` is a deprecated alias of this policy's name ``ctcwaitk``.

    Attributes:
        k: lagging in recognised source tokens, >= 1.
    """

    k: int = 3
    name: ClassVar[str] = "ctcwaitk"
    needs_ctc: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check(isinstance(self.k, int) and self.k >= 1, "k", "must be an integer >= 1", self.k)

    def ready(self, i: int, n_chunks: int, source_finished: bool, src_tokens: int = 0) -> bool:
        """``source_finished or src_tokens >= k + i - 1``."""
        return source_finished or src_tokens >= self.k + i - 1

    def decide(self, st: PolicyState) -> int:
        """WRITE the candidate when :meth:`ready`."""
        return int(self.ready(st.i, st.n_chunks, st.source_finished, st.src_tokens))


def ctc_greedy_count(ctc_logits: torch.Tensor, blank: int = 0) -> int:
    """Source tokens in the greedy CTC path of ``ctc_logits (S, V_src)``: argmax per state, repeats
    merged, ``blank`` removed (Graves et al. 2006)."""
    if ctc_logits.numel() == 0:
        return 0
    best = ctc_logits.argmax(-1)
    keep = torch.ones_like(best, dtype=torch.bool)
    keep[1:] = best[1:] != best[:-1]
    return int(((best != blank) & keep).sum())
