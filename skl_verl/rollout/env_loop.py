"""Multi-turn agent loop that plays any ``envs`` environment inside verl's agent-loop framework.

One episode is one training sample: the first prompt (system + first observation) is the
prompt; every assistant turn (response_mask 1) and every env observation after it
(response_mask 0, so the policy is never trained to predict the environment) form the response.
The dataset row names the env and task in ``extra_info``::

    extra_info = {"env_spec": '{"name": "frozenlake", "kwargs": {...}}', "task_id": "...", "index": i}

Bad model output (no tag, empty action, unknown action) is counted and penalised, never raised:
answered with what was wrong, or (``unparseable_reply_tail``) its tail sent to the env as released.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.utils.profiler import simple_timer

import reward_fns
from envs import TextEnv
from skl_verl.options import Above, AtLeast, ConfigError, DeclaredOptions, OneOf
from skl_verl.rollout import sample_fields as sf
from skl_verl.rollout.env_pool import ENV_POOL
from skl_verl.rollout.env_runtime import EnvCallFailed, guarded_call
from skl_verl.rollout.loop_text import (
    DEFAULT_SYSTEM_PROMPT,
    INSTRUCTION_PLACES,
    SAMPLE_GRANULARITIES,
    STEP_GROUP_ANCHORS,
    parse_env_spec,
    render_turn,
)
from skl_verl.rollout.outputs import VERL_EXTRA_DEFAULTS, stable_seed, trajectory_id_of, weight_version_fields, weight_versions
from skl_verl.rollout.parsing import build_parser
from skl_verl.rollout.prompt_safety import neutralise_special_tokens
from skl_verl.trainer.context_checks import served_window

logger = logging.getLogger(__name__)

@dataclass
class EpisodeResult:
    """Everything one played episode produced, before it becomes an AgentLoopOutput."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    messages: list[dict[str, str]]
    env_return: float = 0.0
    won: bool = False
    turns: int = 0
    invalid_format_turns: int = 0
    invalid_action_turns: int = 0
    truncated: bool = False
    """Stopped by max_turns or the response-length budget rather than by the env."""
    failed: str | None = None
    """Which env call failed and why (timeout, exception, lost worker, protocol): kept, reward 0, flagged."""
    task_text: str = ""
    """The first observation (task description + admissible actions), without any preamble."""
    first_observation: str = ""
    """The env's first observation as returned by ``reset`` (no action list)."""
    transcript: list[tuple[str, str]] = field(default_factory=list)
    """(model reply, what came back) per turn; curators and reflection prompts read it."""
    knowledge_steps: list[Any] = field(default_factory=list)
    """Stateful loops: one record per env step (SKL's ``KnowledgeStep``)."""
    last_step: Any = None
    """The env's StepResult for the latest valid-format turn (None after a format error)."""
    metrics: dict[str, float] = field(default_factory=dict)
    weight_versions: list[int] = field(default_factory=list)
    """The rollout weights' ``global_steps`` of every generation in the episode (verl's staleness tags)."""
    actions: list[tuple[str, str]] = field(default_factory=list)
    """Per turn, (action sent or what was wrong, env observation or feedback): step prompts' and curators' record."""
    step_samples: list["StepSample"] = field(default_factory=list)
    """Step mode: one trained sample per policy turn."""


@dataclass
class StepSample:
    """One policy turn in step mode: its own prompt (task, preamble, recent steps, current
    observation) and the reply, all trained."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float] | None
    weight_versions: list[int]
    invalid_format: bool = False
    anchor_state: str = ""
    """The env's state key where this turn acted (``sf.ANCHOR_STATE``)."""
    reward: float = 0.0
    """What this turn added to the trial's reward before format penalties (``sf.STEP_REWARD``)."""


@dataclass
class TokenStream:
    """One sample's growing token stream: prompt, then assistant (mask 1) and context (mask 0) tokens."""

    messages: list[dict[str, str]]
    token_ids: list[int]
    response_mask: list[int]
    logprobs: list[float] | None
    weight_versions: list[int] = field(default_factory=list)


@dataclass
class TurnContext:
    env: TextEnv
    stream: TokenStream
    request_id: str
    sampling_params: dict[str, Any]
    timing: dict[str, float]


class EnvAgentLoop(DeclaredOptions, AgentLoopBase):
    """Options come from the agent-loop YAML entry (hydra passes extra keys to ``__init__``); each is
    declared once, here, with its range (``skl_verl.options``)."""

    def __init__(
        self,
        *args: Any,
        max_turns: Annotated[int, AtLeast(1)] = 20,
        parser: Any = None,
        invalid_format_penalty: Annotated[float, AtLeast(0)] = 0.1,
        env_step_timeout_s: Annotated[float, Above(0)] = 60.0,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        max_tokens_per_turn: Annotated[int, AtLeast(1)] | None = None,
        reward_fn: Annotated[str, OneOf(*reward_fns.REWARD_FNS)] = "env_return",
        reward_scale: Annotated[float, Above(0)] = 10.0,
        sample_granularity: Annotated[str, OneOf(*SAMPLE_GRANULARITIES)] = "episode",
        step_history: Annotated[int, AtLeast(0)] = 4,
        unparseable_reply_tail: Annotated[int, AtLeast(0)] = 0,
        example_observation: str | None = None,
        example_reply: str | None = None,
        instructions_at: Annotated[str, OneOf(*INSTRUCTION_PLACES)] = "system",
        step_group_anchor: Annotated[str, OneOf(*STEP_GROUP_ANCHORS)] = "env_state",
        **kwargs: Any,
    ):
        problem = self.combination_problem({"example_observation": example_observation, "example_reply": example_reply})
        if problem:  # before anything is built, as a declared option's range
            raise ConfigError(f"{type(self).__qualname__}: {problem}")
        super().__init__(*args, **kwargs)
        self.example_turn = (
            [] if example_observation is None else
            [{"role": "user", "content": example_observation}, {"role": "assistant", "content": example_reply}]
        )
        """A worked turn between the system prompt and the episode, for a small model that follows an
        example better than an instruction (SmolLM2-135M answers in one word after one)."""
        self.sample_granularity = sample_granularity
        self.step_history = step_history
        self.instructions_at = instructions_at
        self.step_group_anchor = step_group_anchor
        self.reward_fn = reward_fn
        self.reward_scale = reward_scale
        self.max_tokens_per_turn = max_tokens_per_turn
        self.max_turns = max_turns
        self.parser = build_parser(parser)
        self.invalid_format_penalty = invalid_format_penalty
        self.unparseable_reply_tail = unparseable_reply_tail
        self.env_step_timeout_s = env_step_timeout_s
        self.system_prompt = system_prompt
        self.response_length = self.rollout_config.response_length
        self.trainer_step = 0
        """The trainer's ``global_steps`` for this run (verl passes it to ``run``)."""

    @classmethod
    def combination_problem(cls, options: Mapping[str, Any]) -> str | None:
        """Why options that only make sense together do not agree, or None; checked with the entry before
        any worker starts (``loop_checks.check_loop_entry``) and again here."""
        if (options.get("example_observation") is None) != (options.get("example_reply") is None):
            given = "example_observation" if options.get("example_reply") is None else "example_reply"
            return (f"{given} is set alone: example_observation and example_reply are one worked turn shown "
                    "before each episode; set both or neither")
        return None

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        self.trainer_step = int(kwargs.get("global_steps") or 0)
        extra_info = kwargs.get("extra_info")
        env_name, env_kwargs, task_id = parse_env_spec(extra_info)
        self.prepare_episode(extra_info)
        trajectory_id = trajectory_id_of(kwargs)
        with ENV_POOL.lease(env_name, env_kwargs) as env:
            episode = await self.play_episode(
                env, task_id, sampling_params, self.system_prompt, seed=stable_seed(trajectory_id), request_id=trajectory_id
            )
        fields = {
            sf.TRAJECTORY_ID: trajectory_id,
            sf.SEQUENCE_ID: task_id,
            sf.POSITION: 0,
            sf.PHASE: self.phase,
            sf.TOKEN_CREDIT: None,
            **self.episode_fields(episode),
        }
        return self.to_outputs(episode, fields)

    phase = "act"
    """The ``skl_phase`` of a plain episode sample."""

    def prepare_episode(self, extra_info: dict[str, Any]) -> None:
        """Read per-row options from ``extra_info`` before the episode (none for plain play)."""

    def episode_fields(self, episode: EpisodeResult) -> dict[str, Any]:
        """Extra per-sample fields a subclass attaches to its episode samples."""
        return {}

    def shaped_reward(self, episode: EpisodeResult, with_format_penalty: bool = True) -> float:
        if episode.failed:
            return 0.0
        penalty = self.invalid_format_penalty if with_format_penalty else 0.0
        try:
            return reward_fns.episode_reward(self.reward_fn, episode.env_return, episode.won, episode.invalid_format_turns,
                                             scale=self.reward_scale, invalid_format_penalty=penalty)
        except ValueError as exc:  # a NaN/inf return: a flagged sample, never a NaN group
            episode.failed = f"reward: {exc}"
            return 0.0

    async def play_episode(
        self,
        env: TextEnv,
        task_id: str,
        sampling_params: dict[str, Any],
        system_prompt: str,
        seed: int | None,
        request_id: str,
        preamble: str = "",
    ) -> EpisodeResult:
        """Play ``task_id`` to the end. ``preamble`` is prepended to the first user message
        (e.g. a skill document), so it is part of the prompt, not of the trained response."""
        timing: dict[str, float] = {}
        try:
            observation, _ = await self._env_call(timing, env.reset, task_id, seed=seed)
            first_turn = self.render_observation(observation, await self._prompt_actions(env, timing))
        except EnvCallFailed as exc:  # reported as a failed sample, see _env_call
            first_turn = "The environment failed to start."
            failure = str(exc)
        else:
            failure = None
        messages = self.chat(system_prompt, f"{preamble}{first_turn}")
        prompt_ids = await self.ct_build_initial_tokens(messages)
        episode = EpisodeResult(prompt_ids, [], [], None, messages, failed=failure, task_text=first_turn,
                                first_observation=observation if failure is None else "")
        if failure:
            logger.warning("episode failed: %s", failure)
            # One masked token, and a log-prob when the batch carries them: every sample of a batch
            # must have the same fields, or TransferQueue drops the field for all of them.
            episode.response_ids, episode.response_mask = [self.tokenizer.eos_token_id], [0]
            episode.response_logprobs = [0.0] if sampling_params.get("logprobs") else None
            return episode
        if self.sample_granularity == "step":
            turns: _EpisodeTurns | _StepTurns = _StepTurns(
                self, env, sampling_params, request_id, timing, system_prompt, preamble, first_turn
            )
        else:
            stream = TokenStream(messages, list(prompt_ids), [], [] if sampling_params.get("logprobs") else None)
            turns = _EpisodeTurns(self, TurnContext(env, stream, request_id, sampling_params, timing))
        await self._play_turns(turns, episode)
        episode.metrics = {"generate_s": timing.get("generate_sequences", 0.0), "env_s": timing.get("env_step", 0.0)}
        return episode

    async def _play_turns(self, turns: "_EpisodeTurns | _StepTurns", episode: EpisodeResult) -> None:
        """The turns of an episode in either sample mode: the turn cap, truncation and env failures are
        handled here only; ``turns`` says how a reply is generated and what a turn leaves behind."""
        done = False
        while not done:
            if episode.turns >= self.max_turns:
                episode.truncated = True
                break
            episode.turns += 1
            try:
                text = await turns.reply(episode)
                if text is None:
                    episode.truncated = True
                    break
                feedback, done = await turns.act(text, episode)
                episode.transcript.append((text, feedback))
                await turns.record(episode, text, done)
            except EnvCallFailed as exc:  # the env is gone: a flagged, zero-reward sample
                episode.failed = str(exc)
                logger.warning("episode failed: %s", episode.failed)
                break
            if not done and not await turns.next_turn(feedback):
                episode.truncated = True
                break
        turns.finish(episode)

    def _reward_so_far(self, episode: EpisodeResult) -> float:
        """The trial's reward before format penalties if it ended now (``reward_fn`` of the return and
        success so far); step rewards are its increments."""
        return reward_fns.reward_fn(self.reward_fn)(episode.env_return, episode.won, self.reward_scale)

    def step_messages(self, system_prompt: str, preamble: str, episode: EpisodeResult, current: str, shown: int) -> list[dict[str, str]]:
        """A step prompt: preamble (e.g. the skill document), the task as first observed, the last
        ``shown`` steps as 'action -> observation' lines, and the current observation with its actions."""
        parts = [preamble + (episode.task_text if not episode.actions else f"Task (as first observed):\n{episode.first_observation}")]
        if episode.actions:
            parts += self.history_part(episode, shown)
            parts.append(f"Current observation (step {len(episode.actions) + 1}):\n{current}")
        return self.chat(system_prompt, "\n\n".join(parts))

    @staticmethod
    def history_part(episode: EpisodeResult, shown: int) -> list[str]:
        """The last ``shown`` steps as numbered 'action -> observation' lines under their heading ([] for none)."""
        recent = episode.actions[-shown:] if shown else []
        first = len(episode.actions) - len(recent) + 1
        lines = [f"{first + i}. {action} -> {' '.join(result.split())}" for i, (action, result) in enumerate(recent)]
        if not lines:
            return []
        return [f"Your last {len(lines)} of {len(episode.actions)} steps (action -> observation):\n" + "\n".join(lines)]

    def chat(self, instructions: str, user: str) -> list[dict[str, str]]:
        """A prompt's messages: the instructions where ``instructions_at`` puts them, the worked example turn,
        then ``user`` (its special-token text neutralised)."""
        if self.instructions_at == "user_end":
            return [*self.example_turn, {"role": "user", "content": neutralise_special_tokens(
                f"{user}\n\n{instructions}", self.tokenizer)}]
        return [{"role": "system", "content": instructions}, *self.example_turn,
                {"role": "user", "content": neutralise_special_tokens(user, self.tokenizer)}]

    async def _fitting_step_prompt(self, system_prompt: str, preamble: str, episode: EpisodeResult, current: str) -> list[int]:
        """The step prompt with as many recent steps as fit ``rollout.prompt_length`` (up to
        ``step_history``), so verl never left-truncates the task out of it."""
        shown = min(self.step_history, len(episode.actions))
        while True:
            prompt_ids = await self.ct_build_initial_tokens(self.step_messages(system_prompt, preamble, episode, current, shown))
            if shown == 0 or len(prompt_ids) <= self.rollout_config.prompt_length:
                return prompt_ids
            shown -= 1

    def render_observation(self, observation: str, actions: list[str] | str) -> str:
        return render_turn(observation, actions)

    async def _prompt_actions(self, env: TextEnv, timing: dict[str, float]) -> list[str] | str:
        """What a prompt shows of the admissible actions (``TextEnv.prompt_actions``): one guarded call."""
        return await self._env_call(timing, env.prompt_actions)

    async def policy_turn(self, context: "TurnContext", episode: EpisodeResult) -> str | None:
        """What the policy says before one env step (the text the parser reads); None when the
        response budget ran out. Subclasses add reasoning stages (e.g. state knowledge first)."""
        return await self.generate(context)

    async def after_step(self, context: "TurnContext", episode: EpisodeResult, reply: str, done: bool) -> None:
        """Called after every env step attempt (subclasses record transitions here)."""

    def fills_the_context(self, prompt_ids: list[int], request_id: str) -> bool:
        """Whether a prompt leaves no token to generate in the served context (``max_model_len``, else the
        model's window): verl's vLLM server would raise mid-rollout ("leaves no room to generate"), so the turn
        is not sent and the episode ends truncated."""
        window = served_window(str(self.config.actor_rollout_ref.model.path),
                               self.config.actor_rollout_ref.rollout.get("max_model_len"))
        if window is None or len(prompt_ids) < window:
            return False
        logger.warning("%s: a %d-token prompt fills the %d-token served context; the episode ends truncated",
                       request_id, len(prompt_ids), window)
        return True

    async def generate(self, context: "TurnContext") -> str | None:
        """One assistant message, trained on (response_mask 1); None when over the response budget or the
        served context."""
        stream = context.stream
        if self.fills_the_context(stream.token_ids, context.request_id):
            return None
        # Never sample past what the response budget can keep, nor past the per-turn cap.
        budget = self.response_length - len(stream.response_mask)
        params = {**context.sampling_params, "max_tokens": min(budget, self.max_tokens_per_turn or budget)}
        with simple_timer("generate_sequences", context.timing):
            output = await self.server_manager.generate(
                request_id=context.request_id, prompt_ids=stream.token_ids, sampling_params=params
            )
        merged, stream.response_mask, stream.logprobs = await self.ct_merge_assistant_token(
            stream.token_ids, output.token_ids, stream.response_mask, stream.logprobs, assistant_logprobs=output.log_probs
        )
        stream.token_ids = merged.token_ids
        stream.weight_versions.extend(weight_versions(output))
        text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
        stream.messages.append({"role": "assistant", "content": text})
        return text if len(stream.response_mask) < self.response_length else None

    async def add_context(self, stream: "TokenStream", role: str, content: str) -> bool:
        """Append a message the policy is not trained on (response_mask 0), e.g. env feedback.
        False (nothing appended) when it would exceed the response budget."""
        previous = list(stream.messages)
        messages = previous + [{"role": role, "content": neutralise_special_tokens(content, self.tokenizer)}]
        merged, mask, logprobs = await self.ct_merge_context_msg(
            previous, messages, stream.token_ids, stream.response_mask, stream.logprobs
        )
        if len(mask) >= self.response_length:
            return False
        stream.messages, stream.token_ids, stream.response_mask, stream.logprobs = messages, merged.token_ids, mask, logprobs
        return True

    async def _act(self, env: TextEnv, text: str, episode: EpisodeResult, timing: dict) -> tuple[str, bool]:
        """Apply one model turn to the env; return (feedback observation, episode over)."""
        parsed = self.parser(text)
        episode.last_step = None
        action = parsed.action
        if not parsed.ok:
            episode.invalid_format_turns += 1
            if not self.unparseable_reply_tail:
                episode.actions.append(("(no valid action)", f"Invalid response: {parsed.error}."))
                actions = await self._prompt_actions(env, timing)
                return f"Invalid response: {parsed.error}.\n\n{self.render_observation('Try again.', actions)}", False
            # As the released projections: the reply's tail is still a move (an env step, usually inadmissible).
            action = text[-self.unparseable_reply_tail:]
        step = await self._env_call(timing, env.step, action)
        episode.last_step = step
        # History lines show an env's shorter form of the observation where it gives one (WebShop's history_items).
        episode.actions.append((action, step.info.get("history_observation", step.observation)))
        episode.env_return += step.reward
        episode.invalid_action_turns += int(step.invalid_action)
        episode.won = episode.won or step.won
        if step.done:
            return step.observation, True
        return self.render_observation(step.observation, await self._prompt_actions(env, timing)), False

    async def _env_call(self, timing: dict, fn, *args, **kwargs):
        """Every env call of a loop goes through here: ``fn`` is an env method (``env.step``) or sync code
        that uses the env (a simulation), run without blocking the event loop, for at most
        ``env_step_timeout_s`` of execution, its result checked (``env_runtime.guarded_call``). A call that
        times out, raises or returns a result the protocol forbids raises ``EnvCallFailed`` (its worker
        is killed and replaced); ``play_episode`` turns that into a flagged, zero-reward sample."""
        with simple_timer("env_step", timing):
            return await guarded_call(fn, *args, timeout_s=self.env_step_timeout_s, **kwargs)

    def weight_version_fields(self, versions: list[int]) -> dict[str, int]:
        return weight_version_fields(versions, self.trainer_step)

    async def score_response(
        self, prompt_ids: list[int], response_ids: list[int], request_id: str, sampling_params: dict[str, Any]
    ) -> tuple[list[float] | None, list[int]]:
        """Rollout log-probs of a response the policy did not sample (a teacher-forced target), from the
        server's prompt log-probs as vLLM reports them; (None, []) when the batch carries no log-probs."""
        if not sampling_params.get("logprobs"):
            return None, []
        params = {**sampling_params, "logprobs": False, "prompt_logprobs": 0, "max_tokens": 1}
        output = await self.server_manager.generate(
            request_id=request_id, prompt_ids=list(prompt_ids) + list(response_ids), sampling_params=params
        )
        scored = output.extra_fields["prompt_logprobs"]  # entry i scores token i + 1
        return [float(scored[len(prompt_ids) + t - 1][0]) for t in range(len(response_ids))], weight_versions(output)

    def to_outputs(self, episode: EpisodeResult, fields: dict[str, Any]) -> list[AgentLoopOutput]:
        """The episode's training samples: one in episode mode; in step mode one per policy turn,
        each scored with the episode's reward before format penalties and carrying its own
        penalty in ``skl_step_penalty`` (estimators count the trial once; see sample_fields)."""
        if self.sample_granularity == "episode" or not episode.step_samples:
            return [self.to_output(episode, reward=self.shaped_reward(episode), fields=fields)]
        trial_reward = self.shaped_reward(episode, with_format_penalty=False)
        outputs = []
        for index, step in enumerate(episode.step_samples):
            step_fields = {
                **fields,
                sf.STEP_INDEX: index,
                sf.STEP_PENALTY: self.invalid_format_penalty if step.invalid_format else 0.0,
                sf.ANCHOR_STATE: step.anchor_state,
                sf.STEP_REWARD: 0.0 if episode.failed else step.reward,
            }
            output = self.to_output(episode, reward=trial_reward, fields=step_fields)
            output.prompt_ids, output.response_ids = step.prompt_ids, step.response_ids
            output.response_mask = [1] * len(step.response_ids)
            output.response_logprobs = step.logprobs
            output.num_turns = 2
            output.extra_fields.update(self.weight_version_fields(step.weight_versions))
            outputs.append(output)
        return outputs

    def to_output(self, episode: EpisodeResult, reward: float, fields: dict[str, Any]) -> AgentLoopOutput:
        n = self.response_length
        extra = dict(fields)
        extra.update(
            {
                sf.EPISODE_REWARD: episode.env_return,
                sf.WON: episode.won,
                sf.TURNS: episode.turns,
                sf.INVALID_FORMAT_TURNS: episode.invalid_format_turns,
                sf.INVALID_ACTION_TURNS: episode.invalid_action_turns,
                sf.TRUNCATED: episode.truncated,
                sf.FAILED: episode.failed or "",
                sf.SCORE: reward,
                **{k: type(v)() for k, v in VERL_EXTRA_DEFAULTS.items()},
                **self.weight_version_fields(episode.weight_versions),
                # verl's validation reports reward_extra_info keys per data source (val-aux/...).
                "reward_extra_info": {"success": float(episode.won)},
            }
        )
        return AgentLoopOutput(
            prompt_ids=episode.prompt_ids,
            response_ids=episode.response_ids[:n],
            response_mask=episode.response_mask[:n],
            response_logprobs=episode.response_logprobs[:n] if episode.response_logprobs else None,
            reward_score=reward,
            num_turns=len(episode.messages),
            metrics=AgentLoopMetrics(generate_sequences=episode.metrics.get("generate_s", 0.0)),
            extra_fields=extra,
        )


class _EpisodeTurns:
    """Episode mode: every turn extends one token stream (``policy_turn``, then the env's feedback as
    masked context), which becomes the episode's one sample."""

    def __init__(self, loop: EnvAgentLoop, context: TurnContext) -> None:
        self.loop, self.context = loop, context

    async def reply(self, episode: EpisodeResult) -> str | None:
        return await self.loop.policy_turn(self.context, episode)

    async def act(self, text: str, episode: EpisodeResult) -> tuple[str, bool]:
        return await self.loop._act(self.context.env, text, episode, self.context.timing)

    async def record(self, episode: EpisodeResult, text: str, done: bool) -> None:
        await self.loop.after_step(self.context, episode, text, done)

    async def next_turn(self, feedback: str) -> bool:
        return await self.loop.add_context(self.context.stream, "user", feedback)

    def finish(self, episode: EpisodeResult) -> None:
        stream = self.context.stream
        split = len(stream.token_ids) - len(stream.response_mask)
        episode.prompt_ids, episode.response_ids = stream.token_ids[:split], stream.token_ids[split:]
        episode.response_mask, episode.response_logprobs = stream.response_mask, stream.logprobs
        episode.weight_versions = stream.weight_versions


class _StepTurns:
    """Step mode: every turn is generated from a fresh prompt (``step_messages``) with the whole
    per-action budget (``max_tokens_per_turn`` or the response length) and becomes its own
    ``StepSample``."""

    def __init__(self, loop: EnvAgentLoop, env: TextEnv, sampling_params: dict[str, Any], request_id: str,
                 timing: dict[str, float], system_prompt: str, preamble: str, first_turn: str) -> None:
        self.loop, self.env, self.sampling_params, self.request_id, self.timing = loop, env, sampling_params, request_id, timing
        self.system_prompt, self.preamble, self.current = system_prompt, preamble, first_turn
        self.max_tokens = min(loop.response_length, loop.max_tokens_per_turn or loop.response_length)

    async def reply(self, episode: EpisodeResult) -> str | None:
        loop = self.loop
        self.prompt_ids = await loop._fitting_step_prompt(self.system_prompt, self.preamble, episode, self.current)
        if loop.fills_the_context(self.prompt_ids, self.request_id):
            return None
        with simple_timer("generate_sequences", self.timing):
            self.output = await loop.server_manager.generate(
                request_id=self.request_id, prompt_ids=self.prompt_ids,
                sampling_params={**self.sampling_params, "max_tokens": self.max_tokens},
            )
        self.response_ids = list(self.output.token_ids)[: loop.response_length]
        return loop.tokenizer.decode(self.response_ids, skip_special_tokens=True)

    async def act(self, text: str, episode: EpisodeResult) -> tuple[str, bool]:
        self.invalid_before = episode.invalid_format_turns
        # GiGPO's anchor state: where this step acts from.
        if self.loop.step_group_anchor == "observation":
            acted_on = (episode.last_step.observation if episode.last_step is not None
                        else episode.actions[-1][1] if episode.actions else episode.first_observation)
            self.anchor = "observation:" + hashlib.sha1(acted_on.encode("utf-8")).hexdigest()
        else:
            self.anchor = await self.loop._env_call(self.timing, self.env.state_key)
        self.reward_before = self.loop._reward_so_far(episode)
        return await self.loop._act(self.env, text, episode, self.timing)

    async def record(self, episode: EpisodeResult, text: str, done: bool) -> None:
        output, response_ids = self.output, self.response_ids
        logprobs = list(output.log_probs)[: len(response_ids)] if self.sampling_params.get("logprobs") and output.log_probs else None
        episode.step_samples.append(StepSample(self.prompt_ids, response_ids, logprobs, weight_versions(output),
                                               invalid_format=episode.invalid_format_turns > self.invalid_before,
                                               anchor_state=self.anchor, reward=self.loop._reward_so_far(episode) - self.reward_before))
        episode.weight_versions.extend(weight_versions(output))

    async def next_turn(self, feedback: str) -> bool:
        self.current = feedback
        return True

    def finish(self, episode: EpisodeResult) -> None:
        """Each turn already left its sample."""
