#!/usr/bin/env bash
# Knowledge Weaver on ALFWorld. Needs GPUs for the curator, the frozen executor served at
# $KW_EXECUTOR_URL (bash recipes/knowledge_weaver/serve_executor.sh on other GPUs), ALFWorld's data and
# the embedding model ($KW_EMBEDDING_MODEL, default sentence-transformers/all-mpnet-base-v2).
#   bash recipes/knowledge_weaver/run_alfworld.sh [--dry-run] [hydra overrides...]
#   CONFIG=kw_sr_alfworld bash recipes/knowledge_weaver/run_alfworld.sh      # SR only (the GRPO baseline)
#   CONFIG=kw_sr_mi_alfworld bash recipes/knowledge_weaver/run_alfworld.sh   # SR + MI ablation
ENV_NAME=alfworld
CONFIG=${CONFIG:-kw_alfworld}
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
export ALFWORLD_DATA=${ALFWORLD_DATA:-$HOME/.cache/alfworld}
build_kw
train
