#!/usr/bin/env bash
# Run every benchmark on CPU (< 15 min on 2 cores) and print one summary table.
# Results: bench/results/{features,alignment,streaming,train,stragglers,vs_fairseq}.json
# Usage: bench/run_all.sh [--skip-fairseq]      (PY=... interpreter; R=DIR results directory)
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python
R=${R:-bench/results}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}   # spinning OpenMP threads cost 10-40x on shared CPUs
mkdir -p "$R"
start=$(date +%s)
status=0
run() {  # name, command...
  local name=$1; shift
  local t0=$(date +%s)
  echo "=== $name: $*"
  if "$@" > "$R/$name.log" 2>&1; then
    echo "    ok ($(( $(date +%s) - t0 )) s)"
  else
    echo "    FAILED ($(( $(date +%s) - t0 )) s), see $R/$name.log"; tail -5 "$R/$name.log"; status=1
  fi
}
run features   "$PY" bench/bench_features.py --seconds 120 --repeats 2 --out "$R/features.json"
run alignment  "$PY" bench/bench_alignment.py --segments 100000 --out "$R/alignment.json"
run streaming  "$PY" bench/bench_streaming.py --growth-reps 1 --rtf-reps 1 --out "$R/streaming.json"
note=$("$PY" -c 'from mmst.training.step import bf16_warning as w; print(w("cpu", "bf16") or "")' 2>/dev/null)
if [ -n "$note" ]; then
  echo "note: bf16 rows of train and vs_fairseq are skipped on this CPU ($note)"
fi
run train      "$PY" bench/bench_train.py --frames 8000 --updates 2 --warmup 1 --precision fp32 bf16 --out "$R/train.json"
run stragglers "$PY" bench/bench_stragglers.py --quick --out "$R/stragglers.json"
if [ "${1:-}" != "--skip-fairseq" ]; then
  run vs_fairseq "$PY" bench/bench_vs_fairseq.py --updates 20 --pairs 3 --max-tokens 3000 --threads 1 \
    --precision fp32 bf16 --out "$R/vs_fairseq.json"
fi
echo "total $(( $(date +%s) - start )) s"
"$PY" bench/summarize.py "$R"
exit $status
