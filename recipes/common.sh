# Shared by every recipe's run_*.sh: argument handling, dataset building, and the trainer launch.
# Set before sourcing: ENV_NAME, CONFIG, RECIPE_DIR; DEFAULT_MODEL. Every variable below can be
# overridden from the environment; extra arguments are hydra overrides; --dry-run prints the
# composed config without GPUs and builds no data.
set -euo pipefail
MODEL_PATH=${MODEL_PATH:-$DEFAULT_MODEL}
# N_GPUS and NNODES override trainer.n_gpus_per_node and trainer.nnodes only when set: unset, the config's
# own values stand (Knowledge Weaver trains its curator on 2 GPUs and serves the executor on the others;
# forcing 8 would put curator replicas on the executor's GPUs).
N_GPUS=${N_GPUS:-}
NNODES=${NNODES:-}
SEED=${SEED:-0}
export DATA_DIR=${DATA_DIR:-data/$(basename "$RECIPE_DIR")}
PYTHON=${PYTHON:-python}

# require_int NAME MIN EXAMPLE: stop, naming the variable, unless $NAME is a whole number >= MIN.
require_int() {
  local value=${!1}
  if ! [[ "$value" =~ ^[0-9]+$ ]] || (( 10#$value < $2 )); then
    echo "error: $1=$value must be a whole number >= $2, e.g. $1=$3" >&2
    exit 2
  fi
}
PLACEMENT=()
if [ -n "$N_GPUS" ]; then require_int N_GPUS 1 8; PLACEMENT+=(trainer.n_gpus_per_node="$N_GPUS"); fi
if [ -n "$NNODES" ]; then require_int NNODES 1 1; PLACEMENT+=(trainer.nnodes="$NNODES"); fi
require_int SEED 0 0

DRY_RUN=false
OVERRIDES=()
for arg in "$@"; do
  if [ "$arg" = "--dry-run" ]; then DRY_RUN=true; else OVERRIDES+=("$arg"); fi
done
# A dry run reads models only from the local cache: a hub id that is not cached is a warning at once,
# not a download (or a minute of retries on a machine without the internet).
if [ "$DRY_RUN" = true ]; then export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}; fi

# Data and servers the env needs (ALFWORLD_DATA, WEBSHOP_URL): errors in a real run, warnings in a
# dry run. Called by the first build or train step, after the run script has set its variables.
RESOURCES_CHECKED=false
check_resources() {
  if [ "$RESOURCES_CHECKED" = false ]; then
    RESOURCES_CHECKED=true
    local flags=()
    if [ "$DRY_RUN" = true ]; then flags=(--dry-run); fi
    "$PYTHON" -m skl_verl.trainer.config_checks --env "$ENV_NAME" "${flags[@]+"${flags[@]}"}"
  fi
}

# build_missing OUT COMMAND...: run COMMAND (which writes OUT) unless OUT exists, and note its arguments in
# OUT.build. An OUT noted with other arguments (another split, task set or seed: a DATA_DIR shared across
# settings) stops the run rather than training on it; an OUT without a note (built by hand, or before notes were
# kept) is reused with a warning. A dry run builds nothing and prints the command, shell-quoted, so the data a run
# would train on can be checked, and says whether an existing OUT matches it.
build_missing() {
  local out=$1
  shift
  local args
  args=$(printf ' %q' "${@:2}")  # the builder's arguments, not the interpreter's path
  local noted=""
  if [ -f "$out.build" ]; then noted=$(cat "$out.build"); fi
  if [ "$DRY_RUN" = true ]; then
    echo "dry run: would build $out unless it exists:$(printf ' %q' "$@")"
  elif [ ! -f "$out" ]; then
    "$@"
    if [ -f "$out" ]; then printf '%s\n' "$args" > "$out.build"; fi
    return
  fi
  if [ -f "$out" ] && [ -z "$noted" ]; then
    echo "warning: reusing $out, which has no $out.build note of how it was built; delete it to rebuild it as this run would" >&2
  elif [ -f "$out" ] && [ "$noted" != "$args" ]; then
    echo "error: $out was built with other arguments:$noted" >&2
    echo "  this run builds it with:$args" >&2
    echo "  delete $out and $out.build, or set DATA_DIR to another folder" >&2
    if [ "$DRY_RUN" != true ]; then exit 2; fi
  fi
}

# build_tasks NAME ENV_KWARGS_JSON [VAL_AGENT_LOOP] -> $DATA_DIR/NAME.parquet (one row per task).
# Rows name no loop (the config's default_agent_loop plays them) unless VAL_AGENT_LOOP is given for a
# validation set played by the config's skl.val_agent_loop.
build_tasks() {
  check_resources
  local out="$DATA_DIR/$1.parquet"
  build_missing "$out" "$PYTHON" -m skl_verl.rollout.data --env "$ENV_NAME" --env-kwargs "$2" ${3:+--agent-loop "$3"} --out "$out"
}

# build_train_val TRAIN VAL VAL_AGENT_LOOP SUFFIX TRAIN_KWARGS VAL_KWARGS: the training and validation task files
# $DATA_DIR/TRAIN$SUFFIX.parquet and VAL$SUFFIX.parquet (build_tasks). A SUFFIX names a data setting other than the
# recipe's default, whose files the configs name: the run is pointed at the suffixed ones (overrides given on the
# command line come after, so they still win), and both settings' files can live in one DATA_DIR.
build_train_val() {
  build_tasks "$1$4" "$5"
  build_tasks "$2$4" "$6" "$3"
  if [ -n "$4" ]; then
    OVERRIDES=(data.train_files="$DATA_DIR/$1$4.parquet" data.val_files="$DATA_DIR/$2$4.parquet"
               "${OVERRIDES[@]+"${OVERRIDES[@]}"}")
  fi
}

train() {
  check_resources
  "$PYTHON" -m skl_verl.main --config-path="$RECIPE_DIR/config" --config-name="$CONFIG" \
    actor_rollout_ref.model.path="$MODEL_PATH" "${PLACEMENT[@]+"${PLACEMENT[@]}"}" \
    skl.dry_run="$DRY_RUN" "${OVERRIDES[@]+"${OVERRIDES[@]}"}"
}
