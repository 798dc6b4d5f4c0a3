#!/usr/bin/env bash
# SKL paper §2.1-2.2 / Fig. 2a: the slippery-FrozenLake prompting study (no training), both slip settings.
#
#   ENDPOINT=http://localhost:8000/v1 SERVED_MODEL=Qwen3-235B-A22B TOKENIZER=Qwen/Qwen3-235B-A22B \
#     bash recipes/skl_study/run_frozenlake_study.sh
#   MODEL=/path/to/hf/model bash recipes/skl_study/run_frozenlake_study.sh     # in-process (small models)
#
# Extra arguments are passed on (e.g. --max-new-tokens 4096 --no-thinking --concurrency 64).
# Outputs: $OUT_ROOT/slip_<p_left>_<p_right>/{results.json,frozenlake_study.png,episodes.jsonl,...}
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PYTHON=${PYTHON:-python}
OUT_ROOT=${OUT_ROOT:-results/frozenlake_study}
ITERATIONS=${ITERATIONS:-10}
TRAIN_MAPS=${TRAIN_MAPS:-50}
TEST_MAPS=${TEST_MAPS:-50}
SIZE=${SIZE:-5}  # the authors' eval_bootstrap maps
SEED=${SEED:-0}
SLIPS=${SLIPS:-"1/3,1/3 0,2/3"}

if [ -n "${ENDPOINT:-}" ]; then
  SOURCE=(--endpoint "$ENDPOINT" --served-model "${SERVED_MODEL:?set SERVED_MODEL}" --tokenizer "${TOKENIZER:?set TOKENIZER}")
elif [ -n "${MODEL:-}" ]; then
  SOURCE=(--model "$MODEL")
else
  echo "set ENDPOINT (+ SERVED_MODEL, TOKENIZER) or MODEL" >&2
  exit 2
fi

for slip in $SLIPS; do
  tag=$(echo "$slip" | tr ',/' '_-')
  "$PYTHON" -m skl_verl.skl.frozenlake_study "${SOURCE[@]}" --iterations "$ITERATIONS" \
    --train-maps "$TRAIN_MAPS" --test-maps "$TEST_MAPS" --slip "$slip" --size "$SIZE" --seed "$SEED" \
    --out "$OUT_ROOT/slip_$tag" "$@"
done
