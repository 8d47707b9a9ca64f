# shellcheck shell=bash
# Shared helpers for training-time augmentation and ASR pretraining in the recipes
# (recipes/synthetic/run.sh, run_compare.sh, run_augment.sh, recipes/ted_mmst/run.sh).
# Source after recipes/lib/stages.sh. See docs/augmentation.md.

# augment_overrides SPECAUGMENT SPEED_PERTURB FACTORS: print the mmst-train overrides
#   SPECAUGMENT: none | LB | LD | SM | SS     SPEED_PERTURB: true | false     FACTORS: 0.9,1.0,1.1
augment_overrides() {
  local spec="$1" speed="$2" factors="$3" s=""
  [ "$spec" != "none" ] && s="data.augment.specaugment_policy=$spec"
  [ "$speed" = "true" ] && s="$s data.augment.speed_perturb=[$factors]"
  echo "$s"
}

# ensure_speed_perturbed DATA FACTORS JOBS: add speed-perturbed copies of DATA's train split
#   (data_prep/speed_perturb.py; a no-op when they exist with these factors).
ensure_speed_perturbed() {
  local data_dir="$1" factors="$2" jobs="${3:-1}"
  echo "-- speed perturbation ($factors) of $data_dir/train.tsv"
  python data_prep/speed_perturb.py --data "$data_dir" --split train --factors "$factors" --jobs "$jobs" \
    --no-progress > /dev/null
}

# link_data SRC DST: DST becomes a DATA directory of symlinks to SRC's files with its own config.yaml,
#   so speed-perturbed copies can be added without writing into a shared SRC.
link_data() {
  local src="$1" dst="$2" f
  mkdir -p "$dst"
  for f in "$src"/*; do
    [ "$(basename "$f")" = "config.yaml" ] && continue
    [ -e "$dst/$(basename "$f")" ] || ln -s "$(realpath "$f")" "$dst/$(basename "$f")"
  done
  [ -f "$dst/config.yaml" ] || cp "$src/config.yaml" "$dst/config.yaml"
}

# asr_pretrain DATA ASR_DATA ASR_DIR CONFIG EXTRA_OVERRIDES: English ASR view of DATA (with its
#   speed-perturbed copies) and CTC + attention pretraining of the encoder into ASR_DIR; skipped when
#   ASR_DIR/.train_done exists (unless --force true). The ST run loads ASR_DIR/checkpoint_best.pt.
asr_pretrain() {
  local data_dir="$1" asr_data="$2" asr_dir="$3" config="$4" extra="$5"
  if [ -f "$asr_dir/.train_done" ] && [ "${force:-false}" != "true" ]; then
    echo "-- ASR pretraining already done ($asr_dir); skipping"; return 0
  fi
  [ "${force:-false}" = "true" ] && rm -rf "$asr_dir"
  python data_prep/make_asr_view.py --data "$data_dir" --out "$asr_data" > /dev/null
  echo "-- ASR pretraining -> $asr_dir"
  # shellcheck disable=SC2086
  launch_train --config "$config" --data "$asr_data" --save-dir "$asr_dir" $extra < /dev/null
  touch "$asr_dir/.train_done"
}

# config_speed_factors CONFIG: the data.augment.speed_perturb factors of a training config, comma-separated
#   (empty when the config does not perturb).
config_speed_factors() {
  python -c "import sys, yaml; c = yaml.safe_load(open(sys.argv[1])) or {}
f = ((c.get('data') or {}).get('augment') or {}).get('speed_perturb')
print(','.join(f'{x:g}' for x in f) if f else '')" "$1"
}
