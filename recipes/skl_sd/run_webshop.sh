#!/usr/bin/env bash
# SKL-SD on WebShop. Needs GPUs, a model and a running WebShop server with all products and human
# goals, as R3L runs it (docs/webshop_setup.md, "The full WebShop").
#   bash recipes/skl_sd/run_webshop.sh [--dry-run] [hydra overrides...]
#   CONFIG=grpo_webshop bash recipes/skl_sd/run_webshop.sh      # GRPO baseline
ENV_NAME=webshop
CONFIG=${CONFIG:-skl_sd_webshop}
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEFAULT_MODEL=Qwen/Qwen2.5-7B-Instruct
source "$RECIPE_DIR/../common.sh"
# 96 tasks x 4 rollouts = 384 concurrent episodes: the pre-flight asks for one server per 64 (6), started as
# docs/webshop_setup.md says and listed comma-separated, e.g. WEBSHOP_URL=http://127.0.0.1:3000,...,http://127.0.0.1:3005
export WEBSHOP_URL=${WEBSHOP_URL:-http://127.0.0.1:3000}
# R3L's 15 steps per episode; the loops' max_turns (agent_loops.yaml: *_webshop) is the same 15.
MAX_STEPS=15
# The goal split (envs/webshop/env.py SPLIT_CONVENTIONS): R3L's, train goals 0-4095 and test 4096-4195, as the
# paper reruns SKL-SD; SPLIT_CONVENTION=webshop is WebShop's own (train 1500+, test 0-499, goals R3L trains on).
# Its datasets get their own file names, so one split never reuses the other's files.
SPLIT_CONVENTION=${SPLIT_CONVENTION:-r3l}
case "$SPLIT_CONVENTION" in
  r3l) SUFFIX= ;;
  webshop) SUFFIX=_webshop_split ;;
  *) echo "error: SPLIT_CONVENTION=$SPLIT_CONVENTION must be r3l (R3L's goals) or webshop (WebShop's)" >&2; exit 2 ;;
esac
SPLIT="\"split_convention\": \"$SPLIT_CONVENTION\""
if [ "$CONFIG" = grpo_webshop ]; then TRAIN=webshop_plain_train VAL=webshop_plain_val VAL_LOOP=skl_sd_grpo_webshop
else TRAIN=webshop_train VAL=webshop_val VAL_LOOP=skl_stateful_webshop; fi
build_train_val $TRAIN $VAL $VAL_LOOP "$SUFFIX" "{\"split\": \"train\", $SPLIT, \"max_steps\": $MAX_STEPS}" \
  "{\"split\": \"test\", $SPLIT, \"max_steps\": $MAX_STEPS}"
train
