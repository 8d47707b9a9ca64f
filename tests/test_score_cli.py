"""eval/score.py on written instances.log files: --json output, computation-aware, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run_main

from mmst.evaluation.instances import make_instance, read_instances, write_instances
from mmst.evaluation.latency import LATENCY_METRICS

ROOT = Path(__file__).resolve().parents[1]
SCORE = ROOT / "eval" / "score.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    """``mmst-score``'s ``main(argv)`` in this process (``cli_runner.run_main``)."""
    from mmst.cli.score import main

    return run_main(main, args)


def test_the_script_runs_as_a_process():
    p = subprocess.run([sys.executable, str(SCORE), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--json" in p.stdout


@pytest.fixture()
def log(tmp_path: Path) -> Path:
    ins = [
        make_instance(0, ["das", "ist", "ein", "Haus"], [640, 960, 1280, 1500], [650, 990, 1330, 1580],
                      "das ist ein Haus", ["a.wav"], 1500.0),
        make_instance(1, ["der", "Hund"], [320, 700], [330, 760], "der Hund bellt", ["b.wav"], 700.0),
        make_instance(2, [], [], [], "leer", ["c.wav"], 500.0),
    ]
    p = tmp_path / "instances.log"
    write_instances(p, ins)
    return p


def test_roundtrip(log: Path):
    ins = read_instances(log)
    assert [i["index"] for i in ins] == [0, 1, 2]
    assert ins[0]["prediction"] == "das ist ein Haus" and ins[0]["prediction_length"] == 4
    assert set(ins[0]) >= {"index", "prediction", "delays", "elapsed", "prediction_length", "reference",
                           "source", "source_length"}


def test_json_output(log: Path):
    r = _run("--instances", str(log), "--tgt-langs", "de", "--computation-aware", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for m in LATENCY_METRICS:
        assert m in out and f"{m}_CA" in out
    assert "BLEU" in out
    # hand check on the 2 non-empty sentences (empty one skipped): AL with |Y*| = 4 and 3
    al0 = (640 + (960 - 375) + (1280 - 750) + (1500 - 1125)) / 4
    al1 = (320 + (700 - 700 / 3)) / 2
    assert out["AL"] == pytest.approx((al0 + al1) / 2)
    assert out["AL_CA"] > out["AL"]
    assert "empty hypothesis" in r.stderr


def test_plain_output_and_no_ca(log: Path):
    r = _run("--instances", str(log), "--json")
    assert r.returncode == 0
    assert "AL_CA" not in json.loads(r.stdout)
    r = _run("--instances", str(log), "--tgt-langs", "de", "--computation-aware")
    assert r.returncode == 0 and "sacrebleu:" in r.stdout and "| AL |" in r.stdout


def test_all_empty_is_clear_error(tmp_path: Path):
    p = tmp_path / "instances.log"
    write_instances(p, [make_instance(i, [], [], [], "x y", [], 1000.0) for i in range(3)])
    r = _run("--instances", str(p), "--json")
    assert r.returncode == 1
    assert "every hypothesis is empty" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("content,msg", [("", "empty file"), ("{not json\n", "not valid JSON"),
                                         ('{"index": 0}\n', "missing key")])
def test_bad_files(tmp_path: Path, content: str, msg: str):
    p = tmp_path / "instances.log"
    p.write_text(content)
    r = _run("--instances", str(p))
    assert r.returncode == 1 and msg in r.stderr and "Traceback" not in r.stderr


def test_missing_file(tmp_path: Path):
    r = _run("--instances", str(tmp_path / "nope.log"))
    assert r.returncode == 1 and "not found" in r.stderr and "Traceback" not in r.stderr


def test_missing_reference(tmp_path: Path):
    p = tmp_path / "instances.log"
    write_instances(p, [make_instance(0, ["a", "b"], [100, 200], [100, 200], None, [], 200.0)])
    r = _run("--instances", str(p), "--json")
    assert r.returncode == 0 and "no reference" in r.stderr
    out = json.loads(r.stdout)
    assert "BLEU" not in out and out["AL"] == pytest.approx((100 + 100) / 2)
