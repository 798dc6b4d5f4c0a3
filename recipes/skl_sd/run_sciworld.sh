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
# The task set (envs/sciworld_env.py): R3L's, 17 task types for training and the 13 others for testing, the
# first half of each type's variation numbers (2,294 / 1,308 tasks), as the paper reruns SKL-SD;
# TASK_SET=package is ours before issue 37: all 30 types, the package's train and test variation lists.
# Its datasets get their own file names, so one set never reuses the other's files.
TASK_SET=${TASK_SET:-r3l}
case "$TASK_SET" in
  r3l) SUFFIX= ;;
  package) SUFFIX=_package_tasks ;;
  *) echo "error: TASK_SET=$TASK_SET must be r3l (R3L's types) or package (all 30, the package's variation lists)" >&2; exit 2 ;;
esac
KWARGS="\"task_set\": \"$TASK_SET\", \"max_steps\": $MAX_STEPS, \"action_format\": \"templates\""
if [ "$CONFIG" = grpo_sciworld ]; then TRAIN=sciworld_plain_train VAL=sciworld_plain_val VAL_LOOP=skl_sd_grpo_sciworld
else TRAIN=sciworld_train VAL=sciworld_val VAL_LOOP=skl_stateful_sciworld; fi
build_train_val $TRAIN $VAL $VAL_LOOP "$SUFFIX" "{\"split\": \"train\", $KWARGS}" "{\"split\": \"test\", $KWARGS}"
train
