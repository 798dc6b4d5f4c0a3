#!/usr/bin/env bash
# The frozen executor as an OpenAI-compatible vLLM server on GPUs the trainer does not use (the authors
# serve it on 6 GPUs and train the curator on 2):
#   export KW_EXECUTOR_API_KEY=$(python -c 'import secrets; print(secrets.token_hex(16))')
#   EXECUTOR_GPUS=2,3,4,5,6,7 bash recipes/knowledge_weaver/serve_executor.sh
#   then, for the run (same shell, so the curator's executor client sends the same key):
#   export KW_EXECUTOR_URL=http://127.0.0.1:30080/v1 CUDA_VISIBLE_DEVICES=0,1
# It listens on HOST (127.0.0.1: this machine only) unless told otherwise; a HOST other machines can reach
# needs KW_EXECUTOR_API_KEY, which vLLM then requires of every request.
set -euo pipefail
EXECUTOR_MODEL=${KW_EXECUTOR_MODEL:-Qwen/Qwen3.5-4B}  # the paper's executor (vLLM 0.27.1 registers Qwen3_5ForConditionalGeneration)
EXECUTOR_GPUS=${EXECUTOR_GPUS:-2,3,4,5,6,7}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-30080}
API_KEY=${KW_EXECUTOR_API_KEY:-}
case "$HOST" in
  127.*|localhost|::1) ;;
  *)
    if [ -z "$API_KEY" ]; then
      echo "error: HOST=$HOST serves the executor beyond this machine without a key; set KW_EXECUTOR_API_KEY" \
        "(the run's executor client sends the same variable) or leave HOST at 127.0.0.1" >&2
      exit 2
    fi ;;
esac
KEY_ARGS=()
if [ -n "$API_KEY" ]; then KEY_ARGS=(--api-key "$API_KEY"); fi
DP=$(awk -F, '{print NF}' <<<"$EXECUTOR_GPUS")
CUDA_VISIBLE_DEVICES=$EXECUTOR_GPUS exec vllm serve "$EXECUTOR_MODEL" --host "$HOST" --port "$PORT" \
  "${KEY_ARGS[@]+"${KEY_ARGS[@]}"}" \
  --data-parallel-size "$DP" --enable-prefix-caching --served-model-name "$EXECUTOR_MODEL"
