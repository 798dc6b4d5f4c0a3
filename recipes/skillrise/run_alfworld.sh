#!/usr/bin/env bash
# SkillRise on ALFWorld (all six families). Needs GPUs, a model and ALFWorld's data (alfworld-download).
#   bash recipes/skillrise/run_alfworld.sh [--dry-run] [hydra overrides...]
#   CONFIG=grpo bash recipes/skillrise/run_alfworld.sh                  # task-independent GRPO baseline
#   CONFIG=gigpo bash recipes/skillrise/run_alfworld.sh                 # GiGPO baseline (step groups by env state)
#   CONFIG=rloo bash recipes/skillrise/run_alfworld.sh                  # RLOO baseline
#   CONFIG=ppo bash recipes/skillrise/run_alfworld.sh                   # PPO baseline (GAE with a critic)
#   CONFIG=lamer bash recipes/skillrise/run_alfworld.sh                 # LaMer-style baseline (K attempts of one task)
#   CONFIG=no_curation_alfworld bash recipes/skillrise/run_alfworld.sh  # no-curation ablation
ENV_NAME=alfworld
CONFIG=${CONFIG:-skillrise_alfworld}
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
export ALFWORLD_DATA=${ALFWORLD_DATA:-$HOME/.cache/alfworld}
# The released turn cap (10 steps per task) and held-out split: the authors validate on valid_seen
# (env.alfworld.eval_dataset=eval_in_distribution), as skl_verl.skillrise.evaluate does by default.
build_data '{"split": "train", "max_steps": 10}' '{"split": "valid_seen", "max_steps": 10}'
train
