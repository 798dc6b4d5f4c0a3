"""Quickstart: RL on slippery FrozenLake with verl's own actor, on CPU, in about a minute.

    python examples/quickstart_frozenlake.py [--steps 3] [--out outputs/quickstart]

FrozenLake prompts -> our multi-turn agent loop (driven by verl's AgentLoopWorker) -> a verl
DataProto -> verl's ``grpo`` estimator -> a PPO update of a tiny locally built Qwen2 by verl's
FSDP2 actor. Per-step metrics go to the console through verl's Tracking.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from skl_verl.cpu_trainer import CPUTrainer, compose_config
from skl_verl.data import env_rows, write_parquet
from skl_verl.tiny_model import build_tiny_model


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", default="outputs/quickstart")
    parser.add_argument("--slip", type=float, nargs=2, default=(1 / 3, 1 / 3), metavar=("P_LEFT", "P_RIGHT"))
    parser.add_argument("--estimator", default="grpo", help="algorithm.adv_estimator (verl's or ours)")
    parser.add_argument("overrides", nargs="*", help="extra hydra overrides on verl's ppo_trainer config")
    args = parser.parse_args(argv)
    started = time.perf_counter()

    out = Path(args.out)
    model_dir = build_tiny_model(out / "tiny_model")
    env_kwargs = {"size": 4, "num_tasks": 16, "seed": 0, "slip": list(args.slip), "max_steps": 20}
    train_file = write_parquet(env_rows("frozenlake", env_kwargs), out / "frozenlake_train.parquet")
    config = compose_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            f"data.train_files={train_file}",
            f"data.val_files={train_file}",
            "data.train_batch_size=4",
            "data.max_prompt_length=512",
            "data.max_response_length=768",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.actor.optim.lr=1e-3",
            f"algorithm.adv_estimator={args.estimator}",
            f"trainer.total_training_steps={args.steps}",
            "trainer.project_name=skl_verl_quickstart",
            "trainer.experiment_name=frozenlake_cpu",
            *args.overrides,
        ]
    )
    trainer = CPUTrainer(config, max_new_tokens_per_turn=24)
    history = trainer.fit(args.steps)
    print(f"quickstart: {args.steps} steps in {time.perf_counter() - started:.1f}s "
          f"(success rate per step: {[round(m['env/success_rate'], 3) for m in history]})")
    return history


if __name__ == "__main__":
    main()
