#!/usr/bin/env bash
# The frozen executor as an OpenAI-compatible vLLM server on GPUs the trainer does not use (the authors
# serve it on 6 GPUs and train the curator on 2):
#   EXECUTOR_GPUS=2,3,4,5,6,7 bash recipes/knowledge_weaver/serve_executor.sh
#   then, for the run: export KW_EXECUTOR_URL=http://127.0.0.1:30080/v1 CUDA_VISIBLE_DEVICES=0,1 N_GPUS=2
set -euo pipefail
EXECUTOR_MODEL=${KW_EXECUTOR_MODEL:-Qwen/Qwen3-4B}
EXECUTOR_GPUS=${EXECUTOR_GPUS:-2,3,4,5,6,7}
PORT=${PORT:-30080}
DP=$(awk -F, '{print NF}' <<<"$EXECUTOR_GPUS")
CUDA_VISIBLE_DEVICES=$EXECUTOR_GPUS exec vllm serve "$EXECUTOR_MODEL" --port "$PORT" \
  --data-parallel-size "$DP" --enable-prefix-caching --served-model-name "$EXECUTOR_MODEL"
