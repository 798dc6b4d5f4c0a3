"""R3L's episode rules for SKL-SD's WebShop and ScienceWorld loops (issue 37 item 10), as loop options with
defaults that change nothing, so only the SKL-SD entries (agent_loops.yaml) play by them:

* ``format_error_ends``: a step whose turns broke the reply format (an action without its tag; in a stateful
  loop also a knowledge turn without its tag, as R3L's ``<think>…</think><action>…</action>`` is one format)
  ends the episode, its return set to ``format_error_reward`` (R3L: −0.1 WebShop, 0 ScienceWorld).
* ``repeat_end``: that many identical consecutive actions end the episode, its return set to ``repeat_reward``
  (R3L: 2 on WebShop at −0.1, actions naming next, prev or search exempt; 3 on ScienceWorld at 0).
* ``episode_return: max_score``: the return is the highest ``info["score"]`` seen / 100, not the sum of the env's
  step rewards (``sum``, the default). ``max_step_gain``: the largest single-step score gain / 100, never below 0,
  the first step's gain counted from 0 (not the reset score): what R3L's ScienceWorld workflow computes, since the
  package's ``step`` reward is the score's change and R3L keeps the largest one (``scienceworld/utils.py``
  ``first_rollout``). Under it a finished task returns 1 only when one step gains all 100 points.

With these, the format penalty is the rule's reward: the entries set ``invalid_format_penalty: 0``.
"""

from __future__ import annotations

from typing import Annotated, Any

from skl_verl.options import AtLeast, DeclaredOptions, OneOf
from skl_verl.rollout.env_loop import EnvAgentLoop, EpisodeResult


class RolloutRules(DeclaredOptions):
    """A mixin before ``EnvAgentLoop`` in a loop's bases: R3L's episode-ending rules (module doc). Its options are
    checked against their declaration before anything is built, as every loop option is."""

    def __init__(
        self,
        *args: Any,
        format_error_ends: bool = False,
        format_error_reward: float = 0.0,
        repeat_end: Annotated[int, AtLeast(0)] = 0,
        repeat_reward: float = 0.0,
        repeat_exempt: str = "",
        episode_return: Annotated[str, OneOf("sum", "max_score", "max_step_gain")] = "sum",
        **kwargs: Any,
    ):
        """``format_error_ends``/``format_error_reward``, ``repeat_end`` (0: off; else identical consecutive
        actions that end the episode)/``repeat_reward``/``repeat_exempt`` (comma-separated substrings, ignoring case,
        of actions that never count as repeats) and ``episode_return``: see the module doc."""
        super().__init__(*args, **kwargs)
        self.format_error_ends, self.format_error_reward = format_error_ends, float(format_error_reward)
        self.repeat_end, self.repeat_reward = repeat_end, float(repeat_reward)
        self.repeat_exempt = tuple(w.strip().lower() for w in repeat_exempt.split(",") if w.strip())
        self.episode_return = episode_return

    async def play_episode(self, *args: Any, **kwargs: Any) -> EpisodeResult:
        self._errors_seen, self._best_score, self._last_score, self._best_gain = 0, None, 0.0, 0.0
        return await super().play_episode(*args, **kwargs)

    def _end(self, episode: EpisodeResult, reward: float, why: str) -> None:
        episode.env_return, episode.won = reward, False
        episode.metrics[f"ended_by_{why}"] = 1.0

    async def _act(self, env, text: str, episode: EpisodeResult, timing: dict) -> tuple[str, bool]:
        feedback, done = await super()._act(env, text, episode, timing)
        errors, self._errors_seen = episode.invalid_format_turns - self._errors_seen, episode.invalid_format_turns
        if self.format_error_ends and errors:
            self._end(episode, self.format_error_reward, "format_error")
            return feedback, True
        step = episode.last_step
        if step is None:
            return feedback, done
        if self.episode_return == "max_score" and "score" in step.info:
            score = float(step.info["score"])
            self._best_score = score if self._best_score is None else max(self._best_score, score)
            episode.env_return = self._best_score / 100.0
        if self.episode_return == "max_step_gain" and "score" in step.info:
            score = float(step.info["score"])
            self._best_gain = max(self._best_gain, score - self._last_score)
            self._last_score = score
            episode.env_return = self._best_gain / 100.0
        if self.repeat_end and not done:
            recent = [action for action, _ in episode.actions[-self.repeat_end:]]
            if (len(recent) == self.repeat_end and len(set(recent)) == 1
                    and not any(word in recent[0].lower() for word in self.repeat_exempt)):
                self._end(episode, self.repeat_reward, "repeat")
                return feedback, True
        return feedback, done


class RuledEnvAgentLoop(RolloutRules, EnvAgentLoop):
    """The plain loop with R3L's episode rules (SKL-SD's GRPO baselines)."""
