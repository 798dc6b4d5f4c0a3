# SkillRise run scripts: the shared recipe launcher plus ordered K-task sequences.
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEFAULT_MODEL=Qwen/Qwen3-4B
source "$RECIPE_DIR/../common.sh"
K=${K:-3}
require_int K 1 3

# build_sequences NAME ENV_KWARGS_JSON -> $DATA_DIR/NAME.parquet (ordered K-task sequences)
build_sequences() {
  check_resources
  local out="$DATA_DIR/$1.parquet"
  build_missing "$out" "$PYTHON" -m skl_verl.skillrise.build_dataset --env "$ENV_NAME" --env-kwargs "$2" --k "$K" --seed "$SEED" --out "$out"
}

# build_attempts NAME ENV_KWARGS_JSON -> $DATA_DIR/NAME.parquet (each task attempted K times in a row: LaMer)
build_attempts() {
  check_resources
  local out="$DATA_DIR/$1.parquet"
  build_missing "$out" "$PYTHON" -m skl_verl.skillrise.build_dataset --env "$ENV_NAME" --env-kwargs "$2" --attempts "$K" --out "$out"
}
