"""Wall time of our ``skillrise`` advantage estimator against verl's GRPO estimators, side by side.

Run from the repository root::

    python benchmarks/advantage.py [--samples 4096] [--response-length 512] [--repeats 7]

The batch. One realistic SkillRise batch, built once with a fixed seed and shared by every
contender. A trial is one pass of the policy over a task sequence of ``K = 3`` tasks: solve at
k = 0, 1, 2 and curate at k = 0, 1 (no curate after the last task), so ``2K - 1 = 5`` samples per
trial, in the order the SkillRise agent loop emits them (solve0, curate0, solve1, curate1, solve2).
Each sequence is played by ``N = 8`` trials (the GRPO group size), so one sequence gives 40
samples. 4,096 is not a multiple of 40 (or of any ``N * (2K - 1)`` with N a power of two, since
``2K - 1`` is odd), so the batch holds ``ceil(samples / 40)`` sequences (103 for 4,096, i.e.
4,120 samples) cut to the first ``--samples`` samples: the last sequence loses its tail, as when
trials are cut short, which leaves a few groups with fewer than 8 members. Per sample:

* ``token_level_rewards`` (B, L) float32: the sample's score on its last response token, 0 elsewhere
  (what ``skl_verl.trainer.estimators.set_token_level_scores`` produces). Solve scores are binary (success with
  p = 0.4); curate scores are 0, or the -0.1 unparseable-document penalty with p = 0.1.
* ``response_mask`` (B, L) float32: right-padded, lengths uniform in [1, L].
* ``sample_fields``: numpy object arrays as in the real batch (verl turns each agent-loop extra
  field into one object column): ``skl_trajectory_id`` / ``skl_sequence_id`` strings (uuid-like
  hex), ``skl_position`` Python ints, ``skl_phase`` ``'solve'`` / ``'curate'``.

Contenders, each called exactly as the trainer calls it, on CPU:

* ``skillrise``: our estimator from verl's registry (``get_adv_estimator_fn("skillrise")`` after
  ``skl_verl.register(with_trainer=False)``) with ``config={"skillrise": {...}}`` and the
  ``sample_fields``. Its time includes building the group ids from the raw object columns, the
  per-trial discounted future solve reward of every curate sample (Eq. 6) and the group
  normalisation (Eq. 7).
* ``grpo_vectorized`` and ``grpo`` (verl's Python loop), with ``index`` = the
  ``"<sequence>|<position>|<phase>"`` group key string of each sample, so both group exactly as
  ours does. The key array is built once, outside the timing, as verl receives ``uid`` prebuilt.
  These compute plain GRPO on the raw scores (no cross-task credit), so they do less work than
  ours; they are the cost floor of a group-relative estimator on this batch.

Timing: ``time.perf_counter`` around one call, one warm-up call per contender, then ``--repeats``
rounds; each round runs every contender once, in a rotated order, and the table reports the
median per contender and its ratio to ``grpo_vectorized``. torch keeps its default thread count
(printed) unless ``--threads N`` is given. On a small CPU allotment (seen on a 2-vCPU container)
every intra-op-parallel torch call can cost ~10 ms of OpenMP hand-off even on a 4,096-element
tensor, so the default-thread times then mostly count torch calls; ``--threads 1`` shows the
arithmetic cost.

Checks (printed as OK/MISMATCH, never raised):

* On a batch where every sample is a solve sample (so each sample's return is its own score) and
  every group has 2..8 members (verl gives a singleton group its raw score, ours gives 0), our
  token-level advantages equal ``grpo_vectorized``'s within 1e-4, for binary and for Gaussian
  scores.
* On the timed batch, our advantages equal ``grpo_vectorized``'s on the solve samples that sit in
  groups of at least 2 (same grouping, same returns); curate samples differ by design (credit).
* verl's ``grpo`` and ``grpo_vectorized`` agree with each other on the timed batch.

GiGPO on a step batch (second table). The SkillRise GiGPO baseline's batch shape: tasks played by
``GIGPO_TRIALS = 24`` trials each, one sample per env step, trial lengths uniform in [3, 20] steps,
each step's anchor state drawn from 3 states per (task, depth) so that states repeat across trials
(and, at depth 0, all trials share one), step rewards 10 on the last step of a won trial (p = 0.4),
a 0.5 format penalty on 5% of steps; ``ceil(samples / mean trial length / 24)`` tasks cut to
``--samples`` samples. Fields as the step loop emits them (``skl_step_index``, ``skl_anchor_state``,
``skl_step_reward``, ``skl_step_penalty``, object columns). Contenders: ``gigpo`` (ours, from the
registry, gamma 0.95, omega 1, std) and ``grpo_vectorized`` with ``index`` = the task id (what
verl's GRPO would receive per prompt uid; it counts steps and does no step grouping, so again the
cost floor). Check: on a batch of one-step trials without format penalties and with omega = 0, gigpo
equals ``grpo_vectorized``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import skl_verl  # noqa: E402
from skl_verl.rollout import sample_fields as sf  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

POSITIONS = 3  # K
TRIALS = 8  # N, the group size
SOLVE_SUCCESS = 0.4
CURATE_PENALTY = -0.1
CURATE_PENALTY_RATE = 0.1
SKILLRISE_OPTIONS = {"gamma": 0.6, "norm": "std", "curate_weight": 1.0, "eps": 1e-6}
TOLERANCE = 1e-4
GIGPO_TRIALS = 24
GIGPO_OPTIONS = {"gamma": 0.95, "step_advantage_weight": 1.0, "norm": "std", "eps": 1e-6}


def object_column(values: list) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def hex_id(rng: np.random.Generator) -> str:
    return rng.bytes(16).hex()


def token_tensors(scores: np.ndarray, response_length: int, rng: np.random.Generator):
    """(rewards, mask): right-padded masks of random length, each score on its last valid token."""
    batch = len(scores)
    lengths = rng.integers(1, response_length + 1, size=batch)
    mask = torch.as_tensor(np.arange(response_length)[None, :] < lengths[:, None], dtype=torch.float32)
    rewards = torch.zeros(batch, response_length, dtype=torch.float32)
    rewards[torch.arange(batch), torch.as_tensor(lengths - 1)] = torch.as_tensor(scores, dtype=torch.float32)
    return rewards, mask


def group_keys(fields: dict[str, np.ndarray]) -> np.ndarray:
    return object_column(
        [f"{s}|{p}|{ph}" for s, p, ph in zip(fields[sf.SEQUENCE_ID], fields[sf.POSITION], fields[sf.PHASE])]
    )


def skillrise_batch(samples: int, response_length: int, seed: int):
    """The timed batch: sequences x trials x (solve k=0..K-1, curate k=0..K-2), cut to ``samples``."""
    rng = np.random.default_rng(seed)
    per_sequence = TRIALS * (2 * POSITIONS - 1)
    trial_ids, sequence_ids, positions, phases, scores = [], [], [], [], []
    for _ in range(math.ceil(samples / per_sequence)):
        sequence = hex_id(rng)
        for _ in range(TRIALS):
            trial = hex_id(rng)
            for k in range(POSITIONS):
                slots = [("solve", float(rng.random() < SOLVE_SUCCESS))]
                if k < POSITIONS - 1:
                    slots.append(("curate", CURATE_PENALTY if rng.random() < CURATE_PENALTY_RATE else 0.0))
                for phase, score in slots:
                    trial_ids.append(trial)
                    sequence_ids.append(sequence)
                    positions.append(k)
                    phases.append(phase)
                    scores.append(score)
    fields = {
        sf.TRAJECTORY_ID: object_column(trial_ids[:samples]),
        sf.SEQUENCE_ID: object_column(sequence_ids[:samples]),
        sf.POSITION: object_column(positions[:samples]),
        sf.PHASE: object_column(phases[:samples]),
    }
    rewards, mask = token_tensors(np.asarray(scores[:samples]), response_length, rng)
    return rewards, mask, fields


def solve_only_batch(response_length: int, seed: int, gaussian: bool):
    """Every sample a solve sample; groups (sequence, position) of 2..8 trials, no singletons."""
    rng = np.random.default_rng(seed)
    trial_ids, sequence_ids, positions, phases, scores = [], [], [], [], []
    for _ in range(64):
        sequence = hex_id(rng)
        for _ in range(int(rng.integers(2, TRIALS + 1))):
            trial = hex_id(rng)
            for k in range(POSITIONS):
                trial_ids.append(trial)
                sequence_ids.append(sequence)
                positions.append(k)
                phases.append("solve")
                scores.append(float(rng.normal()) if gaussian else float(rng.random() < SOLVE_SUCCESS))
    fields = {
        sf.TRAJECTORY_ID: object_column(trial_ids),
        sf.SEQUENCE_ID: object_column(sequence_ids),
        sf.POSITION: object_column(positions),
        sf.PHASE: object_column(phases),
    }
    rewards, mask = token_tensors(np.asarray(scores), response_length, rng)
    return rewards, mask, fields


def contenders(rewards, mask, fields, index) -> dict[str, Callable[[], tuple[torch.Tensor, torch.Tensor]]]:
    skillrise = core_algos.get_adv_estimator_fn("skillrise")
    vectorized = core_algos.get_adv_estimator_fn("grpo_vectorized")
    loop = core_algos.get_adv_estimator_fn("grpo")
    config = {"skillrise": dict(SKILLRISE_OPTIONS)}
    verl_kwargs = {"epsilon": 1e-6, "norm_adv_by_std_in_grpo": True, "config": None}
    return {
        "skillrise (ours)": lambda: skillrise(
            token_level_rewards=rewards, response_mask=mask, config=config, sample_fields=fields
        ),
        "grpo_vectorized (verl)": lambda: vectorized(
            token_level_rewards=rewards, response_mask=mask, index=index, **verl_kwargs
        ),
        "grpo (verl, loop)": lambda: loop(token_level_rewards=rewards, response_mask=mask, index=index, **verl_kwargs),
    }


def time_contenders(calls: dict[str, Callable], repeats: int) -> dict[str, list[float]]:
    names = list(calls)
    for name in names:  # warm-up
        calls[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            start = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - start)
    return times


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.to(torch.float64) - b.to(torch.float64)).abs().max()) if a.numel() else 0.0


def verdict(diff: float) -> str:
    return "OK" if diff <= TOLERANCE else "MISMATCH"


def run_checks(rewards, mask, fields, index, response_length: int, seed: int) -> None:
    skillrise = core_algos.get_adv_estimator_fn("skillrise")
    vectorized = core_algos.get_adv_estimator_fn("grpo_vectorized")
    loop = core_algos.get_adv_estimator_fn("grpo")
    config = {"skillrise": dict(SKILLRISE_OPTIONS)}
    print(f"\nchecks (tolerance {TOLERANCE:g} on token-level advantages):")
    for gaussian in (False, True):
        r, m, f = solve_only_batch(response_length, seed + 1 + gaussian, gaussian)
        ours, _ = skillrise(token_level_rewards=r, response_mask=m, config=config, sample_fields=f)
        theirs, _ = vectorized(token_level_rewards=r, response_mask=m, index=group_keys(f))
        diff = max_diff(ours, theirs)
        kind = "gaussian" if gaussian else "binary"
        print(f"  all-solve batch ({len(r)} samples, groups 2..8, {kind} scores): "
              f"skillrise vs grpo_vectorized max |diff| = {diff:.2e}  {verdict(diff)}")
    ours, _ = skillrise(token_level_rewards=rewards, response_mask=mask, config=config, sample_fields=fields)
    theirs, _ = vectorized(token_level_rewards=rewards, response_mask=mask, index=index)
    _, inverse, counts = np.unique(index.astype(str), return_inverse=True, return_counts=True)
    solve = torch.as_tensor((fields[sf.PHASE] == "solve") & (counts[inverse] >= 2))
    diff = max_diff(ours[solve], theirs[solve])
    print(f"  timed batch, {int(solve.sum())} solve samples in groups >= 2: "
          f"skillrise vs grpo_vectorized max |diff| = {diff:.2e}  {verdict(diff)}")
    curate = torch.as_tensor(fields[sf.PHASE] == "curate")
    print(f"  timed batch, {int(curate.sum())} curate samples: skillrise vs grpo_vectorized max |diff| = "
          f"{max_diff(ours[curate], theirs[curate]):.2e}  (expected to differ: ours adds the discounted future "
          "solve rewards)")
    classic, _ = loop(token_level_rewards=rewards, response_mask=mask, index=index)
    diff = max_diff(classic, theirs)
    print(f"  timed batch: verl grpo vs grpo_vectorized max |diff| = {diff:.2e}  {verdict(diff)}")


def gigpo_step_batch(samples: int, response_length: int, seed: int, max_steps: int = 20):
    """The GiGPO timed batch (see the module docstring); ``max_steps=1`` gives one-step trials."""
    rng = np.random.default_rng(seed)
    mean_length = (3 + max_steps) / 2 if max_steps >= 3 else 1
    columns: dict[str, list] = {k: [] for k in (sf.TRAJECTORY_ID, sf.SEQUENCE_ID, sf.POSITION, sf.PHASE, sf.STEP_INDEX,
                                                sf.ANCHOR_STATE, sf.STEP_REWARD, sf.STEP_PENALTY)}
    scores = []
    for _ in range(math.ceil(samples / mean_length / GIGPO_TRIALS)):
        task = hex_id(rng)
        for _ in range(GIGPO_TRIALS):
            trial, won = hex_id(rng), bool(rng.random() < SOLVE_SUCCESS)
            length = int(rng.integers(3, max_steps + 1)) if max_steps >= 3 else max_steps
            for k in range(length):
                state = 0 if k == 0 else int(rng.integers(0, 3))
                reward = 10.0 * won if k == length - 1 else 0.0
                for key, value in ((sf.TRAJECTORY_ID, trial), (sf.SEQUENCE_ID, task), (sf.POSITION, 0), (sf.PHASE, "act"),
                                   (sf.STEP_INDEX, k), (sf.ANCHOR_STATE, f"{task}:{k}:{state}"), (sf.STEP_REWARD, reward),
                                   (sf.STEP_PENALTY, 0.5 if rng.random() < 0.05 else 0.0)):
                    columns[key].append(value)
                scores.append(10.0 * won)
    fields = {k: object_column(v[:samples]) for k, v in columns.items()}
    rewards, mask = token_tensors(np.asarray(scores[:samples]), response_length, rng)
    return rewards, mask, fields


def run_gigpo_benchmark(args) -> None:
    gigpo = core_algos.get_adv_estimator_fn("gigpo")
    vectorized = core_algos.get_adv_estimator_fn("grpo_vectorized")
    rewards, mask, fields = gigpo_step_batch(args.samples, args.response_length, args.seed)
    index = fields[sf.SEQUENCE_ID]
    config = {"gigpo": dict(GIGPO_OPTIONS)}
    _, step_group_sizes = np.unique(np.stack([index.astype(str), fields[sf.ANCHOR_STATE].astype(str)]), axis=1,
                                    return_counts=True)
    print(f"\nGiGPO step batch: {len(index)} step samples x {args.response_length} tokens; {len(set(index))} tasks x "
          f"{GIGPO_TRIALS} trials ({len(set(fields[sf.TRAJECTORY_ID]))} trials), {len(step_group_sizes)} step groups "
          f"({int((step_group_sizes == 1).sum())} singletons, largest {step_group_sizes.max()})")
    calls = {
        "gigpo (ours)": lambda: gigpo(token_level_rewards=rewards, response_mask=mask, config=config, sample_fields=fields),
        "grpo_vectorized (verl)": lambda: vectorized(token_level_rewards=rewards, response_mask=mask, index=index,
                                                     epsilon=1e-6, norm_adv_by_std_in_grpo=True, config=None),
    }
    medians = {name: statistics.median(t) * 1e3 for name, t in time_contenders(calls, args.repeats).items()}
    base = medians["grpo_vectorized (verl)"]
    print(f"median of {args.repeats} (after 1 warm-up), interleaved:")
    for name, ms in medians.items():
        print(f"  {name:<24} | {ms:>9.2f} ms | {ms / base:>7.2f}x grpo_vectorized")
    r, m, f = gigpo_step_batch(2048, args.response_length, args.seed + 3, max_steps=1)
    # gigpo takes a format penalty off the score before normalising (as verl-agent does), which verl's GRPO
    # has no field for: the equality holds on a batch without penalties
    f[sf.STEP_PENALTY] = object_column([0.0] * len(f[sf.STEP_PENALTY]))
    ours, _ = gigpo(token_level_rewards=r, response_mask=m, sample_fields=f, config={"gigpo": {**GIGPO_OPTIONS, "step_advantage_weight": 0.0}})
    theirs, _ = vectorized(token_level_rewards=r, response_mask=m, index=f[sf.SEQUENCE_ID])
    diff = max_diff(ours, theirs)
    print(f"  check: one-step trials, omega 0: gigpo vs grpo_vectorized max |diff| = {diff:.2e}  {verdict(diff)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--response-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: leave torch's)")
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes: tiny sizes, one repeat; checks it runs (CI)")
    args = parser.parse_args()
    if args.quick:
        args.samples, args.response_length, args.repeats = 256, 32, 1
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    skl_verl.register(with_trainer=False)
    rewards, mask, fields = skillrise_batch(args.samples, args.response_length, args.seed)
    index = group_keys(fields)
    phases = fields[sf.PHASE]
    _, counts = np.unique(index.astype(str), return_counts=True)
    print(f"torch {torch.__version__}, torch.get_num_threads() = {torch.get_num_threads()}"
          f"{'' if args.threads is None else ' (--threads)'}, device cpu")
    print(f"batch: {len(phases)} samples x {args.response_length} tokens; K={POSITIONS} positions, "
          f"N={TRIALS} trials/sequence, {len(set(fields[sf.SEQUENCE_ID]))} sequences "
          f"({len(set(fields[sf.TRAJECTORY_ID]))} trials); {int((phases == 'solve').sum())} solve + "
          f"{int((phases == 'curate').sum())} curate samples; {len(counts)} groups "
          f"(sizes {counts.min()}..{counts.max()}, {int((counts < TRIALS).sum())} short)")

    times = time_contenders(contenders(rewards, mask, fields, index), args.repeats)
    medians = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    base = medians["grpo_vectorized (verl)"]
    width = max(len(n) for n in medians)
    print(f"\nmedian of {args.repeats} (after 1 warm-up), interleaved:")
    print(f"{'estimator':<{width}} | {'median ms':>9} | {'ratio vs grpo_vectorized':>24}")
    print(f"{'-' * width}-+-{'-' * 9}-+-{'-' * 24}")
    for name, ms in medians.items():
        print(f"{name:<{width}} | {ms:>9.2f} | {ms / base:>23.2f}x")

    run_checks(rewards, mask, fields, index, args.response_length, args.seed)
    run_gigpo_benchmark(args)


if __name__ == "__main__":
    main()
