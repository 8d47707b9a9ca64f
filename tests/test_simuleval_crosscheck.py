"""Cross-check against the real SimulEval 1.1.4 CLI.

A tiny untrained model (fixed seed, output length capped by ``--max-len-b``) is evaluated on a few
synthetic utterances (16 kHz, 8 kHz, 44.1 kHz stereo, silent) twice:

1. by ``eval/simultaneous_eval.py`` (our streaming driver), and
2. by ``simuleval --agent-class mmst.agents.MMSTSpeechToTextAgent`` (SimulEval drives our agent).

Then ``eval/score.py`` scores SimulEval's ``instances.log`` and must agree with SimulEval's own scores:
every latency metric to 1e-6 (SimulEval's scorers recomputed in-process on its log, unrounded; and
the CLI's ``scores.tsv`` to its 3 printed decimals), BLEU to 0.01.

SimulEval 1.1.4 defect (SimulEval issue 44): with ``--computation-aware`` it computes the plain metrics from
``elapsed`` too, so its AL equals AL_CA.  We therefore compare our plain metrics with a SimulEval run
without the flag and our ``_CA`` metrics with a run with it; our scorer reports both in one run.
References are derived from the predictions (perturbed) so that BLEU is not trivially 0 (the
computation-aware Spanish run uses sacrebleu's ``char`` tokenizer on both sides for the same reason).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run_main

from mmst.evaluation.latency import LATENCY_METRICS

# the SimulEval CLI and our driver end to end; one worker builds the module's system
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("simuleval_crosscheck")]

ROOT = Path(__file__).resolve().parents[1]

SIMULEVAL = Path(sys.executable).parent / "simuleval"
LANGS = ("es", "ja")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
COMMON = ["--waitk-lagging", "3", "--max-len-b", "10", "--source-segment-size", "320"]


def _simuleval(out: Path, src: Path, tgt: Path, lang: str, *extra: str, process: bool = False) -> None:
    """SimulEval's CLI on our agent: as a ``simuleval`` process, or its ``main()`` in this process (a new
    process costs seconds of imports; SimulEval reads its options from ``sys.argv``)."""
    argv = ["--agent-class", "mmst.agents.MMSTSpeechToTextAgent", "--model", str(out.parent / "ckpt.pt"),
            "--tgt-lang", lang, "--source", str(src), "--target", str(tgt), "--output", str(out),
            "--no-progress-bar", "--latency-metrics", *LATENCY_METRICS, *COMMON, *extra]
    if process:
        r = subprocess.run([str(SIMULEVAL), *argv], capture_output=True, text=True, timeout=120, env=ENV,
                           cwd=str(out.parent))
    else:
        from simuleval.cli import main

        def entry(args: list[str]) -> int:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(sys, "argv", ["simuleval", *args])
                mp.chdir(out.parent)
                return main()

        r = run_main(entry, argv)
    assert r.returncode == 0, r.stderr[-3000:]


def _score(log: Path, lang: str, *extra: str) -> dict:
    # ``mmst-score`` in this process (tests/test_score_cli.py runs the script)
    from mmst.cli.score import main

    r = run_main(main, ["--instances", str(log), "--tgt-langs", lang, "--json", *extra])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _simuleval_scores(log: Path, unit: str, tokenizer: str, computation_aware: bool) -> dict:
    """SimulEval's own scorers on its log, unrounded (what its CLI computes before rounding)."""
    from simuleval.evaluator.instance import LogInstance
    from simuleval.evaluator.scorers import get_scorer_class
    from simuleval.evaluator.scorers.quality_scorer import SacreBLEUScorer

    instances = {}
    for line in log.read_text().splitlines():
        ins = LogInstance(line.strip(), unit)
        instances[ins.index] = ins
    out = {"BLEU": SacreBLEUScorer(tokenizer)(instances)}
    for name in LATENCY_METRICS:  # exactly SentenceLevelEvaluator.from_args
        out[name] = get_scorer_class("latency", name)(computation_aware=computation_aware, use_ref_len=True)(instances)
        if computation_aware:
            out[name + "_CA"] = get_scorer_class("latency", name)(computation_aware=True, use_ref_len=True)(instances)
    return out


def _tsv(out: Path) -> dict:
    with open(out / "scores.tsv") as f:
        row = next(csv.DictReader(f, delimiter="\t"))
    return {k: float(v) for k, v in row.items()}


def _perturb(pred: str, i: int, unit: str) -> str:
    if unit == "char":
        return (pred[:-1] + "の") if len(pred) > 1 else "の"
    w = pred.split()
    return " ".join((w[:-1] if len(w) > 1 else w) + ["extra", "words"][: i % 3]) or "x"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if not SIMULEVAL.is_file():
        pytest.skip(f"simuleval CLI not found at {SIMULEVAL}")
    from eval_fixtures import make_tiny_system

    root = tmp_path_factory.mktemp("xcheck")
    sysd = make_tiny_system(root, langs=LANGS, extra_audio=True)
    ours = root / "ours"
    from mmst.cli.simultaneous_eval import main  # ``mmst-eval`` in this process

    r = run_main(main, ["--model", str(sysd["ckpt"]), "--data", str(sysd["data"]), "--tgt-langs",
                        ",".join(LANGS), "--out", str(ours), "--threads", "1", "--no-progress", *COMMON])
    assert r.returncode == 0, r.stderr[-3000:]
    src = root / "source.list"
    src.write_text("".join(f"{w}\n" for w in sysd["wavs"]))
    units = {"es": "word", "ja": "char"}
    ours_ins = {lang: [json.loads(x) for x in (ours / lang / "instances.log").read_text().splitlines()] for lang in LANGS}
    tgts = {}
    for lang in LANGS:
        tgts[lang] = root / f"target.{lang}"
        tgts[lang].write_text("".join(_perturb(d["prediction"], i, units[lang]) + "\n"
                                      for i, d in enumerate(ours_ins[lang])))
    _simuleval(root / "sim_es_plain", src, tgts["es"], "es", process=True)
    # char BLEU tokenizer here: the untrained model writes few 13a tokens, so 13a BLEU would be 0
    _simuleval(root / "sim_es_ca", src, tgts["es"], "es", "--computation-aware", "--sacrebleu-tokenizer", "char")
    _simuleval(root / "sim_ja_ca", src, tgts["ja"], "ja", "--computation-aware", "--eval-latency-unit", "char",
               "--sacrebleu-tokenizer", "ja-mecab")
    yield {"root": root, "ours": ours_ins, "sys": sysd}
    shutil.rmtree(root, ignore_errors=True)


def _check(ours: dict, theirs: dict, keys, tol: float) -> None:
    for k in keys:
        assert ours[k] == pytest.approx(theirs[k], abs=tol), (k, ours[k], theirs[k])


def test_plain_metrics_match_simuleval_without_flag(setup):
    """Slow: the module builds a tiny system and runs SimulEval's CLI (once as a process)."""
    log = setup["root"] / "sim_es_plain" / "instances.log"
    ours = _score(log, "es")
    theirs = _simuleval_scores(log, "word", "13a", computation_aware=False)
    _check(ours, theirs, LATENCY_METRICS, 1e-6)
    _check(ours, theirs, ["BLEU"], 0.01)
    _check(ours, _tsv(log.parent), LATENCY_METRICS, 5e-4 + 1e-9)  # the CLI's own (3-decimal) output


def test_ca_metrics_match_simuleval_with_flag(setup):
    log = setup["root"] / "sim_es_ca" / "instances.log"
    ours = _score(log, "es", "--computation-aware", "--sacrebleu-tokenizer", "char")
    theirs = _simuleval_scores(log, "word", "char", computation_aware=True)
    ca = [m + "_CA" for m in LATENCY_METRICS]
    _check(ours, theirs, ca, 1e-6)
    _check(ours, theirs, ["BLEU"], 0.01)
    tsv = _tsv(log.parent)
    _check(ours, tsv, ca, 5e-4 + 1e-9)
    assert ours["BLEU"] == pytest.approx(tsv["BLEU"], abs=0.01) and ours["BLEU"] > 0
    # SimulEval issue 44: with the flag its plain AL is computed from elapsed; ours is not.
    assert theirs["AL"] == theirs["AL_CA"]
    assert ours["AL"] != ours["AL_CA"]
    plain = _simuleval_scores(setup["root"] / "sim_es_plain" / "instances.log", "word", "13a", False)
    _check(ours, plain, LATENCY_METRICS, 1e-6)  # same delays in both runs -> same plain metrics


def test_char_unit_japanese(setup):
    log = setup["root"] / "sim_ja_ca" / "instances.log"
    ours = _score(log, "ja", "--computation-aware")
    theirs_ca = _simuleval_scores(log, "char", "ja-mecab", computation_aware=True)
    theirs_plain = _simuleval_scores(log, "char", "ja-mecab", computation_aware=False)
    _check(ours, theirs_ca, [m + "_CA" for m in LATENCY_METRICS], 1e-6)
    _check(ours, theirs_plain, LATENCY_METRICS, 1e-6)
    _check(ours, theirs_ca, ["BLEU"], 0.01)
    assert ours["BLEU"] > 0


@pytest.mark.parametrize("lang,run", [("es", "sim_es_plain"), ("ja", "sim_ja_ca")])
def test_our_driver_reproduces_simuleval(setup, lang, run):
    """Our streaming driver writes what SimulEval records for our agent (16 kHz files: same samples)."""
    sim = [json.loads(x) for x in (setup["root"] / run / "instances.log").read_text().splitlines()]
    ours = setup["ours"][lang]
    assert len(sim) == len(ours)
    n16 = 0
    for s, o, row in zip(sim, ours, setup["sys"]["rows"]):
        assert s["source_length"] == pytest.approx(o["source_length"], abs=0.1)
        if "8k" in row["id"] or "44k" in row["id"]:
            continue  # resampled differently (SimulEval streams native-rate audio to the agent)
        n16 += 1
        assert s["prediction"] == o["prediction"]
        assert s["delays"] == o["delays"]
    assert n16 >= 3
