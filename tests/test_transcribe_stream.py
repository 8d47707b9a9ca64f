"""eval/transcribe_stream.py: reference-free streaming over an audio list (8 kHz, 44.1 kHz stereo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _main(argv) -> subprocess.CompletedProcess:
    """Run ``eval/transcribe_stream.py`` as users do (a separate process)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, str(ROOT / "eval" / "transcribe_stream.py"), *map(str, argv)],
                          capture_output=True, text=True, timeout=300, env=env)


def test_transcribe_stream_writes_hypotheses_per_file_and_language(tiny_system, tmp_path):
    tiny = tiny_system
    tsv = tmp_path / "list.tsv"
    wavs = [w for w in tiny["wavs"] if "8k" in w.name or "44k" in w.name]
    assert len(wavs) == 2
    tsv.write_text("id\taudio\ten\n" + "".join(f"{w.stem}\t{w}\thello there\n" for w in wavs), encoding="utf-8")
    out = tmp_path / "out"
    p = _main(["--checkpoint", tiny["ckpt"], "--data", tiny["data"], "--tsv", tsv, "--waitk-lagging", "2",
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
    p = _main(["--checkpoint", tmp_path / "none.pt", "--tsv", tsv, "--out", tmp_path / "o"])
    assert p.returncode == 1
    assert "bad.tsv:2: missing field 'audio'" in p.stderr
