"""FrozenLake prompts -> agent loop -> DataProto -> registered estimator -> verl actor update, on CPU."""

import glob

import pytest
import torch

from skl_verl.cpu_trainer import CPUTrainer, compose_config
from skl_verl.data import env_rows, write_parquet


def make_trainer(tmp_path, model_dir, estimator, extra=()):
    train = write_parquet(
        env_rows("frozenlake", {"size": 4, "num_tasks": 8, "seed": 3, "slip": [0.0, 2 / 3]}), tmp_path / "train.parquet"
    )
    config = compose_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            f"data.train_files={train}",
            f"data.val_files={train}",
            "data.train_batch_size=2",
            "data.max_prompt_length=512",
            "data.max_response_length=384",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.optim.lr=1e-3",
            f"algorithm.adv_estimator={estimator}",
            "trainer.logger=[console,tensorboard]",
            *extra,
        ]
    )
    return CPUTrainer(config, max_new_tokens_per_turn=16)


def parameters(trainer):
    return {k: v.full_tensor().clone() for k, v in trainer.actor.actor.engine.module.state_dict().items()}


@pytest.mark.parametrize("estimator", ["grpo", "skl_grpo"])
def test_one_step_updates_the_model_and_logs_metrics(tmp_path, tiny_model_dir, monkeypatch, estimator):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    trainer = make_trainer(tmp_path, tiny_model_dir, estimator)
    before = parameters(trainer)
    metrics = trainer.fit(total_steps=1)[0]
    after = parameters(trainer)

    advantages_nonzero = metrics["critic/advantages/max"] != 0 or metrics["critic/advantages/min"] != 0
    assert advantages_nonzero, "the tiny policy should produce differing outcomes within a group"
    assert any(not torch.equal(before[k], after[k]) for k in before), "the actor update changed no parameter"
    rollout_weights = dict(trainer.rollout_model.named_parameters())
    assert torch.equal(rollout_weights["lm_head.weight"], after["lm_head.weight"]), "rollout model not synced"
    for key in ("actor/pg_loss", "actor/grad_norm", "critic/score/mean", "env/success_rate", "env/turns/mean",
                "response_length/mean", "timing_s/gen", "timing_s/update_actor"):
        assert key in metrics, key
    assert metrics["actor/grad_norm"] > 0
    trainer.tracking.logger["tensorboard"].finish()
    assert glob.glob(str(tmp_path / "tb" / "events.out.tfevents.*")), "no tensorboard event file written"


def test_batch_larger_than_dataset_is_rejected(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    trainer = make_trainer(tmp_path, tiny_model_dir, "grpo", extra=["data.train_batch_size=64"])
    with pytest.raises(ValueError, match="train_batch_size=64 exceeds"):
        trainer.fit(total_steps=1)
