"""Tables of docs/models.md, docs/augmentation.md and docs/training.md: backbones, augmentation, model
sizes, the config key reference."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .common import md_table, num, params_m


def backbones(d: Mapping[str, Any]) -> str:
    """``recipes/synthetic/run_backbones.sh`` (``mmst-backbones``): per system, BLEU at one wait-k on both test
    sets (averaged over the languages) and their mean, AL on the seen set (with LAAL, AL_CA and LAAL_CA when the
    results have them), training time (s) and updates when recorded, then the summary against its goal, named for
    what it compares: an ASR-then-ST curriculum against ST alone, at the budget the results record (equal compute
    or equal updates; a report without one, from before the seeds and budgets, was at equal updates), with the
    test sets, the seeds and the interval."""
    from mmst.evaluation.backbones import difference_text, updates_cell

    k = str(d["k"]).lstrip("k")
    seen, unseen = d["splits"]
    desc = d.get("descriptions") or {}
    lat = [m for m in ("LAAL", "AL_CA", "LAAL_CA") if any(m in (r.get("seen_latency") or {}) for r in d["systems"].values())]
    timed = any((r.get("train_time_s") or {}).get("n") for r in d["systems"].values())
    body = [[f"`{name}`", num(r["seen_bleu"]["mean"]), num(r["unseen_bleu"]["mean"]), num(r["bleu"]),
             num(r["seen_al"]["mean"], "{:.0f}"),
             *(num((r.get("seen_latency") or {}).get(m, {}).get("mean"), "{:.0f}") for m in lat),
             *((num((r.get("train_time_s") or {}).get("mean"), "{:.0f}"), updates_cell(r, name)) if timed else ()),
             desc.get(name, "")]
            for name, r in d["systems"].items()]
    s = d["summary"]
    per_lang = "; ".join(f"`{name}` " + ", ".join(f"{lang} {num(r['seen_per_lang'][lang]['mean'], '{:.1f}')}"
                                                    for lang in d["langs"]) for name, r in d["systems"].items())
    ca = ("" if lat else f" Computation-aware AL/LAAL: not in these results (the committed run predates them; "
          f"a rerun of the recipe adds LAAL, AL_CA and LAAL_CA on {seen}).")
    table = md_table(["system", f"BLEU {seen}", f"BLEU {unseen}", "BLEU mean", f"AL {seen} (ms)",
                      *(f"{m} {seen} (ms)" for m in lat), *(("train time (s)", "updates (ASR + ST)") if timed else ()),
                      "trained"], body)
    goal = f"(goal > 0: {'met' if s['goal_met'] else 'missed'})"
    incomplete = "" if s.get("complete", True) else " Incomplete: " + ", ".join(d.get("missing", [])) + "."
    if "differences" not in d:  # a report from before the seeds and budgets: one sentence, at equal updates
        d_pre, d_xs = s[f"pretrained_minus_scratch_bleu_k{k}"], s[f"hf_minus_xs_asr_bleu_k{k}"]
        ns = sorted({len(r["seeds"].get(seen, [])) for r in d["systems"].values()})
        seeds = (f"{ns[0]} training seed" + ("" if ns[0] == 1 else "s") if len(ns) == 1
                 else f"{ns[0]}-{ns[-1]} training seeds per system")
        return (table + f"\n\nBLEU at wait-{k}, the mean over {', '.join(d['langs'])}; {seeds}. ASR-pretrained encoder "
                f"minus the same encoder trained on ST alone, at equal updates (not equal compute): "
                f"{num(d_pre, '{:+.2f}')} BLEU {goal}; ASR-pretrained Hugging Face encoder minus the `xs` encoder with "
                f"its ASR pretraining: {num(d_xs, '{:+.2f}')} BLEU (reported)." + incomplete
                + f" BLEU per language on {seen}: {per_lang}." + ca)
    budget = {"compute": "equal compute (the scratch system, and the `xs` encoder's ST after its ASR pretraining, "
                         "train for the wall-clock training time, ASR included, of the ASR-pretrained system of the "
                         "same seed, in the same recipe run on one machine)",
              "updates": "equal updates (not equal compute)"}.get(s.get("budget"), "training budget not recorded")
    seeds = ", ".join(map(str, s.get("seeds") or [])) or "none in common"
    return (table + f"\n\nBLEU at wait-{k}, the mean over {', '.join(d['langs'])} and over the test sets {seen} and "
            f"{unseen}; training seeds {seeds}; {budget}; interval: {s.get('interval') or 'none (one seed)'}. "
            f"ASR-pretrained encoder minus the same encoder trained on ST alone: "
            f"{difference_text(d, 'pretrained_minus_scratch')} {goal}; ASR-pretrained Hugging Face encoder minus the "
            f"`xs` encoder with its ASR pretraining: {difference_text(d, 'hf_minus_xs_asr')} (reported)." + incomplete
            + f" BLEU per language on {seen}: {per_lang}." + ca)


def augment_report(d: Mapping[str, Any]) -> str:
    """The augmentation experiment (``eval/unseen_gap.py``): seen vs unseen BLEU/AL per system, the gap."""
    from mmst.evaluation.unseen_gap import render_markdown

    rep = {k: v for k, v in d.items() if k != "provenance"}
    extra = {"loader wait %": d["loader_wait_pct"]} if d.get("loader_wait_pct") else None
    return render_markdown(rep, "", d.get("descriptions"), extra).split("\n", 2)[2].strip("\n")


def augment_cost(d: Mapping[str, Any]) -> str:
    """SpecAugment and on-the-fly speed perturbation cost per batch (``bench/bench_train.py`` JSON)."""
    from mmst.evaluation.unseen_gap import cost_table

    return cost_table(d).strip("\n")


def augment_prep(d: Mapping[str, Any]) -> str:
    """Prep-time cost of the speed-perturbed copies (``speed_perturb_<split>.json``)."""
    from mmst.evaluation.unseen_gap import prep_line

    return prep_line(d).strip("\n")


def config_keys() -> str:
    """The ``mmst-train`` config key reference (key, type, default, documentation), from the dataclasses."""
    from mmst.training.config import iter_config_docs

    rows = []
    for key, tname, default, doc in iter_config_docs():
        d = json.dumps(default) if not isinstance(default, str) else default
        rows.append([f"`{key}`", f"`{tname}`".replace("|", "\\|"), f"`{d}`", doc.replace("|", "\\|").replace("\n", " ")])
    return md_table(["key", "type", "default", "meaning"], rows)


def model_sizes() -> str:
    """Named model sizes with their shapes and parameter counts (4 languages, joint vocabulary of 1000),
    counted with ``model.num_parameters()`` on models built on the ``meta`` device (no memory, no init)."""
    import torch

    from mmst.models import build_model
    from mmst.models.config import SIZES, model_config_for_size

    langs = ["de", "es", "fr", "ja"]
    rows = []
    for size, kw in SIZES.items():
        counts = []
        for arch in ("unified", "separate"):
            with torch.device("meta"):
                m = build_model(model_config_for_size(size, arch=arch, tgt_langs=langs, vocab_size=1000,
                                                      lang_tag_ids={x: 4 + i for i, x in enumerate(langs)}))
            counts.append(params_m(m.num_parameters()))
        rows.append([f"`{size}`", kw["d_model"], f"{kw['encoder_layers']} / {kw['decoder_layers']}",
                     kw["attention_heads"], kw["ffn_dim"], kw["conv_channels"], *counts])
    return md_table(["size", "d", "enc/dec layers", "heads", "FFN", "conv channels", "unified, 4 langs, V=1000",
                     "separate, 4 langs, V=1000"], rows)
