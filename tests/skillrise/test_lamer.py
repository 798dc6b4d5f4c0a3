"""The LaMer baseline as LaMer's code defines it (github.com/mlbio-epfl/LaMer):

* ``metarl_rollout_loop.py``: after a failed attempt one reflection; a won trial plays no further attempt;
  returns run backwards over all attempts, 0.95 per step inside an attempt and 0.6 from an attempt's last
  step to the next attempt's first; a reflection returns the next attempt's first-step return;
* ``env_manager.py`` / ``prompt.py``: every later attempt's prompt holds all earlier reflections, in order;
  all reflections of a task share one anchor;
* ``core_gigpo.py`` + ``ray_trainer.py``: one group per task over every row (steps and reflections of all
  trials and attempts), the 0.5 format penalty taken off the row's score before the mean.

Every expected number below is worked out by hand from those rules.
"""

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer
from verl.workers.rollout.replica import TokenOutput

from envs import make_env
from loop_helpers import advantage_step, packaged_loops
from skl_verl.rollout import sample_fields as sf
from skl_verl.rollout.data import write_parquet
from skl_verl.skillrise.build_dataset import sequence_rows
from skl_verl.skillrise.lamer_credit import LamerCreditOptions, lamer_estimator
from skl_verl.skillrise.sequences import retry_sequences
from skl_verl.trainer.inprocess_rollout import AgentRollout, compose_config

# ---------------------------------------------------------------------------------------------------
# (a) the estimator on a hand-built batch: 2 tasks x 3 trials x up to 3 attempts.
# Row: (task, trial, attempt, phase, step index, anchor, step reward, trial score, format penalty)
# A trial's score is 10 on every step row of its winning attempt, 0 otherwise; a reflection's score is
# 0 (-0.5 when unparseable, already in its score, as our loop emits it).
ROWS = [
    # task A, trial a0: wins attempt 0 in two steps (s0 -> s1 -> goal).
    ("A", "a0", 0, "solve", 0, "s0", 0.0, 10.0, 0.0),
    ("A", "a0", 0, "solve", 1, "s1", 10.0, 10.0, 0.0),
    # a1: attempt 0 fails on an unparseable reply (penalty 0.5); reflects; attempt 1 wins from s0.
    ("A", "a1", 0, "solve", 0, "s0", 0.0, 0.0, 0.5),
    ("A", "a1", 0, "curate", None, None, None, 0.0, None),
    ("A", "a1", 1, "solve", 0, "s0", 10.0, 10.0, 0.0),
    # a2: fails attempts 0 and 1 (its second reflection unparseable: -0.5), wins attempt 2.
    ("A", "a2", 0, "solve", 0, "s0", 0.0, 0.0, 0.0),
    ("A", "a2", 0, "curate", None, None, None, 0.0, None),
    ("A", "a2", 1, "solve", 0, "s0", 0.0, 0.0, 0.0),
    ("A", "a2", 1, "curate", None, None, None, -0.5, None),
    ("A", "a2", 2, "solve", 0, "s0", 10.0, 10.0, 0.0),
    # task B, trial b0: fails all three attempts from t0.
    ("B", "b0", 0, "solve", 0, "t0", 0.0, 0.0, 0.0),
    ("B", "b0", 0, "curate", None, None, None, 0.0, None),
    ("B", "b0", 1, "solve", 0, "t0", 0.0, 0.0, 0.0),
    ("B", "b0", 1, "curate", None, None, None, 0.0, None),
    ("B", "b0", 2, "solve", 0, "t0", 0.0, 0.0, 0.0),
    # b1: wins at once.
    ("B", "b1", 0, "solve", 0, "t0", 10.0, 10.0, 0.0),
    # b2: attempt 0 walks t0 -> t1 and fails; reflects; attempt 1 wins from t0.
    ("B", "b2", 0, "solve", 0, "t0", 0.0, 0.0, 0.0),
    ("B", "b2", 0, "solve", 1, "t1", 0.0, 0.0, 0.0),
    ("B", "b2", 0, "curate", None, None, None, 0.0, None),
    ("B", "b2", 1, "solve", 0, "t0", 10.0, 10.0, 0.0),
]

# Returns G, backwards over each trial (0.95 inside an attempt, 0.6 into the next attempt's first step):
G = [
    0.95 * 10, 10,               # a0: 9.5, 10
    0.6 * 10, 10, 10,            # a1: attempt 0's step -> attempt 1's first step; the reflection: 10
    0.6 * (0.6 * 10), 0.6 * 10, 0.6 * 10, 10, 10,  # a2: 3.6, refl 6, 6, refl 10, 10
    0, 0, 0, 0, 0,               # b0
    10,                          # b1
    0.95 * (0.6 * 10), 0.6 * 10, 10, 10,  # b2: 5.7, 6, refl 10, 10
]
# Episode part: row score minus the penalty, minus the mean over EVERY row of the task (10 rows each).
SCORES = [10, 10, -0.5, 0, 10, 0, 0, 0, -0.5, 10, 0, 0, 0, 0, 0, 10, 0, 0, 0, 10]
MEAN_A = (10 + 10 - 0.5 + 0 + 10 + 0 + 0 + 0 - 0.5 + 10) / 10  # 3.9
MEAN_B = (10 + 10) / 10  # 2.0
# Step part: G minus the mean G of its (task, anchor) group; reflections of a task form one group.
S0 = (9.5 + 6 + 10 + 3.6 + 6 + 10) / 6     # task A, anchor s0 (every attempt starts there)
RA = (10 + 6 + 10) / 3                      # task A's three reflections
T0 = (0 + 0 + 0 + 10 + 5.7 + 10) / 6        # task B, anchor t0
RB = (0 + 0 + 10) / 3                       # task B's three reflections
STEP_MEAN = [S0, 10, S0, RA, S0, S0, RA, S0, RA, S0, T0, RB, T0, RB, T0, T0, T0, 6, RB, T0]  # s1, t1: alone
EXPECTED = [
    (score - (MEAN_A if i < 10 else MEAN_B)) + (g - step_mean)
    for i, (score, g, step_mean) in enumerate(zip(SCORES, G, STEP_MEAN))
]


def estimate(rows, options=LamerCreditOptions()):
    columns = list(zip(*rows))
    fields = {
        sf.SEQUENCE_ID: np.array(columns[0], dtype=object),
        sf.TRAJECTORY_ID: np.array(columns[1], dtype=object),
        sf.POSITION: np.array(columns[2], dtype=object),
        sf.PHASE: np.array(columns[3], dtype=object),
        sf.STEP_INDEX: np.array(columns[4], dtype=object),
        sf.ANCHOR_STATE: np.array(columns[5], dtype=object),
        sf.STEP_REWARD: np.array(columns[6], dtype=object),
        sf.STEP_PENALTY: np.array(columns[8], dtype=object),
    }
    width = 3
    mask = torch.ones(len(rows), width)
    rewards = torch.zeros(len(rows), width)
    rewards[:, -1] = torch.tensor(columns[7])  # the score sits on the last response token
    advantages, returns = lamer_estimator(rewards, mask, fields, options)
    return advantages[:, 0].double(), returns[:, 0].double()


def test_lamer_estimator_matches_the_hand_derived_credit():
    advantages, returns = estimate(ROWS)
    assert returns.tolist() == pytest.approx(G, abs=1e-5)
    assert advantages.tolist() == pytest.approx(EXPECTED, abs=1e-5)
    # Spot checks that pin the rules the old baseline broke:
    # the unparseable step's penalty enters before the task mean (after it, its A^E would be
    # -0.5 - 3.95 = -4.45 instead of -0.5 - 3.9), and its group is the whole task, not its attempt.
    assert advantages[2].item() == pytest.approx((-0.5 - 3.9) + (6 - S0), abs=1e-5)
    # a reflection's return is the next attempt's first-step return, compared with all reflections.
    assert advantages[6].item() == pytest.approx((0 - 3.9) + (6 - RA), abs=1e-5)


def test_lamer_estimator_does_not_depend_on_row_order():
    order = np.random.default_rng(0).permutation(len(ROWS))
    advantages, returns = estimate([ROWS[i] for i in order])
    assert advantages.tolist() == pytest.approx([EXPECTED[i] for i in order], abs=1e-5)
    assert returns.tolist() == pytest.approx([G[i] for i in order], abs=1e-5)


def test_lamer_std_normalisation_divides_by_the_row_std():
    only_b = ROWS[10:]
    advantages, _ = estimate(only_b, LamerCreditOptions(norm="std", step_advantage_weight=0.0))
    scores = torch.tensor(SCORES[10:], dtype=torch.float64)
    assert advantages.tolist() == pytest.approx(((scores - 2.0) / (scores.std() + 1e-6)).tolist(), abs=1e-5)


def test_lamer_estimator_rejects_a_play_row_without_its_step():
    rows = [("A", "a0", 0, "solve", None, "s0", 0.0, 10.0, 0.0)]
    with pytest.raises(ValueError, match="skl_step_index"):
        estimate(rows)


# ---------------------------------------------------------------------------------------------------
# (b) a golden rollout through verl's agent-loop worker with a scripted policy.
MAP = ["HSFG"]  # one row: 'right' twice reaches G, 'left' falls into H
ENV_KWARGS = {"maps": [MAP], "slip": [0.0, 0.0], "max_steps": 10}
BAD = "I am not sure what to do."
REFLECT_BAD = "No idea."
# Per trial (session id): each attempt's replies, in order, and the reply to each reflection request.
PLAN = {
    0: {"solve0": ["right", "right"]},                                       # wins attempt 0
    1: {"solve0": ["left"], "curate0": "go right", "solve1": ["right", "right"]},
    2: {"solve0": [BAD, "left"], "curate0": REFLECT_BAD, "solve1": ["left"], "curate1": "never left",
        "solve2": ["right", "right"]},
    3: {"solve0": ["left"], "curate0": "try right", "solve1": ["left"], "curate1": "right, really",
        "solve2": ["left"]},
}


class ScriptedPolicy:
    """Stands in for the rollout server: trial and phase come from the request id, the turn from a count."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.prompts: dict[tuple[int, str], list[str]] = {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        trial, phase = request_id.rsplit(":", 1)
        session = int(trial.rsplit("_", 1)[1])
        seen = self.prompts.setdefault((session, phase), [])
        seen.append(self.tokenizer.decode(prompt_ids))
        reply = PLAN[session][phase]
        if phase.startswith("solve"):
            move = reply[len(seen) - 1]
            text = move if move == BAD else f"<action>{move}</action>"
        else:
            text = reply if reply == REFLECT_BAD else f"<reflection>{reply}</reflection>"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids))


@pytest.fixture
def golden(tmp_path, tiny_model_dir):
    from omegaconf import OmegaConf

    env = make_env("frozenlake", **ENV_KWARGS)
    rows = sequence_rows("frozenlake", ENV_KWARGS, retry_sequences([env.tasks()[0]], 3))
    train = write_parquet(rows, tmp_path / "attempts.parquet")
    loops = packaged_loops()
    (entry,) = [e for e in loops if e.name == "lamer_alfworld"]  # its settings; FrozenLake as the env
    OmegaConf.save(loops, tmp_path / "loops.yaml")
    config = compose_config([
        f"actor_rollout_ref.model.path={tiny_model_dir}", f"data.train_files={train}", f"data.val_files={train}",
        "data.train_batch_size=1", "data.max_prompt_length=1024", "data.max_response_length=64",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={tmp_path / 'loops.yaml'}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=lamer_alfworld", "algorithm.adv_estimator=lamer",
    ])
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    policy = ScriptedPolicy(tokenizer)
    rollout = AgentRollout(config, policy, tokenizer, train)
    data = rollout.rollout(next(rollout.batches(1)), step=1, n=4)
    advantage_step(data, config)
    return data, policy, entry


def test_lamer_loop_shows_every_earlier_reflection_in_order(golden):
    _, policy, entry = golden
    assert (entry.reflections, entry.stop_after_win, entry.sample_granularity) == ("accumulate", True, "step")
    first = policy.prompts[(3, "solve0")][0]
    second = policy.prompts[(3, "solve1")][0]
    third = policy.prompts[(3, "solve2")][0]
    assert "Your reflection after it" not in first and "This is attempt" not in first
    assert "Attempt 1 failed. Your reflection after it:\ntry right" in second and "right, really" not in second
    assert third.index("try right") < third.index("right, really"), "reflections must accumulate, oldest first"
    assert "This is attempt 3" in third
    # An unparseable reflection stays as an empty entry; the next one is still added after it.
    trial2 = policy.prompts[(2, "solve2")][0]
    assert "Attempt 1 failed. Your reflection after it:\n(no reflection was written)" in trial2
    assert "Attempt 2 failed. Your reflection after it:\nnever left" in trial2
    # A reflection looks back at its own attempt only: no earlier reflection in its prompt.
    assert "try right" not in policy.prompts[(3, "curate1")][0]


def test_lamer_loop_stops_after_a_win_and_credits_every_sample(golden):
    data, policy, _ = golden
    assert not any(key in policy.prompts for key in [(0, "curate0"), (0, "solve1"), (1, "curate1"), (1, "solve2")])
    fields = data.non_tensor_batch
    session = [int(t.rsplit("_", 1)[1]) for t in fields[sf.TRAJECTORY_ID]]
    # (trial, attempt, phase, step index; -1 for a reflection, whose step index is only a filler)
    key = [(s, int(p), str(ph), -1 if ph == "curate" else int(i))
           for s, p, ph, i in zip(session, fields[sf.POSITION], fields[sf.PHASE], fields[sf.STEP_INDEX])]
    # trial 0: 2 steps; 1: 1 + refl + 2; 2: 2 + refl + 1 + refl + 2; 3: 1 + refl + 1 + refl + 1.
    assert len(data) == 2 + 4 + 7 + 5 == len(set(key))
    # Reward 10 on the winning step; a step row scores its attempt's 10 * won, a reflection 0 or -0.5.
    won_attempts = {(0, 0), (1, 1), (2, 2)}
    expected_score = {k: (0.0 if k[2] == "curate" else 10.0 * ((k[0], k[1]) in won_attempts)) for k in key}
    expected_score[(2, 0, "curate", -1)] = -0.5
    penalty = {k: 0.5 if k == (2, 0, "solve", 0) else 0.0 for k in key}
    scores = dict(zip(key, np.asarray(fields[sf.SCORE], dtype=float)))
    assert scores == pytest.approx(expected_score)
    # G per row, by hand (0.95 per step, 0.6 into the next attempt, a reflection: next attempt's first step).
    g = {
        (0, 0, "solve", 0): 9.5, (0, 0, "solve", 1): 10,
        (1, 0, "solve", 0): 0.6 * 9.5, (1, 0, "curate", -1): 9.5, (1, 1, "solve", 0): 9.5, (1, 1, "solve", 1): 10,
        (2, 0, "solve", 0): 0.95 * 0.6 * 0.6 * 9.5, (2, 0, "solve", 1): 0.6 * 0.6 * 9.5,
        (2, 0, "curate", -1): 0.6 * 9.5, (2, 1, "solve", 0): 0.6 * 9.5, (2, 1, "curate", -1): 9.5,
        (2, 2, "solve", 0): 9.5, (2, 2, "solve", 1): 10,
        (3, 0, "solve", 0): 0, (3, 0, "curate", -1): 0, (3, 1, "solve", 0): 0, (3, 1, "curate", -1): 0,
        (3, 2, "solve", 0): 0,
    }
    # Anchors: every attempt starts on S (0,1); 'right' from S reaches F (0,2); trial 2's unparseable reply
    # leaves it on S, so its second step shares S's group too.
    on_f = {(0, 0, "solve", 1), (1, 1, "solve", 1), (2, 2, "solve", 1)}
    anchor = {k: "reflection" if k[2] == "curate" else "F" if k in on_f else "S" for k in key}
    mean_e = sum(expected_score[k] - penalty[k] for k in key) / len(key)
    groups = {a: [g[k] for k in key if anchor[k] == a] for a in set(anchor.values())}
    expected_adv = {k: (expected_score[k] - penalty[k] - mean_e) + (g[k] - np.mean(groups[anchor[k]])) for k in key}
    mask = data.batch["response_mask"].sum(-1)
    advantages = dict(zip(key, (data.batch["advantages"].sum(-1) / mask).tolist()))
    returns = dict(zip(key, (data.batch["returns"].sum(-1) / mask).tolist()))
    assert returns == pytest.approx(g, abs=1e-4)
    assert advantages == pytest.approx(expected_adv, abs=1e-4)
    # Validation reports LaMer's success_rate[k]: solved within the first k + 1 attempts.
    solved_by = {0: [1, 1, 1], 1: [0, 1, 1], 2: [0, 0, 1], 3: [0, 0, 0]}
    for row, trial in enumerate(session):
        assert [fields[f"solved_by_attempt@{k}"][row] for k in range(3)] == solved_by[trial]


def test_a_bad_reflection_mode_names_the_key():
    from skl_verl.options import ConfigError
    from skl_verl.trainer.loop_checks import check_loop_entry
    from skl_verl.trainer.registry import agent_loop_entries

    entry = dict(agent_loop_entries()["lamer_alfworld"])
    check_loop_entry("agent loop 'lamer_alfworld'", entry)
    with pytest.raises(ConfigError, match="'lamer_alfworld'.reflections is 'append'"):
        check_loop_entry("agent loop 'lamer_alfworld'", {**entry, "reflections": "append"})
