"""Registers SkillRise: estimator ``skillrise`` (Eqs. 6–7) for its solve/curate loop, estimator ``lamer``
(LaMer's own credit, for the LaMer baseline), the loops of ``agent_loops.yaml`` (SkillRise, the LaMer and
Pass@k baselines), and the curate metrics."""

from pathlib import Path

from skl_verl.skillrise.credit import SkillRiseCreditOptions, skillrise_estimator
from skl_verl.skillrise.fields import curate_metrics
from skl_verl.skillrise.lamer_credit import LAMER_FIELDS, LamerCreditOptions, check_lamer_loop, lamer_estimator
from skl_verl.skillrise.loop import SkillRiseAgentLoop
from skl_verl.trainer import registry
from skl_verl.trainer.estimators import TRIAL_FIELDS


def register() -> None:
    registry.register_estimator("skillrise", skillrise_estimator, options=SkillRiseCreditOptions,
                                required_fields=TRIAL_FIELDS, loop=SkillRiseAgentLoop)
    registry.register_estimator("lamer", lamer_estimator, options=LamerCreditOptions, required_fields=LAMER_FIELDS,
                                loop=SkillRiseAgentLoop, run_check=check_lamer_loop)
    registry.register_agent_loops(Path(__file__).with_name("agent_loops.yaml"))
    registry.register_episode_metrics("skillrise", curate_metrics)
