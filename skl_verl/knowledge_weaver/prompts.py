"""The curator's prompt (the paper's App. C.1 / C.3 structure, our wording): role and output contract,
then the task category, the legal action vocabulary, the complete source trajectories, and the
content and output requirements. Each trajectory shows its first 24 steps with observations cut to 120
(ALFWorld) or 400 (WebShop) characters (Table 4; ``CuratorView``, ``kw.context``). Trajectories are never
dropped to fit the token budget: older, uneventful steps are summarised to their action, observations cut
shorter, and a prompt that still does not fit is an error."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from skl_verl.knowledge_weaver.executor import ExecutorEpisode
from skl_verl.rollout.prompt_safety import neutralise_special_tokens

CURATOR_SYSTEM = (
    "You write one knowledge entry for an agent from trajectories of earlier attempts at tasks of one kind. "
    "The agent already knows the basics of its environment; do not restate them. Read the trajectories as "
    "evidence: find what made attempts succeed, fail or stall that the task description alone would not "
    "tell, and turn it into guidance that changes a future decision. Every claim must rest on what happened "
    "in these trajectories. Think privately; reply with exactly one entry inside <skill> and </skill> and "
    "nothing outside the tags."
)

ACTION_VOCABULARY = {
    "alfworld": ("go to <receptacle>, open/close <receptacle>, take <object> from <receptacle>, put <object> "
                 "in/on <receptacle>, use <object>, heat/cool/clean <object> with <appliance>, examine <object>, "
                 "look, inventory. Receptacles must be visited, and some opened, before their contents show."),
    "webshop": "search[<query>], click[<button or product>]. Options are chosen on a product page before Buy Now.",
}

REQUIREMENTS = """# What the entry must do
- Give one consequential insight the trajectories reveal, with guidance for acting on it.
- Ground it in differences, consequences or lack of progress visible above; advice that needs no trajectory is not enough.
- Do not recap the actions, invent facts, or use actions outside the vocabulary.
- One natural-language paragraph of at most {max_words} words.

# Output
Exactly <skill>your paragraph</skill>: the opening tag first, the closing tag last, one of each, nothing else."""


@dataclass(frozen=True)
class CuratorView:
    """How much of each trajectory the curator sees (paper Table 4): the first ``max_steps`` steps, each
    observation and result cut to ``observation_chars`` characters."""

    max_steps: int = 24
    observation_chars: int = 400


CURATOR_VIEWS = {"alfworld": CuratorView(24, 120), "webshop": CuratorView(24, 400)}
"""Table 4: at most 24 rendered steps; observations cut to 120 characters on ALFWorld, 400 on WebShop (the
authors' configs: ``prompt_observation_char_limit``/``prompt_result_char_limit`` 120 on ALFWorld)."""


def curator_view(env_name: str, max_steps: int | None = None, observation_chars: int | None = None) -> CuratorView:
    """The env's Table 4 view, with either number replaced where given (``kw.context.*``, the CLI)."""
    default = CURATOR_VIEWS.get(env_name, CuratorView())
    return CuratorView(default.max_steps if max_steps is None else max_steps,
                       default.observation_chars if observation_chars is None else observation_chars)


@dataclass(frozen=True)
class RenderProfile:
    detailed_tail: int | None
    """Steps rendered in full at the end of each trajectory (None: all); earlier ones show their action only,
    unless eventful (an invalid reply, a reward, the end)."""
    observation_chars: int
    max_steps: int | None = None
    """Only the first ``max_steps`` steps are rendered (None: all); the rest is counted in one line."""


def profiles(view: CuratorView) -> tuple[RenderProfile, ...]:
    """The renderings tried in order until the prompt fits the token budget: the full view first, then
    older steps summarised and observations cut shorter (never beyond the view's own limits)."""
    chars, steps = view.observation_chars, view.max_steps
    tried = [RenderProfile(None, chars, steps), RenderProfile(8, chars, steps), RenderProfile(8, min(chars, 120), steps),
             RenderProfile(4, min(chars, 120), steps), RenderProfile(2, min(chars, 60), steps)]
    return tuple(dict.fromkeys(tried))


PROFILES = profiles(CuratorView())
"""The renderings of the default view (24 steps, 400 characters): envs without a Table 4 row."""


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def render_trajectory(k: int, episode: ExecutorEpisode, task_type: str, profile: RenderProfile) -> str:
    outcome = "SUCCESS" if episode.won else "FAILURE"
    lines = [
        f"=== Trajectory {k} ({outcome.lower()}) ===",
        f"Task type: {task_type}",
        f"Task: {_cut(episode.task_text, 220)}",
        f"Outcome: {outcome}; status={episode.status}; steps={len(episode.steps)}",
    ]
    shown = episode.steps if profile.max_steps is None else episode.steps[: profile.max_steps]
    tail_start = 0 if profile.detailed_tail is None else len(shown) - profile.detailed_tail
    for t, step in enumerate(shown, start=1):
        eventful = step.invalid_reply or step.reward != 0 or step.done
        if t - 1 >= tail_start or eventful:
            chars = profile.observation_chars
            lines.append(f"S{t:02d} | Obs: {_cut(step.observation, chars)} | Action: {step.action} | "
                         f"Result: {_cut(step.result, chars)}" + (" | (invalid reply)" if step.invalid_reply else ""))
        else:
            lines.append(f"S{t:02d} | Action: {step.action}")
    if len(shown) < len(episode.steps):
        lines.append(f"({len(episode.steps) - len(shown)} later steps not shown)")
    return "\n".join(lines)


def curator_messages(tokenizer: Any, env_name: str, task_type: str, episodes: Sequence[ExecutorEpisode],
                     profile: RenderProfile, max_words: int = 100) -> list[dict[str, str]]:
    """The curator's chat messages. Trajectories hold env observations and the executor's replies, so the
    user turn is neutralised for ``tokenizer``: a ``<|im_start|>`` in an observation stays text."""
    trajectories = "\n\n".join(render_trajectory(k, e, task_type, profile) for k, e in enumerate(episodes, start=1))
    vocabulary = ACTION_VOCABULARY.get(env_name, "the commands each observation lists as admissible.")
    user = (f"# Task category\n{task_type}\n\n# Legal actions (constraints, not evidence)\n{vocabulary}\n\n"
            f"# Trajectories\n{trajectories}\n\n" + REQUIREMENTS.format(max_words=max_words))
    return [{"role": "system", "content": CURATOR_SYSTEM},
            {"role": "user", "content": neutralise_special_tokens(user, tokenizer)}]


def fit_curator_prompt(tokenizer: Any, env_name: str, task_type: str, episodes: Sequence[ExecutorEpisode],
                       budget: int, max_words: int = 100, chat_template_kwargs: dict[str, Any] | None = None,
                       view: CuratorView | None = None):
    """The first profile of ``view`` (default: the env's Table 4 view) whose chat prompt fits ``budget``
    tokens: (messages, prompt_ids, profile)."""
    kwargs = {"enable_thinking": False, **(chat_template_kwargs or {})}
    smallest = None
    for profile in profiles(view or curator_view(env_name)):
        messages = curator_messages(tokenizer, env_name, task_type, episodes, profile, max_words)
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
        ids = list(ids if isinstance(ids, list) else ids["input_ids"])
        if len(ids) <= budget:
            return messages, ids, profile
        smallest = len(ids)
    raise ValueError(f"the curator prompt for {len(episodes)} {task_type} trajectories needs {smallest} tokens even "
                     f"summarised; the budget is {budget} (data.max_prompt_length)")
