"""mmst-train --distributed {ddp,dropcompute,param-server} end to end on the tiny feature corpus (torchrun,
2-3 CPU ranks, gloo). Slow: each run starts torchrun and trains a tiny model for a few updates."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mmst.distributed.env import find_free_port
from mmst.training.checkpoint import load_checkpoint

TINY = ["num_threads=1", "logging.progress_bar=false", "logging.tensorboard=false", "data.max_tokens=1500",
        "optim.warmup_updates=2", "valid.bleu_subset=0", "model.overrides.d_model=32",
        "model.overrides.encoder_layers=1", "model.overrides.decoder_layers=1", "model.overrides.ffn_dim=32",
        "model.overrides.conv_channels=32", "model.overrides.attention_heads=2", "optim.update_freq=2",
        "optim.max_update=3", "checkpoint.save_interval_updates=0", "valid.interval_updates=0"]


@pytest.mark.slow
@pytest.mark.parametrize("mode,nproc", [("ddp", 2), ("dropcompute", 2), ("param-server", 3)])
def test_mmst_train_distributed(tiny_feature_data, tmp_path, mode, nproc):
    save = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{find_free_port()}",
           "-m", "mmst.training.cli", "--data", str(tiny_feature_data), "--save-dir", str(save),
           "--distributed", mode, "--log-level", "WARNING", *TINY]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=110, env=env)
    assert p.returncode == 0, p.stderr[-4000:]
    ck = load_checkpoint(save / "checkpoint_last.pt")
    assert ck["train_state"]["num_updates"] == 3
