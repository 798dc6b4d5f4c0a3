"""Token-mean per micro-batch of rows, divided by the micro-batches a rank accumulates (loss_aggregation)."""

import pytest
import torch
from verl.trainer.ppo import core_algos
from verl.workers.config import ActorConfig

from skl_verl.trainer.loss_aggregation import per_group_token_mean


def actor_config(rows, global_batch_size, dp_size=1):
    config = ActorConfig(strategy="fsdp", ppo_mini_batch_size=global_batch_size, ppo_micro_batch_size_per_gpu=rows,
                         clip_ratio=0.2, rollout_n=1)
    config.global_batch_info.update({"dp_size": dp_size, "batch_num_tokens": 4, "global_batch_size": global_batch_size,
                                     "loss_scale_factor": None})
    return config


def test_two_micro_batches_of_different_token_counts_take_their_own_token_means():
    # log_prob = old_log_prob: ratio 1, so each token's clipped loss is -A. Mini-batch of 2 rows on one rank,
    # micro-batches of 1 row: row 0 has 1 token (A = 3), row 1 has 3 tokens (A = 1, 1, 1).
    advantages = torch.tensor([[3.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]], dtype=torch.bool)
    zeros = torch.zeros(2, 3)
    config = actor_config(rows=1, global_batch_size=2)
    loss = per_group_token_mean(core_algos.compute_policy_loss_vanilla)
    # as verl calls it, one micro-batch at a time; the mini-batch's loss is their sum
    first, _ = loss(zeros[:1], zeros[:1], advantages[:1], mask[:1], config=config)
    second, _ = loss(zeros[1:], zeros[1:], advantages[1:], mask[1:], config=config)
    # per micro-batch: (-3/1 + -3/3) / 2 micro-batches = -2; verl's token-mean over all 4 tokens: -6/4 = -1.5
    assert (first + second).item() == pytest.approx(-2.0)
    assert config.global_batch_info["batch_num_tokens"] == 4  # verl's info is back for the entropy and KL terms
    verl_first, _ = core_algos.compute_policy_loss_vanilla(zeros[:1], zeros[:1], advantages[:1], mask[:1], config=config)
    verl_second, _ = core_algos.compute_policy_loss_vanilla(zeros[1:], zeros[1:], advantages[1:], mask[1:], config=config)
    assert (verl_first + verl_second).item() == pytest.approx(-1.5)


def test_groups_are_cut_within_a_packed_micro_batch_and_ranks_divide_the_mini_batch():
    # One 4-row micro-batch (as dynamic batch sizes pack it) of micro-batch size 2: groups rows 0-1 and 2-3.
    # Mini-batch of 8 rows over 2 ranks: 4 rows = 2 groups a rank.
    advantages = torch.tensor([[2.0, 0.0], [2.0, 2.0], [1.0, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[1, 0], [1, 1], [1, 0], [0, 0]], dtype=torch.bool)
    zeros = torch.zeros(4, 2)
    loss, _ = per_group_token_mean(core_algos.compute_policy_loss_vanilla)(
        zeros, zeros, advantages, mask, config=actor_config(rows=2, global_batch_size=8, dp_size=2))
    # group 1: -6/3 = -2; group 2: -1/1 = -1; (-2 + -1) / 2 groups a rank
    assert loss.item() == pytest.approx(-1.5)


def test_another_aggregation_is_refused():
    zeros, mask = torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="loss_agg_mode=token-mean"):
        per_group_token_mean(core_algos.compute_policy_loss_vanilla)(zeros, zeros, zeros, mask, loss_agg_mode="seq-mean-token-sum",
                                                                    config=actor_config(rows=1, global_batch_size=1))


def test_settings_the_loss_cannot_run_with_are_refused_before_any_worker(tmp_path):
    """The dry run refuses them (the loss itself would raise only at the first update, after a rollout)."""
    from dry_run import dry_run

    for override, key in (("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null", "ppo_micro_batch_size_per_gpu=None"),
                          ("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum", "loss_agg_mode=seq-mean-token-sum")):
        code, _, err = dry_run("skillrise", "skillrise_alfworld", [override], tmp_path)
        assert code and f"actor_rollout_ref.actor.{key}" in err and "Traceback" not in err, err[-1500:]
