#!/usr/bin/env bash
# SKL-SD on WebShop. Needs GPUs, a model and a running WebShop server (docs/webshop_setup.md).
#   bash recipes/skl_sd/run_webshop.sh [--dry-run] [hydra overrides...]
#   CONFIG=grpo_webshop bash recipes/skl_sd/run_webshop.sh      # GRPO baseline
ENV_NAME=webshop
CONFIG=${CONFIG:-skl_sd_webshop}
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEFAULT_MODEL=Qwen/Qwen2.5-7B-Instruct
source "$RECIPE_DIR/../common.sh"
export WEBSHOP_URL=${WEBSHOP_URL:-http://127.0.0.1:3000}
if [ "$CONFIG" = grpo_webshop ]; then
  build_tasks webshop_plain_train '{"split": "train"}'
  build_tasks webshop_plain_val '{"split": "test"}'
else
  build_tasks webshop_train '{"split": "train"}'
  build_tasks webshop_val '{"split": "test"}' skl_stateful
fi
train
