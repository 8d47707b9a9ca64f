#!/usr/bin/env bash
# Speech-encoder backbones on the quickstart setting (easy synthetic corpus, unified multi-k wait-k):
# does an encoder pretrained here on English ASR (saved as a Hugging Face folder) transfer what it holds? An
# ASR-then-ST curriculum against ST alone on a toy corpus, not evidence about real pretrained models. Systems:
#   hf_pretrained  a tiny wav2vec 2.0-style encoder (mmst-hf-encoder init --size wav2vec2-tiny) pretrained
#                  on English ASR (CTC + attention, conf/asr_hf_tiny.yaml) for --asr-max-update updates, written as
#                  a Hugging Face folder (mmst-hf-encoder extract: save_pretrained, safetensors), then ST from it
#                  for --st-max-update updates (conf/train_hf_tiny.yaml)
#   hf_scratch     the same encoder from its random initialisation, ST only
#   xs_asr         the quickstart's own xs encoder with its ASR pretraining (conf/asr_xs.yaml, --asr-max-update
#                  updates), then ST (conf/train_xs.yaml)
# Budget (--budget):
#   compute  (default) equal training compute, as wall-clock training time: per seed, hf_pretrained trains first and
#            its training time T (s: ASR + ST, the trainer's train_time_s, validation excluded) is read from the two
#            runs' train_log.jsonl; hf_scratch then trains ST with optim.stop_time_hours = T / 3600, and xs_asr trains
#            ST for T minus its own ASR pretraining's time, so all three spend the same time training. Their
#            optim.max_update is 10 x (--asr-max-update + --st-max-update), so the time stops them (a run that
#            reaches it is reported). Wall-clock time compares only on ONE machine in ONE recipe run: run every seed
#            here on an otherwise idle machine; a system trained by an earlier run is reused with its recorded time.
#   updates  equal training updates (the earlier protocol): hf_scratch trains ST for --asr-max-update +
#            --st-max-update updates, xs_asr ST for --st-max-update.
# Seeds (--seeds 1,2; --seed is its deprecated alias): every stage runs once per seed; the seed sets the random
# encoder (stage 1) and every training run (seed=N). Layout: $exp_dir/hf_init/seed<S>/, $exp_dir/hf_pretrained/seed<S>/
# (Hugging Face folders), $exp_dir/models/<run>/seed<S>/ (runs asr_hf, asr_xs, hf_pretrained, hf_scratch, xs_asr),
# $exp_dir/eval/<split>/<system>/seed<S>/.
# Evaluated at k = --eval-waitk-lagging on tst-COMMON and tst-unseen; the summary is
# {pretrained_minus_scratch_bleu_k3, hf_minus_xs_asr_bleu_k3} (BLEU, the mean over both test sets, the languages and
# the seeds), each with its interval (a paired bootstrap over test sentences, the same resampled sentences in every
# seed; min-max over seeds without per-sentence outputs), the seeds, the test sets, the budget and each system's
# training time (s) and updates (mmst-backbones, mmst/evaluation/backbones.py); LAAL, AL_CA and LAAL_CA beside AL.
# Reuses a prepared corpus (recipes/synthetic/run.sh --stop-stage 1 writes exp/synthetic/data). Stages:
#   1  the random encoder folder of each seed
#   2  English ASR view of DATA, ASR pretraining of both encoders; the pretrained wav2vec 2.0-style encoder as a
#      Hugging Face folder
#   3  train the three ST systems (hf_pretrained first: its time is the budget of the others)
#   4  evaluate checkpoint_best.pt on both test sets
#   5  table and summary JSON (--copy-to PREFIX also copies it (committed results: under docs/results/) and re-renders
#      the docs)
# Stages 1-4 skip finished items: a training run whose .train_done records the same options, an evaluation newer
# than its checkpoint.
set -euo pipefail
cd "$(dirname "$0")/../.."   # repository root
source recipes/lib/stages.sh
source recipes/lib/augment.sh
RECIPE_RENAMED[seed]=seeds       # --seed N: one seed, the old spelling (a warning)

# ---- options (each can be overridden: --name value) --------------------------------------------
stage=1
stop_stage=5
force=false
data=exp/synthetic/data          # prepared easy corpus (with tst-unseen)
exp_dir=exp/backbones
encoder=hf-wav2vec2-tiny         # the Hugging Face encoder: hf-<named size of mmst-hf-encoder init>
seeds=1,2                        # training seeds (comma list): every stage runs per seed
budget=compute                   # compute: equal wall-clock training time; updates: equal training updates
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
RECIPE_OPTIONS=(stage stop_stage force data exp_dir encoder seeds budget asr_max_update st_max_update hf_asr_config hf_config
  xs_asr_config xs_config train_overrides nproc eval_waitk_lagging eval_extra source_segment_size copy_to)
recipe_args=""                   # the command line as typed (quoted where needed), recorded in the report
for a in "$@"; do
  if [[ "$a" =~ ^[A-Za-z0-9_./,:=+-]*$ ]]; then recipe_args+=" $a"; else recipe_args+=" ${a@Q}"; fi
done
parse_options "$@"

case "$budget" in updates|compute) ;; *) echo "$0: --budget needs updates or compute, got '$budget'" >&2; exit 2 ;; esac
IFS=, read -r -a seed_list <<< "$seeds"
for s in "${seed_list[@]}"; do
  case "$s" in ''|*[!0-9]*) echo "$0: --seeds needs whole numbers, comma-separated, got '$seeds'" >&2; exit 2 ;; esac
done
[ "${#seed_list[@]}" -gt 0 ] || { echo "$0: --seeds needs at least one seed" >&2; exit 2; }
require_synthetic_data "$data"
if [ ! -f "$data/tst-unseen.tsv" ]; then
  echo "$0: $data has no tst-unseen split (recipes/synthetic/run.sh --num-test-unseen 200)" >&2; exit 2
fi
case "$encoder" in hf-*) ;; *) echo "$0: --encoder $encoder: expected hf-<size> (hf-wav2vec2-tiny)" >&2; exit 2 ;; esac
systems="hf_pretrained hf_scratch xs_asr"
hf_init=$exp_dir/hf_init             # the random encoder of each seed (Hugging Face folders hf_init/seed<S>)
hf_pretrained=$exp_dir/hf_pretrained # the same after ASR pretraining (hf_pretrained/seed<S>)
models_dir=$exp_dir/models           # training runs: models/<run>/seed<S>
evals_dir=$exp_dir/eval
max_update_cap=$((10 * (asr_max_update + st_max_update)))  # --budget compute: updates the time should stop first
mkdir -p "$exp_dir"

run_dir() { echo "$models_dir/$1/seed$2"; }  # run_dir RUN SEED: its save dir

# train_time_s SAVE_DIR...: the runs' summed training time (s; mmst.evaluation.backbones.total_train_time_s)
train_time_s() {
  python -c 'import sys
from mmst.evaluation.backbones import total_train_time_s
from mmst.evaluation.compare import CompareError
try:
    print(repr(total_train_time_s(sys.argv[1:])))
except CompareError as e:
    sys.exit(f"error: {e}")' "$@"
}
# budget_s SEED: --budget compute: the training time (s) of hf_pretrained of SEED, its ASR pretraining included
budget_s() { train_time_s "$(run_dir asr_hf "$1")" "$(run_dir hf_pretrained "$1")"; }
# updates_of SAVE_DIR: the updates a run reached
updates_of() {
  python -c 'import sys
from mmst.evaluation.backbones import read_run_training_time
r = read_run_training_time(sys.argv[1])
print(r["updates"] if r else "")' "$1"
}

stage1() {
  local s
  for s in "${seed_list[@]}"; do
    if [ -f "$hf_init/seed$s/config.json" ] && [ "$force" != "true" ]; then
      echo "-- $hf_init/seed$s exists; skipping"; continue
    fi
    mmst-hf-encoder init --size "${encoder#hf-}" --seed "$s" --out "$hf_init/seed$s"
  done
}
stage2() {
  local s
  for s in "${seed_list[@]}"; do
    asr_pretrain "$data" "$exp_dir/data_asr" "$(run_dir asr_hf "$s")" "$hf_asr_config" \
      "seed=$s optim.max_update=$asr_max_update model.overrides.hf_encoder_path=$hf_init/seed$s $train_overrides"
    if [ ! -f "$hf_pretrained/seed$s/config.json" ] || [ "$force" = "true" ]; then
      mmst-hf-encoder extract --model "$(run_dir asr_hf "$s")/checkpoint_best.pt" --out "$hf_pretrained/seed$s"
    fi
    asr_pretrain "$data" "$exp_dir/data_asr" "$(run_dir asr_xs "$s")" "$xs_asr_config" \
      "seed=$s optim.max_update=$asr_max_update $train_overrides"
  done
}
# config_of SYSTEM: its training config
config_of() { case "$1" in xs_asr) echo "$xs_config" ;; *) echo "$hf_config" ;; esac; }
# overrides_of SYSTEM SEED: its mmst-train overrides (--budget compute: after hf_pretrained of SEED has trained)
overrides_of() {
  local s="$2" t a
  case "$1" in
    hf_pretrained) echo "optim.max_update=$st_max_update model.overrides.hf_encoder_path=$hf_pretrained/seed$s" ;;
    hf_scratch)
      if [ "$budget" = compute ]; then
        t=$(budget_s "$s") || return 1
        echo "optim.max_update=$max_update_cap optim.stop_time_hours=$(awk -v t="$t" 'BEGIN { printf "%.9g", t / 3600 }')" \
          "model.overrides.hf_encoder_path=$hf_init/seed$s"
      else
        echo "optim.max_update=$((asr_max_update + st_max_update)) model.overrides.hf_encoder_path=$hf_init/seed$s"
      fi ;;
    xs_asr)
      echo "valid.interval_updates=200 checkpoint.save_interval_updates=200" \
        "checkpoint.load_pretrained_encoder_from=$(run_dir asr_xs "$s")/checkpoint_best.pt"
      if [ "$budget" = compute ]; then
        t=$(budget_s "$s") || return 1
        a=$(train_time_s "$(run_dir asr_xs "$s")") || return 1
        t=$(awk -v t="$t" -v a="$a" 'BEGIN { printf "%.9g", (t - a) / 3600 }')
        case "$t" in -*|0) echo "$0: seed $s: the xs ASR pretraining ($a s) took the whole budget" >&2; return 1 ;; esac
        echo "optim.max_update=$max_update_cap optim.stop_time_hours=$t"
      else
        echo "optim.max_update=$st_max_update"
      fi ;;
  esac
}
# train_system SYSTEM SEED: one ST run into models/SYSTEM/seed<S>; skipped when its .train_done records the same
#   options (a changed --budget, or a retrained hf_pretrained under --budget compute, trains it again)
train_system() {
  local sys="$1" s="$2" dir plan cap
  dir=$(run_dir "$sys" "$s")
  plan="$(overrides_of "$sys" "$s" | tr '\n' ' ')"
  plan="${plan% }${train_overrides:+ $train_overrides}"
  if [ -f "$dir/.train_done" ] && [ "$force" != "true" ]; then
    if [ "$(cat "$dir/.train_done")" = "$plan" ]; then echo "-- $sys seed $s already trained ($dir); skipping"; return 0; fi
    echo "-- $sys seed $s was trained with other options; training it again"
    rm -rf "$dir"
  fi
  [ "$force" = "true" ] && rm -rf "$dir"
  echo "-- training $sys seed $s -> $dir ($plan)"
  # shellcheck disable=SC2046,SC2086
  launch_train --config "$(config_of "$sys")" --data "$data" --save-dir "$dir" "seed=$s" $plan < /dev/null
  printf '%s' "$plan" > "$dir/.train_done"
  case "$plan" in *stop_time_hours*)
    cap=$(updates_of "$dir")
    [ "$cap" = "$max_update_cap" ] && echo "$0: warning: $sys seed $s reached optim.max_update=$max_update_cap before its time budget" >&2 ;;
  esac
  return 0
}
stage3() {
  local s sys
  for s in "${seed_list[@]}"; do
    for sys in $systems; do train_system "$sys" "$s"; done   # hf_pretrained first: the others' budget
  done
}
stage4() {
  local s sys split out ckpt ex=()
  # shellcheck disable=SC2206
  [ -n "$eval_extra" ] && ex+=($eval_extra)
  for s in "${seed_list[@]}"; do
    for sys in $systems; do
      ckpt="$(run_dir "$sys" "$s")/checkpoint_best.pt"
      for split in tst-COMMON tst-unseen; do
        out="$evals_dir/$split/$sys/seed$s"
        if [ -f "$out/scores.json" ] && [ "$out/scores.json" -nt "$ckpt" ] && [ "$force" != "true" ]; then
          echo "-- $out already evaluated; skipping"; continue
        fi
        echo "-- evaluating $sys seed $s on $split (k = $eval_waitk_lagging) -> $out"
        mmst-eval --model "$ckpt" --data "$data" --split "$split" \
          --waitk-lagging "$eval_waitk_lagging" --source-segment-size "$source_segment_size" --out "$out" \
          --no-progress "${ex[@]}" < /dev/null
      done
    done
  done
}
stage5() {
  local scratch xs
  if [ "$budget" = compute ]; then
    scratch="ST for the training time (ASR + ST) of hf_pretrained of the same seed"
    xs="ST for the rest of that time"
  else
    scratch="ST $((asr_max_update + st_max_update)) updates"
    xs="ST $st_max_update updates"
  fi
  mmst-backbones --evals-dir "$evals_dir" --models-dir "$models_dir" --seeds "$seeds" --budget "$budget" \
    --waitk-lagging "$eval_waitk_lagging" \
    --command "bash recipes/synthetic/run_backbones.sh${recipe_args}" \
    --describe "hf_pretrained=ASR-pretrained $encoder ($asr_max_update updates of English ASR on the same synthetic train split), ST $st_max_update updates" \
    --describe "hf_scratch=$encoder from random weights, $scratch" \
    --describe "xs_asr=mmst's xs encoder pretrained on English ASR ($asr_max_update updates), $xs" \
    --out "$exp_dir/backbones" ${copy_to:+--copy-to "$copy_to"}
  [ -n "$copy_to" ] && python tools/render_docs.py
  cat "$exp_dir/backbones.md"
}

run_item_stage 1 "random $encoder folder of seeds $seeds" stage1
run_item_stage 2 "English ASR view, ASR pretraining ($encoder and xs), seeds $seeds; the pretrained encoder as a Hugging Face folder" stage2
run_item_stage 3 "train $systems, seeds $seeds (budget: $budget)" stage3
run_item_stage 4 "evaluate on tst-COMMON and tst-unseen at k = $eval_waitk_lagging, seeds $seeds" stage4
run_item_stage 5 "table and summary" stage5
