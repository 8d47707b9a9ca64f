"""Latency metrics on hand-computed vectors and against SimulEval 1.1.4's own scorers."""

from __future__ import annotations

import json
import random

import pytest

from mmst.evaluation.latency import (
    LATENCY_METRICS,
    LatencyError,
    average_lagging,
    average_proportion,
    average_token_delay,
    corpus_latency,
    differentiable_average_lagging,
    end_offset,
    length_adaptive_average_lagging,
    reference_length,
    sentence_latency,
    split_units,
    start_offset,
)


@pytest.mark.parametrize("n,k", [(5, 1), (5, 3), (10, 4), (7, 7)])
def test_waitk_equal_lengths_gives_al_k(n, k):
    # wait-k on text, |X| = |Y*| = |Y| = n: d_i = min(k + i - 1, n)
    delays = [min(k + i - 1, n) for i in range(1, n + 1)]
    assert average_lagging(delays, n, n) == pytest.approx(k)
    assert length_adaptive_average_lagging(delays, n, n) == pytest.approx(k)
    assert differentiable_average_lagging(delays, n) == pytest.approx(k)


def test_waitk_3_of_5_values():
    delays = [3, 4, 5, 5, 5]
    assert average_proportion(delays, 5, 5) == pytest.approx(22 / 25)
    assert start_offset(delays) == 3
    assert end_offset(delays, 5) == 0


@pytest.mark.parametrize("n", [1, 4, 9])
def test_all_at_end_gives_al_source_length(n):
    delays = [n] * n
    assert average_lagging(delays, n, n) == pytest.approx(n)
    assert average_proportion(delays, n, n) == pytest.approx(1.0)


def test_over_generation_al_laal_dal_ap():
    # |X| = 4, |Y*| = 2, |Y| = 6
    delays = [2, 3, 4, 4, 4, 4]
    # AL: 1/gamma = 2, tau = 3: (2 + (3-2) + (4-4)) / 3
    assert average_lagging(delays, 4, 2) == pytest.approx(1.0)
    # LAAL: 1/gamma = 4/6: (2 + (3 - 2/3) + (4 - 4/3)) / 3 = 7/3 (over-generation is not rewarded)
    assert length_adaptive_average_lagging(delays, 4, 2) == pytest.approx(7 / 3)
    assert length_adaptive_average_lagging(delays, 4, 2) > average_lagging(delays, 4, 2)
    # DAL: hypothesis length, d' = [2, 3, 4, 14/3, 16/3, 6]; terms 2, 7/3, 8/3 x 4 -> 15/6
    assert differentiable_average_lagging(delays, 4) == pytest.approx(2.5)
    # AP with the reference length (SimulEval default): 21 / (4 * 2); with |Y|: 21 / 24
    assert average_proportion(delays, 4, 2) == pytest.approx(21 / 8)
    assert average_proportion(delays, 4, 6) == pytest.approx(21 / 24)


def test_under_generation():
    # |X| = 6, |Y*| = 6, |Y| = 2
    delays = [3, 6]
    assert average_lagging(delays, 6, 6) == pytest.approx(4.0)  # (3 + (6 - 1)) / 2
    assert length_adaptive_average_lagging(delays, 6, 6) == pytest.approx(4.0)  # max(2, 6) = 6
    assert differentiable_average_lagging(delays, 6) == pytest.approx(3.0)  # 1/gamma = 3: (3 + 6 - 3) / 2
    assert average_proportion(delays, 6, 6) == pytest.approx(0.25)


def test_laal_equals_al_without_over_generation():
    delays = [300.0, 900.0, 1500.0]
    assert length_adaptive_average_lagging(delays, 1500.0, 4) == average_lagging(delays, 1500.0, 4)


def test_first_delay_beyond_source():
    assert average_lagging([7, 8], 5, 2) == 7
    assert length_adaptive_average_lagging([7, 8], 5, 2) == 7


def test_computation_aware_speech():
    # speech, |X| = 1000 ms, |Y*| = 2 words
    delays, elapsed = [400.0, 1000.0], [450.0, 1120.0]
    plain = sentence_latency(delays, 1000.0, 2)
    ca = sentence_latency(delays, 1000.0, 2, elapsed=elapsed, computation_aware=True)
    assert plain["AL"] == pytest.approx(450.0)  # (400 + (1000 - 500)) / 2
    assert ca["AL"] == pytest.approx(535.0)  # (450 + (1120 - 500)) / 2
    assert ca["StartOffset"] == 450.0 and ca["EndOffset"] == pytest.approx(120.0)
    # ATD: source tokens end at 300, 400 | 700, 1000; targets end at 400 and 1000 -> (100 + 600) / 2
    assert plain["ATD"] == pytest.approx(350.0)
    # compute times 50 and 70 ms: targets end at 450 and 1070 -> (150 + 670) / 2
    assert ca["ATD"] == pytest.approx(410.0)
    assert average_token_delay(delays, elapsed) == pytest.approx(410.0)


def test_reference_length_and_units():
    assert reference_length("a b  c", "word") == 3  # whitespace-separated words
    assert reference_length(" a b  c ", "word") == 3
    assert reference_length("a b  c", "word", simuleval_compat=True) == 4  # SimulEval splits on single spaces
    assert reference_length(" a b  c ", "word", simuleval_compat=True) == 6
    assert reference_length(" 你好 世界 ", "char") == 5  # inner space counts, like SimulEval
    assert split_units("你好 世界", "char") == ["你", "好", "世", "界"]
    with pytest.raises(ValueError):
        reference_length("x", "spm")


def test_errors():
    with pytest.raises(LatencyError):
        average_lagging([], 10, 3)
    with pytest.raises(LatencyError):
        average_lagging([1], 0, 3)
    with pytest.raises(LatencyError, match="every hypothesis is empty"):
        corpus_latency([{"index": 0, "delays": [], "elapsed": [], "source_length": 10, "reference": "a"}])


def test_corpus_skips_empty_and_zero_source():
    ins = [
        {"index": 0, "delays": [1, 2], "elapsed": [1, 2], "source_length": 2, "reference": "a b"},
        {"index": 1, "delays": [], "elapsed": [], "source_length": 2, "reference": "a b"},
        {"index": 2, "delays": [1], "elapsed": [1], "source_length": 0, "reference": "a"},
    ]
    res = corpus_latency(ins)
    assert res.n_scored == 1 and res.skipped_empty == [1] and res.skipped_invalid[0][0] == 2
    assert res.scores["AL"] == pytest.approx(1.0)
    assert res.scores["AL_CA"] == pytest.approx(1.0)


def _random_instance(rng: random.Random, index: int, unit: str) -> dict:
    src_ms = rng.choice([320.0, 1000.0, rng.uniform(500, 8000)])
    n = rng.randint(1, 12)
    steps = sorted(rng.choice([320.0 * j for j in range(1, 30)] + [src_ms]) for _ in range(n))
    delays = [min(s, src_ms) for s in steps]
    acc, elapsed = 0.0, []
    for d in delays:
        acc += rng.choice([0.0, rng.uniform(0, 80)])
        elapsed.append(d + acc)
    if unit == "word":
        ref = " ".join("w" for _ in range(rng.randint(1, 15)))
        pred = " ".join("w" for _ in range(n))
    else:
        ref = "字" * rng.randint(1, 15)
        pred = "字" * n
    return {
        "index": index, "prediction": pred, "delays": delays, "elapsed": elapsed, "prediction_length": n,
        "reference": ref, "source": ["x"], "source_length": src_ms,
    }


@pytest.mark.parametrize("unit", ["word", "char"])
def test_matches_simuleval_scorers_on_random_instances(unit):
    from simuleval.evaluator.instance import LogInstance
    from simuleval.evaluator.scorers import get_scorer_class

    rng = random.Random(1234 if unit == "word" else 99)
    for _ in range(20):
        raw = [_random_instance(rng, i, unit) for i in range(rng.randint(1, 6))]
        ours = corpus_latency(raw, unit).scores
        logs = {i: LogInstance(json.dumps(r), unit) for i, r in enumerate(raw)}
        for name in LATENCY_METRICS:
            ref_plain = get_scorer_class("latency", name)(computation_aware=False, use_ref_len=True)(logs)
            ref_ca = get_scorer_class("latency", name)(computation_aware=True, use_ref_len=True)(logs)
            assert ours[name] == pytest.approx(ref_plain, abs=1e-6), name
            assert ours[f"{name}_CA"] == pytest.approx(ref_ca, abs=1e-6), name + "_CA"
        nr = corpus_latency(raw, unit, use_ref_len=False).scores
        for name in ("AL", "LAAL", "AP"):
            ref = get_scorer_class("latency", name)(computation_aware=False, use_ref_len=False)(logs)
            assert nr[name] == pytest.approx(ref, abs=1e-6)


def test_reference_word_count_default_and_simuleval_compat(tmp_path):
    """References with repeated/trailing spaces: by default AL/LAAL/AP use the real word count;
    --simuleval-compat reproduces SimulEval 1.1.4's scorers (split on single spaces)."""
    import subprocess
    import sys
    from pathlib import Path

    from simuleval.evaluator.instance import LogInstance
    from simuleval.evaluator.scorers import get_scorer_class

    raw = [
        {"index": 0, "prediction": "x y z", "delays": [500.0, 1000.0, 2000.0], "elapsed": [510.0, 1020.0, 2050.0],
         "prediction_length": 3, "reference": "a b  c  d ", "source": ["x"], "source_length": 2000.0},
        {"index": 1, "prediction": "x y", "delays": [700.0, 1500.0], "elapsed": [700.0, 1600.0],
         "prediction_length": 2, "reference": "a  b", "source": ["x"], "source_length": 1500.0},
    ]
    plain_refs = [dict(r, reference=" ".join(r["reference"].split())) for r in raw]
    ours = corpus_latency(raw, "word").scores
    assert ours == pytest.approx(corpus_latency(plain_refs, "word").scores)  # spaces do not change latency
    compat = corpus_latency(raw, "word", simuleval_compat=True).scores
    logs = {i: LogInstance(json.dumps(r), "word") for i, r in enumerate(raw)}
    for name in ("AL", "LAAL", "AP"):
        theirs = get_scorer_class("latency", name)(computation_aware=False, use_ref_len=True)(logs)
        assert compat[name] == pytest.approx(theirs, abs=1e-6), name
        assert ours[name] != pytest.approx(theirs, abs=1e-3), name
    log = tmp_path / "instances.log"
    log.write_text("".join(json.dumps(r) + "\n" for r in raw))
    score = Path(__file__).resolve().parents[1] / "eval" / "score.py"

    def cli(*extra):
        r = subprocess.run([sys.executable, str(score), "--instances", str(log), "--tgt-langs", "de", "--json",
                            *extra], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    assert cli()["AL"] == pytest.approx(ours["AL"])
    assert cli("--simuleval-compat")["AL"] == pytest.approx(compat["AL"])
