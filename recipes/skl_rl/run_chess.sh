#!/usr/bin/env bash
# SKL-RL on ChessPuzzles (rating < 1000). Needs GPUs, a model, the puzzle file
# (bash scripts/download_chess_puzzles.sh) and Stockfish (apt-get install stockfish).
#   bash recipes/skl_rl/run_chess.sh [--dry-run] [hydra overrides...]
#   EXPERT=1_6 bash recipes/skl_rl/run_chess.sh         # behaviour policy: Stockfish with p = 1/6
#   CONFIG=grpo_chess bash recipes/skl_rl/run_chess.sh  # GRPO baseline
#   CONFIG=skl_rl_chess_distill bash recipes/skl_rl/run_chess.sh  # distillation ablation (episode length 5), forward KL
#   CONFIG=skl_rl_chess_distill bash recipes/skl_rl/run_chess.sh \
#       actor_rollout_ref.rollout.agent.default_agent_loop=skl_rl_chess_distill_reverse   # reverse KL
ENV_NAME=chess_puzzles
CONFIG=${CONFIG:-skl_rl_chess}
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEFAULT_MODEL=Qwen/Qwen2.5-7B-Instruct
source "$RECIPE_DIR/../common.sh"
PUZZLES=${PUZZLES:-data/chess_puzzles/puzzles.csv}
EXPERT=${EXPERT:-1_2}
build_tasks chess_train "{\"csv_path\": \"$PUZZLES\", \"max_rating\": 1000, \"split\": \"train\"}"
build_tasks chess_test "{\"csv_path\": \"$PUZZLES\", \"max_rating\": 1000, \"split\": \"test\"}" skl_stateful
if [ "$CONFIG" = skl_rl_chess ]; then
  OVERRIDES=("actor_rollout_ref.rollout.agent.default_agent_loop=skl_rl_chess_expert_$EXPERT" "${OVERRIDES[@]+"${OVERRIDES[@]}"}")
fi
train
