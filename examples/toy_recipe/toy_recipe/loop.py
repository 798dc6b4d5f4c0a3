"""The toy agent loop: the plain env loop, with a bonus on the score of a won episode."""

from __future__ import annotations

from typing import Annotated, Any

from skl_verl.options import AtLeast
from skl_verl.rollout.env_loop import EnvAgentLoop, EpisodeResult

BONUS_FIELD = "skl_toy_bonus"
"""The bonus a sample's score got (fields the trainer forwards start with ``skl_``)."""


class WinBonusLoop(EnvAgentLoop):
    def __init__(self, *args: Any, win_bonus: Annotated[float, AtLeast(0)] = 0.0, **kwargs: Any):
        """``win_bonus`` is added to the score of every won episode."""
        super().__init__(*args, **kwargs)
        self.win_bonus = win_bonus

    def shaped_reward(self, episode: EpisodeResult, with_format_penalty: bool = True) -> float:
        return super().shaped_reward(episode, with_format_penalty) + (self.win_bonus if episode.won else 0.0)

    def episode_fields(self, episode: EpisodeResult) -> dict[str, Any]:
        return {**super().episode_fields(episode), BONUS_FIELD: self.win_bonus if episode.won else 0.0}


def bonus_metrics(fields) -> dict[str, float]:
    values = [float(v) for v in fields.get(BONUS_FIELD, ()) if v is not None]
    return {"toy/win_bonus/mean": sum(values) / len(values)} if values else {}
