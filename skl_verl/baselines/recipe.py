"""Registers the baselines: estimators ``skl_grpo``, ``skl_rloo``, ``skl_gae``, ``gigpo`` and the loops of
``agent_loops.yaml``."""

from pathlib import Path

from skl_verl.trainer import registry
from skl_verl.trainer.estimators import (
    TRIAL_FIELDS,
    GroupNormOptions,
    RowCountOptions,
    check_critic,
    grouped_grpo_estimator,
    grouped_rloo_estimator,
    step_gae_estimator,
)
from skl_verl.rollout import sample_fields as sf
from skl_verl.trainer.gigpo import GIGPO_FIELDS, GigpoOptions, check_step_samples, gigpo_estimator


def register() -> None:
    registry.register_estimator("skl_grpo", grouped_grpo_estimator, options=GroupNormOptions, required_fields=TRIAL_FIELDS)
    registry.register_estimator("skl_rloo", grouped_rloo_estimator, options=RowCountOptions, required_fields=TRIAL_FIELDS)
    registry.register_estimator("skl_gae", step_gae_estimator, required_fields=(sf.TRAJECTORY_ID,), run_check=check_critic,
                                compares_rollouts=False)
    registry.register_estimator("gigpo", gigpo_estimator, options=GigpoOptions, required_fields=GIGPO_FIELDS,
                                run_check=check_step_samples)
    registry.register_agent_loops(Path(__file__).with_name("agent_loops.yaml"))
