"""skl_sync's advantage step on a real TransferQueue (in-process Ray): padding, KL-in-reward, scores.

Samples go into TransferQueue the way verl's AgentLoopWorkerTQ puts them (``AgentLoopOutput.as_dict``
plus the loop kwargs, ``list_of_dict_to_tensordict``, one tag per sample); padding comes from verl's own
``upsample_batch_to_divisible_size``; the step under test is the trainer's ``_compute_advantage``.
"""

import math
import types

import pytest
import torch
from omegaconf import OmegaConf

from skl_verl.rollout import sample_fields as sf

ray = pytest.importorskip("ray")
tq = pytest.importorskip("transfer_queue")


@pytest.fixture(scope="module")
def transfer_queue():
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=["transfer_queue.backend.SimpleStorage.num_data_storage_units=1"])
    ray.init(num_cpus=4, include_dashboard=False, ignore_reinit_error=True)
    tq.init(config.transfer_queue)
    yield config
    tq.close()
    ray.shutdown()


def trainer(config, estimator, **algorithm):
    import skl_verl
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1 import get_trainer_cls

    skl_verl.register()
    config = OmegaConf.merge(config, {"algorithm": {"adv_estimator": estimator, **algorithm}})
    instance = object.__new__(get_trainer_cls("skl_sync"))  # only the advantage step is exercised
    instance.config = config
    instance.global_steps = 1  # what verl's fit loop has set when the first step's advantages are computed
    if config.algorithm.use_kl_in_reward:
        instance.kl_ctrl_in_reward = core_algos.get_kl_controller(config.algorithm.kl_ctrl)
    return instance


def sample(uid, session, fields, score, response_len=3, prompt_len=4, logprob=-0.5):
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    output = AgentLoopOutput(
        prompt_ids=list(range(5, 5 + prompt_len)),
        response_ids=list(range(20, 20 + response_len)),
        response_mask=[1] * response_len,
        response_logprobs=[logprob] * response_len,
        reward_score=score,
        num_turns=2,
        metrics=AgentLoopMetrics(),
        extra_fields={
            **fields, sf.SCORE: score, "skl_won": score > 0, "turn_scores": [], "tool_rewards": [],
            "reward_extra_info": {}, "min_global_steps": 0, "max_global_steps": 0,
        },
    )
    field = output.as_dict()
    field.update(uid=uid, session_id=session, global_steps=1)
    input_ids = torch.cat([field["prompts"], field["responses"]])
    field.update(input_ids=input_ids, position_ids=torch.arange(len(input_ids)), loss_mask=field["response_mask"],
                 old_log_probs=torch.full((response_len,), logprob), attention_mask=torch.ones_like(input_ids))
    tag = {"status": "success", "prompt_len": prompt_len, "response_len": response_len,
           "seq_len": prompt_len + response_len, "global_steps": 1, "min_global_steps": 0, "max_global_steps": 0}
    return field, tag


def put(samples, prefix):
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    keys = [f"{prefix}_{i}" for i in range(len(samples))]
    fields, tags = zip(*samples)
    return tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(list(fields)), tags=list(tags))


def skillrise_batch():
    """One sequence, K=2, N=4 trials: solve0 rewards (1, 1, 0, 0), solve1 rewards (1, 0, 0, 1), curations 0."""
    samples = []
    for trial, (r0, r1) in enumerate([(1.0, 1.0), (1.0, 0.0), (0.0, 0.0), (0.0, 1.0)]):
        common = {sf.TRAJECTORY_ID: f"t{trial}", sf.SEQUENCE_ID: "seq", sf.TOKEN_CREDIT: None}
        samples.append(sample("seq", trial, {**common, sf.POSITION: 0, sf.PHASE: "solve"}, r0))
        samples.append(sample("seq", trial, {**common, sf.POSITION: 0, sf.PHASE: "curate"}, 0.0, response_len=5))
        samples.append(sample("seq", trial, {**common, sf.POSITION: 1, sf.PHASE: "solve"}, r1, response_len=2))
    return samples


def advantages_of(meta):
    data = tq.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=["advantages"])
    return [row[0].item() if len(row) else 0.0 for row in data["advantages"].unbind(0)]


def test_padding_rows_change_no_real_advantage_and_get_none(transfer_queue):
    from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size

    skillrise = trainer(transfer_queue, "skillrise")
    plain = put(skillrise_batch(), "plain")
    skillrise._compute_advantage(plain, metrics := {})
    expected = advantages_of(plain)

    padded = upsample_batch_to_divisible_size(put(skillrise_batch(), "padded"), 16, eos_token_id=0)
    assert len(padded) == 16 and sum(tag.get("is_padding", False) for tag in padded.tags) == 4
    skillrise._compute_advantage(padded, padded_metrics := {})
    got = advantages_of(padded)

    assert got[:12] == pytest.approx(expected) and got[12:] == [0.0] * 4
    # solve@0 rewards (1, 1, 0, 0): (r - 0.5) / std = +-0.866 (unbiased std 0.577), by hand.
    assert [expected[i] for i in (0, 3, 6, 9)] == pytest.approx([0.866, 0.866, -0.866, -0.866], abs=1e-3)
    assert padded_metrics["env/success_rate"] == metrics["env/success_rate"]
    tq.kv_clear(keys=plain.keys, partition_id="train")
    tq.kv_clear(keys=padded.keys, partition_id="train")


def test_rm_scores_become_each_samples_own_score(transfer_queue):
    meta = put(skillrise_batch(), "scores")
    # What verl's AgentLoopWorkerTQ does for multi-output loops: every output gets the last one's reward.
    data = tq.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=["rm_scores"])
    last = {trial: 3 * trial + 2 for trial in range(4)}
    overwritten = [data["rm_scores"][last[i // 3]] for i in range(12)]
    wrong = torch.nested.as_nested_tensor(
        [torch.cat([torch.zeros(len(data["rm_scores"][i]) - 1), overwritten[i][-1:]]) for i in range(12)], layout=torch.jagged
    )
    from tensordict import TensorDict

    tq.kv_batch_put(keys=meta.keys, partition_id="train", fields=TensorDict({"rm_scores": wrong}, batch_size=12))
    trainer(transfer_queue, "skillrise")._compute_advantage(meta, {})
    fixed = tq.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=["rm_scores", "token_level_rewards"])
    truth = [s[0]["extra_fields"][sf.SCORE] for s in skillrise_batch()]
    assert [row.sum().item() for row in fixed["rm_scores"].unbind(0)] == pytest.approx(truth)
    assert [row.sum().item() for row in fixed["token_level_rewards"].unbind(0)] == pytest.approx(truth)
    tq.kv_clear(keys=meta.keys, partition_id="train")


def test_kl_in_reward_reads_the_reference_log_probs(transfer_queue):
    from tensordict import TensorDict

    grouped = trainer(transfer_queue, "skl_grpo", use_kl_in_reward=True, kl_penalty="kl",
                      kl_ctrl={"type": "fixed", "kl_coef": 0.5})
    samples = [sample("task", i, {sf.TRAJECTORY_ID: f"t{i}", sf.SEQUENCE_ID: "task", sf.POSITION: 0, sf.PHASE: "act"},
                      score=float(i % 2), logprob=-0.5) for i in range(4)]
    meta = put(samples, "kl")
    ref = torch.nested.as_nested_tensor([torch.full((3,), -0.7)] * 4, layout=torch.jagged)
    tq.kv_batch_put(keys=meta.keys, partition_id="train", fields=TensorDict({"ref_log_prob": ref}, batch_size=4))
    grouped._compute_advantage(meta, metrics := {})
    rewards = tq.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=["token_level_rewards"])
    # kl = old - ref = 0.2 per token, beta 0.5: each token -0.1, the score on the last token.
    for i, row in enumerate(rewards["token_level_rewards"].unbind(0)):
        assert row.tolist() == pytest.approx([-0.1, -0.1, -0.1 + float(i % 2)])
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(0.2)
    tq.kv_clear(keys=meta.keys, partition_id="train")


def test_skl_sync_is_verls_sync_mode_whatever_name_selected_it(transfer_queue):
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

    instance = trainer(transfer_queue, "skillrise")
    instance.trainer_mode = "skl_sync"  # what verl's __init__ assigns from the config
    assert instance.trainer_mode == "sync"
    buffer = instance._build_replay_buffer()
    assert isinstance(buffer, ReplayBuffer) and not isinstance(buffer, ReplayBufferAsync)


class _RecordingWorkers:
    """Stands in for the actor/critic worker group: records what verl's update step sends it."""

    def __init__(self):
        self.sent = []

    def update_actor(self, batch):
        self.sent.append(dict(batch.extra_info))
        return {"metrics": {"mfu": 0.0}}

    def train_mini_batch(self, batch):  # the critic's entry point in verl 0.9.1, answering a future
        self.sent.append(dict(batch.extra_info))
        return types.SimpleNamespace(get=lambda: {"metrics": {"mfu": 0.0}})


@pytest.mark.parametrize("samples", [None, 128])
def test_mini_batches_hold_skl_mini_batch_samples_through_verls_own_update_step(samples):
    """verl's ``_update_actor``/``_update_critic`` size a mini-batch as ppo_mini_batch_size x rollout.n
    (here 16 x 24 = 384); ``skl.mini_batch_samples`` makes it that many samples, as the released scripts."""
    import skl_verl
    from verl.trainer.ppo.v1 import get_trainer_cls

    skl_verl.register()
    config = OmegaConf.create({
        "skl": {"mini_batch_samples": samples},
        "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 16, "ppo_epochs": 1, "data_loader_seed": 0, "shuffle": False,
                                        "calculate_entropy": False, "entropy_coeff": 0.0},
                              "rollout": {"n": 24, "temperature": 1.0}},
        "critic": {"ppo_mini_batch_size": 16, "ppo_epochs": 1, "data_loader_seed": 0, "shuffle": False},
    })
    instance = object.__new__(get_trainer_cls("skl_sync"))
    instance.config = config
    instance.actor_rollout_wg = instance.critic_wg = workers = _RecordingWorkers()
    batch = types.SimpleNamespace(extra_info={})
    instance._update_actor(batch, {})
    instance._update_critic(batch, {})
    expected = 16 * 24 if samples is None else samples
    assert [(sent["global_batch_size"], sent["mini_batch_size"]) for sent in workers.sent] == [(expected, expected)] * 2
    # verl pads the batch to whole mini-batches (of the actor and the critic) over 8 data-parallel ranks
    instance.use_critic, instance.global_steps = True, 1
    instance.config = OmegaConf.merge(config, {"trainer": {"critic_warmup": 0}})
    assert instance._get_required_batch_multiple(8) == math.lcm(8, expected)
    # the config the rest of the run reads is untouched
    assert (config.actor_rollout_ref.actor.ppo_mini_batch_size, config.actor_rollout_ref.rollout.n) == (16, 24)
    assert config.critic.ppo_mini_batch_size == 16
