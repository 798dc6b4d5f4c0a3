"""``register()``: every skl-verl piece into verl's registries, in this process (idempotent).

Importing a paper package registers its estimators and losses (``core_algos.register_adv_est`` /
``register_policy_loss``) and its agent loops (``agent_loop.register``); this is the one place that
imports every paper package. Ray processes run it through ``runtime_env.worker_process_setup_hook``
(set by ``skl_verl.trainer.entry``). Ray's agent-loop workers instantiate loops by name from
``AGENT_LOOP_CONFIG``, which holds every loop's options.
"""

from __future__ import annotations

from pathlib import Path

AGENT_LOOP_CONFIG = str(Path(__file__).resolve().parents[1] / "config" / "agent_loops.yaml")

_TRAINER_REGISTERED = False


def register(with_trainer: bool = True) -> None:
    """Estimators, policy losses, distillation losses and agent loops; with ``with_trainer`` also the
    ``skl_sync`` trainer (which pulls in Ray and TransferQueue)."""
    global _TRAINER_REGISTERED
    import skl_verl.knowledge_weaver.credit  # noqa: F401  (estimator knowledge_weaver)
    import skl_verl.knowledge_weaver.hook  # noqa: F401  (step hook: bank admission)
    import skl_verl.knowledge_weaver.loop  # noqa: F401  (kw_curator)
    import skl_verl.rollout.env_loop  # noqa: F401  (skl_env)
    import skl_verl.rollout.stateful_loop  # noqa: F401  (skl_stateful)
    import skl_verl.skillrise.credit  # noqa: F401  (estimator skillrise)
    import skl_verl.skillrise.loop  # noqa: F401  (skillrise)
    import skl_verl.skl.losses  # noqa: F401  (estimators skl_sd, skl_rl; loss skl_weighted_nll)
    import skl_verl.skl.rl_loop  # noqa: F401
    import skl_verl.skl.sd_loop  # noqa: F401
    import skl_verl.trainer.estimators  # noqa: F401  (estimator skl_grpo)
    import skl_verl.trainer.gigpo  # noqa: F401  (estimator gigpo)
    if with_trainer and not _TRAINER_REGISTERED:
        from skl_verl.trainer.sync_trainer import register_sync_trainer

        register_sync_trainer()
        _TRAINER_REGISTERED = True
