# Knowledge Weaver run scripts: the shared recipe launcher, plus the trajectory pool and the per-step
# context dataset, both built from the same composed config (and overrides) the run trains with.
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEFAULT_MODEL=Qwen/Qwen3-4B
source "$RECIPE_DIR/../common.sh"
POOL_PER_TYPE=${POOL_PER_TYPE:-50}
require_int POOL_PER_TYPE 1 50

# build_kw: the initial pool (kw.pool.initial; the frozen executor with no guidance, POOL_PER_TYPE
# train tasks per type; kept when it exists: it costs executor time), then the dataset (always
# rebuilt: it follows trainer.total_training_steps and data.train_batch_size).
build_kw() {
  check_resources
  local build=("$PYTHON" -m skl_verl.knowledge_weaver.build)
  local config=(--config-path="$RECIPE_DIR/config" --config-name="$CONFIG" "${OVERRIDES[@]+"${OVERRIDES[@]}"}")
  local pool
  pool=$("$PYTHON" -m skl_verl.knowledge_weaver.build pool-path "${config[@]}")
  build_missing "$pool" "${build[@]}" pool --per-type "$POOL_PER_TYPE" "${config[@]}"
  if [ "$DRY_RUN" = true ]; then
    echo "dry run: would build the dataset:$(printf ' %q' "${build[@]}" dataset "${config[@]}")"
    "${build[@]}" check --dry-run "${config[@]}"
  else
    "${build[@]}" dataset "${config[@]}"
    "${build[@]}" check "${config[@]}"  # the pool is there and the executor answers, before any worker starts
  fi
}
