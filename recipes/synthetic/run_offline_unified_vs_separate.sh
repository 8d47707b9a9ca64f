#!/usr/bin/env bash
# Offline unified vs separate decoders on the `easy` grammar corpus (en -> de, es, fr, ja), with one corpus that has
# test voices seen in training (tst-COMMON) and voices never heard in training (tst-unseen):
#   unified_offline   xs unified, trained offline for 10 min of training wall time (2 CPU cores)
#   separate_offline  xs separate, same
# then offline greedy BLEU of both models on both test sets. (The wait-k-trained counterpart is the
# quickstart model, recipes/synthetic/run.sh: multi-k, the same corpus recipe, scored on both sets.)
#   0  generate the corpus (data_prep/synthesize_corpus.py --num-test-unseen)
#   1  prep the multi-way corpus (data_prep/prep_multiway.py)
#   2  train unified_offline      (mmst-train, conf/train_xs_offline.yaml)
#   3  train separate_offline     (same config, model.arch=separate)
#   4  evaluate (eval/simultaneous_eval.py) and tabulate (eval/compare_systems.py) -> $exp_dir/compare_*
# Run the training stages alone on the machine: the budget is wall time.
set -euo pipefail
cd "$(dirname "$0")/../.."   # repository root
source recipes/lib/stages.sh

# ---- options (each can be overridden: --name value) --------------------------------------------
stage=0
stop_stage=4
force=false
exp_dir=exp/synthetic_offline_archs
tgt_langs=de,es,fr,ja
num_train=4000
num_dev=200
num_test=200
num_test_unseen=200
seed=1
jobs=2
offline_minutes=10           # training wall time of each model (validation excluded)
train_overrides=""           # extra key=value overrides for mmst-train, space separated
eval_extra=""                # extra options for every eval/simultaneous_eval.py call, e.g. "--max-len-b 50"
RECIPE_OPTIONS=(stage stop_stage force exp_dir tgt_langs num_train num_dev num_test num_test_unseen seed jobs
  offline_minutes train_overrides eval_extra)
parse_options "$@"
read -r -a extra <<< "$eval_extra"

raw=$exp_dir/raw
data=$exp_dir/data
models=$exp_dir/models
evals=$exp_dir/eval
mkdir -p "$exp_dir"
hours() { python -c "import sys; print(float(sys.argv[1]) / 60)" "$1"; }

stage0() {
  python data_prep/synthesize_corpus.py --grammar --difficulty easy --out "$raw" --tgt-langs "$tgt_langs" \
    --num-train "$num_train" --num-dev "$num_dev" --num-test "$num_test" \
    --num-test-unseen "$num_test_unseen" --seed "$seed" --jobs "$jobs"
}
stage1() {
  python data_prep/prep_multiway.py --mustc-root "$raw" --tgt-langs "$tgt_langs" --out "$data" --jobs "$jobs" \
    --splits train,dev,tst-COMMON,tst-unseen
}
# shellcheck disable=SC2086
stage2() {
  mmst-train --config recipes/synthetic/conf/train_xs_offline.yaml --data "$data" --save-dir "$models/unified_offline" \
    model.arch=unified optim.stop_time_hours="$(hours "$offline_minutes")" $train_overrides
}
# shellcheck disable=SC2086
stage3() {
  mmst-train --config recipes/synthetic/conf/train_xs_offline.yaml --data "$data" --save-dir "$models/separate_offline" \
    model.arch=separate optim.stop_time_hours="$(hours "$offline_minutes")" $train_overrides
}
stage4() {
  local split name
  for split in tst-COMMON tst-unseen; do
    for name in unified_offline separate_offline; do
      python eval/simultaneous_eval.py --model "$models/$name/checkpoint_last.pt" --data "$data" \
        --split "$split" --tgt-langs "$tgt_langs" --offline --beam 1 --no-progress "${extra[@]}" \
        --out "$evals/$split/$name/offline"
    done
    python eval/compare_systems.py --out "$exp_dir/compare_$split" --no-plots \
      --title "easy corpus, $split: offline greedy BLEU after $offline_minutes min of training" \
      --system unified_offline="$evals/$split/unified_offline" \
      --system separate_offline="$evals/$split/separate_offline"
    cat "$exp_dir/compare_$split/comparison.md"
  done
}

run_stage 0 "generate the easy grammar corpus with seen- and unseen-voice test sets" stage0
run_stage 1 "prep the multi-way corpus" stage1
run_stage 2 "train xs unified offline for $offline_minutes min" stage2
run_stage 3 "train xs separate offline for $offline_minutes min" stage3
run_stage 4 "evaluate (offline greedy) and tabulate" stage4
