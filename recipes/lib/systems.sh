# shellcheck shell=bash
# Shared helpers for the system-comparison stages of recipes/ted_mmst/run.sh and
# recipes/synthetic/run_compare.sh. Source after recipes/lib/stages.sh.
#
# A SYSTEM NAME says what is trained (mmst-train overrides come from `system_overrides`):
#   bilingual                one model per target language (separate decoder, bos start), same budget each
#   separate | separate_sync one shared encoder, one decoder per language, sync
#   unified  | unified_sync  one decoder, <lang:xx> tag start, sync (every language at lag k)
#   unified_async            unified async with the recipe's --async-delta / --async-order
#   async_d<D>[_<l1>-<l2>-...][_nox]
#                            unified async, delta D chunks, language order l1,l2,... (default: tgt_langs
#                            order), _nox = no cross-language attention. E.g. async_d2_ja-fr-es-de.
#
# Layout (one model = one system, or one language of `bilingual`):
#   $models_dir/<model>/seed<S>/   checkpoints (+ checkpoint_avg.pt, .train_done)
#   $evals_dir/<model>/seed<S>/    eval/simultaneous_eval.py output (k sweep)
# Globals read: tgt_langs seeds force avg_last eval_waitk_lagging eval_split eval_max_utterances
#   source_segment_size eval_threads eval_extra async_delta async_order nproc

# system_overrides NAME: print the mmst-train key=value overrides of a system (no data.tgt_langs).
system_overrides() {
  local name="$1"
  case "$name" in
    bilingual|separate|separate_sync) echo "model.arch=separate" ;;
    unified|unified_sync) echo "model.arch=unified model.overrides.strategy=sync" ;;
    unified_async) _async_overrides "$async_delta" "$async_order" true ;;
    async_d*)
      local delta="" order="" xattn=true part
      IFS=_ read -ra parts <<< "${name#async_}"
      for part in "${parts[@]}"; do
        case "$part" in
          d[0-9]*) delta="${part#d}" ;;
          nox) xattn=false ;;
          *) order="${part//-/,}" ;;
        esac
      done
      _async_overrides "${delta:-$async_delta}" "$order" "$xattn" ;;
    *) echo "unknown system '$name' (bilingual, separate, unified_sync, unified_async, async_d<D>[_<order>][_nox])" >&2
       return 2 ;;
  esac
}

_async_overrides() {
  local delta="$1" order="$2" xattn="$3"
  local s="model.arch=unified model.overrides.strategy=async model.overrides.async_delta=$delta"
  [ -n "$order" ] && s="$s model.overrides.async_order=[$order]"
  [ "$xattn" = "false" ] && s="$s model.overrides.cross_lang_attn=false"
  echo "$s"
}

# system_description NAME: one line for the comparison table legend.
system_description() {
  local name="$1"
  case "$name" in
    bilingual) echo "one separate model per language (${tgt_langs}), each with the full budget" ;;
    separate|separate_sync) echo "shared encoder, one decoder per language, sync" ;;
    unified|unified_sync) echo "one decoder with language tags, sync (all languages at lag k)" ;;
    *)
      local o
      o="$(system_overrides "$name")" || return 2
      local d="${o##*async_delta=}"; d="${d%% *}"
      local order="$tgt_langs"
      [[ "$o" == *async_order=* ]] && { order="${o##*async_order=[}"; order="${order%%]*}"; }
      local x="cross-language attention"
      [[ "$o" == *cross_lang_attn=false* ]] && x="no cross-language attention"
      echo "unified async: lags k + (j-1)*$d chunks in order $order; $x" ;;
  esac
}

# check_systems: fail early (exit 2) on an unknown system name.
check_systems() {
  local sys
  [ -n "$systems" ] || { echo "no systems given (--systems)" >&2; exit 2; }
  for sys in ${systems//,/ }; do system_overrides "$sys" > /dev/null || exit 2; done
}

# list_models: one line per model to train: "<system> <model> <langs>" (langs comma-separated).
list_models() {
  local sys lang
  for sys in ${systems//,/ }; do
    system_overrides "$sys" > /dev/null || return 2
    if [ "$sys" = "bilingual" ]; then
      for lang in ${tgt_langs//,/ }; do echo "bilingual bilingual_$lang $lang"; done
    else
      echo "$sys $sys $tgt_langs"
    fi
  done
}

# train_models CONFIG DATA EXTRA_OVERRIDES: train every (model, seed); skips finished ones.
train_models() {
  local config="$1" data_dir="$2" extra="$3" sys model langs seed dir
  while read -r sys model langs; do
    for seed in ${seeds//,/ }; do
      dir="$models_dir/$model/seed$seed"
      if [ -f "$dir/.train_done" ] && [ "$force" != "true" ]; then
        echo "-- $model seed $seed already trained ($dir); skipping"; continue
      fi
      [ "$force" = "true" ] && rm -rf "$dir"
      echo "-- training $model (seed $seed, languages $langs) -> $dir"
      # shellcheck disable=SC2046,SC2086
      launch_train --config "$config" --data "$data_dir" --save-dir "$dir" \
        "data.tgt_langs=[$langs]" "seed=$seed" $(system_overrides "$sys") $extra < /dev/null
      touch "$dir/.train_done"
    done
  done < <(list_models)
}

# average_models: checkpoint_avg.pt = mean of the last min(avg_last, available) numbered checkpoints.
average_models() {
  local sys model langs seed
  while read -r sys model langs; do
    for seed in ${seeds//,/ }; do
      average_dir "$models_dir/$model/seed$seed" < /dev/null
    done
  done < <(list_models)
}

average_dir() {
  local dir="$1" n
  n=$(find "$dir" -maxdepth 1 -name 'checkpoint_[0-9]*.pt' | wc -l)
  if [ "$n" -eq 0 ]; then echo "$dir: no numbered checkpoints to average" >&2; return 1; fi
  [ "$n" -gt "$avg_last" ] && n="$avg_last"
  local newest
  newest=$(find "$dir" -maxdepth 1 -name 'checkpoint_[0-9]*.pt' -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
  if [ -f "$dir/checkpoint_avg.pt" ] && [ "$dir/checkpoint_avg.pt" -nt "$newest" ] && [ "$force" != "true" ] \
     && [ "$(cat "$dir/.avg_last" 2>/dev/null)" = "$n" ]; then
    echo "-- $dir/checkpoint_avg.pt (last $n) is newer than every checkpoint; skipping"; return 0
  fi
  echo "-- averaging the last $n checkpoints of $dir"
  mmst-average-checkpoints --save-dir "$dir" --last "$n" --out "$dir/checkpoint_avg.pt"
  echo "$n" > "$dir/.avg_last"
}

# eval_models DATA: k sweep of every model's checkpoint_avg.pt on $eval_split (joint decoding).
eval_models() {
  local data_dir="$1" sys model langs seed out extra=()
  [ "${eval_max_utterances:-0}" -gt 0 ] && extra+=(--max-utterances "$eval_max_utterances")
  [ -n "${eval_threads:-}" ] && extra+=(--threads "$eval_threads")
  # shellcheck disable=SC2206
  [ -n "${eval_extra:-}" ] && extra+=($eval_extra)
  while read -r sys model langs; do
    for seed in ${seeds//,/ }; do
      out="$evals_dir/$model/seed$seed"
      if [ -f "$out/scores.json" ] && [ "$force" != "true" ]; then
        echo "-- $out already evaluated; skipping"; continue
      fi
      echo "-- evaluating $model seed $seed (k = $eval_waitk_lagging) -> $out"
      python eval/simultaneous_eval.py --model "$models_dir/$model/seed$seed/checkpoint_avg.pt" \
        --data "$data_dir" --split "$eval_split" --tgt-langs "$langs" --waitk-lagging "$eval_waitk_lagging" \
        --source-segment-size "$source_segment_size" --out "$out" --no-progress "${extra[@]}" < /dev/null
    done
  done < <(list_models)
}

# compare_models OUT TITLE: eval/compare_systems.py over every system (seeds -> mean ± std).
compare_models() {
  local out="$1" title="$2" sys model langs seed dirs args=()
  while read -r sys model langs; do
    dirs=""
    for seed in ${seeds//,/ }; do dirs="${dirs:+$dirs,}$evals_dir/$model/seed$seed"; done
    args+=(--system "$sys=$dirs")
  done < <(list_models)
  for sys in ${systems//,/ }; do args+=(--describe "$sys=$(system_description "$sys")"); done
  python eval/compare_systems.py --out "$out" --title "$title" "${args[@]}"
  cat "$out/comparison.md"
}
