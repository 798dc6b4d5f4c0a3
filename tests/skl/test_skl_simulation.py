"""SKL-RL localized parallel simulation on the real envs: the real trajectory is untouched by any
number of simulations (FrozenLake slip RNG included), branches are independent and reproducible,
and the aggregated context renders every branch."""

from __future__ import annotations

import random
from typing import Any

import chess
import pytest

from envs.base import SnapshotNotSupportedError, TextEnv
from envs.chess.env import ChessPuzzlesEnv
from envs.chess.policies import MixedBehaviourPolicy
from envs.frozenlake import FrozenLakeEnv
from skl_verl.skl.simulation import (
    BoardPolicy,
    RandomPolicy,
    branch_snapshot,
    render_branches,
    simulate_branches,
)

ACTIONS = ["right", "down", "down", "right", "down", "right", "up", "left", "down", "right"] * 2


class PuzzleLineStandInEngine:
    """TEST STAND-IN for Stockfish (deterministic, no binary): plays the puzzle's own line where it
    knows the position, otherwise the first legal move in UCI order."""

    def __init__(self, env: ChessPuzzlesEnv) -> None:
        self.line: dict[str, chess.Move] = {}
        for spec in env.tasks():
            puzzle = env.puzzle(spec.task_id)
            board = puzzle.start_board()
            for uci in puzzle.solution:
                move = chess.Move.from_uci(uci)
                self.line[board.fen()] = move
                board.push(move)

    def best_move(self, board: chess.Board) -> chess.Move:
        return self.line.get(board.fen()) or min(board.legal_moves, key=lambda m: m.uci())


def _fl_env() -> FrozenLakeEnv:
    return FrozenLakeEnv(size=4, num_tasks=4, seed=3, slip=(1 / 3, 1 / 3), max_steps=20)


def _play_frozenlake(env: FrozenLakeEnv, task_id: str, seed: int, between_steps) -> list[tuple[Any, ...]]:
    obs, _ = env.reset(task_id, seed=seed)
    trajectory: list[tuple[Any, ...]] = [(obs, env.position, env.state_key())]
    for t, action in enumerate(ACTIONS):
        between_steps(env, t)
        r = env.step(action)
        trajectory.append((action, r.observation, r.reward, r.done, r.won, r.info["position"], r.info["actual"], env.state_key()))
        if r.done:
            break
    return trajectory


def test_frozenlake_real_trajectory_is_identical_with_simulations_before_every_step() -> None:
    env = _fl_env()
    policy = RandomPolicy(seed=11)
    sims: list[list] = []

    def simulate(env: FrozenLakeEnv, t: int) -> None:
        before = env.get_state()
        branches = simulate_branches(env, policy, n=3, horizon=2, seed=t)
        assert env.get_state() == before  # exact, slip RNG state included
        assert len(branches) == 3 and all(1 <= len(b.steps) <= 2 for b in branches)
        sims.append(branches)

    def leaky(env: FrozenLakeEnv, t: int) -> None:  # control: put the position back but not the RNG
        snap = env.get_state()
        for _ in range(2):
            if env.step(random.Random(t).choice(ACTIONS)).done:
                break
        env.set_state({**snap, "rng_state": env.get_state()["rng_state"]})

    n_steps = n_differ = 0
    for task in env.tasks():
        for seed in range(4):
            plain = _play_frozenlake(env, task.task_id, seed, lambda e, t: None)
            with_sim = _play_frozenlake(env, task.task_id, seed, simulate)
            assert with_sim == plain, (task.task_id, seed)
            n_steps += len(plain) - 1
            n_differ += _play_frozenlake(env, task.task_id, seed, leaky) != plain
    assert n_steps >= 40 and len(sims) == n_steps
    steps = [s for branches in sims for b in branches for s in b.steps]
    assert any(s.next_state_key != s.state_key for s in steps)  # the simulations did move the env
    assert any(s.info["slipped"] for s in steps) and any(s.done for s in steps)
    assert n_differ > 0  # and the comparison would catch a perturbed RNG


def test_chess_real_trajectory_is_identical_with_simulations_before_every_step() -> None:
    env = ChessPuzzlesEnv()
    engine = PuzzleLineStandInEngine(env)
    policy = BoardPolicy(MixedBehaviourPolicy(1 / 2, seed=5, engine=engine))
    outcomes = {"won": 0, "lost": 0, "open": 0}

    def play(task_id: str, simulate: bool) -> list[tuple[Any, ...]]:
        obs, info = env.reset(task_id)
        trajectory: list[tuple[Any, ...]] = [(obs, info["fen"])]
        puzzle = env.puzzle(task_id)
        for uci in puzzle.solution[::2]:  # replay the solver's side of the line
            if simulate:
                before = env.get_state()
                branches = simulate_branches(env, policy, n=3, horizon=2, seed=0)
                assert env.get_state() == before
                for b in branches:
                    outcomes["won" if b.won else "lost" if b.done else "open"] += 1
            board = env.board
            r = env.step(board.san(chess.Move.from_uci(uci)))
            trajectory.append((r.observation, r.reward, r.done, r.won, r.info, env.state_key(), env.get_state()))
        assert trajectory[-1][3]  # the replayed solution wins
        return trajectory

    for spec in env.tasks():
        assert play(spec.task_id, simulate=True) == play(spec.task_id, simulate=False), spec.task_id
    assert outcomes["won"] > 0 and outcomes["lost"] > 0  # branches both solved and failed puzzles


def test_branches_are_independent_and_reproducible_on_frozenlake() -> None:
    env = _fl_env()
    task_id = env.tasks()[0].task_id
    env.reset(task_id, seed=0)
    always_right = lambda e, b, h: "right"  # noqa: E731

    first = simulate_branches(env, always_right, n=12, horizon=1, seed=0)
    assert len({b.final_state_key for b in first}) > 1  # each branch draws its own slip
    assert simulate_branches(env, always_right, n=12, horizon=3, seed=0)[0].steps[0] == first[0].steps[0]
    assert simulate_branches(env, always_right, n=12, horizon=1, seed=0) == first  # same seed, same branches
    assert any(
        simulate_branches(env, always_right, n=12, horizon=1, seed=s) != first for s in range(1, 4)
    )

    many = simulate_branches(env, always_right, n=600, horizon=1, seed=1)
    moves = [b.steps[0].info["actual"] for b in many]  # slip (1/3, 1/3): right, up, down equally likely
    assert all(150 <= moves.count(d) <= 250 for d in ("right", "up", "down")), {d: moves.count(d) for d in set(moves)}

    replay = simulate_branches(env, always_right, n=6, horizon=1, independent=False)
    assert len({b.final_state_key for b in replay}) == 1  # all replay the root RNG ...
    env.step("right")
    assert env.state_key() == replay[0].final_state_key  # ... which is what the real env then does

    snap = env.get_state()
    assert branch_snapshot(snap, 0, 1) != snap and branch_snapshot(snap, 0, 1)["position"] == snap["position"]
    assert branch_snapshot(snap, 0, 1) == branch_snapshot(snap, 0, 1) != branch_snapshot(snap, 0, 2)
    assert env.get_state() == snap  # branch_snapshot does not touch its input


def test_chess_game_branches_meet_independent_random_opponents() -> None:
    """Game mode keeps the opponent's generator in the snapshot, so each branch draws its own replies
    (App. D: "its own isolated instance") while the real game is untouched."""
    env = ChessPuzzlesEnv(mode="game", opponent="random")
    task = env.tasks()[0].task_id
    env.reset(task, seed=3)
    root = env.get_state()
    first = env.admissible_actions()[0]
    same_move = lambda env, branch, step: first if step == 0 else env.admissible_actions()[0]
    branches = simulate_branches(env, same_move, n=6, horizon=2, seed=11)
    replies = {tuple(s.info["opponent_reply"] for s in b.steps) for b in branches}
    assert len(replies) > 1, "every branch met the same opponent"
    assert branches == simulate_branches(env, same_move, n=6, horizon=2, seed=11)  # reproducible
    assert env.get_state() == root


def test_single_chess_branch_is_the_game_the_policy_plays_in_the_env() -> None:
    env, played = ChessPuzzlesEnv(), ChessPuzzlesEnv()
    engine = PuzzleLineStandInEngine(env)
    for spec in env.tasks()[:10]:
        env.reset(spec.task_id)
        root = env.get_state()
        (branch,) = simulate_branches(env, BoardPolicy(MixedBehaviourPolicy(1 / 3, seed=9, engine=engine)), n=1, horizon=3)
        assert env.get_state() == root
        played.reset(spec.task_id)
        policy, steps = MixedBehaviourPolicy(1 / 3, seed=9, engine=engine), []
        while len(steps) < 3 and not played.done:
            key = played.state_key()
            action = policy(played.board)
            r = played.step(action)
            steps.append((key, action, r.reward, r.done, r.won, r.observation, r.info, played.state_key()))
        assert [(s.state_key, s.action, s.reward, s.done, s.won, s.observation, s.info, s.next_state_key)
                for s in branch.steps] == steps


class FrozenLakeWithoutSnapshots(FrozenLakeEnv):
    """The real FrozenLake with its snapshot capability switched off (as e.g. ScienceWorld has none)."""

    supports_snapshot = False
    get_state = TextEnv.get_state
    set_state = TextEnv.set_state


def test_errors_restore_and_finished_root() -> None:
    env = FrozenLakeWithoutSnapshots(size=4, num_tasks=1, seed=0)
    env.reset(env.tasks()[0].task_id, seed=0)
    called = []
    with pytest.raises(SnapshotNotSupportedError):
        simulate_branches(env, lambda e, b, h: called.append(1) or "down", n=2, horizon=2)
    assert called == [] and env.position == (0, 0)

    env = _fl_env()
    env.reset(env.tasks()[1].task_id, seed=1)
    root = env.get_state()

    def crashing(e, b, h):
        if (b, h) == (1, 1):
            raise RuntimeError("policy crashed mid-branch")
        return "down"

    with pytest.raises(RuntimeError, match="mid-branch"):
        simulate_branches(env, crashing, n=3, horizon=2)
    assert env.get_state() == root
    for bad in ({"n": 0}, {"horizon": 0}, {"seed": -1}):
        with pytest.raises(ValueError):
            simulate_branches(env, RandomPolicy(0), **{"n": 2, "horizon": 2, **bad})

    while not env.step("left").done:
        pass
    ended = env.get_state()
    branches = simulate_branches(env, RandomPolicy(0), n=3, horizon=2)
    assert [b.steps for b in branches] == [(), (), ()] and env.get_state() == ended
    assert "no steps" in render_branches(branches)


def test_render_branches_shows_every_branch_and_outcome() -> None:
    env = ChessPuzzlesEnv()
    engine = PuzzleLineStandInEngine(env)
    mate_in_1 = next(s.task_id for s in env.tasks() if s.metadata["n_solver_moves"] == 1)
    env.reset(mate_in_1)
    branches = simulate_branches(env, BoardPolicy(MixedBehaviourPolicy(1 / 2, seed=1, engine=engine)), n=4, horizon=2)
    assert {b.won for b in branches} == {True, False}
    text = render_branches(branches)
    assert text.startswith("Simulated look-ahead from the current state: 4 branches, up to 2 steps each.")
    for b in branches:
        assert f"Branch {b.index + 1}:" in text and f"action {b.steps[0].action!r}" in text
        assert b.steps[0].observation.splitlines()[0] in text
    assert "won after 1 step (return 1)" in text and "episode ended without a win after 1 step (return -1)" in text
    short = render_branches(branches, max_observation_chars=12)
    assert all(len(line) <= len("    | ") + 12 for line in short.splitlines() if line.startswith("    | "))
    assert "| " not in render_branches(branches, observations=False)

    fl = _fl_env()
    fl.reset(fl.tasks()[0].task_id, seed=0)
    text = render_branches(simulate_branches(fl, lambda e, b, h: "jump" if h == 0 else "down", n=1, horizon=2))
    assert "action 'jump' -> reward 0 (invalid action, nothing happened)" in text
