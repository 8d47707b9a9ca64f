#!/usr/bin/env bash
# The wait-k experiment on the `hard` grammar corpus (long sentences, verb-final subordinate clauses in
# de, SOV with relative clauses in ja): the same xs unified model and the same budget
# (optim.max_update updates of data.max_tokens frames) trained twice,
#   offline   full attention everywhere (conf/train_xs_offline.yaml, no time limit here)
#   multik    multi-k wait-k over a chunk-causal encoder (conf/train_xs.yaml: k in {1..5, offline})
# then both decoded at wait-k = 1,3,5 (streaming, joint decoding) and offline (greedy), and one table:
# the wait-k BLEU drop of the offline-trained model per language, and what multi-k training recovers.
#   0  generate the hard grammar corpus (data_prep/synthesize_corpus.py)
#   1  prep the multi-way corpus (data_prep/prep_multiway.py)
#   2  train both models (mmst-train; --train-jobs 2 runs them side by side, 1 thread each)
#   3  evaluate: k sweep + offline greedy (eval/simultaneous_eval.py)
#   4  table and BLEU-vs-AL plots (eval/compare_systems.py) -> $exp_dir/compare/
set -euo pipefail
cd "$(dirname "$0")/../.."   # repository root
source recipes/lib/stages.sh

# ---- options (each can be overridden: --name value) --------------------------------------------
stage=0
stop_stage=4
force=false
exp_dir=exp/synthetic_hard
tgt_langs=de,es,fr,ja
num_train=6000
num_dev=200
num_test=200
seed=1
jobs=2                       # processes for synthesis and feature extraction
max_update=1500              # the shared budget
train_jobs=2                 # 2: train both models at once with 1 thread each (2-core laptop)
eval_waitk_lagging=1,3,5
eval_max_utterances=0        # 0 = the whole test split
source_segment_size=320      # ms
train_overrides=""           # extra key=value overrides for both mmst-train runs, space separated
eval_extra=""                 # extra options for every eval/simultaneous_eval.py call, e.g. "--min-len 2"
RECIPE_OPTIONS=(stage stop_stage force exp_dir tgt_langs num_train num_dev num_test seed jobs max_update
  train_jobs eval_waitk_lagging eval_max_utterances source_segment_size train_overrides eval_extra)
parse_options "$@"

raw=$exp_dir/raw
data=$exp_dir/data
mkdir -p "$exp_dir"
common="optim.max_update=$max_update optim.stop_time_hours=0 valid.interval_updates=500 \
checkpoint.save_interval_updates=500 valid.max_len_a=1.0 $train_overrides"

train_one() {  # train_one NAME CONFIG THREADS
  # shellcheck disable=SC2086
  mmst-train --config "$2" --data "$data" --save-dir "$exp_dir/models/$1" num_threads="$3" $common \
    > "$exp_dir/train_$1.log" 2>&1 || { echo "training $1 failed; see $exp_dir/train_$1.log" >&2; return 1; }
  echo "trained $1: $(tail -n 1 "$exp_dir/train_$1.log")"
}

stage0() {
  python data_prep/synthesize_corpus.py --grammar --difficulty hard --out "$raw" --tgt-langs "$tgt_langs" \
    --num-train "$num_train" --num-dev "$num_dev" --num-test "$num_test" --seed "$seed" --jobs "$jobs"
}
stage1() {
  python data_prep/prep_multiway.py --mustc-root "$raw" --tgt-langs "$tgt_langs" --out "$data" --jobs "$jobs"
}
stage2() {
  if [ "$train_jobs" -ge 2 ]; then
    train_one offline recipes/synthetic/conf/train_xs_offline.yaml 1 & local p1=$!
    train_one multik recipes/synthetic/conf/train_xs.yaml 1 & local p2=$!
    wait "$p1" && wait "$p2"
  else
    train_one offline recipes/synthetic/conf/train_xs_offline.yaml 2
    train_one multik recipes/synthetic/conf/train_xs.yaml 2
  fi
}
stage3() {
  local name limit=() extra=()
  [ "$eval_max_utterances" -gt 0 ] && limit=(--max-utterances "$eval_max_utterances")
  read -r -a extra <<< "$eval_extra"
  for name in offline multik; do
    python eval/simultaneous_eval.py --model "$exp_dir/models/$name/checkpoint_last.pt" --data "$data" \
      --split tst-COMMON --tgt-langs "$tgt_langs" --waitk-lagging "$eval_waitk_lagging" --max-len-a 1.0 \
      --source-segment-size "$source_segment_size" "${limit[@]}" "${extra[@]}" \
      --out "$exp_dir/eval/$name"
    python eval/simultaneous_eval.py --model "$exp_dir/models/$name/checkpoint_last.pt" --data "$data" \
      --split tst-COMMON --tgt-langs "$tgt_langs" --offline --beam 1 --max-len-a 1.0 \
      "${limit[@]}" "${extra[@]}" --out "$exp_dir/eval/$name/offline"
  done
}
stage4() {
  python eval/compare_systems.py --out "$exp_dir/compare" \
    --title "hard grammar corpus: offline-trained vs multi-k wait-k-trained xs unified ($max_update updates)" \
    --system offline-trained="$exp_dir/eval/offline" --system multi-k="$exp_dir/eval/multik"
  echo
  echo "Table: $exp_dir/compare/comparison.md; plots: $exp_dir/compare/bleu_al_<lang>.png"
}

run_stage 0 "generate the hard grammar corpus (en -> $tgt_langs)" stage0
run_stage 1 "prep the multi-way corpus" stage1
run_stage 2 "train offline and multi-k xs unified models ($max_update updates each)" stage2
run_stage 3 "evaluate at k = $eval_waitk_lagging and offline (greedy)" stage3
run_stage 4 "comparison table" stage4
