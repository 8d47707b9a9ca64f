"""Batch (full-sequence) decoders over an encoded batch.

* :func:`greedy_waitk_decode`: masked greedy wait-k decoding of several languages jointly; token i
  attends encoder chunks ``1..min(k+i-1, n_chunks)`` (the training mask). On a chunk-causal model it
  yields exactly the tokens of the streaming decoder (:class:`mmst.simultaneous.StreamingTranslator`).
  Used by validation. ``waitk=None`` = offline greedy. Async unified models are decoded
  element by element in emission order (one shared cache), matching their training mask.
* :func:`beam_search` / :func:`decode_offline`: full-sentence beam search (the ``--offline`` quality
  upper bound), fairseq-style scoring ``sum log p / len ** lenpen`` (length includes EOS).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mmst.models.encoder import EncoderOut
from mmst.models.masks import waitk_cross_mask


def max_lengths(enc_lengths: torch.Tensor, max_len_a: float, max_len_b: int) -> torch.Tensor:
    """Per-utterance cap on generated tokens (EOS excluded): ``floor(a * S + b)``, S = encoder states."""
    return (enc_lengths.double() * float(max_len_a) + int(max_len_b)).floor().long().clamp(min=0)


def banned_ids(model, device) -> torch.Tensor:
    """``model.never_generate_ids()`` (pad, bos, ``<lang:xx>``) as a long tensor on ``device``, built
    once per decode so the per-step masking allocates no index tensor."""
    return torch.tensor(model.never_generate_ids(), dtype=torch.long, device=device)


def constrain_logits(logits: torch.Tensor, banned: torch.Tensor, eos: int, block_eos: bool) -> torch.Tensor:
    """Greedy-step logits with the never-generated ids at -inf, and EOS too while ``block_eos``
    (``--min-len``). ``logits``: ``(..., V)``; returns a new tensor (the model's output is untouched)."""
    lg = logits.index_fill(-1, banned, float("-inf"))
    if block_eos:
        lg[..., eos] = float("-inf")
    return lg


@torch.no_grad()
def greedy_waitk_decode(
    model,
    fbank: torch.Tensor | None,
    fbank_lengths: torch.Tensor | None,
    langs: list[str],
    waitk: int | None,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    min_len: int = 0,
    encoder_out: EncoderOut | None = None,
) -> dict[str, list[list[int]]]:
    """Masked greedy wait-k decoding of a batch, all ``langs`` jointly (encoder run once).

    Args:
        model: an ``MMSTModel`` (put in eval mode by the caller).
        fbank: ``(B, T, 80)`` (CMVN applied) and ``fbank_lengths (B,)``; ignored if ``encoder_out``.
        langs: target languages.
        waitk: k (chunks) or None for offline.
        max_len_a, max_len_b: cap ``floor(a * S_b + b)`` tokens per utterance (EOS excluded).
        min_len: EOS is suppressed before this many tokens (cost benchmarks of untrained models).
        encoder_out: precomputed encoder output.

    Returns:
        ``{lang: [[token ids without start token and EOS] per utterance]}``.

    Raises:
        ValueError: unknown language, ``waitk < 1``.
    """
    model.check_langs(langs)
    enc = encoder_out if encoder_out is not None else model.encode(fbank, fbank_lengths)
    if getattr(model, "is_async", False):
        return _greedy_async(model, enc, langs, waitk, max_len_a, max_len_b, min_len)
    b, s = enc.states.shape[:2]
    dev = enc.states.device
    caps = max_lengths(enc.lengths, max_len_a, max_len_b)
    n_steps = int(caps.max()) + 1 if b else 0
    eos = int(model.cfg.eos_id)
    banned = banned_ids(model, dev)
    state = model.init_decoder_state(list(langs), b)
    toks = {lang: torch.full((b, 1), model.start_token_id(lang), dtype=torch.long, device=dev) for lang in langs}
    out = {lang: torch.full((b, n_steps), eos, dtype=torch.long, device=dev) for lang in langs}
    done = {lang: torch.zeros(b, dtype=torch.bool, device=dev) for lang in langs}
    for t in range(n_steps):
        mask = waitk_cross_mask(1, enc.lengths, s, waitk, model.pre_decision_ratio, start=t + 1)
        logits = model.decoder_step(state, toks, enc.states, enc.padding_mask, mask)
        for lang in langs:
            lg = constrain_logits(logits[lang][:, -1], banned, eos, t < min_len)
            nxt = lg.argmax(-1)
            nxt = torch.where(caps <= t, torch.full_like(nxt, eos), nxt)
            nxt = torch.where(done[lang], torch.full_like(nxt, eos), nxt)
            out[lang][:, t] = nxt
            done[lang] |= nxt == eos
            toks[lang] = nxt[:, None]
        if all(bool(d.all()) for d in done.values()):
            break
    result = {}
    for lang in langs:
        rows = out[lang].tolist()
        result[lang] = [r[: r.index(eos)] if eos in r else r for r in rows]
    return result


def _greedy_async(model, enc: EncoderOut, langs, waitk, max_len_a, max_len_b, min_len):
    """Async unified model: feed elements in (t, j) order into one shared cache (see
    :mod:`mmst.models.unified`); language j's element i uses lag ``k + j * delta`` and predicts its
    token i+1. A row's language that ended (EOS or cap) keeps being fed but its elements are hidden."""
    b, s = enc.states.shape[:2]
    dev = enc.states.device
    caps = max_lengths(enc.lengths, max_len_a, max_len_b)
    eos = int(model.cfg.eos_id)
    banned = banned_ids(model, dev)
    delta = int(model.cfg.async_delta)
    order = sorted(langs, key=model.async_index)
    state = model.init_decoder_state(order, b)
    last = {lang: torch.full((b, 1), model.start_token_id(lang), dtype=torch.long, device=dev) for lang in order}
    out = {lang: [] for lang in order}
    done = {lang: torch.zeros(b, dtype=torch.bool, device=dev) for lang in order}
    t = 0
    while not all(bool(d.all()) for d in done.values()):
        for lang in order:
            p = t - model.async_index(lang) * delta
            if p < 0 or bool(done[lang].all()):
                continue
            lag = model.async_lag(lang, waitk)
            mask = waitk_cross_mask(1, enc.lengths, s, lag, model.pre_decision_ratio, start=p + 1)
            mask = mask & ~enc.padding_mask[:, None, :]
            lg = model.async_step(state, lang, last[lang], enc.states, mask, valid=~done[lang])[:, -1]
            lg = constrain_logits(lg, banned, eos, p < min_len)
            nxt = lg.argmax(-1)
            nxt = torch.where(caps <= p, torch.full_like(nxt, eos), nxt)
            nxt = torch.where(done[lang], torch.full_like(nxt, eos), nxt)
            out[lang].append(nxt)
            done[lang] |= nxt == eos
            last[lang] = nxt[:, None]
        t += 1
    result = {}
    for lang in langs:
        rows = torch.stack(out[lang], dim=1).tolist() if out[lang] else [[] for _ in range(b)]
        result[lang] = [r[: r.index(eos)] if eos in r else r for r in rows]
    return result


@torch.no_grad()
def beam_search(
    model,
    encoder_out: EncoderOut,
    lang: str,
    beam: int = 5,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    lenpen: float = 1.0,
) -> list[list[int]]:
    """Offline beam search for one language over an encoded batch.

    Hypotheses end with EOS (forced at the length cap ``floor(a * S_b + b)``); finished hypotheses are
    ranked by ``sum log p / (len + 1) ** lenpen``; search stops for an utterance once ``beam``
    hypotheses have finished (fairseq's default). pad, bos and ``<lang:xx>`` tags are never generated
    (``model.never_generate_ids()``). For an async
    unified model each language is searched on its own (with its language embedding, no
    cross-language context).

    Returns:
        ``[[token ids without start/EOS] per utterance]``. Raises ``ValueError`` for ``beam < 1``.
    """
    if beam < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    dec = model.decoder_for(lang)
    extra = model.decoder_extra_embed(lang) if hasattr(model, "decoder_extra_embed") else None
    b = encoder_out.states.size(0)
    dev = encoder_out.states.device
    eos = int(model.cfg.eos_id)
    banned = banned_ids(model, dev)
    states = encoder_out.states.repeat_interleave(beam, 0)
    padm = encoder_out.padding_mask.repeat_interleave(beam, 0)
    caps = max_lengths(encoder_out.lengths, max_len_a, max_len_b)
    force = caps.repeat_interleave(beam)
    state = dec.init_state()
    tok = torch.full((b * beam, 1), model.start_token_id(lang), dtype=torch.long, device=dev)
    scores = torch.full((b, beam), float("-inf"), device=dev)
    scores[:, 0] = 0.0
    hist = torch.zeros(b * beam, 0, dtype=torch.long, device=dev)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    done = [False] * b
    for t in range(int(caps.max()) + 1):
        lp = F.log_softmax(dec.step(tok, state, states, padm, extra_embed=extra)[:, -1].float(), dim=-1)
        lp.index_fill_(-1, banned, float("-inf"))
        at_cap = force <= t
        if bool(at_cap.any()):
            keep = lp[at_cap, eos].clone()
            lp[at_cap] = float("-inf")
            lp[at_cap, eos] = keep
        v = lp.size(-1)
        cand = (scores.reshape(-1, 1) + lp).view(b, beam * v)
        top_s, top_i = cand.topk(min(2 * beam, beam * v), dim=1)
        top_s, top_i = top_s.tolist(), top_i.tolist()
        new_scores = torch.full((b, beam), float("-inf"), device=dev)
        new_src = torch.zeros(b, beam, dtype=torch.long)
        new_tok = torch.full((b, beam), eos, dtype=torch.long)
        for bi in range(b):
            if done[bi]:
                continue
            n = 0
            for s_val, idx in zip(top_s[bi], top_i[bi]):
                if s_val == float("-inf"):
                    break
                src, ti = divmod(idx, v)
                if ti == eos:
                    if len(finished[bi]) < beam:
                        hyp = hist[bi * beam + src].tolist()
                        finished[bi].append((s_val / (len(hyp) + 1) ** lenpen, hyp))
                else:
                    new_scores[bi, n] = s_val
                    new_src[bi, n] = src
                    new_tok[bi, n] = ti
                    n += 1
                    if n == beam:
                        break
            if len(finished[bi]) >= beam or n == 0:
                done[bi] = True
        if all(done):
            break
        reorder = (torch.arange(b)[:, None] * beam + new_src).view(-1).to(dev)
        hist = torch.cat([hist[reorder], new_tok.view(-1, 1).to(dev)], dim=1)
        state.reorder(reorder, reorder_cross=False)  # cross K/V identical within an utterance's beams
        scores = new_scores
        tok = new_tok.view(-1, 1).to(dev)
    out = []
    for bi in range(b):
        if finished[bi]:
            out.append(max(finished[bi], key=lambda x: x[0])[1])
        else:
            out.append(hist[bi * beam].tolist())
    return out


@torch.no_grad()
def decode_offline(
    model,
    fbank: torch.Tensor,
    fbank_lengths: torch.Tensor,
    langs: list[str],
    beam: int = 5,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    lenpen: float = 1.0,
) -> dict[str, list[list[int]]]:
    """Full-sentence decoding (quality upper bound): encoder once, then beam search per language
    (``beam=1``: joint greedy). Returns ``{lang: [[ids] per utterance]}``; raises ``ValueError`` for
    unknown languages."""
    model.check_langs(langs)
    enc = model.encode(fbank, fbank_lengths)
    if beam == 1:
        return greedy_waitk_decode(model, None, None, langs, None, max_len_a, max_len_b, encoder_out=enc)
    return {lang: beam_search(model, enc, lang, beam, max_len_a, max_len_b, lenpen) for lang in langs}
