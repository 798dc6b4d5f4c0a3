"""Registers SkillRise: estimator ``skillrise`` (Eqs. 6–7) for its solve/curate loop, estimator ``lamer``
(LaMer's own credit, for the LaMer baseline), the loops of ``agent_loops.yaml`` (SkillRise, the LaMer and
Pass@k baselines), the curate metrics, and ``vanilla_per_micro_batch``: verl's clipped policy loss with the
token-mean taken per micro-batch, as the authors' older verl aggregated it."""

from pathlib import Path

from verl.trainer.ppo import core_algos

from skl_verl.skillrise.credit import SkillRiseCreditOptions, skillrise_estimator
from skl_verl.skillrise.fields import curate_metrics
from skl_verl.skillrise.lamer_credit import LAMER_FIELDS, LamerCreditOptions, check_lamer_loop, lamer_estimator
from skl_verl.skillrise.loop import SkillRiseAgentLoop
from skl_verl.trainer import registry
from skl_verl.trainer.loss_aggregation import check_per_group_settings, per_group_token_mean
from skl_verl.trainer.estimators import TRIAL_FIELDS


def register() -> None:
    registry.register_estimator("skillrise", skillrise_estimator, options=SkillRiseCreditOptions,
                                required_fields=TRIAL_FIELDS, loop=SkillRiseAgentLoop)
    registry.register_estimator("lamer", lamer_estimator, options=LamerCreditOptions, required_fields=LAMER_FIELDS,
                                loop=SkillRiseAgentLoop, run_check=check_lamer_loop)
    registry.register_agent_loops(Path(__file__).with_name("agent_loops.yaml"))
    registry.register_episode_metrics("skillrise", curate_metrics)
    registry.register_policy_loss("vanilla_per_micro_batch", per_group_token_mean(core_algos.compute_policy_loss_vanilla),
                                  config_check=check_per_group_settings)
