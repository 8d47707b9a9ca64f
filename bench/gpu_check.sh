#!/usr/bin/env bash
# GPU check (< 10 min on one CUDA device): one training step of the s model with bf16 autocast,
# timed with MFU against the measured bf16 matmul peak, and streaming decoding cost on the GPU.
# On a machine without CUDA it prints a skip message and exits 0.
# Results: docs/results/gpu_train.json, docs/results/gpu_streaming.json
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: skipped: no CUDA device (torch.cuda.is_available() is False)"
  exit 0
fi
"$PY" -c "import torch; print('gpu_check:', torch.cuda.get_device_name(0), 'torch', torch.__version__)"
mkdir -p docs/results
set -e
# training step: bf16 autocast (mmst.training.step.autocast_context is on for CUDA), MFU vs bf16 matmul peak
timeout 400 "$PY" bench/bench_train.py --device cuda --sizes xs s --threads 4 --frames 20000 \
  --updates 10 --warmup 3 --peak-n 8192 --out docs/results/gpu_train.json
# streaming decoding on the GPU (fp32; per-segment latency is dominated by kernel launches)
timeout 150 "$PY" - <<'PYEOF'
import json, sys, time
sys.path.insert(0, "bench")
import torch
import bench_streaming as bs
m = bs.build("s", "unified", 8000, bs.LANGS8).cuda()
res = {}
for n in (1, 4, 8):
    langs = bs.LANGS8[:n]
    tr = bs.translator(m, langs, 3, 0.12)
    bs.run_stream(tr, [bs.speechy(2.0)], langs, 320)  # warm-up
    comp, aud, segs, _ = bs.run_stream(tr, [bs.speechy(20.0, 1)], langs, 320)
    res[n] = {"rtf": comp / aud, "ms_per_segment": sum(segs) / len(segs)}
    print(f"streaming on GPU, {n} language(s): RTF {comp / aud:.3f}, {res[n]['ms_per_segment']:.1f} ms/segment")
from provenance import run_record
json.dump({"provenance": run_record("bash bench/gpu_check.sh", depends_on=("bench/gpu_check.sh", *bs.DEPENDS_ON)),
           "device": torch.cuda.get_device_name(0), "rtf_by_num_langs": res},
          open("docs/results/gpu_streaming.json", "w"), indent=2)
PYEOF
