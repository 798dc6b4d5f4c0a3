"""What an episode records: every attempted action (:class:`Step`), the episode with its outcome
(:class:`Episode`, one line of ``episodes.jsonl``), what an agent shows the policy at a state
(:class:`Decision`), and the one-line rendering of a move that reflection prompts quote."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


def describe_position(position: tuple[int, int]) -> str:
    return f"row {position[0]}, column {position[1]}"


@dataclass
class Step:
    """One attempted action (valid or not) of an episode."""

    attempt: int
    position: tuple[int, int]
    state_key: str
    observation: str
    reply: str
    action: str | None  # the valid action the env applied; None for an invalid attempt
    error: str | None  # why the attempt was invalid (parse failure or unknown action)
    knowledge: str | None  # the z_s the decision was conditioned on (shown or written)
    knowledge_source: str  # "none" | "written" | "stored" | "transferred"
    knowledge_error: str | None
    death_probs: dict[str, float]
    good: bool
    risky: bool
    actual: str | None = None
    next_position: tuple[int, int] | None = None
    next_state_key: str | None = None
    next_tile: str | None = None
    reward: float = 0.0
    done: bool = False


@dataclass
class Episode:
    method: str
    phase: str  # "train" | "test"
    iteration: int  # 1..I for train; I+1 for test
    map_index: int
    task_id: str
    episode_id: str
    root_key: str
    root_observation: str
    steps: list[Step] = field(default_factory=list)
    won: bool = False
    outcome: str = "attempt_limit"  # "goal" | "hole" | "step_limit" | "attempt_limit"
    final_position: tuple[int, int] = (0, 0)
    texts: list[str] = field(default_factory=list)  # knowledge/reflections written (keyword stats)
    reflect_calls: int = 0

    @property
    def moves(self) -> list[Step]:
        return [s for s in self.steps if s.action is not None]

    def outcome_sentence(self) -> str:
        where = describe_position(self.final_position)
        return {
            "goal": f"reached the goal at {where} after {len(self.moves)} moves: the game was won.",
            "hole": f"fell into the hole at {where} after {len(self.moves)} moves: the game was lost.",
            "step_limit": f"the step limit was used up at {where}: the game was lost.",
            "attempt_limit": f"too many invalid replies; stopped at {where}: the game was lost.",
        }[self.outcome]

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        record["moves"] = len(self.moves)
        return record


def render_move(step: Step) -> str:
    """One move as a line: where, the chosen action, the actual direction and where it led."""
    if step.action is None:
        return f"at {describe_position(step.position)}: invalid reply ({step.error}); nothing happened"
    slip = f"moved {step.actual}" if step.actual == step.action else f"slipped {step.actual}"
    tile = {"H": " - a hole", "G": " - the goal"}.get(step.next_tile or "", "")
    return f"at {describe_position(step.position)} chose {step.action}, {slip} -> {describe_position(step.next_position)} ({step.next_tile}{tile})"


@dataclass
class Decision:
    """What the agent is shown at one state."""

    blocks: list[str] = field(default_factory=list)  # memory shown before the observation
    knowledge: str | None = None  # stored/transferred z_s shown for this state
    source: str = "none"
    ask_knowledge: bool = False
