"""Agent loops in this process, without Ray or a trainer: evaluation of a checkpoint, and loop tests.

``AgentRollout`` drives verl's own ``AgentLoopWorker`` (dataset, collation, our loops, verl's
postprocessing into a ``DataProto``) over any client with verl's ``generate`` interface: the
``HFGenerationClient`` stand-in, an OpenAI-compatible server, or a scripted policy in tests. Training
always goes through verl's trainer (``python -m skl_verl.main``); this module trains nothing.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import numpy as np
from omegaconf import DictConfig

# The agent-loop worker only needs a composed config; these keep it from asking for GPU pieces.
ROLLOUT_OVERRIDES = [
    "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.rollout.agent.default_agent_loop=skl_env",
    "trainer.device=cpu",
]


@functools.cache
def multi_output_agent_loop_worker():
    """verl's in-process ``AgentLoopWorker`` (v0 path) expects one output per loop run; verl's v1
    TransferQueue worker already accepts a list (a loop may return one sample per phase or step). This
    subclass gives the CPU path the v1 behaviour: each output is postprocessed by verl's own code
    and the prompt's non-tensor fields are repeated for every output of that prompt."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopWorker,
        DictConfigWrap,
        ToolListWrap,
        _agent_loop_registry,
    )

    from skl_verl.trainer.registry import restore_agent_loops

    class MultiOutputAgentLoopWorker(AgentLoopWorker):
        def __init__(self, *args, **kwargs):
            restore_agent_loops()  # a previous worker's agent_loop_config_path must not leak into this one
            super().__init__(*args, **kwargs)

        async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
            if agent_name not in _agent_loop_registry:
                raise ValueError(f"agent loop {agent_name!r} is not registered; known: {sorted(_agent_loop_registry)}")
            loop = hydra.utils.instantiate(
                config=_agent_loop_registry[agent_name],
                trainer_config=DictConfigWrap(config=self.config),
                server_manager=self.llm_client,
                tokenizer=self.tokenizer,
                processor=self.processor,
                hf_model_type=self.hf_model_type,
                dataset_cls=self.dataset_cls,
                data_config=DictConfigWrap(self.config.data),
                tools=ToolListWrap(self.tools),
            )
            output = await loop.run(sampling_params, **kwargs)
            outputs = output if isinstance(output, list) else [output]
            if not outputs:
                raise ValueError(f"agent loop {agent_name!r} returned no output")
            for other in outputs[:-1]:  # as verl's v1 worker does
                other.extra_fields["reward_extra_info"] = outputs[-1].extra_fields["reward_extra_info"]
            return [await self._agent_loop_postprocess(o, trajectory["validate"], **kwargs) for o in outputs]

        def _postprocess(self, inputs, input_non_tensor_batch=None, validate=False):
            counts = [len(group) for group in inputs]
            flat = [output for group in inputs for output in group]
            if input_non_tensor_batch:
                input_non_tensor_batch = {k: np.repeat(v, counts, axis=0) for k, v in input_non_tensor_batch.items()}
            return super()._postprocess(flat, input_non_tensor_batch=input_non_tensor_batch, validate=validate)

    return MultiOutputAgentLoopWorker


def compose_config(overrides: list[str] | None = None) -> DictConfig:
    """verl's own ``ppo_trainer`` config with the CPU settings, then the caller's overrides."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=ROLLOUT_OVERRIDES + list(overrides or []))


class AgentRollout:
    """verl's ``AgentLoopWorker`` in this process over any client with verl's ``generate``
    interface (the HF stand-in, or an OpenAI-compatible server), plus the dataset it plays."""

    def __init__(self, config: DictConfig, client: Any, tokenizer: Any, data_files: Any):
        from verl.utils.dataset.rl_dataset import RLHFDataset

        self.config = config
        self.worker = multi_output_agent_loop_worker()(config, llm_client=client)
        self.dataset = RLHFDataset(data_files=data_files, tokenizer=tokenizer, config=config.data, processor=None)

    def batches(self, batch_size: int, seed: int = 0, shuffle: bool = True, drop_last: bool = True):
        from verl.utils.dataset.rl_dataset import collate_fn

        if drop_last and batch_size > len(self.dataset):
            raise ValueError(f"data.train_batch_size={batch_size} exceeds the {len(self.dataset)} rows of the train set")
        order = np.random.default_rng(seed).permutation(len(self.dataset)) if shuffle else np.arange(len(self.dataset))
        stop = len(order) - batch_size + 1 if drop_last else len(order)
        for start in range(0, stop, batch_size):
            yield collate_fn([self.dataset[int(i)] for i in order[start : start + batch_size]])

    def rollout(self, batch_dict: dict[str, Any], step: int, n: int, validate: bool = False):
        """Play every row ``n`` times (sessions 0..n-1); returns verl's postprocessed ``DataProto``."""
        from verl import DataProto

        prompts = DataProto.from_single_dict(batch_dict)
        # Deterministic ids: with the client's per-request seeding a run replays exactly.
        uids = [f"step{step}-{i}" for i in range(len(prompts))]
        prompts.non_tensor_batch["uid"] = np.array(uids, dtype=object)
        prompts = prompts.repeat(repeat_times=n, interleave=True)
        prompts.non_tensor_batch["session_id"] = np.tile(np.arange(n), len(prompts) // n)
        prompts.meta_info.update(global_steps=step, validate=validate)
        # verl's TransferQueue worker hands each loop its row's columns, ``global_steps`` among them.
        prompts.non_tensor_batch["global_steps"] = np.full(len(prompts), step, dtype=object)
        return asyncio.run(self.worker.generate_sequences(prompts))
