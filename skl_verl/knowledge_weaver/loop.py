"""``kw_curator``: one Knowledge Weaver curator session (paper §3; design §1.2 and §3.7).

A dataset row is one trajectory context x_i of step j (its slot); verl's ``rollout.n`` sessions of the
row are one group of G candidates. Each session:
1. builds its context (4 pool trajectories of the slot's task type) and samples one candidate z;
2. if z is not a valid entry, scores the format penalty (no executor run, no MI credit);
3. else runs the frozen executor on the group's shared reward tasks D_i with z alone (singleton:
   SR), and with the retrieved bank entries plus z (augmented); the bank-only runs are made once per
   group (the first session of the group starts them, the others await the same result), so
   MSR = mean(augmented - bank-only) pairs every task with one shared baseline;
4. rescores z under every context of its MI comparison set on the rollout server (Eq. 6 credit);
5. returns one sample: R = lambda_SR * SR + lambda_MSR * MSR + valid bonus, with the token credit.
Contexts, reward tasks and executor seeds depend only on (seed, step, slot), so every session (and a
replayed step) sees the same ones. The bank of step j is read-only here; the driver's step hook admits
new entries after the step (``hook``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
from dataclasses import dataclass
from typing import Any

import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

from skl_verl.knowledge_weaver.credit import mi_token_credit, rescore_under_contexts
from skl_verl.knowledge_weaver.entries import (
    body_token_mask,
    format_guidance,
    parse_entry,
)
from skl_verl.knowledge_weaver.executor import (
    ExecutorEpisode,
    FrozenExecutor,
    executor_style,
    task_description,
)
from skl_verl.knowledge_weaver.pool import (
    PoolEpisode,
    PoolStore,
    context_draw,
    draw_context,
    is_usable,
)
from skl_verl.knowledge_weaver.prompts import curator_view, fit_curator_prompt
from skl_verl.knowledge_weaver.retrieval import (
    BankEntry,
    BM25Retriever,
    HFMeanPoolRetriever,
    query_task_type,
    retrieval_query,
)
from skl_verl.knowledge_weaver.settings import KWSettings, kw_settings
from skl_verl.knowledge_weaver.state import BankStore, Entry
from skl_verl.rollout.outputs import single_turn_output, stable_seed, weight_version_fields, weight_versions
from skl_verl.rollout.env_pool import ENV_POOL
from skl_verl.rollout.env_runtime import EnvCallFailed, guarded_call
from skl_verl.knowledge_weaver import fields as kwf
from skl_verl.rollout import sample_fields as sf

PHASE = "curate"


@dataclass(frozen=True)
class RewardTask:
    task_id: str
    seed: int
    retrieved: tuple[str, ...]
    """Bodies of the bank entries retrieved for this task (top-m of bank(j)), best first."""


@dataclass
class GroupBaseline:
    """What the G sessions of one context share: D_i, its retrievals, and the bank-only wins."""

    tasks: list[RewardTask]
    bank_only_wins: list[bool]
    episodes: int
    failed_episodes: int = 0


def task_type_of(spec: Any, settings: KWSettings) -> str:
    return settings.single_type or spec.family


@functools.cache
def _env_specs(env_name: str, env_kwargs_json: str) -> tuple[Any, ...]:
    from envs import make_env

    env = make_env(env_name, **json.loads(env_kwargs_json))
    try:
        return tuple(env.tasks())
    finally:
        env.close()


def env_task_specs(settings: KWSettings) -> tuple[Any, ...]:
    return _env_specs(settings.env_name, json.dumps(settings.env_kwargs, sort_keys=True))


def task_families(settings: KWSettings) -> dict[str, str]:
    """Each task's family (ALFWorld: its type; WebShop: its goal category), the type its retrieval query names."""
    return {s.task_id: s.family for s in env_task_specs(settings)}


def reward_tasks(settings: KWSettings, task_type: str, step: int, slot: int) -> list[tuple[str, int]]:
    """D_i: ``kw.reward.tasks`` (task id, executor seed) pairs of the slot's type, the same for every
    session of the group and every condition."""
    ids = sorted(s.task_id for s in env_task_specs(settings) if task_type_of(s, settings) == task_type)
    if not ids:
        raise ValueError(f"{settings.env_name} has no task of type {task_type!r} for the reward tasks")
    rng = random.Random(stable_seed(f"{settings.seed}:{step}:{slot}:reward-tasks"))
    count = settings.reward["tasks"]
    chosen = rng.sample(ids, count) if len(ids) >= count else [rng.choice(ids) for _ in range(count)]
    return [(task_id, stable_seed(f"{settings.seed}:{step}:{slot}:{k}:{task_id}")) for k, task_id in enumerate(chosen)]


class _Process:
    """What the sessions of one agent-loop worker process share: stores, the executor, the retriever,
    built contexts and group baselines (keyed by state dir, step and slot; older steps are dropped)."""

    def __init__(self) -> None:
        self.executors: dict[str, FrozenExecutor] = {}
        self.retrievers: dict[str, Any] = {}
        self.semaphores: dict[int, asyncio.Semaphore] = {}
        self.contexts: dict[tuple, asyncio.Task] = {}
        self.baselines: dict[tuple, asyncio.Task] = {}
        self.banks: dict[tuple, list[Entry]] = {}
        self.pools: dict[tuple, list[PoolEpisode]] = {}
        self.current_step: dict[str, int] = {}

    def executor(self, settings: KWSettings) -> FrozenExecutor:
        key = json.dumps([settings.executor_client, settings.executor], sort_keys=True, default=str)
        if key not in self.executors:
            import hydra
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(settings.executor["tokenizer"])
            options = settings.executor
            client = hydra.utils.instantiate(settings.executor_client, tokenizer=tokenizer,
                                             max_new_tokens=options["max_tokens"], _convert_="all")
            if hasattr(client, "max_in_flight"):  # one request per episode this process may play at once
                client.max_in_flight = settings.episodes_per_process
            self.executors[key] = FrozenExecutor(
                client, tokenizer, max_steps=options["max_steps"], max_tokens=options["max_tokens"],
                memory_steps=options["memory_steps"], observation_chars=options["observation_chars"],
                env_timeout_s=options["env_timeout_s"], style=executor_style(settings.env_name),
            )
        return self.executors[key]

    def retriever(self, settings: KWSettings) -> Any:
        options = settings.retrieval
        key = json.dumps(options, sort_keys=True)
        if key not in self.retrievers:
            if options["backend"] == "bm25":
                self.retrievers[key] = BM25Retriever()
            else:
                self.retrievers[key] = HFMeanPoolRetriever(options["model"], max_length=options["max_length"],
                                                           batch_size=options["batch_size"], device=options["device"])
        return self.retrievers[key]

    def episode_slots(self, settings: KWSettings) -> asyncio.Semaphore:
        loop_id = id(asyncio.get_running_loop())
        if loop_id not in self.semaphores:
            self.semaphores[loop_id] = asyncio.Semaphore(settings.episodes_per_process)
        return self.semaphores[loop_id]

    def _begin(self, state_dir: str, step: int) -> None:
        """A new step: what earlier steps built is done with."""
        if self.current_step.get(state_dir, -1) < step:
            for table in (self.contexts, self.baselines, self.banks, self.pools):
                for stale in [k for k in table if k[0] == state_dir and k[1] < step]:
                    del table[stale]
            self.current_step[state_dir] = step

    def bank(self, settings: KWSettings, step: int) -> list[Entry]:
        """bank(step), read once per process (it is immutable while the step runs)."""
        self._begin(settings.state_dir, step)
        key = (settings.state_dir, step)
        if key not in self.banks:
            self.banks[key] = BankStore(settings.state_dir).bank(step)
        return self.banks[key]

    def pool(self, settings: KWSettings, step: int) -> list[PoolEpisode]:
        """pool(step), read once per process (the initial pool and step - 1's episodes do not change)."""
        self._begin(settings.state_dir, step)
        key = (settings.state_dir, step)
        if key not in self.pools:
            self.pools[key] = pool_store(settings).pool(step)
        return self.pools[key]

    def single_flight(self, table: dict[tuple, asyncio.Task], key: tuple, make) -> tuple[asyncio.Task, bool]:
        """The task computing ``key`` (started now by ``make()`` if nobody has); True if started here."""
        self._begin(key[0], key[1])
        if key in table:
            return table[key], False
        table[key] = asyncio.ensure_future(make())
        return table[key], True


_PROCESS = _Process()


def pool_store(settings: KWSettings) -> PoolStore:
    return PoolStore(settings.state_dir, settings.pool["initial"], settings.pool["use_previous_step"],
                     context_draw(settings.env_name, settings.context["draw"]))


def records_pool(settings: KWSettings) -> bool:
    """Whether singleton episodes are kept for the next step's contexts (``uniform`` with use_previous_step, or
    ``bundles``, which draws from them alone)."""
    return settings.pool["use_previous_step"] or context_draw(settings.env_name, settings.context["draw"]) == "bundles"


def frozen_executor(settings: KWSettings) -> FrozenExecutor:
    """This process's frozen executor for ``settings`` (built once: the client, its tokenizer, the caps)."""
    return _PROCESS.executor(settings)


class KnowledgeWeaverCuratorLoop(AgentLoopBase):
    """Settings come from the trainer config's ``kw:`` section (``settings.kw_settings``)."""

    rescores_sequences = True
    """Rescores each candidate under every context of its set on the rollout server (MI credit)."""

    credited_by = ("knowledge_weaver",)
    """Its rewards (SR, MSR) and MI credit are read only by the ``knowledge_weaver`` estimator."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kw = kw_settings(self.config)
        self.response_length = self.rollout_config.response_length
        self.prompt_budget = int(self.config.data.max_prompt_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        info = kwargs["extra_info"]
        step, slot = int(info["kw_step"]), int(info["kw_slot"])
        global_steps = kwargs.get("global_steps")
        if global_steps is not None and int(global_steps) - 1 != step:
            raise ValueError(f"dataset row of kw_step {step} played at trainer step {global_steps}: the KW dataset "
                             "is one block of rows per step, in order (data.shuffle must be false)")
        set_slots = [int(s) for s in json.loads(info["kw_set_slots"])]
        set_types = list(json.loads(info["kw_set_types"]))
        task_type = set_types[set_slots.index(slot)]
        session = int(kwargs.get("session_id", 0) or 0)
        trajectory_id = f"{kwargs.get('uid', f'kw{step}-{slot}')}_{session}"
        bank = _PROCESS.bank(self.kw, step)

        contexts = await asyncio.gather(*(self._context(step, s, t) for s, t in zip(set_slots, set_types)))
        prompt_ids = contexts[set_slots.index(slot)]
        params = {**sampling_params, "max_tokens": self.response_length}
        output = await self.server_manager.generate(request_id=trajectory_id, prompt_ids=prompt_ids, sampling_params=params)
        response_ids = list(output.token_ids)[: self.response_length]
        # Special tokens kept: the body's character span must line up with the response tokens. A control
        # token the curator wrote inside the body makes the entry invalid (parse_entry), so none can reach
        # an executor's guidance.
        reply = self.tokenizer.decode(response_ids, skip_special_tokens=False)
        parsed = parse_entry(reply, max_words=self.kw.entry["max_words"])
        fields: dict[str, Any] = {
            sf.TRAJECTORY_ID: trajectory_id,
            sf.SEQUENCE_ID: f"kw{step}:{slot}",
            sf.POSITION: 0,
            sf.PHASE: PHASE,
            sf.TOKEN_CREDIT: None,
            kwf.STEP: step,
            kwf.SLOT: slot,
            kwf.CANDIDATE: slot * int(self.rollout_config.n) + session,
            kwf.TASK_TYPE: task_type,
            kwf.TYPES: info["kw_types"],
            kwf.VALID: parsed.valid,
            kwf.ERROR: parsed.error,
            kwf.ENTRY: parsed.body,
            kwf.SR: None,
            kwf.MSR: None,
            kwf.BANK_ONLY_SR: None,
            kwf.AUG_SR: None,
            kwf.BANK_ONLY_RUNS: 0,
            kwf.EXECUTOR_EPISODES: 0,
            kwf.RETRIEVED: None,
            kwf.MI_CREDIT: None,
            kwf.MI_CLIP_FRAC: None,
            sf.FAILED: False,
        }
        reward = self.kw.reward
        score = float(reward["invalid_penalty"])
        if parsed.valid:
            body_mask = body_token_mask(self.tokenizer, response_ids, parsed.body_span)
            outcome, credit = await asyncio.gather(
                self._execute(step, slot, task_type, bank, parsed.body, trajectory_id),
                self._mi_credit(contexts, set_slots.index(slot), response_ids, body_mask, trajectory_id),
            )
            score = reward["lambda_sr"] * outcome[kwf.SR] + reward["lambda_msr"] * outcome[kwf.MSR] + reward["valid_bonus"]
            fields.update({k: v for k, v in outcome.items() if k not in ("episodes_for_pool", "failed_episodes")})
            fields[sf.FAILED] = outcome["failed_episodes"] > 0
            if credit is not None:
                fields[sf.TOKEN_CREDIT] = credit.tolist()
                on_body = credit[torch.as_tensor(body_mask, dtype=torch.bool)]
                fields[kwf.MI_CREDIT] = float(on_body.mean()) if on_body.numel() else 0.0
                fields[kwf.MI_CLIP_FRAC] = (float((on_body >= self.kw.mi["cap"]).double().mean())
                                                 if on_body.numel() else 0.0)
            if records_pool(self.kw):
                usable = [PoolEpisode(task_type, e) for e in outcome["episodes_for_pool"] if is_usable(e)]
                pool_store(self.kw).record(step, trajectory_id, usable)
        version_fields = weight_version_fields(weight_versions(output), step + 1)
        return single_turn_output(prompt_ids, response_ids, float(score), fields, output.log_probs, version_fields)

    async def _context(self, step: int, slot: int, task_type: str) -> list[int]:
        """x_slot of step j: the curator prompt over 4 trajectories of the slot's type (none: zero-shot)."""

        async def build() -> list[int]:
            pool = _PROCESS.pool(self.kw, step)
            context = self.kw.context
            episodes = draw_context(pool, task_type, context["trajectories"],
                                    stable_seed(f"{self.kw.seed}:{step}:{slot}:context"),
                                    context_draw(self.kw.env_name, context["draw"]))
            _, ids, _ = fit_curator_prompt(self.tokenizer, self.kw.env_name, task_type, episodes, self.prompt_budget,
                                           max_words=self.kw.entry["max_words"],
                                           chat_template_kwargs=dict(self.apply_chat_template_kwargs or {}),
                                           view=curator_view(self.kw.env_name, context["max_steps"],
                                                             context["observation_chars"], context["view"]))
            return ids

        task, _ = _PROCESS.single_flight(_PROCESS.contexts, (self.kw.state_dir, step, slot), build)
        return list(await asyncio.shield(task))

    async def _play(self, task: RewardTask, guidance: str, request_id: str) -> ExecutorEpisode:
        executor = frozen_executor(self.kw)
        async with _PROCESS.episode_slots(self.kw):
            with ENV_POOL.lease(self.kw.env_name, self.kw.env_kwargs) as env:
                return await executor.play(env, task.task_id, guidance, task.seed, request_id=request_id)

    async def _baseline(self, step: int, slot: int, task_type: str, bank: list[Entry]) -> tuple[GroupBaseline, bool]:
        """The group's reward tasks, their retrievals and bank-only wins: computed by the first session
        that needs them, awaited by the others."""

        async def build() -> GroupBaseline:
            chosen = reward_tasks(self.kw, task_type, step, slot)
            retrieved: list[tuple[str, ...]] = [()] * len(chosen)
            use_bank = self.kw.bank["enabled"] and bank and self.kw.bank["top_m"] > 0
            if use_bank:
                resets = await asyncio.gather(*(self._reset(t, seed) for t, seed in chosen))
                # The query names the task's own family in the authors' words (pick_and_place_simple,
                # WebShop/<category>), as evaluation does and as the authors' one query builder does, not the
                # slot's type ("webshop" for every task). A task whose reset failed retrieves nothing; its runs
                # then fail at their own reset, flagged.
                families = task_families(self.kw)
                reset_ok = [k for k, reset in enumerate(resets) if reset is not None]
                queries = [retrieval_query(query_task_type(self.kw.env_name, families[chosen[k][0]]),
                                           task_description(resets[k][1], resets[k][0]), resets[k][0]) for k in reset_ok]
                entries = [BankEntry(e.entry_id, e.text) for e in bank]
                ranked = _PROCESS.retriever(self.kw).rank(queries, entries, self.kw.bank["top_m"]) if queries else []
                for k, row in zip(reset_ok, ranked):
                    retrieved[k] = tuple(bank[i].text for i in row)
            tasks = [RewardTask(t, seed, r) for (t, seed), r in zip(chosen, retrieved)]
            if not self.kw.bank["enabled"]:
                return GroupBaseline(tasks, [], 0)
            episodes = await asyncio.gather(*(
                self._play(task, format_guidance(list(task.retrieved)), f"kw{step}:{slot}:bank:{k}")
                for k, task in enumerate(tasks)
            ))
            return GroupBaseline(tasks, [e.won for e in episodes], len(episodes),
                                 sum(e.status.startswith("failed") for e in episodes))

        task, started = _PROCESS.single_flight(_PROCESS.baselines, (self.kw.state_dir, step, slot), build)
        return await asyncio.shield(task), started

    async def _reset(self, task_id: str, seed: int) -> tuple[str, dict[str, Any]] | None:
        """The task's first observation and reset info, as the executor will see them (retrieval runs
        before the first action); None when the reset failed."""
        with ENV_POOL.lease(self.kw.env_name, self.kw.env_kwargs) as env:
            try:
                return await guarded_call(env.reset, task_id, seed=seed, timeout_s=self.kw.executor["env_timeout_s"])
            except EnvCallFailed:
                return None

    async def _execute(self, step: int, slot: int, task_type: str, bank: list[Entry], body: str,
                       trajectory_id: str) -> dict[str, Any]:
        """SR, MSR and the runs behind them for one valid candidate."""
        baseline, started = await self._baseline(step, slot, task_type, bank)
        tasks = baseline.tasks
        singles = await asyncio.gather(*(
            self._play(task, format_guidance([body]), f"{trajectory_id}:single:{k}") for k, task in enumerate(tasks)
        ))
        sr_wins = [e.won for e in singles]
        episodes = len(singles)
        augmented = []
        if not self.kw.bank["enabled"]:
            augmented_wins, bank_only = sr_wins, [False] * len(tasks)
        else:
            bank_only = baseline.bank_only_wins
            with_entries = [k for k, task in enumerate(tasks) if task.retrieved]
            augmented = await asyncio.gather(*(
                self._play(tasks[k], format_guidance([*tasks[k].retrieved, body]), f"{trajectory_id}:aug:{k}")
                for k in with_entries
            ))
            episodes += len(augmented)
            augmented_wins = list(sr_wins)  # nothing retrieved: the augmented guidance is the candidate alone
            for k, episode in zip(with_entries, augmented):
                augmented_wins[k] = episode.won
        mean = lambda values: sum(map(float, values)) / len(values)
        return {
            kwf.SR: mean(sr_wins),
            kwf.MSR: mean([float(a) - float(b) for a, b in zip(augmented_wins, bank_only)]) if self.kw.bank["enabled"] else 0.0,
            kwf.BANK_ONLY_SR: mean(bank_only) if self.kw.bank["enabled"] else None,
            kwf.AUG_SR: mean(augmented_wins) if self.kw.bank["enabled"] else None,
            kwf.BANK_ONLY_RUNS: int(started and self.kw.bank["enabled"]),
            kwf.EXECUTOR_EPISODES: episodes + (baseline.episodes if started else 0),
            kwf.RETRIEVED: mean([len(t.retrieved) for t in tasks]),
            # Every run this session played (and the bank-only runs, when it played them): a failed env or
            # executor call flags the sample, whichever run it hit.
            "failed_episodes": sum(e.status.startswith("failed") for e in (*singles, *augmented))
            + (baseline.failed_episodes if started else 0),
            "episodes_for_pool": singles,
        }

    async def _mi_credit(self, contexts: list[list[int]], own: int, response_ids: list[int], body_mask: list[int],
                         request_id: str) -> torch.Tensor | None:
        """Eq. 6 over the comparison set, on body tokens; None when MI credit is off."""
        if not self.kw.mi["enabled"]:
            return None
        logprobs = await rescore_under_contexts(self.server_manager, contexts, response_ids, request_id)
        credit = mi_token_credit(logprobs[None], torch.tensor([own]), torch.tensor([body_mask]),
                                 weight=self.kw.mi["weight"], cap=self.kw.mi["cap"])
        return credit[0]
