"""End-to-end RL on CPU with verl's own parts, for machines without GPUs (tests, quickstart).

What runs is verl's: the hydra ``ppo_trainer`` config, ``RLHFDataset`` + ``collate_fn``,
``AgentLoopWorker`` (driving our agent loops, postprocessing into a ``DataProto``),
``compute_advantage`` / registered estimators, ``ActorRolloutRefWorker(role="actor")`` with the
FSDP2 engine and ``ppo_loss`` for old log-probs and the policy update, ``compute_data_metrics``
and ``Tracking`` for logging. What is ours: the CPU platform and the HF generation client that
stand in for vLLM/SGLang (skl_verl.cpu_backend), and this driver loop in place of Ray + the
TransferQueue trainer, which need GPUs.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from skl_verl.cpu_backend import HFGenerationClient, enable_cpu_platform, init_single_process_group

# Settings that make verl's engine run on CPU: fsdp2 (FSDP1 insists on GPU module sync), sdpa
# attention (no flash-attn), fp32 (no bf16 autocast), no torch.compile, no dynamic batching.
CPU_OVERRIDES = [
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.actor.use_dynamic_bsz=False",
    "actor_rollout_ref.actor.use_torch_compile=False",
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.rollout.agent.default_agent_loop=skl_env",
    "trainer.device=cpu",
    "trainer.logger=[console]",
]


def pad_to_multiple(data, multiple: int):
    """Append copies of the first sample with an all-zero response mask until ``len(data)``
    divides by ``multiple`` (verl's micro/mini batching needs it). Like verl v1's synthetic padding
    samples, they contribute no token to any loss (callers give them zero advantages)."""
    from verl import DataProto

    missing = -len(data) % multiple
    if missing == 0:
        return data
    pad = data.select_idxs([0] * missing)
    pad.batch["response_mask"] = torch.zeros_like(pad.batch["response_mask"])
    return DataProto.concat([data, pad])


@functools.cache
def multi_output_agent_loop_worker():
    """verl's in-process ``AgentLoopWorker`` (v0 path) expects one output per loop run; verl's v1
    TransferQueue worker already accepts a list (SkillRise returns one sample per phase). This
    subclass gives the CPU path the v1 behaviour: each output is postprocessed by verl's own code
    and the prompt's non-tensor fields are repeated for every output of that prompt."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopWorker,
        DictConfigWrap,
        ToolListWrap,
        _agent_loop_registry,
    )

    class MultiOutputAgentLoopWorker(AgentLoopWorker):
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

    from skl_verl.verl_glue import AGENT_LOOP_CONFIG

    GlobalHydra.instance().clear()
    loops = [f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOP_CONFIG}"]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=CPU_OVERRIDES + loops + list(overrides or []))


class AgentRollout:
    """verl's ``AgentLoopWorker`` in this process over any client with verl's ``generate``
    interface (the HF stand-in, or an OpenAI-compatible server), plus the dataset it plays."""

    def __init__(self, config: DictConfig, client: Any, tokenizer: Any, data_files: Any):
        from verl.utils.dataset.rl_dataset import RLHFDataset

        import skl_verl

        skl_verl.register(with_trainer=False)
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
        return asyncio.run(self.worker.generate_sequences(prompts))


class CPUTrainer:
    """One process: rollout with the HF client, update with verl's FSDP2 actor, sync weights."""

    def __init__(self, config: DictConfig, max_new_tokens_per_turn: int = 32):
        enable_cpu_platform()
        init_single_process_group()
        import skl_verl

        skl_verl.register(with_trainer=False)
        from transformers import AutoModelForCausalLM
        from verl.utils.tracking import Tracking
        from verl.workers.engine_workers import ActorRolloutRefWorker

        self.config = config
        self.n = int(config.actor_rollout_ref.rollout.n)
        actor_cfg = config.actor_rollout_ref.actor
        mini, micro = int(actor_cfg.ppo_mini_batch_size) * self.n, int(actor_cfg.ppo_micro_batch_size_per_gpu)
        if mini % micro:
            raise ValueError(
                f"ppo_mini_batch_size * rollout.n = {mini} samples is not a multiple of "
                f"actor.ppo_micro_batch_size_per_gpu = {micro}"
            )
        self.actor = ActorRolloutRefWorker(config=config.actor_rollout_ref, role="actor")
        self.actor.init_model()
        self.tokenizer = self.actor.actor.model_config.tokenizer
        self.rollout_model = AutoModelForCausalLM.from_pretrained(config.actor_rollout_ref.model.path)
        self.sync_rollout_weights()
        self.client = HFGenerationClient(
            self.rollout_model, self.tokenizer, max_new_tokens=max_new_tokens_per_turn, seed=int(config.data.get("seed") or 0)
        )
        self.rollouter = AgentRollout(config, self.client, self.tokenizer, config.data.train_files)
        self.tracking = Tracking(
            project_name=config.trainer.project_name,
            experiment_name=config.trainer.experiment_name,
            default_backend=list(config.trainer.logger),
            config=OmegaConf.to_container(config, resolve=False),
        )
        self.global_step = 0

    def sync_rollout_weights(self) -> None:
        """Copy the trained FSDP2 weights into the rollout model (verl's weight sync, by hand)."""
        state = {}
        for name, tensor in self.actor.actor.engine.module.state_dict().items():
            state[name] = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        self.rollout_model.load_state_dict(state)

    def batches(self):
        return self.rollouter.batches(int(self.config.data.train_batch_size), seed=int(self.config.data.get("seed") or 0))

    def rollout(self, batch_dict: dict[str, Any]):
        return self.rollouter.rollout(batch_dict, step=self.global_step, n=self.n)

    def _actor_input(self, data, **fields):
        from tensordict import TensorDict
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import left_right_2_no_padding

        keys = ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask")
        td = TensorDict({k: data.batch[k] for k in keys} | fields, batch_size=[len(data)])
        td = left_right_2_no_padding(td)
        tu.assign_non_tensor(
            td, temperature=float(self.config.actor_rollout_ref.rollout.temperature), pad_token_id=self.tokenizer.pad_token_id
        )
        return td

    def train_step(self, data) -> dict[str, float]:
        from verl.trainer.ppo.metric_utils import compute_data_metrics
        from verl.utils import tensordict_utils as tu
        from verl.utils.metric import reduce_metrics
        from verl.workers.utils.padding import no_padding_2_padding

        from skl_verl.verl_glue import compute_advantage, episode_metrics, loss_term_metrics, set_token_level_scores

        timing: dict[str, float] = {}
        set_token_level_scores(data)
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]

        actor_cfg = self.config.actor_rollout_ref.actor
        mini_batch_size = int(actor_cfg.ppo_mini_batch_size) * self.n
        micro = (
            int(actor_cfg.ppo_micro_batch_size_per_gpu),
            int(self.config.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu),
        )
        padded = pad_to_multiple(data, math.lcm(mini_batch_size, *micro))

        # Old log-probs first, as in verl's trainer: some estimators (SKL-RL's reverse KL) read them.
        start = time.perf_counter()
        td = self._actor_input(padded)
        tu.assign_non_tensor(td, calculate_entropy=True, compute_loss=False)
        out = self.actor.compute_log_prob(td)
        padded.batch["old_log_probs"] = no_padding_2_padding(tu.get(out, "log_probs"), td).float()
        timing["timing_s/old_log_prob"] = time.perf_counter() - start
        data.batch["old_log_probs"] = padded.batch["old_log_probs"][: len(data)]

        data = compute_advantage(data, self.config.algorithm)
        advantages = torch.zeros_like(padded.batch["old_log_probs"])
        advantages[: len(data)] = data.batch["advantages"]
        padded.batch["advantages"] = advantages
        terms = loss_term_metrics(data)

        start = time.perf_counter()
        td = self._actor_input(padded, old_log_probs=padded.batch["old_log_probs"], advantages=padded.batch["advantages"])
        tu.assign_non_tensor(
            td,
            calculate_entropy=False,
            distillation_use_topk=False,
            distillation_only=False,
            global_batch_size=len(padded),
            mini_batch_size=mini_batch_size,
            epochs=int(actor_cfg.ppo_epochs),
            seed=int(actor_cfg.data_loader_seed or 0),
            dataloader_kwargs={"shuffle": bool(actor_cfg.shuffle)},
            compute_loss=True,
        )
        actor_metrics = tu.get(self.actor.update_actor(td), "metrics")
        timing["timing_s/update_actor"] = time.perf_counter() - start
        self.sync_rollout_weights()

        metrics = compute_data_metrics(data, use_critic=False)
        metrics.update(episode_metrics(data.non_tensor_batch))
        metrics.update({k if k.startswith("actor/") else f"actor/{k}": v for k, v in reduce_metrics(actor_metrics).items()})
        metrics.update(terms)
        metrics.update(timing)
        metrics["training/num_samples"] = len(data)
        metrics["training/num_padding_samples"] = len(padded) - len(data)
        return metrics

    def fit(self, total_steps: int) -> list[dict[str, float]]:
        history = []
        while self.global_step < total_steps:
            for batch_dict in self.batches():
                if self.global_step >= total_steps:
                    break
                self.global_step += 1
                start = time.perf_counter()
                data = self.rollout(batch_dict)
                rollout_s = time.perf_counter() - start
                metrics = self.train_step(data)
                metrics["timing_s/gen"] = rollout_s
                metrics["training/global_step"] = self.global_step
                self.tracking.log(data=metrics, step=self.global_step)
                history.append(metrics)
        return history
