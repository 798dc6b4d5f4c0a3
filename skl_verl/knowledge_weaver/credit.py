"""Knowledge Weaver's token credit and advantages.

Eq. 6 (MI credit): how much more likely the candidate's token z_t is under its own trajectory context
than under the other contexts of its comparison set, clipped and kept on entry-body tokens; the
log-probs come from rescoring the candidate under every context on the rollout server
(``rescore_under_contexts``).
Eqs. 4/7, 15, 16: group-normalised execution reward, minus beta times the return-to-go of the clipped
per-token KL to the reference policy, plus the MI credit (added after the return-to-go, never
accumulated), then whitened over every policy token of the batch. The equations are pure, vectorised
functions.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import torch

from skl_verl.options import AtLeast
from skl_verl.rollout import sample_fields as sf
from skl_verl.trainer.group_advantage import group_codes, group_relative_advantages


async def rescore_under_contexts(
    client: Any, contexts: Sequence[Sequence[int]], candidate: Sequence[int], request_id: str
) -> torch.Tensor:
    """(N, T) log pi_old(z_t | x_l, z_<t) of the candidate's tokens under each context, from the rollout
    server that sampled them: one ``generate(x_l + z, prompt_logprobs=0, max_tokens=1)`` per context
    (vLLM's layout: entry i scores prompt token i + 1, so z_t sits at row len(x_l) + t - 1)."""
    params = {"temperature": 1.0, "max_tokens": 1, "prompt_logprobs": 0, "logprobs": False}

    async def one(index: int, context: Sequence[int]) -> list[float]:
        output = await client.generate(f"{request_id}:mi{index}", prompt_ids=[*context, *candidate], sampling_params=params)
        rows = output.extra_fields["prompt_logprobs"]
        return [float(rows[len(context) + t - 1][0]) for t in range(len(candidate))]

    scored = await asyncio.gather(*(one(i, context) for i, context in enumerate(contexts)))
    return torch.tensor(scored, dtype=torch.float64).reshape(len(contexts), len(candidate))


def mi_token_credit(
    logprobs: torch.Tensor, own: torch.Tensor, body_mask: torch.Tensor, weight: float = 0.1, cap: float = 0.15
) -> torch.Tensor:
    """Eq. 6: credit[b, t] = body[b, t] * min(cap, weight * |delta[b, t]|), with
    delta[b, t] = lp[b, own_b, t] - log mean_{l != own_b} exp(lp[b, l, t]).

    Args:
        logprobs: (B, N, T) log pi_old(z_t | x_l, z_<t) of each candidate's tokens under each of the N
            contexts of its comparison set.
        own: (B,) index of the candidate's own context in its set.
        body_mask: (B, T) 1 on tokens of the entry body (inside the tags), 0 elsewhere and on padding.
    Returns (B, T) float64 credit, >= 0.
    """
    if logprobs.dim() != 3 or logprobs.shape[1] < 2:
        raise ValueError(f"logprobs must be (batch, contexts >= 2, tokens), got {tuple(logprobs.shape)}")
    if body_mask.shape != (logprobs.shape[0], logprobs.shape[2]) or own.shape != (logprobs.shape[0],):
        raise ValueError(f"own {tuple(own.shape)} and body_mask {tuple(body_mask.shape)} do not fit logprobs {tuple(logprobs.shape)}")
    logprobs = logprobs.to(torch.float64)
    batch, contexts, _ = logprobs.shape
    is_own = torch.nn.functional.one_hot(own.long(), contexts).bool()[:, :, None]  # (B, N, 1)
    own_lp = logprobs.gather(1, own.long().view(batch, 1, 1).expand(-1, 1, logprobs.shape[2])).squeeze(1)
    others = logprobs.masked_fill(is_own, -math.inf)
    others_mean = torch.logsumexp(others, dim=1) - math.log(contexts - 1)
    delta = own_lp - others_mean
    return body_mask.to(torch.float64) * torch.clamp(weight * delta.abs(), max=cap)


def knowledge_weaver_advantages(
    rewards: torch.Tensor,
    groups: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    token_credit: torch.Tensor,
    response_mask: torch.Tensor,
    beta: float = 0.01,
    kl_clip: float = 10.0,
    clip: float = 20.0,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Eqs. 4/7, 15, 16 on a batch of candidates; returns (B, T) whitened advantages (0 off the mask).

    A_exec = group-normalised clip(R, +-clip) over the candidates of a group (sample std, eps; equal
    rewards give 0). kappa_t = clip(l_beh - l_ref, +-kl_clip) on policy tokens. A_t = A_exec +
    clip(credit_t, +-clip) - beta * sum_{s >= t} kappa_s, then (A - mean_V) / (std_V + eps) over all
    policy tokens V of the batch (sample std).
    """
    mask = response_mask.to(torch.float64)
    exec_advantage = group_relative_advantages(rewards.to(torch.float64).clamp(-clip, clip), groups, norm="std", eps=eps)
    kappa = (behaviour_logprobs.to(torch.float64) - ref_logprobs.to(torch.float64)).clamp(-kl_clip, kl_clip) * mask
    kl_to_go = kappa.flip(-1).cumsum(-1).flip(-1)
    advantages = (exec_advantage[:, None] + token_credit.to(torch.float64).clamp(-clip, clip) - beta * kl_to_go) * mask
    on_policy_tokens = mask.bool()
    values = advantages[on_policy_tokens]
    if values.numel() < 2:
        return torch.zeros_like(advantages)
    whitened = (advantages - values.mean()) / (values.std(unbiased=True) + eps)
    return whitened * mask


@dataclass(frozen=True)
class KnowledgeWeaverCreditOptions:
    """``algorithm.knowledge_weaver.*``: the constants of Eqs. 15–16."""

    eps: Annotated[float, AtLeast(0)] = 1e-5
    """Added to the std in Eq. 16's whitening and Eq. 7's group normalisation."""
    kl_clip: Annotated[float, AtLeast(0)] = 10.0
    """|kappa_t| of Eq. 15 is clipped to this before its return-to-go."""
    clip: Annotated[float, AtLeast(0)] = 20.0
    """The pre-whitening advantage of Eq. 16 is clipped to [-clip, clip]."""


def knowledge_weaver_estimator(token_level_rewards, response_mask, sample_fields, options, algorithm=None,
                               old_log_probs=None, ref_log_probs=None, **_):
    """Eqs. 4/7, 15, 16 (``knowledge_weaver_advantages``) on the curator's samples: R is each sample's
    own score (``skl_score``; verl's KL-in-reward, which only builds the reference policy here, is
    applied inside as the clipped return-to-go instead), groups are the candidates of one context,
    beta is ``algorithm.kl_ctrl.kl_coef`` (fixed), l_beh the old (behaviour, in bypass mode) log-probs.
    Options: ``KnowledgeWeaverCreditOptions``."""
    beta = float(algorithm.kl_ctrl.kl_coef) if algorithm is not None and algorithm.get("use_kl_in_reward", False) else 0.0
    if beta and (old_log_probs is None or ref_log_probs is None):
        raise ValueError("knowledge_weaver needs old and reference log-probs for its KL term (algorithm.use_kl_in_reward=true, "
                         "actor_rollout_ref.rollout.calculate_log_probs=true)")
    mask = response_mask.to(torch.float64)
    scores = torch.as_tensor([float(s) for s in sample_fields[sf.SCORE]], dtype=torch.float64)
    credit = torch.zeros_like(mask)
    for row, values in enumerate(sample_fields[sf.TOKEN_CREDIT]):
        if values is not None and len(values):
            width = min(len(values), credit.shape[1])
            credit[row, :width] = torch.as_tensor(list(values)[:width], dtype=torch.float64)
    zeros = torch.zeros_like(mask)
    advantages = knowledge_weaver_advantages(
        scores, group_codes(sample_fields[sf.SEQUENCE_ID]),
        old_log_probs if beta else zeros, ref_log_probs if beta else zeros, credit, mask,
        beta=beta, kl_clip=float(options.kl_clip), clip=float(options.clip), eps=float(options.eps),
    ).to(torch.float32)
    return advantages, advantages
