"""SKL-RL's localized parallel simulation (paper §3.2, Algorithm 2 line 5, Appendix D).

At a real state ``s_t`` the agent anchors the simulator (``env.get_state()``), spawns ``N`` branches
from that root, rolls each out for up to ``H`` steps with a behaviour policy (a heuristic, e.g. the
chess ``MixedBehaviourPolicy``, or the model's own candidates), gathers the histories into the
aggregated experience ``τ^H_N(s_t)`` and finally restores the root, so the real episode continues
exactly as if no simulation had happened. ``render_branches`` turns ``τ^H_N(s_t)`` into the text the
bootstrapping prompt for ``ẑ_{s_t}`` reads.

A policy is any callable ``policy(env, branch_index, step_index) -> action str``; it sees the env
in the branch's current state (so it can call ``admissible_actions()``, ``state_key()`` or, for
chess, ``env.board``). ``BoardPolicy`` adapts a chess ``board -> SAN`` policy
(``MixedBehaviourPolicy``, ``StockfishPolicy``) and ``RandomPolicy`` picks uniformly among the
admissible actions.

Randomness: the root snapshot holds the env's RNG (FrozenLake's slip generator), and the real env
gets exactly that snapshot back at the end, so simulations never perturb the real trajectory.
Between branches, ``independent=True`` (the default) gives each branch its own env RNG: a snapshot
with a numpy ``rng_state`` (FrozenLake's format) has it replaced, per branch, by a fresh generator
of the same kind seeded from ``(seed, branch index, the root RNG state)`` -- so the N branches are
independent draws of the dynamics ("its own isolated instance", App. D), deterministic given the
root state and ``seed``. With ``independent=False`` every branch replays the root RNG, so equal
actions give equal outcomes (a pure what-if comparison of actions). Envs without RNG state in the
snapshot (chess puzzles: the line is fixed) are unaffected; their branches differ only through the
policy.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.base import EnvNotResetError, SnapshotNotSupportedError, TextEnv

Policy = Callable[[TextEnv, int, int], str]


@dataclass(frozen=True)
class SimStep:
    """One simulated step: ``action`` taken in ``state_key``, leading to ``next_state_key``."""

    state_key: str
    action: str
    observation: str
    reward: float
    done: bool
    won: bool
    next_state_key: str
    invalid_action: bool = False
    info: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Branch:
    """One branch ``τ^H_n(s_t)`` of a localized parallel simulation rooted at ``root_key``."""

    index: int
    root_key: str
    horizon: int
    steps: tuple[SimStep, ...]

    @property
    def actions(self) -> list[str]:
        return [s.action for s in self.steps]

    @property
    def total_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    @property
    def done(self) -> bool:
        return bool(self.steps) and self.steps[-1].done

    @property
    def won(self) -> bool:
        return bool(self.steps) and self.steps[-1].won

    @property
    def final_state_key(self) -> str:
        """``s_{t+H}`` of this branch (where bootstrapping reads ``z_{s_{t+H}}``)."""
        return self.steps[-1].next_state_key if self.steps else self.root_key


def _check_positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be >= 1, got {value}")
    return int(value)


_PCG_STATE_LAYOUT = ("PCG64", "PCG64DXSM")  # state: {"state": 128-bit int, "inc": odd 128-bit int}
_MASK128 = (1 << 128) - 1


def _numpy_rng_state(snapshot: Any) -> dict[str, Any] | None:
    if not isinstance(snapshot, dict):
        return None
    rng_state = snapshot.get("rng_state")
    if not isinstance(rng_state, dict) or not isinstance(rng_state.get("bit_generator"), str):
        return None
    if getattr(np.random, rng_state["bit_generator"], None) is None:
        return None
    return rng_state


def _branch_snapshots(snapshot: Any, seed: int) -> Callable[[int], Any]:
    """``branch -> snapshot`` for independent branches (see ``branch_snapshot``); the root RNG state
    is hashed once per simulation, not once per branch."""
    rng_state = _numpy_rng_state(snapshot)
    if rng_state is None:
        return lambda branch: snapshot
    name = rng_state["bit_generator"]
    root_digest = hashlib.blake2b(
        json.dumps(rng_state, sort_keys=True, default=str).encode(), digest_size=32
    ).digest()

    def make(branch: int) -> Any:
        digest = hashlib.blake2b(
            root_digest + int(seed).to_bytes(8, "little") + int(branch).to_bytes(8, "little"), digest_size=32
        ).digest()
        if name in _PCG_STATE_LAYOUT:  # a hashed 128-bit state and odd increment: cheap and uniform
            fresh = {
                "bit_generator": name,
                "state": {
                    "state": int.from_bytes(digest[:16], "little") & _MASK128,
                    "inc": (int.from_bytes(digest[16:], "little") | 1) & _MASK128,
                },
                "has_uint32": 0,
                "uinteger": 0,
            }
        else:  # any other numpy bit generator: seed it through a SeedSequence
            words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 32, 4)]
            fresh = getattr(np.random, name)(np.random.SeedSequence(words)).state
        return {**snapshot, "rng_state": fresh}

    return make


def branch_snapshot(snapshot: Any, seed: int, branch: int) -> Any:
    """The snapshot branch ``branch`` starts from when branches get independent env RNGs.

    A dict snapshot whose ``rng_state`` is a numpy bit-generator state gets a fresh state of the
    same bit generator derived from ``(seed, branch, hash of the root rng_state)`` (for PCG64 a
    hashed 128-bit state and odd increment, otherwise through a ``SeedSequence``); anything else
    is returned unchanged (the env keeps no RNG in its snapshot). The input is not modified.
    """
    return _branch_snapshots(snapshot, seed)(branch)


def _root_done(env: TextEnv, snapshot: Any) -> bool:
    done = getattr(env, "done", None)
    if isinstance(done, bool):
        return done
    if isinstance(snapshot, dict) and isinstance(snapshot.get("done"), bool):
        return snapshot["done"]
    return False


def simulate_branches(
    env: TextEnv,
    policy: Policy,
    n: int,
    horizon: int,
    seed: int = 0,
    *,
    independent: bool = True,
) -> list[Branch]:
    """Run ``n`` branches of up to ``horizon`` steps from the env's current state; restore it after.

    Each branch starts from the root snapshot (with its own env RNG when ``independent``, see the
    module docstring), asks ``policy(env, branch_index, step_index)`` for an action at every step
    and stops early when the episode ends. The env is put back to the exact root snapshot
    afterwards, also when the policy or the env raises. Raises ``SnapshotNotSupportedError`` for
    envs without snapshots (before touching the env) and ``EnvNotResetError`` before ``reset``.
    """
    n = _check_positive_int(n, "n")
    horizon = _check_positive_int(horizon, "horizon")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if not getattr(env, "supports_snapshot", False):
        raise SnapshotNotSupportedError(f"{env.name}: localized parallel simulation needs get_state/set_state")
    root = env.get_state()
    root_key = env.state_key()
    if _root_done(env, root):
        return [Branch(b, root_key, horizon, ()) for b in range(n)]
    start = _branch_snapshots(root, int(seed)) if independent else (lambda b: root)
    branches: list[Branch] = []
    try:
        for b in range(n):
            env.set_state(start(b))
            steps: list[SimStep] = []
            key = root_key
            for h in range(horizon):
                action = policy(env, b, h)
                try:
                    result = env.step(action)
                except EnvNotResetError:
                    if h == 0:  # an env whose snapshot does not say it is finished
                        break
                    raise
                next_key = env.state_key()
                if hasattr(policy, "observe"):  # policies that read the branch's text (the model itself)
                    policy.observe(b, result.observation)
                steps.append(
                    SimStep(
                        state_key=key,
                        action=action,
                        observation=result.observation,
                        reward=float(result.reward),
                        done=bool(result.done),
                        won=result.won,
                        next_state_key=next_key,
                        invalid_action=result.invalid_action,
                        info=dict(result.info),
                    )
                )
                key = next_key
                if result.done:
                    break
            branches.append(Branch(b, root_key, horizon, tuple(steps)))
    finally:
        env.set_state(root)
    return branches


# --------------------------------------------------------------------------- rendering


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines()) if text else prefix.rstrip()


def _fmt_reward(x: float) -> str:
    return f"{x:g}"


def render_branches(
    branches: Sequence[Branch],
    *,
    observations: bool = True,
    max_observation_chars: int | None = None,
) -> str:
    """The aggregated experience ``τ^H_N(s_t)`` as text for the bootstrapping prompt of ``ẑ_{s_t}``.

    Per branch: every step's action, reward, whether it was invalid, and (``observations=True``)
    the observation it produced (cut to ``max_observation_chars``), then the branch's outcome.
    """
    if not branches:
        return "No simulated look-ahead."
    horizon = max(b.horizon for b in branches)
    lines = [
        f"Simulated look-ahead from the current state: {len(branches)} branch"
        f"{'es' if len(branches) != 1 else ''}, up to {horizon} step{'s' if horizon != 1 else ''} each."
    ]
    for branch in branches:
        lines.append(f"Branch {branch.index + 1}:")
        if not branch.steps:
            lines.append("  (no steps: the episode had already ended)")
            continue
        for i, step in enumerate(branch.steps, start=1):
            flag = " (invalid action, nothing happened)" if step.invalid_action else ""
            lines.append(f"  Step {i}: action {step.action!r} -> reward {_fmt_reward(step.reward)}{flag}")
            if observations:
                obs = step.observation
                if max_observation_chars is not None and len(obs) > max_observation_chars:
                    obs = obs[: max(0, max_observation_chars - 3)] + "..."
                lines.append(_indent(obs, "    | "))
        n_steps = len(branch.steps)
        ret = _fmt_reward(branch.total_reward)
        if branch.won:
            outcome = f"won after {n_steps} step{'s' if n_steps != 1 else ''}"
        elif branch.done:
            outcome = f"episode ended without a win after {n_steps} step{'s' if n_steps != 1 else ''}"
        else:
            outcome = f"still running after {n_steps} step{'s' if n_steps != 1 else ''}"
        lines.append(f"  Outcome: {outcome} (return {ret}).")
    return "\n".join(lines)


def render_transition_tuples(branches: Sequence[Branch]) -> str:
    """``τ^H_N(s_t)`` as the authors' summary prompt lists it: one numbered line per branch, each step one
    (state, move, opponent's move, reward, next state, game over) tuple. States are state keys (chess: the FEN
    without its move counters); the opponent's move is the step's ``info["opponent_uci"]`` (``none`` when the
    opponent did not move, or the env names no opponent). A branch without steps shows its root state only."""
    lines = []
    for branch in branches:
        tuples = [
            f"(State: {step.state_key}, Move: {step.action}, Opponent's move: {step.info.get('opponent_uci') or 'none'}, "
            f"Reward: {_fmt_reward(step.reward)}, Next state: {step.next_state_key}, Game over: {step.done})"
            for step in branch.steps
        ]
        lines.append(f"{branch.index + 1}. " + ("; ".join(tuples) or f"(State: {branch.root_key}, no move played)"))
    return "\n".join(lines)


# --------------------------------------------------------------------------- behaviour policies


class RandomPolicy:
    """Uniform over ``env.admissible_actions()``; its own ``random.Random(seed)`` stream, so a run
    is deterministic for a given seed and call sequence (and never touches the env's RNG)."""

    def __init__(self, seed: int | None = 0) -> None:
        self.rng = random.Random(seed)

    def __call__(self, env: TextEnv, branch: int, step: int) -> str:
        return self.rng.choice(env.admissible_actions())


class BoardPolicy:
    """Adapts a chess ``board -> SAN`` policy (``MixedBehaviourPolicy``, ``StockfishPolicy``) to a
    simulation policy: it is called with ``env.board`` (``ChessPuzzlesEnv.board``, a copy of the
    branch's current board)."""

    def __init__(self, board_policy: Callable[[Any], str]) -> None:
        if not callable(board_policy):
            raise TypeError("board_policy must be callable: board -> move in SAN")
        self.board_policy = board_policy

    def __call__(self, env: TextEnv, branch: int, step: int) -> str:
        board = getattr(env, "board", None)
        if board is None:
            raise TypeError(f"{env.name}: BoardPolicy needs an env with a .board (a chess env)")
        return self.board_policy(board)


__all__ = [
    "Branch",
    "BoardPolicy",
    "Policy",
    "RandomPolicy",
    "SimStep",
    "branch_snapshot",
    "render_branches",
    "render_transition_tuples",
    "simulate_branches",
]
