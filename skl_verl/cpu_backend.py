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
        # generate() mutates the global torch RNG; one request at a time keeps sampling reproducible.
        self._lock = asyncio.Lock()

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> TokenOutput:
        async with self._lock:
            return self._generate(str(request_id), list(prompt_ids), dict(sampling_params))

    def _generate(self, request_id: str, prompt_ids: list[int], params: dict[str, Any]) -> TokenOutput:
        self.num_requests += 1
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
        # A per-request seed makes a rollout reproducible regardless of request interleaving.
        digest = hashlib.sha256(f"{self.seed}:{request_id}:{self.num_requests}".encode()).digest()
        torch.manual_seed(int.from_bytes(digest[:8], "little") & 0x7FFFFFFFFFFFFFFF)
        input_ids = torch.tensor([prompt_ids], dtype=torch.long)
        was_training = self.model.training
        self.model.eval()
        with torch.no_grad():
            out = self.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
        self.model.train(was_training)
        new_tokens = out.sequences[0, input_ids.shape[1] :].tolist()
        log_probs = None
        if params.get("logprobs"):
            logits = torch.stack(out.logits, dim=1)[0].float()  # (new, vocab), before temperature
            log_probs = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(new_tokens)[:, None])[:, 0].tolist()
        finished = bool(new_tokens) and new_tokens[-1] in kwargs["eos_token_id"]
        return TokenOutput(token_ids=new_tokens, log_probs=log_probs, stop_reason="completed" if finished else None)
