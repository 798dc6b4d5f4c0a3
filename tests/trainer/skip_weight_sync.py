"""A deliberately broken weight sync, for the test that shows the sync check fails without one.

Loaded in every Ray process of a test run through ``VERL_USE_EXTERNAL_MODULES`` (after the CPU
backend): verl's vLLM ``ServerAdapter.update_weights`` reads the trainer's weights and drops them, so
the rollout server keeps generating with the initial weights while the actor trains.
"""

from skl_verl.trainer.cpu_backend import patch_when_imported


def _drop_weights(vllm_rollout_module) -> None:
    async def update_weights(self, weights, global_steps=None, **kwargs):
        for _ in weights:  # drain: FSDP may gather shards collectively while the generator runs
            pass

    vllm_rollout_module.ServerAdapter.update_weights = update_weights


patch_when_imported("verl.workers.rollout.vllm_rollout.vllm_rollout", _drop_weights)
