#!/usr/bin/env bash
# Run every benchmark on CPU (< 15 min on 2 cores) and print one summary table.
# Results: bench/results/{features,alignment,streaming,train,stragglers,vs_fairseq}.json
# Usage: bench/run_all.sh [--skip-fairseq]      (PY=... to choose the interpreter)
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python
R=bench/results
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
run features   "$PY" bench/bench_features.py --seconds 120 --repeats 2
run alignment  "$PY" bench/bench_alignment.py --segments 100000
run streaming  "$PY" bench/bench_streaming.py --growth-reps 1 --rtf-reps 1
run train      "$PY" bench/bench_train.py --frames 8000 --updates 2 --warmup 1
run stragglers "$PY" bench/bench_stragglers.py --quick
if [ "${1:-}" != "--skip-fairseq" ]; then
  run vs_fairseq "$PY" bench/bench_vs_fairseq.py --updates 12 --pairs 3 --max-tokens 3000
fi
echo "total $(( $(date +%s) - start )) s"
"$PY" bench/summarize.py "$R"
exit $status
