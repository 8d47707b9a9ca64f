"""eval/transcribe_stream.py: reference-free streaming over an audio list (8 kHz, 44.1 kHz stereo)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _main(argv) -> subprocess.CompletedProcess:
    """``mmst-transcribe-stream``'s ``main(argv)`` in this process (``cli_runner.run_main``: exit status,
    stdout, stderr with the log lines)."""
    from cli_runner import run_main

    from mmst.cli.transcribe_stream import main

    return run_main(main, argv)


def test_transcribe_stream_writes_hypotheses_per_file_and_language(tiny_system, tmp_path):
    tiny = tiny_system
    tsv = tmp_path / "list.tsv"
    wavs = [w for w in tiny["wavs"] if "8k" in w.name or "44k" in w.name]
    assert len(wavs) == 2
    tsv.write_text("id\taudio\ten\n" + "".join(f"{w.stem}\t{w}\thello there\n" for w in wavs), encoding="utf-8")
    out = tmp_path / "out"
    p = _main(["--model", tiny["ckpt"], "--data", tiny["data"], "--tsv", tsv, "--waitk-lagging", "2",
               "--max-len-b", "6", "--out", out])
    assert p.returncode == 0, p.stderr[-3000:]
    recs = [json.loads(x) for x in (out / "hypotheses.jsonl").read_text().splitlines()]
    assert [(r["id"], r["lang"]) for r in recs] == [(w.stem, lang) for w in wavs for lang in ("de", "es")]
    for r in recs:
        assert len(r["delays"]) == (len(r["prediction"].replace(" ", "")) if r["lang"] in ("ja", "zh") else len(r["prediction"].split()))
        assert all(0 <= d <= r["source_length_ms"] for d in r["delays"])
        assert r["en"] == "hello there"
    # 44.1 kHz stereo 1.3 s and 8 kHz 1.2 s are resampled to 16 kHz: lengths in ms are kept.
    lengths = {r["id"]: r["source_length_ms"] for r in recs}
    assert abs(lengths["utt_44k_stereo"] - 1300) < 1 and abs(lengths["utt_8k"] - 1200) < 1
    assert "| utt_8k | de |" in (out / "hypotheses.md").read_text()


def test_transcribe_stream_names_the_missing_field(tmp_path):
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("id\taudio\nx\t\n", encoding="utf-8")
    p = _main(["--model", tmp_path / "none.pt", "--tsv", tsv, "--out", tmp_path / "o"])
    assert p.returncode == 1
    assert "bad.tsv:2: missing field 'audio'" in p.stderr


def test_transcribe_stream_with_policy_per_language(tiny_system, tmp_path):
    tsv = tmp_path / "list.tsv"
    tsv.write_text("id\taudio\n" + f"a\t{tiny_system['wavs'][1]}\n", encoding="utf-8")
    out = tmp_path / "out"
    p = _main(["--model", tiny_system["ckpt"], "--data", tiny_system["data"], "--tsv", tsv,
               "--policy", "alignatt", "--frame-num", "3", "--policy-per-lang", "es=la:n=2", "--beam", "2",
               "--max-len-b", "6", "--out", out])
    assert p.returncode == 0, p.stderr[-3000:]
    recs = {r["lang"]: r for r in map(json.loads, (out / "hypotheses.jsonl").read_text().splitlines())}
    layer = json.loads(json.dumps(recs["de"]["policy"]))
    assert layer.startswith("alignatt(frames=3, layer=") and recs["es"]["policy"] == "la(n=2)"
    assert "policy: de: alignatt(frames=3" in p.stdout
    p = _main(["--model", tiny_system["ckpt"], "--data", tiny_system["data"], "--tsv", tsv, "--policy", "holdn",
               "--policy-args", "n=0", "--out", out])
    assert p.returncode == 1 and "policy parameter n" in p.stderr
