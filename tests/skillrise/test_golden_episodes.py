"""Golden episodes: SkillRise and its Table 1 baselines played end to end with a scripted policy.

A scripted policy (tests/golden.py ``ScriptedPolicy``: it answers by request id, never decides) plays a
short, fixed sequence of turns through verl's agent-loop worker with the recipe's REAL loop entry
(``skillrise_<env>``, ``step_<env>``) on the real env (ALFWorld games made offline, the WebShop stand-in,
ScienceWorld's JVM); the recipe's REGISTERED estimator then runs as the trainer's advantage step does
(tests/loop_helpers.py ``advantage_step``, with the recipe config's ``algorithm`` section). Every number
the tests expect is derived by hand in the comments and with plain arithmetic, never with our estimators.

The released rules these episodes encode:

* one training sample per policy turn and one per curation; reward 10 * won;
* the loop's turn cap counts policy turns (ALFWorld 10, WebShop 12, ScienceWorld 30); an unparseable reply
  uses a turn, is penalised 0.5 on its own row, and its last 30 characters go to the env as the action;
* row score s = R - 0.5 * [row unparseable] (solve rows, R = 10 * won of the trial's task) and, for the
  curation after task k, s = sum_{j>k} 0.6^(j-k) R_j - 0.5 * [no valid <skill> block];
* ``skillrise`` (norm mean): A = s - mean over the group's trials of each trial's FIRST row score;
* ``skl_grpo``: A = (s - mean) / (std + 1e-6) over EVERY step row of the task group (unbiased std);
* ``gigpo`` (mean norm): A = (s - mean over every row of the task group)
  + (G - mean of G over the task group's rows that acted from the same state), G the row's 0.95-discounted
  return of env-step rewards (10 at the winning step), a state reached once giving 0;
* ``skl_rloo``: A = s - mean of the OTHER trials' first-row scores;
* baseline mini-batches: 128 step samples.
"""

from __future__ import annotations

import copy
import importlib.util
import shutil

import pytest
from golden import (
    BAD,
    BAD_SKILL,
    BAD_TAIL,
    GOOD_SKILL,
    act,
    by_slot,
    in_order,
    mean,
    play,
    recipe_config,
    rows_of,
    unbiased_std,
)
from loop_helpers import advantage_step

from skl_verl.rollout.data import env_rows
from skl_verl.skillrise import evaluate
from skl_verl.skillrise.build_dataset import sequence_rows
from skl_verl.skillrise.prompts import EMPTY_DOCUMENT
from skl_verl.skillrise.sequences import TaskSequence

APPROX = dict(abs=1e-4)
SKILL_TEXT = GOOD_SKILL.removeprefix("<skill>").removesuffix("</skill>")


def assert_rows(rows, expected, what):
    """``expected``: {(session, position, phase): [value per row]}; compares the count of rows and each value."""
    got = {slot: [getattr(r, what) for r in rs] for slot, rs in by_slot(rows).items()}
    assert set(got) == set(expected), (what, sorted(got), sorted(expected))
    for slot, values in expected.items():
        assert len(got[slot]) == len(values), (what, slot, got[slot], values)
        assert got[slot] == pytest.approx(values, **APPROX), (what, slot, got[slot], values)


def evaluation_counts(data):
    """What evaluate.py reports for these solve rows: tasks (never step rows) played and won."""
    records = evaluate.solve_records(data)
    return records, evaluate.task_records(records), evaluate.success_rate(records), evaluate.pass_at_k(records, 2)


# ==================================================================================== ALFWorld

PICK = "pick_and_place_simple-CellPhone-None-Bed-301/trial_T20190000_000000_000001"
PICK_CLOSED = "pick_and_place_simple-KeyChain-None-Safe-301/trial_T20190000_000000_000002"
# The generator's expert plans (ALFWorld's walkthroughs) of the two Pick games.
WALK_PICK = ["go to desk 1", "take cellphone 1 from desk 1", "go to bed 1", "move cellphone 1 to bed 1"]
WALK_CLOSED = ["go to drawer 2", "open drawer 2", "take keychain 1 from drawer 2", "go to safe 1", "open safe 1",
               "move keychain 1 to safe 1"]


@pytest.fixture(scope="module")
def alfworld_kwargs(tmp_path_factory):
    pytest.importorskip("alfworld", reason="alfworld not installed")
    pytest.importorskip("fast_downward", reason="fast-downward-textworld not installed (textworld[pddl])")
    from alfworld_games import load_generator

    out = tmp_path_factory.mktemp("alfworld_data")
    load_generator().make_games(out)
    # run_alfworld.sh's env kwargs (split, the released turn cap of 10 steps), on the generated games.
    return {"data_dir": str(out), "split": "train", "max_steps": 10}


def test_alfworld_walkthroughs_are_what_the_scripts_play(alfworld_kwargs):
    from envs import make_env

    env = make_env("alfworld", **alfworld_kwargs)
    try:
        assert env.walkthrough(PICK) == WALK_PICK and env.walkthrough(PICK_CLOSED) == WALK_CLOSED
        assert env.task(PICK).family == env.task(PICK_CLOSED).family == "Pick"
    finally:
        env.close()


# SkillRise on ALFWorld: one sequence (PICK, then PICK_CLOSED), two trials.
#   trial 0: solve0 = desk, BAD, take, bed, move        -> 5 rows, won (row 1 unparseable, not the first)
#            curate0 = a valid <skill> document         -> 1 row
#            solve1 = the 6-step walkthrough            -> 6 rows, won
#   trial 1: solve0 = BAD, then "look" ...              -> 10 rows (the turn cap counts the BAD turn), lost
#            curate0 = no <skill> block (malformed)     -> 1 row, the document stays empty
#            solve1 = "look" ...                        -> 10 rows (turn cap), lost
ALFWORLD_SKILLRISE_SCRIPT = {
    (0, "solve0"): [act(WALK_PICK[0]), BAD, *map(act, WALK_PICK[1:])],
    (0, "curate0"): [GOOD_SKILL],
    (0, "solve1"): [act(a) for a in WALK_CLOSED],
    (1, "solve0"): [BAD, act("look")],
    (1, "curate0"): [BAD_SKILL],
    (1, "solve1"): [act("look")],
}


def test_skillrise_alfworld_golden_episode(tmp_path, tiny_model_dir, alfworld_kwargs):
    sequence = TaskSequence("pick-golden", "Pick", (PICK, PICK_CLOSED), (4.0, 6.0))
    rows = sequence_rows("alfworld", alfworld_kwargs, [sequence])
    data, policy = play(tmp_path, tiny_model_dir, rows, "skillrise_alfworld", n=2, script=ALFWORLD_SKILLRISE_SCRIPT)

    # (2) samples: one per policy turn, one per curation; 5 + 1 + 6 + 10 + 1 + 10 = 33.
    assert {k: len(v) for k, v in policy.prompts.items()} == {
        (0, "solve0"): 5, (0, "curate0"): 1, (0, "solve1"): 6, (1, "solve0"): 10, (1, "curate0"): 1, (1, "solve1"): 10}
    assert len(data) == 33

    # (1) a solve step's prompt: task 2, step 3 of trial 0 (after the curated document).
    step3 = policy.prompts[(0, "solve1")][2]
    positions = in_order(step3, "Skill document:", SKILL_TEXT, "Task", "Your task is to: put", "Your last 2 of 2 steps",
                         "1. go to drawer 2 ->", "2. open drawer 2 ->", "Current observation (step 3)",
                         "Admissible actions:")
    assert -1 not in positions, (positions, step3)
    assert step3.count("Admissible actions:") == 1  # only the current observation's actions
    assert EMPTY_DOCUMENT not in step3 and "put a cellphone in bed" not in step3  # only the document crosses tasks
    # The unparseable reply was a turn: its last 30 characters went to the env, which answered as for any
    # inadmissible action ("Nothing happens."), and the next prompt shows exactly that step.
    after_bad = policy.prompts[(0, "solve0")][2]
    assert -1 not in in_order(after_bad, EMPTY_DOCUMENT, "Your last 2 of 2 steps", "1. go to desk 1 ->",
                              f"2. {BAD_TAIL} -> Nothing happens.", "Current observation (step 3)",
                              "Admissible actions:"), after_bad
    # step_history 15 > the 10-turn cap: trial 1's last turn shows all 9 earlier steps.
    last = policy.prompts[(1, "solve1")][-1]
    assert "Your last 9 of 9 steps" in last and "Current observation (step 10)" in last, last[-3000:]
    assert EMPTY_DOCUMENT in policy.prompts[(1, "solve1")][0]  # the malformed curation kept the empty document

    # (1) a curation's prompt: document, task, outcome, the attempt's steps (action -> result), instruction.
    curate = policy.prompts[(0, "curate0")][0]
    assert -1 not in in_order(curate, "Current skill document:", EMPTY_DOCUMENT, "Most recent task:",
                              "put a cellphone in bed", "Outcome: success", "Last 5 of 5 steps", "1. go to desk 1 ->",
                              f"2. {BAD_TAIL} -> Nothing happens.", "5. move cellphone 1 to bed 1 ->",
                              "Write the revised skill document inside <skill>"), curate
    assert "Outcome: failure" in policy.prompts[(1, "curate0")][0]
    assert "Last 10 of 10 steps" in policy.prompts[(1, "curate0")][0]

    metrics = advantage_step(data, recipe_config("skillrise_alfworld"))
    rows = rows_of(data)
    # (3) scores. Solve rows: 10 * won - 0.5 on an unparseable row. Curations: 0.6 * R_1 - 0.5 if malformed:
    # trial 0: 0.6 * 10 = 6.0; trial 1: 0.6 * 0 - 0.5 = -0.5.
    scores = {
        (0, 0, "solve"): [10, 9.5, 10, 10, 10], (0, 0, "curate"): [6.0], (0, 1, "solve"): [10] * 6,
        (1, 0, "solve"): [-0.5] + [0] * 9, (1, 0, "curate"): [-0.5], (1, 1, "solve"): [0] * 10,
    }
    # Advantages, norm mean (skillrise_base.yaml). Group (sequence, 0, solve): first-row scores 10 and -0.5,
    # mean 4.75. Group (sequence, 0, curate): 6.0 and -0.5, mean 2.75. Group (sequence, 1, solve): 10 and 0, mean 5.
    advantages = {
        (0, 0, "solve"): [5.25, 4.75, 5.25, 5.25, 5.25], (0, 0, "curate"): [3.25], (0, 1, "solve"): [5.0] * 6,
        (1, 0, "solve"): [-5.25] + [-4.75] * 9, (1, 0, "curate"): [-3.25], (1, 1, "solve"): [-5.0] * 10,
    }
    assert_rows(rows, scores, "score")
    assert_rows(rows, advantages, "advantage")

    # (4) evaluation counts tasks: 4 tasks played (2 trials x 2 positions), 2 won -> 0.5 (the 31 solve rows,
    # 11 of them won, would read 0.355); Pass@1 = Pass@2 = 1/2 (trial 0 solved task 1 on its first try).
    records, tasks, rate, pass_k = evaluation_counts(data)
    assert len(records) == 31 and len(tasks) == 4
    assert rate == pytest.approx(0.5) and pass_k == pytest.approx({1: 0.5, 2: 0.5})
    assert metrics["env/solve_success_rate@0"] == pytest.approx(0.5)
    assert metrics["env/solve_success_rate@1"] == pytest.approx(0.5)
    assert metrics["curate/error_rate"] == pytest.approx(0.5)


# Baselines on ALFWorld (step_alfworld, one task PICK, three trials), played once for GRPO, GiGPO and RLOO.
#   trial 0: desk, BAD, take, bed, move  -> 5 rows, won at row 4 (row 1 unparseable, not the first)
#   trial 1: BAD, desk, take, bed, move  -> 5 rows, won at row 4 (row 0 unparseable: its first row)
#   trial 2: "look" x 10                 -> 10 rows, lost at the turn cap
BASELINE_SCRIPT = {
    (0, "solve0"): [act(WALK_PICK[0]), BAD, *map(act, WALK_PICK[1:])],
    (1, "solve0"): [BAD, *map(act, WALK_PICK)],
    (2, "solve0"): [act("look")],
}
# Row scores s = 10 * won - 0.5 * [unparseable]:
BASELINE_SCORES = {
    (0, 0, "act"): [10, 9.5, 10, 10, 10],
    (1, 0, "act"): [9.5, 10, 10, 10, 10],
    (2, 0, "act"): [0] * 10,
}
EVERY_ROW = [s for slot in BASELINE_SCORES.values() for s in slot]
# mean over the 20 step rows: (49.5 + 49.5 + 0) / 20 = 4.95; unbiased std = sqrt(490.45 / 19) = 5.080666
assert mean(EVERY_ROW) == pytest.approx(4.95) and unbiased_std(EVERY_ROW) == pytest.approx(5.080666, abs=1e-5)


@pytest.fixture(scope="module")
def baseline_batch(tmp_path_factory, tiny_model_dir, alfworld_kwargs):
    rows = env_rows("alfworld", alfworld_kwargs, task_ids=[PICK])
    data, policy = play(tmp_path_factory.mktemp("baselines"), tiny_model_dir, rows, "step_alfworld", n=3,
                        script=BASELINE_SCRIPT)
    return data, policy


def baseline_rows(baseline_batch, config_name):
    data = copy.deepcopy(baseline_batch[0])
    advantage_step(data, recipe_config(config_name, ["env=alfworld"]))
    return rows_of(data)


def test_baseline_alfworld_episodes_rows_and_scores(baseline_batch):
    data, policy = baseline_batch
    assert {k: len(v) for k, v in policy.prompts.items()} == {(0, "solve0"): 5, (1, "solve0"): 5, (2, "solve0"): 10}
    rows = rows_of(data)
    assert len(rows) == 20 and [r.step for r in rows] == [*range(5), *range(5), *range(10)]
    assert_rows(rows, BASELINE_SCORES, "score")
    # step_history 15: trial 2's last prompt (step 10) shows its 9 earlier steps, task first.
    last = policy.prompts[(2, "solve0")][-1]
    assert -1 not in in_order(last, "Task (as first observed):", "Your task is to: put a cellphone in bed",
                              "Your last 9 of 9 steps", "1. look ->", "9. look ->", "Current observation (step 10)",
                              "Admissible actions:"), last[-3000:]
    # trial 1's first reply was unparseable: its second prompt shows that step as the env answered it.
    assert f"1. {BAD_TAIL} -> Nothing happens." in policy.prompts[(1, "solve0")][1]
    _, tasks, rate, _ = evaluation_counts(data)
    assert len(tasks) == 3 and rate == pytest.approx(2 / 3)  # tasks, not the 10 won of 20 rows


def test_grpo_alfworld_golden_episode(baseline_batch):
    rows = baseline_rows(baseline_batch, "grpo")
    # GRPO as released: mean 4.95 and std 5.080666 over EVERY step row of the task group.
    m, sd = 4.95, 5.080666
    expected = {slot: [(s - m) / (sd + 1e-6) for s in scores] for slot, scores in BASELINE_SCORES.items()}
    # e.g. trial 0 row 0: (10 - 4.95) / 5.080666 = 0.99395; trial 1 row 0: (9.5 - 4.95) / 5.080666 = 0.89555;
    # trial 2: -4.95 / 5.080666 = -0.97428.
    assert expected[(0, 0, "act")][0] == pytest.approx(0.99395, abs=1e-4)
    assert_rows(rows, expected, "advantage")


def test_rloo_alfworld_golden_episode(baseline_batch):
    rows = baseline_rows(baseline_batch, "rloo")
    # First-row scores: trial 0 10, trial 1 9.5 (its first reply was unparseable), trial 2 0.
    # Baselines: trial 0 (9.5 + 0) / 2 = 4.75; trial 1 (10 + 0) / 2 = 5; trial 2 (10 + 9.5) / 2 = 9.75.
    expected = {
        (0, 0, "act"): [5.25, 4.75, 5.25, 5.25, 5.25],
        (1, 0, "act"): [4.5, 5.0, 5.0, 5.0, 5.0],
        (2, 0, "act"): [-9.75] * 10,
    }
    assert_rows(rows, expected, "advantage")


def test_gigpo_alfworld_golden_episode(baseline_batch):
    data, _ = baseline_batch
    rows = baseline_rows(baseline_batch, "gigpo")
    # Anchor states, by hand. The first valid command of a game changes its facts (ALFWorld marks the
    # start as left), later "look"s do not, and an unparseable reply (an inadmissible command) changes
    # nothing. So the state a row acts from is (walkthrough steps done, any valid command yet):
    #   trial 0: desk (0,F)  BAD (1,T)  take (1,T)  bed (2,T)  move (3,T)
    #   trial 1: BAD (0,F)   desk (0,F) take (1,T)  bed (2,T)  move (3,T)
    #   trial 2: look (0,F)  look x 9 (0,T)
    state = {
        (0, 0, "act"): ["0F", "1T", "1T", "2T", "3T"],
        (1, 0, "act"): ["0F", "0F", "1T", "2T", "3T"],
        (2, 0, "act"): ["0F"] + ["0T"] * 9,
    }
    keys = {}
    for slot, rs in by_slot(rows).items():
        for r, label in zip(rs, state[slot]):
            keys.setdefault(label, set()).add(r.anchor)
    assert all(len(v) == 1 for v in keys.values()) and len({next(iter(v)) for v in keys.values()}) == len(keys), keys
    # G = sum_{t' >= t} 0.95^(t' - t) r_t', r = 10 at the winning step (row 4 of trials 0 and 1):
    g = [10 * 0.95**4, 10 * 0.95**3, 10 * 0.95**2, 10 * 0.95, 10.0]  # 8.1450625, 8.57375, 9.025, 9.5, 10
    G = {(0, 0, "act"): g, (1, 0, "act"): g, (2, 0, "act"): [0.0] * 10}
    # Step groups: "0F": trial 0 row 0 (8.1450625), trial 1 rows 0-1 (8.1450625, 8.57375), trial 2 row 0 (0):
    # mean 6.215953; "1T": trial 0 rows 1-2 (8.57375, 9.025), trial 1 row 2 (9.025): mean 8.874583;
    # "0T": trial 2 rows 1-9, all 0; "2T", "3T": trials 0 and 1 with equal G: A^S = 0.
    groups = {}
    for slot in state:
        for label, value in zip(state[slot], G[slot]):
            groups.setdefault(label, []).append(value)
    assert mean(groups["0F"]) == pytest.approx(6.215953, abs=1e-5) and mean(groups["1T"]) == pytest.approx(8.874583, abs=1e-5)
    # A = (s - 4.95) + 1.0 * (G - mean of G over the row's step group); e.g. trial 1 row 1: (10 - 4.95) +
    # (8.57375 - 6.215953) = 7.407797; trial 2 row 0: -4.95 - 6.215953 = -11.165953.
    expected = {
        slot: [(s - 4.95) + (G[slot][t] - mean(groups[state[slot][t]])) for t, s in enumerate(scores)]
        for slot, scores in BASELINE_SCORES.items()
    }
    assert expected[(1, 0, "act")][1] == pytest.approx(7.407797, abs=1e-5)
    assert expected[(2, 0, "act")][0] == pytest.approx(-11.165953, abs=1e-5)
    assert_rows(rows, expected, "advantage")


# ================================================================== recipe settings the episodes assume


@pytest.mark.parametrize("env,cap", [("alfworld", 10), ("webshop", 12), ("sciworld", 30)])
def test_turn_caps_count_policy_turns(env, cap):
    """The loops' own max_turns is the released turn cap (policy turns, unparseable ones included)."""
    from skl_verl.trainer.registry import agent_loop_entries

    entries = agent_loop_entries()
    caps = {name: entries[name]["max_turns"] for name in (f"skillrise_{env}", f"step_{env}")}
    assert caps == {f"skillrise_{env}": cap, f"step_{env}": cap}


@pytest.mark.parametrize("name", ["grpo", "gigpo", "rloo", "ppo"])
def test_baseline_mini_batches_hold_128_step_samples(name):
    """verl 0.9.1's trainer updates the actor on mini-batches of ``ppo_mini_batch_size * rollout.n`` rows
    (``RayPPOTrainer._update_actor``; the critic likewise), and every row of a step loop is one step sample."""
    from skl_verl.trainer.registry import estimator_options

    config = recipe_config(name, ["env=alfworld"])
    mini_batch, n = int(config.actor_rollout_ref.actor.ppo_mini_batch_size), int(config.actor_rollout_ref.rollout.n)
    assert (mini_batch, n, mini_batch * n) == (mini_batch, n, 128)
    if name == "ppo":
        assert int(config.critic.ppo_mini_batch_size) * n == 128
    if name == "gigpo":
        assert estimator_options(config.algorithm, "gigpo").norm == "mean"  # LaMer's Qwen3-4B GiGPO script
    skillrise = recipe_config("skillrise_alfworld")
    assert skillrise.actor_rollout_ref.actor.ppo_mini_batch_size * skillrise.actor_rollout_ref.rollout.n == 128
    assert estimator_options(skillrise.algorithm, "skillrise").norm == "mean"
