"""GPU entry point: verl's own PPO trainer (v1, FSDP + vLLM) with skl-verl registered.

    python -m skl_verl.main --config-path=$PWD/recipes/skillrise/config --config-name=skillrise_alfworld \\
        actor_rollout_ref.model.path=Qwen/Qwen3-4B trainer.n_gpus_per_node=8 [skl.dry_run=true]

What it adds to ``verl.trainer.main_ppo``: registration in this process and, through Ray's
``worker_process_setup_hook``, in every Ray process; the ``skl_sync`` trainer when an estimator
needs per-sample fields; our agent-loop YAML; and config checks with clear messages.
``skl.dry_run=true`` composes, checks and prints the config without starting Ray or GPUs.
"""

from __future__ import annotations

import os

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

import skl_verl
from skl_verl.verl_glue import AGENT_LOOP_CONFIG, SAMPLE_FIELDS_ATTR


class ConfigError(ValueError):
    """A recipe config that cannot train; the message says which key and why."""


def prepare_config(config: DictConfig) -> DictConfig:
    """Fill in what every skl-verl run needs and check what a typo would silently break."""
    from verl.trainer.ppo import core_algos

    skl_verl.register(with_trainer=False)
    rollout = config.actor_rollout_ref.rollout
    with open_dict(config):
        if not rollout.agent.get("agent_loop_config_path"):
            rollout.agent.agent_loop_config_path = AGENT_LOOP_CONFIG
        runtime_env = config.ray_kwargs.ray_init.runtime_env
        runtime_env.worker_process_setup_hook = "skl_verl.register"
        env_vars = runtime_env.get("env_vars") or {}
        for name in ("ALFWORLD_DATA", "WEBSHOP_URL", "WEBSHOP_GOALS_FILE", "STOCKFISH_PATH"):
            if name in os.environ:
                env_vars[name] = os.environ[name]
        runtime_env.env_vars = env_vars
        config.trainer.use_v1 = True

    estimator = config.algorithm.adv_estimator
    if estimator not in core_algos.ADV_ESTIMATOR_REGISTRY:
        raise ConfigError(
            f"algorithm.adv_estimator={estimator!r} is not registered; known: {sorted(core_algos.ADV_ESTIMATOR_REGISTRY)}"
        )
    needs_fields = getattr(core_algos.ADV_ESTIMATOR_REGISTRY[estimator], SAMPLE_FIELDS_ATTR, False)
    if needs_fields:
        mode = config.trainer.v1.trainer_mode
        if mode not in ("sync", "skl_sync"):
            raise ConfigError(f"estimator {estimator!r} needs trainer.v1.trainer_mode=skl_sync, got {mode!r}")
        with open_dict(config):
            config.trainer.v1.trainer_mode = "skl_sync"

    loss_mode = config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
    if loss_mode not in core_algos.POLICY_LOSS_REGISTRY:
        raise ConfigError(
            f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode!r} is not registered; "
            f"known: {sorted(core_algos.POLICY_LOSS_REGISTRY)}"
        )
    loops = {entry.name for entry in OmegaConf.load(rollout.agent.agent_loop_config_path)}
    default_loop = rollout.agent.default_agent_loop
    if default_loop not in loops:
        raise ConfigError(
            f"actor_rollout_ref.rollout.agent.default_agent_loop={default_loop!r} is not in "
            f"{rollout.agent.agent_loop_config_path} (known: {sorted(loops)})"
        )
    required_loop = {"skillrise": "skillrise", "skl_sd": "skl_sd", "skl_rl": "skl_rl"}.get(estimator)
    if required_loop and not str(default_loop).startswith(required_loop):
        raise ConfigError(
            f"algorithm.adv_estimator={estimator} needs a {required_loop} agent loop "
            f"(actor_rollout_ref.rollout.agent.default_agent_loop), got {default_loop!r}"
        )
    from skl_verl.config_checks import check_config

    check_config(config)
    return config


def check_data_files(config: DictConfig) -> list[str]:
    """Missing dataset files, as messages (a dry run reports them; a real run refuses to start)."""
    problems = []
    for key in ("train_files", "val_files"):
        files = config.data.get(key)
        for path in [files] if isinstance(files, str) else list(files or []):
            if not os.path.exists(path):
                problems.append(f"data.{key}: {path} does not exist (build it with the recipe's dataset command)")
    return problems


@hydra.main(config_path=None, config_name=None, version_base=None)
def main(config: DictConfig) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    config = prepare_config(config)
    problems = check_data_files(config)
    # verl's own checks (batch sizes vs GPUs, micro/mini batch divisibility) need no GPU to run.
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    if config.get("skl", {}).get("dry_run", False):
        print(OmegaConf.to_yaml(config))
        for problem in problems:
            print(f"warning: {problem}")
        print("dry run: config composed and checked; not starting Ray.")
        return
    if problems:
        raise ConfigError("; ".join(problems))
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    run_ppo(config, task_runner_class=TaskRunnerV1)


if __name__ == "__main__":
    main()
