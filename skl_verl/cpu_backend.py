"""A CPU stand-in for verl's rollout server, for machines without vLLM/SGLang.

``HFGenerationClient`` implements the one method verl's agent loops call on
``LLMServerClient`` — ``await generate(request_id, prompt_ids=..., sampling_params=...)``
returning verl's own ``TokenOutput`` — on top of a Hugging Face model's ``generate``.
Agent-loop code is therefore identical on CPU and GPU; only the server differs.
It is a stand-in (named as such): no batching, no KV cache sharing, no weight sync.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import torch
from verl.workers.rollout.replica import TokenOutput


class HFGenerationClient:
    def __init__(self, model: torch.nn.Module, tokenizer: Any, max_new_tokens: int, seed: int = 0):
        if max_new_tokens <= 0:
            raise ValueError("max_new_tokens must be positive")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.num_requests = 0
        self._calls_per_request: dict[str, int] = {}
        # generate() mutates the global torch RNG; one request at a time keeps sampling reproducible.
        self._lock = asyncio.Lock()

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> TokenOutput:
        async with self._lock:
            return self._generate(str(request_id), list(prompt_ids), dict(sampling_params))

    def _generate(self, request_id: str, prompt_ids: list[int], params: dict[str, Any]) -> TokenOutput:
        self.num_requests += 1
        call = self._calls_per_request[request_id] = self._calls_per_request.get(request_id, 0) + 1
        max_new = min(self.max_new_tokens, int(params.get("max_tokens") or params.get("max_new_tokens") or 1 << 30))
        temperature = float(params.get("temperature", 1.0))
        top_k = int(params.get("top_k", -1) or -1)
        stop_ids = [self.tokenizer.eos_token_id, *(params.get("stop_token_ids") or [])]
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new,
            "eos_token_id": [i for i in stop_ids if i is not None],
            "pad_token_id": self.tokenizer.pad_token_id,
            "return_dict_in_generate": True,
            "output_logits": True,
        }
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=float(params.get("top_p", 1.0)))
            kwargs["top_k"] = top_k if top_k > 0 else 0
        else:
            kwargs.update(do_sample=False)
        # Seeding by (request id, call number within it) makes a rollout reproducible however
        # concurrent episodes interleave.
        digest = hashlib.sha256(f"{self.seed}:{request_id}:{call}".encode()).digest()
        torch.manual_seed(int.from_bytes(digest[:8], "little") & 0x7FFFFFFFFFFFFFFF)
        input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.model.device)
        was_training = self.model.training
        self.model.eval()
        with torch.no_grad():
            out = self.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
        self.model.train(was_training)
        new_tokens = out.sequences[0, input_ids.shape[1] :].cpu().tolist()
        log_probs = None
        if params.get("logprobs"):
            logits = torch.stack(out.logits, dim=1)[0].float()  # (new, vocab), before temperature
            chosen = torch.tensor(new_tokens, device=logits.device)[:, None]
            log_probs = torch.log_softmax(logits, dim=-1).gather(-1, chosen)[:, 0].cpu().tolist()
        finished = bool(new_tokens) and new_tokens[-1] in kwargs["eos_token_id"]
        return TokenOutput(token_ids=new_tokens, log_probs=log_probs, stop_reason="completed" if finished else None)


# --------------------------------------------------------------------------------------------------
# A "cpu" platform for verl's platform registry (verl.plugin.platform), so verl's own FSDP2 training
# engine runs in-process on CPU. verl 0.9.1 ships nvidia/npu/rocm platforms only and otherwise falls
# back to 'nvidia' (cuda + nccl). Nothing in verl is patched: we register a platform, select it with
# verl's set_platform, and pick the device-agnostic FSDP engine via VERL_ENGINE_DEVICE.
# --------------------------------------------------------------------------------------------------


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
