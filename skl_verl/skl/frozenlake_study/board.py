"""Facts about a FrozenLake board that the study measures with, none of which asks the model:
the slip setting, the map-agnostic transfer key, and which moves are good.

A move is good when its one-step death probability ("death" = landing on H) is the lowest of the
four actions at that state, computed exactly from ``FrozenLakeEnv.transition_probs``."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from envs.frozenlake import ACTIONS, FrozenLakeEnv

_EPS = 1e-9


def parse_slip(text: str | Sequence[float]) -> tuple[float, float]:
    """``"1/3,1/3"`` or ``"0,2/3"`` (fractions or decimals) -> ``(p_left, p_right)``."""
    if not isinstance(text, str):
        p_left, p_right = text
        return float(p_left), float(p_right)
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2:
        raise ValueError(f"slip must look like 'p_left,p_right' (e.g. 1/3,1/3), got {text!r}")
    try:
        return float(Fraction(parts[0])), float(Fraction(parts[1]))
    except (ValueError, ZeroDivisionError) as exc:
        raise ValueError(f"slip must look like 'p_left,p_right' (e.g. 1/3,1/3), got {text!r}") from exc


def neighbourhood_key(rows: Sequence[str], position: tuple[int, int], radius: int = 1) -> str:
    """Map-agnostic state key: the tiles in a ``(2r+1)x(2r+1)`` window around the player (``#`` off-grid)."""
    r, c = position
    lines = []
    for rr in range(r - radius, r + radius + 1):
        line = ""
        for cc in range(c - radius, c + radius + 1):
            inside = 0 <= rr < len(rows) and 0 <= cc < len(rows[0])
            line += rows[rr][cc] if inside else "#"
        lines.append(line)
    return f"nb{radius}:" + "/".join(lines)


def death_probs(env: FrozenLakeEnv, task_id: str, position: tuple[int, int]) -> dict[str, float]:
    """Exact one-step probability of landing on H for each action at ``position`` (from ``transition_probs``)."""
    rows = env.task(task_id).metadata["map"]
    out = {}
    for action in ACTIONS:
        dist = env.transition_probs(position, action, task_id)
        out[action] = sum(p for (r, c), p in dist.items() if rows[r][c] == "H")
    return out


def good_actions(probs: dict[str, float]) -> set[str]:
    """Actions whose death probability is the lowest of the four (ties all count as good)."""
    best = min(probs.values())
    return {a for a, p in probs.items() if p <= best + _EPS}


def is_good_move(probs: dict[str, float], action: str | None) -> bool:
    """Whether ``action`` (None = an invalid attempt) has the lowest one-step death probability."""
    return action is not None and action in probs and action in good_actions(probs)


def is_risky(probs: dict[str, float]) -> bool:
    """Whether the choice matters at this state: the four death probabilities are not all equal."""
    return max(probs.values()) - min(probs.values()) > _EPS
