"""Attention masks. Convention everywhere: boolean, ``True`` = may attend (as in
``torch.nn.functional.scaled_dot_product_attention``); padding masks are ``True`` = pad.

Units: encoder states are 40 ms each (4x conv subsampling of 10 ms frames); a pre-decision chunk is
``R`` encoder states (``R = pre_decision_ratio``; chunk j, 1-based, covers states ``[(j-1)R, jR)``).

Rules implemented here:

* chunk-causal encoder self-attention (Ma et al. 2020, SimulST, fixed pre-decision; blockwise
  causal as in streaming Transformers): state s may attend state s' iff ``s' // R <= s // R``
  (its own chunk and all earlier chunks), and s' is not padding.
* wait-k cross-attention (Ma et al. 2019, STACL, eq. for g(i) = k + i - 1; applied over pre-decision
  chunks as in Ma et al. 2020): target token i (1-based) may attend encoder chunks
  ``1 .. min(k + i - 1, n_chunks)``, i.e. states ``s < min((k + i - 1) * R, S_b)`` where ``S_b`` is
  the valid encoder length of utterance b. ``k=None`` = offline (all valid states).
  Multi-k training (Elbayad et al. 2020) samples one k per batch; the mask only sees that k.
* causal decoder self-attention: token i may attend tokens ``1..i``.
"""

from __future__ import annotations

import torch


def lengths_to_padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """``(B,)`` lengths -> ``(B, max_len)`` bool padding mask, ``True`` = pad."""
    max_len = int(lengths.max().item()) if max_len is None else int(max_len)
    return torch.arange(max_len, device=lengths.device)[None, :] >= lengths[:, None]


def chunk_causal_mask(
    n_query: int,
    n_key: int,
    ratio: int,
    query_offset: int = 0,
    device: torch.device | None = None,
    left_chunks: int = 0,
    key_offset: int = 0,
) -> torch.Tensor:
    """Chunk-causal self-attention mask ``(n_query, n_key)``, ``True`` = may attend.

    Query q has global state index ``query_offset + q``; key s has global index ``key_offset + s``.
    Allowed iff ``s // ratio <= (query_offset + q) // ratio`` (own pre-decision chunk and all earlier
    ones) and, when ``left_chunks > 0``, ``s // ratio >= q // ratio - left_chunks`` (limited left
    context). ``query_offset``/``key_offset`` serve incremental encoding (new states attend cached ones).
    """
    q = (torch.arange(n_query, device=device) + query_offset)[:, None] // ratio
    k = (torch.arange(n_key, device=device) + key_offset)[None, :] // ratio
    m = k <= q
    if left_chunks > 0:
        m = m & (k >= q - left_chunks)
    return m


def causal_mask(n_query: int, n_key: int | None = None, device: torch.device | None = None) -> torch.Tensor:
    """Causal mask ``(n_query, n_key)``: query q (the last ``n_query`` of ``n_key`` positions) attends
    keys ``<= n_key - n_query + q``. With ``n_key=None`` it is the square lower-triangular mask."""
    n_key = n_query if n_key is None else n_key
    off = n_key - n_query
    q = torch.arange(n_query, device=device) + off
    k = torch.arange(n_key, device=device)
    return k[None, :] <= q[:, None]


def waitk_num_states(
    token_index: torch.Tensor, k: int, ratio: int, enc_lengths: torch.Tensor
) -> torch.Tensor:
    """Number of encoder states visible to target tokens under wait-k.

    Args:
        token_index: ``(L,)`` or broadcastable long tensor of 1-based target positions i.
        k: lagging in pre-decision chunks (>= 1).
        ratio: R, encoder states per chunk.
        enc_lengths: ``(B,)`` valid encoder lengths S_b (states).

    Returns:
        ``(B, L)`` long: ``min((k + i - 1) * R, S_b)`` (= all states of chunks
        ``1..min(k+i-1, n_chunks_b)``).

    Raises:
        ValueError: ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"wait-k lagging must be >= 1, got {k}")
    n = (k + token_index.to(enc_lengths.device).long() - 1) * ratio
    return torch.minimum(n[None, :], enc_lengths[:, None].long())


def waitk_cross_mask(
    tgt_len: int, enc_lengths: torch.Tensor, max_src_len: int, k: int | None, ratio: int, start: int = 1
) -> torch.Tensor:
    """wait-k cross-attention mask ``(B, tgt_len, max_src_len)``, ``True`` = may attend.

    Target token i (1-based, ``i = start .. start + tgt_len - 1``) attends encoder states
    ``s < min((k + i - 1) * R, S_b)``: chunks ``1..min(k + i - 1, n_chunks_b)`` (Ma et al. 2019 wait-k,
    g(i) = k + i - 1, over fixed pre-decision chunks of R states, Ma et al. 2020). ``k=None`` gives the
    offline mask (all valid states ``s < S_b``). Every row has at least one ``True`` when
    ``S_b >= 1``.

    Args:
        tgt_len: number of target positions L.
        enc_lengths: ``(B,)`` valid encoder lengths.
        max_src_len: S, padded encoder length.
        k: lagging in chunks, or None (offline).
        ratio: R.
        start: 1-based index of the first target position (for incremental steps).

    Raises:
        ValueError: ``k < 1``.
    """
    device = enc_lengths.device
    s = torch.arange(max_src_len, device=device)
    if k is None:
        n = enc_lengths[:, None].expand(-1, tgt_len)
    else:
        i = torch.arange(start, start + tgt_len, device=device)
        n = waitk_num_states(i, k, ratio, enc_lengths)
    return s[None, None, :] < n[:, :, None]


def async_self_mask(
    lang_index: torch.Tensor,
    pos: torch.Tensor,
    delta: int,
    cross_lang_attn: bool = True,
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Self-attention mask of the async merged multi-language stream, True = may attend.

    Element e = (j, i): language j (0-based index in ``async_order``, lag ``k_j = k + j * delta``) at
    position i (0-based; i = 0 is the ``<lang:xx>`` tag) of its own tag-prefixed stream. Its output
    predicts token i+1 of language j, written at read step ``t(j, i) = k_j + i``; only differences of
    t matter, so ``t = j * delta + i`` here. e attends e' = (j', i') iff

        t(j', i') < t(j, i),  or  t(j', i') == t(j, i) and j' < j,  or  j' == j and i' <= i

    (everything emitted before it in (t, j) order, plus its own prefix and itself). With
    ``cross_lang_attn=False`` only the last clause remains (= the sync unified decoder). Keys with
    ``key_valid == False`` (padding, or a language's elements after its EOS) are hidden from every
    query except themselves (the diagonal stays True so no row is empty).

    Args:
        lang_index: ``(M,)`` long, j per element.
        pos: ``(M,)`` long, i per element.
        delta: lag step in chunks (>= 0).
        cross_lang_attn: allow attention across languages.
        key_valid: optional ``(B, M)`` bool.

    Returns:
        ``(M, M)`` bool, or ``(B, M, M)`` with ``key_valid``.
    """
    j = lang_index.long()
    t = j * int(delta) + pos.long()
    same = (j[None, :] == j[:, None]) & (pos[None, :] <= pos[:, None])
    if cross_lang_attn:
        before = (t[None, :] < t[:, None]) | ((t[None, :] == t[:, None]) & (j[None, :] < j[:, None]))
        m = same | before
    else:
        m = same
    if key_valid is None:
        return m
    eye = torch.eye(m.size(0), dtype=torch.bool, device=m.device)
    return (m[None] & key_valid[:, None, :]) | eye[None]
