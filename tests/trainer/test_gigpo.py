"""GiGPO (skl_verl.trainer.gigpo): hand-computed step returns, step groups and advantages, and the
same numbers as a plain-loop transcription of the released ``core_gigpo.py`` (verl-agent's, as LaMer and the
SkillRise release ship it): every step row counts in its episode group, penalties come off the score first."""

import math
import statistics
from collections import defaultdict

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

import skl_verl
from skl_verl.rollout import sample_fields as sf
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from skl_verl.trainer.gigpo import discounted_step_returns, gigpo_estimator

TOKENS = 3
TOL = 1e-5
"""The estimator hands verl float32 token advantages."""


def column(values):
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def step_batch(steps):
    """steps: (task, trial, step index, anchor state, step reward, trial score[, penalty]) per sample.
    Returns (token_level_rewards, response_mask, sample_fields) as the trainer hands them over."""
    steps = [s if len(s) == 7 else (*s, 0.0) for s in steps]
    fields = {
        sf.SEQUENCE_ID: column([s[0] for s in steps]),
        sf.TRAJECTORY_ID: column([s[1] for s in steps]),
        sf.POSITION: column([0] * len(steps)),
        sf.PHASE: column(["act"] * len(steps)),
        sf.STEP_INDEX: column([s[2] for s in steps]),
        sf.ANCHOR_STATE: column([s[3] for s in steps]),
        sf.STEP_REWARD: column([s[4] for s in steps]),
        sf.STEP_PENALTY: column([s[6] for s in steps]),
    }
    rewards = torch.zeros(len(steps), TOKENS)
    rewards[:, -1] = torch.tensor([s[5] for s in steps])
    return rewards, torch.ones(len(steps), TOKENS), fields


def run_gigpo(steps, **options):
    rewards, mask, fields = step_batch(steps)
    options = {"gamma": 0.95, "step_advantage_weight": 1.0, "norm": "std", "eps": 1e-6, "count": "steps", **options}
    advantages, returns = get_adv_estimator_fn("gigpo")(rewards, mask, config={"gigpo": options}, sample_fields=fields)
    assert torch.equal(advantages, advantages[:, :1].expand(-1, TOKENS))  # one value per sample, on every token
    return advantages[:, 0].double(), returns[:, 0].double()


def test_discounted_step_returns_by_hand():
    # Trial 0 wins on its third step, trial 1 gets 1 on its first; rows are out of step order.
    rewards = torch.tensor([10.0, 0.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    trials = torch.tensor([0, 0, 1, 0, 1])
    steps = torch.tensor([2, 0, 0, 1, 1])
    assert discounted_step_returns(rewards, trials, steps, 0.5).tolist() == [10.0, 2.5, 1.0, 5.0, 0.0]
    assert discounted_step_returns(rewards, trials, steps, 1.0).tolist() == [10.0, 10.0, 1.0, 10.0, 0.0]
    assert discounted_step_returns(rewards, trials, steps, 0.0).tolist() == rewards.tolist()
    # Long trials stay finite and exact (no gamma^-t rescaling).
    far = discounted_step_returns(torch.tensor([0.0, 1.0]), torch.tensor([0, 0]), torch.tensor([0, 1000]), 0.5)
    assert far.tolist() == [0.5**1000, 1.0] and far[0] > 0


def test_two_samples_on_one_step_are_refused():
    with pytest.raises(ValueError, match="same skl_step_index"):
        discounted_step_returns(torch.zeros(2), torch.tensor([0, 0]), torch.tensor([1, 1]), 0.9)


# Task T, three trials, gamma 0.5. Trial a steps on the spot once (s1 twice), so its own steps share
# a group; b never reaches s1/s2 and ends in s3, a state nobody else sees.
#   a: s0 s1 s1 s2, rewards 0 0 0 10 -> returns 1.25 2.5 5 10, score 10
#   b: s0 s3,       rewards 0 0      -> returns 0 0,           score 0
#   c: s0 s1 s2,    rewards 0 0 10   -> returns 2.5 5 10,      score 10
# Task U has a state also called s0, which must not join T's s0 group:
#   d: s0,          reward 10        -> return 10,             score 10
#   e: s0 s0,       rewards 0 0      -> returns 0 0,           score 0
HAND_EXAMPLE = [
    ("T", "a", 0, "s0", 0.0, 10.0), ("T", "a", 1, "s1", 0.0, 10.0), ("T", "a", 2, "s1", 0.0, 10.0), ("T", "a", 3, "s2", 10.0, 10.0),
    ("T", "b", 0, "s0", 0.0, 0.0), ("T", "b", 1, "s3", 0.0, 0.0),
    ("T", "c", 0, "s0", 0.0, 10.0), ("T", "c", 1, "s1", 0.0, 10.0), ("T", "c", 2, "s2", 10.0, 10.0),
    ("U", "d", 0, "s0", 10.0, 10.0),
    ("U", "e", 0, "s0", 0.0, 0.0), ("U", "e", 1, "s0", 0.0, 0.0),
]
HAND_RETURNS = [1.25, 2.5, 5.0, 10.0, 0.0, 0.0, 2.5, 5.0, 10.0, 10.0, 0.0, 0.0]


def test_mean_norm_by_hand():
    advantages, returns = run_gigpo(HAND_EXAMPLE, gamma=0.5, norm="mean")
    assert returns.tolist() == HAND_RETURNS
    # Episode, every step row counted: T rows 10 x 7 (a, c), 0 x 2 (b) -> mean 70/9; U rows 10, 0, 0 -> 10/3.
    episode = [20 / 9] * 4 + [-70 / 9] * 2 + [20 / 9] * 3 + [20 / 3] + [-10 / 3] * 2
    # Steps: T/s0 {a 1.25, b 0, c 2.5} mean 1.25; T/s1 {a 2.5, a 5, c 5} mean 25/6; T/s2 {10, 10};
    # T/s3 {b} alone -> 0; U/s0 {d 10, e 0, e 0} mean 10/3.
    step = [0.0, 2.5 - 25 / 6, 5 - 25 / 6, 0.0, -1.25, 0.0, 1.25, 5 - 25 / 6, 0.0, 20 / 3, -10 / 3, -10 / 3]
    assert advantages.tolist() == pytest.approx([e + s for e, s in zip(episode, step)], abs=TOL)
    half, _ = run_gigpo(HAND_EXAMPLE, gamma=0.5, norm="mean", step_advantage_weight=0.5)
    assert half.tolist() == pytest.approx([e + 0.5 * s for e, s in zip(episode, step)], abs=TOL)
    episode_only, _ = run_gigpo(HAND_EXAMPLE, gamma=0.5, norm="mean", step_advantage_weight=0.0)
    assert episode_only.tolist() == pytest.approx(episode, abs=TOL)
    # count: trials -- one score per trial: T {10, 0, 10} mean 20/3, U {10, 0} mean 5.
    trials_only, _ = run_gigpo(HAND_EXAMPLE, gamma=0.5, norm="mean", step_advantage_weight=0.0, count="trials")
    assert trials_only.tolist() == pytest.approx([10 / 3] * 4 + [-20 / 3] * 2 + [10 / 3] * 3 + [5.0] + [-5.0] * 2, abs=TOL)


def test_std_norm_by_hand():
    eps = 1e-6
    advantages, _ = run_gigpo(HAND_EXAMPLE, gamma=0.5, norm="std", eps=eps)
    # Unbiased std over step rows: T {10 x 7, 0 x 2} -> sqrt((7 (20/9)^2 + 2 (70/9)^2) / 8); U {10, 0, 0} -> 10/sqrt(3).
    t_std, u_std = math.sqrt((7 * (20 / 9) ** 2 + 2 * (70 / 9) ** 2) / 8), 10 / math.sqrt(3)
    s0_std = 1.25  # {1.25, 0, 2.5}: deviations 0, -1.25, 1.25 -> sqrt(3.125 / 2)
    s1_std = math.sqrt(((2.5 - 25 / 6) ** 2 + 2 * (5 - 25 / 6) ** 2) / 2)
    u0_std = math.sqrt(((20 / 3) ** 2 + 2 * (10 / 3) ** 2) / 2)
    t_win, t_loss = (20 / 9) / (t_std + eps), (-70 / 9) / (t_std + eps)
    u_win, u_loss = (20 / 3) / (u_std + eps), (-10 / 3) / (u_std + eps)
    s1_low, s1_high = (2.5 - 25 / 6) / (s1_std + eps), (5 - 25 / 6) / (s1_std + eps)
    s0_dev, u0_dev = 1.25 / (s0_std + eps), (10 / 3) / (u0_std + eps)
    expected = [
        t_win + 0.0, t_win + s1_low, t_win + s1_high,
        t_win + 0.0,  # s2: equal returns -> 0
        t_loss - s0_dev, t_loss + 0.0,  # s3: singleton -> 0
        t_win + s0_dev, t_win + s1_high, t_win + 0.0,
        u_win + 2 * u0_dev, u_loss - u0_dev, u_loss - u0_dev,
    ]
    assert advantages.tolist() == pytest.approx(expected, abs=TOL)


def test_gamma_changes_only_the_step_part():
    # With gamma 1 every step of a winning trial returns 10: T/s0 {10, 0, 10}, T/s1 {10, 10, 10}.
    advantages, returns = run_gigpo(HAND_EXAMPLE[:9], gamma=1.0, norm="mean")
    assert returns.tolist() == [10.0] * 4 + [0.0, 0.0] + [10.0] * 3
    assert advantages.tolist() == pytest.approx(
        [20 / 9 + 10 / 3, 20 / 9, 20 / 9, 20 / 9, -70 / 9 - 20 / 3, -70 / 9, 20 / 9 + 10 / 3, 20 / 9, 20 / 9], abs=TOL
    )


def test_format_penalty_comes_off_the_score_before_normalisation():
    # a's second step is unparseable: its episode score is 9.5, so T's row mean drops by 0.5/9; the step
    # part (returns carry no penalty) is unchanged, and U is untouched.
    penalised = [(*HAND_EXAMPLE[0], 0.0), (*HAND_EXAMPLE[1], 0.5), *HAND_EXAMPLE[2:]]
    base, _ = run_gigpo(HAND_EXAMPLE, gamma=0.5, norm="mean")
    ours, _ = run_gigpo(penalised, gamma=0.5, norm="mean")
    shift = 0.5 / 9
    assert (base - ours).tolist() == pytest.approx([-shift, 0.5 - shift] + [-shift] * 7 + [0.0] * 3, abs=TOL)


def test_unkeyed_steps_join_no_group():
    # Two trials whose anchor states could not be read: unique keys, so A^S = 0 for all their steps.
    steps = [("T", "a", 0, "unkeyed:1", 0.0, 1.0), ("T", "b", 0, "unkeyed:2", 1.0, 1.0 - 1.0)]
    advantages, _ = run_gigpo(steps, norm="mean")
    assert advantages.tolist() == pytest.approx([0.5, -0.5], abs=TOL)


def test_episode_samples_are_refused_with_the_field_named():
    rewards, mask, fields = step_batch(HAND_EXAMPLE[:2])
    fields[sf.STEP_INDEX] = column([None, None])
    with pytest.raises(ValueError, match="skl_step_index.*sample_granularity: step"):
        get_adv_estimator_fn("gigpo")(rewards, mask, config=None, sample_fields=fields)
    del fields[sf.ANCHOR_STATE]
    with pytest.raises(ValueError, match="skl_anchor_state"):
        get_adv_estimator_fn("gigpo")(rewards, mask, config=None, sample_fields=fields)


def test_registered_with_verl_and_its_options_checked():
    skl_verl.register(with_trainer=False)
    fn = core_algos.get_adv_estimator_fn("gigpo")
    assert fn.__wrapped__ is gigpo_estimator
    rewards, mask, fields = step_batch(HAND_EXAMPLE)
    defaults, _ = fn(token_level_rewards=rewards, response_mask=mask, config={}, sample_fields=fields)
    explicit, _ = fn(token_level_rewards=rewards, response_mask=mask, sample_fields=fields,
                     config={"gigpo": {"gamma": 0.95, "step_advantage_weight": 1.0, "norm": "mean", "eps": 1e-6,
                                       "count": "steps"}})
    assert torch.equal(defaults, explicit)
    with pytest.raises(ValueError, match="algorithm.gigpo.gamma"):
        fn(token_level_rewards=rewards, response_mask=mask, sample_fields=fields, config={"gigpo": {"gamma": 1.5}})


# ---- the released semantics, transcribed in plain loops (core_gigpo.py, mean_norm / mean_std_norm) ----

def verl_agent_gigpo(uid, traj, step, anchor, step_rewards, scores, gamma, weight, remove_std, eps=1e-6, cross_all_data=True):
    """Per sample: compute_step_discounted_returns -> episode_norm_reward (every row of a uid when
    ``cross_all_data``, its default; else one score per (uid, traj); a group of one: mean 0, std 1) ->
    build_step_group (identical anchors within a uid) -> step_norm_reward (group of one: its own mean)
    -> A^E + w * A^S. ``scores`` are the rows' penalised scores."""
    n = len(uid)
    returns = [0.0] * n
    for t in set(traj):
        rows = sorted((i for i in range(n) if traj[i] == t), key=lambda i: step[i])
        running = 0.0
        for i in reversed(rows):
            running = step_rewards[i] + gamma * running
            returns[i] = running

    def normalise(values, groups):
        members = defaultdict(list)
        for g, v in zip(groups, values):
            members[g].append(v)
        return members

    seen, episode_scores = set(), defaultdict(list)
    for i in range(n):
        if (uid[i], traj[i]) not in seen:
            episode_scores[uid[i]].append(scores[i])
            if not cross_all_data:
                seen.add((uid[i], traj[i]))
    episode = []
    for i in range(n):
        group = episode_scores[uid[i]]
        mean, std = (0.0, 1.0) if len(group) == 1 else (statistics.mean(group), statistics.stdev(group))
        episode.append(scores[i] - mean if remove_std else (scores[i] - mean) / (std + eps))
    step_groups = [(uid[i], anchor[i]) for i in range(n)]
    members = normalise(returns, step_groups)
    step_adv = []
    for i in range(n):
        group = members[step_groups[i]]
        mean, std = (statistics.mean(group), 1.0) if len(group) == 1 else (statistics.mean(group), statistics.stdev(group))
        step_adv.append(returns[i] - mean if remove_std else (returns[i] - mean) / (std + eps))
    return [e + weight * s for e, s in zip(episode, step_adv)]


@pytest.mark.parametrize("count", ["steps", "trials"])
@pytest.mark.parametrize("norm", ["mean", "std"])
def test_matches_the_released_semantics_on_a_small_batch(norm, count):
    rng = np.random.default_rng(7)
    steps = []
    for task in ("T", "U"):
        for trial in range(4):
            length = int(rng.integers(1, 6))
            rewards = [float(rng.choice([0.0, 0.0, 1.0, 10.0])) for _ in range(length)]
            anchors = [str(rng.choice(["x", "y", "z", "v", "w", "q"])) for _ in range(length)]
            # an unparseable step (not the first) costs 0.5 off its own score
            penalties = [0.5 if k and rng.random() < 0.3 else 0.0 for k in range(length)]
            steps += [(task, f"{task}{trial}", k, anchors[k], rewards[k], sum(rewards), penalties[k]) for k in range(length)]
    assert any(s[6] for s in steps)
    order = rng.permutation(len(steps))
    steps = [steps[i] for i in order]  # batch order is not step order
    sizes = defaultdict(int)
    for s in steps:
        sizes[(s[0], s[3])] += 1
    assert 1 in sizes.values() and max(sizes.values()) >= 3  # singletons and real groups both occur
    assert len({(s[1], s[3]) for s in steps}) < len(steps)  # some trial revisits a state
    ours, _ = run_gigpo(steps, gamma=0.9, step_advantage_weight=0.7, norm=norm, count=count)
    # The released code dedups by batch order; a trial's first step (penalty-free here) is its reference.
    first_step_first = sorted(range(len(steps)), key=lambda i: steps[i][2])
    reference = verl_agent_gigpo(
        *([steps[i][c] for i in first_step_first] for c in range(5)), [steps[i][5] - steps[i][6] for i in first_step_first],
        gamma=0.9, weight=0.7, remove_std=norm == "mean", cross_all_data=count == "steps",
    )
    reference = [reference[first_step_first.index(i)] for i in range(len(steps))]
    assert ours.tolist() == pytest.approx(reference, abs=TOL)
