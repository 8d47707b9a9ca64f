# shellcheck shell=bash
# Shared helpers for recipes/<name>/run.sh (Kaldi/ESPnet conventions).
#
# parse_options "$@": every variable defined at the top of run.sh can be overridden with
#   --name value   (dashes in the option map to underscores in the variable: --stop-stage -> stop_stage)
#   --name=value
# Unknown options are an error that names the option. `--help` prints the variables and their values.
# After the options, require_mmst stops the recipe (exit 2, one line on stderr naming the fix) unless
# `python` imports mmst, so `--help` works without the virtual environment.
# Deprecated spellings still work, each with a one-line warning on stderr: underscores (--stop_stage) and
# the renamed options of RECIPE_RENAMED (old variable -> new variable).
declare -A RECIPE_RENAMED=([eval_k]=eval_waitk_lagging [longform_k]=longform_waitk_lagging
  [max_utterances]=eval_max_utterances [threads]=eval_threads [eval_args]=eval_extra
  [src]=src_file_code [tgt]=tgt_file_codes [ctc_args]=ctcwaitk_args
  [asr_updates]=asr_max_update [st_updates]=st_max_update [results]=copy_to [asr_checkpoint]=pretrained_encoder
  [results_json]=out_json [results_md]=out_md [checkpoint]=checkpoint_name)
#
# run_stage N "title" command...: runs a numbered stage when stage <= N <= stop_stage, prints a banner,
#   and skips it when its done-marker exists (unless --force true). Markers live in $exp_dir/.done/,
#   named ${marker_prefix}stageN (its content: the stage's seconds): a recipe that shares its exp_dir with
#   another sets marker_prefix. Beside it, stageN.options records the options the stage used (name=value
#   lines, see _stage_options); when one of them has changed since, the stage runs again.
# run_item_stage N "title" command...: a stage that skips finished items itself (see below).

parse_options() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --help|-h)
        echo "Usage: $0 [--option value ...]"
        echo "Options (variable = current value):"
        for v in "${RECIPE_OPTIONS[@]}"; do printf '  --%-22s %s\n' "${v//_/-}" "${!v}"; done
        exit 0 ;;
      --*=*) name="${1%%=*}"; value="${1#*=}"; shift ;;
      --*)
        name="$1"
        if [ $# -lt 2 ]; then echo "$0: option $name needs a value" >&2; exit 2; fi
        value="$2"; shift 2 ;;
      *) echo "$0: unexpected argument '$1' (options look like --name value)" >&2; exit 2 ;;
    esac
    var="${name#--}"; var="${var//-/_}"
    local known=false
    for v in "${RECIPE_OPTIONS[@]}"; do [ "$v" = "$var" ] && known=true; done
    if ! $known && [ -n "${RECIPE_RENAMED[$var]:-}" ]; then
      for v in "${RECIPE_OPTIONS[@]}"; do [ "$v" = "${RECIPE_RENAMED[$var]}" ] && known=true; done
      if $known; then
        echo "$0: warning: $name is deprecated; use --${RECIPE_RENAMED[$var]//_/-}" >&2
        var="${RECIPE_RENAMED[$var]}"; name="--${var//_/-}"
      fi
    fi
    if ! $known; then echo "$0: unknown option '$name' (see --help)" >&2; exit 2; fi
    if [ "$name" != "--${var//_/-}" ]; then echo "$0: warning: $name is deprecated; use --${var//_/-}" >&2; fi
    printf -v "$var" '%s' "$value"
  done
  check_option_values
  require_mmst
}

# check_option_values: exit 2 with one line naming the option when a value cannot be right: --stage,
#   --stop-stage, --nproc and --jobs take a whole number, --force true or false (--stage x3 would
#   otherwise run no stage, or every one).
check_option_values() {
  local v
  for v in stage stop_stage nproc jobs; do
    case " ${RECIPE_OPTIONS[*]} " in *" $v "*) ;; *) continue ;; esac
    case "${!v}" in
      ''|*[!0-9]*) echo "$0: --${v//_/-} needs a whole number, got '${!v}'" >&2; exit 2 ;;
    esac
  done
  case " ${RECIPE_OPTIONS[*]} " in
    *" force "*) case "$force" in true|false) ;; *) echo "$0: --force needs true or false, got '$force'" >&2; exit 2 ;; esac ;;
  esac
}

# require_mmst: exit 2 with one line on stderr unless `python` imports mmst. It runs from / so that the
#   repository's own mmst/ folder (the recipes run from the root) does not stand in for an installed one.
require_mmst() {
  local py
  py="$(command -v python || true)"
  if [ -z "$py" ]; then
    echo "$0: no python on PATH: run 'source .venv/bin/activate' first (make setup creates .venv)" >&2
    exit 2
  fi
  if ! (cd / && python -c "import mmst") > /dev/null 2>&1; then
    echo "$0: python cannot import mmst (python is $py): run 'source .venv/bin/activate' first (make setup creates .venv)" >&2
    exit 2
  fi
}

run_stage() { _stage true "$@"; }

# run_item_stage N "title" command...: like run_stage, but for a stage whose command skips finished
#   items itself (one model per (system, seed), one evaluation per model): it runs whenever it is in
#   [stage, stop_stage], so adding a seed or a system later trains/evaluates only what is new. The
#   marker only records the last duration.
run_item_stage() { _stage false "$@"; }

# _stage USE_MARKER N "title" command...: the banner, the range check, timing and the marker.
_stage() {
  local use_marker="$1" n="$2" title="$3"; shift 3
  if [ "$n" -lt "$stage" ] || [ "$n" -gt "$stop_stage" ]; then return 0; fi
  local marker="$exp_dir/.done/${marker_prefix:-}stage$n"
  echo "=================================================================="
  if $use_marker; then echo "== Stage $n: $title"; else echo "== Stage $n: $title (finished items are skipped)"; fi
  echo "=================================================================="
  local options="" v line changed=""
  if $use_marker; then
    for v in $(_stage_options "$@"); do options+="$v=${!v-}"$'\n'; done
  fi
  if $use_marker && [ -f "$marker" ] && [ "$force" != "true" ]; then
    if [ -f "$marker.options" ]; then
      while IFS= read -r line; do
        v="${line%%=*}"
        case $'\n'"$options" in *$'\n'"$v="*) ;; *) continue ;; esac   # an option the stage no longer uses
        [ "${line#*=}" = "${!v-}" ] && continue
        changed+="${changed:+, }--${v//_/-} $(_shown "${line#*=}") -> $(_shown "${!v-}")"
      done < "$marker.options"
    fi
    if [ -z "$changed" ]; then
      echo "stage $n already done ($marker); skipping (use --force true to redo)"
      return 0
    fi
    echo "stage $n: options changed since it ran ($changed); running it again"
  fi
  local t0=$SECONDS
  "$@"
  mkdir -p "$exp_dir/.done"
  echo "$((SECONDS - t0))" > "$marker"
  if $use_marker; then printf '%s' "$options" > "$marker.options"; fi
  echo "-- stage $n finished in $((SECONDS - t0)) s"
}

# _shown VALUE: VALUE, or '' when it is empty.
_shown() { if [ -n "$1" ]; then printf '%s' "$1"; else printf "''"; fi; }

# The recipe's file, for _stage_options (the recipes cd to the repository root before sourcing this file).
case "$0" in /*) _recipe_file="$0" ;; *) _recipe_file="${OLDPWD:-.}/$0" ;; esac

# _stage_options COMMAND...: the names of the RECIPE_OPTIONS that a stage command uses, one a line. The
#   text searched: the command's words and the bodies (declare -f) of the shell functions it names, then,
#   transitively, of the functions those bodies name, and the lines of the recipe file that assign a
#   variable those bodies read (splits=..., asr_extra=...: variables derived from options). An option v
#   counts when the text has $v or ${v, also as the start of a longer name (eval_extra for
#   ${eval_extra_args[@]}): a needless rerun is better than a missed one. stage, stop_stage and force never
#   count, nor exp_dir (the markers live in it).
_stage_options() {
  local text="$*" seen=" " grown=true f v vars pattern
  local -a funcs
  mapfile -t funcs < <(compgen -A function)
  while $grown; do
    grown=false
    for f in "${funcs[@]}"; do
      case "$seen" in *" $f "*) continue ;; esac
      if [[ "$text" =~ (^|[^[:alnum:]_])"$f"([^[:alnum:]_]|$) ]]; then
        text+=$'\n'"$(declare -f "$f")"; seen+="$f "; grown=true
      fi
    done
    [ -f "$_recipe_file" ] || continue
    vars=""
    for v in $(grep -oE '\$\{?[A-Za-z_][A-Za-z0-9_]*' <<< "$text" | tr -d '${' | sort -u); do
      case "$seen" in *" \$$v "*) continue ;; esac
      case " ${RECIPE_OPTIONS[*]} " in *" $v "*) continue ;; esac
      seen+="\$$v "; vars+="${vars:+|}$v"
    done
    [ -n "$vars" ] || continue
    text+=$'\n'"$(_assignments "$vars" < "$_recipe_file")"; grown=true
  done
  for v in "${RECIPE_OPTIONS[@]}"; do
    case "$v" in stage|stop_stage|force|exp_dir) continue ;; esac
    if [[ "$text" == *"\$$v"* || "$text" == *"\${$v"* || "$text" == *"\${#$v"* || "$text" == *"\${!$v"* ]]; then
      echo "$v"
    fi
  done
}

# _assignments 'v1|v2|...' < FILE: the lines of FILE that assign one of the variables (v=, v+=, v[...]=,
#   read ... v), each after the headers of the case and if blocks around it (an assignment in a case branch
#   depends on the case's word too).
_assignments() {
  P="(^|[^[:alnum:]_])($1)(\\[|\\+?=)|(^|[[:space:]])read [^<]*[[:space:]]($1)([[:space:]]|\$)" awk '
    $0 ~ ENVIRON["P"] { for (i = 1; i <= d; i++) print hdr[i]; print }
    /(^|[[:space:];])case[[:space:]].*[[:space:]]in([[:space:]]|$)/ && !/(^|[[:space:];])esac([[:space:];]|$)/ { hdr[++d] = $0; next }
    /(^|[[:space:];])esac([[:space:];]|$)/ && d > 0 { d--; next }
    /^[[:space:]]*if[[:space:]]/ && !/(^|[[:space:];])fi([[:space:];]|$)/ { hdr[++d] = $0; next }
    /^[[:space:]]*elif[[:space:]]/ && d > 0 { hdr[d] = hdr[d] "\n" $0; next }
    /^[[:space:]]*fi([[:space:];]|$)/ && d > 0 { d-- }'
}

# require_synthetic_data DATA: exit 2 unless DATA is a prepared corpus (DATA/config.yaml); the message
#   says how recipes/synthetic/run.sh prepares one.
require_synthetic_data() {
  if [ ! -f "$1/config.yaml" ]; then
    echo "$0: $1/config.yaml not found: prepare the corpus first (bash recipes/synthetic/run.sh --stop-stage 1)" >&2
    exit 2
  fi
}

# data_tgt_langs DATA: print the target languages of DATA/config.yaml, comma-separated.
data_tgt_langs() {
  python -c "import sys, yaml; print(','.join(yaml.safe_load(open(sys.argv[1]))['tgt_langs']))" "$1/config.yaml"
}

# launch: python CLI, through torchrun when nproc > 1.
launch_train() {
  if [ "${nproc:-1}" -gt 1 ]; then
    torchrun --standalone --nproc_per_node "$nproc" -m mmst.training.cli "$@"
  else
    mmst-train "$@"
  fi
}
