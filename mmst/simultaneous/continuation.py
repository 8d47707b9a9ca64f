"""Re-decoding the continuation of a written prefix (local agreement, hold-n, and AlignAtt/EDAtt with
beam search), one language, one utterance, over the encoder states received so far.

* :func:`decode_continuation`: the prefix ``[start] + written`` is forced in one decoder call, then
  greedy (``beam=1``) or beam search continues it; fairseq-style scoring ``sum log p / (len + 1) **
  lenpen`` over the new tokens; pad, bos and ``<lang:xx>`` are never generated; EOS is forced at the
  length cap. The written prefix is never revised.
* :func:`forced_cross_attention`: one teacher-forced call over prefix + continuation returning the
  head-averaged cross-attention of each continuation token (the attention of the decoder position
  that predicts it); :func:`forced_cross_attention_rows`: the same for several languages' sentences,
  one call for a unified model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mmst.models.masks import causal_mask


def _decoder(model, lang: str):
    dec = model.decoder_for(lang)
    extra = model.decoder_extra_embed(lang) if hasattr(model, "decoder_extra_embed") else None
    return dec, extra


@torch.no_grad()
def decode_continuation(
    model,
    lang: str,
    written: list[int],
    states: torch.Tensor,
    max_new: int,
    banned: torch.Tensor,
    beam: int = 1,
    lenpen: float = 1.0,
    min_new: int = 0,
) -> tuple[list[int], list[float]]:
    """Best continuation of ``written`` and the log-probability of each of its tokens.

    Args:
        model: a sync ``MMSTModel``.
        lang: target language.
        written: token ids already written (EOS excluded).
        states: ``(1, S, D)`` encoder states received.
        max_new: at most this many new tokens before EOS (EOS forced after them).
        banned: ids never generated (:func:`mmst.simultaneous.search.banned_ids`).
        beam: beam size (1 = greedy).
        lenpen: length penalty exponent.
        min_new: EOS is suppressed for the first ``min_new`` new tokens.

    Returns:
        ``(tokens, logprobs)``; ``tokens`` ends with EOS when the hypothesis ended.

    Raises:
        ValueError: ``beam < 1``.
    """
    if beam < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    dec, extra = _decoder(model, lang)
    dev = states.device
    eos = int(model.cfg.eos_id)
    st = dec.init_state()
    x = torch.tensor([[model.start_token_id(lang)] + list(written)], device=dev)
    lp = F.log_softmax(dec.step(x, st, states, extra_embed=extra)[:, -1].float(), dim=-1)  # (1, V)
    hyps: list[list[int]] = [[]]
    hyp_lp: list[list[float]] = [[]]
    scores = torch.zeros(1, device=dev)
    finished: list[tuple[float, list[int], list[float]]] = []
    for t in range(max(0, max_new) + 1):
        lp = lp.index_fill(-1, banned, float("-inf"))
        if t < min_new and t < max_new:
            lp[:, eos] = float("-inf")
        if t >= max_new:
            keep = lp[:, eos].clone()
            lp = torch.full_like(lp, float("-inf"))
            lp[:, eos] = keep
        v = lp.size(-1)
        cand = (scores[:, None] + lp).view(-1)
        top_s, top_i = cand.topk(min(2 * beam, cand.numel()))
        new_src, new_tok, new_scores = [], [], []
        for s_val, idx in zip(top_s.tolist(), top_i.tolist()):
            if s_val == float("-inf"):
                break
            src, tok = divmod(idx, v)
            tok_lp = float(lp[src, tok])
            if tok == eos:
                if len(finished) < beam:
                    finished.append((s_val / (len(hyps[src]) + 1) ** lenpen, hyps[src] + [eos], hyp_lp[src] + [tok_lp]))
            else:
                new_src.append(src)
                new_tok.append(tok)
                new_scores.append(s_val)
                if len(new_src) == beam:
                    break
        if len(finished) >= beam or not new_src:
            break
        hyps = [hyps[s] + [tk] for s, tk in zip(new_src, new_tok)]
        hyp_lp = [hyp_lp[s] + [float(lp[s, tk])] for s, tk in zip(new_src, new_tok)]
        index = torch.tensor(new_src, device=dev)
        if beam > 1:
            st.reorder(index, reorder_cross=False)
        scores = torch.tensor(new_scores, device=dev)
        tok_in = torch.tensor(new_tok, device=dev)[:, None]
        lp = F.log_softmax(dec.step(tok_in, st, states, extra_embed=extra)[:, -1].float(), dim=-1)
    if finished:
        _, toks, lps = max(finished, key=lambda f: f[0])
        return toks, lps
    return hyps[0], hyp_lp[0]


@torch.no_grad()
def forced_cross_attention(
    model, lang: str, written: list[int], continuation: list[int], states: torch.Tensor, layer: int,
    heads: tuple[int, ...] | None = None,
) -> torch.Tensor:
    """Cross-attention ``(len(continuation), S)`` of decoder ``layer``, averaged over ``heads`` (default
    all), for each continuation token, from one teacher-forced call over
    ``[start] + written + continuation[:-1]``."""
    if not continuation:
        return torch.zeros(0, states.size(1), device=states.device)
    dec, extra = _decoder(model, lang)
    st = dec.init_state()
    x = torch.tensor([[model.start_token_id(lang)] + list(written) + list(continuation[:-1])], device=states.device)
    dec.step(x, st, states, extra_embed=extra, attn_layers=(layer,))
    a = st.cross_attn[layer][0, :, len(written):]  # (H, len(continuation), S)
    return (a if heads is None else a[list(heads)]).mean(dim=0)


def _layer_attention(dec, tokens: torch.Tensor, states: torch.Tensor, layer: int, cross_mask: torch.Tensor) -> torch.Tensor:
    """Teacher-forced cross-attention probabilities ``(B, H, L, S)`` of ``layer`` of the Transformer decoder
    ``dec`` for inputs ``tokens (B, L)`` from position 0 over ``states (1, S, D)``, ``cross_mask (B, L, S)``
    True = attend: the layers up to ``layer`` only (those above and the output projection cannot change it),
    the values ``dec.step(tokens, fresh state, states, attn_layers=(layer,))`` stores."""
    n = tokens.size(1)
    x = dec.embed(tokens, torch.arange(n, device=tokens.device)[None])
    self_mask = causal_mask(n, device=tokens.device)[None]
    sink: list = []
    for li in range(layer + 1):
        mod = dec.layers[li]
        x, _ = mod(x, mod.encoder_attn.project_kv(states), self_mask, cross_mask, None, sink if li == layer else None)
    return sink[0]


@torch.no_grad()
def forced_cross_attention_rows(
    model, rows: dict[str, list[int]], states: torch.Tensor, windows: dict[str, tuple[int, int]], layers: dict[str, int],
) -> dict[str, torch.Tensor]:
    """:func:`forced_cross_attention` of several languages' written sentences over one utterance's states,
    each over its own window of states, averaged over all heads: ``{lang: (len(rows[lang]), hi - lo)}``, the
    attention of the position that predicts each token of ``rows[lang]`` (inputs ``[start] + rows[lang][:-1]``)
    over states ``[lo, hi) = windows[lang]`` of ``states`` ``(1, S, D)``.

    A sync unified model computes the languages that share a layer in ONE call of the decoder layers up to
    that one (rows right-padded: with causal self-attention a row's padding changes nothing before it; each
    row's cross-attention masked to its window, so it is normalised over that window as a call on the window
    alone); other models, one :func:`forced_cross_attention` per language. Languages with no tokens get ``(0, hi - lo)``.
    """
    dev = states.device
    out = {lang: torch.zeros(0, hi - lo, device=dev) for lang, (lo, hi) in windows.items() if not rows[lang]}
    todo = [lang for lang in rows if rows[lang]]
    unified = getattr(model, "arch", None) == "unified" and _decoder(model, todo[0])[1] is None if todo else False
    if not unified:
        for lang in todo:
            lo, hi = windows[lang]
            out[lang] = forced_cross_attention(model, lang, [], rows[lang], states[:, lo:hi], layers[lang])
        return out
    pad = int(model.cfg.pad_id)
    for layer in sorted({layers[lang] for lang in todo}):
        group = [lang for lang in todo if layers[lang] == layer]
        width = max(len(rows[lang]) for lang in group)
        x = torch.tensor([[model.start_token_id(lang)] + rows[lang][:-1] + [pad] * (width - len(rows[lang]))
                          for lang in group], device=dev)
        lo_all = min(windows[lang][0] for lang in group)
        hi_all = max(windows[lang][1] for lang in group)
        ar = torch.arange(lo_all, hi_all, device=dev)[None, :]
        lo = torch.tensor([windows[lang][0] for lang in group], device=dev)[:, None]
        hi = torch.tensor([windows[lang][1] for lang in group], device=dev)[:, None]
        mask = ((ar >= lo) & (ar < hi))[:, None, :].expand(-1, width, -1)  # (rows, L, S')
        a = _layer_attention(model.decoder_for(group[0]), x, states[:, lo_all:hi_all], layer, mask).mean(dim=1)
        for r, lang in enumerate(group):
            w_lo, w_hi = windows[lang]
            out[lang] = a[r, : len(rows[lang]), w_lo - lo_all: w_hi - lo_all]
    return out


@torch.no_grad()
def decode_continuations_greedy(
    model,
    written: dict[str, list[int]],
    states: torch.Tensor,
    max_new: dict[str, int],
    banned: torch.Tensor,
    min_new: dict[str, int] | None = None,
) -> dict[str, tuple[list[int], list[float]]]:
    """Greedy :func:`decode_continuation` of several languages at once: for a unified model ONE decoder
    call per step, rows = languages (prefixes left-padded; pads masked out of self-attention and
    positions counted per row); for a separate model, one language at a time.

    Args:
        written: ``{lang: written token ids}``.
        states: ``(1, S, D)`` encoder states received.
        max_new: ``{lang: cap on new tokens}``; ``min_new``: ``{lang: EOS suppressed before}``.

    Returns:
        ``{lang: (tokens, logprobs)}`` as :func:`decode_continuation` with ``beam=1`` (same tokens).
    """
    langs = list(written)
    min_new = min_new or {}
    if model.arch != "unified" or getattr(model, "is_async", False) or len(langs) == 1:
        return {lang: decode_continuation(model, lang, written[lang], states, max_new[lang], banned,
                                          min_new=min_new.get(lang, 0)) for lang in langs}
    dec = model.decoder
    dev = states.device
    eos, pad = int(model.cfg.eos_id), int(model.cfg.pad_id)
    seqs = [[model.start_token_id(lang)] + list(written[lang]) for lang in langs]
    n = max(len(x) for x in seqs)
    n_pad = [n - len(x) for x in seqs]
    toks = torch.tensor([[pad] * p + x for p, x in zip(n_pad, seqs)], device=dev)  # (R, n)
    valid = torch.tensor([[False] * p + [True] * len(x) for p, x in zip(n_pad, seqs)], device=dev)  # (R, n)
    pos = (torch.arange(n, device=dev)[None, :] - torch.tensor(n_pad, device=dev)[:, None]).clamp(min=0)
    causal = torch.ones(n, n, dtype=torch.bool, device=dev).tril()
    mask = causal[None] & valid[:, None, :]
    mask = mask | torch.eye(n, dtype=torch.bool, device=dev)[None]  # a pad row attends itself (no empty row)
    st = dec.init_state()
    logits = dec.step(toks, st, states, None, None, mask, pos)[:, -1]  # (R, V)
    next_pos = torch.tensor([len(x) for x in seqs], device=dev)
    out: dict[str, tuple[list[int], list[float]]] = {lang: ([], []) for lang in langs}
    live = [True] * len(langs)
    t = 0
    while True:
        lp = torch.log_softmax(logits.float(), dim=-1).index_fill(-1, banned, float("-inf"))
        nxt = []
        for r, lang in enumerate(langs):
            if not live[r]:
                nxt.append(eos)
                continue
            row = lp[r].clone()
            if t >= max_new[lang]:
                tok = eos
            else:
                if t < min_new.get(lang, 0):
                    row[eos] = float("-inf")
                tok = int(row.argmax())
            out[lang][0].append(tok)
            out[lang][1].append(float(lp[r, tok]))
            if tok == eos:
                live[r] = False
            nxt.append(tok)
        if not any(live):
            break
        valid = torch.cat([valid, torch.tensor(live, device=dev)[:, None]], dim=1)
        step_mask = valid.clone()
        step_mask[:, -1] = True
        logits = dec.step(torch.tensor(nxt, device=dev)[:, None], st, states, None, None, step_mask[:, None, :],
                          next_pos[:, None])[:, -1]
        next_pos = next_pos + 1
        t += 1
    return out


@torch.no_grad()
def decode_continuations_beam(
    model,
    written: dict[str, list[int]],
    states: torch.Tensor,
    max_new: dict[str, int],
    banned: torch.Tensor,
    beam: int,
    lenpen: float = 1.0,
    min_new: dict[str, int] | None = None,
) -> dict[str, tuple[list[int], list[float]]]:
    """Beam :func:`decode_continuation` of several languages at once: for a unified model ONE decoder
    call per step over ``languages x beam`` rows (prefixes left-padded and masked as in
    :func:`decode_continuations_greedy`); for a separate model, one language at a time. Each language's
    search is the one of :func:`decode_continuation` (same scoring, same stopping rule).

    Returns:
        ``{lang: (tokens, logprobs)}``.

    Raises:
        ValueError: ``beam < 1``.
    """
    if beam < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    langs = list(written)
    min_new = min_new or {}
    if model.arch != "unified" or getattr(model, "is_async", False) or len(langs) == 1:
        return {lang: decode_continuation(model, lang, written[lang], states, max_new[lang], banned, beam=beam,
                                          lenpen=lenpen, min_new=min_new.get(lang, 0)) for lang in langs}
    dec = model.decoder
    dev = states.device
    eos, pad = int(model.cfg.eos_id), int(model.cfg.pad_id)
    nl, b = len(langs), beam
    seqs = [[model.start_token_id(lang)] + list(written[lang]) for lang in langs]
    n = max(len(x) for x in seqs)
    n_pad = [n - len(x) for x in seqs]
    toks = torch.tensor([[pad] * p + x for p, x in zip(n_pad, seqs)], device=dev)  # (R, n)
    valid = torch.tensor([[False] * p + [True] * len(x) for p, x in zip(n_pad, seqs)], device=dev)
    pos = (torch.arange(n, device=dev)[None, :] - torch.tensor(n_pad, device=dev)[:, None]).clamp(min=0)
    mask = (torch.ones(n, n, dtype=torch.bool, device=dev).tril()[None] & valid[:, None, :]) | torch.eye(
        n, dtype=torch.bool, device=dev)[None]
    st = dec.init_state()
    logits = dec.step(toks, st, states, None, None, mask, pos)[:, -1]  # (R, V)
    expand = torch.arange(nl, device=dev).repeat_interleave(b)  # rows r * B + j
    st.reorder(expand, reorder_cross=False)
    valid = valid[expand]
    logits = logits[expand]
    next_pos = torch.tensor([len(x) for x in seqs], device=dev).repeat_interleave(b)
    scores = torch.full((nl, b), float("-inf"), device=dev)
    scores[:, 0] = 0.0
    hyps = [[[] for _ in range(b)] for _ in range(nl)]
    hyp_lp = [[[] for _ in range(b)] for _ in range(nl)]
    finished: list[list[tuple[float, list[int], list[float]]]] = [[] for _ in range(nl)]
    done = [False] * nl
    t = 0
    while True:
        lp = torch.log_softmax(logits.float(), dim=-1).index_fill(-1, banned, float("-inf")).view(nl, b, -1)
        v = lp.size(-1)
        index = torch.arange(nl * b, device=dev)
        next_tok = torch.full((nl * b,), eos, dtype=torch.long, device=dev)
        live_rows = torch.zeros(nl * b, dtype=torch.bool, device=dev)
        for r, lang in enumerate(langs):
            if done[r]:
                continue
            lr = lp[r].clone()
            if t < min_new.get(lang, 0) and t < max_new[lang]:
                lr[:, eos] = float("-inf")
            if t >= max_new[lang]:
                keep = lr[:, eos].clone()
                lr = torch.full_like(lr, float("-inf"))
                lr[:, eos] = keep
            cand = (scores[r][:, None] + lr).view(-1)
            top_s, top_i = cand.topk(min(2 * b, cand.numel()))
            new = []
            for s_val, idx in zip(top_s.tolist(), top_i.tolist()):
                if s_val == float("-inf"):
                    break
                src, tok = divmod(idx, v)
                tok_lp = float(lr[src, tok])
                if tok == eos:
                    if len(finished[r]) < b:
                        finished[r].append((s_val / (len(hyps[r][src]) + 1) ** lenpen, hyps[r][src] + [eos],
                                            hyp_lp[r][src] + [tok_lp]))
                else:
                    new.append((src, tok, s_val, tok_lp))
                    if len(new) == b:
                        break
            if len(finished[r]) >= b or not new:
                done[r] = True
                continue
            hyps[r] = [hyps[r][s] + [tk] for s, tk, _, _ in new] + [[] for _ in range(b - len(new))]
            hyp_lp[r] = [hyp_lp[r][s] + [lp_] for s, _, _, lp_ in new] + [[] for _ in range(b - len(new))]
            row_scores = [sv for _, _, sv, _ in new] + [float("-inf")] * (b - len(new))
            scores[r] = torch.tensor(row_scores, device=dev)
            for j, (s, tk, _, _) in enumerate(new):
                index[r * b + j] = r * b + s
                next_tok[r * b + j] = tk
                live_rows[r * b + j] = True
        if all(done):
            break
        st.reorder(index, reorder_cross=False)
        valid = torch.cat([valid[index], live_rows[:, None]], dim=1)
        step_mask = valid.clone()
        step_mask[:, -1] = True
        next_pos = next_pos[index]
        logits = dec.step(next_tok[:, None], st, states, None, None, step_mask[:, None, :], next_pos[:, None])[:, -1]
        next_pos = next_pos + 1
        t += 1
    out = {}
    for r, lang in enumerate(langs):
        if finished[r]:
            _, tk, lps = max(finished[r], key=lambda f: f[0])
            out[lang] = (tk, lps)
        else:
            out[lang] = (hyps[r][0], hyp_lp[r][0])
    return out
