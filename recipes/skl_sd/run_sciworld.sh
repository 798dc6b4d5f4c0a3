#!/usr/bin/env bash
# SKL-SD on ScienceWorld. Needs GPUs, a model, Java 17 and `pip install -e ".[sciworld]"`.
#   bash recipes/skl_sd/run_sciworld.sh [--dry-run] [hydra overrides...]
#   CONFIG=grpo_sciworld bash recipes/skl_sd/run_sciworld.sh      # GRPO baseline
ENV_NAME=sciworld
CONFIG=${CONFIG:-skl_sd_sciworld}
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEFAULT_MODEL=Qwen/Qwen2.5-7B-Instruct
source "$RECIPE_DIR/../common.sh"
if [ "$CONFIG" = grpo_sciworld ]; then
  build_tasks sciworld_plain_train '{"split": "train", "max_steps": 50}'
  build_tasks sciworld_plain_val '{"split": "test", "max_steps": 50}'
else
  build_tasks sciworld_train '{"split": "train", "max_steps": 50}'
  build_tasks sciworld_val '{"split": "test", "max_steps": 50}' skl_stateful
fi
train
