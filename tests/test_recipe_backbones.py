"""recipes/synthetic/run_backbones.sh at toy size (2 updates each, 2 test utterances): every stage runs, the
pretrained encoder is written as a Hugging Face folder and feeds the ST model, and the report carries the
summary and its provenance; and the report's arithmetic on hand-made scores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmst.evaluation.backbones import backbones_report
from mmst.evaluation.compare import CompareError

ROOT = Path(__file__).resolve().parents[1]
#: valid.max_len_a=0: a 2-update model never emits EOS, so the validation decode stops at valid.max_len_b tokens
TINY = ("valid.bleu_subset=2 valid.max_len_a=0 data.max_tokens=3000 optim.warmup_updates=1 logging.progress_bar=false "
        "logging.tensorboard=false num_threads=1 model.overrides.d_model=48 model.overrides.encoder_layers=1 "
        "model.overrides.decoder_layers=1 model.overrides.ffn_dim=64 model.overrides.conv_channels=48 "
        "model.overrides.attention_heads=2")


def _scores(bleu: dict[str, tuple[float, float]]) -> dict:
    """``collect``-shaped scores: per system (tst-COMMON BLEU, tst-unseen BLEU) for both languages, seed 1."""
    return {name: {split: {1: {lang: {"BLEU": b + (1.0 if lang == "de" else -1.0), "AL": 900.0} for lang in ("de", "ja")}}
                   for split, b in zip(("tst-COMMON", "tst-unseen"), pair)} for name, pair in bleu.items()}


def test_report_summary_by_hand():
    rep = backbones_report(_scores({"hf_pretrained": (20.0, 12.0), "hf_scratch": (15.0, 9.0), "xs_asr": (22.0, 14.0)}), [1])
    # means of the two test sets (language averages 20/12, 15/9, 22/14): 16, 12, 18
    assert rep["summary"] == {"pretrained_minus_scratch_bleu_k3": 4.0, "pretrained_minus_scratch_bleu_k3_interval": None,
                              "hf_minus_xs_asr_bleu_k3": -2.0, "hf_minus_xs_asr_bleu_k3_interval": None,
                              "interval": None, "seeds": [1], "test_splits": ["tst-COMMON", "tst-unseen"],
                              "budget": None, "train_time_s": {"hf_pretrained": None, "hf_scratch": None, "xs_asr": None},
                              "goal_met": True, "complete": True}
    assert list(rep["summary"])[0] == "pretrained_minus_scratch_bleu_k3"
    assert rep["systems"]["hf_scratch"]["bleu"] == 12.0
    assert rep["differences"]["pretrained_minus_scratch"]["per_seed"] == {"1": 4.0}
    with pytest.raises(CompareError, match="xs_asr"):
        backbones_report(_scores({"hf_pretrained": (1.0, 1.0), "hf_scratch": (1.0, 1.0)}), [1])
    with pytest.raises(CompareError, match="budget 'time'"):
        backbones_report(_scores({"hf_pretrained": (1.0, 1.0), "hf_scratch": (1.0, 1.0), "xs_asr": (1.0, 1.0)}),
                         budget="time")


def _two_seeds() -> dict:
    """Seed 1 as in :func:`_scores`; seed 2: every BLEU of hf_pretrained 2 higher, of hf_scratch 4 lower, of
    xs_asr unchanged."""
    scores = _scores({"hf_pretrained": (20.0, 12.0), "hf_scratch": (15.0, 9.0), "xs_asr": (22.0, 14.0)})
    for name, shift in (("hf_pretrained", 2.0), ("hf_scratch", -4.0), ("xs_asr", 0.0)):
        for per_seed in scores[name].values():
            per_seed[2] = {lang: {**m, "BLEU": m["BLEU"] + shift} for lang, m in per_seed[1].items()}
    return scores


def test_two_seeds_mean_and_min_max_by_hand():
    """Without per-sentence outputs the interval is min-max over seeds: seed 1 differs by 4, seed 2 by
    (18 - 8) = 10; mean 7, interval [4, 10]. hf - xs: -2 and 0, mean -1, interval [-2, 0]."""
    from mmst.evaluation.backbones import render_markdown

    rep = backbones_report(_two_seeds(), [1, 2])
    s = rep["summary"]
    assert s["pretrained_minus_scratch_bleu_k3"] == pytest.approx(7.0)
    assert s["pretrained_minus_scratch_bleu_k3_interval"] == [4.0, 10.0]
    assert s["hf_minus_xs_asr_bleu_k3"] == pytest.approx(-1.0) and s["hf_minus_xs_asr_bleu_k3_interval"] == [-2.0, 0.0]
    assert s["interval"] == "min-max over seeds" and s["seeds"] == [1, 2] and s["complete"]
    assert rep["differences"]["pretrained_minus_scratch"]["per_seed"] == {"1": 4.0, "2": 10.0}
    md = render_markdown(rep)
    assert ("pretrained_minus_scratch_bleu_k3: +7.00 BLEU (min-max over seeds [+4.00, +10.00]; per seed: 1 +4.00, "
            "2 +10.00), the mean over tst-COMMON and tst-unseen, de, ja, seeds 1, 2.") in md
    assert "# Speech-encoder backbones at wait-3 (training budget not recorded)" in md
    # a seed evaluated for one system only: the report is partial and that seed is not in the comparison
    partial = _two_seeds()
    del partial["hf_scratch"]["tst-unseen"][2]
    rep = backbones_report(partial, [1, 2])
    assert rep["summary"]["seeds"] == [1] and not rep["summary"]["complete"]
    assert rep["differences"]["pretrained_minus_scratch"]["per_seed"] == {"1": 4.0}


def _write_eval(evals: Path, split: str, system: str, seed: int, lang: str, hyps: list[str], refs: list[str]) -> None:
    from mmst.evaluation.instances import write_instances

    write_instances(evals / split / system / f"seed{seed}" / lang / "instances.log",
                    [{"index": i, "prediction": h, "delays": [0.0] * len(h.split()), "reference": r,
                      "source_length": 1000.0} for i, (h, r) in enumerate(zip(hyps, refs))])


REFS = ["the cat sat on the mat today", "a dog ran in the park this morning", "we like green tea with milk",
        "the train left the station late", "she reads a long book every week"]


def test_bootstrap_interval_by_hand(tmp_path):
    """With per-sentence outputs the interval is the paired bootstrap: hf_pretrained writes every reference
    (BLEU 100 in every resample), hf_scratch nothing (0), xs_asr the references too, so every resample gives
    exactly 100 and 0: the intervals are [100, 100] and [0, 0]."""
    scores = _scores({"hf_pretrained": (100.0, 100.0), "hf_scratch": (0.0, 0.0), "xs_asr": (100.0, 100.0)})
    for per_split in scores.values():
        for per_seed in per_split.values():
            per_seed[1] = {lang: {"BLEU": per_seed[1]["de"]["BLEU"], "AL": 900.0} for lang in ("de", "ja")}
            per_seed[2] = per_seed[1]
    for split in ("tst-COMMON", "tst-unseen"):
        for seed in (1, 2):
            for lang in ("de", "ja"):
                for name, hyps in (("hf_pretrained", REFS), ("hf_scratch", [""] * 5), ("xs_asr", REFS)):
                    _write_eval(tmp_path, split, name, seed, lang, hyps, REFS)
    rep = backbones_report(scores, [1, 2], evals_dir=tmp_path, n_samples=50)
    s = rep["summary"]
    assert s["interval"] == "paired bootstrap 95%"
    assert s["pretrained_minus_scratch_bleu_k3"] == 100.0
    assert s["pretrained_minus_scratch_bleu_k3_interval"] == pytest.approx([100.0, 100.0])
    assert s["hf_minus_xs_asr_bleu_k3_interval"] == pytest.approx([0.0, 0.0])
    boot = rep["differences"]["pretrained_minus_scratch"]["interval"]
    assert boot["resamples"] == 50 and set(boot["per_split"]) == {"tst-COMMON", "tst-unseen"}
    # one evaluation without its sentences: min-max over seeds (here both seeds give 100)
    (tmp_path / "tst-unseen" / "xs_asr" / "seed2" / "ja" / "instances.log").unlink()
    rep = backbones_report(scores, [1, 2], evals_dir=tmp_path, n_samples=50)
    assert rep["summary"]["interval"] == "min-max over seeds"
    assert rep["summary"]["pretrained_minus_scratch_bleu_k3_interval"] == [100.0, 100.0]


def test_bootstrap_of_one_test_set_and_language_is_the_policy_bootstrap(tmp_path):
    """On one test set and one language, the headline's bootstrap is policy_compare's
    bootstrap_mean_difference over the seeds (the same draw of sentence indices)."""
    from mmst.evaluation.backbones import bootstrap_difference
    from mmst.evaluation.policy_compare import bootstrap_mean_difference

    hyps = {("a", 1): ["the cat sat on a mat", "a dog ran in the park this morning", "we like tea", "the train left",
                       "she reads a long book every week"],
            ("a", 2): REFS[:3] + ["a train left the station", "she reads books"],
            ("b", 1): ["cat mat", "a dog ran", "we like green tea with milk", "the train", "a book"],
            ("b", 2): ["the cat", "dog park morning", "green tea", "the train left the station late", "she reads"]}
    for (name, seed), h in hyps.items():
        _write_eval(tmp_path, "tst-COMMON", name, seed, "de", h, REFS)
    ours = bootstrap_difference(tmp_path, "a", "b", [1, 2], ["de"], ["tst-COMMON"], n_samples=200)
    pt = {(n, s): {"dir": str(tmp_path / "tst-COMMON" / n / f"seed{s}")} for n, s in hyps}
    theirs = bootstrap_mean_difference("de", [(pt["b", s], pt["a", s], pt["a", s], 0.0) for s in (1, 2)], n_samples=200)
    for key in ("delta", "low", "high", "p"):
        assert ours[key] == pytest.approx(theirs[key]), key
    assert ours["per_split"]["tst-COMMON"]["low"] == pytest.approx(theirs["low"])
    _write_eval(tmp_path, "tst-COMMON", "b", 2, "de", hyps["b", 2], REFS[::-1])
    with pytest.raises(CompareError, match="references differ"):
        bootstrap_difference(tmp_path, "a", "b", [1, 2], ["de"], ["tst-COMMON"], n_samples=20)


def test_training_time_of_a_run_from_its_log(tmp_path):
    """The last train record's train_time_s (s, the trainer's cumulative time of updates) and update; valid and
    event records, and a line cut by a crash, do not count; a log without train_time_s gives None."""
    from mmst.evaluation.backbones import read_run_training_time, run_training_time, total_train_time_s

    run = tmp_path / "run"
    run.mkdir()
    lines = ['{"kind": "train", "update": 100, "time": 1700000000.0, "loss": 5.1, "train_time_s": 61.5}',
             '{"kind": "valid", "update": 100, "time": 1700000090.0, "loss": 4.9}',
             '{"kind": "train", "update": 200, "time": 1700000150.0, "loss": 4.2, "train_time_s": 121.25}',
             '{"kind": "train", "update": 250, "time": 1700000185.0, "loss": 4.0, "train_time_s": 151.75}',
             '{"kind": "valid", "update": 250, "time": 1700000200.0, "loss": 3.9}',
             '{"kind": "train", "upda']
    (run / "train_log.jsonl").write_text("\n".join(lines) + "\n")
    assert read_run_training_time(run) == {"train_time_s": 151.75, "updates": 250}
    assert run_training_time([{"kind": "train", "update": 3, "time": 1.0}]) is None  # an older trainer's log
    assert read_run_training_time(tmp_path / "absent") is None
    other = tmp_path / "other"
    other.mkdir()
    (other / "train_log.jsonl").write_text('{"kind": "train", "update": 9, "time": 5.0, "train_time_s": 8.25}\n')
    assert total_train_time_s([run, other]) == 160.0
    with pytest.raises(CompareError, match="absent: no training time recorded"):
        total_train_time_s([run, tmp_path / "absent"])


def _eval_scores_json(path: Path, bleu: float) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.joinpath("scores.json").write_text(json.dumps(
        {"per_lang": {lang: {"BLEU": bleu, "AL": 900.0} for lang in ("de", "ja")}, "config": {"waitk": 3}}))


def test_cli_records_train_times_budget_and_seeds(tmp_path):
    """mmst-backbones --models-dir reads each run's train_log.jsonl: a system's time is the sum of its runs
    (ASR + ST), the mean over seeds; the table shows time and updates."""
    from mmst.cli.backbones import main

    evals, models = tmp_path / "eval", tmp_path / "models"
    for seed, shift in ((1, 0.0), (2, 1.0)):
        for split in ("tst-COMMON", "tst-unseen"):
            for name, b in (("hf_pretrained", 30.0), ("hf_scratch", 20.0), ("xs_asr", 25.0)):
                _eval_scores_json(evals / split / name / f"seed{seed}", b + shift)
        for run, t, u in (("asr_hf", 100.0, 300), ("hf_pretrained", 200.0, 600), ("hf_scratch", 290.0 + seed, 1150),
                          ("asr_xs", 50.0, 300), ("xs_asr", 250.0, 1400 + seed)):
            d = models / run / f"seed{seed}"
            d.mkdir(parents=True)
            (d / "train_log.jsonl").write_text(json.dumps({"kind": "train", "update": u, "time": 1.0,
                                                           "train_time_s": t * seed}) + "\n")
    out = tmp_path / "rep" / "backbones"
    assert main(["--evals-dir", str(evals), "--models-dir", str(models), "--seeds", "1,2", "--budget", "compute",
                 "--out", str(out)]) == 0
    rep = json.loads(out.with_suffix(".json").read_text())
    s = rep["summary"]
    assert s["budget"] == "compute" and s["seeds"] == [1, 2] and s["test_splits"] == ["tst-COMMON", "tst-unseen"]
    # seed 1: 300, 291, 300; seed 2: 600, 584, 600
    assert s["train_time_s"] == {"hf_pretrained": 450.0, "hf_scratch": 437.5, "xs_asr": 450.0}
    assert rep["systems"]["hf_pretrained"]["training"]["2"]["runs"]["asr_hf"] == {"train_time_s": 200.0, "updates": 300}
    assert s["pretrained_minus_scratch_bleu_k3"] == 10.0 and s["interval"] == "min-max over seeds"
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# Speech-encoder backbones at wait-3 (equal training compute: wall-clock training time")
    assert "| train time (s) | updates (ASR + ST) |" in md
    assert "| hf_pretrained | 30.50 | 30.50 | 30.50 | 900 | 450 | 300 + 600 |" in md
    assert "| xs_asr | 25.50 | 25.50 | 25.50 | 900 | 450 | 300 + 1402 |" in md
    assert "budget: compute" in md and "train_time_s: hf_pretrained 450 s; hf_scratch 438 s; xs_asr 450 s" in md
    # runs of an older recipe (no train_log.jsonl, no --models-dir): no time column
    assert main(["--evals-dir", str(evals), "--seeds", "1,2", "--out", str(out)]) == 0
    assert "train time" not in out.with_suffix(".md").read_text()


def _old_format(rep: dict) -> dict:
    """The report as mmst-backbones wrote it before seeds and budgets (docs/results/backbones.json of 6bc36eb):
    four summary keys, no differences, no training times."""
    old = {k: v for k, v in rep.items() if k != "differences"}
    old["summary"] = {k: rep["summary"][k] for k in ("pretrained_minus_scratch_bleu_k3", "hf_minus_xs_asr_bleu_k3",
                                                     "goal_met", "complete")}
    return old


def test_docs_table_of_the_report():
    """The docs table (tools/render_docs.py ``backbones``) shows the hand-made means and the goal verdict; a report
    from before seeds and budgets renders as it did (equal updates, no interval, no time column)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import render_docs

    rep = backbones_report(_scores({"hf_pretrained": (20.0, 12.0), "hf_scratch": (15.0, 9.0), "xs_asr": (22.0, 14.0)}), [1])
    text = render_docs.backbones(_old_format(rep))
    assert "| `hf_scratch` | 15.00 | 9.00 | 12.00 | 900 |  |" in text
    assert ("1 training seed. ASR-pretrained encoder minus the same encoder trained on ST alone, at equal updates "
            "(not equal compute): +4.00 BLEU (goal > 0: met)") in text
    assert "minus the `xs` encoder with its ASR pretraining: -2.00 BLEU" in text
    assert "Computation-aware AL/LAAL: not in these results (the committed run predates them" in text
    assert "`xs_asr` de 23.0, ja 21.0" in text  # per language on tst-COMMON: 22 +- 1
    worse = backbones_report(_scores({"hf_pretrained": (10.0, 8.0), "hf_scratch": (15.0, 9.0), "xs_asr": (22.0, 14.0)}), [1])
    assert "(goal > 0: missed)" in render_docs.backbones(_old_format(worse))
    # the verdict is the report's own (mmst-backbones decides it, e.g. missed when a system is missing)
    rep["summary"]["goal_met"] = False
    assert "+4.00 BLEU (goal > 0: missed)" in render_docs.backbones(_old_format(rep))
    from mmst.evaluation.backbones import render_markdown

    assert "pretrained_minus_scratch_bleu_k3: +4.00 BLEU, the mean over" in render_markdown(_old_format(rep))


def test_docs_table_names_test_sets_seeds_interval_and_budget():
    """A report with seeds and a budget: the headline sentence names both test sets, the seeds, the budget and
    the interval; training times and updates get their columns."""
    sys.path.insert(0, str(ROOT / "tools"))
    import render_docs

    training = {name: {str(s): {"train_time_s": t * s, "runs": {run: {"train_time_s": t * s / len(runs), "updates": 600}
                                                               for run in runs}} for s in (1, 2)}
                for (name, t), runs in zip((("hf_pretrained", 300.0), ("hf_scratch", 301.0), ("xs_asr", 299.0)),
                                           (("asr_hf", "hf_pretrained"), ("hf_scratch",), ("asr_xs", "xs_asr")))}
    rep = backbones_report(_two_seeds(), [1, 2], training=training, budget="compute")
    text = render_docs.backbones(rep)
    assert ("| system | BLEU tst-COMMON | BLEU tst-unseen | BLEU mean | AL tst-COMMON (ms) | train time (s) | "
            "updates (ASR + ST) | trained |") in text
    assert "| `hf_pretrained` | 21.00 | 13.00 | 17.00 | 900 | 450 | 600 + 600 |  |" in text
    assert "| `hf_scratch` | 13.00 | 7.00 | 10.00 | 900 | 452 | 600 |  |" in text
    assert ("BLEU at wait-3, the mean over de, ja and over the test sets tst-COMMON and tst-unseen; training seeds 1, 2; "
            "equal compute (the scratch system") in text
    assert ("interval: min-max over seeds. ASR-pretrained encoder minus the same encoder trained on ST alone: +7.00 BLEU "
            "(min-max over seeds [+4.00, +10.00]; per seed: 1 +4.00, 2 +10.00) (goal > 0: met)") in text
    rep = backbones_report(_two_seeds(), [1, 2], budget="updates")
    assert "; equal updates (not equal compute); interval: min-max over seeds." in render_docs.backbones(rep)


def test_computation_aware_latencies_in_report_and_table():
    """LAAL, AL_CA and LAAL_CA on tst-COMMON: language average, then the mean over seeds; in both tables."""
    sys.path.insert(0, str(ROOT / "tools"))
    import render_docs

    from mmst.evaluation.backbones import render_markdown

    scores = _scores({"hf_pretrained": (20.0, 12.0), "hf_scratch": (15.0, 9.0), "xs_asr": (22.0, 14.0)})
    # hf_pretrained, seed 1: AL_CA de 1500, ja 2500 (average 2000); seed 2: 3000 and 3000 (average 3000): mean 2500
    for seed, (de, ja) in ((1, (1500.0, 2500.0)), (2, (3000.0, 3000.0))):
        for split in ("tst-COMMON", "tst-unseen"):
            per = scores["hf_pretrained"][split].setdefault(seed, {x: {"BLEU": 10.0, "AL": 900.0} for x in ("de", "ja")})
            if split == "tst-COMMON":
                per["de"].update(AL_CA=de, LAAL=1000.0, LAAL_CA=de + 100.0)
                per["ja"].update(AL_CA=ja, LAAL=1000.0, LAAL_CA=ja + 100.0)
    for name in ("hf_scratch", "xs_asr"):  # one seed, every language: LAAL_CA only
        for lang in ("de", "ja"):
            scores[name]["tst-COMMON"][1][lang]["LAAL_CA"] = 1200.0
    rep = backbones_report(scores, [1])
    lat = rep["systems"]["hf_pretrained"]["seen_latency"]
    assert lat["AL_CA"]["values"] == [2000.0, 3000.0] and lat["AL_CA"]["mean"] == 2500.0
    assert lat["LAAL_CA"]["mean"] == 2600.0 and lat["LAAL"]["mean"] == 1000.0
    assert rep["systems"]["hf_scratch"]["seen_latency"] == {"LAAL_CA": {"mean": 1200.0, "std": None, "n": 1,
                                                                        "values": [1200.0]}}
    text = render_docs.backbones(rep)
    assert "| system | BLEU tst-COMMON | BLEU tst-unseen | BLEU mean | AL tst-COMMON (ms) | LAAL tst-COMMON (ms) " in text
    assert "| `hf_scratch` | 15.00 | 9.00 | 12.00 | 900 | - | - | 1200 |  |" in text
    assert "training seeds 1;" in text and "Computation-aware" not in text
    assert "| hf_pretrained | " in render_markdown(rep) and "| 1000 | 2500 | 2600 | " in render_markdown(rep)


def _help_values(*argv: str) -> dict[str, str]:
    p = subprocess.run(["bash", "recipes/synthetic/run_backbones.sh", *argv, "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return dict(line.split(None, 1) for line in p.stdout.splitlines()[2:] if len(line.split(None, 1)) == 2)


def test_help_lists_seeds_and_budget():
    """Training seeds (default 1,2) and the budget (default compute) are options; --seed is the old spelling."""
    values = _help_values()
    assert values["--seeds"] == "1,2" and values["--budget"] == "compute" and "--seed" not in values
    assert _help_values("--seeds", "3,4", "--budget", "updates")["--budget"] == "updates"
    assert _help_values("--seed", "5")["--seeds"] == "5"


@pytest.mark.parametrize("argv,message", [(["--budget", "time"], "--budget needs updates or compute, got 'time'"),
                                          (["--seeds", "1,x"], "--seeds needs whole numbers, comma-separated, got '1,x'")])
def test_bad_seeds_or_budget_stop_the_recipe(tmp_path, argv, message):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    p = subprocess.run(["bash", "recipes/synthetic/run_backbones.sh", "--exp-dir", str(tmp_path / "exp"), *argv],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr == f"recipes/synthetic/run_backbones.sh: {message}\n"


#: a stand-in for mmst-train: records its arguments and writes a train_log.jsonl whose train_time_s is
#: $FAKE_S_<run> (s) and whose last update is 5
FAKE_TRAIN = """#!/usr/bin/env bash
save=""; prev=""
for a in "$@"; do [ "$prev" = --save-dir ] && save="$a"; prev="$a"; done
mkdir -p "$save"
printf '%s\\n' "$@" > "$save/args.txt"
run=$(basename "$(dirname "$save")"); var="FAKE_S_$run"
echo "{\\"kind\\": \\"train\\", \\"update\\": 5, \\"time\\": 1.0, \\"train_time_s\\": ${!var}}" > "$save/train_log.jsonl"
touch "$save/checkpoint_best.pt"
"""


def _fake_stage3(tmp_path: Path, *argv: str, asr_xs_s: float = 100.0) -> subprocess.CompletedProcess:
    """Stage 3 of the recipe over FAKE_TRAIN, with ASR runs of 250 s x seed (asr_hf) and ``asr_xs_s`` x seed."""
    bin_dir, data, exp = tmp_path / "bin", tmp_path / "data", tmp_path / "exp"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "mmst-train").write_text(FAKE_TRAIN)
        (bin_dir / "mmst-train").chmod(0o755)
        data.mkdir()
        (data / "config.yaml").write_text("tgt_langs: [de]\n")
        (data / "tst-unseen.tsv").write_text("")
    for run, t in (("asr_hf", 250.0), ("asr_xs", asr_xs_s)):
        for seed in (1, 2):
            d = exp / "models" / run / f"seed{seed}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "train_log.jsonl").write_text(json.dumps({"kind": "train", "update": 300, "time": 1.0,
                                                           "train_time_s": t * seed}) + "\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "FAKE_S_hf_pretrained": "200", "FAKE_S_hf_scratch": "460", "FAKE_S_xs_asr": "350"}
    return subprocess.run(["bash", "recipes/synthetic/run_backbones.sh", "--data", str(data), "--exp-dir", str(exp),
                           "--stage", "3", "--stop-stage", "3", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def _args(tmp_path: Path, run: str, seed: int) -> list[str]:
    return (tmp_path / "exp" / "models" / run / f"seed{seed}" / "args.txt").read_text().splitlines()


def test_compute_budget_is_the_pretrained_system_s_training_time(tmp_path):
    """--budget compute: per seed, hf_scratch trains with optim.stop_time_hours = (ASR + ST time of hf_pretrained)
    / 3600 and xs_asr with that minus its own ASR time, both with a generous optim.max_update; --budget updates
    retrains them at equal updates; an unchanged plan is skipped."""
    p = _fake_stage3(tmp_path, "--seeds", "1,2")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "optim.max_update=600" in _args(tmp_path, "hf_pretrained", 1)
    # seed 1: 250 + 200 = 450 s = 0.125 h; xs: 450 - 100 = 350 s; seed 2: 500 + 200 = 700 s, xs 700 - 200 = 500 s
    for seed, hours, xs_hours in ((1, "0.125", "0.0972222222"), (2, "0.194444444", "0.138888889")):
        scratch, xs = _args(tmp_path, "hf_scratch", seed), _args(tmp_path, "xs_asr", seed)
        assert f"seed={seed}" in scratch and f"optim.stop_time_hours={hours}" in scratch
        assert "optim.max_update=9000" in scratch  # 10 x (300 + 600): the time stops the run
        assert f"optim.stop_time_hours={xs_hours}" in xs and "optim.max_update=9000" in xs
    p = _fake_stage3(tmp_path, "--seeds", "1,2")
    assert p.stdout.count("already trained") == 6
    p = _fake_stage3(tmp_path, "--seeds", "1", "--budget", "updates")
    assert p.returncode == 0 and p.stdout.count("trained with other options") == 2
    assert "optim.max_update=900" in _args(tmp_path, "hf_scratch", 1)
    assert "optim.max_update=600" in _args(tmp_path, "xs_asr", 1)
    assert not any("stop_time_hours" in a for a in _args(tmp_path, "hf_scratch", 1))


def test_compute_budget_spent_by_the_xs_asr_pretraining_stops_the_recipe(tmp_path):
    p = _fake_stage3(tmp_path, "--seeds", "1", asr_xs_s=500.0)
    assert p.returncode != 0 and "the xs ASR pretraining (500.0 s) took the whole budget" in p.stderr


@pytest.mark.slow
def test_backbones_recipe_tiny(tiny_e2e_data, tmp_path):
    """Slow: run_backbones.sh end to end, one seed: tiny HF encoder folders (transformers), ASR pretraining, three
    trainings and their evaluations, each a Python process (about 2 minutes on 2 cores). At equal updates: a
    wall-clock budget would make the number of updates, and so the tiny models' outputs, depend on the machine's
    load; the compute budget's arguments are checked with a stand-in trainer above."""
    data = tmp_path / "data"
    data.mkdir()
    for f in tiny_e2e_data.iterdir():
        (data / f.name).symlink_to(f.resolve())
    (data / "tst-unseen.tsv").write_text((tiny_e2e_data / "tst-COMMON.tsv").read_text())
    exp = tmp_path / "exp"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
    p = subprocess.run(["bash", "recipes/synthetic/run_backbones.sh", "--data", str(data), "--exp-dir", str(exp),
                        "--seeds", "1", "--budget", "updates", "--asr-max-update", "2", "--st-max-update", "2",
                        "--train-overrides", TINY,
                        # non-empty hypotheses (a score for every system) of at most 10 tokens (default 200)
                        "--eval-extra", "--max-utterances 2 --min-len 1 --max-len-b 10"],
                       cwd=ROOT, env=env, text=True, capture_output=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for n in range(1, 6):
        assert f"== Stage {n}:" in p.stdout
    # the pretrained encoder is a Hugging Face folder with the ASR-trained weights, and the ST model used it
    import torch
    from safetensors.torch import load_file

    from mmst.evaluation.backbones import read_run_training_time

    hf = load_file(exp / "hf_pretrained" / "seed1" / "model.safetensors")
    asr = torch.load(exp / "models" / "asr_hf" / "seed1" / "checkpoint_best.pt", weights_only=True)
    for k, v in hf.items():
        assert torch.equal(asr["model"][f"encoder.hf.{k}"], v), k
    assert not torch.equal(load_file(exp / "hf_init" / "seed1" / "model.safetensors")["encoder.layers.0.attention.q_proj.weight"],
                           hf["encoder.layers.0.attention.q_proj.weight"])
    cfgs = {s: torch.load(exp / "models" / s / "seed1" / "checkpoint_best.pt", weights_only=True)["model_cfg"]
            for s in ("hf_pretrained", "hf_scratch")}
    assert cfgs["hf_pretrained"]["hf_encoder_path"] == str(exp / "hf_pretrained" / "seed1")
    assert cfgs["hf_scratch"]["hf_encoder_path"] == str(exp / "hf_init" / "seed1")
    # equal updates: the scratch run trained the pretrained one's ASR + ST updates; every run's time is recorded
    runs = {r: read_run_training_time(exp / "models" / r / "seed1") for r in ("asr_hf", "hf_pretrained", "hf_scratch")}
    assert runs["hf_scratch"]["updates"] == 4 and all(r["train_time_s"] > 0 for r in runs.values())
    rep = json.loads((exp / "backbones.json").read_text())
    s = rep["summary"]
    assert s["complete"] and list(rep)[0] == "summary"
    assert s["budget"] == "updates" and s["seeds"] == [1] and s["test_splits"] == ["tst-COMMON", "tst-unseen"]
    assert s["interval"] == "paired bootstrap 95%"  # mmst-eval writes every sentence
    assert s["train_time_s"]["hf_pretrained"] == pytest.approx(runs["asr_hf"]["train_time_s"]
                                                               + runs["hf_pretrained"]["train_time_s"])
    b = {n: rep["systems"][n]["bleu"] for n in ("hf_pretrained", "hf_scratch", "xs_asr")}
    assert s["pretrained_minus_scratch_bleu_k3"] == pytest.approx(b["hf_pretrained"] - b["hf_scratch"])
    dep = rep["provenance"]["depends_on"]
    assert "recipes/synthetic/run_backbones.sh" in dep["paths"] and dep["digest"]
    assert "pretrained_minus_scratch_bleu_k3" in (exp / "backbones.md").read_text()
