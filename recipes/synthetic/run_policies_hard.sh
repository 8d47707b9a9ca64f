#!/usr/bin/env bash
# Simultaneous policies on the `hard` grammar corpus (long sentences, verb-final German clauses, SOV
# Japanese): every policy of mmst.simultaneous swept over its parameter, for de, es, fr, ja decoded
# jointly, on two xs unified models trained with the same budget:
#   offline   full attention everywhere (conf/train_xs_offline.yaml)
#   multik    multi-k wait-k over a chunk-causal encoder (conf/train_xs.yaml)
# then every adaptive policy compared with wait-k at wait-k's own LAAL (and LAAL_CA) at k = 3 and 5, with
# paired bootstrap tests on BLEU, Holm-corrected over each table (a win the correction does not confirm is a tie).
# Equal effort: every policy is swept once per model on a grid of at least 5 points, meant to span that
# model's wait-k LAAL for k = 1..5 (one to five 320 ms chunks of lag) without degenerate points (length
# ratio outside [0.7, 1.4] or LAAL < 0): wait-k k = 1..5 and 7; AlignAtt f (40 ms frames; f = 8 is one
# chunk) 12..40; EDAtt alpha 0.005..0.07 (lambda = 4 frames); LA-n (n re-decodes, one per chunk) 3..8 on
# the offline model, 2..6 on the multi-k one (it lags more per n); hold-n 6..24 tokens on the offline model,
# 12..48 on the multi-k one (it decodes on past what it has heard, so it needs a longer hold); CTC
# wait-k 4..16 source tokens. A grid option may give one grid per model: "offline:n=6,8 multik:n=12,16".
# AlignAtt and EDAtt are swept at every decoder layer of the xs model (folders <policy>-layer<L>).
# Interpolation on LAAL stays inside each sweep's measured range.
# Length cap (fairseq's max_len_a/max_len_b): floor(a * S + b) tokens over S encoder states (40 ms), and
# before the source ends also at most S + 2. a = 0.45 lies above the largest target-tokens-per-state ratio
# of the hard corpus's training sentences (every language), so no right translation is cut, while a
# re-decoded continuation that runs on past what the audio so far can hold reaches the cap and READs.
#   0  corpus + both models: reused when $exp_dir/models/<name>/$checkpoint_name exists, otherwise
#      recipes/synthetic/run_waitk_hard.sh stages 0-2 (same corpus, same training); the checkpoint is
#      copied once to $exp_dir/policies/<name>/checkpoint.pt, so every sweep decodes the same weights
#      even while a training run keeps writing checkpoint_last.pt
#   1  offline greedy BLEU of both models (the quality each reached)
#   2  policy sweeps (eval/simultaneous_eval.py --policy P --policy-args param=v1,v2,...), one folder per
#      entry of $policies (NAME or NAME-layerL: NAME's grid at decoder layer L); a finished sweep (its
#      scores.json exists) is skipped, so an interrupted run resumes where it stopped
#   3  comparison: docs/results/policies_hard.{json,md}, docs/images/policies_hard_<model>.png
#      (eval/policy_results.py); when the JSON is written under docs/results/, the docs' tables are
#      re-rendered (tools/render_docs.py: the summary table of docs/policies.md)
set -euo pipefail
cd "$(dirname "$0")/../.."   # repository root
source recipes/lib/stages.sh

# ---- options (each can be overridden: --name value) --------------------------------------------
stage=0
stop_stage=3
force=false
exp_dir=exp/synthetic_hard
tgt_langs=de,es,fr,ja
max_update=1500              # training budget when the models must be trained here
eval_max_utterances=0        # 0 = the whole tst-COMMON; else the first N utterances (>= 100 for reported results)
source_segment_size=320      # ms
eval_threads=1               # torch threads per evaluation
jobs=2                       # evaluations run side by side (one per model)
models=offline,multik
checkpoint_name=checkpoint_last.pt  # file name of the checkpoint reused from $exp_dir/models/<name>/
max_len_a=0.45               # length cap floor(a * S + b) tokens, S = encoder states (see above)
max_len_b=5
waitk_args="k=1,2,3,4,5,7"
alignatt_args="frames=12,16,24,32,40"
edatt_args="alpha=0.005,0.01,0.02,0.04,0.07,frames=4"
la_args="offline:n=3,4,5,6,8 multik:n=2,3,4,5,6"
holdn_args="offline:n=6,8,12,16,24 multik:n=12,16,24,32,48"
ctcwaitk_args="k=4,6,8,12,16"
policies="waitk alignatt-layer0 alignatt-layer1 alignatt-layer2 edatt-layer0 edatt-layer1 edatt-layer2 la holdn ctcwaitk"
out_json=docs/results/policies_hard.json
out_md=docs/results/policies_hard.md
plot_dir=docs/images
eval_extra=""                # extra options for every eval/simultaneous_eval.py call, e.g. "--beam 4"
RECIPE_OPTIONS=(stage stop_stage force exp_dir tgt_langs max_update eval_max_utterances source_segment_size eval_threads
  jobs models checkpoint_name max_len_a max_len_b waitk_args alignatt_args edatt_args la_args holdn_args ctcwaitk_args policies out_json out_md
  plot_dir eval_extra)
parse_options "$@"
# this recipe shares $exp_dir with run_waitk_hard.sh (same corpus and models): its own stage markers
marker_prefix=policies-

data=$exp_dir/data
out=$exp_dir/policies
limit=()
[ "$eval_max_utterances" -gt 0 ] && limit=(--max-utterances "$eval_max_utterances")
read -r -a extra <<< "$eval_extra"
IFS=, read -r -a model_list <<< "$models"

stage0() {
  local m missing=false
  for m in "${model_list[@]}"; do
    [ -f "$exp_dir/models/$m/$checkpoint_name" ] || missing=true
  done
  if $missing; then
    recipes/synthetic/run_waitk_hard.sh --exp_dir "$exp_dir" --tgt_langs "$tgt_langs" --max_update "$max_update" \
      --stop_stage 2
  else
    echo "reusing $exp_dir/models/{$models}/$checkpoint_name"
  fi
  for m in "${model_list[@]}"; do
    mkdir -p "$out/$m"
    [ -f "$out/$m/checkpoint.pt" ] || cp "$exp_dir/models/$m/$checkpoint_name" "$out/$m/checkpoint.pt"
  done
}

evaluate() {  # evaluate MODEL NAME [options...]: one eval/simultaneous_eval.py run into $out/MODEL/NAME
  local m="$1" name="$2"; shift 2
  if [ -f "$out/$m/$name/scores.json" ] && [ "$force" != "true" ]; then
    echo "$m/$name: done ($out/$m/$name/scores.json)"; return 0
  fi
  nice -n 2 python eval/simultaneous_eval.py --model "$out/$m/checkpoint.pt" --data "$data" \
    --split tst-COMMON --tgt-langs "$tgt_langs" --max-len-a "$max_len_a" --max-len-b "$max_len_b" \
    --source-segment-size "$source_segment_size" \
    --threads "$eval_threads" --no-progress "${limit[@]}" "${extra[@]}" "$@" --out "$out/$m/$name" \
    > "$out/$m/$name.log" 2>&1 || { echo "$m/$name failed; see $out/$m/$name.log" >&2; return 1; }
  echo "$m/$name: $(grep -E 'BLEU' "$out/$m/$name.log" | tail -n 1)"
}

each_model() {  # each_model FUNCTION: FUNCTION MODEL for every model, $jobs at a time
  local m pids=()
  for m in "${model_list[@]}"; do
    mkdir -p "$out/$m"
    "$1" "$m" & pids+=($!)
    if [ "${#pids[@]}" -ge "$jobs" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
}

offline_one() { evaluate "$1" offline --offline --beam 1; }
grid_for() {  # grid_for SPEC MODEL: SPEC is one grid ("n=1,2") or one per model ("offline:n=1,2 multik:n=4,8")
  local spec="$1" m="$2" part
  case "$spec" in
    *:*) for part in $spec; do [ "${part%%:*}" = "$m" ] && { echo "${part#*:}"; return 0; }; done
         echo "no grid for model $m in '$spec'" >&2; return 1 ;;
    *) echo "$spec" ;;
  esac
}
sweeps_one() {  # entry NAME or NAME-layerL: NAME's grid ($NAME_args for model $1), at decoder layer L for the latter
  local entry name args layer
  for entry in $policies; do
    name=${entry%%-layer*}
    args="${name}_args"
    args=$(grid_for "${!args}" "$1")
    if [ "$entry" != "$name" ]; then layer=${entry##*-layer}; args="$args,layer=$layer"; fi
    evaluate "$1" "$entry" --policy "$name" --policy-args "$args"
  done
}

stage3() {
  python eval/policy_results.py --evals-dir "$out" --models "$models" --waitk-lagging 3,5 \
    --describe "offline=xs unified, full attention, trained offline" \
    --describe "multik=xs unified, chunk-causal encoder, multi-k wait-k training" \
    --checkpoint-of "offline=$out/offline/checkpoint.pt" --checkpoint-of "multik=$out/multik/checkpoint.pt" \
    --policies "$(echo $policies | tr ' ' ,)" --out-json "$out_json" --out-md "$out_md" --plot-dir "$plot_dir"
  case "$out_json" in docs/results/*) python tools/render_docs.py ;; esac
}

run_stage 0 "corpus and models (reused when present)" stage0
run_item_stage 1 "offline greedy BLEU of $models" each_model offline_one
run_item_stage 2 "policy sweeps ($policies) on $models" each_model sweeps_one
run_stage 3 "comparison at equal latency -> $out_json" stage3
