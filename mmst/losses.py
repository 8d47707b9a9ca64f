"""Training losses: label-smoothed cross-entropy over several target languages plus an optional
auxiliary CTC loss on the English transcript.

Formulas:
* Label smoothing (Szegedy et al. 2016; fairseq ``label_smoothed_nll_loss``): with
  ``eps_i = eps / (V - 1)``, per token ``loss = (1 - eps - eps_i) * nll + eps_i * sum_v(-log p_v)``,
  i.e. probability ``1 - eps`` on the reference and ``eps / (V - 1)`` on every other class.
* Languages: ``loss = sum_l w_l * L_l`` where ``L_l`` is the token-SUMMED smoothed loss of language l
  and the weights are normalised over the languages in the batch so that they average 1 (default all
  1: a plain sum). The caller normalises (divides by ``stats["ntokens"]``, CONTRACTS.md).
* CTC (Graves et al. 2006), blank id 0, ``zero_infinity=True``, summed over utterances, and scaled by
  ``ntokens / src_ntokens`` so that after the caller divides by ``ntokens`` the term equals
  ``ctc_weight * (CTC loss per source token)`` whatever the number of target languages.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def label_smoothed_nll_loss(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, ignore_index: int = 1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed label-smoothed CE over non-ignored tokens (no Python loop over tokens).

    Args:
        logits: ``(..., V)`` unnormalised scores (any float dtype; computed in float32).
        target: ``(...)`` long ids; ``ignore_index`` positions contribute nothing.
        epsilon: smoothing mass (0.1 in the paper setups).
        ignore_index: pad id.

    Returns:
        ``(loss_sum, nll_sum, ntokens)`` scalars (ntokens a long tensor).
    """
    mask = target != ignore_index
    lg = logits[mask].float()  # (N, V): only real tokens
    tgt = target[mask]
    lprobs = F.log_softmax(lg, dim=-1)
    nll = -lprobs.gather(-1, tgt[:, None]).squeeze(-1)
    smooth = -lprobs.sum(-1)
    v = lg.size(-1)
    eps_i = epsilon / (v - 1) if v > 1 else 0.0
    loss = (1.0 - epsilon - eps_i) * nll + eps_i * smooth
    return loss.sum(), nll.sum(), mask.sum()


def label_smoothed_nll_loss_dense(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, ignore_index: int = 1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`label_smoothed_nll_loss` over every position, pads multiplied by 0 instead of gathered out.

    The same sums (up to float summation order), with shapes that do not depend on the data, so
    ``torch.compile`` can fuse log-softmax, gather and the smoothing into one kernel (training config
    ``compile``); it also computes the padded positions. Args and returns as :func:`label_smoothed_nll_loss`.
    """
    mask = target != ignore_index
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (..., V)
    tgt = target.masked_fill(~mask, 0)
    nll = -lprobs.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.sum(-1)
    v = logits.size(-1)
    eps_i = epsilon / (v - 1) if v > 1 else 0.0
    keep = mask.to(lprobs.dtype)
    loss = ((1.0 - epsilon - eps_i) * nll + eps_i * smooth) * keep
    return loss.sum(), (nll * keep).sum(), mask.sum()


def ctc_loss_sum(
    ctc_logits: torch.Tensor,
    input_lengths: torch.Tensor,
    src_tokens: torch.Tensor,
    src_lengths: torch.Tensor | None = None,
    pad_id: int = 1,
    blank_id: int = 0,
    drop_ids: tuple[int, ...] = (0, 2),
) -> tuple[torch.Tensor, torch.Tensor]:
    """CTC loss summed over utterances (``zero_infinity=True``).

    Args:
        ctc_logits: ``(B, S, V_src)``; input_lengths: ``(B,)`` valid encoder states.
        src_tokens: ``(B, Ls)`` transcript ids padded with ``pad_id``; ``drop_ids`` (bos, eos) and pad
            are removed. Rows left empty (no transcript) are excluded.
        src_lengths: unused except for validation of shape (may be None).

    Returns:
        ``(loss_sum, src_ntokens)``.
    """
    del src_lengths
    keep = src_tokens != pad_id
    for i in drop_ids:
        keep &= src_tokens != i
    tgt_len = keep.sum(1)
    rows = tgt_len > 0
    if not bool(rows.any()):
        return ctc_logits.sum() * 0.0, tgt_len.sum()
    lp = F.log_softmax(ctc_logits[rows].float(), dim=-1).transpose(0, 1)  # (S, B', V)
    targets = src_tokens[rows][keep[rows]]
    loss = F.ctc_loss(
        lp, targets, input_lengths[rows], tgt_len[rows], blank=blank_id, reduction="sum", zero_infinity=True
    )
    return loss, tgt_len.sum()


class MultilingualCriterion:
    """Label-smoothed CE averaged over target languages + optional CTC (see module docstring).

    Args:
        label_smoothing: epsilon (default 0.1).
        lang_weights: optional ``{lang: weight}`` (missing languages weigh 1); normalised per batch
            to average 1 over the languages present.
        ctc_weight: weight of the auxiliary CTC loss (needs a model with a CTC head when > 0).
        pad_id: padding id of targets and transcripts.

    ``criterion(model_output, batch) -> (loss, stats)``: ``loss`` a scalar tensor, sum over tokens;
    ``stats`` (python floats, all sums): ``loss``, ``nll_loss``, ``ntokens``, ``nsentences``,
    ``loss_<lang>``, ``nll_<lang>``, ``ntokens_<lang>``, ``nsentences_<lang>`` (rows with a
    translation), and with CTC ``ctc_loss``, ``src_ntokens``.

    Raises:
        ValueError: negative weights, ``ctc_weight > 0`` without CTC logits, or a language of the batch
            missing from the model output.
    """

    def __init__(
        self,
        label_smoothing: float = 0.1,
        lang_weights: dict[str, float] | None = None,
        ctc_weight: float = 0.0,
        pad_id: int = 1,
    ) -> None:
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        if ctc_weight < 0:
            raise ValueError(f"ctc_weight must be >= 0, got {ctc_weight}")
        if lang_weights and any(w < 0 for w in lang_weights.values()):
            raise ValueError(f"lang_weights must be >= 0, got {lang_weights}")
        self.eps = float(label_smoothing)
        self.lang_weights = dict(lang_weights or {})
        self.ctc_weight = float(ctc_weight)
        self.pad_id = int(pad_id)
        #: the per-language token loss (``mmst.training.compile`` swaps in a compiled dense one)
        self.token_loss = label_smoothed_nll_loss

    def __call__(self, model_output, batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Compute the loss of one batch (see class docstring)."""
        logits = model_output.logits
        target = batch.target
        missing = [lang for lang in target if lang not in logits]
        if missing:
            raise ValueError(f"batch has targets for {missing} but the model output has none")
        langs = list(target)
        w = torch.tensor([float(self.lang_weights.get(lang, 1.0)) for lang in langs])
        w = w * (len(langs) / w.sum()) if float(w.sum()) > 0 else torch.ones(len(langs))
        names: list[str] = []
        values: list[torch.Tensor] = []
        total = None
        nll_total = 0.0
        ntok_total = 0
        for j, lang in enumerate(langs):
            lo, nl, nt = self.token_loss(logits[lang], target[lang], self.eps, self.pad_id)
            total = lo * float(w[j]) if total is None else total + lo * float(w[j])
            nll_total = nll_total + nl
            ntok_total = ntok_total + nt
            nsent = (target[lang] != self.pad_id).any(dim=1).sum()
            names += [f"loss_{lang}", f"nll_{lang}", f"ntokens_{lang}", f"nsentences_{lang}"]
            values += [lo.detach(), nl.detach(), nt, nsent]
        if total is None:
            raise ValueError("batch has no target languages")
        if self.ctc_weight > 0:
            if model_output.ctc_logits is None:
                raise ValueError("ctc_weight > 0 but the model has no CTC head (set src_vocab_size)")
            enc = model_output.encoder_out
            ctc, src_ntok = ctc_loss_sum(model_output.ctc_logits, enc.lengths, batch.src_tokens, pad_id=self.pad_id)
            scale = ntok_total.float() / src_ntok.clamp(min=1).float()
            total = total + self.ctc_weight * ctc * scale.detach()
            names += ["ctc_loss", "src_ntokens"]
            values += [ctc.detach(), src_ntok]
        names += ["loss", "nll_loss", "ntokens"]
        values += [total.detach(), nll_total.detach(), ntok_total]
        nums = torch.stack([v.detach().float().reshape(()) for v in values]).tolist()  # one device sync
        stats = dict(zip(names, nums))
        stats["nsentences"] = float(next(iter(target.values())).size(0))
        return total, stats
