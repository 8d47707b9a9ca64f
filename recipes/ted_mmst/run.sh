#!/usr/bin/env bash
# TED-MMST on a MuST-C release: multi-way aligned TED corpus, English ASR pretraining of the encoder,
# multilingual simultaneous ST systems (separate, unified/sync, unified/async), checkpoint averaging,
# a wait-k sweep on tst-COMMON and the comparison table. Stages:
#   0  (only without --mustc-root) synthesize a small MuST-C-layout corpus with MuST-C-like pair
#      disagreements (data_prep/synthesize_corpus.py --mustc-like-perturb): the CI smoke test input
#   1  multi-way alignment + features + vocab (data_prep/prep_mustc_multiway.py)
#   2  speed-perturbed copies of train when the configs ask for them (data_prep/speed_perturb.py), English
#      ASR view (data_prep/make_asr_view.py) + ASR pretraining, CTC + attention (mmst-train,
#      conf/asr_$size.yaml), averaged into asr/checkpoint_avg.pt. ASR and ST get the same augmentation:
#      s/m configs SpecAugment LB + speed perturbation 0.9/1.0/1.1, xs none (docs/augmentation.md)
#   3  ST training of every --systems entry from the pretrained encoder (conf/st_$size.yaml)
#   4  average the last --avg-last (10) checkpoints of every model (mmst-average-checkpoints)
#   5  evaluate every model sweeping k on tst-COMMON with joint decoding (eval/simultaneous_eval.py)
#   6  comparison table + BLEU-vs-AL plots (eval/compare_systems.py) -> $exp_dir/compare/comparison.md
#   7  long form: every model on whole $eval_split talks, each talk one stream with VAD segmentation,
#      wait-$longform_waitk_lagging, scored with LongYAAL, BLEU and chrF after SoftSegmenter (OmniSTEval) and
#      StreamLAAL and BLEU after mWER resegmentation (eval/longform_eval.py --mustc-root) ->
#      $exp_dir/eval_longform/<model>/seed<seed>/scores.md
# Smoke test: bash recipes/ted_mmst/run.sh --size xs ... (tests/test_recipe_ted_mmst.py).
set -euo pipefail
cd "$(dirname "$0")/../.."   # repository root
source recipes/lib/stages.sh
source recipes/lib/systems.sh
source recipes/lib/augment.sh

# ---- options (each can be overridden: --name value) --------------------------------------------
stage=0
stop_stage=7
force=false                  # redo finished stages
exp_dir=exp/ted_mmst         # everything this recipe writes
mustc_root=""                # MuST-C root with en-XX/data/<split>/{wav,txt}; empty: synthesize one (stage 0)
tgt_langs=""                 # default: de,es,fr,it,nl,pt,ro,ru with --mustc-root, de,es,fr when synthetic
size=xs                      # xs (CPU) | s | m: picks conf/asr_$size.yaml and conf/st_$size.yaml
systems=separate,unified_sync,unified_async   # see recipes/lib/systems.sh (also bilingual, async_d2_..)
async_delta=1                # unified_async: lag step between languages, pre-decision chunks
async_order=""               # unified_async: language order (default: tgt_langs order)
seeds=1                      # comma list; several seeds -> mean ± std in the table
min_langs=""                 # prep: keep utterances with >= K translations (default: all languages)
jobs=2                       # processes for synthesis and feature extraction
pretrained_encoder=""        # use this ASR/encoder checkpoint (mmst or fairseq) instead of stage 2 training
max_update=""                # override optim.max_update of both ASR and ST configs
asr_max_update=""            # override optim.max_update of the ASR config (wins over --max-update)
st_max_update=""             # override optim.max_update of the ST config (wins over --max-update)
train_overrides=""           # extra key=value overrides for every mmst-train run, space separated
asr_overrides=""             # extra overrides for the ASR run only
st_overrides=""              # extra overrides for the ST runs only
specaugment=auto             # SpecAugment policy of ASR and ST: auto (the configs': LB for s/m, none for xs) | none | LB | LD | SM | SS
speed_perturb=auto           # auto (the configs': on for s/m) | true | false
speed_factors=0.9,1.0,1.1    # with --speed-perturb true
nproc=1                      # >1: train with torchrun --nproc_per_node $nproc
avg_last=10                  # checkpoints averaged (fewer if fewer exist)
eval_split=tst-COMMON
eval_waitk_lagging=1,3,5,7,9             # wait-k sweep (pre-decision chunks of 280 ms)
eval_max_utterances=0        # 0 = the whole split
eval_threads=""              # torch threads of the evaluation (default: torch's choice)
eval_extra=""                # more eval/simultaneous_eval.py options, e.g. "--max-len-b 50"
source_segment_size=320      # ms
longform_waitk_lagging=3                 # stage 7: wait-k lagging of the whole-talk evaluation
longform_systems=""          # stage 7: systems to evaluate on whole talks (default: every --systems entry)
longform_extra=""            # stage 7: more eval/longform_eval.py options, e.g. "--max-len-b 50"
synth_num_train=400          # stage 0 corpus size (segments)
synth_num_dev=40
synth_num_test=40
synth_segments_per_talk=6,12
synth_seed=1
RECIPE_OPTIONS=(stage stop_stage force exp_dir mustc_root tgt_langs size systems async_delta async_order seeds
  min_langs jobs pretrained_encoder max_update asr_max_update st_max_update train_overrides asr_overrides
  st_overrides specaugment speed_perturb speed_factors nproc avg_last eval_split eval_waitk_lagging eval_max_utterances eval_threads eval_extra source_segment_size longform_waitk_lagging longform_systems longform_extra
  synth_num_train synth_num_dev synth_num_test synth_segments_per_talk synth_seed)
parse_options "$@"

case "$size" in xs|s|m) ;; *) echo "$0: --size must be xs, s or m (got '$size')" >&2; exit 2 ;; esac
synthetic=false
if [ -z "$mustc_root" ]; then
  synthetic=true
  mustc_root=$exp_dir/mustc_synthetic
  [ -n "$tgt_langs" ] || tgt_langs=de,es,fr
else
  [ -n "$tgt_langs" ] || tgt_langs=de,es,fr,it,nl,pt,ro,ru
fi
check_systems
data=$exp_dir/data
data_asr=$exp_dir/data_asr
asr_dir=$exp_dir/asr
models_dir=$exp_dir/models
evals_dir=$exp_dir/eval
asr_ckpt=${pretrained_encoder:-$asr_dir/checkpoint_avg.pt}
mkdir -p "$exp_dir"

# optim.max_update overrides: specific > general > config
asr_mu=${asr_max_update:-$max_update}
st_mu=${st_max_update:-$max_update}
# augmentation: the same for ASR and ST; auto = what the configs say
aug=""
[ "$specaugment" != "auto" ] && aug="data.augment.specaugment_policy=$specaugment"
case "$speed_perturb" in
  true) aug="$aug data.augment.speed_perturb=[$speed_factors]"; sp_factors=$speed_factors ;;
  false) aug="$aug data.augment.speed_perturb=null"; sp_factors="" ;;
  auto) sp_factors=$(config_speed_factors "recipes/ted_mmst/conf/st_$size.yaml") ;;
  *) echo "$0: --speed-perturb must be auto, true or false (got '$speed_perturb')" >&2; exit 2 ;;
esac
asr_extra="$train_overrides $aug $asr_overrides${asr_mu:+ optim.max_update=$asr_mu}"
st_extra="$train_overrides $aug $st_overrides${st_mu:+ optim.max_update=$st_mu} checkpoint.load_pretrained_encoder_from=$asr_ckpt"

stage0() {
  if [ "$synthetic" != "true" ]; then
    echo "--mustc-root $mustc_root given: nothing to synthesize"; return 0
  fi
  # the perturbation refuses to run twice on one corpus: a forced rerun starts from scratch
  [ -f "$mustc_root/mustc_perturb.json" ] && rm -rf "$mustc_root"
  python data_prep/synthesize_corpus.py --grammar --difficulty easy --out "$mustc_root" \
    --tgt-langs "$tgt_langs" --num-train "$synth_num_train" --num-dev "$synth_num_dev" \
    --num-test "$synth_num_test" --segments-per-talk "$synth_segments_per_talk" --heldout-voices \
    --seed "$synth_seed" --jobs "$jobs" --mustc-like-perturb
}
stage1() {
  local extra=()
  [ -n "$min_langs" ] && extra+=(--min-langs "$min_langs")
  python data_prep/prep_mustc_multiway.py --mustc-root "$mustc_root" --tgt-langs "$tgt_langs" \
    --out "$data" --jobs "$jobs" --no-progress "${extra[@]}"
}
stage2() {
  [ -n "$sp_factors" ] && ensure_speed_perturbed "$data" "$sp_factors" "$jobs"
  if [ -n "$pretrained_encoder" ]; then
    echo "--pretrained-encoder $pretrained_encoder given: ST encoders start from it; no ASR training"; return 0
  fi
  python data_prep/make_asr_view.py --data "$data" --out "$data_asr"
  # shellcheck disable=SC2086
  launch_train --config "recipes/ted_mmst/conf/asr_$size.yaml" --data "$data_asr" --save-dir "$asr_dir" \
    "seed=${seeds%%,*}" $asr_extra
  average_dir "$asr_dir"
}
stage3() {
  [ -n "$sp_factors" ] && ensure_speed_perturbed "$data" "$sp_factors" "$jobs"
  train_models "recipes/ted_mmst/conf/st_$size.yaml" "$data" "$st_extra"
}
stage4() {
  average_models
}
stage5() {
  eval_models "$data"
}
stage6() {
  compare_models "$exp_dir/compare" "TED-MMST ($size) on $eval_split: wait-k sweep k = $eval_waitk_lagging"
  echo
  echo "Table: $exp_dir/compare/comparison.md; plots: $exp_dir/compare/bleu_al_<lang>.png"
}
stage7() {
  local sys model langs seed out extra=()
  # shellcheck disable=SC2206
  [ -n "${longform_extra:-}" ] && extra+=($longform_extra)
  while read -r sys model langs; do
    case ",${longform_systems:-$systems}," in *",$sys,"*) ;; *) continue ;; esac
    for seed in ${seeds//,/ }; do
      out="$exp_dir/eval_longform/$model/seed$seed"
      if [ -f "$out/scores.json" ] && [ "$force" != "true" ]; then
        echo "-- $out: whole-talk scores exist; skipping"; continue
      fi
      echo "-- whole $eval_split talks: $model seed $seed (wait-$longform_waitk_lagging) -> $out"
      python eval/longform_eval.py --model "$models_dir/$model/seed$seed/checkpoint_avg.pt" \
        --data "$data" --mustc-root "$mustc_root" --split "$eval_split" --tgt-langs "$langs" \
        --waitk-lagging "$longform_waitk_lagging" --source-segment-size "$source_segment_size" --out "$out" \
        --no-progress "${extra[@]}" < /dev/null
      cat "$out/scores.md"
    done
  done < <(list_models)
}

run_stage 0 "synthesize a MuST-C-layout corpus (only without --mustc-root)" stage0
run_stage 1 "multi-way MuST-C prep (en -> $tgt_langs)" stage1
run_stage 2 "English ASR view + ASR pretraining (CTC + attention, $size)" stage2
run_item_stage 3 "ST training ($systems; seeds $seeds) from the pretrained encoder" stage3
run_item_stage 4 "average the last $avg_last checkpoints" stage4
run_item_stage 5 "evaluate on $eval_split, k = $eval_waitk_lagging, joint decoding" stage5
run_item_stage 6 "comparison table and BLEU-vs-AL plots" stage6
run_item_stage 7 "whole $eval_split talks as streams (long form, wait-$longform_waitk_lagging)" stage7
