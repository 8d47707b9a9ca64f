#!/usr/bin/env bash
# GPU check (under 8 minutes on one CUDA device: the steps' time limits add up to 7.5 minutes):
#  1. environment: GPU, compute capability, memory, CUDA, cuDNN, driver, torch (printed and in the JSON meta);
#  2. training: 300 updates of the s model, bf16 autocast, fused AdamW, eager and torch.compile(dynamic=False),
#     MFU against the measured bf16 matmul peak, peak CUDA memory           -> docs/results/gpu_train.json
#  3. streaming: RTF and ms per segment of the s model for 1, 4 and 8 jointly decoded languages
#                                                                           -> docs/results/gpu_streaming.json
#  4. stragglers: DDP and DropCompute with 2 ranks sharing the GPU over gloo (NCCL refuses two ranks on one
#     device), one rank 2x slow, on a generated feature corpus             -> "stragglers" in gpu_train.json
# Without CUDA it prints one "no GPU" line and exits 0.
# Usage: bash bench/gpu_check.sh        (PY=... interpreter; R=DIR results directory; WORK=DIR scratch)
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: no GPU (torch.cuda.is_available() is False); nothing measured"
  exit 0
fi
R=${R:-docs/results}
WORK=${WORK:-$(mktemp -d -t gpu_check.XXXXXX)}
mkdir -p "$R" "$WORK"
start=$(date +%s)
set -e
"$PY" - <<'PYEOF'
import sys
sys.path.insert(0, "bench")
import torch
from bench_train import cuda_environment
print("gpu_check:", ", ".join(f"{k} {v}" for k, v in {"torch": torch.__version__, **cuda_environment()}.items()))
PYEOF
# 2. training (bench_train.py measures the bf16 matmul peak at --peak-n and the MFU of each row)
# (one synthetic batch shape, so the compiled row compiles once, inside the warm-up)
timeout 270 "$PY" bench/bench_train.py --device cuda --sizes s --threads 4 --precision bf16 --optimizer fused \
  --compile false true --frames 20000 --distinct-batches 1 --updates 300 --warmup 3 --peak-n 8192 --specaugment none \
  --out "$R/gpu_train.json"
# 3. streaming decoding on the GPU (fp32; per-segment cost is dominated by kernel launches)
timeout 60 "$PY" - "$R/gpu_streaming.json" <<'PYEOF'
import sys
sys.path.insert(0, "bench")
import torch
import bench_streaming as bs
from bench_train import cuda_environment
from provenance import run_record, write_results
prov = run_record("bash bench/gpu_check.sh", depends_on=("bench/gpu_check.sh", *bs.DEPENDS_ON))
m = bs.build("s", "unified", 8000, bs.LANGS8).cuda()
res = {}
for n in (1, 4, 8):
    langs = bs.LANGS8[:n]
    tr = bs.translator(m, langs, 3, 0.12)
    bs.run_stream(tr, [bs.speechy(2.0)], langs, 320)  # warm-up
    torch.cuda.reset_peak_memory_stats()
    comp, aud, segs, _ = bs.run_stream(tr, [bs.speechy(20.0, 1)], langs, 320)
    res[n] = {"rtf": comp / aud, "ms_per_segment": sum(segs) / len(segs),
              "cuda_max_allocated_mb": torch.cuda.max_memory_allocated() / 2**20}
    print(f"streaming on GPU, {n} language(s): RTF {comp / aud:.3f}, {res[n]['ms_per_segment']:.1f} ms/segment")
write_results(sys.argv[1], {"provenance": prov, "meta": {"torch": torch.__version__, **cuda_environment()},
                            "rtf_by_num_langs": res})
PYEOF
# 4. stragglers: 2 gloo ranks on the one GPU, DDP and DropCompute, one 2x slow rank
"$PY" -c "import sys; sys.path.insert(0, 'bench'); import bench_vs_fairseq as v; v.make_data(__import__('pathlib').Path(sys.argv[1]), 200)" "$WORK"
timeout 120 "$PY" bench/bench_stragglers_mmst.py --quick --data "$WORK/data" --modes ddp,dropcompute \
  --train-overrides "device=cuda distributed.options.backend=gloo" --run-timeout 60 \
  --out "$WORK/stragglers.json" --plot "$WORK/stragglers.png"
"$PY" - "$R/gpu_train.json" "$WORK/stragglers.json" <<'PYEOF'
import json, sys
train, strag = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
train["stragglers"] = {k: v for k, v in strag.items() if k != "provenance"}
train["stragglers"]["depends_on"] = strag["provenance"].get("depends_on")
open(sys.argv[1], "w").write(json.dumps(train, indent=2) + "\n")
print(f"gpu_check: straggler rows added to {sys.argv[1]}")
PYEOF
echo "gpu_check: done in $(( $(date +%s) - start )) s; results $R/gpu_train.json $R/gpu_streaming.json"
