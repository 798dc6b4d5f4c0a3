"""Stateful agent loop (SKL §3, App. G.2): before every action the policy writes its knowledge z_s
of the current state, then acts conditioned on it, in two consecutive turns.

    user: observation + admissible actions + "what is your understanding of this state?"
    assistant: <knowledge>z_s</knowledge>                 (trained, response_mask 1)
    user: "now choose the action"                         (context, mask 0)
    assistant: <action>a</action>                          (trained, mask 1)

Knowledge for a state can be pre-filled (SKL-SD's verification retry runs with refined knowledge
ẑ): ``extra_info["prefilled_knowledge"]`` maps state keys to text. For such a state ẑ is written as
the policy's own knowledge turn (``<knowledge>ẑ</knowledge>``, response_mask 1, teacher-forced:
scored, not sampled), so the retry is in the format the policy uses at test time and a successful
retry (D_distill) trains the policy to produce ẑ at that state as well as the actions after it.
Each sample records ``skl_knowledge_steps`` (state key, knowledge, whether it was pre-filled) for
the replay buffer and the knowledge table.

``window: move`` (SKL-RL's chess loops, as the authors' ``max_window_size`` 1) generates every turn of a move
seeing that move's turns only: each move starts a fresh stream (system prompt, the task's first line, the
position and the knowledge question), and each move's stream becomes its own sample (``skl_step_index`` = the
move's window), every one scored with the episode's reward, so an estimator that counts trials (``skl_grpo`` with
``count: trials``, ``skl_rl``) gives every window of a game the game's advantage. A trained token is trained on
exactly the context it was sampled in. ``window_samples: last`` keeps only the last window (validation: one
sample per game). ``window: episode`` (the default) is one stream and one sample per episode.
``max_knowledge_tokens`` caps a knowledge turn (``max_tokens_per_turn`` caps the others); ``compact_position``
drops the chess board diagram from every observation (the FEN and the legal-move list stay). ``prompt_set:
chess_authors`` (the chess entries) asks in the words of ``skl_verl.skl.chess_prompts`` and keeps the opponent's
reply off the real turn, as the authors' prompt set does.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Annotated, Any


from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from envs.chess.board import OPPONENT_REPLY_SENTENCE
from skl_verl.options import AtLeast, OneOf
from skl_verl.rollout import sample_fields as sf
from skl_verl.rollout.env_loop import EnvAgentLoop, EpisodeResult, TokenStream, TurnContext
from skl_verl.rollout.loop_text import render_turn
from skl_verl.rollout.parsing import ParsedAction, TagActionParser
from skl_verl.rollout.prompt_safety import encode_as_text
from skl_verl.skl import fields as skl_fields
from skl_verl.skl.chess_prompts import PROMPT_SETS, chess_prompt_set, observation_fen
from skl_verl.skl.fields import KnowledgeStep
from skl_verl.skl.rollout_rules import RolloutRules

KNOWLEDGE_QUESTION = (
    "Before acting, write your understanding of this state inside <knowledge>...</knowledge>: "
    "what the likely outcomes of the most promising actions are, and what matters here for reaching the goal."
)
ACTION_REQUEST = "Based on your understanding, reply with exactly one action inside <action>...</action>."
STATEFUL_SYSTEM = (
    "You are an agent acting in a text environment. At every state you first state your understanding "
    "of the state (predictive knowledge: what each candidate action is likely to lead to), then choose "
    "one action from the admissible actions."
)
WINDOWS = ("episode", "move")
# What the authors' chess code strips from an untagged answer before matching it as a move (their special
# tokens plus the check and mate marks).
_BARE_MOVE_NOISE = re.compile(r"</?\s*(?:think|move|answer|action)\s*>|<\|im_(?:start|end)\|>|[+#]", re.I)


def bare_move(text: str, admissible: list[str]) -> str:
    """An untagged answer read as the authors' chess code reads it: the whole reply, cleaned of tag tokens and
    +/#, matched against the legal moves ignoring case (``qxf7`` plays ``Qxf7``); otherwise the cleaned text,
    which the game refuses (an illegal move loses at −1.01)."""
    cleaned = _BARE_MOVE_NOISE.sub("", text).strip()
    by_key = {_BARE_MOVE_NOISE.sub("", a).strip().lower(): a for a in admissible}
    return by_key.get(cleaned.lower(), cleaned)


class _BareMoveFallback:
    """The loop's parser, with the bare-move reading of an untagged reply where ``_act`` made one."""

    def __init__(self, parser: Any) -> None:
        self.parser, self.bare = parser, {}

    def __call__(self, text: str) -> ParsedAction:
        parsed = self.parser(text)
        return parsed if parsed.ok or text not in self.bare else ParsedAction(self.bare[text])
# The chess env's board diagram: its heading line, eight rank rows, the rule and the file letters.
_BOARD_DIAGRAM = re.compile(r"^Board \(White at the bottom[^\n]*\n(?:[1-8] \|[^\n]*\n){8} *\+-+\n *a b c d e f g h\n", re.M)


def compact_position(observation: str) -> str:
    """An observation without the chess board diagram (the FEN and the legal-move list say the same)."""
    return _BOARD_DIAGRAM.sub("", observation)


class StatefulAgentLoop(RolloutRules, EnvAgentLoop):
    rescores_sequences = True
    """Scores a teacher-forced turn on the rollout server (``generate`` with ``prompt_logprobs``)."""

    def __init__(
        self,
        *args: Any,
        max_knowledge_words: Annotated[int, AtLeast(1)] | None = None,
        max_knowledge_tokens: Annotated[int, AtLeast(1)] | None = None,
        window: Annotated[str, OneOf(*WINDOWS)] = "episode",
        window_samples: Annotated[str, OneOf("all", "last")] = "all",
        compact_position: bool = False,
        knowledge_format: Annotated[str, OneOf("tagged", "free")] = "tagged",
        untagged_action: Annotated[str, OneOf("retry", "as_move")] = "retry",
        prompt_set: Annotated[str, OneOf(*PROMPT_SETS)] = "ours",
        **kwargs: Any,
    ):
        """``max_knowledge_words``: None (default) bounds a knowledge turn by the response budget only, as
        the authors' code does (the paper's WebShop examples run to hundreds of words); a number makes a
        longer body a format error. ``max_knowledge_tokens``: the generation cap of a knowledge turn (None:
        ``max_tokens_per_turn``, which caps every other turn). ``window``, ``window_samples`` and
        ``compact_position``: see the module doc. ``knowledge_format``: ``tagged`` counts a knowledge turn without
        ``<knowledge>`` as a format error (its knowledge ""); ``free`` takes the whole reply as the knowledge,
        as the authors' chess code keeps its understanding (free text, no penalty). ``untagged_action``:
        ``retry`` answers an untagged action with what was wrong (a format error); ``as_move`` sends the whole
        reply, cleaned, as the move (``bare_move``), as the authors' chess code does. ``prompt_set``: ``ours`` (the
        generic wording below) or ``chess_authors`` (``skl_verl.skl.chess_prompts``: its system prompt unless
        ``system_prompt`` is given, its questions and requests, no opponent's reply on the real turn)."""
        self.chess_prompts = chess_prompt_set(prompt_set)
        kwargs.setdefault("system_prompt", self.chess_prompts.system if self.chess_prompts else STATEFUL_SYSTEM)
        super().__init__(*args, **kwargs)
        if self.sample_granularity != "episode":
            raise ValueError("stateful loops (knowledge turn + action turn per step) play episode samples only: "
                             "set sample_granularity: episode")
        self.max_knowledge_words = max_knowledge_words
        self.max_knowledge_tokens = max_knowledge_tokens
        self.window, self.window_samples, self.compact = window, window_samples, compact_position
        self.windows: list[TokenStream] = []
        """window: move: the streams of the moves before the current one, each cut after its action."""
        self._window_end: tuple[int, int] | None = None
        self._position = ""
        self._fen = ""  # chess prompts: the real position's FEN, for the questions that carry it
        # Without a word cap the parser must not cut the body by characters either.
        max_chars = max_knowledge_words * 20 if max_knowledge_words is not None else sys.maxsize
        self.knowledge_parser = TagActionParser(tags=("knowledge",), max_action_chars=max_chars)
        self.prefilled: dict[str, str] = {}
        self.knowledge_format, self.untagged_action = knowledge_format, untagged_action
        if untagged_action == "as_move":
            self.parser = _BareMoveFallback(self.parser)

    async def _act(self, env, text: str, episode: EpisodeResult, timing: dict):
        if self.untagged_action == "as_move" and not self.parser.parser(text).ok:  # read against this position
            self.parser.bare[text] = bare_move(text, await self._env_call(timing, env.admissible_actions))
        return await super()._act(env, text, episode, timing)

    def prepare_episode(self, extra_info: dict[str, Any]) -> None:
        prefilled = (extra_info or {}).get("prefilled_knowledge") or {}
        self.prefilled = json.loads(prefilled) if isinstance(prefilled, str) else dict(prefilled)

    @property
    def phase(self) -> str:
        return "retry" if self.prefilled else "act"

    def episode_fields(self, episode: EpisodeResult) -> dict[str, Any]:
        return {skl_fields.KNOWLEDGE_STEPS: episode.knowledge_steps}

    def render_observation(self, observation: str, actions: list[str] | str) -> str:
        # The question is asked of every state; pre-filled states answer it in the action request.
        if self.compact:
            observation = compact_position(observation)
        question = KNOWLEDGE_QUESTION
        if self.chess_prompts:  # the authors' real turn: the position, not the opponent's reply
            observation = OPPONENT_REPLY_SENTENCE.sub("", observation)
            self._fen = observation_fen(observation) or self._fen
            question = self.chess_prompts.knowledge_question.format(fen=self._fen)
        text = f"{render_turn(observation, actions)}\n\n{question}"
        if observation != "Try again.":  # the position a retry's window shows again
            self._position = text
        return text

    def to_outputs(self, episode: EpisodeResult, fields: dict[str, Any]) -> list[AgentLoopOutput]:
        """window: move: one sample per move's window, each with the episode's reward (``skl_step_index``:
        the window); otherwise the episode's one sample."""
        if self.window != "move" or episode.failed or not self.windows:
            return super().to_outputs(episode, fields)
        final = TokenStream([], episode.prompt_ids + episode.response_ids, episode.response_mask,
                            episode.response_logprobs, episode.weight_versions)
        windows = [*self.windows, final]
        reward = self.shaped_reward(episode)
        outputs = []
        for index, stream in enumerate(windows):
            if self.window_samples == "last" and index < len(windows) - 1:
                continue
            split = len(stream.token_ids) - len(stream.response_mask)
            if not any(stream.response_mask):
                continue  # a window the budget or the episode's end left without a policy turn
            output = self.to_output(episode, reward=reward, fields={**fields, sf.STEP_INDEX: index})
            output.prompt_ids, output.response_ids = stream.token_ids[:split], stream.token_ids[split:]
            output.response_mask = list(stream.response_mask)
            output.response_logprobs = list(stream.logprobs) if stream.logprobs is not None else None
            output.extra_fields.update(self.weight_version_fields(stream.weight_versions))
            outputs.append(output)
        return outputs or super().to_outputs(episode, fields)

    async def _next_window(self, context: TurnContext, episode: EpisodeResult) -> None:
        """window: move: close the previous move's stream after its action (the feedback that followed it
        becomes the new window's prompt) and start this move's stream from the system prompt, the task's
        first line and the position."""
        stream = context.stream
        if self._window_end is None:
            return
        tokens, masked = self._window_end
        feedback = stream.messages[-1]["content"] if stream.messages[-1]["role"] == "user" else self._position
        if episode.last_step is None and self._position and feedback != self._position:
            feedback = f"{feedback.split(chr(10), 1)[0]}\n\n{self._position}"  # a retry: the error, then the position
        self.windows.append(TokenStream(stream.messages, stream.token_ids[:tokens], stream.response_mask[:masked],
                                        stream.logprobs[:masked] if stream.logprobs is not None else None,
                                        stream.weight_versions))
        task = episode.task_text.split("\n", 1)[0]
        messages = self.chat(self.system_prompt, f"{task}\n{feedback}" if task and not feedback.startswith(task) else feedback)
        stream.messages, stream.token_ids = messages, await self.ct_build_initial_tokens(messages)
        stream.response_mask, stream.weight_versions = [], []
        stream.logprobs = [] if stream.logprobs is not None else None
        self._window_end = None

    async def generate_turn(self, context: TurnContext, knowledge: bool = False) -> str | None:
        """``generate`` under this turn's cap: ``max_knowledge_tokens`` for a knowledge turn (else, and for
        every other turn, ``max_tokens_per_turn``)."""
        if not knowledge or self.max_knowledge_tokens is None:
            return await self.generate(context)
        saved, self.max_tokens_per_turn = self.max_tokens_per_turn, self.max_knowledge_tokens
        try:
            return await self.generate(context)
        finally:
            self.max_tokens_per_turn = saved

    async def after_step(self, context: TurnContext, episode: EpisodeResult, reply: str, done: bool) -> None:
        """Complete this step's record into a transition (action, reward, next state) when the
        env really moved; format errors and invalid actions leave ``action`` None."""
        if self.window == "move":  # the move's window ends with its action
            self._window_end = (len(context.stream.token_ids), len(context.stream.response_mask))
        step, result = episode.knowledge_steps[-1], episode.last_step
        step.acted, step.action, step.reward, step.next_state_key, step.done = True, None, 0.0, None, done
        if result is not None and not result.invalid_action:
            step.next_state_key = await self._env_call(context.timing, context.env.state_key)
            step.action, step.reward = self.parser(reply).action, float(result.reward)

    async def policy_turn(self, context: TurnContext, episode: EpisodeResult) -> str | None:
        if self.window == "move":
            await self._next_window(context, episode)
        state_key = await self._env_call(context.timing, context.env.state_key)
        step = KnowledgeStep(
            state_key=state_key,
            observation=context.stream.messages[-1]["content"],
            prefilled=state_key in self.prefilled,
            context_tokens=len(context.stream.token_ids),
            context_messages=len(context.stream.messages),
            window=len(self.windows),
        )
        if step.prefilled:
            step.knowledge = self.prefilled[state_key]
            if not await self.force_reply(context, f"<knowledge>{step.knowledge}</knowledge>"):
                return None
        else:
            text = await self.generate_turn(context, knowledge=True)
            if text is None:
                return None
            step.knowledge, step.knowledge_error = self.read_knowledge(text, episode)
        step.knowledge_end = len(context.stream.token_ids)
        episode.knowledge_steps.append(step)
        if not await self.before_action(context, episode, step):
            return None
        if not await self.add_context(context.stream, "user", self.action_request()):
            return None
        return await self.generate(context)

    def action_request(self) -> str:
        """The request for the real action, after the knowledge turn (and SKL-RL's simulation)."""
        return self.chess_prompts.action_request if self.chess_prompts else ACTION_REQUEST

    async def force_reply(self, context: TurnContext, text: str) -> bool:
        """Append ``text`` as the policy's own reply (response_mask 1) without sampling it: the
        tokens a generation of ``text`` would end with (eos included), with the rollout log-probs the
        server gives them when the batch carries log-probs. False when over the response budget."""
        stream = context.stream
        ids = encode_as_text(text, self.tokenizer) + [self.tokenizer.eos_token_id]
        if len(stream.response_mask) + len(ids) >= self.response_length:
            return False
        logprobs = None
        if stream.logprobs is not None:
            request = f"{context.request_id}:forced{len(stream.messages)}"
            logprobs, versions = await self.score_response(stream.token_ids, ids, request, context.sampling_params)
            stream.weight_versions.extend(versions)
        merged, stream.response_mask, stream.logprobs = await self.ct_merge_assistant_token(
            stream.token_ids, ids, stream.response_mask, stream.logprobs, assistant_logprobs=logprobs
        )
        stream.token_ids = merged.token_ids
        stream.messages.append({"role": "assistant", "content": text})
        return True

    def read_knowledge(self, text: str, episode: EpisodeResult) -> tuple[str, str]:
        """(the <knowledge> body of a reply, why it has none). A missing tag (``knowledge_format: tagged``), or a
        body over ``max_knowledge_words`` when set, counts as a format error (the turn still acts); with
        ``knowledge_format: free`` a reply without the tag is the knowledge, whole."""
        parsed = self.knowledge_parser(text)
        if not parsed.ok and self.knowledge_format == "free":
            parsed = ParsedAction(text.strip())
        error = parsed.error if not parsed.ok else ""
        if not error and self.max_knowledge_words is not None and len(parsed.action.split()) > self.max_knowledge_words:
            error = f"knowledge over the {self.max_knowledge_words}-word cap"
        if error:
            episode.invalid_format_turns += 1
            return "", error
        return parsed.action, ""

    async def before_action(self, context: TurnContext, episode: EpisodeResult, step: KnowledgeStep) -> bool:
        """Between the knowledge turn and the action request (SKL-RL simulates here). False when
        the response budget ran out."""
        return True
