"""One way for a CLI or a frozen model to get a client with verl's ``generate`` interface: an
OpenAI-compatible endpoint (``vllm serve``; checked with a 1-token request, so a dead endpoint or a
wrong model name fails before any rollout) or a local checkpoint loaded in this process."""

from __future__ import annotations

from typing import Any


def generation_client(tokenizer: Any, max_new_tokens: int, *, endpoint: str | None = None, served_model: str | None = None,
                      checkpoint: str | None = None, seed: int = 0, api_key: str | None = None,
                      api_key_env: str | None = None) -> Any:
    """The endpoint's API key is ``api_key`` itself (a CLI flag) or, from a config, the name of the
    environment variable holding it, ``api_key_env`` (see OpenAICompletionsClient); not both."""
    if endpoint:
        from skl_verl.rollout.openai_client import OpenAICompletionsClient

        client = OpenAICompletionsClient(endpoint, served_model, tokenizer, max_new_tokens=max_new_tokens,
                                         api_key=api_key, api_key_env=api_key_env)
        client.check()
        return client
    if not checkpoint:
        raise ValueError("a generation client needs an endpoint URL or a local checkpoint path")
    import torch
    from transformers import AutoModelForCausalLM

    from skl_verl.rollout.hf_client import HFGenerationClient

    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    model.requires_grad_(False)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return HFGenerationClient(model, tokenizer, max_new_tokens=max_new_tokens, seed=seed)
