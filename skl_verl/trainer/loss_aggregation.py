"""Token-mean per group of rows, as older verl aggregated a micro-batch, registered as a policy loss.

verl 0.9.1's ``token-mean`` divides every micro-batch's token sum by the tokens of the whole mini-batch
(``agg_loss`` with ``global_batch_info["batch_num_tokens"]``), so every token of a mini-batch weighs the same.
Older verl took the token-mean within each micro-batch and divided it by the gradient-accumulation steps, so a
token of a short micro-batch weighs more than one of a long micro-batch. ``per_group_token_mean`` wraps a policy
loss with verl's signature to aggregate that way: its rows, in order, form groups of
``actor.ppo_micro_batch_size_per_gpu`` rows (verl's fixed micro-batch; with ``use_dynamic_bsz`` verl packs
micro-batches by tokens, and the groups are cut within them), each group's loss is its own token-mean, and
the sum is divided by the groups one data-parallel rank holds in the mini-batch
(``global_batch_size / dp_size / rows``), the old gradient-accumulation count. FSDP averages the ranks'
gradients, as it did then. Entropy and KL terms keep verl's aggregation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from skl_verl.options import ConfigError


def check_per_group_settings(actor: Any) -> None:
    """Before any worker starts: what ``per_group_token_mean`` refuses at the first update otherwise."""
    prefix = "actor_rollout_ref.actor"
    if actor.get("loss_agg_mode", "token-mean") != "token-mean":
        raise ConfigError(f"{prefix}.loss_agg_mode={actor.get('loss_agg_mode')}: policy loss "
                          f"{actor.policy_loss.loss_mode} takes the token-mean of each micro-batch; set it to token-mean")
    rows = actor.get("ppo_micro_batch_size_per_gpu")
    if not isinstance(rows, int) or rows < 1:
        raise ConfigError(f"{prefix}.ppo_micro_batch_size_per_gpu={rows}: policy loss {actor.policy_loss.loss_mode} "
                          "averages each group of that many rows; set it to 1 or more")


def per_group_token_mean(policy_loss: Callable) -> Callable:
    """``policy_loss`` (verl's signature) with its token-mean taken per group of rows (module docstring)."""

    def loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
             response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config: Any = None,
             rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        if loss_agg_mode != "token-mean":
            raise ValueError(f"a per-micro-batch policy loss takes the token-mean of each micro-batch; set "
                             f"actor.loss_agg_mode=token-mean, not {loss_agg_mode}")
        rows = int(config.ppo_micro_batch_size_per_gpu or 0)
        info = dict(config.global_batch_info or {})
        total, dp_size = info.get("global_batch_size"), int(info.get("dp_size") or 1)
        if rows < 1 or not total:
            raise ValueError("a per-micro-batch policy loss needs actor.ppo_micro_batch_size_per_gpu >= 1 and the "
                             f"mini-batch size verl passes (got {rows} rows, global_batch_size {total})")
        groups_per_rank = total / dp_size / rows
        # verl's configs are frozen but this dict is the one ppo_loss fills per micro-batch: empty it while each
        # group runs, so agg_loss takes the group's own token count, and put it back for the entropy and KL terms.
        batch_info = config.global_batch_info
        batch_info.clear()
        try:
            parts, group_metrics = [], []
            for start in range(0, response_mask.shape[0], rows):
                part = slice(start, start + rows)
                if not response_mask[part].any():  # padding rows: no token, nothing to average
                    continue
                weights = None if rollout_is_weights is None else rollout_is_weights[part]
                value, metrics = policy_loss(old_log_prob=old_log_prob[part], log_prob=log_prob[part],
                                             advantages=advantages[part], response_mask=response_mask[part],
                                             loss_agg_mode="token-mean", config=config, rollout_is_weights=weights)
                parts.append(value)
                group_metrics.append(metrics)
        finally:
            batch_info.update(info)
        if not parts:
            return (log_prob * 0.0).sum(), {}
        # verl averages these metrics over micro-batches; here over the groups first
        metrics = {key: sum(float(m[key]) for m in group_metrics) / len(group_metrics) for key in group_metrics[0]}
        return torch.stack(parts).sum() / groups_per_rank, metrics

    return loss
