"""SkillRise rollout (§3.2): one trial = solve/curate alternation over an ordered task sequence.

Every trial starts from the empty document; solve k sees only the current document and task k;
curate k (k < K) rewrites the whole document from the attempt and its outcome; only the document
crosses tasks. Each phase is its own training sample carrying trial id, sequence id, position and
phase, so the ``skillrise`` estimator can assign Eq. 6 credit and Eq. 7 groups.

The LaMer baseline reuses the loop on K attempts of one task (``carried_text: reflection``): with
``reflections: accumulate`` and ``stop_after_win`` it plays as LaMer's code does (see agent_loops.yaml).

Dataset rows (``skl_verl.skillrise.build_dataset``) name the env and the ordered task ids::

    extra_info = {"env_spec": ..., "sequence_id": "pick-3", "task_ids": '["t1", "t2", "t3"]'}
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from skl_verl.options import AtLeast, OneOf
from skl_verl.rollout import sample_fields as sf
from skl_verl.skillrise import fields as rf
from skl_verl.rollout.env_loop import EnvAgentLoop, EpisodeResult
from skl_verl.rollout.outputs import single_turn_output, stable_seed, trajectory_id_of, weight_versions
from skl_verl.rollout.env_pool import ENV_POOL
from skl_verl.rollout.parsing import TagActionParser
from skl_verl.rollout.prompt_safety import neutralise_special_tokens
from skl_verl.skillrise import prompts

REFLECTION_MODES = ("rewrite", "accumulate")
"""How reflections carry between attempts (``carried_text: reflection``): ``rewrite`` keeps one text that
each reflection rewrites from the previous one; ``accumulate`` (LaMer's code) keeps every attempt's own
reflection and shows them all, in order, to the next attempt."""
DOCUMENT_OVERFLOWS = ("cut", "reject")
"""What a curated document longer than its cap does: ``cut`` at ``max_document_chars`` (as released), or
``reject`` past ``max_document_words`` (the old document kept, the curation penalised)."""
CURRENT_OBSERVATIONS = ("latest", "initial")
"""What a step prompt shows as the current observation: ``latest``, the env's newest one with its actions (ours),
or ``initial``: the task's first observation all episode, the newest result only as the last history line (the
released ScienceWorld prompt, ``skillrise_sciworld/env_manager.py`` ``build_text_obs``: ``init_states``)."""


def parse_sequence_spec(extra_info: dict[str, Any]) -> tuple[str, dict[str, Any], str, list[str], bool]:
    """(env name, env kwargs, sequence id, ordered task ids, stop after first success)."""
    required = ("env_spec", "sequence_id", "task_ids")
    if not isinstance(extra_info, dict) or any(k not in extra_info for k in required):
        raise ValueError(
            f"skillrise dataset rows need extra_info with {required}; build them with skl_verl.skillrise.build_dataset"
        )
    spec = extra_info["env_spec"]
    spec = json.loads(spec) if isinstance(spec, str) else dict(spec)
    task_ids = extra_info["task_ids"]
    task_ids = json.loads(task_ids) if isinstance(task_ids, str) else list(task_ids)
    if not task_ids:
        raise ValueError(f"sequence {extra_info['sequence_id']!r} has no tasks")
    return spec["name"], dict(spec.get("kwargs") or {}), str(extra_info["sequence_id"]), [str(t) for t in task_ids], bool(
        extra_info.get("stop_after_success", False)
    )


class SkillRiseAgentLoop(EnvAgentLoop):
    def __init__(
        self,
        *args: Any,
        curate: bool = True,
        max_document_words: Annotated[int, AtLeast(1)] = 300,
        max_document_chars: Annotated[int, AtLeast(1)] = 4000,
        document_overflow: Annotated[str, OneOf(*DOCUMENT_OVERFLOWS)] = "cut",
        curate_penalty: Annotated[float, AtLeast(0)] = 0.1,
        history_window: Annotated[int, AtLeast(0)] = 50,
        carried_text: Annotated[str, OneOf(*prompts.CARRIED_TEXTS)] = "skill_document",
        reflections: Annotated[str, OneOf(*REFLECTION_MODES)] = "rewrite",
        stop_after_win: bool = False,
        curate_shows_task: bool = False,
        current_observation: Annotated[str, OneOf(*CURRENT_OBSERVATIONS)] = "latest",
        **kwargs: Any,
    ):
        if carried_text == "none" and curate:
            raise ValueError("carried_text: none carries nothing between tasks; set curate: false")
        if reflections == "accumulate" and carried_text != "reflection":
            raise ValueError(f"reflections: accumulate keeps one reflection per attempt; it needs carried_text: "
                             f"reflection, got carried_text: {carried_text}")
        self.carried = prompts.CARRIED_TEXTS[carried_text]
        kwargs.setdefault("system_prompt", self.carried.solve_system)
        super().__init__(*args, **kwargs)
        self.curate = curate
        self.max_document_words = max_document_words
        self.max_document_chars = max_document_chars
        self.document_overflow = document_overflow
        self.curate_penalty = curate_penalty
        self.history_window = history_window
        self.accumulate = reflections == "accumulate"
        self.stop_after_win = stop_after_win
        self.curate_shows_task = curate_shows_task
        self.current_observation = current_observation
        # The document as written (headings, lists, numbered steps): it is all that crosses tasks. Cut mode
        # takes a reply of any length and cuts the document itself.
        longest = sys.maxsize if document_overflow == "cut" else max_document_words * 20
        self.document_parser = TagActionParser(tags=(self.carried.tag,), max_action_chars=longest, keep_layout=True)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        self.trainer_step = int(kwargs.get("global_steps") or 0)
        env_name, env_kwargs, sequence_id, task_ids, stop_after_success = parse_sequence_spec(kwargs.get("extra_info"))
        trial_id = trajectory_id_of(kwargs)
        stop_after_success = stop_after_success or self.stop_after_win
        document = self.carried.empty
        reflections: list[str] = []  # accumulate mode: one per failed attempt, oldest first
        outputs: list[AgentLoopOutput] = []
        won: list[float] = []
        with ENV_POOL.lease(env_name, env_kwargs) as env:
            for position, task_id in enumerate(task_ids):
                episode = await self.play_episode(
                    env,
                    task_id,
                    sampling_params,
                    self.system_prompt,
                    seed=stable_seed(f"{trial_id}:{position}"),
                    request_id=f"{trial_id}:solve{position}",
                    preamble=prompts.accumulated_reflections_preamble(reflections) if self.accumulate
                    else self.carried.preamble(document),
                )
                fields = self._fields(trial_id, sequence_id, position, "solve", task_id)
                fields[rf.DOCUMENT_WORDS] = (sum(len(r.split()) for r in reflections) if self.accumulate
                                             else self.document_words(document))
                outputs.extend(self.to_outputs(episode, fields))
                won.append(float(episode.won))
                if stop_after_success and episode.won:
                    break
                if self.curate and position < len(task_ids) - 1:
                    written, curated = await self._curate(
                        document, episode, sampling_params, trial_id, sequence_id, position, task_id, env_name
                    )
                    if self.accumulate:
                        reflections.append(written)
                    else:
                        document = written
                    outputs.append(curated)
        # verl's validation reads only a session's last output (v1 copies its reward_extra_info to the
        # others); this summary makes it report every solve: Pass@1 over all tasks and per position.
        summary = {"solve_success": sum(won) / len(won)}
        if not stop_after_success:
            summary.update({f"solve_success@{k}": w for k, w in enumerate(won)})
        if self.stop_after_win:  # LaMer's success_rate[k]: solved within the first k + 1 attempts
            summary.update({f"solved_by_attempt@{k}": float(any(won[: k + 1])) for k in range(len(task_ids))})
        for output in outputs:
            output.extra_fields["reward_extra_info"] = dict(summary)
        return outputs

    def step_messages(self, system_prompt: str, preamble: str, episode: EpisodeResult, current: str,
                      shown: int) -> list[dict[str, str]]:
        """``current_observation: initial``: the task as first observed stands for the current observation all
        episode (shown once, not repeated), then the last ``shown`` steps, whose last line holds the newest
        result, then the admissible actions of this step."""
        if self.current_observation == "latest" or not episode.actions:
            return super().step_messages(system_prompt, preamble, episode, current, shown)
        step = episode.last_step
        # ``current`` is the newest observation followed by its actions (render_observation); keep the actions.
        # After a reply that sent no action (no last step) it says what was wrong, and stays whole.
        if step is not None and current.startswith(step.observation):
            current = current[len(step.observation):].lstrip("\n")
        parts = [preamble + f"Task and current observation (as first observed):\n{episode.first_observation}"]
        parts += self.history_part(episode, shown)
        parts.append(f"Step {len(episode.actions) + 1}:\n{current}")
        return self.chat(system_prompt, "\n\n".join(parts))

    def document_words(self, document: str) -> int:
        return 0 if document == self.carried.empty else len(document.split())

    def _fields(self, trial_id: str, sequence_id: str, position: int, phase: str, task_id: str) -> dict[str, Any]:
        return {
            sf.TRAJECTORY_ID: trial_id,
            sf.SEQUENCE_ID: sequence_id,
            sf.POSITION: position,
            sf.PHASE: phase,
            sf.TOKEN_CREDIT: None,
            rf.TASK_ID: task_id,
        }

    def _curate_messages(self, document: str, episode: EpisodeResult, window: int, env_name: str) -> list[dict[str, str]]:
        steps, shown = prompts.render_steps(episode.actions, window)
        outcome = f"failed: {episode.failed}" if episode.failed else prompts.CURATE_OUTCOMES[bool(episode.won)]
        system, user = ((prompts.REFLECT_ON_ATTEMPT_SYSTEM, prompts.REFLECT_ON_ATTEMPT_USER) if self.accumulate
                        else (self.carried.curate_system, self.carried.curate_user))
        user = user.format(document=document, task=episode.task_text, outcome=outcome, shown=shown,
                           total=len(episode.actions), steps=steps,
                           task_section=f"\nTask: {episode.task_text}\n" if self.curate_shows_task else "",
                           specifics=prompts.CURATE_SPECIFICS.get(env_name, prompts.GENERIC_SPECIFICS),
                           checklist=prompts.CURATE_CHECKLISTS.get(env_name, ""))
        user_message = {"role": "user", "content": neutralise_special_tokens(user, self.tokenizer)}
        if not system:  # as released: one user message
            return [user_message]
        return [{"role": "system", "content": system.format(max_words=self.max_document_words)}, user_message]

    def _prompt_length(self, messages: list[dict[str, str]]) -> int:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                 **self.apply_chat_template_kwargs)
        return len(ids if isinstance(ids, list) else ids["input_ids"])

    async def _curate(
        self,
        document: str,
        episode: EpisodeResult,
        sampling_params: dict[str, Any],
        trial_id: str,
        sequence_id: str,
        position: int,
        task_id: str,
        env_name: str,
    ) -> tuple[str, AgentLoopOutput]:
        """One curation turn. The document is kept as written (stripped); as released, one longer than
        ``max_document_chars`` is cut there, unpenalised (``document_overflow: cut``). A reply without a
        <skill> block, or (``document_overflow: reject``) over the word cap, keeps the old document, is
        flagged in ``skl_curate_error`` and scores ``-curate_penalty``. Accumulated
        reflections follow LaMer's code instead: an unparseable one scores the penalty and is kept empty,
        a long one is cut to the word cap. Returns (the text carried on, the sample)."""
        # Show fewer steps rather than let verl left-truncate the instructions out of the prompt.
        window = min(self.history_window, len(episode.actions))
        messages = self._curate_messages(document, episode, window, env_name)
        while window > 0 and self._prompt_length(messages) > self.rollout_config.prompt_length:
            window //= 2
            messages = self._curate_messages(document, episode, window, env_name)
        prompt_ids = await self.ct_build_initial_tokens(messages)
        output = await self.server_manager.generate(
            request_id=f"{trial_id}:curate{position}", prompt_ids=prompt_ids, sampling_params=sampling_params
        )
        response_ids = list(output.token_ids)[: self.response_length]
        text = self.tokenizer.decode(response_ids, skip_special_tokens=True)
        parsed = self.document_parser(text)
        error = None
        rejects_long = self.document_overflow == "reject" and not self.accumulate
        if not parsed.ok:
            error = parsed.error
        elif rejects_long and len(parsed.action.split()) > self.max_document_words:
            error = f"document has {len(parsed.action.split())} words, over the {self.max_document_words}-word cap"
        cut = False
        if self.accumulate:
            new_document = "" if error else " ".join(parsed.action.split()[: self.max_document_words])
        elif error:
            new_document = document
        else:
            cut = self.document_overflow == "cut" and len(parsed.action) > self.max_document_chars
            new_document = parsed.action[: self.max_document_chars] if cut else parsed.action
        fields = self._fields(trial_id, sequence_id, position, "curate", task_id)
        score = -self.curate_penalty if error else 0.0
        fields.update(
            {
                sf.EPISODE_REWARD: 0.0,
                rf.CURATE_ERROR: error or "",
                rf.DOCUMENT_WORDS: self.document_words(new_document),
                rf.DOCUMENT_CUT: cut,
            }
        )
        versions = self.weight_version_fields(weight_versions(output))
        return new_document, single_turn_output(prompt_ids, response_ids, score, fields, output.log_probs, versions)
