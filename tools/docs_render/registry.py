"""The registry of rendered tables: marker name -> results JSON and formatter."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .comparisons import compare_avg, compare_langs, hard_waitk, offline_bleu, policies_summary
from .continuous import continuous
from .development import test_durations, test_durations_totals
from .distributed import stragglers, stragglers_mmst, stragglers_mmst_summary
from .endless import continuous_rss, left_context
from .longform import longform_cost, longform_crosscheck, longform_iwslt, longform_rows
from .models import augment_cost, augment_prep, augment_report, backbones, config_keys, model_sizes
from .performance import (
    alignment,
    features,
    int8_table,
    streaming_growth,
    streaming_hf,
    streaming_policies,
    streaming_summary,
    train,
    train_compile,
    train_profile,
    train_profile_ops,
    train_profile_scaling,
    train_quick,
    train_threads,
    vs_fairseq,
    vs_fairseq_seeds,
    vs_fairseq_summary,
)
from .quickstart import (
    quickstart_curve,
    quickstart_single,
    quickstart_stages,
    quickstart_sweep,
    quickstart_total,
)
from .serving import serve_abuse_table, serve_table


@dataclass(frozen=True)
class Table:
    """A rendered table: its JSON under ``docs/results/`` and the function that formats it."""

    json: str
    render: Callable[[Mapping[str, Any]], str]
    subkey: str | None = None  # render ``data[k1][k2]..`` for subkey "k1/k2" (provenance from the top level)


TABLES: dict[str, Table] = {
    "augment": Table("augment.json", augment_report),
    "augment-cost": Table("augment_cost.json", augment_cost),
    "augment-prep": Table("augment_speed_prep.json", augment_prep),
    "quickstart": Table("quickstart.json", quickstart_sweep, "tst-COMMON"),
    "quickstart-unseen": Table("quickstart.json", quickstart_single, "tst-unseen"),
    "quickstart-stages": Table("quickstart.json", quickstart_stages),
    "quickstart-total": Table("quickstart.json", quickstart_total),
    "quickstart-curve": Table("quickstart_curve.json", quickstart_curve),
    "test-durations": Table("test_durations.json", test_durations),
    "test-durations-totals": Table("test_durations.json", test_durations_totals),
    "test-durations-before": Table("test_durations_before.json", test_durations_totals),
    "test-durations-before-slowest": Table("test_durations_before.json", test_durations),
    "offline-xs": Table("offline_xs_10min.json", offline_bleu),
    "offline-xs.tst-COMMON": Table("offline_xs_10min.json", compare_langs, "results/tst-COMMON"),
    "offline-xs.tst-unseen": Table("offline_xs_10min.json", compare_langs, "results/tst-unseen"),
    "hard-waitk": Table("hard_waitk.json", hard_waitk),
    "hard-waitk.langs": Table("hard_waitk.json", compare_langs),
    "compare-synthetic.langs": Table("compare_synthetic.json", compare_langs),
    "compare-synthetic-600.langs": Table("compare_synthetic_600.json", compare_langs),
    "compare-hard-600.langs": Table("compare_hard_600.json", compare_langs),
    "compare-synthetic": Table("compare_synthetic.json", compare_avg),
    "compare-synthetic-600": Table("compare_synthetic_600.json", compare_avg),
    "compare-hard-600": Table("compare_hard_600.json", lambda d: compare_avg(d, seeds_column=True)),
    "stragglers": Table("stragglers.json", stragglers),
    "stragglers-mmst": Table("stragglers_mmst.json", stragglers_mmst),
    "stragglers-mmst-summary": Table("stragglers_mmst.json", stragglers_mmst_summary),
    "features": Table("features.json", features),
    "alignment": Table("alignment.json", alignment),
    "streaming": Table("streaming.json", streaming_summary),
    "streaming-growth": Table("streaming.json", streaming_growth),
    "streaming-policies": Table("streaming_policies.json", streaming_policies),
    "streaming-hf": Table("streaming_hf.json", streaming_hf),
    "int8": Table("int8.json", int8_table),
    "backbones": Table("backbones.json", backbones),
    "longform": Table("longform.json", longform_cost),
    "longform-crosscheck": Table("longform.json", longform_crosscheck),
    "longform-rows": Table("longform.json", longform_rows),
    "longform-iwslt": Table("longform.json", longform_iwslt),
    "continuous": Table("continuous.json", continuous),
    "continuous-rss": Table("continuous.json", continuous_rss),
    "left-context": Table("left_context.json", left_context),
    "train": Table("train.json", train),
    "train-quick": Table("train_quick.json", train_quick),
    "train-compile": Table("train_compile.json", train_compile),
    "vs-fairseq": Table("vs_fairseq.json", vs_fairseq),
    "vs-fairseq-summary": Table("vs_fairseq.json", vs_fairseq_summary),
    "vs-fairseq-seeds": Table("vs_fairseq_seeds.json", vs_fairseq_seeds),
    "vs-fairseq-own-dropouts": Table("vs_fairseq_own_dropouts.json", vs_fairseq),
    "train-profile": Table("train_profile.json", train_profile),
    "train-profile-ops": Table("train_profile.json", train_profile_ops),
    "train-profile-scaling": Table("train_profile.json", train_profile_scaling),
    "train-threads": Table("train_threads.json", train_threads),
    "train-threads-run2": Table("train_threads_run2.json", train_threads),
    "serve": Table("serve.json", serve_table),
    "serve-abuse": Table("serve_abuse.json", serve_abuse_table),
    "policies-hard": Table("policies_hard.json", lambda d: policies_summary(d, "policies_hard.md")),
}


GENERATED: dict[str, Callable[[], str]] = {"config-keys": config_keys, "model-sizes": model_sizes}
