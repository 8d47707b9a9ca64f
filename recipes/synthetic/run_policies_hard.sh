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
# chunk) 8..48; EDAtt alpha 0.0005..0.1 (lambda = 4 frames); LA-n (n re-decodes, one per chunk) 2..8 on
# the offline model, 2..6 on the multi-k one (it lags more per n; LA-1 writes every hypothesis, no
# agreement); hold-n 6..24 tokens on the offline model, 12..48 on the multi-k one (it decodes on past what
# it has heard, so it needs a longer hold); CTC wait-k 4..16 source tokens. A grid option may give one grid per model: "offline:n=6,8 multik:n=12,16".
# AlignAtt and EDAtt are swept at every decoder layer of the xs model (folders <policy>-layer<L>).
# Interpolation on LAAL stays inside each sweep's measured range.
# Length cap (fairseq's max_len_a/max_len_b): floor(a * S + b) tokens over S encoder states (40 ms), and
# before the source ends also at most S + 2. a = 0.45 lies above the largest target-tokens-per-state ratio
# of the hard corpus's training sentences (every language), so no right translation is cut, while a
# re-decoded continuation that runs on past what the audio so far can hold reaches the cap and READs.
# Tuning and reporting are separate: the grids above and the cap are chosen on --tune-split (dev, 200
# utterances of the hard corpus), and the comparison is reported on --test-split (tst-COMMON; a comma list
# such as tst-COMMON,tst-unseen reports on each; run_waitk_hard.sh's corpus has dev and tst-COMMON). Stage 2 sweeps every policy on the tune
# split (first training seed only) and writes $exp_dir/policies/<tune split>/coverage.{md,json}: how far each
# sweep reaches over wait-k's LAAL range for k = 1..5, with every point's BLEU, LAAL and length ratio. If you
# change a grid (--<policy>-args) or the cap (--max-len-a, --max-len-b), judge it on that dev report only,
# never on the test results: the test stages then sweep the same grids on the test split(s).
# Training seeds (--seeds 1,2): each model is trained once per seed (seed=N override), into
# $exp_dir/models/<name>/seed<N>/; seed 1 reuses an existing $exp_dir/models/<name>/$checkpoint_name (the
# single-seed layout of older experiment folders and of run_waitk_hard.sh without --seeds) when present. The
# headline difference is the mean over seeds of (policy BLEU at that seed's wait-k LAAL - wait-k BLEU), with a
# paired bootstrap over the same resampled sentences in every seed, Holm-corrected over each table.
#   0  corpus + every model and seed: reused when its checkpoint exists, otherwise
#      recipes/synthetic/run_waitk_hard.sh --seeds <missing seeds> stages 0-2 (same corpus, same training);
#      each checkpoint is copied once to $exp_dir/policies/checkpoints/<name>/seed<N>.pt, so every sweep
#      decodes the same weights even while a training run keeps writing checkpoint_last.pt
#   1  offline greedy BLEU of every model and seed on the test split(s) (the quality each reached)
#   2  tuning: policy sweeps on the tune split, first seed
#      ($exp_dir/policies/<tune split>/<name>/seed<N>/<policy>/), then the coverage report above
#   3  policy sweeps on the test split(s), every seed ($exp_dir/policies/<test split>/<name>/seed<N>/<policy>/)
#      Sweeps are eval/simultaneous_eval.py --policy P --policy-args param=v1,v2,..., one folder per entry of
#      $policies (NAME or NAME-layerL: NAME's grid at decoder layer L); a finished sweep (its scores.json
#      exists) is skipped, so an interrupted run resumes where it stopped
#   4  comparison per test split (eval/policy_results.py): the first test split to $out_json, $out_md and
#      $plot_dir/<out_json stem>_<model>.png (plots: first seed), a further split S to <out_json stem>_S.{json,md};
#      when the JSON is written under docs/results/, the docs' tables are re-rendered (tools/render_docs.py:
#      the summary table of docs/policies.md)
set -euo pipefail
cd "$(dirname "$0")/../.."   # repository root
source recipes/lib/stages.sh

# ---- options (each can be overridden: --name value) --------------------------------------------
stage=0
stop_stage=4
force=false
exp_dir=exp/synthetic_hard
tgt_langs=de,es,fr,ja
max_update=1500              # training budget when the models must be trained here
seeds=1,2                    # training seeds of every model (the headline: mean over seeds)
tune_split=dev               # the split the grids and the cap are chosen on (coverage report, stage 2)
test_split=tst-COMMON        # the split(s) the comparison is reported on, comma list
eval_max_utterances=0        # 0 = whole splits; else the first N utterances of every split (>= 100 for reported results)
source_segment_size=320      # ms
eval_threads=1               # torch threads per evaluation
jobs=2                       # sweeps run side by side (the next starts when any one ends)
models=offline,multik
checkpoint_name=checkpoint_last.pt  # file name of the checkpoint reused from $exp_dir/models/<name>/[seed<N>/]
max_len_a=0.45               # length cap floor(a * S + b) tokens, S = encoder states (see above; tuned on dev)
max_len_b=5
waitk_args="k=1,2,3,4,5,7"
alignatt_args="frames=8,12,16,24,32,40,48"
edatt_args="alpha=0.0005,0.001,0.002,0.005,0.01,0.02,0.04,0.07,0.1,frames=4"
la_args="offline:n=2,3,4,5,6,8 multik:n=2,3,4,5,6"
holdn_args="offline:n=6,8,12,16,24 multik:n=12,16,24,32,48"
ctcwaitk_args="k=4,6,8,12,16"
policies="waitk alignatt-layer0 alignatt-layer1 alignatt-layer2 edatt-layer0 edatt-layer1 edatt-layer2 la holdn ctcwaitk"
out_json=docs/results/policies_hard.json
out_md=docs/results/policies_hard.md
plot_dir=docs/images
eval_extra=""                # extra options for every eval/simultaneous_eval.py call, e.g. "--beam 4"
RECIPE_OPTIONS=(stage stop_stage force exp_dir tgt_langs max_update seeds tune_split test_split eval_max_utterances
  source_segment_size eval_threads jobs models checkpoint_name max_len_a max_len_b waitk_args alignatt_args edatt_args
  la_args holdn_args ctcwaitk_args policies out_json out_md plot_dir eval_extra)
parse_options "$@"
# this recipe shares $exp_dir with run_waitk_hard.sh (same corpus and models): its own stage markers
marker_prefix=policies-

data=$exp_dir/data
out=$exp_dir/policies
limit=()
[ "$eval_max_utterances" -gt 0 ] && limit=(--max-utterances "$eval_max_utterances")
read -r -a extra <<< "$eval_extra"
IFS=, read -r -a model_list <<< "$models"
IFS=, read -r -a seed_list <<< "$seeds"
IFS=, read -r -a test_splits <<< "$test_split"
[ "${#seed_list[@]}" -gt 0 ] || { echo "$0: --seeds needs at least one seed" >&2; exit 2; }
[ "${#test_splits[@]}" -gt 0 ] || { echo "$0: --test-split needs at least one split" >&2; exit 2; }
for s in "${test_splits[@]}"; do
  [ "$s" != "$tune_split" ] || { echo "$0: --test-split $s is the --tune-split: tune and report on different splits" >&2; exit 2; }
done
first_seed=${seed_list[0]}

model_checkpoint() {  # model_checkpoint MODEL SEED: the trained checkpoint (seed 1: the single-seed layout when present)
  local single="$exp_dir/models/$1/$checkpoint_name"
  if [ "$2" = 1 ] && [ -f "$single" ]; then echo "$single"; else echo "$exp_dir/models/$1/seed$2/$checkpoint_name"; fi
}
frozen() { echo "$out/checkpoints/$1/seed$2.pt"; }   # frozen MODEL SEED: the copy every sweep decodes

stage0() {
  local m s missing=""
  for s in "${seed_list[@]}"; do
    for m in "${model_list[@]}"; do
      [ -f "$(frozen "$m" "$s")" ] || [ -f "$(model_checkpoint "$m" "$s")" ] || { missing+="${missing:+,}$s"; break; }
    done
  done
  if [ -n "$missing" ]; then
    recipes/synthetic/run_waitk_hard.sh --exp-dir "$exp_dir" --tgt-langs "$tgt_langs" --max-update "$max_update" \
      --seeds "$missing" --stop-stage 2
  fi
  for s in "${seed_list[@]}"; do
    for m in "${model_list[@]}"; do
      mkdir -p "$out/checkpoints/$m"
      if [ -f "$(frozen "$m" "$s")" ]; then echo "$m seed $s: $(frozen "$m" "$s")"; continue; fi
      case ",$missing," in *",$s,"*) echo "$m seed $s: trained" ;; *) echo "$m seed $s: reusing $(model_checkpoint "$m" "$s")" ;; esac
      cp "$(model_checkpoint "$m" "$s")" "$(frozen "$m" "$s")"
    done
  done
}

evaluate() {  # evaluate SPLIT MODEL SEED NAME [options...]: one eval/simultaneous_eval.py run into $out/SPLIT/MODEL/seedSEED/NAME
  local split="$1" m="$2" s="$3" name="$4"; shift 4
  local dir="$out/$split/$m/seed$s" tag="$split/$m/seed$s/$name"
  mkdir -p "$dir"
  if [ -f "$dir/$name/scores.json" ] && [ "$force" != "true" ]; then
    echo "$tag: done ($dir/$name/scores.json)"; return 0
  fi
  nice -n 2 python eval/simultaneous_eval.py --model "$(frozen "$m" "$s")" --data "$data" \
    --split "$split" --tgt-langs "$tgt_langs" --max-len-a "$max_len_a" --max-len-b "$max_len_b" \
    --source-segment-size "$source_segment_size" \
    --threads "$eval_threads" --no-progress "${limit[@]}" "${extra[@]}" "$@" --out "$dir/$name" \
    > "$dir/$name.log" 2>&1 || { echo "$tag failed; see $dir/$name.log" >&2; return 1; }
  echo "$tag: $(grep -E 'BLEU' "$dir/$name.log" | tail -n 1)"
}

# ---- job pool: begin (side-by-side jobs; tests/test_recipe_policies.py loads this block alone)
# pool_add JOBS CMD [ARGS...] starts CMD in the background once fewer than JOBS of the pool's jobs run, waiting
#   for any one of them to end first (not for the oldest); once a job of the pool has failed it starts nothing.
# pool_wait waits for every job still running and returns 1 when one failed, so `set -e` stops the recipe after
#   the running jobs end. Call pool_add as a plain command (not after `if`, `||` or `&&`): there bash would
#   ignore `set -e` inside CMD too.
_pool_pids=()
_pool_failed=0
_pool_reap() {  # until a job of the pool has ended: collect its exit status, drop it from the list (polled: a job
  # bash has already collected is invisible to `wait -n`, while `wait PID` still returns its status)
  local p rest
  while :; do
    rest=()
    for p in "${_pool_pids[@]}"; do
      if kill -0 "$p" 2>/dev/null; then rest+=("$p"); else wait "$p" || _pool_failed=1; fi
    done
    if [ "${#rest[@]}" -lt "${#_pool_pids[@]}" ]; then _pool_pids=("${rest[@]}"); return 0; fi
    sleep 0.2
  done
}
pool_add() {
  local jobs="$1"; shift
  while [ "${#_pool_pids[@]}" -ge "$jobs" ] && [ "$_pool_failed" = 0 ]; do _pool_reap; done
  [ "$_pool_failed" = 0 ] || return 0
  "$@" & _pool_pids+=($!)
}
pool_wait() {
  while [ "${#_pool_pids[@]}" -gt 0 ]; do _pool_reap; done
  local failed=$_pool_failed
  _pool_failed=0
  return "$failed"
}
# ---- job pool: end

run_jobs() {  # run_jobs FUNCTION SPLIT SEEDS [ENTRY...]: FUNCTION SPLIT MODEL SEED [ENTRY] for every seed, model (and
  # entry), $jobs at a time: the next one starts as soon as any one ends (pool_add); a failure stops the stage
  local fn="$1" split="$2" seeds="$3" m s e
  shift 3
  local entries=("$@")
  [ "${#entries[@]}" -gt 0 ] || entries=("")
  for s in ${seeds//,/ }; do
    for m in "${model_list[@]}"; do
      for e in "${entries[@]}"; do pool_add "$jobs" "$fn" "$split" "$m" "$s" ${e:+"$e"}; done
    done
  done
  pool_wait
}

offline_one() { evaluate "$1" "$2" "$3" offline --offline --beam 1; }
grid_for() {  # grid_for SPEC MODEL: SPEC is one grid ("n=1,2") or one per model ("offline:n=1,2 multik:n=4,8")
  local spec="$1" m="$2" part
  case "$spec" in
    *:*) for part in $spec; do [ "${part%%:*}" = "$m" ] && { echo "${part#*:}"; return 0; }; done
         echo "no grid for model $m in '$spec'" >&2; return 1 ;;
    *) echo "$spec" ;;
  esac
}
sweep_one() {  # sweep_one SPLIT MODEL SEED ENTRY: one policy sweep; ENTRY is NAME (NAME's grid, $NAME_args for MODEL)
  # or NAME-layerL (the same at decoder layer L)
  local entry="$4" name args layer
  name=${entry%%-layer*}
  args="${name}_args"
  args=$(grid_for "${!args}" "$2")
  if [ "$entry" != "$name" ]; then layer=${entry##*-layer}; args="$args,layer=$layer"; fi
  evaluate "$1" "$2" "$3" "$entry" --policy "$name" --policy-args "$args"
}

offline_stage() { local split; for split in "${test_splits[@]}"; do run_jobs offline_one "$split" "$seeds"; done; }
tune_stage() {
  # shellcheck disable=SC2086
  run_jobs sweep_one "$tune_split" "$first_seed" $policies
  python eval/policy_results.py --evals-dir "$out/$tune_split" --models "$models" --seeds "$first_seed" \
    --policies "$(echo $policies | tr ' ' ,)" --coverage-only \
    --out-json "$out/$tune_split/coverage.json" --out-md "$out/$tune_split/coverage.md"
}
# shellcheck disable=SC2086
test_stage() { local split; for split in "${test_splits[@]}"; do run_jobs sweep_one "$split" "$seeds" $policies; done; }

checkpoints_of() {  # checkpoints_of MODEL: its frozen checkpoints, one per seed, comma-separated
  local s list=""
  for s in "${seed_list[@]}"; do list+="${list:+,}$(frozen "$1" "$s")"; done
  echo "$list"
}
stage4() {
  local split json md prefix m ckpts=()
  for m in "${model_list[@]}"; do ckpts+=(--checkpoint-of "$m=$(checkpoints_of "$m")"); done
  for split in "${test_splits[@]}"; do
    json=$out_json; md=$out_md; prefix=$(basename "${out_json%.json}")
    if [ "$split" != "${test_splits[0]}" ]; then
      json="${out_json%.json}_$split.json"; md="${out_md%.md}_$split.md"; prefix="${prefix}_$split"
    fi
    python eval/policy_results.py --evals-dir "$out/$split" --models "$models" --seeds "$seeds" \
      --tune-split "$tune_split" --waitk-lagging 3,5 \
      --describe "offline=xs unified, full attention, trained offline" \
      --describe "multik=xs unified, chunk-causal encoder, multi-k wait-k training" "${ckpts[@]}" \
      --policies "$(echo $policies | tr ' ' ,)" --out-json "$json" --out-md "$md" --plot-dir "$plot_dir" \
      --plot-prefix "$prefix"
  done
  case "$out_json" in docs/results/*) python tools/render_docs.py ;; esac
}

run_stage 0 "corpus and models, seeds $seeds (reused when present)" stage0
run_item_stage 1 "offline greedy BLEU of $models (seeds $seeds) on $test_split" offline_stage
run_item_stage 2 "tuning: policy sweeps ($policies) on $tune_split (seed $first_seed), reach over wait-k's LAAL range" tune_stage
run_item_stage 3 "policy sweeps ($policies) on $test_split, seeds $seeds" test_stage
run_stage 4 "comparison at equal latency on $test_split -> $out_json" stage4
