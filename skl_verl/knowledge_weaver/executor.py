"""The frozen executor: plays an env task with given guidance text and returns the episode.

The model behind it is any client with verl's ``generate(request_id, prompt_ids=..., sampling_params=...)``
interface: ``OpenAICompletionsClient`` for a ``vllm serve`` endpoint (GPU runs: the executor is served
outside Ray), ``HFGenerationClient`` for an in-process frozen copy (CPU), or a scripted stand-in (tests).
Prompt structure follows the paper (App. C.2): instructions and guidance, then the task, the current
observation, a short memory of recent steps and the admissible commands; the reply is a thought and
one ``Action:`` line. Env calls are guarded (``guarded_call``): a failing env ends the episode as
``failed`` instead of raising.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from skl_verl.rollout.env_runtime import EnvCallFailed, guarded_call
from skl_verl.rollout.prompt_safety import neutralise_special_tokens

EXECUTOR_SYSTEM = (
    "You are an agent completing a household or shopping task in a text environment. Use the guidance "
    "below where it applies. Each turn, think briefly and then give exactly one command from the admissible "
    "commands on a final line of the form 'Action: <command>'."
)
# "Action" first on its line (ASCII case ignored), then ":". Possessive and kept to one line before the
# word, each character is read a bounded number of times: ^\s* would rescan every blank line below each
# line start (quadratic on many newlines).
_ACTION_LABEL = re.compile(r"^[^\S\n]*+(?ai:action)\s*+:", re.MULTILINE)
_SPACES = re.compile(r"\s*+")


@dataclass
class ExecutorStep:
    observation: str
    action: str
    result: str
    reward: float
    done: bool
    won: bool
    invalid_reply: bool = False


@dataclass
class ExecutorEpisode:
    """One executor play, in the one schema the curator's trajectory renderer reads."""

    task_id: str
    guidance: str
    task_text: str = ""
    steps: list[ExecutorStep] = field(default_factory=list)
    won: bool = False
    status: str = "max_steps"
    """``won``, ``done`` (ended without a win), ``max_steps``, or ``failed: <env call and reason>``."""


def task_description(info: dict[str, Any], observation: str) -> str:
    """The task in words from a reset's info: ALFWorld's goal, WebShop's instruction, else the first
    observation (envs whose task is only shown, like FrozenLake)."""
    for key in ("goal", "instruction_text"):
        if info.get(key):
            return str(info[key])
    return observation


def labelled_commands(reply: str) -> list[str]:
    """The command after each ``Action:`` label that starts a line (ASCII case ignored), in order, in
    linear time.

    The command is the rest of the label's line, or of the next non-blank line when the label ends its
    line (``Action:\\ngo north``), with surrounding whitespace removed; it can hold another label, which
    then starts no command of its own. A label followed only by whitespace names an empty command, unless
    only line breaks follow it (then it names none): the line pattern this scan replaced read replies so,
    and the executor's recorded episodes depend on it."""
    commands, position = [], 0
    while (label := _ACTION_LABEL.search(reply, position)) is not None:
        start = _SPACES.match(reply, label.end()).end()
        if start == len(reply):
            if reply.count("\n", label.end()) < len(reply) - label.end():
                commands.append("")
            break
        end = reply.find("\n", start)
        end = len(reply) if end == -1 else end
        commands.append(reply[start:end].rstrip())
        position = end
    return commands


_TEMPLATE = re.compile(r"^(\w+)\[<[^<>\[\]]+>\]$")


def fills_template(command: str, wanted: str) -> bool:
    """Whether ``wanted`` (a normalised, lower-case reply command) fills in the admissible ``command`` when
    that is a template such as WebShop's ``search[<query>]``: the same verb with a non-empty argument of
    the model's own. The literal ``search[<query>]`` is no query (the env would search for "<query>")."""
    template = _TEMPLATE.match(" ".join(command.split()).lower())
    if template is None or not wanted.startswith(f"{template.group(1)}[") or not wanted.endswith("]"):
        return False
    argument = wanted[len(template.group(1)) + 1 : -1].strip()
    return bool(argument) and not (argument.startswith("<") and argument.endswith(">"))


def chosen_command(reply: str, admissible: list[str]) -> tuple[str, bool]:
    """The command a reply names: its last ``Action:`` line matched to an admissible command (case and
    whitespace aside) or filling in an admissible template (``fills_template``: sent with the reply's own
    argument, e.g. ``search[blue 3-pack]``). With no ``Action:`` line: ``look`` when admissible, else the reply's last line,
    sent as it is (the env answers it as an invalid action). Returns (command, reply was invalid)."""
    found = labelled_commands(reply)
    if found:
        wanted = " ".join(found[-1].split()).lower()
        for command in admissible:
            if " ".join(command.split()).lower() == wanted:
                return command, False
        if any(fills_template(command, wanted) for command in admissible):
            return " ".join(found[-1].split()), False
        return found[-1], True
    if "look" in admissible:
        return "look", True
    lines = [line.strip() for line in reply.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else ""), True


class FrozenExecutor:
    def __init__(self, client: Any, tokenizer: Any, max_steps: int = 50, max_tokens: int = 192, memory_steps: int = 5,
                 observation_chars: int = 1800, memory_chars: int = 420, env_timeout_s: float = 60.0,
                 chat_template_kwargs: dict[str, Any] | None = None) -> None:
        self.client, self.tokenizer = client, tokenizer
        self.max_steps, self.max_tokens, self.memory_steps = max_steps, max_tokens, memory_steps
        self.observation_chars, self.memory_chars, self.env_timeout_s = observation_chars, memory_chars, env_timeout_s
        self.chat_template_kwargs = {"enable_thinking": False, **(chat_template_kwargs or {})}

    def messages(self, guidance: str, task_text: str, observation: str, memory: list[ExecutorStep],
                 admissible: list[str]) -> list[dict[str, str]]:
        """The executor's chat messages. Guidance is written by the curator under training and the rest comes
        from the env and the executor's own replies, so both turns are neutralised for the executor's
        tokenizer: no text can open a turn (a curator could otherwise write its entry into a system turn of
        its own and game the executor it is scored by)."""
        parts = [f"Task: {task_text}", f"Observation: {observation[-self.observation_chars:]}"]
        if memory:
            cap = self.memory_chars
            lines = [
                f"Memory step {k}:\nObservation: {s.observation[-cap:]}\nAction: {s.action[:120]}\nResult: {s.result[-cap:]}\n"
                f"Reward: {s.reward:g}; done: {s.done}; won: {s.won}"
                for k, s in enumerate(memory, start=1)
            ]
            parts.append("Recent steps:\n" + "\n".join(lines))
        parts.append("Admissible commands:\n" + "\n".join(f"- {c}" for c in sorted(admissible)))
        guidance = neutralise_special_tokens(guidance, self.tokenizer)
        user = neutralise_special_tokens("\n".join(parts), self.tokenizer)
        return [
            {"role": "system", "content": f"{EXECUTOR_SYSTEM}\n\nGuidance:\n{guidance}"},
            {"role": "user", "content": user + "\n\nRespond with a thought and an action."},
        ]

    async def play(self, env: Any, task_id: str, guidance: str, seed: int, request_id: str = "executor") -> ExecutorEpisode:
        episode = ExecutorEpisode(task_id=task_id, guidance=guidance)
        call = lambda fn, *args, **kwargs: guarded_call(fn, *args, timeout_s=self.env_timeout_s, **kwargs)
        try:
            observation, info = await call(env.reset, task_id, seed=seed)
            episode.task_text = task_description(info, observation)
            for t in range(self.max_steps):
                admissible = await call(env.admissible_actions)
                messages = self.messages(guidance, episode.task_text, observation, episode.steps[-self.memory_steps:], admissible)
                prompt_ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                                **self.chat_template_kwargs)
                prompt_ids = list(prompt_ids if isinstance(prompt_ids, list) else prompt_ids["input_ids"])
                output = await self.client.generate(
                    f"{request_id}:{t}", prompt_ids=prompt_ids,
                    sampling_params={"temperature": 0.0, "max_tokens": self.max_tokens, "seed": seed},
                )
                reply = self.tokenizer.decode(list(output.token_ids), skip_special_tokens=True)
                command, invalid = chosen_command(reply, admissible)
                result = await call(env.step, command)
                won = bool(result.info.get("won", False))
                episode.steps.append(ExecutorStep(observation, command, result.observation, float(result.reward),
                                                  bool(result.done), won, invalid))
                observation = result.observation
                if result.done:
                    episode.won = won
                    episode.status = "won" if won else "done"
                    break
        except EnvCallFailed as exc:
            episode.won, episode.status = False, f"failed: {exc}"
        return episode

