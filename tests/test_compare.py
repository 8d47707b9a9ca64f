"""System comparison over wait-k sweeps (mmst/evaluation/compare.py, eval/compare_systems.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mmst.evaluation.compare import (
    CompareError,
    SystemRuns,
    compare_systems,
    format_cell,
    mean_std,
    parse_systems,
    read_eval_dir,
    write_comparison,
)

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / "eval" / "compare_systems.py"


def write_sweep(d: Path, values: dict[int, dict[str, tuple[float, float]]], ckpt: str | None = None,
                num_parameters: int | None = None) -> Path:
    """A k-sweep eval dir as written by eval/simultaneous_eval.py: values[k][lang] = (BLEU, AL)."""
    d.mkdir(parents=True, exist_ok=True)
    sweep = {}
    for k, per in values.items():
        pl = {lang: {"BLEU": b, "AL": a, "LAAL": a + 1.0} for lang, (b, a) in per.items()}
        avg = {"BLEU": sum(b for b, _ in per.values()) / len(per), "AL": sum(a for _, a in per.values()) / len(per)}
        sweep[f"k{k}"] = {"per_lang": pl, "average": avg, "rtf": 0.1}
        cfg = {"checkpoint": ckpt, "waitk": k}
        if num_parameters is not None:
            cfg["num_parameters"] = num_parameters
        (d / f"k{k}").mkdir(exist_ok=True)
        (d / f"k{k}" / "scores.json").write_text(json.dumps(
            {"per_lang": {lang: {**v, "info": {"bleu_signature": "x"}} for lang, v in pl.items()},
             "average": avg, "config": cfg}))
    langs = sorted({lang for per in values.values() for lang in per})
    (d / "scores.json").write_text(json.dumps({"sweep": sweep, "ks": sorted(values), "langs": langs}))
    return d


@pytest.fixture
def evals(tmp_path):
    e = tmp_path / "eval"
    # unified: 3 seeds, de/es, k 1 and 3
    uni = [write_sweep(e / "uni" / f"s{s}", {1: {"de": (10.0 + 2 * s, 1000.0 + 100 * s), "es": (20.0 + s, 900.0)},
                                              3: {"de": (30.0 + 2 * s, 2000.0), "es": (40.0, 1900.0 + 10 * s)}},
                       num_parameters=1000) for s in (0, 1, 2)]
    # separate: 3 seeds
    sep = [write_sweep(e / "sep" / f"s{s}", {1: {"de": (5.0 * (s + 1), 1500.0), "es": (7.0, 1400.0)},
                                              3: {"de": (9.0, 2500.0), "es": (11.0, 2400.0)}},
                       num_parameters=2500) for s in (0, 1, 2)]
    # bilingual: one model per language, 3 seeds each
    bde = [write_sweep(e / "bi_de" / f"s{s}", {1: {"de": (1.0 + s, 800.0)}, 3: {"de": (3.0, 1800.0)}},
                       num_parameters=700) for s in (0, 1, 2)]
    bes = [write_sweep(e / "bi_es" / f"s{s}", {1: {"es": (2.0, 850.0)}, 3: {"es": (4.0 + 3 * s, 1850.0)}},
                       num_parameters=700) for s in (0, 1, 2)]
    return uni, sep, bde, bes


def _arg(name, dirs):
    return f"{name}=" + ",".join(str(d) for d in dirs)


def test_mean_std_exact():
    r = mean_std([10.0, 12.0, 14.0])
    assert r["mean"] == 12.0 and r["std"] == 2.0 and r["n"] == 3
    r = mean_std([5.0])
    assert r["mean"] == 5.0 and r["std"] is None
    assert mean_std([])["mean"] is None
    assert math.isclose(mean_std([1.0, 2.0, 4.0])["std"], math.sqrt(7.0 / 3.0))
    assert format_cell(mean_std([10.0, 12.0, 14.0]), "BLEU") == "12.00 ± 2.00"
    assert format_cell(mean_std([1000.0, 1100.0, 1200.0]), "AL") == "1100 ± 100"
    assert format_cell(mean_std([3.0]), "BLEU") == "3.00" and format_cell(None, "AL") == "-"


def test_read_eval_dir_layouts(tmp_path, evals):
    sweep, info = read_eval_dir(evals[0][1])
    assert sorted(sweep) == ["k1", "k3"] and sweep["k1"]["de"]["BLEU"] == 12.0 and "info" not in sweep["k1"]["de"]
    assert info["num_parameters"] == 1000
    # single-k layout (and offline)
    single = tmp_path / "single"
    single.mkdir()
    (single / "scores.json").write_text(json.dumps({"per_lang": {"de": {"BLEU": 1.5, "AL": 300.0}},
                                                    "average": {}, "config": {"waitk": 5, "checkpoint": "x.pt"}}))
    sweep, info = read_eval_dir(single)
    assert sweep == {"k5": {"de": {"BLEU": 1.5, "AL": 300.0}}} and info["checkpoint"] == "x.pt"
    (single / "scores.json").write_text(json.dumps({"per_lang": {"de": {"BLEU": 9.0, "AL": 900.0}},
                                                    "config": {"waitk": None}}))
    assert list(read_eval_dir(single)[0]) == ["offline"]
    # only k<k>/ directories
    konly = tmp_path / "konly"
    write_sweep(konly, {2: {"de": (4.0, 400.0)}})
    (konly / "scores.json").unlink()
    assert read_eval_dir(konly)[0] == {"k2": {"de": {"BLEU": 4.0, "AL": 400.0, "LAAL": 401.0}}}
    # a sweep plus an offline/ subdirectory (an --offline evaluation written next to the sweep)
    (konly / "offline").mkdir()
    (konly / "offline" / "scores.json").write_text(json.dumps({"per_lang": {"de": {"BLEU": 7.5, "AL": 2000.0}},
                                                               "config": {"waitk": None}}))
    both = read_eval_dir(konly)[0]
    assert sorted(both) == ["k2", "offline"] and both["offline"]["de"]["BLEU"] == 7.5
    with pytest.raises(CompareError, match="not found"):
        read_eval_dir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CompareError, match="no scores.json"):
        read_eval_dir(tmp_path / "empty")


def test_compare_means_stds_params(evals):
    uni, sep, bde, bes = evals
    systems = parse_systems([_arg("unified", uni), _arg("separate", sep), _arg("bilingual", bde),
                             _arg("bilingual", bes)])
    assert [s.name for s in systems] == ["unified", "separate", "bilingual"] and len(systems[2].groups) == 2
    cmp = compare_systems(systems, metrics=("BLEU", "AL"))
    assert cmp["langs"] == ["de", "es"] and cmp["ks"] == ["k1", "k3"]
    assert cmp["n_seeds"] == {"unified": 3, "separate": 3, "bilingual": 3}
    assert cmp["params"] == {"unified": 1000, "separate": 2500, "bilingual": 1400}
    r = cmp["results"]
    # unified de k1: BLEU 10,12,14 ; AL 1000,1100,1200
    assert r["unified"]["de"]["k1"]["BLEU"]["mean"] == 12.0 and r["unified"]["de"]["k1"]["BLEU"]["std"] == 2.0
    assert r["unified"]["de"]["k1"]["AL"]["mean"] == 1100.0 and r["unified"]["de"]["k1"]["AL"]["std"] == 100.0
    assert r["unified"]["es"]["k1"]["BLEU"]["mean"] == 21.0 and r["unified"]["es"]["k1"]["BLEU"]["std"] == 1.0
    assert r["unified"]["es"]["k1"]["AL"]["std"] == 0.0
    assert r["unified"]["es"]["k3"]["AL"]["mean"] == 1910.0 and r["unified"]["es"]["k3"]["AL"]["std"] == 10.0
    # separate de k1: 5,10,15
    assert r["separate"]["de"]["k1"]["BLEU"]["mean"] == 10.0 and r["separate"]["de"]["k1"]["BLEU"]["std"] == 5.0
    # avg over languages per seed, then over seeds: unified k1 BLEU per seed (10+20)/2=15, (12+21)/2=16.5, 18
    assert r["unified"]["avg"]["k1"]["BLEU"]["values"] == [15.0, 16.5, 18.0]
    assert r["unified"]["avg"]["k1"]["BLEU"]["mean"] == 16.5 and r["unified"]["avg"]["k1"]["BLEU"]["std"] == 1.5
    # bilingual: groups merged; es k3 4,7,10 -> 7 ± 3; avg k3 per seed (3+4)/2, (3+7)/2, (3+10)/2
    assert r["bilingual"]["de"]["k1"]["BLEU"]["mean"] == 2.0 and r["bilingual"]["de"]["k1"]["BLEU"]["std"] == 1.0
    assert r["bilingual"]["es"]["k3"]["BLEU"]["mean"] == 7.0 and r["bilingual"]["es"]["k3"]["BLEU"]["std"] == 3.0
    assert r["bilingual"]["avg"]["k3"]["BLEU"]["values"] == [3.5, 5.0, 6.5]
    assert r["bilingual"]["avg"]["k3"]["BLEU"]["std"] == 1.5
    # explicit parameter counts win
    cmp2 = compare_systems(systems, params={"unified": 42})
    assert cmp2["params"]["unified"] == 42


def test_unscored_language_blocks_avg(tmp_path):
    """A language whose hypotheses were all empty is listed, shows '-', and has no 'avg'."""
    d = write_sweep(tmp_path / "a", {1: {"de": (4.0, 400.0), "es": (6.0, 500.0)}})
    obj = json.loads((d / "scores.json").read_text())
    obj["sweep"]["k1"]["per_lang"]["es"] = {}  # what simultaneous_eval writes for an unscorable language
    (d / "scores.json").write_text(json.dumps(obj))
    empty = tmp_path / "b"
    empty.mkdir()
    (empty / "scores.json").write_text(json.dumps({"per_lang": {"de": {"info": {"error": "all empty"}}},
                                                   "config": {"waitk": 1}}))
    cmp = compare_systems(parse_systems([f"a={d}", f"b={empty}"]), count_from_eval=False)
    assert cmp["results"]["a"]["de"]["k1"]["BLEU"]["mean"] == 4.0
    assert cmp["results"]["a"]["es"] == {} and cmp["results"]["a"]["avg"] == {}
    assert cmp["results"]["b"]["de"] == {} and cmp["params"] == {"a": None, "b": None}
    md = write_comparison(cmp, tmp_path / "o") and (tmp_path / "o" / "comparison.md").read_text()
    assert "| a | - | 1 | de, es (no score) |" in md and "| b | - | 1 | de (no score) |" in md
    with pytest.raises(CompareError, match="no system has any score"):
        compare_systems(parse_systems([f"b={empty}"]))


def test_compare_errors(evals, tmp_path):
    uni, sep, bde, bes = evals
    with pytest.raises(CompareError, match="different numbers of seed"):
        compare_systems(parse_systems([_arg("bi", bde), _arg("bi", bes[:2])]))
    with pytest.raises(CompareError, match="appears in two groups"):
        compare_systems(parse_systems([_arg("x", bde), _arg("x", uni)]))
    with pytest.raises(CompareError, match="unknown system"):
        compare_systems(parse_systems([_arg("x", bde)]), params={"y": 3})
    with pytest.raises(CompareError, match="NAME=VALUE"):
        parse_systems(["nodirs"])


def test_write_comparison_table_and_plots(evals, tmp_path):
    uni, sep, bde, bes = evals
    cmp = compare_systems([SystemRuns("unified", [uni], "one decoder"), SystemRuns("separate", [sep])],
                          metrics=("BLEU", "AL"))
    write_comparison(cmp, tmp_path / "out")
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert "| unified | 1.0k | 3 | de, es | one decoder |" in md
    assert "| system | params | BLEU k=1 | AL k=1 | BLEU k=3 | AL k=3 |" in md
    assert "| unified | 1.0k | 12.00 ± 2.00 | 1100 ± 100 | 32.00 ± 2.00 | 2000 ± 0 |" in md
    assert "| separate | 2.5k | 10.00 ± 5.00 | 1500 ± 0 |" in md
    for lang in ("de", "es", "avg"):
        assert (tmp_path / "out" / f"bleu_al_{lang}.png").stat().st_size > 1000
        assert f"bleu_al_{lang}.png" in md
    js = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert js["results"]["separate"]["de"]["k1"]["BLEU"]["std"] == 5.0


def test_params_from_recorded_checkpoint(tiny_model, tmp_path):
    from mmst.training.checkpoint import CHECKPOINT_FORMAT

    model = tiny_model(langs=["de", "es"], encoder_layers=1, decoder_layers=1)
    cfg = model.cfg
    ck = tmp_path / "m.pt"
    torch.save({"format": CHECKPOINT_FORMAT, "model": model.state_dict(), "model_cfg": cfg.to_dict()}, ck)
    d = write_sweep(tmp_path / "e", {1: {"de": (1.0, 100.0)}}, ckpt=str(ck))
    cmp = compare_systems(parse_systems([f"m={d}"]))
    assert cmp["params"]["m"] == model.num_parameters()
    cmp = compare_systems(parse_systems([f"m={d}"]), checkpoints={"m": [ck, ck]})
    assert cmp["params"]["m"] == 2 * model.num_parameters()


def test_cli(evals, tmp_path):
    uni, sep, bde, bes = evals
    p = subprocess.run([sys.executable, str(CLI), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--system" in p.stdout and "--params" in p.stdout
    out = tmp_path / "cmp"
    p = subprocess.run([sys.executable, str(CLI), "--out", str(out), "--system", _arg("unified", uni),
                        "--system", _arg("bilingual", bde), "--system", _arg("bilingual", bes),
                        "--params", "unified=27230000", "--describe", "bilingual=one model per language",
                        "--metrics", "BLEU,AL,LAAL"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    md = (out / "comparison.md").read_text()
    assert "| unified | 27.23M |" in md and "one model per language" in md and "LAAL k=3" in md
    p = subprocess.run([sys.executable, str(CLI), "--out", str(out), "--system", f"x={tmp_path / 'none'}"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stderr.strip().startswith("error:") and "not found" in p.stderr
