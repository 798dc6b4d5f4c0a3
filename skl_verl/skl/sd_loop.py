"""SKL-SD rollout (Alg. 1): stateful base episode, and on failure backward knowledge
bootstrapping from a replay buffer, then a verification retry with the refined knowledge.

One ``run`` returns: the base episode (phase ``base``), one sample per bootstrapped state
(phase ``reflect``: context C_t -> ẑ_{s_t}), and the retry (phase ``distill``). ``skl_keep`` marks
what Eq. 1 trains on: successful base episodes (D_base), successful retries (D_distill) and the
reflections of successful retries (D_reflect); everything else is kept in the batch with zero
weight so its metrics are still logged. Success is R(τ) ≥ 1 (``success: reward_full``, the
default: R3L's rule, in whose code the authors ran SKL-SD), Alg. 1's R(τ) > 0 (``reward_positive``)
or the env's win flag (``won``: R3L's rule on ScienceWorld, whose return here is the progress gained,
not the final score, see agent_loops.yaml). The ``skl_sd`` estimator turns (phase, keep) into Eq. 1.

Bootstrapping visits ceil(f·T) uniformly sampled steps of a failed episode (seeded per trial),
from T−1 back to 0. C_t shows s_t, N buffered continuations from s_t with the states they reached
and the knowledge held there (each text whole by default, as R3L; as many continuations as fit the prompt
budget), the prior z_{s_t} and the successor z_{s_{t+H}}
(the ẑ refined earlier in the same loop when that state was sampled). The retry plays with ẑ as
the policy's own knowledge turn at each refined state (response_mask 1), so D_distill trains the
knowledge turns as well as the actions, in the format the policy uses at test time.

Buffer B and the knowledge table are one ``ExperienceMemory`` per run and env spec, shared by all
rollout workers (``skl_verl.skl.memory``). It is journaled under ``memory_dir``, or under the
trainer's checkpoint folder when the trainer saves checkpoints, and a resumed run sees the memory of
the checkpoint it resumed from.
"""

from __future__ import annotations

import logging
import math
import os
import random
from typing import Annotated, Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from skl_verl.options import Above, AtLeast, Between, OneOf
from skl_verl.rollout import sample_fields as sf
from skl_verl.skl import fields as skl_fields
from skl_verl.rollout.env_loop import EpisodeResult
from skl_verl.rollout.loop_text import parse_env_spec
from skl_verl.rollout.outputs import single_turn_output, stable_seed, trajectory_id_of, weight_versions
from skl_verl.skl.stateful_loop import StatefulAgentLoop
from skl_verl.rollout.env_pool import ENV_POOL
from skl_verl.rollout.prompt_safety import neutralise_special_tokens
from skl_verl.skl import prompts
from skl_verl.skl.knowledge import Transition
from skl_verl.skl.memory import MemoryHandle, experience_memory

logger = logging.getLogger(__name__)


def bootstrap_indices(num_states: int, fraction: float, seed: int) -> list[int]:
    """States to bootstrap (§4.1: "20% of states uniformly sampled across a trajectory"):
    ceil(fraction * T) distinct steps drawn uniformly with ``random.Random(seed)``, returned in
    processing order T−1 → 0 (Alg. 1 line 12), so a sampled successor s_{t+H} is always refined
    before s_t reads its knowledge."""
    if not 0 < fraction <= 1:
        raise ValueError(f"bootstrap_fraction must be in (0, 1], got {fraction}")
    if num_states <= 0:
        return []
    count = math.ceil(fraction * num_states)
    return sorted(random.Random(seed).sample(range(num_states), count), reverse=True)


SUCCESS_RULES = ("reward_full", "reward_positive", "won")


def episode_succeeded(episode: EpisodeResult, rule: str) -> bool:
    """The quality filter of Alg. 1 on the env's return R (before format penalties): ``reward_full``
    R ≥ 1 (R3L's success; WebShop and ScienceWorld return [0, 1] with 1 only for the exact purchase or
    the finished task), ``reward_positive`` R > 0 (Alg. 1 as written: any partial WebShop/ScienceWorld
    score bootstraps nothing and is imitated), ``won`` the env's own flag. A crashed episode never succeeds."""
    if episode.failed:
        return False
    if rule == "reward_full":
        return episode.env_return >= 1.0
    return episode.env_return > 0 if rule == "reward_positive" else episode.won


def episode_transitions(episode: EpisodeResult, episode_id: str, epoch: int) -> list[Transition]:
    """The episode's real env moves as buffer transitions (format errors and invalid actions skipped)."""
    moves = [s for s in episode.knowledge_steps if s.action is not None]
    return [
        Transition(
            episode_id=episode_id, t=t, state_key=s.state_key, observation=s.observation,
            knowledge=s.knowledge or None, action=s.action, reward=s.reward,
            next_state_key=s.next_state_key, done=bool(s.done), epoch=epoch,
        )
        for t, s in enumerate(moves)
    ]


class SklSdAgentLoop(StatefulAgentLoop):
    credited_by = ("skl_sd",)
    """Its base, retry and bootstrapped samples of one episode are one trial only to the ``skl_sd`` estimator;
    another would count them as rollouts of their prompt (the entry point refuses it)."""

    def __init__(
        self,
        *args: Any,
        rollouts_per_state: Annotated[int, AtLeast(1)] = 3,
        horizon: Annotated[int, AtLeast(1)] = 3,
        bootstrap_fraction: Annotated[float, Between(0, 1), Above(0)] = 0.2,
        buffer_scope: Annotated[str, OneOf("all", "last_epoch")] = "all",
        memory_dir: str | None = None,
        success: Annotated[str, OneOf(*SUCCESS_RULES)] = "reward_full",
        reflect_state_chars: Annotated[int, AtLeast(1)] | None = None,
        reflect_knowledge_chars: Annotated[int, AtLeast(1)] | None = None,
        max_reflection_tokens: Annotated[int, AtLeast(1)] | None = 4096,
        **kwargs: Any,
    ):
        """N rollouts of horizon H per bootstrapped state (paper 3 and 3), about a fifth of the states
        bootstrapped per episode (paper ~20%), from the experience of every epoch or the last; the journal
        in ``memory_dir`` (null: beside the trainer's checkpoints when it saves them); success as R3L's
        R(τ) ≥ 1, Alg. 1's R(τ) > 0 or the env's own flag (``episode_succeeded``). ``reflect_state_chars`` and
        ``reflect_knowledge_chars`` cut each state and knowledge text C_t shows (None: whole, as R3L's reflection
        sees the whole trajectory); C_t is kept within the prompt budget by showing fewer continuations
        (``_bootstrap``). ``max_reflection_tokens``: the generation cap of ẑ (R3L's reflection cap 4,096; None: the
        response budget)."""
        super().__init__(*args, **kwargs)
        self.reflect_state_chars, self.reflect_knowledge_chars = reflect_state_chars, reflect_knowledge_chars
        self.max_reflection_tokens = max_reflection_tokens
        self.success = success
        self.n, self.horizon, self.fraction, self.scope = rollouts_per_state, horizon, bootstrap_fraction, buffer_scope
        self.memory_dir = memory_dir

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        extra_info = kwargs.get("extra_info") or {}
        env_name, env_kwargs, task_id = parse_env_spec(extra_info)
        env_key = f"{env_name}:{sorted(env_kwargs.items())}"
        memory = experience_memory(env_key, self.journal_dir())
        epoch = self.trainer_step = int(kwargs.get("global_steps") or 0)
        trial = trajectory_id_of(kwargs)
        self.prefilled = {}
        outputs: list[AgentLoopOutput] = []
        with ENV_POOL.lease(env_name, env_kwargs) as env:
            base = await self.play_episode(
                env, task_id, sampling_params, self.system_prompt, seed=stable_seed(f"{trial}:base"),
                request_id=f"{trial}:base",
            )
            moves = [s for s in base.knowledge_steps if s.action is not None]
            transitions = episode_transitions(base, f"{trial}:base", epoch)
            if transitions:
                await memory.call("add_episode", f"{trial}:base", [t.to_dict() for t in transitions], epoch)
            said = [(step.state_key, step.knowledge) for step in moves if step.knowledge]
            if said:
                await memory.call("set_knowledge", said, epoch)
            base_ok = episode_succeeded(base, self.success)
            failed = not base_ok and not base.failed
            order = bootstrap_indices(len(moves), self.fraction, stable_seed(f"{trial}:bootstrap")) if failed else []
            outputs.append(self._sample(base, trial, task_id, "base", 0, keep=base_ok, extra={skl_fields.BOOTSTRAP_ORDER: order}))
            if not order:
                return outputs

            refined: dict[str, str] = {}
            reflections = []
            for t in order:  # backward: T-1, ..., 0
                reflection, z_hat = await self._bootstrap(moves, t, refined, memory, epoch, sampling_params, trial)
                if reflection is None:  # C_t does not fit the prompt budget even without continuations
                    continue
                reflections.append((t, reflection, z_hat))
                if z_hat:
                    refined[moves[t].state_key] = z_hat
                    await memory.call("set_knowledge", [(moves[t].state_key, z_hat)], epoch)
            self.prefilled = refined
            retry = await self.play_episode(
                env, task_id, sampling_params, self.system_prompt, seed=stable_seed(f"{trial}:base"),
                request_id=f"{trial}:retry",
            )
            self.prefilled = {}
        retry_ok = episode_succeeded(retry, self.success)
        for t, reflection, z_hat in reflections:
            reflection.extra_fields[sf.SCORE] = 1.0 if retry_ok else 0.0
            reflection.extra_fields[skl_fields.KEEP] = bool(retry_ok and z_hat)
            reflection.reward_score = reflection.extra_fields[sf.SCORE]
            outputs.append(reflection)
        outputs.append(self._sample(retry, trial, task_id, "distill", 0, keep=retry_ok, extra={skl_fields.PREFILLED_STATES: len(refined)}))
        return outputs

    def journal_dir(self) -> str | None:
        """Where the run's experience journal lives: ``memory_dir``; else, when the trainer saves
        checkpoints, beside them (so a resume finds it); else nowhere (memory only)."""
        if self.memory_dir:
            return self.memory_dir
        trainer = self.config.get("trainer") or {}
        if (trainer.get("save_freq") or -1) > 0 and trainer.get("default_local_dir"):
            return os.path.join(str(trainer["default_local_dir"]), "skl_memory")
        return None

    def _sample(self, episode: EpisodeResult, trial: str, task_id: str, phase: str, position: int, keep: bool, extra: dict) -> AgentLoopOutput:
        fields = {
            sf.TRAJECTORY_ID: trial, sf.SEQUENCE_ID: task_id, sf.POSITION: position, sf.PHASE: phase,
            sf.TOKEN_CREDIT: None, skl_fields.KEEP: bool(keep), skl_fields.KNOWLEDGE_STEPS: episode.knowledge_steps, **extra,
        }
        return self.to_output(episode, reward=self.shaped_reward(episode), fields=fields)

    async def successor_knowledge(self, moves: list[dict], t: int, refined: dict[str, str], memory: MemoryHandle) -> str:
        """z_{s_{t+H}}: refined earlier in this loop, else what the episode said, else the table;
        past the end of the episode, the outcome itself."""
        if t + self.horizon >= len(moves):
            return "(the episode ended within these steps and failed)"
        key = moves[t + self.horizon].state_key
        said = refined.get(key) or moves[t + self.horizon].knowledge
        return said or await memory.call("knowledge", key) or prompts.NO_KNOWLEDGE

    async def _reflection_prompt(self, state: str, prior: str, rollouts: list, successor: str) -> tuple[list[int], int] | None:
        """(C_t's prompt ids, continuations shown): as many of the N continuations as fit ``rollout.prompt_length``
        (the last ones left out first), so verl never left-truncates the instructions out of it; None when even
        none fit. Texts are cut only by ``reflect_state_chars`` / ``reflect_knowledge_chars``."""
        for shown in range(len(rollouts), -1, -1):
            block = prompts.render_rollouts(rollouts[:shown], self.horizon, self.reflect_state_chars,
                                            self.reflect_knowledge_chars)
            user = prompts.REFLECT_USER.format(state=state, prior=prior, count=shown, horizon=self.horizon,
                                               rollouts=block, successor=successor)
            messages = [
                {"role": "system", "content": prompts.REFLECT_SYSTEM},
                {"role": "user", "content": neutralise_special_tokens(user, self.tokenizer)},
            ]
            ids = await self.ct_build_initial_tokens(messages)
            # verl cuts a longer prompt to prompt_length from the left, so a prompt of that length may be cut.
            if len(ids) < self.rollout_config.prompt_length:
                return ids, shown
        return None

    async def _bootstrap(self, moves, t, refined, memory: MemoryHandle, epoch, sampling_params, trial):
        """Generate ẑ_{s_t} from C_t = [s_t, N buffered rollouts of horizon H, z_{s_t}, z_{s_t+H}]."""
        key = moves[t].state_key
        # H steps plus the transition after them, whose observation is the state s_{t+H} reached.
        rollouts = await memory.call("partial_rollouts", key, self.n, self.horizon + 1, self.scope, stable_seed(f"{trial}:{t}"))
        prior = await memory.call("knowledge", key, epoch - 1) if epoch > 0 else None
        successor = await self.successor_knowledge(moves, t, refined, memory)
        fitted = await self._reflection_prompt(moves[t].observation, prior or moves[t].knowledge or prompts.NO_KNOWLEDGE,
                                               rollouts, successor)
        if fitted is None:
            logger.warning("%s: C_t of step %d does not fit data.max_prompt_length=%d without continuations; "
                           "the state is not bootstrapped", trial, t, self.rollout_config.prompt_length)
            return None, None
        prompt_ids, shown = fitted
        rollouts = rollouts[:shown]
        params = dict(sampling_params)
        if self.max_reflection_tokens is not None:
            params["max_tokens"] = min(self.max_reflection_tokens, self.response_length)
        output = await self.server_manager.generate(
            request_id=f"{trial}:reflect{t}", prompt_ids=prompt_ids, sampling_params=params
        )
        response_ids = list(output.token_ids)[: self.response_length]
        parsed = self.knowledge_parser(self.tokenizer.decode(response_ids, skip_special_tokens=True))
        fields = {
            sf.TRAJECTORY_ID: trial, sf.SEQUENCE_ID: moves[t].state_key, sf.POSITION: t, sf.PHASE: "reflect",
            sf.TOKEN_CREDIT: None, skl_fields.KEEP: False, skl_fields.REFLECT_ERROR: parsed.error or "",
            skl_fields.ROLLOUTS_USED: len(rollouts),
        }
        versions = self.weight_version_fields(weight_versions(output))
        sample = single_turn_output(prompt_ids, response_ids, 0.0, fields, output.log_probs, versions)
        return sample, parsed.action if parsed.ok else None
