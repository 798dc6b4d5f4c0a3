"""SKL-RL rollout (Alg. 2, App. D, G.2): at every real step the policy writes z_{s_t}, the
simulator is snapshot and N branches of horizon H are played, the policy reads the aggregated
branches and writes refined knowledge ẑ_{s_t}, then acts; the simulator is restored before the
real action, so simulations never change the real trajectory.

With ``simulation_policy: self`` (§4.2.2, the default) the simulation is the policy's own, inside
the trained trace and conditioned on z_{s_t} (everything it writes follows z in the same stream):

    user: s_t + admissible actions + knowledge question   | assistant: <knowledge>z</knowledge>
    user: "propose up to N candidates"                    | assistant: <move>a</move><move>b</move>...
    user: branch results after step 1 (context)
    user: branch n, its state, "your understanding"       | assistant: <knowledge>z_b</knowledge>   (h = 2..H)
    user: "next move"                                      | assistant: <move>c</move>
    user: branch results after step h (context)  ...
    user: the N branches' moves and outcomes + "update it" | assistant: <knowledge>ẑ</knowledge>
    user: action request                                  | assistant: <action>a_t</action>

Every assistant turn has response_mask 1, so GRPO on the episode outcome trains the proposals and
branch moves too (the paper optimises the whole trace). The root proposal keeps the first N
distinct admissible moves (at most N distinct root candidates; repeats and inadmissible moves are
dropped, and a reply without any leaves the step unsimulated). Each branch starts from the root
snapshot with its own env RNG (``simulation.branch_snapshot``: independent random opponents in a
chess game). A branch node whose reply names no admissible move plays a random admissible one
(``random_move_when_invalid``, as the authors' main chess script); off, the branch ends there. The authors' chess scripts keep the branch moves after the root proposal out of the
trained trace (``include_turn2_simulation_in_response=False``); here they are trained, as the paper
describes. With ``random`` or ``expert_mix`` a behaviour policy plays the branches and the trace
holds only their rendering (context, mask 0).

With ``window: move`` (the chess entries, as the authors ran it) every move is its own window and sample
(``StatefulAgentLoop``): the trained turns of a move are z, the proposal, ẑ and the move; a branch node's
turns (understanding, move) are generated on a copy of the window (the move's turns so far and that node's
request; no other branch's node turns) and kept out of every sample, as the authors'
``include_turn2_simulation_in_response=False``; the simulator's results stay in the window as context.
Otherwise the whole interleaved trace is one sample trained with GRPO on the episode outcome (Eq. 4's
first term, phase ``act``). Every ``distill_interval`` training steps the loop also emits, per real
step, a distillation sample (phase ``distill``): the student context (the stream before z_{s_t}
was written: s_t and the history, exactly as z was sampled in it, laid out as the trace's prompt plus
untrained response tokens) with the teacher's ẑ_{s_t} as the trained response. Trained with
weight λ (``algorithm.skl_rl.distill_coef``) this is sequence-level forward-KL distillation
(Eq. 5, Supervised-KD on teacher samples): its gradient is λ·∇ log π(ẑ | s_t, H), an unbiased
sample of the forward-KL gradient. With ``distill_kind: reverse`` (Eq. 6) the loop instead emits a
teacher probe per step: the student's own z tokens scored under the teacher context (the knowledge
question with the simulations shown), phase ``distill_teacher``, never trained. The ``skl_rl``
estimator then adds the per-token credit -λ·(log π(z_t | s, H) − log π(z_t | sims, s, H)) to the
z tokens of the trace: the policy-gradient (k1-reward) form of the reverse-KL gradient, computed
from the old log-probs verl's trainer already has. ``distill_kind: reverse_trace`` is the authors' variant
(``skl_verl/skl/distillation.py``): the teacher probe is z's own sample with z put where ẑ was, and each sample's
loss mask is cut to its z tokens (trained with ``algorithm.skl_rl.objective: distill_only``). The (z, ẑ) pairs of
every step are attached as ``skl_distill_pairs``.

Behaviour policies (``simulation_policy``): ``random`` (uniform admissible actions, any env with
snapshots) and ``expert_mix`` (chess, §4.2.1: Stockfish's move with probability ``expert_rate`` —
the paper's 1/2, 1/3, 1/6 — else a random other legal move; needs the ``stockfish`` binary).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Annotated, Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from skl_verl.options import AtLeast, Between, ConfigError, OneOf, declared_options
from skl_verl.rollout import sample_fields as sf
from skl_verl.skl import fields as skl_fields
from skl_verl.skl.fields import KnowledgeStep
from skl_verl.rollout.env_runtime import EnvCallFailed
from skl_verl.rollout.env_loop import EpisodeResult, TokenStream, TurnContext
from skl_verl.rollout.loop_text import render_turn
from skl_verl.rollout.outputs import single_turn_output, stable_seed
from skl_verl.skl.stateful_loop import StatefulAgentLoop, compact_position
from skl_verl.rollout.prompt_safety import encode_as_text, neutralise_special_tokens
from skl_verl.skl.distillation import student_mask, trace_teacher
from skl_verl.skl.simulation import (
    BoardPolicy,
    Branch,
    RandomPolicy,
    SimStep,
    branch_snapshot,
    render_branches,
    render_transition_tuples,
    simulate_branches,
)

REFINE_REQUEST = (
    "Simulated continuations from this exact state ({n} branches, up to {h} steps each):\n{branches}\n\n"
    "Update your understanding of the state in light of these outcomes, inside <knowledge>...</knowledge>."
)

TEACHER_HINT = "Simulated continuations from this exact state ({n} branches, up to {h} steps each):\n{branches}"

PROPOSE_REQUEST = (
    "Before acting you may test up to {n} different candidate actions in a simulator of this exact "
    "state. Reply with each candidate inside its own <move>...</move> tag: at most {n}, no repeats, "
    "chosen from the admissible actions."
)
BRANCH_REQUEST = (
    "Simulation branch {branch} (it began with {first}), step {step} of {horizon}. The branch is now at:\n"
    "{observation}\n\n{ask}"
)
BRANCH_MOVE_ASK = "Reply with this branch's next move inside <move>...</move>."
# Two stages at every branch node, as at the real state (the authors' prompts): understanding, then the move.
BRANCH_UNDERSTANDING_ASK = "First state your understanding of this branch state inside <knowledge>...</knowledge>."
SIMULATION_OPTIONS = ("self", "random", "expert_mix")
# Forward (Eq. 5), reverse with our teacher context (the student's messages before z plus the simulations shown as
# a hint), reverse with the authors' teacher sequence (the trace with z where ẑ was; skl_verl/skl/distillation.py).
DISTILL_KINDS = ("forward", "reverse", "reverse_trace")
BRANCH_UNDERSTANDINGS = "skl_branch_understandings"  # per real step, the understanding written at each branch node
MAX_BRANCH_OBSERVATION_CHARS = 1500  # one branch state in the trace; chess positions are ~700 characters
# Only the tags are searched for; what lies between them is paired up in one pass (tagged_moves), so a
# reply of many unclosed <move> tags is read once instead of once per tag.
_MOVE_TAG = re.compile(r"<(/?)(?ai:move)>")


def _canonical(action: str) -> str:
    return action.strip().rstrip("+#!?").strip().lower()


def proposed_moves(text: str, admissible: list[str], limit: int) -> list[str]:
    """The first ``limit`` distinct admissible moves among the ``<move>`` tags of ``text``, in order.

    Matching ignores case and check/annotation marks (``Qxf7`` is ``Qxf7#``); a repeat or a move
    that is not admissible is dropped, so at most ``limit`` distinct candidates come back."""
    by_key = {_canonical(a): a for a in admissible}
    chosen: list[str] = []
    for raw in tagged_moves(text):
        action = by_key.get(_canonical(raw))
        if action is not None and action not in chosen:
            chosen.append(action)
            if len(chosen) == limit:
                break
    return chosen


def tagged_moves(text: str) -> Iterator[str]:
    """The text of each ``<move>…</move>`` block, in order, in linear time (tag case ignored, ASCII only).

    A block runs from an opening tag to the first closing tag after it: an opening tag inside a block is
    part of its text, a closing tag outside any block is ignored, and an unclosed block yields nothing."""
    opened_at = None
    for tag in _MOVE_TAG.finditer(text):
        if not tag[1] and opened_at is None:
            opened_at = tag.end()
        elif tag[1] and opened_at is not None:
            yield text[opened_at : tag.start()]
            opened_at = None


def _window_field(trace: AgentLoopOutput) -> dict[str, Any]:
    """The window index of a distillation sample's or probe's trace, where the trace has one (``window: move``):
    every sample of a batch carries the same fields."""
    return {sf.STEP_INDEX: trace.extra_fields[sf.STEP_INDEX]} if sf.STEP_INDEX in trace.extra_fields else {}


def behaviour_policy(name: str, seed: int, expert_rate: float, engine_path: str | None = None):
    """A heuristic simulation policy by name. Chess engines come from a per-process pool, one engine per
    move being searched, so concurrent simulations never share an engine."""
    if name == "random":
        return RandomPolicy(seed)
    if name == "expert_mix":
        from envs.chess.engines import PooledStockfish
        from envs.chess.policies import MixedBehaviourPolicy

        return BoardPolicy(MixedBehaviourPolicy(expert_rate, seed=seed, engine=PooledStockfish(engine_path)))
    raise ValueError(f"simulation_policy must be one of {SIMULATION_OPTIONS}, got {name!r}")


def check_distillation(config: Any, options: Any, loop_entry: Any) -> None:
    """``reverse_trace`` cuts the traces' loss mask to z, so it trains only with ``objective: distill_only``; and
    ``distill_only`` with no distillation samples (``distill_interval`` 0) would train nothing."""
    loop = config.actor_rollout_ref.rollout.agent.default_agent_loop
    defaults = declared_options(SklRlAgentLoop)
    kind = loop_entry.get("distill_kind", defaults["distill_kind"].default)
    interval = loop_entry.get("distill_interval", defaults["distill_interval"].default)
    if kind == "reverse_trace" and options.objective != "distill_only":
        raise ConfigError(f"agent loop {loop!r} distils with distill_kind: reverse_trace, whose traces keep only z in "
                          f"their loss mask; set algorithm.skl_rl.objective=distill_only (it is {options.objective!r})")
    if options.objective == "distill_only" and not interval:
        raise ConfigError(f"algorithm.skl_rl.objective=distill_only trains only distillation, but agent loop {loop!r} "
                          "emits none (distill_interval 0); set its distill_interval, e.g. 1")


def check_simulation_engine(config: Any, options: Any, loop_entry: Any) -> None:
    """A heuristic simulation by Stockfish needs the binary where the run starts, not at its first simulation
    (and the distillation settings agree: ``check_distillation``)."""
    if loop_entry.get("simulation_policy") == "expert_mix":
        from envs.base import DependencyMissingError
        from envs.chess.engines import find_stockfish

        try:
            find_stockfish(loop_entry.get("engine_path"))
        except DependencyMissingError as exc:
            loop = config.actor_rollout_ref.rollout.agent.default_agent_loop
            raise ConfigError(f"agent loop {loop!r} simulates with Stockfish (simulation_policy: expert_mix): {exc}; "
                              "or set its engine_path") from None
    check_distillation(config, options, loop_entry)


class SklRlAgentLoop(StatefulAgentLoop):
    def __init__(
        self,
        *args: Any,
        simulations: Annotated[int, AtLeast(1)] = 3,
        horizon: Annotated[int, AtLeast(1)] = 2,
        simulation_policy: Annotated[str, OneOf(*SIMULATION_OPTIONS)] = "self",
        expert_rate: Annotated[float, Between(0, 1)] = 0.5,
        engine_path: str | None = None,
        distill_interval: Annotated[int, AtLeast(0)] = 0,
        distill_kind: Annotated[str, OneOf(*DISTILL_KINDS)] = "forward",
        branch_understanding: bool = True,
        simulation_format_errors: bool = True,
        random_move_when_invalid: bool = True,
        **kwargs: Any,
    ):
        """N simulations of horizon H per real step (chess: 3 and 2), by the policy itself (trained in the
        trace) or a behaviour policy shown as context (``random``; ``expert_mix``: Stockfish's move with
        probability ``expert_rate``); distillation samples every ``distill_interval`` steps (δ; 0: off),
        forward (Eq. 5) or reverse (Eq. 6) KL (``distill_kind``: ``forward``, ``reverse`` with our teacher context,
        ``reverse_trace`` with the authors' teacher sequence). ``branch_understanding``: in self-simulation every branch node
        past the root is two turns, understanding then move, as the authors' prompts have it (False: the move only).
        ``simulation_format_errors``: a proposal without an admissible ``<move>`` counts as a format error (False:
        the step goes unsimulated at no cost, as the authors' chess code, whose simulation turns carry no reward).
        ``random_move_when_invalid``: a branch node's reply without an admissible ``<move>`` plays a random admissible
        move (the authors' main chess script, ``random_move_when_invalid_plan_simulation=True``); False ends the
        branch there (their distillation and N4H3 scripts)."""
        super().__init__(*args, **kwargs)
        self.random_move_when_invalid = random_move_when_invalid
        self.simulation_format_errors = simulation_format_errors
        self.branch_understanding = branch_understanding
        self.branch_understandings: dict[int, list[str]] = {}  # real step -> the understanding written at each branch node
        self.distill_interval, self.distill_kind = distill_interval, distill_kind
        self._teacher_contexts: list[tuple[int, list[dict[str, str]]]] = []
        self.refined_spans: dict[int, tuple[int, int]] = {}  # real step -> [start, end) of ẑ in its sample's stream
        self.simulations, self.horizon = simulations, horizon
        self.simulation_policy, self.expert_rate, self.engine_path = simulation_policy, expert_rate, engine_path
        if simulation_policy != "self":
            behaviour_policy(simulation_policy, 0, expert_rate, engine_path)  # fail at start on a bad config

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        traces = await super().run(sampling_params, **kwargs)  # the episode's sample, or one per move's window
        step = int(kwargs.get("global_steps") or 0)
        if not self.distill_interval or step % self.distill_interval:
            return traces
        # Each step's z lies in its window's sample (the episode's one sample with window: episode).
        by_window = {t.extra_fields.get(sf.STEP_INDEX) or 0: t for t in traces}
        outputs = list(traces)
        records = traces[0].extra_fields[skl_fields.KNOWLEDGE_STEPS]
        if self.distill_kind == "forward":
            for position, record in enumerate(records):
                trace = by_window.get(record.window)
                stream = [] if trace is None else list(trace.prompt_ids) + list(trace.response_ids)
                if record.refined_knowledge and stream and record.context_tokens <= len(stream):
                    context = stream[: record.context_tokens]
                    outputs.append(await self._distill_sample(trace, record, position, context, sampling_params))
        elif self.distill_kind == "reverse_trace":
            outputs.extend(await self._trace_teachers(traces, records, sampling_params))
        else:
            for position, messages in self._teacher_contexts:
                record = records[position]
                trace = by_window.get(record.window)
                stream = [] if trace is None else list(trace.prompt_ids) + list(trace.response_ids)
                if record.knowledge_end and stream and record.knowledge_end <= len(stream):
                    probe = await self._teacher_probe(trace, record, position, messages, stream, sampling_params)
                    outputs.extend([probe] if probe is not None else [])
        return outputs

    async def _trace_teachers(self, traces: list[AgentLoopOutput], records: list[KnowledgeStep], sampling_params) -> list[AgentLoopOutput]:
        """The authors' reverse-KL distillation (``distill_kind: reverse_trace``; ``distillation.trace_teacher``):
        per step, a teacher probe that is its sample with the student's z in ẑ's place, scored, never trained; and
        every trace's loss mask cut to its z tokens (the student sequence), so only z is distilled and the token
        mean runs over z as theirs. A step without ẑ, or whose teacher would not fit the response budget, gets no
        credit (its z stays in the student mask, at advantage 0)."""
        by_window = {t.extra_fields.get(sf.STEP_INDEX) or 0: t for t in traces}
        z_spans: dict[int, list[tuple[int, int]]] = {}
        probes = []
        for position, record in enumerate(records):
            trace = by_window.get(record.window)
            if trace is None or record.knowledge_end is None:
                continue
            offset = len(trace.prompt_ids)
            z = (record.context_tokens - offset, record.knowledge_end - offset)
            if z[1] > len(trace.response_ids):
                continue  # z was cut off with the sample's end
            z_spans.setdefault(record.window, []).append(z)
            z_hat = self.refined_spans.get(position)
            if z_hat is None or z_hat[1] - offset > len(trace.response_ids):
                continue
            teacher_ids, teacher_mask, probe_start = trace_teacher(
                list(trace.response_ids), list(trace.response_mask), z, (z_hat[0] - offset, z_hat[1] - offset))
            if len(teacher_ids) > self.response_length:
                continue
            fields = {
                sf.TRAJECTORY_ID: trace.extra_fields[sf.TRAJECTORY_ID], sf.SEQUENCE_ID: trace.extra_fields[sf.SEQUENCE_ID],
                sf.POSITION: position, sf.PHASE: "distill_teacher", sf.TOKEN_CREDIT: None, **_window_field(trace),
                skl_fields.Z_SPAN: [z[0], z[1], probe_start],
            }
            request = f"{fields[sf.TRAJECTORY_ID]}:teacher{position}"
            logprobs, versions = await self.score_response(trace.prompt_ids, teacher_ids, request, sampling_params)
            probe = single_turn_output(list(trace.prompt_ids), teacher_ids, 0.0, fields, logprobs,
                                       self.weight_version_fields(versions), num_turns=2)
            probe.response_mask = teacher_mask
            probes.append(probe)
        for window, trace in by_window.items():
            trace.response_mask = student_mask(list(trace.response_mask), z_spans.get(window, []))
        return probes

    async def _teacher_probe(self, trace, record: KnowledgeStep, position: int, messages, stream: list[int], sampling_params):
        """The student's z tokens after the whole teacher context (the student context with this step's
        simulations shown before z); scored, never trained (the estimator gives probes advantage 0).

        The teacher context is laid out as the trace is: the trace's prompt, then the rest of the context
        as response tokens, so it is never cut to ``prompt_length`` (issue 22 item 7). A probe longer
        than the response budget is left out: the step then gets no reverse-KL credit."""
        z_ids = stream[record.context_tokens : record.knowledge_end]
        teacher_ids = await self.ct_build_initial_tokens(messages)
        split = min(len(trace.prompt_ids), len(teacher_ids))
        prompt_ids, context_ids = teacher_ids[:split], teacher_ids[split:]
        if len(context_ids) + len(z_ids) > self.response_length:
            return None
        offset = len(trace.prompt_ids)
        fields = {
            sf.TRAJECTORY_ID: trace.extra_fields[sf.TRAJECTORY_ID], sf.SEQUENCE_ID: trace.extra_fields[sf.SEQUENCE_ID],
            sf.POSITION: position, sf.PHASE: "distill_teacher", sf.TOKEN_CREDIT: None,
            **_window_field(trace),  # the window whose z it scores
            # Where z sits in the trace's response, and where it starts in the probe's: the estimator aligns
            # the two samples' log-probs by them.
            skl_fields.Z_SPAN: [record.context_tokens - offset, record.knowledge_end - offset, len(context_ids)],
        }
        response_ids = context_ids + z_ids
        logprobs, versions = await self.score_response(prompt_ids, response_ids, f"{fields[sf.TRAJECTORY_ID]}:probe{position}", sampling_params)
        output = single_turn_output(prompt_ids, response_ids, 0.0, fields, logprobs, self.weight_version_fields(versions), num_turns=2)
        # z keeps mask 1, as a probe always had: the trainer drops rows with no masked token before the
        # estimator, which gives probes advantage 0, so nothing of the probe is trained.
        output.response_mask = [0] * len(context_ids) + [1] * len(z_ids)
        return output

    async def _distill_sample(self, trace: AgentLoopOutput, record: KnowledgeStep, position: int, context_ids: list[int], sampling_params):
        """π(ẑ | the student context z was sampled in): the trace's prompt, the stream up to z as context
        tokens (response_mask 0), then ẑ (mask 1). The context is exactly the one z was sampled in, never
        cut to ``prompt_length`` (issue 22 item 7); ẑ is cut at the response budget."""
        target = f"<knowledge>{record.refined_knowledge}</knowledge>"
        prompt_ids, history_ids = context_ids[: len(trace.prompt_ids)], context_ids[len(trace.prompt_ids):]
        target_ids = encode_as_text(target, self.tokenizer) + [self.tokenizer.eos_token_id]
        target_ids = target_ids[: max(0, self.response_length - len(history_ids))]
        fields = {
            sf.TRAJECTORY_ID: trace.extra_fields[sf.TRAJECTORY_ID], sf.SEQUENCE_ID: trace.extra_fields[sf.SEQUENCE_ID],
            sf.POSITION: position, sf.PHASE: "distill", sf.TOKEN_CREDIT: None, skl_fields.DISTILL_STATE: record.state_key,
            **_window_field(trace),
        }
        response_ids = history_ids + target_ids
        logprobs, versions = await self.score_response(prompt_ids, response_ids, f"{fields[sf.TRAJECTORY_ID]}:distill{position}", sampling_params)
        output = single_turn_output(prompt_ids, response_ids, 0.0, fields, logprobs, self.weight_version_fields(versions), num_turns=2)
        output.response_mask = [0] * len(history_ids) + [1] * len(target_ids)
        return output

    def episode_fields(self, episode: EpisodeResult) -> dict[str, Any]:
        steps = episode.knowledge_steps
        return {
            **super().episode_fields(episode),
            skl_fields.DISTILL_PAIRS: [
                {"state_key": s.state_key, "z": s.knowledge, "z_hat": s.refined_knowledge} for s in steps
            ],
            skl_fields.SIMULATED_STEPS: sum(s.simulated_steps for s in steps),
            skl_fields.ROOT_CANDIDATES: [len(s.root_candidates) for s in steps],
            BRANCH_UNDERSTANDINGS: [self.branch_understandings.get(i, []) for i in range(len(steps))],
        }

    async def before_action(self, context: TurnContext, episode: EpisodeResult, step: KnowledgeStep) -> bool:
        seed = stable_seed(f"{context.request_id}:{len(episode.knowledge_steps)}")
        if self.simulation_policy == "self":
            branches = await self._simulate_in_trace(context, episode, step, seed)
            if branches is None:
                return False
        else:
            policy = behaviour_policy(self.simulation_policy, seed, self.expert_rate, self.engine_path)
            try:
                branches = await self._env_call(
                    context.timing, simulate_branches, context.env, policy, self.simulations, self.horizon, seed
                )
            except EnvCallFailed:  # timed out or the env failed: the real env is gone, play_episode flags the sample
                raise
            except Exception as exc:  # noqa: BLE001 - simulate_branches restored the env; the real step goes on
                step.simulation_error = f"{type(exc).__name__}: {exc}"
                branches = []
        step.simulated_steps = sum(len(b.steps) for b in branches)
        step.simulated_wins = sum(int(b.won) for b in branches)
        text = self._render_simulations(branches)
        if self.distill_kind == "reverse" and step.knowledge_end is not None:
            # Teacher context for z: the student context with the simulations shown before z.
            # Re-rendered from text, so the policy's own earlier replies are untrusted here too.
            messages = [
                {**m, "content": neutralise_special_tokens(m["content"], self.tokenizer)}
                for m in context.stream.messages[: step.context_messages]
            ]
            # The teacher's context holds none of the trace's simulator turns, so the states are shown in full.
            shown = render_branches(branches) if branches else text
            hint = TEACHER_HINT.format(n=len(branches), h=self.horizon, branches=shown)
            messages[-1]["content"] += "\n\n" + neutralise_special_tokens(hint, self.tokenizer)
            self._teacher_contexts.append((len(episode.knowledge_steps) - 1, messages))
        if self.chess_prompts:  # the authors' order: the refine request, then the ẑ question as its own turn
            history = render_transition_tuples(branches) if branches else "(simulation unavailable)"
            requests = [self.chess_prompts.refine_request.format(branches=history),
                        self.chess_prompts.refined_question.format(fen=self._fen)]
        else:
            requests = [REFINE_REQUEST.format(n=len(branches), h=self.horizon, branches=text)]
        for request in requests:
            if not await self.add_context(context.stream, "user", request):
                return False
        z_hat_start = len(context.stream.token_ids)
        reply = await self.generate_turn(context, knowledge=True)
        if reply is None:
            return False
        self.refined_spans[len(episode.knowledge_steps) - 1] = (z_hat_start, len(context.stream.token_ids))
        step.refined_knowledge, step.refined_knowledge_error = self.read_knowledge(reply, episode)
        return True

    async def _simulate_in_trace(self, context: TurnContext, episode: EpisodeResult, step: KnowledgeStep, seed: int):
        """The policy's own look-ahead (§4.2.2, App. D) written into the trace: root candidates, then
        one move per live branch and step. Returns the branches (possibly none), or None when the
        response budget ran out; a failed env call propagates (``EnvCallFailed``: ``play_episode`` flags
        the sample). Otherwise the env is back at the root snapshot afterwards."""
        env, stream, timing = context.env, context.stream, context.timing
        root = await self._env_call(timing, env.get_state)
        root_key = await self._env_call(timing, env.state_key)
        admissible = await self._env_call(timing, env.admissible_actions)
        propose = self.chess_prompts.propose_request if self.chess_prompts else PROPOSE_REQUEST
        if not await self.add_context(stream, "user", propose.format(n=self.simulations)):
            return None
        reply = await self.generate(context)
        if reply is None:
            return None
        candidates = proposed_moves(reply, admissible, self.simulations)
        step.root_candidates = candidates
        if not candidates:
            step.simulation_error = "no admissible <move> in the proposal"
            episode.invalid_format_turns += int(self.simulation_format_errors)
            return []
        states = [branch_snapshot(root, seed, b) for b in range(len(candidates))]
        steps: list[list[SimStep]] = [[] for _ in candidates]
        moves: list[str | None] = list(candidates)
        prompts = self.chess_prompts
        branch_request = prompts.branch_request if prompts else BRANCH_REQUEST
        understanding_ask = prompts.branch_understanding_ask if prompts else BRANCH_UNDERSTANDING_ASK
        move_ask = prompts.branch_move_ask if prompts else BRANCH_MOVE_ASK
        env_lost = False
        try:
            for h in range(self.horizon):
                if h:  # deeper steps: the policy picks each live branch's next move, in the trace
                    for b, branch_steps in enumerate(steps):
                        moves[b] = None
                        if not branch_steps or branch_steps[-1].done:
                            continue
                        observation = self._shown(branch_steps[-1].observation)
                        await self._env_call(timing, env.set_state, states[b])
                        options = await self._env_call(timing, env.admissible_actions)
                        # Shown as the real turn shows it (the env's compact rendering when it has one:
                        # chess lists at most 30 unmarked moves); matched against every admissible action.
                        shown = render_turn(observation, await self._prompt_actions(env, timing))
                        node = dict(branch=b + 1, first=candidates[b], step=h + 1, horizon=self.horizon, observation=shown)
                        # window: move: the node's turns on a copy of the window, kept out of every sample.
                        node_context = self._side_context(context) if self.window == "move" else context
                        if self.branch_understanding:
                            understanding = await self._ask(node_context, branch_request.format(**node, ask=understanding_ask), knowledge=True)
                            if understanding is None:
                                return None
                            self.branch_understandings.setdefault(len(episode.knowledge_steps) - 1, []).append(
                                self.read_knowledge(understanding, episode)[0])
                            reply = await self._ask(node_context, move_ask)
                        else:
                            reply = await self._ask(node_context, branch_request.format(**node, ask=move_ask))
                        if reply is None:
                            return None
                        chosen = proposed_moves(reply, options, 1)
                        if not chosen and self.random_move_when_invalid and options:
                            chosen = [random.Random(stable_seed(f"{seed}:{b}:{h}")).choice(options)]
                        moves[b] = chosen[0] if chosen else None
                        if moves[b] is None:
                            steps[b].append(self._stopped_step(branch_steps[-1].next_state_key))
                results = []
                for b, move in enumerate(moves):
                    if move is None:
                        continue
                    await self._env_call(timing, env.set_state, states[b])
                    key = await self._env_call(timing, env.state_key)
                    result = await self._env_call(timing, env.step, move)
                    states[b] = await self._env_call(timing, env.get_state)
                    next_key = await self._env_call(timing, env.state_key)
                    steps[b].append(SimStep(key, move, result.observation, float(result.reward), bool(result.done),
                                            result.won, next_key, result.invalid_action, dict(result.info)))
                    results.append(f"Branch {b + 1}, move {move}:\n{self._shown(result.observation)}")
                if results and not await self.add_context(stream, "user", f"Simulator results after step {h + 1}:\n\n" + "\n\n".join(results)):
                    return None
        except EnvCallFailed:  # the env worker is gone: play_episode flags the sample, nothing to restore
            env_lost = True
            raise
        except Exception as exc:  # noqa: BLE001 - reported on the step; the real episode goes on from the root
            step.simulation_error = f"{type(exc).__name__}: {exc}"
        finally:
            if not env_lost:
                await self._env_call(timing, env.set_state, root)
        return [Branch(b, root_key, self.horizon, tuple(s for s in branch_steps if s.action)) for b, branch_steps in enumerate(steps)]

    def action_request(self) -> str:
        return self.chess_prompts.simulated_action_request if self.chess_prompts else super().action_request()

    def _render_simulations(self, branches: list[Branch]) -> str:
        """τ^H_N(s_t) for the refine request. Self-simulation already showed every branch state in the trace
        (the simulator's results after each step), so only moves, rewards and outcomes are restated; a
        behaviour policy's branches are shown here alone, observations included. Re-showing the states
        cost ~4,000 characters a move and kept a 10-move game out of its budget (issue 22 item 6)."""
        if not branches:
            return "(simulation unavailable)"
        return render_branches(branches, observations=self.simulation_policy != "self")

    async def _ask(self, context: TurnContext, request: str, knowledge: bool = False) -> str | None:
        """One user request and the policy's reply (trained when ``context`` is the sample's stream); None when
        the response budget ran out. ``knowledge``: under the knowledge turn's cap."""
        if not await self.add_context(context.stream, "user", request):
            return None
        return await self.generate_turn(context, knowledge=knowledge)

    def _shown(self, observation: str) -> str:
        """A simulated state as the trace shows it: compacted (``compact_position``) and cut."""
        return (compact_position(observation) if self.compact else observation)[:MAX_BRANCH_OBSERVATION_CHARS]

    @staticmethod
    def _side_context(context: TurnContext) -> TurnContext:
        """A copy of the window to generate a branch node's turns on: what it appends stays out of the sample."""
        stream = context.stream
        side = TokenStream(list(stream.messages), list(stream.token_ids), list(stream.response_mask),
                           None if stream.logprobs is None else list(stream.logprobs))
        return TurnContext(context.env, side, f"{context.request_id}:node{len(stream.token_ids)}", context.sampling_params, context.timing)

    @staticmethod
    def _stopped_step(state_key: str) -> SimStep:
        """A marker ending a branch whose next move was not admissible (kept out of the rendering)."""
        return SimStep(state_key, "", "", 0.0, True, False, state_key, True)
