"""The walkthrough of docs/data-and-corpora.md ("Your own recordings: lists -> train -> average ->
evaluate -> export -> serve") run as written, at toy scale: the block between the ``walkthrough`` markers
is executed line by line with bash, with only the sizes replaced (each replacement must find its text, so
the test fails when the walkthrough changes without it). The exported folder must then give the same
scores as the averaged checkpoint, and the last line, ``mmst-serve --model ...``, must serve it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "data-and-corpora.md"
TINY_MODEL = ("model.overrides.d_model=64 model.overrides.encoder_layers=2 model.overrides.decoder_layers=1 "
              "model.overrides.attention_heads=2 model.overrides.ffn_dim=128 model.overrides.conv_channels=64")
#: (text in the walkthrough, its toy-scale replacement)
SCALE = [
    ("--num-train 2000 --num-dev 100 --num-test 100", "--num-train 16 --num-dev 3 --num-test 3"),
    ("optim.max_update=600 checkpoint.save_interval_updates=100",
     f"optim.max_update=3 checkpoint.save_interval_updates=1 optim.warmup_updates=1 valid.interval_updates=3 "
     f"valid.bleu_subset=0 valid.best_metric=loss num_threads=1 logging.progress_bar=false "
     f"logging.tensorboard=false data.max_tokens=4000 {TINY_MODEL}"),
    ("--split tst-COMMON --waitk-lagging 3 --out", "--split tst-COMMON --waitk-lagging 3 --max-len-b 6 --no-progress --out"),
]


def walkthrough_commands(text: str) -> list[str]:
    """The shell commands of the walkthrough block (continuation lines joined, comments dropped)."""
    m = re.search(r"<!-- walkthrough:begin -->\s*```bash\n(.*?)```\s*<!-- walkthrough:end -->", text, re.S)
    assert m, f"{DOC}: no walkthrough block"
    cmds, cur = [], ""
    for line in m.group(1).splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        cur += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            cmds.append(cur.strip())
            cur = ""
    return cmds


def test_walkthrough_lists_to_served_model(tmp_path):
    """Slow: the README's own-data walkthrough end to end: lists, prep, training, averaging, evaluation,
    export and a served model, each a command."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (Debian package espeak-ng); the walkthrough synthesizes its corpus")
    text = DOC.read_text(encoding="utf-8")
    for old, new in SCALE:
        assert old in text, f"walkthrough changed: {old!r} not found in {DOC}; update SCALE in this test"
        text = text.replace(old, new)
    cmds = [c.replace("exp/mine", str(tmp_path / "mine")) for c in walkthrough_commands(text)]
    assert [c.split()[0] for c in cmds] == ["mmst-synthesize-corpus", "mmst-prep-lists", "mmst-train", "mmst-average-checkpoints", "mmst-eval",
                                            "mmst-export", "mmst-serve"]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", OMP_NUM_THREADS="1")
    for cmd in cmds[:-1]:
        p = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, text=True, capture_output=True, timeout=300)
        assert p.returncode == 0, f"{cmd}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    mine = tmp_path / "mine"
    rep = json.loads((mine / "data" / "prep_report.json").read_text())
    assert rep["tool"] == "prep_lists" and rep["gcmvn"]["split"] == "train"
    assert rep["splits"]["train"]["kept"] == 16 and rep["splits"]["tst-COMMON"]["kept"] == 3
    folder = mine / "model_export"
    cfg = json.loads((folder / "config.json").read_text())
    assert len(cfg["training"]["averaged_from"]) == 3 and cfg["export"]["scores"] == str(mine / "eval")
    assert "## Scores" in (folder / "README.md").read_text()
    # the folder decodes exactly like the averaged checkpoint it came from
    p = subprocess.run(["bash", "-c", cmds[4].replace("model/checkpoint_avg.pt", "model_export")
                        .replace(str(mine / "eval"), str(mine / "eval_folder"))],
                       cwd=ROOT, env=env, text=True, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    a = json.loads((mine / "eval" / "scores.json").read_text())["per_lang"]
    b = json.loads((mine / "eval_folder" / "scores.json").read_text())["per_lang"]
    for lang in ("de", "es"):
        for metric in ("BLEU", "AL", "LAAL", "AP"):
            assert a[lang].get(metric) == b[lang].get(metric), (lang, metric)
    # the last line serves the folder: it listens, and a test utterance comes back as words
    serve_args = cmds[-1].split()[1:]
    from mmst.audio import load_audio
    from mmst.data.manifest import read_manifest
    from mmst.serve.client import stream_audio
    from mmst.serve.process import server_process

    row = read_manifest(mine / "data" / "tst-COMMON.tsv")[0]
    x = load_audio(row["wav"], float(row["offset"]), float(row["duration"]))
    with server_process([*serve_args, "--max-len-b", "6"], tmp_path / "serve.log") as (_, port):
        res = asyncio.run(stream_audio(f"ws://127.0.0.1:{port}/ws", x, realtime=False))
    assert res.summary is not None and res.close_code == 1000, (res.close_code, res.close_reason)
    assert {e["type"] for e in res.events} >= {"summary"}
