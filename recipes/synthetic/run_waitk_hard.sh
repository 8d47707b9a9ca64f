#!/usr/bin/env bash
# The wait-k experiment on the `hard` grammar corpus (long sentences, verb-final subordinate clauses in
# de, SOV with relative clauses in ja): the same xs unified model and the same budget
# (optim.max_update updates of data.max_tokens frames) trained twice,
#   offline   full attention everywhere (conf/train_xs_offline.yaml, no time limit here)
#   multik    multi-k wait-k over a chunk-causal encoder (conf/train_xs.yaml: k in {1..5, offline})
# then both decoded at wait-k = 1,3,5 (streaming, joint decoding) and offline (greedy), and one table:
# the wait-k BLEU drop of the offline-trained model per language, and what multi-k training recovers.
# --seeds (training seeds, as in run_compare.sh): empty (default) trains each model once, with its config's
# seed, into $exp_dir/models/<name>/ (evaluations in $exp_dir/eval/<name>/); "1,2" trains each model once per
# seed (seed=N override) into $exp_dir/models/<name>/seed<N>/ (evaluations in $exp_dir/eval/<name>/seed<N>/,
# the table gives mean ± std over seeds); a seed whose models are trained (.train_done) is not trained again.
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
seed=1                       # corpus synthesis seed
seeds=""                     # training seeds, comma list (empty: one run per model, the config's seed; see above)
jobs=2                       # processes for synthesis and feature extraction
max_update=1500              # the shared budget
train_jobs=2                 # 2: train both models at once with 1 thread each (2-core laptop)
eval_waitk_lagging=1,3,5
eval_max_utterances=0        # 0 = the whole test split
source_segment_size=320      # ms
train_overrides=""           # extra key=value overrides for both mmst-train runs, space separated
eval_extra=""                 # extra options for every eval/simultaneous_eval.py call, e.g. "--min-len 2"
RECIPE_OPTIONS=(stage stop_stage force exp_dir tgt_langs num_train num_dev num_test seed seeds jobs max_update
  train_jobs eval_waitk_lagging eval_max_utterances source_segment_size train_overrides eval_extra)
parse_options "$@"

raw=$exp_dir/raw
data=$exp_dir/data
mkdir -p "$exp_dir"
common="optim.max_update=$max_update optim.stop_time_hours=0 valid.interval_updates=500 \
checkpoint.save_interval_updates=500 valid.max_len_a=1.0 $train_overrides"

# model_dirs NAME: the folder of each training seed of model NAME, one a line ($exp_dir/models/NAME without --seeds)
model_dirs() {
  local s
  if [ -z "$seeds" ]; then echo "$exp_dir/models/$1"; return 0; fi
  for s in ${seeds//,/ }; do echo "$exp_dir/models/$1/seed$s"; done
}

train_one() {  # train_one NAME CONFIG THREADS [SEED]: with SEED, into models/NAME/seedSEED (skipped when trained)
  local dir="$exp_dir/models/$1" log="$exp_dir/train_$1.log" seed_override=()
  if [ -n "${4:-}" ]; then
    dir="$dir/seed$4"; log="$exp_dir/train_$1_seed$4.log"; seed_override=("seed=$4")
    if [ -f "$dir/.train_done" ] && [ "$force" != "true" ]; then echo "$1 seed $4 already trained ($dir)"; return 0; fi
  fi
  # shellcheck disable=SC2086
  mmst-train --config "$2" --data "$data" --save-dir "$dir" num_threads="$3" $common "${seed_override[@]}" \
    > "$log" 2>&1 || { echo "training $1 failed; see $log" >&2; return 1; }
  [ -z "${4:-}" ] || touch "$dir/.train_done"
  echo "trained $1${4:+ seed $4}: $(tail -n 1 "$log")"
}

stage0() {
  python data_prep/synthesize_corpus.py --grammar --difficulty hard --out "$raw" --tgt-langs "$tgt_langs" \
    --num-train "$num_train" --num-dev "$num_dev" --num-test "$num_test" --seed "$seed" --jobs "$jobs"
}
stage1() {
  python data_prep/prep_multiway.py --mustc-root "$raw" --tgt-langs "$tgt_langs" --out "$data" --jobs "$jobs"
}
train_seed() {  # train_seed [SEED]: both models (one seed, or the config's without SEED)
  if [ "$train_jobs" -ge 2 ]; then
    train_one offline recipes/synthetic/conf/train_xs_offline.yaml 1 "$@" & local p1=$!
    train_one multik recipes/synthetic/conf/train_xs.yaml 1 "$@" & local p2=$!
    wait "$p1" && wait "$p2"
  else
    train_one offline recipes/synthetic/conf/train_xs_offline.yaml 2 "$@"
    train_one multik recipes/synthetic/conf/train_xs.yaml 2 "$@"
  fi
}
stage2() {
  local s
  if [ -z "$seeds" ]; then train_seed; return; fi
  for s in ${seeds//,/ }; do train_seed "$s"; done
}
eval_dir() {  # eval_dir NAME MODEL_DIR: the evaluation folder of one of model_dirs NAME
  echo "$exp_dir/eval/$1${2#"$exp_dir/models/$1"}"
}
stage3() {
  local name dir out limit=() extra=()
  [ "$eval_max_utterances" -gt 0 ] && limit=(--max-utterances "$eval_max_utterances")
  read -r -a extra <<< "$eval_extra"
  for name in offline multik; do
    while read -r dir; do
      out=$(eval_dir "$name" "$dir")
      python eval/simultaneous_eval.py --model "$dir/checkpoint_last.pt" --data "$data" \
        --split tst-COMMON --tgt-langs "$tgt_langs" --waitk-lagging "$eval_waitk_lagging" --max-len-a 1.0 \
        --source-segment-size "$source_segment_size" "${limit[@]}" "${extra[@]}" \
        --out "$out" < /dev/null
      python eval/simultaneous_eval.py --model "$dir/checkpoint_last.pt" --data "$data" \
        --split tst-COMMON --tgt-langs "$tgt_langs" --offline --beam 1 --max-len-a 1.0 \
        "${limit[@]}" "${extra[@]}" --out "$out/offline" < /dev/null
    done < <(model_dirs "$name")
  done
}
stage4() {
  local name dir
  local -A evals=()
  for name in offline multik; do
    while read -r dir; do evals[$name]+="${evals[$name]:+,}$(eval_dir "$name" "$dir")"; done < <(model_dirs "$name")
  done
  python eval/compare_systems.py --out "$exp_dir/compare" \
    --title "hard grammar corpus: offline-trained vs multi-k wait-k-trained xs unified ($max_update updates${seeds:+, seeds $seeds})" \
    --system offline-trained="${evals[offline]}" --system multi-k="${evals[multik]}"
  echo
  echo "Table: $exp_dir/compare/comparison.md; plots: $exp_dir/compare/bleu_al_<lang>.png"
}

run_stage 0 "generate the hard grammar corpus (en -> $tgt_langs)" stage0
run_stage 1 "prep the multi-way corpus" stage1
train_stage=run_stage
[ -n "$seeds" ] && train_stage=run_item_stage   # per seed: a trained seed (.train_done) is skipped, a new one trained
"$train_stage" 2 "train offline and multi-k xs unified models ($max_update updates each${seeds:+, seeds $seeds})" stage2
run_stage 3 "evaluate at k = $eval_waitk_lagging and offline (greedy)" stage3
run_stage 4 "comparison table" stage4
