"""The task-independent baselines of every recipe: GRPO, RLOO and PPO's GAE over trials, GiGPO, and the
plain env-playing agent loops they train (one sample per episode or per env step)."""
