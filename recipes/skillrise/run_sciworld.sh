#!/usr/bin/env bash
# SkillRise on ScienceWorld. Needs GPUs, a model, Java 17 and `pip install -e ".[sciworld]"`.
#   bash recipes/skillrise/run_sciworld.sh [--dry-run] [hydra overrides...]
#   CONFIG=grpo|gigpo|rloo|ppo|lamer bash recipes/skillrise/run_sciworld.sh   # a baseline (see run_alfworld.sh)
ENV_NAME=sciworld
CONFIG=${CONFIG:-skillrise_sciworld}
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# The released task set (L0: 29 tasks; train variations, dev variations as test; envs/sciworld_l0.py),
# turn cap (30 steps) and action rendering (verb templates + objects).
build_data '{"split": "train", "task_set": "l0", "max_steps": 30, "action_format": "templates"}' \
  '{"split": "test", "task_set": "l0", "max_steps": 30, "action_format": "templates"}'
train
