"""FrozenLakeEnv: slip dynamics, agreement with gymnasium, snapshots, map generation, protocol errors."""

from __future__ import annotations

import copy
import json
import pickle
import random
from collections import Counter

import pytest

from envs import EnvNotResetError, UnknownTaskError, make_env
from envs.frozenlake import ACTIONS, FrozenLakeEnv, shortest_path_length, slip_direction_probs

gymnasium = pytest.importorskip("gymnasium")
from gymnasium.envs.toy_text.frozen_lake import MAPS, generate_random_map  # noqa: E402

OPEN_8 = ["S" + "F" * 7] + ["F" * 8] * 6 + ["F" * 7 + "G"]
LEFT_OF = {"up": "left", "left": "down", "down": "right", "right": "up"}  # 90 deg counter-clockwise
RIGHT_OF = {v: k for k, v in LEFT_OF.items()}  # 90 deg clockwise


def _slip_frequencies(slip, n=10_000, seed=3):
    """Play n valid moves with random intended actions; classify each actual move as intended/left/right."""
    env = FrozenLakeEnv(maps=[OPEN_8], slip=slip, max_steps=None, seed=seed)
    task_id = env.tasks()[0].task_id
    env.reset(task_id)
    pick = random.Random(seed)
    counts = Counter()
    episodes = 0
    for _ in range(n):
        action = pick.choice(ACTIONS)
        res = env.step(action)
        assert res.info["intended"] == action
        actual = res.info["actual"]
        counts["intended" if actual == action else "left" if actual == LEFT_OF[action] else
               "right" if actual == RIGHT_OF[action] else "other"] += 1
        if res.done:  # a plain reset would replay the same RNG stream; use a fresh episode seed
            episodes += 1
            env.reset(task_id, seed=seed + episodes)
    assert episodes < n // 20  # mostly long episodes, so few reseeds
    return {k: counts[k] / n for k in ("intended", "left", "right", "other")}


@pytest.mark.parametrize(
    "slip, expected",
    [((0.0, 2 / 3), (1 / 3, 0.0, 2 / 3)), ((1 / 3, 1 / 3), (1 / 3, 1 / 3, 1 / 3))],
)
def test_slip_statistics(slip, expected):
    freq = _slip_frequencies(slip)
    assert freq["other"] == 0.0
    for key, want in zip(("intended", "left", "right"), expected):
        assert abs(freq[key] - want) < 0.02, (key, freq)


@pytest.mark.parametrize(
    "slip, mapping",
    [((1.0, 0.0), LEFT_OF), ((0.0, 1.0), RIGHT_OF), ((0.0, 0.0), {a: a for a in ACTIONS})],
)
def test_slip_direction_convention_deterministic(slip, mapping):
    env = FrozenLakeEnv(maps=[OPEN_8], slip=slip, max_steps=None)
    env.reset(env.tasks()[0].task_id)
    for action in ACTIONS * 5:
        assert env.step(action).info["actual"] == mapping[action]


def test_slip_direction_probs():
    assert slip_direction_probs() == {
        a: {a: pytest.approx(1 / 3), LEFT_OF[a]: pytest.approx(1 / 3), RIGHT_OF[a]: pytest.approx(1 / 3)}
        for a in ACTIONS
    }
    paper = slip_direction_probs((0.0, 2 / 3))
    assert paper["up"] == {"up": pytest.approx(1 / 3), "right": pytest.approx(2 / 3)}
    assert paper["left"] == {"left": pytest.approx(1 / 3), "up": pytest.approx(2 / 3)}


def _gym_distribution(P, s, a, ncol):
    dist = Counter()
    for prob, ns, _reward, _term in P[s][a]:
        dist[divmod(ns, ncol)] += prob
    return {k: v for k, v in dist.items() if v > 0}


@pytest.mark.parametrize(
    "rows, slip, success_rate",
    [
        (MAPS["4x4"], (1 / 3, 1 / 3), 1 / 3),
        (MAPS["8x8"], (1 / 3, 1 / 3), 1 / 3),
        (generate_random_map(size=6, p=0.7, seed=11), (1 / 3, 1 / 3), 1 / 3),
        (MAPS["4x4"], (0.125, 0.125), 0.75),
    ],
)
def test_transitions_match_gymnasium_table(rows, slip, success_rate):
    env = FrozenLakeEnv(maps=[rows], slip=slip)
    task_id = env.tasks()[0].task_id
    kwargs = {"desc": rows, "is_slippery": True}
    if success_rate != 1 / 3:
        kwargs["success_rate"] = success_rate
    P = gymnasium.make("FrozenLake-v1", **kwargs).unwrapped.P
    ours_P = env.transition_table(task_id)
    nrow, ncol = len(rows), len(rows[0])
    for s in range(nrow * ncol):
        for a in range(4):
            want = _gym_distribution(P, s, a, ncol)
            got = env.transition_probs(divmod(s, ncol), ACTIONS[a], task_id)
            assert got.keys() == want.keys(), (s, a, got, want)
            for pos in want:
                assert got[pos] == pytest.approx(want[pos], abs=1e-12), (s, a, pos)
            # the gymnasium-format table: same expected reward and termination per next state
            exp_gym = sum(p * r for p, _, r, _ in P[s][a])
            exp_ours = sum(p * r for p, _, r, _ in ours_P[s][a])
            assert exp_ours == pytest.approx(exp_gym, abs=1e-12)
            assert {ns: t for _, ns, _, t in ours_P[s][a]} == {ns: t for p, ns, _, t in P[s][a] if p > 0}


def test_gymnasium_env_helper_uses_same_map():
    env = FrozenLakeEnv(num_tasks=3, seed=5)
    tid = env.tasks()[2].task_id
    g = env.gymnasium_env(tid)
    assert ["".join(ch.decode() for ch in row) for row in g.desc] == env.task(tid).metadata["map"]
    with pytest.raises(ValueError, match="symmetric"):
        FrozenLakeEnv(num_tasks=1, slip=(0, 2 / 3)).gymnasium_env("frozenlake-s4-0000")


def _play(env, actions):
    trace = []
    for action in actions:
        res = env.step(action)
        trace.append((res.observation, res.reward, res.done, dict(res.info), env.state_key()))
        if res.done:
            break
    return trace


@pytest.mark.parametrize("clone", [lambda s: s, copy.deepcopy, lambda s: pickle.loads(pickle.dumps(s)),
                                   lambda s: json.loads(json.dumps(s))])
def test_snapshot_restore_identical_future(clone):
    env = FrozenLakeEnv(maps=[OPEN_8], slip=(0.0, 2 / 3), max_steps=None, seed=1)
    env.reset(env.tasks()[0].task_id)
    pick = random.Random(0)
    _play(env, [pick.choice(ACTIONS) for _ in range(5)])
    snap = clone(env.get_state())
    future = [pick.choice(ACTIONS) for _ in range(30)]
    first = _play(env, future)
    assert len(first) >= 10  # the future actually contains slips/moves worth comparing
    env.set_state(snap)
    assert _play(env, future) == first
    # restoring into a fresh instance built with the same arguments gives the same future too
    other = FrozenLakeEnv(maps=[OPEN_8], slip=(0.0, 2 / 3), max_steps=None, seed=1)
    other.set_state(snap)
    assert _play(other, future) == first


def test_snapshot_does_not_alias_live_rng():
    env = FrozenLakeEnv(num_tasks=2, seed=0, max_steps=None)
    env.reset(env.tasks()[0].task_id)
    snap = env.get_state()
    saved = copy.deepcopy(snap)
    _play(env, ["down"] * 3)
    assert snap == saved  # stepping after get_state did not mutate the snapshot


def test_snapshot_rejects_mismatched_env():
    env = FrozenLakeEnv(num_tasks=2, seed=0)
    env.reset(env.tasks()[0].task_id)
    snap = env.get_state()
    with pytest.raises(ValueError):
        FrozenLakeEnv(num_tasks=2, seed=0, slip=(0, 2 / 3)).set_state(snap)
    with pytest.raises(UnknownTaskError):
        FrozenLakeEnv(num_tasks=2, seed=0).set_state({**snap, "task_id": "frozenlake-s4-9999"})
    with pytest.raises(EnvNotResetError):
        FrozenLakeEnv(num_tasks=1).get_state()


def test_reset_is_deterministic_and_seed_override_differs():
    env = FrozenLakeEnv(maps=[OPEN_8], max_steps=None, seed=4)
    tid = env.tasks()[0].task_id
    actions = ["right", "down"] * 20
    env.reset(tid)
    a = _play(env, actions)
    env.reset(tid)
    assert _play(env, actions) == a
    fresh = FrozenLakeEnv(maps=[OPEN_8], max_steps=None, seed=4)
    fresh.reset(tid)
    assert _play(fresh, actions) == a
    env.reset(tid, seed=4)
    assert _play(env, actions) == a  # an explicit seed equal to the env seed is the default episode
    env.reset(tid, seed=5)
    assert [t[3]["actual"] for t in _play(env, actions)] != [t[3]["actual"] for t in a]


def test_map_generation_deterministic_and_matches_gymnasium():
    def maps(seed, size=4, p=0.8, n=20):
        return [t.metadata["map"] for t in FrozenLakeEnv(size=size, p_frozen=p, num_tasks=n, seed=seed).tasks()]

    assert maps(0) == maps(0)
    assert maps(0) != maps(1)
    assert maps(1)[:19] != maps(0)[1:]  # seeds are not shifted copies of one another
    env = FrozenLakeEnv(size=8, p_frozen=0.7, num_tasks=10, seed=3)
    for i, spec in enumerate(env.tasks()):
        assert spec.task_id == f"frozenlake-s8-{i:04d}"
        assert spec.family == "frozenlake"
        assert spec.metadata["map_seed"] == FrozenLakeEnv.map_seed(3, i)
        assert spec.metadata["map"] == generate_random_map(size=8, p=0.7, seed=spec.metadata["map_seed"])
        assert spec.difficulty == shortest_path_length(spec.metadata["map"]) >= 14  # 8x8: >= 7 + 7 moves
    assert len({t.task_id for t in env.tasks()}) == 10


def test_difficulty_is_bfs_shortest_path():
    env = FrozenLakeEnv(maps=[MAPS["4x4"], ["SHG", "FFF"], ["SG"]])
    assert [t.difficulty for t in env.tasks()] == [6.0, 4.0, 1.0]


def test_goal_hole_wall_and_truncation():
    env = FrozenLakeEnv(maps=[["SG"], ["SF", "HG"], ["SFFG"]], slip=(0.0, 0.0), max_steps=2)
    goal, hole, long = (t.task_id for t in env.tasks())

    env.reset(goal)
    res = env.step("right")
    assert (res.reward, res.done, res.won, res.info["truncated"]) == (1.0, True, True, False)
    assert res.info["position"] == (0, 1) and "won" in res.observation.lower()
    with pytest.raises(EnvNotResetError):
        env.step("right")
    with pytest.raises(EnvNotResetError):
        env.admissible_actions()

    env.reset(hole)
    res = env.step("down")
    assert (res.reward, res.done, res.won) == (0.0, True, False)
    assert "hole" in res.observation.lower()

    env.reset(long)
    res = env.step("up")  # wall: stay in place
    assert res.info["position"] == (0, 0) and not res.done and res.info["actual"] == "up"
    res = env.step("left")
    assert res.done and not res.won and res.info["truncated"] and res.reward == 0.0
    assert res.info["steps"] == 2


def test_invalid_action_is_flagged_and_changes_nothing():
    env = FrozenLakeEnv(maps=[OPEN_8], seed=0, max_steps=3)
    tid = env.tasks()[0].task_id
    env.reset(tid)
    env.step("right")
    before = env.get_state()
    for bad in ["jump", "", "north", "left right", None, 2]:
        res = env.step(bad)
        assert res.invalid_action and not res.done and res.reward == 0.0 and not res.won
        assert res.info["actual"] is None
        assert "invalid" in res.observation.lower() and all(a in res.observation for a in ACTIONS)
        assert env.get_state() == before  # position, step count and RNG untouched
    # case and surrounding whitespace are accepted
    res = env.step("  DoWn \n")
    assert not res.invalid_action and res.info["intended"] == "down" and res.info["steps"] == 2


def test_protocol_errors():
    env = make_env("frozenlake", num_tasks=2)
    assert isinstance(env, FrozenLakeEnv) and env.supports_snapshot and env.name == "frozenlake"
    with pytest.raises(EnvNotResetError):
        env.step("left")
    with pytest.raises(EnvNotResetError):
        env.admissible_actions()
    with pytest.raises(EnvNotResetError):
        env.state_key()
    with pytest.raises(UnknownTaskError):
        env.reset("frozenlake-s4-0002")
    with pytest.raises(UnknownTaskError):
        env.task("nope")
    obs, info = env.reset("frozenlake-s4-0001")
    assert info["task"].task_id == "frozenlake-s4-0001" and info["position"] == (0, 0)
    assert env.admissible_actions() == ["left", "down", "right", "up"]
    rows = info["task"].metadata["map"]
    assert env.state_key() == "/".join(rows) + "|0,0"
    assert "P" + rows[0][1:] in obs.splitlines()


@pytest.mark.parametrize("slip", [(-0.1, 0.2), (0.5, 0.6), (1.2, 0.0), (float("nan"), 0.0), (0.3,), "ab"])
def test_bad_slip_raises_value_error(slip):
    with pytest.raises(ValueError, match="slip"):
        FrozenLakeEnv(num_tasks=1, slip=slip)


def test_bad_maps_raise_value_error():
    with pytest.raises(ValueError, match="no path"):
        FrozenLakeEnv(maps=[["SH", "HG"]])
    with pytest.raises(ValueError, match="exactly one S"):
        FrozenLakeEnv(maps=[["FG"]])
    with pytest.raises(ValueError, match="tiles"):
        FrozenLakeEnv(maps=[["SXG"]])


@pytest.mark.parametrize("slip, told", [((0.0, 0.0), False), ((1 / 3, 1 / 3), True), ((0.0, 2 / 3), True)])
def test_only_a_slippery_lake_tells_the_model_it_may_slide(slip, told):
    env = FrozenLakeEnv(maps=[["SF", "FG"]], slip=slip)
    task_id = env.tasks()[0].task_id
    first, _ = env.reset(task_id, seed=0)
    after_a_move = env.step("right").observation
    for observation in (first, after_a_move):
        assert ("slippery" in observation) is told and ("slide" in observation) is told
        assert observation.endswith("Actions: left, down, right, up.")
