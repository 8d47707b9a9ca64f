# shellcheck shell=bash
# eval_audio_list MODEL DATA LIST LIST_DATA OUT [LANGS]: a list of real recordings in the prep_audio_list.py
#   format (id, audio, en, <lang>...) prepared with DATA's vocabularies and CMVN into LIST_DATA (split
#   `test`), then streamed through MODEL (a checkpoint of DATA, or a model folder) at wait-3 with joint
#   decoding of LANGS (default: the model's languages that the list has) -> OUT/scores.{md,json}.
#   Uses $source_segment_size.
eval_audio_list() {
  local model="$1" data="$2" list="$3" list_data="$4" out="$5" langs="${6:-}"
  python data_prep/prep_audio_list.py --tsv "$list" --out "$list_data" --split test \
    ${langs:+--tgt-langs "$langs"} --vocab-from "$data"
  [ -n "$langs" ] || langs="$(data_tgt_langs "$list_data")"
  python eval/simultaneous_eval.py --model "$model" --data "$list_data" --split test --tgt-langs "$langs" \
    --waitk-lagging 3 --source-segment-size "$source_segment_size" --out "$out"
  cat "$out/scores.md"
}

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
  eval_audio_list "$ckpt" "$data" "$shared_data/fleurs_flores/fleurs_flores.tsv" "${prefix}fleurs" \
    "${prefix}eval_fleurs" "$tgt_langs"
  if [ -d "$shared_data/en_asr_only" ]; then
    python eval/transcribe_stream.py --model "$ckpt" --data "$data" \
      --tsv "$shared_data/en_asr_only/en_asr_only.tsv" --tgt-langs "$tgt_langs" --waitk-lagging 3 \
      --source-segment-size "$source_segment_size" --out "${prefix}eval_en_asr_only"
  fi
}
