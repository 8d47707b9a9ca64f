#!/usr/bin/env bash
# Augmentation on the quickstart setting (easy synthetic corpus, xs unified, multi-k wait-k, 600
# updates): does SpecAugment / speed perturbation / ASR pretraining close the gap between voices heard
# in training (tst-COMMON) and voices never heard (tst-unseen)? Systems (--systems):
#   none         no augmentation
#   specaugment  SpecAugment --specaugment (default LB) after CMVN
#   speed        speed perturbation --speed-factors (default 0.9,1.0,1.1; prep-time copies, soxr)
#   both         SpecAugment + speed perturbation
#   both_asr     both, with the encoder pretrained on English ASR (same augmentation, conf/asr_xs.yaml)
# each with --seeds, evaluated at k = --eval-k with joint decoding on tst-COMMON and tst-unseen.
# Reuses a prepared corpus (recipes/synthetic/run.sh --stop-stage 1 writes exp/synthetic/data) and
# never writes into it: $exp_dir/data links its files and adds the speed-perturbed copies. Stages:
#   1  DATA links + speed-perturbed copies of train   (data_prep/speed_perturb.py)
#   2  ASR view + ASR pretraining, one per seed       (only for *_asr systems)
#   3  train every (system, seed)                     (mmst-train, conf/train_xs.yaml)
#   4  evaluate checkpoint_best.pt on both test sets   (eval/simultaneous_eval.py)
#   5  table and the summary JSON                      (eval/unseen_gap.py)
# Stages 2-5 skip finished items, so a rerun (or more seeds) only does what is new.
set -euo pipefail
cd "$(dirname "$0")/../.."   # repository root
source recipes/lib/stages.sh
source recipes/lib/systems.sh
source recipes/lib/augment.sh

# ---- options (each can be overridden: --name value) --------------------------------------------
stage=1
stop_stage=5
force=false
data=exp/synthetic/data          # prepared easy corpus (with tst-unseen)
exp_dir=exp/augment
systems=none,specaugment,speed,both,both_asr
seeds=1,2
config=recipes/synthetic/conf/train_xs.yaml
st_budget="optim.max_update=600 valid.interval_updates=200 checkpoint.save_interval_updates=200"  # of the ST models
asr_config=recipes/synthetic/conf/asr_xs.yaml
specaugment=LB                   # SpecAugment policy of the specaugment/both systems
speed_factors=0.9,1.0,1.1
train_overrides=""               # extra key=value overrides for every mmst-train run (ASR too)
jobs=1                           # processes for the speed-perturbation features
nproc=1
eval_waitk_lagging=3
eval_threads=""
source_segment_size=320          # ms
copy_to=""                       # also write the report here as <copy-to>.{md,json} (docs/results/augment), then
                                 # re-render the docs' results tables (tools/render_docs.py)
RECIPE_OPTIONS=(stage stop_stage force data exp_dir systems seeds config asr_config specaugment speed_factors
  st_budget train_overrides jobs nproc eval_waitk_lagging eval_threads source_segment_size copy_to)
recipe_args=""                   # the command line as typed (quoted where needed), recorded in the report
for a in "$@"; do
  if [[ "$a" =~ ^[A-Za-z0-9_./,:=+-]*$ ]]; then recipe_args+=" $a"; else recipe_args+=" ${a@Q}"; fi
done
parse_options "$@"

require_synthetic_data "$data"
if [ ! -f "$data/tst-unseen.tsv" ]; then
  echo "$0: $data has no tst-unseen split (recipes/synthetic/run.sh --num-test-unseen 200)" >&2; exit 2
fi
for sys in ${systems//,/ }; do
  case "$sys" in none|specaugment|speed|both|both_asr) ;; *)
    echo "$0: unknown system '$sys' (none, specaugment, speed, both, both_asr)" >&2; exit 2 ;; esac
done
tgt_langs=$(data_tgt_langs "$data")
work_data=$exp_dir/data
models_dir=$exp_dir/models
evals_dir=$exp_dir/eval
mkdir -p "$exp_dir"

# aug_of SYSTEM: the mmst-train augmentation overrides of a system
aug_of() {
  case "$1" in
    none) echo "" ;;
    specaugment) augment_overrides "$specaugment" false "$speed_factors" ;;
    speed) augment_overrides none true "$speed_factors" ;;
    both|both_asr) augment_overrides "$specaugment" true "$speed_factors" ;;
  esac
}
needs_speed() { [[ ",$systems," == *,speed,* || ",$systems," == *,both* ]]; }

stage1() {
  link_data "$data" "$work_data"
  if needs_speed; then ensure_speed_perturbed "$work_data" "$speed_factors" "$jobs"; fi
}
stage2() {
  local seed
  [[ ",$systems," == *_asr,* ]] || { echo "no *_asr system: nothing to do"; return 0; }
  for seed in ${seeds//,/ }; do
    asr_pretrain "$work_data" "$exp_dir/data_asr" "$models_dir/asr/seed$seed" "$asr_config" \
      "seed=$seed $(aug_of both) $train_overrides"
  done
}
stage3() {
  local sys seed dir extra
  for seed in ${seeds//,/ }; do      # seed 1 of every system first
    for sys in ${systems//,/ }; do
      dir="$models_dir/$sys/seed$seed"
      if [ -f "$dir/.train_done" ] && [ "$force" != "true" ]; then
        echo "-- $sys seed $seed already trained ($dir); skipping"; continue
      fi
      [ "$force" = "true" ] && rm -rf "$dir"
      extra="$st_budget $(aug_of "$sys") $train_overrides"
      [[ "$sys" == *_asr ]] && extra="$extra checkpoint.load_pretrained_encoder_from=$models_dir/asr/seed$seed/checkpoint_best.pt"
      echo "-- training $sys (seed $seed) -> $dir"
      # shellcheck disable=SC2086
      launch_train --config "$config" --data "$work_data" --save-dir "$dir" "seed=$seed" $extra < /dev/null
      touch "$dir/.train_done"
    done
  done
}
stage4() {
  local sys seed split out ex=()
  [ -n "$eval_threads" ] && ex+=(--threads "$eval_threads")
  for seed in ${seeds//,/ }; do
    for sys in ${systems//,/ }; do
      for split in tst-COMMON tst-unseen; do
        out="$evals_dir/$split/$sys/seed$seed"
        if [ -f "$out/scores.json" ] && [ "$force" != "true" ]; then
          echo "-- $out already evaluated; skipping"; continue
        fi
        [ -f "$models_dir/$sys/seed$seed/.train_done" ] || { echo "-- $sys seed $seed not trained yet; skipping"; continue; }
        echo "-- evaluating $sys seed $seed on $split (k = $eval_waitk_lagging) -> $out"
        python eval/simultaneous_eval.py --model "$models_dir/$sys/seed$seed/checkpoint_best.pt" \
          --data "$work_data" --split "$split" --tgt-langs "$tgt_langs" --waitk-lagging "$eval_waitk_lagging" \
          --source-segment-size "$source_segment_size" --out "$out" --no-progress "${ex[@]}" < /dev/null
      done
    done
  done
}
stage5() {
  python eval/unseen_gap.py --evals-dir "$evals_dir" --systems "$systems" --seeds "$seeds" --baseline none \
    --waitk-lagging "$eval_waitk_lagging" --models-dir "$models_dir" --command "bash recipes/synthetic/run_augment.sh${recipe_args}" \
    --describe "none=no augmentation" --describe "specaugment=SpecAugment $specaugment" \
    --describe "speed=speed perturbation $speed_factors (prep-time copies, soxr)" \
    --describe "both=SpecAugment $specaugment + speed perturbation $speed_factors" \
    --describe "both_asr=both, encoder pretrained on English ASR with the same augmentation ($asr_config)" \
    --out "$exp_dir/augment" ${copy_to:+--copy-to "$copy_to"}
  if [ -n "$copy_to" ]; then
    [ -f "$work_data/speed_perturb_train.json" ] && cp "$work_data/speed_perturb_train.json" "${copy_to}_speed_prep.json"
    python tools/render_docs.py
  fi
  cat "$exp_dir/augment.md"
}

run_stage 1 "DATA links + speed-perturbed copies ($speed_factors)" stage1
run_item_stage 2 "English ASR view + ASR pretraining (seeds $seeds)" stage2
run_item_stage 3 "train $systems (seeds $seeds)" stage3
run_item_stage 4 "evaluate on tst-COMMON and tst-unseen at k = $eval_waitk_lagging" stage4
run_item_stage 5 "tables and summary" stage5
