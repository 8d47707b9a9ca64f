#!/usr/bin/env bash
# Run every benchmark on CPU (< 15 min on 2 cores) and print one summary table.
# Results: docs/results/{features,alignment,streaming,train,stragglers_quick,vs_fairseq}.json (each with its
# command, date, commit and machine), rendered into docs/performance.md by tools/render_docs.py.
# Logs: bench/logs/<name>.log.
# Usage: bench/run_all.sh [--skip-fairseq]      (PY=... interpreter; R=DIR results directory; LOGS=DIR)
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python
R=${R:-docs/results}
LOGS=${LOGS:-bench/logs}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}   # spinning OpenMP threads cost 10-40x on shared CPUs
mkdir -p "$R" "$LOGS"
start=$(date +%s)
status=0
run() {  # name, command...
  local name=$1; shift
  local t0=$(date +%s)
  echo "=== $name: $*"
  if "$@" > "$LOGS/$name.log" 2>&1; then
    echo "    ok ($(( $(date +%s) - t0 )) s)"
  else
    echo "    FAILED ($(( $(date +%s) - t0 )) s), see $LOGS/$name.log"; tail -5 "$LOGS/$name.log"; status=1
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
# the quick straggler run has its own file: docs/results/stragglers.json is the full run (bench_stragglers.py)
run stragglers "$PY" bench/bench_stragglers.py --quick --out "$R/stragglers_quick.json"
if [ "${1:-}" != "--skip-fairseq" ]; then
  run vs_fairseq "$PY" bench/bench_vs_fairseq.py --updates 20 --pairs 3 --max-tokens 3000 --threads 1 \
    --precision fp32 bf16 --out "$R/vs_fairseq.json"
fi
echo "total $(( $(date +%s) - start )) s"
"$PY" bench/summarize.py "$R"
echo "render the docs tables: $PY tools/render_docs.py"
exit $status
