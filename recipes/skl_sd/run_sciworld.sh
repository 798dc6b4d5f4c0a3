#!/usr/bin/env bash
# SKL-SD on ScienceWorld. Needs GPUs, a model, Java 17 and `pip install -e ".[sciworld]"`.
#   bash recipes/skl_sd/run_sciworld.sh [--dry-run] [hydra overrides...]
#   CONFIG=grpo_sciworld bash recipes/skl_sd/run_sciworld.sh      # GRPO baseline
ENV_NAME=sciworld
CONFIG=${CONFIG:-skl_sd_sciworld}
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEFAULT_MODEL=Qwen/Qwen2.5-7B-Instruct
source "$RECIPE_DIR/../common.sh"
# R3L's 30 steps per episode; the loops' max_turns (agent_loops.yaml: *_sciworld) is the same 30.
# Verb templates and the objects in reach (~600 characters a turn) instead of every valid action
# (~4,000): R3L lists the command templates once and no valid actions; 30 full lists would not fit the
# response budget (README: "ScienceWorld actions").
MAX_STEPS=30
if [ "$CONFIG" = grpo_sciworld ]; then
  build_tasks sciworld_plain_train "{\"split\": \"train\", \"max_steps\": $MAX_STEPS, \"action_format\": \"templates\"}"
  build_tasks sciworld_plain_val "{\"split\": \"test\", \"max_steps\": $MAX_STEPS, \"action_format\": \"templates\"}" skl_sd_grpo_sciworld
else
  build_tasks sciworld_train "{\"split\": \"train\", \"max_steps\": $MAX_STEPS, \"action_format\": \"templates\"}"
  build_tasks sciworld_val "{\"split\": \"test\", \"max_steps\": $MAX_STEPS, \"action_format\": \"templates\"}" skl_stateful_sciworld
fi
train
