"""The model as the study talks to it: chat messages in, reply text out, over any client with
verl's rollout ``generate`` interface."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

from skl_verl.rollout.prompt_safety import neutralise_special_tokens

if TYPE_CHECKING:  # the runner imports this module to build its ChatLLM
    from skl_verl.skl.frozenlake_study.runner import StudyConfig

logger = logging.getLogger(__name__)


class GenerationClient(Protocol):
    """verl's rollout-server interface (HFGenerationClient, OpenAICompletionsClient, test stand-ins)."""

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any]) -> Any: ...


class ChatLLM:
    """Chat messages -> text over a verl-style ``generate`` client, with bounded concurrency."""

    def __init__(self, client: GenerationClient, tokenizer: Any, config: StudyConfig, retries: int = 3):
        self.client = client
        self.tokenizer = tokenizer
        self.config = config
        self.retries = retries
        self._sem = asyncio.Semaphore(config.concurrency)
        self.calls = 0

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        # Every message here carries env text or the model's own earlier words: none is trusted.
        messages = [{**m, "content": neutralise_special_tokens(m["content"], self.tokenizer)} for m in messages]
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **self.config.chat_template_kwargs
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    async def complete(self, request_id: str, messages: list[dict[str, str]]) -> str:
        ids = self.prompt_ids(messages)
        params = {"temperature": self.config.temperature, "top_p": self.config.top_p, "max_tokens": self.config.max_new_tokens}
        for attempt in range(self.retries):
            try:
                async with self._sem:
                    out = await self.client.generate(request_id, prompt_ids=ids, sampling_params=params)
                break
            except Exception as exc:  # noqa: BLE001 - a served endpoint may hiccup; retry, then give up
                if attempt + 1 == self.retries:
                    raise
                logger.warning("generation %s failed (%s); retrying", request_id, exc)
                await asyncio.sleep(2.0 * (attempt + 1))
        self.calls += 1
        return self.tokenizer.decode(list(out.token_ids), skip_special_tokens=True)
