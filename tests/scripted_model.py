"""A scripted model for known-answer policy tests: no weights, the decoder replays a table.

:class:`ScriptedModel` has the interface :class:`mmst.simultaneous.StreamingTranslator` uses (one
target language, separate decoders). Its decoder's next-token distribution and cross-attention are
``script(prefix, s)``: ``prefix`` = the target tokens before the predicted one (start token excluded),
``s`` = encoder states the decoder may attend (the visible prefix); with ``windowed=True`` it is
``script(prefix, lo, hi)``, the visible states ``lo .. hi - 1`` (absolute; a restarted sentence's window). The source-CTC head reads its
greedy path from ``ctc_paths[S]`` (S = states received), so a count that goes down can be scripted.
:class:`ScriptedFrontEnd` replaces the audio front end: each ``accept_audio`` call adds one chunk of
``ratio`` states (``chunk_ms`` of source), whatever the samples.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from torch import nn

BOS, PAD, EOS, START = 0, 1, 2, 3
V = 64


class ScriptedState:
    """The decoder state: every input column per row, for the prefix each query sees."""

    def __init__(self) -> None:
        self.cols = torch.zeros(0, 0, dtype=torch.long)  # (B, L)
        self.num_tokens = 0
        self.cross_len = 0
        self.cross_attn: dict[int, torch.Tensor] = {}

    def invalidate_cross(self) -> None:
        self.cross_len = 0

    def reorder(self, index: torch.Tensor, reorder_cross: bool = True) -> None:
        self.cols = self.cols[index]


class ScriptedDecoder(nn.Module):
    """``step`` with the signature of :meth:`mmst.models.decoder.TransformerDecoder.step`; logits and
    attention from ``script(prefix, s) -> ({token: probability}, attention (s,))`` (unlisted tokens get
    probability 0, i.e. logit -inf)."""

    def __init__(self, script, heads: int = 1, windowed: bool = False) -> None:
        super().__init__()
        self.script = script
        self.heads = heads
        self.windowed = windowed

    def init_state(self) -> ScriptedState:
        return ScriptedState()

    def step(self, tokens, state, enc_states, enc_padding_mask=None, cross_attn_mask=None, self_attn_mask=None,
             positions=None, extra_embed=None, attn_layers=()):
        b, n = tokens.shape
        s_all = enc_states.size(1)
        cols = tokens if state.cols.numel() == 0 else torch.cat([state.cols.expand(b, -1), tokens], 1)
        l_prev = cols.size(1) - n
        logits = torch.full((b, n, V), -math.inf)
        attn = torch.zeros(b, self.heads, n, s_all)
        for r in range(b):
            for q in range(n):
                if self_attn_mask is not None:
                    valid = self_attn_mask[min(r, self_attn_mask.size(0) - 1), min(q, self_attn_mask.size(1) - 1)]
                    valid = valid[: l_prev + q + 1].clone()
                    valid[l_prev + q] = True
                else:
                    valid = torch.ones(l_prev + q + 1, dtype=torch.bool)
                prefix = [int(t) for t, v in zip(cols[r, : l_prev + q + 1], valid) if v and int(t) not in (PAD,)]
                prefix = prefix[1:]  # drop the start token
                lo = 0
                if cross_attn_mask is not None:
                    m = cross_attn_mask[min(r, cross_attn_mask.size(0) - 1), min(q, cross_attn_mask.size(1) - 1)]
                    s = int(m.sum())
                    lo = int(m.int().argmax()) if s else 0
                elif enc_padding_mask is not None:
                    s = int((~enc_padding_mask[min(r, enc_padding_mask.size(0) - 1)]).sum())
                else:
                    s = s_all
                if self.windowed:  # absolute state indices: the front end writes each state's index in feature 0
                    lo_abs = int(enc_states[0, lo, 0]) if s else 0
                    probs, row = self.script(tuple(prefix), lo_abs, lo_abs + s)
                else:
                    probs, row = self.script(tuple(prefix), s)
                for tok, p in probs.items():
                    logits[r, q, tok] = math.log(p)
                attn[r, :, q, lo:lo + s] = torch.as_tensor(row, dtype=torch.float32)
        state.cols = cols
        state.num_tokens += n
        state.cross_len = s_all
        state.cross_attn = {li: attn for li in attn_layers}
        return logits


class ScriptedCTC(nn.Module):
    """Source CTC logits ``(S, V_src)``: one-hot of ``paths[S]`` (blank = 0)."""

    def __init__(self, paths: dict[int, list[int]], v_src: int = 16) -> None:
        super().__init__()
        self.paths, self.v_src = paths, v_src

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        path = self.paths[x.size(0)]
        return torch.nn.functional.one_hot(torch.tensor(path), self.v_src).float()


class ScriptedModel(nn.Module):
    """One language ``de``, separate decoders, ``ratio`` states per chunk (see the module docstring)."""

    arch = "separate"
    is_async = False

    def __init__(self, script, ratio: int = 2, ctc_paths: dict[int, list[int]] | None = None,
                 windowed: bool = False) -> None:
        super().__init__()
        self.cfg = SimpleNamespace(eos_id=EOS, pad_id=PAD, bos_id=BOS, decoder_layers=2, attention_heads=1,
                                   encoder_attention="offline", d_model=4)
        self.tgt_langs = ["de"]
        self.pre_decision_ratio = ratio
        self.dec = ScriptedDecoder(script, windowed=windowed)
        # what the translator's own audio front end reads when it is built (ScriptedFrontEnd replaces it)
        self.encoder = SimpleNamespace(input_kind="fbank")
        self.ctc_proj = ScriptedCTC(ctc_paths) if ctc_paths is not None else None
        self.dummy = nn.Parameter(torch.zeros(1))

    def check_langs(self, langs) -> None:
        bad = [lang for lang in langs if lang not in self.tgt_langs]
        if bad:
            raise ValueError(f"unknown languages {bad}")

    def decoder_for(self, lang: str) -> ScriptedDecoder:
        return self.dec

    def init_decoder_state(self, langs, b):
        return None

    def start_token_id(self, lang: str) -> int:
        return START

    def never_generate_ids(self) -> list[int]:
        return [BOS, PAD, START]


class ScriptedFrontEnd:
    """Front end of :class:`ScriptedModel`: one chunk of ``ratio`` states per ``accept_audio`` call."""

    sample_rate = 16000

    def __init__(self, ratio: int = 2, chunk_ms: float = 320.0) -> None:
        self.ratio, self.chunk_ms = ratio, chunk_ms
        self.reset()

    def reset(self) -> None:
        self.chunks, self.finished, self.version = 0, False, 0

    def accept_audio_steps(self, samples, finished: bool = False):
        self.chunks += 1
        self.finished = finished
        return
        yield

    @property
    def num_states(self) -> int:
        return self.chunks * self.ratio

    @property
    def num_chunks(self) -> int:
        return self.chunks

    @property
    def source_ms(self) -> float:
        return self.chunks * self.chunk_ms

    def states(self) -> torch.Tensor:
        st = torch.zeros(1, self.num_states, 4)
        st[0, :, 0] = torch.arange(self.num_states, dtype=torch.float32)
        return st


class SampledFrontEnd(ScriptedFrontEnd):
    """Front end of :class:`ScriptedModel` that counts audio: one state per ``state_samples`` received
    (complete chunks of ``ratio`` states until the source is finished, then every whole state), as the
    real front end; a long-form driver can then feed it any slices."""

    def __init__(self, ratio: int = 2, state_samples: int = 640) -> None:
        self.state_samples = state_samples
        super().__init__(ratio, ratio * state_samples * 1000.0 / self.sample_rate)

    def reset(self) -> None:
        super().reset()
        self.num_samples = 0

    def accept_audio_steps(self, samples, finished: bool = False):
        if self.finished:
            raise ValueError("source already finished")
        self.num_samples += len(samples)
        self.finished = finished
        return
        yield

    @property
    def num_states(self) -> int:
        n = self.num_samples // self.state_samples
        return n if self.finished else n // self.ratio * self.ratio

    @property
    def num_chunks(self) -> int:
        return -(-self.num_states // self.ratio)

    @property
    def source_ms(self) -> float:
        return self.num_samples * 1000.0 / self.sample_rate


def stream(model, n_chunks: int = 6, after_chunk=None, **translator_kw):
    """Stream ``n_chunks`` chunks through a translator of ``model``; ``(tokens, delays)`` of ``de``.
    ``after_chunk(c, translator)`` is called after chunk c (1-based)."""
    import numpy as np

    from mmst.simultaneous import StreamingTranslator

    tr = StreamingTranslator(model, None, ["de"], **translator_kw)
    tr.frontend = ScriptedFrontEnd(model.pre_decision_ratio)
    tr.reset()
    for c in range(1, n_chunks + 1):
        tr.accept_audio(np.zeros(1, np.float32), finished=c == n_chunks)
        if after_chunk is not None:
            after_chunk(c, tr)
    return tr.tokens["de"], tr.token_delays["de"]
