#!/usr/bin/env bash
# Recipe smoke on ONE GPU with vLLM: 2 training steps per run, tiny local model, locally built data.
# The GPU counterpart of tests/recipes/test_recipe_smokes.py (which runs every recipe on CPU).
#
#   bash scripts/gpu_smoke.sh [--dry-run] [extra hydra overrides for every run...]
#
# Runs: GRPO on FrozenLake (examples/config/quickstart_frozenlake.yaml, data from skl_verl.rollout.data);
# skl_rl_chess_distill on the chess sample (envs/data/chess_puzzles_sample.csv; needs stockfish);
# SkillRise on ALFWorld when ALFWORLD_DATA is set (K=2 unless K is given); Knowledge Weaver on FrozenLake
# lakes with a tiny curator and the executor stand-in. No hub download: the model
# is skl_verl.rollout.tiny_model's. For each run it prints the loop that ran, step 2's success rate and
# training/rollout_probs_diff_max (weights synced to vLLM when it is ~0) from verl's file logger.
# --dry-run composes and checks every config (skl.dry_run=true) without building anything or a GPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python}
OUT=${OUT:-outputs/gpu_smoke}
DRY_RUN=false
EXTRA=()
for arg in "$@"; do
  if [ "$arg" = "--dry-run" ]; then DRY_RUN=true; else EXTRA+=("$arg"); fi
done
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
MODEL=$OUT/tiny_model
CHESS_CSV=$PWD/envs/data/chess_puzzles_sample.csv
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

COMMON=(
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.mode=async
  actor_rollout_ref.rollout.gpu_memory_utilization=0.3
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.calculate_log_probs=true
  trainer.n_gpus_per_node=1
  trainer.nnodes=1
  trainer.total_training_steps=2
  data.train_batch_size=2
  data.max_prompt_length=2048
  data.max_response_length=256
  actor_rollout_ref.rollout.n=2
  actor_rollout_ref.actor.ppo_mini_batch_size=2
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2
  "trainer.logger=[console,file]"
  trainer.save_freq=-1
  trainer.test_freq=-1
  trainer.val_before_train=false
  trainer.project_name=skl_verl_gpu_smoke
)

if [ "$DRY_RUN" = false ]; then
  "$PYTHON" -c "import sys; from skl_verl.rollout.tiny_model import build_tiny_model; build_tiny_model(sys.argv[1])" "$MODEL"
fi

# report NAME LOOP: the loop, step 2's success rate and rollout/actor prob gap from the file logger.
report() {
  "$PYTHON" - "$OUT/$1/metrics.jsonl" "$1" "$2" <<'EOF'
import json, sys
path, name, loop = sys.argv[1:]
steps = {}
for line in open(path):
    if line.strip():
        entry = json.loads(line)
        steps.setdefault(entry["step"], {}).update(entry["data"])
two = steps.get(2)
if two is None:
    sys.exit(f"{name}: step 2 was not logged (steps: {sorted(steps)})")
gap = [steps[s].get("training/rollout_probs_diff_max") for s in sorted(steps)]
print(f"{name}: loop={loop} step2 env/success_rate={two.get('env/success_rate')} "
      f"training/rollout_probs_diff_max per step={gap}")
if any(g is None or g >= 1e-3 for g in gap):
    sys.exit(f"{name}: rollout and actor log-probs differ (weights not synced to vLLM?)")
EOF
}

# run NAME LOOP COMMAND...: one training run, its log and metrics under $OUT/NAME.
run() {
  local name=$1 loop=$2
  shift 2
  mkdir -p "$OUT/$name"
  rm -f "$OUT/$name/metrics.jsonl"
  echo "=== $name ($loop)"
  VERL_FILE_LOGGER_PATH=$OUT/$name/metrics.jsonl MODEL_PATH=$MODEL N_GPUS=1 "$@" \
    trainer.experiment_name="$name" "${COMMON[@]}" "${EXTRA[@]+"${EXTRA[@]}"}" 2>&1 | tee "$OUT/$name/train.log"
  if [ "$DRY_RUN" = false ]; then report "$name" "$loop"; fi
}

# 1. GRPO on FrozenLake (the quickstart config).
if [ "$DRY_RUN" = false ]; then
  "$PYTHON" -m skl_verl.rollout.data --env frozenlake \
    --env-kwargs '{"size": 2, "num_tasks": 16, "seed": 0, "slip": [0.0, 0.0], "max_steps": 6}' \
    --out "$OUT/frozenlake/frozenlake_train.parquet"
fi
DATA_DIR=$OUT/frozenlake run frozenlake_grpo frozenlake_quickstart \
  "$PYTHON" -m skl_verl.main --config-path="$PWD/examples/config" --config-name=quickstart_frozenlake \
  actor_rollout_ref.model.path="$MODEL" "++skl.dry_run=$DRY_RUN"  # the run scripts pass skl.dry_run themselves

# 2. SKL-RL distillation ablation on the chess sample (its run script builds the data).
if command -v stockfish >/dev/null || [ -x /usr/games/stockfish ]; then
  DATA_DIR=$OUT/chess PUZZLES=$CHESS_CSV CONFIG=skl_rl_chess_distill PYTHON=$PYTHON \
    run skl_rl_chess_distill skl_rl_chess_distill bash recipes/skl_rl/run_chess.sh $([ "$DRY_RUN" = true ] && echo --dry-run)
else
  echo "=== skl_rl_chess_distill skipped: stockfish not installed (apt-get install stockfish)"
fi

# 3. SkillRise on ALFWorld, when its data is there.
if [ -n "${ALFWORLD_DATA:-}" ]; then
  DATA_DIR=$OUT/alfworld K=${K:-2} CONFIG=skillrise_alfworld PYTHON=$PYTHON \
    run skillrise_alfworld skillrise bash recipes/skillrise/run_alfworld.sh $([ "$DRY_RUN" = true ] && echo --dry-run)
else
  echo "=== skillrise_alfworld skipped: ALFWORLD_DATA not set"
fi
# 4. Knowledge Weaver (kw_alfworld's settings) on two one-row lakes, as the CPU smoke runs it: the tiny curator
#    (skl_verl.knowledge_weaver.tiny_curator) sampling on vLLM, the MI credit from vLLM's prompt_logprobs, the
#    reference policy for the KL term, and the executor stand-in of tests/knowledge_weaver/kw_standins.py.
#    Checked: step 1 admits the entry, step 2 retrieves it, the MI credit is non-zero, the update moved.
KW=$OUT/knowledge_weaver
KW_ARGS=(
  --config-path="$PWD/recipes/knowledge_weaver/config" --config-name=kw_alfworld
  kw.env.name=frozenlake "~kw.env.kwargs" "+kw.env.kwargs={maps:[[SG],[HSG]],slip:[0.0,0.0],max_steps:3}"
  "kw.executor.client={_target_:kw_standins.GuidanceFollowingExecutor}" kw.executor.tokenizer="$KW/curator"
  kw.executor.max_steps=3 kw.seed=23003 kw.mi.set_size=2 kw.reward.tasks=2 kw.context.trajectories=1 kw.retrieval.backend=bm25
  data.train_files="$KW/kw.parquet" data.val_files="$KW/kw.parquet" kw.pool.initial="$KW/pool.jsonl"
  trainer.default_local_dir="$KW/ckpt" trainer.total_training_steps=2 data.train_batch_size=2
)
export PYTHONPATH=$PWD/tests/knowledge_weaver${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$KW"
if [ "$DRY_RUN" = false ]; then
  rm -rf "$KW/ckpt"
  "$PYTHON" -m skl_verl.knowledge_weaver.tiny_curator "$KW/curator"
  "$PYTHON" -m skl_verl.knowledge_weaver.build prepare --per-type 2 "${KW_ARGS[@]}"
fi
echo "=== knowledge_weaver (kw_curator)"
VERL_FILE_LOGGER_PATH=$KW/metrics.jsonl "$PYTHON" -m skl_verl.main "${KW_ARGS[@]}" actor_rollout_ref.model.path="$KW/curator" \
  trainer.experiment_name=knowledge_weaver "${COMMON[@]}" "++skl.dry_run=$DRY_RUN" "${EXTRA[@]+"${EXTRA[@]}"}" \
  data.max_response_length=32 2>&1 | tee "$KW/train.log"
if [ "$DRY_RUN" = false ]; then
  "$PYTHON" - "$KW/metrics.jsonl" <<'EOF'
import json, sys
steps = {}
for line in open(sys.argv[1]):
    if line.strip():
        entry = json.loads(line)
        steps.setdefault(entry["step"], {}).update(entry["data"])
one, two = steps.get(1, {}), steps.get(2, {})
keys = ("kw/valid_rate", "kw/admitted", "kw/retrieved", "kw/bank_only_sr", "kw/mi_credit", "actor/grad_norm")
print("knowledge_weaver:", {k: (one.get(k), two.get(k)) for k in keys})
if not (one.get("kw/admitted") == 1 and two.get("kw/retrieved") == 1 and one.get("kw/mi_credit", 0) > 0
        and two.get("actor/grad_norm", 0) > 0):
    sys.exit("knowledge_weaver: expected an entry admitted at step 1 and retrieved at step 2, MI credit and an update")
EOF
fi
echo "gpu smoke: done (outputs in $OUT)"
