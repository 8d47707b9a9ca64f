#!/usr/bin/env bash
# The sync vs async vs bilingual comparison on the synthetic grammar corpus: the same data and the same training budget
# (optim.max_update, batch size, multi-k wait-k) for
#   bilingual      one model per target language
#   separate       shared encoder, one decoder per language, sync
#   unified_sync   one decoder, every language at lag k
#   async_d{1,2}[_<reversed order>]   unified async, delta 1 and 2 chunks, two language orders
# each with --seeds (default 1,2,3), evaluated sweeping k in --eval-k (default 1,3,5,7) on tst-COMMON
# with joint decoding, then a Markdown table (BLEU and AL per language and system, mean ± std over
# seeds, parameter counts) and BLEU-vs-AL plots. Reuses a prepared corpus (recipes/synthetic/run.sh
# --stop-stage 1 writes exp/synthetic/data). Stages:
#   1  train every (system, seed)            (mmst-train, conf/compare_xs.yaml); first, with
#      --speed-perturb true, the speed-perturbed copies and, with --asr-pretrain true, one English ASR
#      pretraining of the encoder (conf/asr_xs.yaml, same augmentation) that every model starts from
#   2  average the last --avg-last checkpoints (mmst-average-checkpoints)
#   3  evaluate, k sweep                      (eval/simultaneous_eval.py)
#   4  comparison table and plots             (eval/compare_systems.py) -> $exp_dir/compare/
set -euo pipefail
cd "$(dirname "$0")/../.."   # repository root
source recipes/lib/stages.sh
source recipes/lib/systems.sh
source recipes/lib/augment.sh

# ---- options (each can be overridden: --name value) --------------------------------------------
stage=1
stop_stage=4
force=false                  # redo finished stages
data=exp/synthetic/data      # prepared multi-way DATA (recipes/synthetic/run.sh stages 0-1)
exp_dir=exp/synthetic_compare
tgt_langs=""                 # default: every language of $data/config.yaml
systems=""                   # default: bilingual,separate,unified_sync,async_d1,async_d2,async_d1_<rev>,async_d2_<rev>
async_delta=1                # only for a system named unified_async
async_order=""               # only for a system named unified_async
seeds=1,2,3
config=recipes/synthetic/conf/compare_xs.yaml
max_update=""                # the budget: optim.max_update of every model (default: the config's)
train_overrides=""           # extra key=value overrides for every mmst-train run, space separated
pretrained_encoder=""        # optional encoder init (checkpoint.load_pretrained_encoder_from) for every model
specaugment=none             # SpecAugment policy of every model: none | LB | LD | SM | SS
speed_perturb=false          # true: every model trains on speed-perturbed copies (--speed-factors)
speed_factors=0.9,1.0,1.1
asr_pretrain=false           # true: pretrain one encoder on English ASR (first seed, same augmentation) for all
asr_config=recipes/synthetic/conf/asr_xs.yaml
jobs=1                       # processes for the speed-perturbation features
nproc=1                      # >1: train with torchrun --nproc_per_node $nproc
avg_last=10
eval_split=tst-COMMON
eval_waitk_lagging=1,3,5,7
eval_max_utterances=0        # 0 = the whole split
eval_threads=""
eval_extra=""                # more eval/simultaneous_eval.py options
source_segment_size=320      # ms
RECIPE_OPTIONS=(stage stop_stage force data exp_dir tgt_langs systems async_delta async_order seeds config
  max_update train_overrides pretrained_encoder specaugment speed_perturb speed_factors asr_pretrain asr_config
  jobs nproc avg_last eval_split eval_waitk_lagging eval_max_utterances
  eval_threads eval_extra source_segment_size)
parse_options "$@"

require_synthetic_data "$data"
[ -n "$tgt_langs" ] || tgt_langs=$(data_tgt_langs "$data")
if [ -z "$systems" ]; then
  rev=$(echo "${tgt_langs//,/ }" | tr ' ' '\n' | tac | paste -sd- -)
  systems="bilingual,separate,unified_sync,async_d1,async_d2,async_d1_${rev},async_d2_${rev}"
fi
check_systems
models_dir=$exp_dir/models
evals_dir=$exp_dir/eval
mkdir -p "$exp_dir"
aug="$(augment_overrides "$specaugment" "$speed_perturb" "$speed_factors")"
extra="$train_overrides $aug${max_update:+ optim.max_update=$max_update}"
if [ "$asr_pretrain" = "true" ]; then
  [ -n "$pretrained_encoder" ] && { echo "$0: --asr-pretrain true and --pretrained-encoder exclude each other" >&2; exit 2; }
  pretrained_encoder=$exp_dir/asr/checkpoint_best.pt
fi
[ -n "$pretrained_encoder" ] && extra="$extra checkpoint.load_pretrained_encoder_from=$pretrained_encoder"

stage1() {
  [ "$speed_perturb" = "true" ] && ensure_speed_perturbed "$data" "$speed_factors" "$jobs"
  if [ "$asr_pretrain" = "true" ]; then
    asr_pretrain "$data" "$exp_dir/data_asr" "$exp_dir/asr" "$asr_config" "seed=${seeds%%,*} $train_overrides $aug"
  fi
  train_models "$config" "$data" "$extra"
}
stage2() { average_models; }
stage3() { eval_models "$data"; }
stage4() {
  compare_models "$exp_dir/compare" "Synthetic corpus: sync vs async vs bilingual ($eval_split, k = $eval_waitk_lagging, seeds $seeds)"
  echo
  echo "Table: $exp_dir/compare/comparison.md; plots: $exp_dir/compare/bleu_al_<lang>.png"
}

run_item_stage 1 "train $systems (seeds $seeds, languages $tgt_langs)" stage1
run_item_stage 2 "average the last $avg_last checkpoints" stage2
run_item_stage 3 "evaluate on $eval_split, k = $eval_waitk_lagging, joint decoding" stage3
run_item_stage 4 "comparison table and BLEU-vs-AL plots" stage4
