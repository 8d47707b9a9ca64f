#!/usr/bin/env bash
# Speech-encoder backbones on the quickstart setting (easy synthetic corpus, unified multi-k wait-k):
# does an encoder pretrained here on English ASR (saved as a Hugging Face folder) transfer what it holds? An
# ASR-then-ST curriculum against ST alone on a toy corpus, not evidence about real pretrained models. Systems, at
# equal training updates, not equal compute (--asr-max-update of ASR pretraining + --st-max-update of ST; the
# scratch system trains ST for their sum):
#   hf_pretrained  a tiny wav2vec 2.0-style encoder (mmst-hf-encoder init --size wav2vec2-tiny) pretrained
#                  on English ASR (CTC + attention, conf/asr_hf_tiny.yaml), written as a Hugging Face folder
#                  (mmst-hf-encoder extract: save_pretrained, safetensors), then ST from it (conf/train_hf_tiny.yaml)
#   hf_scratch     the same encoder from its random initialisation, ST only
#   xs_asr         the quickstart's own xs encoder with its ASR pretraining (conf/asr_xs.yaml, conf/train_xs.yaml)
# evaluated at k = --eval-waitk-lagging on tst-COMMON and tst-unseen; the summary is
# {pretrained_minus_scratch_bleu_k3, hf_minus_xs_asr_bleu_k3} (mmst-backbones, mmst/evaluation/backbones.py).
# Reuses a prepared corpus (recipes/synthetic/run.sh --stop-stage 1 writes exp/synthetic/data). Stages:
#   1  the random encoder folder
#   2  English ASR view of DATA, ASR pretraining of both encoders; the pretrained wav2vec 2.0-style encoder as a Hugging Face folder
#   3  train the three ST systems
#   4  evaluate checkpoint_best.pt on both test sets
#   5  table and summary JSON (--copy-to PREFIX also copies it (committed results: under docs/results/) and re-renders
#      the docs)
# Stages 2-4 skip finished items.
set -euo pipefail
cd "$(dirname "$0")/../.."   # repository root
source recipes/lib/stages.sh
source recipes/lib/augment.sh

# ---- options (each can be overridden: --name value) --------------------------------------------
stage=1
stop_stage=5
force=false
data=exp/synthetic/data          # prepared easy corpus (with tst-unseen)
exp_dir=exp/backbones
encoder=hf-wav2vec2-tiny         # the Hugging Face encoder: hf-<named size of mmst-hf-encoder init>
seed=1
asr_max_update=300
st_max_update=600
hf_asr_config=recipes/synthetic/conf/asr_hf_tiny.yaml
hf_config=recipes/synthetic/conf/train_hf_tiny.yaml
xs_asr_config=recipes/synthetic/conf/asr_xs.yaml
xs_config=recipes/synthetic/conf/train_xs.yaml
train_overrides=""               # extra key=value overrides for every mmst-train run (ASR too)
nproc=1
eval_waitk_lagging=3
eval_extra=""                    # extra mmst-eval options, space separated
source_segment_size=320          # ms
copy_to=""                       # also write the report as <copy-to>.{md,json}, then re-render the docs
RECIPE_OPTIONS=(stage stop_stage force data exp_dir encoder seed asr_max_update st_max_update hf_asr_config hf_config
  xs_asr_config xs_config train_overrides nproc eval_waitk_lagging eval_extra source_segment_size copy_to)
recipe_args=""                   # the command line as typed (quoted where needed), recorded in the report
for a in "$@"; do
  if [[ "$a" =~ ^[A-Za-z0-9_./,:=+-]*$ ]]; then recipe_args+=" $a"; else recipe_args+=" ${a@Q}"; fi
done
parse_options "$@"

require_synthetic_data "$data"
if [ ! -f "$data/tst-unseen.tsv" ]; then
  echo "$0: $data has no tst-unseen split (recipes/synthetic/run.sh --num-test-unseen 200)" >&2; exit 2
fi
case "$encoder" in hf-*) ;; *) echo "$0: --encoder $encoder: expected hf-<size> (hf-wav2vec2-tiny)" >&2; exit 2 ;; esac
systems="hf_pretrained hf_scratch xs_asr"
hf_init=$exp_dir/hf_init             # the random encoder (Hugging Face folder)
hf_pretrained=$exp_dir/hf_pretrained # the same after ASR pretraining (Hugging Face folder)
models_dir=$exp_dir/models
evals_dir=$exp_dir/eval
mkdir -p "$exp_dir"

stage1() {
  mmst-hf-encoder init --size "${encoder#hf-}" --seed "$seed" --out "$hf_init"
}
stage2() {
  asr_pretrain "$data" "$exp_dir/data_asr" "$models_dir/asr_hf" "$hf_asr_config" \
    "seed=$seed optim.max_update=$asr_max_update model.overrides.hf_encoder_path=$hf_init $train_overrides"
  if [ ! -f "$hf_pretrained/config.json" ] || [ "$force" = "true" ]; then
    mmst-hf-encoder extract --model "$models_dir/asr_hf/checkpoint_best.pt" --out "$hf_pretrained"
  fi
  asr_pretrain "$data" "$exp_dir/data_asr" "$models_dir/asr_xs" "$xs_asr_config" \
    "seed=$seed optim.max_update=$asr_max_update $train_overrides"
}
# overrides_of SYSTEM: its config and mmst-train overrides
config_of() { case "$1" in xs_asr) echo "$xs_config" ;; *) echo "$hf_config" ;; esac; }
overrides_of() {
  case "$1" in
    hf_pretrained) echo "optim.max_update=$st_max_update model.overrides.hf_encoder_path=$hf_pretrained" ;;
    hf_scratch) echo "optim.max_update=$((asr_max_update + st_max_update)) model.overrides.hf_encoder_path=$hf_init" ;;
    xs_asr) echo "optim.max_update=$st_max_update valid.interval_updates=200 checkpoint.save_interval_updates=200 checkpoint.load_pretrained_encoder_from=$models_dir/asr_xs/checkpoint_best.pt" ;;
  esac
}
stage3() {
  local sys dir
  for sys in $systems; do
    dir="$models_dir/$sys"
    if [ -f "$dir/.train_done" ] && [ "$force" != "true" ]; then
      echo "-- $sys already trained ($dir); skipping"; continue
    fi
    [ "$force" = "true" ] && rm -rf "$dir"
    echo "-- training $sys -> $dir"
    # shellcheck disable=SC2046,SC2086
    launch_train --config "$(config_of "$sys")" --data "$data" --save-dir "$dir" "seed=$seed" \
      $(overrides_of "$sys") $train_overrides < /dev/null
    touch "$dir/.train_done"
  done
}
stage4() {
  local sys split out ex=()
  # shellcheck disable=SC2206
  [ -n "$eval_extra" ] && ex+=($eval_extra)
  for sys in $systems; do
    for split in tst-COMMON tst-unseen; do
      out="$evals_dir/$split/$sys/seed$seed"
      if [ -f "$out/scores.json" ] && [ "$force" != "true" ]; then
        echo "-- $out already evaluated; skipping"; continue
      fi
      echo "-- evaluating $sys on $split (k = $eval_waitk_lagging) -> $out"
      mmst-eval --model "$models_dir/$sys/checkpoint_best.pt" --data "$data" --split "$split" \
        --waitk-lagging "$eval_waitk_lagging" --source-segment-size "$source_segment_size" --out "$out" \
        --no-progress "${ex[@]}" < /dev/null
    done
  done
}
stage5() {
  mmst-backbones --evals-dir "$evals_dir" --seeds "$seed" --waitk-lagging "$eval_waitk_lagging" \
    --command "bash recipes/synthetic/run_backbones.sh${recipe_args}" \
    --describe "hf_pretrained=ASR-pretrained $encoder ($asr_max_update updates of English ASR on the same synthetic train split), ST $st_max_update updates" \
    --describe "hf_scratch=$encoder from random weights, ST $((asr_max_update + st_max_update)) updates" \
    --describe "xs_asr=mmst's xs encoder pretrained on English ASR ($asr_max_update updates), ST $st_max_update updates" \
    --out "$exp_dir/backbones" ${copy_to:+--copy-to "$copy_to"}
  [ -n "$copy_to" ] && python tools/render_docs.py
  cat "$exp_dir/backbones.md"
}

run_stage 1 "random $encoder folder" stage1
run_item_stage 2 "English ASR view, ASR pretraining ($encoder and xs); the pretrained encoder as a Hugging Face folder" stage2
run_item_stage 3 "train $systems" stage3
run_item_stage 4 "evaluate on tst-COMMON and tst-unseen at k = $eval_waitk_lagging" stage4
run_item_stage 5 "table and summary" stage5
