"""skl-verl: verl recipes for agents that learn from experience (SkillRise, SKL, Knowledge Weaver).

``skl_verl.register()`` puts every recipe's estimators, losses and agent loops (``skl_verl.recipes``) and
our trainer into verl's registries; ``python -m skl_verl.main`` calls it, and Ray processes run it through
``worker_process_setup_hook``.
"""

SUPPORTED_VERL_VERSION = "0.9.1"


def register(with_trainer: bool = True) -> None:
    """Every recipe into this process's registries; with ``with_trainer`` also the ``skl_sync`` trainer
    (which pulls in Ray and TransferQueue). Idempotent."""
    from skl_verl.recipes import register_recipes

    register_recipes()
    if with_trainer:
        from skl_verl.trainer.sync_trainer import register_sync_trainer

        register_sync_trainer()


__all__ = ["SUPPORTED_VERL_VERSION", "register"]
