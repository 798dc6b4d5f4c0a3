"""The registration API a recipe uses: estimators, policy losses, agent loops, step hooks and metrics.

A recipe is a module with a ``register()`` function that calls these (see docs/adding_a_recipe.md);
``skl_verl.recipes`` lists the built-in ones and loads external ones from the ``skl_verl.recipes``
entry-point group. Everything registered here reaches verl through verl's own registries
(``core_algos.register_adv_est`` / ``register_policy_loss``, the agent-loop registry); this module names
no recipe.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo import core_algos

from skl_verl.options import ConfigError, build_options, declared_options

RunCheck = Callable[[DictConfig, Any, Mapping[str, Any]], None]
"""``check(config, options, loop_entry)``: what an estimator needs from the rest of the run config
(its loop's entry: ``_target_`` and options), raising ``ConfigError`` naming the key."""


@dataclass(frozen=True)
class EstimatorSpec:
    name: str
    options: type | None
    """Dataclass of ``algorithm.<name>.*``, each field an option (``skl_verl.options``)."""
    required_fields: tuple[str, ...]
    """Per-sample fields the batch must carry (``skl_verl.rollout.sample_fields`` and the recipe's own)."""
    loop: type | None
    """The agent loop class (or a base) whose samples the estimator reads; None: any of ours."""
    run_check: RunCheck | None
    compares_rollouts: bool
    """Advantages compare the rollouts of one prompt (GRPO-like): ``rollout.n`` must be 2 or more."""
    metrics_prefix: str = ""
    """The metrics the estimator returns are logged as ``<metrics_prefix>/<key>`` (its name when not given)."""


ESTIMATORS: dict[str, EstimatorSpec] = {}
SAMPLE_FIELDS_ATTR = "wants_sample_fields"


def register_estimator(
    name: str,
    compute: Callable,
    *,
    options: type | None = None,
    required_fields: tuple[str, ...] = (),
    loop: type | None = None,
    run_check: RunCheck | None = None,
    compares_rollouts: bool = True,
    metrics_prefix: str | None = None,
) -> None:
    """Register ``compute(token_level_rewards, response_mask, sample_fields, options, **log_probs)`` as verl
    advantage estimator ``name``. ``options`` is an instance of the ``options`` dataclass built from
    ``algorithm.<name>``; ``log_probs`` are ``old_log_probs``/``ref_log_probs``/``values`` and
    ``algorithm`` (the whole algorithm config), passed by ``compute_advantage``.

    ``compute`` returns ``(advantages, returns)``, or ``(advantages, returns, metrics)``: ``metrics`` a dict of
    numbers (its group sizes, a clipped fraction) that the ``skl_sync`` trainer logs with verl's step metrics as
    ``<metrics_prefix>/<key>`` (``metrics_prefix`` defaults to ``name``)."""
    if metrics_prefix is not None and (not metrics_prefix or metrics_prefix != metrics_prefix.strip("/")):
        raise ValueError(f"register_estimator({name!r}): metrics_prefix must be a non-empty name without leading or "
                         f"trailing '/', got {metrics_prefix!r}")
    spec = EstimatorSpec(name, options, tuple(required_fields), loop, run_check, compares_rollouts,
                         metrics_prefix or name)
    ESTIMATORS[name] = spec

    @functools.wraps(compute)
    def estimator(token_level_rewards, response_mask, config=None, index=None, sample_fields=None, **log_probs):
        require_fields(name, sample_fields, spec.required_fields)
        return compute(token_level_rewards, response_mask, sample_fields, estimator_options(config, name),
                       algorithm=config, **log_probs)

    setattr(estimator, SAMPLE_FIELDS_ATTR, True)
    core_algos.ADV_ESTIMATOR_REGISTRY.pop(name, None)  # re-registration (a second register()) replaces it
    core_algos.register_adv_est(name)(estimator)


def estimator_result(name: str, result: Any) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """A registered estimator's return, ``(advantages, returns)`` or ``(advantages, returns, metrics)``, as
    ``(advantages, returns, metrics)`` with each metric a float keyed ``<metrics_prefix>/<key>``."""
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise TypeError(f"estimator {name!r} must return (advantages, returns) or (advantages, returns, metrics), "
                        f"got {type(result).__name__}{f' of {len(result)}' if isinstance(result, tuple) else ''}")
    advantages, returns, extra = (*result, {}) if len(result) == 2 else result
    if not isinstance(extra, Mapping):
        raise TypeError(f"estimator {name!r}: its third return value must be a dict of metrics, got {type(extra).__name__}")
    prefix = ESTIMATORS[name].metrics_prefix if name in ESTIMATORS else name
    metrics = {}
    for key, value in extra.items():
        try:
            number = float(value.item() if hasattr(value, "item") else value)
        except (TypeError, ValueError):
            raise TypeError(f"estimator {name!r}: metric {key!r} must be one number (a float, int or one-element "
                            f"tensor), got {value!r}") from None
        metrics[f"{prefix}/{key}"] = number
    return advantages, returns, metrics


def estimator_options(algorithm_config: Any, name: str) -> Any:
    """``algorithm.<name>`` checked and built into the estimator's options dataclass (None without one)."""
    spec = ESTIMATORS[name]
    section = None
    if algorithm_config is not None:
        getter = getattr(algorithm_config, "get", None)
        section = getter(name) if getter else getattr(algorithm_config, name, None)
    if isinstance(section, DictConfig):
        section = OmegaConf.to_container(section, resolve=True)
    elif section is not None and not isinstance(section, Mapping):
        section = dict(vars(section))
    if section is not None and not isinstance(section, Mapping):
        raise ConfigError(f"algorithm.{name} must be a mapping of options, got {section!r}")
    if spec.options is None:
        if section:
            raise ConfigError(f"algorithm.{name} takes no options, got {sorted(section)}")
        return None
    return build_options(spec.options, f"algorithm.{name}", section)


def with_declared_options(overrides: list[str]) -> list[str]:
    """Hydra overrides with every ``algorithm.<estimator>.<option>=value`` of a registered estimator's declared
    option turned into ``++...`` (add or override): a config states only the options it changes, so most
    declared options are not in the composed config, and a user still sets any of them as a plain override.
    Likewise ``skl.loop.<option>=value`` and ``skl.val_loop.<option>=value`` (the selected loops' options, checked
    once the config is composed: ``loop_checks.apply_loop_overrides``)."""
    from skl_verl.trainer.loop_checks import LOOP_SECTIONS

    rewritten = []
    for override in overrides:
        key, equals, _ = override.partition("=")
        parts = key.split(".")
        if equals and len(parts) == 3 and parts[0] == "algorithm" and parts[1] in ESTIMATORS:
            options = ESTIMATORS[parts[1]].options
            if options is not None and parts[2] in declared_options(options):
                override = "++" + override
        elif equals and len(parts) >= 3 and parts[0] == "skl" and parts[1] in LOOP_SECTIONS:
            override = "++" + override
        rewritten.append(override)
    return rewritten


def require_fields(name: str, sample_fields: dict[str, np.ndarray] | None, keys: tuple[str, ...]) -> None:
    if sample_fields is None:
        raise ValueError(
            f"advantage estimator {name!r} needs per-sample fields {keys}; verl's own compute_advantage does "
            "not pass them. Train with skl_verl.main (trainer.v1.trainer_mode=skl_sync) or call "
            "skl_verl.trainer.estimators.compute_advantage."
        )
    missing = [k for k in keys if k not in sample_fields]
    if missing:
        raise ValueError(f"estimator {name!r}: batch lacks per-sample fields {missing}; use an skl_verl agent loop")


POLICY_LOSS_CHECKS: dict[str, Callable[[Any], None]] = {}
"""Config checks of registered policy losses, run before any worker starts when the run selects that loss."""


def register_policy_loss(name: str, fn: Callable, config_check: Callable[[Any], None] | None = None) -> None:
    """A policy loss with verl's signature, as ``actor_rollout_ref.actor.policy_loss.loss_mode=<name>``;
    ``config_check(actor_config)`` raises ``ConfigError`` for actor settings the loss cannot run with."""
    core_algos.POLICY_LOSS_REGISTRY.pop(name, None)
    core_algos.register_policy_loss(name)(fn)
    POLICY_LOSS_CHECKS.pop(name, None)
    if config_check is not None:
        POLICY_LOSS_CHECKS[name] = config_check


TERM_WEIGHT_FNS: dict[str, Callable[..., torch.Tensor]] = {}
"""Policy losses that need a per-token tensor verl does not pass them (see ``register_term_weights``)."""


def register_term_weights(loss_mode: str, fn: Callable) -> None:
    """``fn(sample_fields, response_mask, is_weights) -> rollout_is_weights`` for policy loss ``loss_mode``.
    verl 0.9.1 hands a policy loss only log-probs, advantages, the response mask and ``rollout_is_weights``;
    a loss that needs more per-token data has it encoded there: the ``skl_sync`` trainer calls ``fn`` after
    the advantage step when the run's ``policy_loss.loss_mode`` is ``loss_mode`` (``is_weights``: verl's
    rollout-correction weights, or None)."""
    TERM_WEIGHT_FNS[loss_mode] = fn


AGENT_LOOPS: dict[str, dict[str, Any]] = {}
"""Every registered agent loop by name: ``{"_target_": class path, **options}``."""


def register_agent_loops(path: str | Path) -> None:
    """The agent loops of a YAML list (``- name: ..., _target_: ..., <options>``), each option checked against
    the loop class's declaration; also put into verl's agent-loop registry of this process, which is where
    verl's agent-loop workers look a dataset row's ``agent_name`` up (every Ray process registers the
    recipes through ``worker_process_setup_hook``). A run's ``rollout.agent.agent_loop_config_path``
    adds or replaces entries, as verl does."""
    from skl_verl.trainer.loop_checks import check_loop_entry

    for index, entry in enumerate(OmegaConf.to_container(OmegaConf.load(path), resolve=True)):
        name = entry.pop("name", None)
        if not name or "_target_" not in entry:
            raise ConfigError(f"{path}: agent loop #{index} needs a name and a _target_")
        check_loop_entry(f"{path}: agent loop {name!r}", entry)
        AGENT_LOOPS[name] = entry
        _agent_loop_registry[name] = dict(entry)


def restore_agent_loops() -> None:
    """Put every registered loop back into this process's agent-loop registry: verl's worker overwrites
    entries there with a run's ``agent_loop_config_path`` file, which would otherwise outlive that run in
    a process that plays several (in-process rollouts)."""
    for name, entry in AGENT_LOOPS.items():
        _agent_loop_registry[name] = dict(entry)


def agent_loop_entries(config_path: str | None = None) -> dict[str, dict[str, Any]]:
    """The registered loops, with those of a run's ``agent_loop_config_path`` added or replacing them."""
    entries = {name: dict(entry) for name, entry in AGENT_LOOPS.items()}
    if config_path:
        key = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
        if not os.path.isfile(config_path):
            raise ConfigError(f"{key}={config_path}: no such file; give a YAML list of agent-loop entries, e.g. "
                              "a copy of a recipe package's agent_loops.yaml")
        loaded = OmegaConf.to_container(OmegaConf.load(config_path), resolve=True)
        if not isinstance(loaded, list) or not all(isinstance(e, dict) and e.get("name") for e in loaded):
            raise ConfigError(f"{key}={config_path}: the file must be a YAML list of agent-loop entries, each a mapping "
                              "with a name and a _target_, e.g. '- name: my_loop', not a "
                              f"{type(loaded).__name__}")
        for entry in loaded:
            entry = dict(entry)
            entries[entry.pop("name")] = entry
    return entries


StepHook = Callable[[DataProto, Any, int], dict[str, float]]
STEP_HOOKS: dict[str, StepHook] = {}


def register_step_hook(name: str, fn: StepHook) -> None:
    """Work a recipe does on the driver once a step's rollouts are scored, before the next step's rollouts:
    ``fn(rows, config, global_step) -> metrics``, which decides from ``config`` whether the run is its
    recipe's (and returns ``{}`` when not). verl 0.9.1's trainer has no such hook; the ``skl_sync`` trainer
    runs every registered hook right after its advantage step with the step's live rows."""
    STEP_HOOKS[name] = fn


def run_step_hooks(rows: DataProto, config: Any, global_step: int) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for fn in STEP_HOOKS.values():
        metrics.update(fn(rows, config, global_step))
    return metrics


PROPAGATED_ENV_VARS: list[str] = []
"""Environment variables of the launching shell a recipe's Ray processes must see (see ``register_env_vars``)."""


def register_env_vars(*names: str) -> None:
    """Environment variables a recipe reads in Ray's processes (its loops, its envs): ``skl_verl.main`` copies
    them from the launching shell into Ray's runtime environment."""
    PROPAGATED_ENV_VARS.extend(name for name in names if name not in PROPAGATED_ENV_VARS)


EpisodeMetrics = Callable[[Mapping[str, np.ndarray]], dict[str, float]]
EPISODE_METRICS: dict[str, EpisodeMetrics] = {}


def register_episode_metrics(name: str, fn: EpisodeMetrics) -> None:
    """``fn(fields) -> metrics`` over a step's per-sample fields (one row per episode in step mode), for the
    fields a recipe's loops attach; returns ``{}`` when the batch has none of them."""
    EPISODE_METRICS[name] = fn
