"""The checks of one scripts/gpu_smoke.sh run, read from verl's file logger: one ``PASS``/``FAIL`` line each.

    python scripts/gpu_smoke_checks.py METRICS_JSONL --run NAME --max-diff-mean X --min-pearson Y [--check CHECK ...]

Always checked: ``logged`` (step 2 was logged) and ``sync`` (at every logged step, verl's rollout-vs-actor
probability metrics say the rollout server sampled with the actor's weights: ``rollout_probs_diff_mean`` at
most X and ``rollout_actor_probs_pearson_corr`` at least Y). The mean, not the max: on GPUs both sides run
bf16 with different kernels, so single tokens differ by far more than the mean does. Run-specific CHECKs
are listed in CHECKS. Exit status 1 when any check failed; every check is printed either way.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Callable

DIFF_MEAN = "training/rollout_probs_diff_mean"
PEARSON = "training/rollout_actor_probs_pearson_corr"
VALID = "training/rollout_probs_diff_valid"
"""verl 0.9.1's names (verl/utils/debug/metrics.py, calculate_debug_metrics)."""

Steps = dict[int, dict]


def read_steps(path: str) -> Steps:
    steps: Steps = {}
    with open(path) as handle:
        for line in handle:
            if line.strip():
                entry = json.loads(line)
                steps.setdefault(int(entry["step"]), {}).update(entry["data"])
    return steps


def finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def per_step(steps: Steps, key: str) -> list:
    return [steps[s].get(key) for s in sorted(steps)]


def check_logged(steps: Steps, args) -> tuple[bool, str]:
    two = steps.get(2, {})
    return 2 in steps, f"steps={sorted(steps)} step2 env/success_rate={two.get('env/success_rate')}"


def check_sync(steps: Steps, args) -> tuple[bool, str]:
    means, pearsons, valid = per_step(steps, DIFF_MEAN), per_step(steps, PEARSON), per_step(steps, VALID)
    ok = bool(steps) and all(
        v == 1 and finite(m) and m <= args.max_diff_mean and finite(p) and p >= args.min_pearson
        for v, m, p in zip(valid, means, pearsons)
    )
    return ok, (f"{DIFF_MEAN} per step={means} (max allowed {args.max_diff_mean}), "
                f"{PEARSON} per step={pearsons} (min {args.min_pearson}), valid={valid}")


def check_critic(steps: Steps, args) -> tuple[bool, str]:
    """PPO: the critic trained at both steps."""
    loss, vpred = per_step(steps, "critic/vf_loss"), per_step(steps, "critic/vpred_mean")
    return len(steps) >= 2 and all(map(finite, loss + vpred)), f"critic/vf_loss={loss} critic/vpred_mean={vpred}"


def check_step_samples(steps: Steps, args) -> tuple[bool, str]:
    """GiGPO and PPO train on step samples: at least one sample per episode at every step."""
    per_episode = per_step(steps, "env/samples_per_episode")
    return bool(steps) and all(finite(v) and v >= 1 for v in per_episode), f"env/samples_per_episode={per_episode}"


def check_skl_sd_base(steps: Steps, args) -> tuple[bool, str]:
    base = per_step(steps, "loss_terms/base_samples")
    return bool(steps) and all(finite(v) and v > 0 for v in base), f"loss_terms/base_samples={base}"


def check_skl_sd_retry(steps: Steps, args) -> tuple[bool, str]:
    """Verification retries (the teacher-forced ẑ turns, scored through vLLM's prompt_logprobs) ran."""
    distill = per_step(steps, "loss_terms/distill_samples")
    return sum(v for v in distill if finite(v)) > 0, f"loss_terms/distill_samples={distill}"


def check_kw_admitted(steps: Steps, args) -> tuple[bool, str]:
    value = steps.get(1, {}).get("kw/admitted")
    return value == 1, f"step 1 kw/admitted={value}"


def check_kw_retrieved(steps: Steps, args) -> tuple[bool, str]:
    value = steps.get(2, {}).get("kw/retrieved")
    return value == 1, f"step 2 kw/retrieved={value}"


def check_kw_mi_credit(steps: Steps, args) -> tuple[bool, str]:
    """The MI credit, from vLLM's prompt_logprobs, at step 1 (where kw.seed makes the two slots differ)."""
    value = steps.get(1, {}).get("kw/mi_credit")
    return finite(value) and value > 0, f"step 1 kw/mi_credit={value}"


def check_kw_update(steps: Steps, args) -> tuple[bool, str]:
    value = steps.get(2, {}).get("actor/grad_norm")
    return finite(value) and value > 0, f"step 2 actor/grad_norm={value}"


CHECKS: dict[str, Callable[[Steps, argparse.Namespace], tuple[bool, str]]] = {
    "critic": check_critic,
    "step_samples": check_step_samples,
    "skl_sd_base": check_skl_sd_base,
    "skl_sd_retry": check_skl_sd_retry,
    "kw_admitted": check_kw_admitted,
    "kw_retrieved": check_kw_retrieved,
    "kw_mi_credit": check_kw_mi_credit,
    "kw_update": check_kw_update,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("metrics", help="the run's VERL_FILE_LOGGER_PATH file")
    parser.add_argument("--run", required=True, help="the run's name, printed on every line")
    parser.add_argument("--max-diff-mean", type=float, required=True, help=f"largest {DIFF_MEAN} allowed")
    parser.add_argument("--min-pearson", type=float, required=True, help=f"smallest {PEARSON} allowed")
    parser.add_argument("--check", action="append", default=[], choices=sorted(CHECKS), help="a run-specific check")
    args = parser.parse_args(argv)
    try:
        steps = read_steps(args.metrics)
        problem = ""
    except (OSError, ValueError, KeyError) as exc:
        steps, problem = {}, f" (metrics unreadable: {exc})"
    failed = 0
    for name, check in [("logged", check_logged), ("sync", check_sync), *((c, CHECKS[c]) for c in args.check)]:
        ok, detail = check(steps, args)
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {args.run} {name} {detail}{problem}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
