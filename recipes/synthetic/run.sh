#!/usr/bin/env bash
# Quickstart recipe: synthetic grammar corpus (English espeak speech -> de, es, fr, ja),
# multi-way prep, a multi-k wait-k `xs` unified model, joint-decoding evaluation at k = 1, 3, 5,
# then (opt-in) the same model on your own recordings, and the model exported as a self-contained folder.
# `make demo` runs it. Two test sets: tst-COMMON (voices heard in training) and tst-unseen (espeak accents
# and variants never heard in training). Stages:
#   0  generate the grammar corpus (data_prep/synthesize_corpus.py)
#   1  prep the multi-way corpus (data_prep/prep_multiway.py)
#   2  train the xs unified model with multi-k wait-k (mmst-train, conf/train_xs.yaml); with
#      --speed-perturb true first the speed-perturbed copies (data_prep/speed_perturb.py), with
#      --asr-pretrain true first English ASR pretraining of the encoder (conf/asr_xs.yaml), both with
#      the same augmentation (docs/augmentation.md); with --concat-utterances M > 1 on spans of 1..M
#      consecutive utterances of one talk joined by --concat-pause-ms of silence, with --concat-edge-ms of
#      silence before and after each span (multi-sentence training:
#      the model translates on past a sentence end in long-form streams; docs/training.md, docs/longform.md);
#      with --left-chunks N > 0 an encoder with a bounded left context of N chunks and rotary positions
#      (encoder_left_chunks, encoder_pos_enc_type=rope): its state stays bounded on endless speech (docs/longform.md)
#   3  evaluate on tst-COMMON at k = 1,3,5 and on tst-unseen at k = 3 with joint decoding
#      (eval/simultaneous_eval.py --jobs: that many one-thread processes share out the utterances)
#   4  print the results tables and the path of latency_quality.png
#   5  real speech (opt-in): with --real-audio-tsv LIST, your recordings in the prep_audio_list.py format
#      (id, audio, en, de, ...) prepared with the training vocabulary and CMVN and evaluated at wait-3
#      (prep_audio_list.py + simultaneous_eval.py); without it, one line on how to use it
#   6  long form: a --longform-minutes synthetic talk (tst-COMMON utterances joined with 300-800 ms
#      pauses; data_prep/make_long_talk.py) streamed as one stream with VAD segmentation, wait-3, and
#      scored as IWSLT 2026 does (LongYAAL, BLEU and chrF after SoftSegmenter, OmniSTEval) beside
#      StreamLAAL and BLEU after mWER resegmentation (eval/longform_eval.py; docs/longform.md)
#   7  export the model as a self-contained folder, $exp_dir/model_export (mmst-export: config.json,
#      model.safetensors, SentencePiece models, CMVN, README.md model card with the stage-3 scores);
#      serve it with `mmst-serve --model $exp_dir/model_export`
set -euo pipefail
cd "$(dirname "$0")/../.."   # repository root
source recipes/lib/stages.sh
source recipes/lib/real_speech.sh
source recipes/lib/augment.sh

# ---- options (each can be overridden: --name value) --------------------------------------------
stage=0
stop_stage=7
force=false                  # redo finished stages
exp_dir=exp/synthetic        # everything this recipe writes
tgt_langs=de,es,fr,ja
difficulty=easy              # grammar preset (easy | hard)
num_train=4000               # synthetic utterances per split
num_dev=200
num_test=200                 # tst-COMMON: voices heard in training
num_test_unseen=200          # tst-unseen: voices never heard in training (0 = no such split)
seed=1
jobs=2                       # processes for synthesis, feature extraction and evaluation
config=recipes/synthetic/conf/train_xs.yaml
train_overrides=""           # extra key=value overrides for mmst-train, space separated
nproc=1                      # >1: train with torchrun --nproc_per_node $nproc
omp_wait_policy=auto         # stage 2: OpenMP wait policy of training. auto: $OMP_WAIT_POLICY when set, else
                             # active with --nproc 1 (idle helper threads spin: faster when nothing else runs,
                             # docs/performance.md) and passive with more ranks; or active / passive
specaugment=none             # SpecAugment policy in training: none | LB | LD | SM | SS
speed_perturb=false          # true: train on speed-perturbed copies (--speed-factors) of train
speed_factors=0.9,1.0,1.1
asr_pretrain=false           # true: pretrain the encoder on English ASR first (same data and augmentation)
asr_config=recipes/synthetic/conf/asr_xs.yaml
concat_utterances=1          # >1: multi-sentence training, spans of 1..N consecutive utterances (data.concat_utterances)
left_chunks=0                # >0: bounded encoder left context of this many chunks, with rotary positions
                             # (model.overrides.encoder_left_chunks, encoder_pos_enc_type=rope); 0 = unbounded
concat_pause_ms=0,600        # with concat_utterances > 1: silence between joined utterances, LO,HI ms (drawn
                             # uniformly; data.concat_pause_ms); "real" = the recording's own gaps
concat_edge_ms=0,200         # with concat_utterances > 1: silence before and after each span, LO,HI ms (drawn
                             # uniformly; data.concat_edge_ms); "none" = the clips' own edges only
eval_waitk_lagging=1,3,5
eval_extra=""                # stage 3: more eval/simultaneous_eval.py options, e.g. "--max-len-b 50"
source_segment_size=320      # ms
real_audio_tsv=""            # stage 5: a list of your recordings (id, audio, en, de, ...); empty = skip
longform_minutes=2.5         # stage 6: length of the synthetic talk
longform_extra=""            # stage 6: more eval/longform_eval.py options, e.g. "--max-len-b 50"
RECIPE_OPTIONS=(stage stop_stage force exp_dir tgt_langs difficulty num_train num_dev num_test
  num_test_unseen seed jobs config train_overrides specaugment speed_perturb speed_factors asr_pretrain
  asr_config concat_utterances concat_pause_ms concat_edge_ms left_chunks nproc omp_wait_policy eval_waitk_lagging eval_extra source_segment_size real_audio_tsv longform_minutes longform_extra)
parse_options "$@"
case "$omp_wait_policy" in
  auto) if [ -n "${OMP_WAIT_POLICY:-}" ]; then train_omp=$OMP_WAIT_POLICY
        elif [ "$nproc" -le 1 ]; then train_omp=ACTIVE; else train_omp=PASSIVE; fi ;;
  active|passive|ACTIVE|PASSIVE) train_omp=${omp_wait_policy^^} ;;
  *) echo "$0: --omp-wait-policy must be auto, active or passive (got '$omp_wait_policy')" >&2; exit 2 ;;
esac
case "$concat_utterances" in ''|*[!0-9]*|0) echo "$0: --concat-utterances must be a whole number >= 1 (got '$concat_utterances')" >&2; exit 2 ;; esac
case "$left_chunks" in ''|*[!0-9]*) echo "$0: --left-chunks must be a whole number >= 0 (got '$left_chunks')" >&2; exit 2 ;; esac
case "$concat_pause_ms" in real|[0-9]*,[0-9]*) ;; *) echo "$0: --concat-pause-ms must be LO,HI (ms) or real (got '$concat_pause_ms')" >&2; exit 2 ;; esac
case "$concat_edge_ms" in none|[0-9]*,[0-9]*) ;; *) echo "$0: --concat-edge-ms must be LO,HI (ms) or none (got '$concat_edge_ms')" >&2; exit 2 ;; esac
read -r -a eval_extra_args <<< "$eval_extra"
read -r -a longform_extra_args <<< "$longform_extra"

raw=$exp_dir/raw
data=$exp_dir/data
model_dir=$exp_dir/model
eval_dir=$exp_dir/eval
mkdir -p "$exp_dir"

splits=train,dev,tst-COMMON
[ "$num_test_unseen" -gt 0 ] && splits=$splits,tst-unseen

stage0() {
  python data_prep/synthesize_corpus.py --grammar --difficulty "$difficulty" --out "$raw" \
    --tgt-langs "$tgt_langs" --num-train "$num_train" --num-dev "$num_dev" --num-test "$num_test" \
    --num-test-unseen "$num_test_unseen" --seed "$seed" --jobs "$jobs"
}
stage1() {
  python data_prep/prep_multiway.py --mustc-root "$raw" --tgt-langs "$tgt_langs" --out "$data" --jobs "$jobs" \
    --splits "$splits"
}
stage2() {
  local aug extra
  aug="$(augment_overrides "$specaugment" "$speed_perturb" "$speed_factors")"
  extra="$aug"
  if [ "$concat_utterances" -gt 1 ]; then
    extra="$extra data.concat_utterances=$concat_utterances"
    [ "$concat_pause_ms" != "real" ] && extra="$extra data.concat_pause_ms=[$concat_pause_ms]"
    [ "$concat_edge_ms" != "none" ] && extra="$extra data.concat_edge_ms=[$concat_edge_ms]"
  fi
  if [ "$left_chunks" -gt 0 ]; then
    extra="$extra model.overrides.encoder_left_chunks=$left_chunks model.overrides.encoder_pos_enc_type=rope"
  fi
  extra="$extra $train_overrides"
  [ "$speed_perturb" = "true" ] && ensure_speed_perturbed "$data" "$speed_factors" "$jobs"
  echo "-- training with OMP_WAIT_POLICY=$train_omp (--omp-wait-policy $omp_wait_policy)"
  if [ "$asr_pretrain" = "true" ]; then
    OMP_WAIT_POLICY=$train_omp asr_pretrain "$data" "$exp_dir/data_asr" "$exp_dir/asr" "$asr_config" "$extra"
    extra="$extra checkpoint.load_pretrained_encoder_from=$exp_dir/asr/checkpoint_best.pt"
  fi
  # shellcheck disable=SC2086
  OMP_WAIT_POLICY=$train_omp launch_train --config "$config" --data "$data" --save-dir "$model_dir" $extra
}
eval_unseen() {
  python eval/simultaneous_eval.py --model "$model_dir/checkpoint_best.pt" --data "$data" \
    --split tst-unseen --tgt-langs "$tgt_langs" --waitk-lagging 3 --jobs "$jobs" \
    --source-segment-size "$source_segment_size" --no-progress "${eval_extra_args[@]}" --out "${eval_dir}_unseen"
}
stage3() {
  # one torch thread per process, --jobs processes share out the utterances of each k
  python eval/simultaneous_eval.py --model "$model_dir/checkpoint_best.pt" --data "$data" \
    --split tst-COMMON --tgt-langs "$tgt_langs" --waitk-lagging "$eval_waitk_lagging" --jobs "$jobs" \
    --source-segment-size "$source_segment_size" "${eval_extra_args[@]}" --out "$eval_dir"
  if [ "$num_test_unseen" -gt 0 ]; then eval_unseen; fi
}
stage4() {
  echo "Results (tst-COMMON, synthetic voices heard in training):"
  cat "$eval_dir/scores.md"
  echo
  if [ "$num_test_unseen" -gt 0 ]; then
    echo "Results (tst-unseen, wait-3, voices never heard in training):"
    cat "${eval_dir}_unseen/scores.md"
    echo
  fi
  echo "BLEU-vs-AL plot: $eval_dir/latency_quality.png"
}
stage5() {
  eval_audio_list "$model_dir/checkpoint_best.pt" "$data" "$real_audio_tsv" "$exp_dir/real_audio" \
    "${eval_dir}_real_audio"
}
stage6() {
  python data_prep/make_long_talk.py --data "$data" --split tst-COMMON --minutes "$longform_minutes" \
    --out "$exp_dir/long_talk"
  local refs="" lang
  for lang in ${tgt_langs//,/ }; do refs="${refs:+$refs,}$lang=$exp_dir/long_talk/talk.$lang"; done
  # the talk's pauses (300-800 ms) are shorter than the default segment-ending silence of real speech
  python eval/longform_eval.py --model "$model_dir/checkpoint_best.pt" --data "$data" \
    --audio "$exp_dir/long_talk/talk.wav" --segments "$exp_dir/long_talk/talk.yaml" --refs "$refs" \
    --waitk-lagging 3 --vad-min-silence-ms 150 --source-segment-size "$source_segment_size" \
    --no-progress "${longform_extra_args[@]}" --out "${eval_dir}_longform"
  echo "Long-form results (one ${longform_minutes}-minute talk streamed as one stream, wait-3, sentence restarts on;"
  echo "the untranslated speech share is the speech a language left untranslated after ending a sentence):"
  cat "${eval_dir}_longform/scores.md"
}

stage7() {
  mmst-export --checkpoint "$model_dir/checkpoint_best.pt" --data "$data" --scores "$eval_dir" \
    --out "$exp_dir/model_export"
  echo "Serve it: mmst-serve --model $exp_dir/model_export"
}

run_stage 0 "generate the grammar corpus ($difficulty; en -> $tgt_langs)" stage0
run_stage 1 "prep the multi-way corpus" stage1
run_stage 2 "train the xs unified model (multi-k wait-k; SpecAugment $specaugment, speed perturbation $speed_perturb, ASR pretraining $asr_pretrain, spans of up to $concat_utterances utterances)" stage2
run_stage 3 "evaluate on tst-COMMON at k = $eval_waitk_lagging and on tst-unseen at k = 3 with joint decoding" stage3
run_stage 4 "results" stage4
if [ -n "$real_audio_tsv" ]; then
  run_stage 5 "real speech: your recordings ($real_audio_tsv)" stage5
elif [ "$stage" -le 5 ] && [ "$stop_stage" -ge 5 ]; then
  echo "== Stage 5 skipped: pass --real-audio-tsv LIST (TSV: id, audio, en, de, ...; see docs/data-and-corpora.md) to evaluate the model on your own recordings"
fi
run_stage 6 "long form: a ${longform_minutes}-minute synthetic talk as one stream" stage6
run_stage 7 "export the model folder ($exp_dir/model_export)" stage7
