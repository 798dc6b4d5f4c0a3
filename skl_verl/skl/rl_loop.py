"""SKL-RL rollout (Alg. 2, App. D, G.2): at every real step the policy writes z_{s_t}, the
simulator is snapshot and N branches of horizon H are played by a behaviour policy, the policy
reads the aggregated branches and writes refined knowledge ẑ_{s_t}, then acts; the simulator is
restored before the real action, so simulations never change the real trajectory.

    user: s_t + admissible actions + knowledge question   | assistant: <knowledge>z</knowledge>
    user: the N simulated continuations + "update it"    | assistant: <knowledge>ẑ</knowledge>
    user: action request                                  | assistant: <action>a_t</action>

The whole interleaved trace is one sample trained with GRPO on the episode outcome (Eq. 4's
first term, phase ``act``). Every ``distill_interval`` training steps the loop also emits, per real
step, a distillation sample (phase ``distill``): the student context (the stream before z_{s_t}
was written: s_t and the history) with the teacher's ẑ_{s_t} as the response. Trained with
weight λ (``algorithm.skl_rl.distill_coef``) this is sequence-level forward-KL distillation
(Eq. 5, Supervised-KD on teacher samples): its gradient is λ·∇ log π(ẑ | s_t, H), an unbiased
sample of the forward-KL gradient. With ``distill_kind: reverse`` (Eq. 6) the loop instead emits a
teacher probe per step: the student's own z tokens scored under the teacher context (the knowledge
question with the simulations shown), phase ``distill_teacher``, never trained. The ``skl_rl``
estimator then adds the per-token credit -λ·(log π(z_t | s, H) − log π(z_t | sims, s, H)) to the
z tokens of the trace: the policy-gradient (k1-reward) form of the reverse-KL gradient, computed
from the old log-probs verl's trainer already has. The (z, ẑ) pairs of every step are attached as
``skl_distill_pairs``.

Behaviour policies (``simulation_policy``): ``random`` (uniform admissible actions, any env with
snapshots), ``expert_mix`` (chess: Stockfish's move with probability ``expert_rate`` — the
paper's 1/2, 1/3, 1/6 — else a random other legal move; needs the ``stockfish`` binary) and
``self`` (§4.2.2: the policy itself proposes every simulated move from the branch's observation;
these proposals are separate requests, shown to the trace as context, and not trained).
"""

from __future__ import annotations

import asyncio
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register

from skl_verl.trainer import sample_fields as sf
from skl_verl.rollout.env_runtime import EnvCallFailed
from skl_verl.rollout.env_loop import EpisodeResult, TurnContext, render_turn, single_turn_output, stable_seed
from skl_verl.rollout.stateful_loop import StatefulAgentLoop
from skl_verl.rollout.prompt_safety import encode_as_text, neutralise_special_tokens
from skl_verl.skl.simulation import BoardPolicy, RandomPolicy, render_branches, simulate_branches

REFINE_REQUEST = (
    "Simulated continuations from this exact state ({n} branches, up to {h} steps each):\n{branches}\n\n"
    "Update your understanding of the state in light of these outcomes, inside <knowledge>...</knowledge>."
)

TEACHER_HINT = "Simulated continuations from this exact state ({n} branches, up to {h} steps each):\n{branches}"

SIMULATION_PROMPT = "You are exploring in a simulator. Propose the next move inside <action>...</action>."


class ModelMovePolicy:
    """Self-generated simulation: the policy model proposes each simulated move.

    ``simulate_branches`` calls policies synchronously in a worker thread; each call submits the
    generation to the agent loop's event loop and waits for it there."""

    def __init__(self, agent_loop: "SklRlAgentLoop", context: TurnContext, root_observation: str, event_loop):
        self.agent_loop, self.context, self.event_loop = agent_loop, context, event_loop
        self.root_observation, self.last_observation = root_observation, {}
        self.calls = 0

    def observe(self, branch: int, observation: str) -> None:
        self.last_observation[branch] = observation

    def __call__(self, env, branch: int, step: int) -> str:
        if branch in self.last_observation:
            shown = render_turn(self.last_observation[branch], env.admissible_actions())
        else:  # the root state as the trace showed it (already lists the admissible actions)
            shown = self.root_observation
        messages = [
            {"role": "system", "content": self.agent_loop.system_prompt},
            {"role": "user", "content": neutralise_special_tokens(f"{shown}\n\n{SIMULATION_PROMPT}", self.agent_loop.tokenizer)},
        ]
        prompt_ids = self.agent_loop.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        prompt_ids = prompt_ids if isinstance(prompt_ids, list) else prompt_ids["input_ids"]
        request = self.agent_loop.server_manager.generate(
            request_id=f"{self.context.request_id}:sim{self.calls}",
            prompt_ids=list(prompt_ids),
            sampling_params=self.context.sampling_params,
        )
        self.calls += 1
        output = asyncio.run_coroutine_threadsafe(request, self.event_loop).result()
        parsed = self.agent_loop.parser(self.agent_loop.tokenizer.decode(output.token_ids, skip_special_tokens=True))
        return parsed.action or ""  # an unparseable proposal is an invalid simulated move


def behaviour_policy(name: str, seed: int, expert_rate: float, engine_path: str | None = None):
    """A heuristic simulation policy by name. Chess engines come from a per-process pool, one engine per
    move being searched, so concurrent simulations never share an engine."""
    if name == "random":
        return RandomPolicy(seed)
    if name == "expert_mix":
        from envs.chess_puzzles import MixedBehaviourPolicy, PooledStockfish

        return BoardPolicy(MixedBehaviourPolicy(expert_rate, seed=seed, engine=PooledStockfish(engine_path)))
    raise ValueError(f"simulation_policy must be 'random', 'expert_mix' or 'self', got {name!r}")


@register("skl_rl")
class SklRlAgentLoop(StatefulAgentLoop):
    def __init__(
        self,
        *args: Any,
        simulations: int = 3,
        horizon: int = 2,
        simulation_policy: str = "random",
        expert_rate: float = 0.5,
        engine_path: str | None = None,
        distill_interval: int = 0,
        distill_kind: str = "forward",
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        if distill_interval < 0:
            raise ValueError("distill_interval must be >= 0 (0 disables distillation samples)")
        if distill_kind not in ("forward", "reverse"):
            raise ValueError(f"distill_kind must be 'forward' or 'reverse', got {distill_kind!r}")
        self.distill_interval, self.distill_kind = distill_interval, distill_kind
        self._teacher_contexts: list[tuple[int, list[dict[str, str]]]] = []
        if simulations < 1 or horizon < 1:
            raise ValueError("simulations (N) and horizon (H) must be >= 1")
        if not 0 <= expert_rate <= 1:
            raise ValueError("expert_rate must be in [0, 1]")
        self.simulations, self.horizon = simulations, horizon
        self.simulation_policy, self.expert_rate, self.engine_path = simulation_policy, expert_rate, engine_path
        if simulation_policy != "self":
            behaviour_policy(simulation_policy, 0, expert_rate, engine_path)  # fail at start on a bad config

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        trace = await super().run(sampling_params, **kwargs)
        step = int(kwargs.get("global_steps") or 0)
        if not self.distill_interval or step % self.distill_interval:
            return [trace]
        stream = list(trace.prompt_ids) + list(trace.response_ids)
        outputs = [trace]
        records = trace.extra_fields["skl_knowledge_steps"]
        if self.distill_kind == "forward":
            for position, record in enumerate(records):
                if record.get("refined_knowledge") and record["context_tokens"] <= len(stream):
                    context = stream[: record["context_tokens"]]
                    outputs.append(await self._distill_sample(trace, record, position, context, sampling_params))
        else:
            for position, messages in self._teacher_contexts:
                record = records[position]
                if record.get("knowledge_end") and record["knowledge_end"] <= len(stream):
                    outputs.append(await self._teacher_probe(trace, record, position, messages, stream, sampling_params))
        return outputs

    async def _teacher_probe(self, trace, record: dict[str, Any], position: int, messages, stream: list[int], sampling_params):
        """The student's z tokens as a response to the teacher context; scored, never trained."""
        z_ids = stream[record["context_tokens"] : record["knowledge_end"]]
        offset = len(trace.prompt_ids)
        fields = {
            sf.TRAJECTORY_ID: trace.extra_fields[sf.TRAJECTORY_ID], sf.SEQUENCE_ID: trace.extra_fields[sf.SEQUENCE_ID],
            sf.POSITION: position, sf.PHASE: "distill_teacher", sf.TOKEN_CREDIT: None,
            # Where z sits in the trace's response: the estimator aligns the two samples' log-probs by it.
            "skl_z_span": [record["context_tokens"] - offset, record["knowledge_end"] - offset],
        }
        prompt_ids = await self.ct_build_initial_tokens(messages)
        logprobs, versions = await self.score_response(prompt_ids, z_ids, f"{fields[sf.TRAJECTORY_ID]}:probe{position}", sampling_params)
        return single_turn_output(prompt_ids, z_ids, 0.0, fields, logprobs, self.weight_version_fields(versions), num_turns=2)

    async def _distill_sample(self, trace: AgentLoopOutput, record: dict[str, Any], position: int, context_ids: list[int], sampling_params):
        target = f"<knowledge>{record['refined_knowledge']}</knowledge>"
        response_ids = encode_as_text(target, self.tokenizer) + [self.tokenizer.eos_token_id]
        response_ids = response_ids[: self.response_length]
        fields = {
            sf.TRAJECTORY_ID: trace.extra_fields[sf.TRAJECTORY_ID], sf.SEQUENCE_ID: trace.extra_fields[sf.SEQUENCE_ID],
            sf.POSITION: position, sf.PHASE: "distill", sf.TOKEN_CREDIT: None, "skl_distill_state": record["state_key"],
        }
        # Long histories are left-truncated to rollout.prompt_length, as verl does for any prompt.
        prompt_ids = self._cap_text_prompt_length(context_ids)
        logprobs, versions = await self.score_response(prompt_ids, response_ids, f"{fields[sf.TRAJECTORY_ID]}:distill{position}", sampling_params)
        return single_turn_output(prompt_ids, response_ids, 0.0, fields, logprobs, self.weight_version_fields(versions), num_turns=2)

    def episode_fields(self, episode: EpisodeResult) -> dict[str, Any]:
        steps = episode.knowledge_steps
        return {
            **super().episode_fields(episode),
            "skl_distill_pairs": [
                {"state_key": s["state_key"], "z": s["knowledge"], "z_hat": s.get("refined_knowledge", "")} for s in steps
            ],
            "skl_simulated_steps": sum(s.get("simulated_steps", 0) for s in steps),
        }

    async def before_action(self, context: TurnContext, episode: EpisodeResult, step: dict[str, Any]) -> bool:
        env = context.env
        seed = stable_seed(f"{context.request_id}:{len(episode.knowledge_steps)}")
        if self.simulation_policy == "self":
            policy = ModelMovePolicy(self, context, step["observation"], asyncio.get_running_loop())
        else:
            policy = behaviour_policy(self.simulation_policy, seed, self.expert_rate, self.engine_path)
        try:
            branches = await self._env_call(
                context.timing, simulate_branches, env, policy, self.simulations, self.horizon, seed
            )
        except EnvCallFailed:  # timed out or the env failed: the real env is gone, play_episode flags the sample
            raise
        except Exception as exc:  # noqa: BLE001 - simulate_branches restored the env; the real step goes on
            step["simulation_error"] = f"{type(exc).__name__}: {exc}"
            branches = []
        step["simulated_steps"] = sum(len(b.steps) for b in branches)
        step["simulated_wins"] = sum(int(b.won) for b in branches)
        text = render_branches(branches) if branches else "(simulation unavailable)"
        if self.distill_kind == "reverse" and "knowledge_end" in step:
            # Teacher context for z: the student context with the simulations shown before z.
            # Re-rendered from text, so the policy's own earlier replies are untrusted here too.
            messages = [
                {**m, "content": neutralise_special_tokens(m["content"], self.tokenizer)}
                for m in context.stream.messages[: step["context_messages"]]
            ]
            hint = TEACHER_HINT.format(n=len(branches), h=self.horizon, branches=text)
            messages[-1]["content"] += "\n\n" + neutralise_special_tokens(hint, self.tokenizer)
            self._teacher_contexts.append((len(episode.knowledge_steps) - 1, messages))
        request = REFINE_REQUEST.format(n=len(branches), h=self.horizon, branches=text)
        if not await self.add_context(context.stream, "user", request):
            return False
        reply = await self.generate(context)
        if reply is None:
            return False
        step["refined_knowledge"] = self.read_knowledge(reply, step, episode, key="refined_knowledge_error")
        return True
