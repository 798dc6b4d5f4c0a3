"""The weight-sync check every vLLM run in the suite makes: after each sync the rollout server's token
probabilities match the actor's (verl's ``training/rollout_probs_diff_mean`` and
``training/rollout_actor_probs_pearson_corr``, logged when ``rollout.calculate_log_probs`` is on).

Thresholds for CPU runs, where both sides compute in fp32: measured on the quickstart through vLLM's CPU
build, mean |p_rollout - p_actor| 1.8e-5 to 2.2e-5 and Pearson 1.0 on both steps; with the sync
skipped (tests/trainer/skip_weight_sync.py) step 2 is far outside them.
"""

from __future__ import annotations

MAX_MEAN_PROB_DIFF = 1e-4
MIN_PEARSON = 0.999


def weight_sync_problems(steps: dict[int, dict]) -> list[str]:
    """One message per logged step whose rollout probabilities do not match the actor's."""
    problems = []
    for step, metrics in sorted(steps.items()):
        mean = metrics.get("training/rollout_probs_diff_mean")
        pearson = metrics.get("training/rollout_actor_probs_pearson_corr")
        if mean is None or pearson is None:
            problems.append(f"step {step}: no rollout-vs-actor probability metrics (rollout.calculate_log_probs off?)")
        elif not (mean < MAX_MEAN_PROB_DIFF and pearson > MIN_PEARSON):
            problems.append(f"step {step}: rollout_probs_diff_mean={mean:.3g} (< {MAX_MEAN_PROB_DIFF}), "
                            f"pearson={pearson:.6f} (> {MIN_PEARSON}): the rollout did not serve the actor's weights")
    return problems
