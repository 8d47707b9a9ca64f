"""Tests for mmst.losses: label smoothing formula, padding, empty rows, language weights, CTC."""

from dataclasses import dataclass

import pytest
import torch

from mmst.losses import MultilingualCriterion, ctc_loss_sum, label_smoothed_nll_loss
from mmst.models import EncoderOut, ModelOutput

torch.set_num_threads(1)


def reference_ls(logits, target, eps, pad):
    """Token-by-token reference implementation of fairseq's label smoothing."""
    total, nll_total = 0.0, 0.0
    v = logits.size(-1)
    lp = torch.log_softmax(logits.double(), -1)
    for b in range(target.size(0)):
        for t in range(target.size(1)):
            y = int(target[b, t])
            if y == pad:
                continue
            q = torch.full((v,), eps / (v - 1), dtype=torch.double)
            q[y] = 1 - eps
            total += float(-(q * lp[b, t]).sum())
            nll_total += float(-lp[b, t, y])
    return total, nll_total


def test_label_smoothing_matches_reference():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11)
    target = torch.randint(0, 11, (3, 5))
    target[1, 3:] = 1
    target[2, :] = 1  # empty row
    loss, nll, n = label_smoothed_nll_loss(logits, target, 0.1, 1)
    ref, ref_nll = reference_ls(logits, target, 0.1, 1)
    assert int(n) == int((target != 1).sum())
    assert abs(float(loss) - ref) < 1e-4 and abs(float(nll) - ref_nll) < 1e-4
    loss0, nll0, _ = label_smoothed_nll_loss(logits, target, 0.0, 1)
    torch.testing.assert_close(loss0, nll0)


@dataclass
class FakeBatch:
    target: dict
    src_tokens: torch.Tensor
    src_lengths: torch.Tensor


def _output(logits, ctc=None, enc_len=None):
    b = next(iter(logits.values())).size(0)
    s = 6 if ctc is None else ctc.size(1)
    lengths = torch.full((b,), s) if enc_len is None else enc_len
    enc = EncoderOut(torch.zeros(b, s, 4), torch.zeros(b, s, dtype=torch.bool), lengths)
    return ModelOutput(logits=logits, encoder_out=enc, ctc_logits=ctc)


def test_criterion_stats_weights_and_empty_rows():
    torch.manual_seed(1)
    logits = {"de": torch.randn(2, 4, 9, requires_grad=True), "ja": torch.randn(2, 6, 9, requires_grad=True)}
    target = {"de": torch.tensor([[5, 6, 2, 1], [1, 1, 1, 1]]), "ja": torch.tensor([[4, 4, 4, 4, 4, 2], [7, 2, 1, 1, 1, 1]])}
    batch = FakeBatch(target, torch.tensor([[5, 6, 2]]), torch.tensor([3]))
    crit = MultilingualCriterion(0.1)
    loss, st = crit(_output(logits), batch)
    de, _, _ = label_smoothed_nll_loss(logits["de"], target["de"], 0.1, 1)
    ja, _, _ = label_smoothed_nll_loss(logits["ja"], target["ja"], 0.1, 1)
    torch.testing.assert_close(loss, de + ja)
    assert st["ntokens"] == 3 + 8 and st["ntokens_de"] == 3 and st["ntokens_ja"] == 8
    assert st["nsentences"] == 2 and st["nsentences_de"] == 1
    assert abs(st["loss_de"] - float(de.detach())) < 1e-5 and "nll_ja" in st
    loss.backward()
    assert logits["de"].grad[1].abs().sum() == 0  # empty row contributes nothing
    # weights are normalised to average 1
    crit_w = MultilingualCriterion(0.1, lang_weights={"de": 3.0, "ja": 1.0})
    loss_w, _ = crit_w(_output(logits), batch)
    torch.testing.assert_close(loss_w, 1.5 * de + 0.5 * ja)
    with pytest.raises(ValueError):
        MultilingualCriterion(lang_weights={"de": -1.0})
    with pytest.raises(ValueError):
        crit(_output({"de": logits["de"]}), batch)


def test_ctc_term_and_zero_infinity():
    torch.manual_seed(2)
    logits = {"de": torch.randn(2, 3, 9)}
    target = {"de": torch.tensor([[5, 6, 2], [5, 2, 1]])}
    ctc = torch.randn(2, 5, 7, requires_grad=True)
    # row 0: 4 tokens in 5 states (feasible); row 1: 6 tokens with repeats in 3 states (infeasible)
    src = torch.tensor([[3, 4, 5, 6, 2, 1, 1], [3, 3, 3, 4, 4, 4, 2]])
    batch = FakeBatch(target, src, torch.tensor([5, 7]))
    crit = MultilingualCriterion(0.1, ctc_weight=0.5)
    loss, st = crit(_output(logits, ctc, torch.tensor([5, 3])), batch)
    assert torch.isfinite(loss) and st["src_ntokens"] == 10
    ce = label_smoothed_nll_loss(logits["de"], target["de"], 0.1, 1)[0]
    ctc_sum, _ = ctc_loss_sum(ctc, torch.tensor([5, 3]), src)
    torch.testing.assert_close(loss, ce + 0.5 * ctc_sum * (5 / 10))
    loss.backward()
    assert torch.isfinite(ctc.grad).all()
    with pytest.raises(ValueError, match="CTC"):
        crit(_output(logits), batch)


def test_ctc_empty_transcripts_ignored():
    ctc = torch.randn(2, 5, 7, requires_grad=True)
    loss, n = ctc_loss_sum(ctc, torch.tensor([5, 5]), torch.tensor([[1, 1], [2, 1]]))
    assert float(loss.detach()) == 0.0 and int(n) == 0
    loss.backward()
