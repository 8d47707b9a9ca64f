"""Validation during training: per-language loss and greedy wait-k BLEU (:class:`Validator`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mmst.data.batching import Batch, make_batches
from mmst.evaluation.quality import bleu_tokenizer_for
from mmst.training.config import TrainConfig, normalize_waitk_list


@dataclass
class Validator:
    """Per-language validation loss and greedy wait-k BLEU on the first ``bleu_subset`` utterances.

    Loss: label-smoothed loss (``loss_<lang>``) and NLL (``nll_<lang>``) in nats per target token, offline
    unless ``cfg.valid.waitk`` is set. BLEU: sacrebleu corpus BLEU of masked greedy wait-k outputs
    (detokenised with the target vocab) against the manifest text; decoding length capped at
    ``max_len_a * S + max_len_b`` tokens (S = encoder states, 40 ms each).
    """

    dataset: Any
    criterion: Any
    cfg: TrainConfig
    device: torch.device
    #: what the loss pass does to a batch first (``compile: true``: ``pad_batch_to_buckets``, so validation
    #: meets the training graphs' length buckets); None = nothing
    prepare: Any = None

    def _batches(self, indices: Sequence[int]) -> list[Batch]:
        lengths = self.dataset.n_frames[list(indices)]
        groups = make_batches(lengths, max(self.cfg.data.max_tokens, int(lengths.max())),
                              self.cfg.valid.max_sentences, shuffle=False)
        return [self.dataset.collater([self.dataset[indices[i]] for i in g]) for g in groups]

    @torch.no_grad()
    def run(self, model: torch.nn.Module) -> dict[str, float]:
        """Return ``{"loss": mean over languages, "loss_<lang>", "bleu_<lang>_k<k>", "bleu": mean}``."""
        from mmst.training.step import compute_loss

        was_training = model.training
        model.eval()
        vk = normalize_waitk_list(self.cfg.valid.waitk, "valid.waitk")[0]
        acc: dict[str, float] = {}
        n = len(self.dataset)
        for batch in self._batches(list(range(n))):
            b = self.prepare(batch) if self.prepare is not None else batch
            _, st = compute_loss(model, b.to(self.device), self.criterion, vk, precision=self.cfg.precision)
            for k, v in st.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    acc[k] = acc.get(k, 0.0) + float(v)
        res: dict[str, float] = {}
        langs = list(self.dataset.tgt_langs)
        per = []
        for lang in langs:
            nt = acc.get(f"ntokens_{lang}", 0.0)
            if nt > 0:
                res[f"loss_{lang}"] = acc[f"loss_{lang}"] / nt
                res[f"nll_{lang}"] = acc[f"nll_{lang}"] / nt
                per.append(res[f"loss_{lang}"])
        res["loss"] = float(np.mean(per)) if per else float("nan")
        m = min(self.cfg.valid.bleu_subset, n)
        if m > 0:
            res.update(self.bleu(model, list(range(m))))
        model.train(was_training)
        return res

    def bleu(self, model: Any, indices: list[int]) -> dict[str, float]:
        """Greedy BLEU per language and per ``valid.bleu_waitk`` value on ``indices``.

        Decoding: ``mmst.simultaneous.search.greedy_waitk_decode`` (masked greedy wait-k, all languages
        jointly, encoder once; identical to streaming decoding for a chunk-causal encoder).
        """
        import sacrebleu

        from mmst.simultaneous.search import greedy_waitk_decode
        from mmst.training.step import autocast_context

        langs = list(self.dataset.tgt_langs)
        out: dict[str, float] = {}
        scores = []
        for k in normalize_waitk_list(self.cfg.valid.bleu_waitk, "valid.bleu_waitk"):
            hyps: dict[str, list[str]] = {lang: [] for lang in langs}
            refs: dict[str, list[str]] = {lang: [] for lang in langs}
            for batch in self._batches(indices):
                b = batch.to(self.device)
                with autocast_context(self.device, self.cfg.precision):
                    dec = greedy_waitk_decode(model, b.fbank, b.fbank_lengths, langs, k,
                                              max_len_a=self.cfg.valid.max_len_a, max_len_b=self.cfg.valid.max_len_b)
                for lang in langs:
                    for j, idx in enumerate(batch.indices):
                        ref = self.dataset.reference(idx, lang)
                        if not ref.strip():
                            continue
                        hyps[lang].append(self.dataset.tgt_vocabs[lang].decode(dec[lang][j]))
                        refs[lang].append(ref)
            name = "offline" if k is None else f"k{k}"
            for lang in langs:
                if refs[lang]:
                    s = sacrebleu.corpus_bleu(hyps[lang], [refs[lang]], tokenize=bleu_tokenizer_for(lang)[0]).score
                    out[f"bleu_{lang}_{name}"] = s
                    scores.append(s)
        if scores:
            out["bleu"] = float(np.mean(scores))
        return out
