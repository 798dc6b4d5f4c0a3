#!/usr/bin/env bash
# SKL-RL on ChessPuzzles (rating < 1000), played as games from the puzzle positions (App. G.2; the
# authors' env): up to MAX_STEPS moves against OPPONENT, +1 for mating, -1 for being mated, else 0;
# an illegal move loses at -1.01 (the authors' rule; the env kwarg invalid_move_ends=false retries it).
# Needs GPUs, a model, the puzzle file (bash scripts/download_chess_puzzles.sh) and, for EXPERT or
# OPPONENT=stockfish, Stockfish (apt-get install stockfish).
#   bash recipes/skl_rl/run_chess.sh [--dry-run] [hydra overrides...]   # self-generated simulation (§4.2.2)
#   EXPERT=1_6 bash recipes/skl_rl/run_chess.sh         # behaviour policy: Stockfish with p = 1/6 (§4.2.1)
#   RATING=authors bash recipes/skl_rl/run_chess.sh     # the authors' scripts' ratings [0, 800] (paper: < 1000)
#   OPPONENT=first_legal bash recipes/skl_rl/run_chess.sh   # random (default), first_legal, stockfish, puzzle_line
#   SPLIT=hash bash recipes/skl_rl/run_chess.sh         # test = a hash-chosen 20% (default head: the file's first 20%)
#   CONFIG=grpo_chess bash recipes/skl_rl/run_chess.sh  # GRPO baseline
#   CONFIG=skl_rl_chess_distill bash recipes/skl_rl/run_chess.sh  # distillation ablation as the authors' script:
#       # 10 moves against first_legal, reverse KL on z with the student's z in the trace, distillation only
#   CONFIG=skl_rl_chess_distill OPPONENT=random MAX_STEPS=5 bash recipes/skl_rl/run_chess.sh \
#       actor_rollout_ref.rollout.agent.default_agent_loop=skl_rl_chess_distill_forward \
#       algorithm.skl_rl.objective=grpo_distill algorithm.skl_rl.distill_coef=0.1   # ours: GRPO + forward KL, 5 moves
# Every move is its own window and sample (the chess loops' window: move), at most 1,024 + 5,120 tokens, well
# inside Qwen2.5-7B's 32,768 positions (recipes/skl_rl/README.md has the measured sizes).
ENV_NAME=chess_puzzles
CONFIG=${CONFIG:-skl_rl_chess}
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEFAULT_MODEL=Qwen/Qwen2.5-7B-Instruct
source "$RECIPE_DIR/../common.sh"
PUZZLES=${PUZZLES:-data/chess_puzzles/puzzles.csv}
EXPERT=${EXPERT:-}
RATING=${RATING:-paper}
# The distillation ablation plays the authors' distillation script's fixed opponent, the first legal move.
if [ "$CONFIG" = skl_rl_chess_distill ]; then OPPONENT=${OPPONENT:-first_legal}; else OPPONENT=${OPPONENT:-random}; fi
SPLIT=${SPLIT:-head}
# The authors' 10 moves, their distillation script included (the paper's §4.2.3 says 5: MAX_STEPS=5).
MAX_STEPS=${MAX_STEPS:-10}
require_int MAX_STEPS 1 10
case "$RATING" in
  paper) RANGE='"max_rating": 1000' ;;
  authors) RANGE='"min_rating": 0, "max_rating": 801' ;;
  *) echo "error: RATING=$RATING must be paper (< 1000) or authors ([0, 800])" >&2; exit 2 ;;
esac
case "$SPLIT" in
  head|hash) ;;
  *) echo "error: SPLIT=$SPLIT must be head (the first 20% of the filtered file, the authors') or hash" >&2; exit 2 ;;
esac
case "$OPPONENT" in
  random|first_legal|stockfish|puzzle_line) ;;
  *) echo "error: OPPONENT=$OPPONENT must be random, first_legal, stockfish or puzzle_line" >&2; exit 2 ;;
esac
# One setting per DATA_DIR: the parquet files are built once and then reused. The test rows name the loop
# that validates them: the config's skl.val_agent_loop (SKL-RL itself; the GRPO baseline its own loop).
if [ "$CONFIG" = grpo_chess ]; then VAL_LOOP=skl_stateful_chess_val; else VAL_LOOP=skl_rl_chess_val; fi
GAME="\"mode\": \"game\", \"opponent\": \"$OPPONENT\", \"max_steps\": $MAX_STEPS"
SPLIT_KWARGS="\"split_mode\": \"$SPLIT\""
build_tasks chess_train "{\"csv_path\": \"$PUZZLES\", $RANGE, $GAME, $SPLIT_KWARGS, \"split\": \"train\"}"
build_tasks chess_test "{\"csv_path\": \"$PUZZLES\", $RANGE, $GAME, $SPLIT_KWARGS, \"split\": \"test\"}" "$VAL_LOOP"
if [ "$CONFIG" = skl_rl_chess ] && [ -n "$EXPERT" ]; then
  case "$EXPERT" in
    1_2|1_3|1_6) ;;
    *) echo "error: EXPERT=$EXPERT must be 1_2, 1_3 or 1_6 (or unset for self-generated simulation)" >&2; exit 2 ;;
  esac
  OVERRIDES=("actor_rollout_ref.rollout.agent.default_agent_loop=skl_rl_chess_expert_$EXPERT" "${OVERRIDES[@]+"${OVERRIDES[@]}"}")
fi
train
