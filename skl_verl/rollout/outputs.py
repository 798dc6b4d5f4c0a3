"""What our agent loops hand back to verl: ``AgentLoopOutput`` fields and tags every sample needs,
the one-prompt-one-reply sample, and the ids and seeds that make rollouts replay exactly."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

from skl_verl.rollout import sample_fields as sf


VERL_EXTRA_DEFAULTS = {"turn_scores": [], "tool_rewards": [], "reward_extra_info": {}}
"""Extra fields verl's workers expect on every output (v1 reads ``reward_extra_info`` when a loop
returns several outputs); fresh copies are made per sample."""


def weight_versions(output: Any) -> list[int]:
    """The rollout weights' version a ``TokenOutput`` was generated with (``[]`` when the server gives none)."""
    version = output.extra_fields.get("global_steps")
    return [] if version is None else [int(version)]


def weight_version_fields(versions: list[int], trainer_step: int) -> dict[str, int]:
    """verl's staleness tags (``min/max_global_steps``), required by its v1 trainer on every sample. One
    without any generation (a failed reset, a teacher-forced target) gets this rollout step's weights."""
    versions = versions or [max(trainer_step - 1, 0)]
    return {"min_global_steps": min(versions), "max_global_steps": max(versions)}


def single_turn_output(
    prompt_ids: list[int],
    response_ids: list[int],
    score: float,
    fields: dict[str, Any],
    logprobs: list[float] | None,
    version_fields: dict[str, int],
    num_turns: int = 3,
) -> AgentLoopOutput:
    """One prompt -> one trained reply (curations, reflections, distillation samples and probes).
    ``version_fields`` come from ``EnvAgentLoop.weight_version_fields``."""
    extra = {**{k: type(v)() for k, v in VERL_EXTRA_DEFAULTS.items()}, **fields, **version_fields, sf.SCORE: score}
    return AgentLoopOutput(
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        response_mask=[1] * len(response_ids),
        response_logprobs=logprobs[: len(response_ids)] if logprobs else None,
        reward_score=score,
        num_turns=num_turns,
        metrics=AgentLoopMetrics(),
        extra_fields=extra,
    )


def stable_seed(text: str) -> int:
    """A seed that is the same in every process (unlike ``hash``), so rollouts replay exactly."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def trajectory_id_of(kwargs: dict[str, Any]) -> str:
    """The id of the episode verl asked for: its sample uid and session (a fresh one when verl gave no uid)."""
    uid = kwargs.get("uid")
    if uid is None:
        return uuid.uuid4().hex
    return f"{uid}_{kwargs.get('session_id', 0)}"
