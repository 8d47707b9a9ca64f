#!/usr/bin/env bash
# FLORES-101 multi-way text with synthetic (espeak-ng) English speech: the pipeline's scale test at
# realistic sentence lengths and vocabularies. Then the trained model on real FLEURS speech.
#   0  synthesize English speech for the FLORES devtest text (deterministic split by line number)
#   1  prep the multi-way corpus
#   2  train (size s by default; --size xs for a CPU-sized run)
#   3  evaluate on tst-COMMON at k = $eval_waitk_lagging with joint decoding
#   4  real speech: FLEURS clips (human voices, professional translations) + English-only clips
# Stage times are printed and kept in $exp_dir/.done/stage<N> (seconds).
set -euo pipefail
cd "$(dirname "$0")/../.."   # repository root
source recipes/lib/stages.sh
source recipes/lib/real_speech.sh

# ---- options (each can be overridden: --name value) --------------------------------------------
stage=0
stop_stage=4
force=false
exp_dir=exp/flores_tts
shared_data=../shared/data
text_dir=../shared/data/flores101_devtest   # any folder of line-aligned <code>.devtest files
src_file_code=eng
tgt_file_codes=deu:de,spa:es,fra:fr,jpn:ja              # file code:language
tgt_langs=de,es,fr,ja
num_dev=50
num_test=100                                 # the rest of the lines is train
seed=1
jobs=2
size=s                                       # s | xs
max_update=""                                # empty: the config's value
train_overrides=""
nproc=1
eval_waitk_lagging=3,7
source_segment_size=320
RECIPE_OPTIONS=(stage stop_stage force exp_dir shared_data text_dir src_file_code tgt_file_codes tgt_langs num_dev num_test
  seed jobs size max_update train_overrides nproc eval_waitk_lagging source_segment_size)
parse_options "$@"

raw=$exp_dir/raw
data=$exp_dir/data
model_dir=$exp_dir/model_$size
eval_dir=$exp_dir/eval_$size
mkdir -p "$exp_dir"

stage0() {
  if [ ! -d "$text_dir" ]; then
    echo "SKIP: $text_dir not found (give --text-dir DIR with line-aligned multi-way text)."
    exit 0
  fi
  python data_prep/synthesize_corpus.py --text-dir "$text_dir" --src-file-code "$src_file_code" --tgt-file-codes "$tgt_file_codes" \
    --tgt-langs "$tgt_langs" --num-dev "$num_dev" --num-test "$num_test" --heldout-voices \
    --seed "$seed" --jobs "$jobs" --out "$raw"
}
stage1() {
  python data_prep/prep_multiway.py --mustc-root "$raw" --tgt-langs "$tgt_langs" --out "$data" --jobs "$jobs"
}
stage2() {
  local extra=()
  [ -n "$max_update" ] && extra+=("optim.max_update=$max_update")
  # shellcheck disable=SC2086
  launch_train --config "recipes/flores_tts/conf/train_$size.yaml" --data "$data" --save-dir "$model_dir" \
    "${extra[@]}" $train_overrides
}
stage3() {
  python eval/simultaneous_eval.py --model "$model_dir/checkpoint_best.pt" --data "$data" \
    --split tst-COMMON --tgt-langs "$tgt_langs" --waitk-lagging "$eval_waitk_lagging" \
    --source-segment-size "$source_segment_size" --out "$eval_dir"
  cat "$eval_dir/scores.md"
}
stage4() {
  eval_real_speech "$model_dir/checkpoint_best.pt" "$data" "$exp_dir/${size}_"
}

run_stage 0 "synthesize English speech for $text_dir" stage0
run_stage 1 "prep the multi-way corpus" stage1
run_stage 2 "train $size (multi-k wait-k)" stage2
run_stage 3 "evaluate at k = $eval_waitk_lagging with joint decoding" stage3
run_stage 4 "real speech: FLEURS + English-only clips" stage4
echo "stage times (s):"; for f in "$exp_dir"/.done/stage*; do [ -f "$f" ] && echo "  $(basename "$f"): $(cat "$f")"; done
