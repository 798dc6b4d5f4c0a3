"""CPU stand-ins that let verl's real trainer (``python -m skl_verl.main``) run without GPUs.

verl 0.9.1 ships no CPU platform and no CPU rollout server. This module adds both through verl's
own extension points, never by editing verl:

- a ``cpu`` platform in ``verl.plugin.platform.PlatformRegistry`` (gloo, no device memory calls);
- rollout name ``hf``: ``HFRolloutReplica`` (``RolloutReplicaRegistry``) launches one Ray actor,
  ``HFRolloutServer``, that serves verl's token-in/token-out ``generate`` with a Hugging Face
  model, and ``HFServerAdapter`` (the hybrid-engine side inside ``ActorRolloutRefWorker``, looked
  up in ``verl.workers.rollout.base._ROLLOUT_REGISTRY``) pushes the FSDP weights to it on
  ``update_weights``, as vLLM's adapter does;
- critics (PPO) loaded with sdpa attention instead of verl's hard-coded flash-attention 2.

``skl_verl.main`` selects it with ``trainer.device=cpu`` and loads this module in every Ray process
through ``VERL_USE_EXTERNAL_MODULES`` (see ``activate``). It is a stand-in (named as such): one
request at a time, no batching, no KV cache; the GPU path uses vLLM/SGLang unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
import ray
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

from skl_verl.rollout.hf_client import HFGenerationClient


def _cpu_device_module():
    """torch.cpu plus the memory/RNG calls verl makes on ``get_torch_device()`` (no-ops on CPU)."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    module = SimpleNamespace(**{n: getattr(torch.cpu, n) for n in dir(torch.cpu) if not n.startswith("__")})
    for name in ("max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved"):
        setattr(module, name, lambda *a, **k: 0)
    for name in ("empty_cache", "reset_peak_memory_stats", "manual_seed", "manual_seed_all", "ipc_collect"):
        setattr(module, name, lambda *a, **k: None)
    module.get_device_name = lambda *a, **k: "CPU"
    module.mem_get_info = lambda *a, **k: (0, 0)
    module.get_rng_state = lambda *a, **k: torch.get_rng_state()
    module.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    module.memory = SimpleNamespace(_set_allocator_settings=lambda *a, **k: None)
    module.nvtx = SimpleNamespace(range=lambda *a, **k: contextmanager(lambda: (yield))())
    return module


def enable_cpu_platform() -> None:
    """Make verl use CPU + gloo in this process (idempotent). Call before building verl workers."""
    import os
    from contextlib import contextmanager

    os.environ["VERL_PLATFORM"] = "cpu"
    # The FSDP LM engine is registered for devices ["cuda", "npu"] only but is device-agnostic.
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")
    from verl.plugin.platform import PlatformBase, PlatformRegistry
    from verl.plugin.platform import platform_manager

    if PlatformRegistry.get("cpu") is None:
        device_module = _cpu_device_module()

        @PlatformRegistry.register(platform="cpu")
        class PlatformCPU(PlatformBase):
            device_name = property(lambda self: "cpu")
            vendor_name = property(lambda self: "cpu")
            device_module = property(lambda self: device_module)

            def is_available(self) -> bool:
                return True

            def is_platform_available(self, use_smi_check: bool = False) -> bool:
                return True

            def current_device(self):
                return "cpu"

            def device_count(self) -> int:
                return 1

            def set_device(self, device_index) -> None:
                pass

            def synchronize(self, device_index=None) -> None:
                pass

            def manual_seed(self, seed: int) -> None:
                torch.manual_seed(seed)

            manual_seed_all = manual_seed

            def set_allocator_settings(self, settings: str) -> None:
                pass

            def empty_cache(self) -> None:
                pass

            def get_device_capability(self, device_index: int = 0):
                return None, None

            def communication_backend_name(self) -> str:
                return "gloo"

            def visible_devices_envvar(self) -> str:
                return "CUDA_VISIBLE_DEVICES"

            @contextmanager
            def nvtx_range(self, msg: str):
                yield

            def profiler_start(self) -> None:
                pass

            def profiler_stop(self) -> None:
                pass

            def ray_resource_name(self) -> str:
                return "CPU"

            def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
                return {"num_cpus": num_gpus}

            def ray_noset_envvars(self) -> list[str]:
                return []

            def is_ipc_supported(self) -> bool:
                return False

            def cudart(self):
                return None

    # VERL_PLATFORM makes a first get_platform() pick "cpu"; an earlier resolution is replaced.
    if platform_manager.get_platform().device_name != "cpu":
        platform_manager.set_platform(PlatformRegistry.get("cpu")())


def init_single_process_group() -> None:
    """World size 1 on gloo. verl would ask for "cpu:gloo,<device>:<backend>", which torch rejects on CPU."""
    import os
    import socket

    import torch.distributed as dist

    if dist.is_initialized():
        return
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    dist.init_process_group(backend="gloo", rank=0, world_size=1)


# --------------------------------------------------------------------------------------------------
# Rollout name "hf": a replica, its server actor, and the hybrid-engine adapter that syncs weights.
# --------------------------------------------------------------------------------------------------

ROLLOUT_NAME = "hf"


class HFRolloutServer:
    """The server actor of one ``hf`` replica: verl's ``generate`` plus the control calls replicas make."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int):
        enable_cpu_platform()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = getattr(model_config, "local_path", None) or model_config.path
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=model_config.trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
        self.engine = HFGenerationClient(model, tokenizer, max_new_tokens=int(config.response_length), seed=int(config.seed or 0) + replica_rank)
        self.replica_rank = replica_rank

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str, **_: Any) -> TokenOutput:
        return await self.engine.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)

    def update_weights(self, state: dict[str, torch.Tensor], global_steps: int | None) -> None:
        self.engine.load_weights(state, global_steps)

    def num_requests(self) -> int:
        return self.engine.num_requests

    # Memory and scheduling controls: nothing to free or pause for one CPU model.
    async def wake_up(self): pass
    async def sleep(self): pass
    async def abort_all_requests(self, reject_request: bool = False): pass
    async def resume_generation(self): pass
    async def clear_kv_cache(self): pass
    async def release_kv_cache(self): pass
    async def resume_kv_cache(self): pass
    async def start_profile(self, **kwargs): pass
    async def stop_profile(self): pass


def _server_name(replica_rank: int) -> str:
    return f"{ROLLOUT_NAME}_server_{replica_rank}"


class HFRolloutReplica(RolloutReplica):
    """One ``HFRolloutServer`` per replica, on the CPUs of the hybrid worker's node."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self):
        server = (
            ray.remote(HFRolloutServer)
            .options(name=_server_name(self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(self.config, self.model_config, self.replica_rank)
        )
        await server.num_requests.remote()  # returns once the model has loaded
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"ray://{_server_name(self.replica_rank)}"


class HFServerAdapter(BaseRollout):
    """Hybrid-engine side: the trainer's FSDP weights go to this rank's replica server."""

    def __init__(self, config, model_config, device_mesh, *args, **kwargs):
        super().__init__(config, model_config, device_mesh)
        import os

        cfg = self.config
        world = cfg.tensor_model_parallel_size * cfg.data_parallel_size * cfg.pipeline_model_parallel_size
        rank = int(os.environ.get("RANK", 0))
        self.replica_rank, self.is_leader = rank // world, rank % world == 0
        self._server = None

    async def resume(self, tags: list[str]):
        pass

    async def release(self):
        pass

    async def update_weights(self, weights, wire_format: str = "named_tensors", global_steps: int | None = None, **kwargs):
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the hf CPU rollout takes full named tensors, not {wire_format!r}")
        # Every rank drains the generator: it may all-gather FSDP shards collectively.
        state = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}
        if not self.is_leader:
            return
        if self._server is None:
            self._server = ray.get_actor(_server_name(self.replica_rank))
        await self._server.update_weights.remote(state, global_steps)


def register_cpu_rollout() -> None:
    """Make ``actor_rollout_ref.rollout.name=hf`` resolvable in this process (idempotent)."""
    from verl.workers.rollout import base

    RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: HFRolloutReplica)
    # verl 0.9.1 has no public register function for the hybrid-engine side; this dict is its registry.
    base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{__name__}.HFServerAdapter"


def _gloo_for_cpu_backend_strings() -> None:
    """verl asks torch for ``cpu:gloo,<device>:<backend>``; on the cpu platform that is
    ``cpu:gloo,cpu:gloo``, which torch rejects. Map exactly that string to ``gloo``."""
    import torch.distributed as dist

    if getattr(dist.init_process_group, "_skl_cpu", False):
        return
    original = dist.init_process_group

    def init_process_group(*args, backend=None, **kwargs):
        if backend == "cpu:gloo,cpu:gloo":
            backend = "gloo"
        return original(*args, backend=backend, **kwargs)

    init_process_group._skl_cpu = True
    dist.init_process_group = init_process_group


CPU_ENV_VARS = {
    "VERL_PLATFORM": "cpu",
    # The FSDP LM engine is registered for devices ["cuda", "npu"] only but is device-agnostic.
    "VERL_ENGINE_DEVICE": "cuda",
    "VERL_USE_EXTERNAL_MODULES": __name__,
}
"""What every Ray process of a CPU run needs; ``skl_verl.main`` puts it in the Ray runtime env."""


def _value_models_with_sdpa() -> None:
    """verl loads a critic as ``AutoModelForTokenClassification`` with flash-attention 2 hard-coded,
    falling back to trl's value-head wrapper; a CPU has no flash-attention, so CPU runs load the same
    class with sdpa (the PPO baselines' critic)."""
    import verl.utils.model as model_utils

    if getattr(model_utils.load_valuehead_model, "skl_cpu", False):
        return

    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(
            local_path, torch_dtype=torch_dtype, config=model_config, attn_implementation="sdpa",
            trust_remote_code=trust_remote_code,
        )

    load_valuehead_model.skl_cpu = True
    model_utils.load_valuehead_model = load_valuehead_model


def _reference_models_unpinned() -> None:
    """verl shards a forward-only model (the reference policy) with ``CPUOffloadPolicy(pin_memory=True)``;
    pinning needs an accelerator, so CPU runs (Knowledge Weaver's KL term) shard it unpinned."""
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.fsdp import transformer_impl

    if getattr(transformer_impl.CPUOffloadPolicy, "skl_cpu", False):
        return

    def unpinned_offload_policy(pin_memory: bool = True) -> CPUOffloadPolicy:
        return CPUOffloadPolicy(pin_memory=False)

    unpinned_offload_policy.skl_cpu = True
    transformer_impl.CPUOffloadPolicy = unpinned_offload_policy


def activate() -> None:
    """Everything a process of a CPU run needs: platform, gloo mapping, ``hf`` rollout, sdpa critics,
    unpinned reference models."""
    enable_cpu_platform()
    _gloo_for_cpu_backend_strings()
    register_cpu_rollout()
    _value_models_with_sdpa()
    _reference_models_unpinned()


if __import__("os").environ.get("VERL_PLATFORM") == "cpu":
    # Imported by verl itself (VERL_USE_EXTERNAL_MODULES) in every process of a CPU run.
    activate()
