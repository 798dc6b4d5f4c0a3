#!/usr/bin/env bash
# SkillRise on ALFWorld (all six families). Needs GPUs, a model and ALFWorld's data (alfworld-download).
#   bash recipes/skillrise/run_alfworld.sh [--dry-run] [hydra overrides...]
#   CONFIG=grpo_alfworld bash recipes/skillrise/run_alfworld.sh          # task-independent GRPO baseline
#   CONFIG=gigpo_alfworld bash recipes/skillrise/run_alfworld.sh         # GiGPO baseline (step groups by env state)
#   CONFIG=rloo_alfworld bash recipes/skillrise/run_alfworld.sh          # RLOO baseline
#   CONFIG=ppo_alfworld bash recipes/skillrise/run_alfworld.sh           # PPO baseline (GAE with a critic)
#   CONFIG=lamer_alfworld bash recipes/skillrise/run_alfworld.sh         # LaMer-style baseline (K attempts of one task)
#   CONFIG=no_curation_alfworld bash recipes/skillrise/run_alfworld.sh   # no-curation ablation
ENV_NAME=alfworld
CONFIG=${CONFIG:-skillrise_alfworld}
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
export ALFWORLD_DATA=${ALFWORLD_DATA:-$HOME/.cache/alfworld}
# The released turn cap: 10 steps per task.
case "$CONFIG" in  # task-independent baselines play single tasks
  grpo_alfworld|gigpo_alfworld|rloo_alfworld|ppo_alfworld) TASK_BASELINE=true ;;
  *) TASK_BASELINE=false ;;
esac
if [ "$TASK_BASELINE" = true ]; then
  build_tasks alfworld_tasks_train '{"split": "train", "max_steps": 10}'
  build_tasks alfworld_tasks_val '{"split": "valid_unseen", "max_steps": 10}'
elif [ "$CONFIG" = lamer_alfworld ]; then
  build_attempts alfworld_attempts_train '{"split": "train", "max_steps": 10}'
  build_attempts alfworld_attempts_val '{"split": "valid_unseen", "max_steps": 10}'
else
  build_sequences alfworld_train '{"split": "train", "max_steps": 10}'
  build_sequences alfworld_val '{"split": "valid_unseen", "max_steps": 10}'
fi
train
