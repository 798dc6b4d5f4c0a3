"""Reward functions. Env-played samples carry their reward from the agent loop (``reward_score``);
functions here score text-only samples (e.g. curated documents) where a recipe needs them."""
