# shellcheck shell=bash
# eval_real_speech CKPT DATA OUT_PREFIX: the "real speech" stage shared by the recipes.
#   1. FLEURS English recordings with FLORES translations ($shared_data/fleurs_flores): features with
#      DATA's vocab and CMVN (prep_audio_list.py), then streaming evaluation at wait-3 with joint
#      decoding -> ${OUT_PREFIX}eval_fleurs/scores.{md,json} (per-language BLEU, AL, LAAL, ...).
#   2. English-only clips ($shared_data/en_asr_only; 44.1 kHz stereo 24-bit FLAC among them) through
#      the streaming decoder -> ${OUT_PREFIX}eval_en_asr_only/hypotheses.{md,jsonl} (no BLEU: no reference).
# Skips with a message when $shared_data is absent. Uses $tgt_langs and $source_segment_size.
eval_real_speech() {
  local ckpt="$1" data="$2" prefix="$3"
  if [ ! -d "$shared_data/fleurs_flores" ]; then
    echo "SKIP: $shared_data/fleurs_flores not found; the real-speech stage needs the shared FLEURS data."
    return 0
  fi
  python data_prep/prep_audio_list.py --tsv "$shared_data/fleurs_flores/fleurs_flores.tsv" \
    --out "${prefix}fleurs" --split test --tgt-langs "$tgt_langs" --vocab-from "$data"
  python eval/simultaneous_eval.py --checkpoint "$ckpt" --data "${prefix}fleurs" \
    --split test --tgt-langs "$tgt_langs" --waitk-lagging 3 \
    --source-segment-size "$source_segment_size" --out "${prefix}eval_fleurs"
  cat "${prefix}eval_fleurs/scores.md"
  if [ -d "$shared_data/en_asr_only" ]; then
    python eval/transcribe_stream.py --checkpoint "$ckpt" --data "$data" \
      --tsv "$shared_data/en_asr_only/en_asr_only.tsv" --tgt-langs "$tgt_langs" --waitk-lagging 3 \
      --source-segment-size "$source_segment_size" --out "${prefix}eval_en_asr_only"
  fi
}
