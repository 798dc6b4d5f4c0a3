"""Runs the study: every method's training iterations, then the held-out test, and the metrics.

Prompts are Markov: the current observation plus the method's memory, no in-episode history.
Every method sees the same slip randomness at the same iteration (episode seed = f(seed, iteration),
common random numbers). A reply without a usable ``<action>`` is sent to the env as an empty action,
which the env flags as invalid (nothing moves); it is logged and uses one of the episode's
``max_steps`` attempts, so a model that never answers cannot loop forever.

Metrics (per method, per iteration and for the test): ``success_rate``; ``good_move_ratio`` = share
of attempted actions that are good moves (:mod:`~skl_verl.skl.frozenlake_study.board`; invalid
attempts count as not good); ``good_move_ratio_valid`` (valid moves only, the paper's wording),
``good_move_ratio_risky`` (valid moves at states where the four death probabilities differ),
``invalid_rate``, ``success_at_least_once``, ``recoverability_rate`` (share of written knowledge or
reflection texts mentioning "recoverab", Fig. 3 middle) and call counts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envs.frozenlake import FrozenLakeEnv
from skl_verl.rollout.parsing import TagActionParser
from skl_verl.skl.frozenlake_study.agents import AGENTS, METHOD_LABELS, METHODS, Agent
from skl_verl.skl.frozenlake_study.board import death_probs, is_good_move, is_risky, parse_slip
from skl_verl.skl.frozenlake_study.chat import ChatLLM, GenerationClient
from skl_verl.skl.frozenlake_study.episodes import Decision, Episode, Step
from skl_verl.skl.frozenlake_study.plot import plot_results
from skl_verl.skl.frozenlake_study.prompts import (
    ACTION_INSTRUCTION,
    STORED_KNOWLEDGE_INSTRUCTION,
    TRANSFER_NOTE,
    WRITE_KNOWLEDGE_INSTRUCTION,
)

logger = logging.getLogger(__name__)

_KEYWORD = re.compile(r"recoverab", re.IGNORECASE)


@dataclass
class StudyConfig:
    iterations: int = 10
    train_maps: int = 50
    test_maps: int = 50
    size: int = 5  # the authors' eval_bootstrap maps
    p_frozen: float = 0.8
    slip: tuple[float, float] = (1 / 3, 1 / 3)
    seed: int = 0
    max_steps: int = 20
    max_new_tokens: int = 1024
    temperature: float = 0.0  # greedy, as the authors' eval_bootstrap decodes
    top_p: float = 1.0
    refine_failed_only: bool = True
    """Reflect only after a failed training episode (the authors' eval_bootstrap); False: after every one."""
    n_continuations: int = 3
    neighbourhood_radius: int = 1
    concurrency: int = 32
    methods: tuple[str, ...] = METHODS
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    plot: bool = True

    def __post_init__(self) -> None:
        self.slip = parse_slip(self.slip)
        self.methods = tuple(self.methods)
        unknown = set(self.methods) - set(METHODS)
        if unknown or not self.methods:
            raise ValueError(f"methods must be a non-empty subset of {METHODS}, got {self.methods}")
        for name in ("iterations", "train_maps", "max_steps", "max_new_tokens", "n_continuations", "concurrency"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.test_maps < 0 or self.neighbourhood_radius < 0:
            raise ValueError("test_maps and neighbourhood_radius must be >= 0")


class FrozenLakeStudy:
    """Runs every method's train iterations and the held-out test (the methods:
    :mod:`~skl_verl.skl.frozenlake_study.agents`)."""

    def __init__(
        self,
        client: GenerationClient,
        tokenizer: Any,
        config: StudyConfig,
        out_dir: str | Path,
        maps: Sequence[Sequence[str]] | None = None,
    ):
        self.config = config
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.llm = ChatLLM(client, tokenizer, config)
        n_maps = config.train_maps + config.test_maps
        if maps is None:
            base = FrozenLakeEnv(size=config.size, p_frozen=config.p_frozen, num_tasks=n_maps, seed=config.seed,
                                 slip=config.slip, max_steps=config.max_steps)
            maps = [spec.metadata["map"] for spec in base.tasks()]
        if len(maps) < n_maps:
            raise ValueError(f"need {n_maps} maps (train + test), got {len(maps)}")
        self.maps = [tuple(m) for m in maps[:n_maps]]
        self._env_args = {"maps": self.maps, "slip": config.slip, "max_steps": config.max_steps, "seed": config.seed}
        self._probe = FrozenLakeEnv(**self._env_args)
        self.task_ids = [spec.task_id for spec in self._probe.tasks()]
        self._death_cache: dict[tuple[int, tuple[int, int]], dict[str, float]] = {}
        self.agents: dict[str, Agent] = {name: AGENTS[name](self) for name in config.methods}
        self.episodes: list[Episode] = []
        self.action_parser = TagActionParser(tags=("action",))
        self.knowledge_parser = TagActionParser(tags=("knowledge",), max_action_chars=20_000)
        self._episodes_file = open(self.out_dir / "episodes.jsonl", "w", encoding="utf-8")
        self._reflections_file = open(self.out_dir / "reflections.jsonl", "w", encoding="utf-8")
        self.started = time.time()

    def paired_train_map(self, test_map: int) -> int:
        return (test_map - self.config.train_maps) % self.config.train_maps

    def start_position(self, map_index: int) -> tuple[int, int]:
        rows = self.maps[map_index]
        return next((r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "S")

    def root_key(self, map_index: int) -> str:
        r, c = self.start_position(map_index)
        return "/".join(self.maps[map_index]) + f"|{r},{c}"  # FrozenLakeEnv.state_key()'s format

    def death_probs(self, map_index: int, position: tuple[int, int]) -> dict[str, float]:
        key = (map_index, tuple(position))
        if key not in self._death_cache:
            self._death_cache[key] = death_probs(self._probe, self.task_ids[map_index], position)
        return self._death_cache[key]

    def episode_seed(self, iteration: int) -> int:
        return self.config.seed * 1000 + iteration

    def log_reflection(self, episode: Episode, kind: str, state_key: str, t: int | None, text: str | None,
                       error: str | None, prompt: str) -> None:
        if error:
            logger.info("%s: unusable reflection (%s)", episode.episode_id, error)
        record = {"method": episode.method, "iteration": episode.iteration, "map_index": episode.map_index,
                  "kind": kind, "t": t, "state_key": state_key, "text": text, "error": error, "prompt": prompt}
        self._reflections_file.write(json.dumps(record, ensure_ascii=False) + "\n")

    def _messages(self, agent: Agent, observation: str, decision: Decision) -> list[dict[str, str]]:
        parts = [*decision.blocks, observation]
        if decision.knowledge is not None:
            note = TRANSFER_NOTE if decision.source == "transferred" else ""
            parts.append(f"Your knowledge of this state{note}:\n<knowledge>{decision.knowledge}</knowledge>")
            parts.append(STORED_KNOWLEDGE_INSTRUCTION)
        elif decision.ask_knowledge:
            parts.append(WRITE_KNOWLEDGE_INSTRUCTION)
        else:
            parts.append(ACTION_INSTRUCTION)
        return [{"role": "system", "content": agent.system}, {"role": "user", "content": "\n\n".join(parts)}]

    async def play_episode(self, agent: Agent, map_index: int, phase: str, iteration: int,
                           env: FrozenLakeEnv | None = None) -> Episode:
        env = env or FrozenLakeEnv(**self._env_args)
        task_id = self.task_ids[map_index]
        observation, _ = env.reset(task_id, seed=self.episode_seed(iteration))
        rows = self.maps[map_index]
        episode = Episode(
            method=agent.name, phase=phase, iteration=iteration, map_index=map_index, task_id=task_id,
            episode_id=f"{agent.name}-{phase}-it{iteration}-m{map_index}", root_key=env.state_key(),
            root_observation=observation, final_position=env.position,
        )
        for attempt in range(self.config.max_steps):
            position, state_key = env.position, env.state_key()
            decision = agent.decide(episode, map_index, position, state_key)
            reply = await self.llm.complete(f"{episode.episode_id}:a{attempt}", self._messages(agent, observation, decision))
            parsed = self.action_parser(reply)
            knowledge, knowledge_error = decision.knowledge, None
            if decision.ask_knowledge:
                parsed_k = self.knowledge_parser(reply)
                knowledge, knowledge_error = parsed_k.action, parsed_k.error
                if parsed_k.ok:
                    episode.texts.append(parsed_k.action)
            probs = self.death_probs(map_index, position)
            result = env.step(parsed.action if parsed.ok else "")  # unparseable -> the env flags it invalid
            valid = not result.invalid_action
            error = None if valid else (parsed.error or f"not an action: {parsed.action!r}")
            if error:
                logger.debug("%s attempt %d: invalid move (%s)", episode.episode_id, attempt, error)
            step = Step(
                attempt=attempt, position=position, state_key=state_key, observation=observation, reply=reply,
                action=result.info["intended"] if valid else None, error=error, knowledge=knowledge,
                knowledge_source="written" if decision.ask_knowledge else decision.source,
                knowledge_error=knowledge_error, death_probs=probs,
                good=valid and is_good_move(probs, result.info["intended"]),
                risky=is_risky(probs),
            )
            if valid:
                r, c = result.info["position"]
                step.actual, step.next_position, step.next_tile = result.info["actual"], (r, c), rows[r][c]
                step.next_state_key, step.reward, step.done = env.state_key(), float(result.reward), result.done
            episode.steps.append(step)
            observation = result.observation if valid else observation
            episode.final_position = env.position
            if result.done:
                episode.won = bool(result.info["won"])
                episode.outcome = ("goal" if episode.won else "step_limit" if result.info.get("truncated") else "hole")
                break
        return episode

    async def _run_episode(self, agent: Agent, map_index: int, phase: str, iteration: int, env: FrozenLakeEnv) -> Episode:
        episode = await self.play_episode(agent, map_index, phase, iteration, env)
        if phase == "train":
            if episode.won and self.config.refine_failed_only:
                agent.observe(episode)  # a won episode is kept as experience, not reflected on
            else:
                await agent.update(episode)
        self.episodes.append(episode)
        self._episodes_file.write(json.dumps(episode.to_record(), ensure_ascii=False) + "\n")
        self._episodes_file.flush()
        return episode

    async def _train_chain(self, agent: Agent, map_index: int) -> None:
        env = FrozenLakeEnv(**self._env_args)
        for iteration in range(1, self.config.iterations + 1):
            await self._run_episode(agent, map_index, "train", iteration, env)

    async def run(self) -> dict[str, Any]:
        cfg = self.config
        try:
            # Each (method, training map) chain runs its iterations in order; chains run concurrently
            # (the model client bounds in-flight requests), with no barrier between iterations.
            await asyncio.gather(*(self._train_chain(agent, m) for agent in self.agents.values()
                                   for m in range(cfg.train_maps)))
            logger.info("training done in %.0fs (%d model calls)", time.time() - self.started, self.llm.calls)
            self.write_outputs()
            for agent in self.agents.values():
                agent.prepare_test()
            test_iteration = cfg.iterations + 1
            await asyncio.gather(*(self._run_episode(agent, m, "test", test_iteration, FrozenLakeEnv(**self._env_args))
                                   for agent in self.agents.values()
                                   for m in range(cfg.train_maps, cfg.train_maps + cfg.test_maps)))
            return self.write_outputs()
        finally:
            self._episodes_file.close()
            self._reflections_file.close()

    def summarize(self) -> dict[str, Any]:
        cfg = self.config
        methods: dict[str, Any] = {}
        for name in cfg.methods:
            mine = [e for e in self.episodes if e.method == name]
            train = []
            ever_won: set[int] = set()
            for it in range(1, cfg.iterations + 1):
                eps = [e for e in mine if e.phase == "train" and e.iteration == it]
                if not eps:
                    continue
                ever_won |= {e.map_index for e in eps if e.won}
                row = {"iteration": it, **metrics(eps), "success_at_least_once": len(ever_won) / cfg.train_maps}
                train.append(row)
            test_eps = [e for e in mine if e.phase == "test"]
            methods[name] = {"label": METHOD_LABELS[name], "train": train, "test": metrics(test_eps) if test_eps else None}
        return {
            "config": {**asdict(self.config), "slip": list(cfg.slip), "methods": list(cfg.methods)},
            "maps": {"train": ["/".join(m) for m in self.maps[: cfg.train_maps]],
                     "test": ["/".join(m) for m in self.maps[cfg.train_maps :]]},
            "model_calls": self.llm.calls,
            "elapsed_s": round(time.time() - self.started, 1),
            "methods": methods,
        }

    def write_outputs(self) -> dict[str, Any]:
        results = self.summarize()
        with open(self.out_dir / "results.json", "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
        for agent in self.agents.values():
            agent.save(self.out_dir)
        if self.config.plot:
            plot_results(results, self.out_dir / "frozenlake_study.png")
        return results


def metrics(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Success rate, good-move ratios and bookkeeping over a set of episodes (moves pooled)."""
    steps = [s for e in episodes for s in e.steps]
    valid = [s for s in steps if s.action is not None]
    risky = [s for s in valid if s.risky]
    texts = [t for e in episodes for t in e.texts]
    return {
        "episodes": len(episodes),
        "success_rate": _mean([1.0 if e.won else 0.0 for e in episodes]),
        "good_move_ratio": _mean([1.0 if s.good else 0.0 for s in steps]) if steps else 0.0,
        "good_move_ratio_valid": _mean([1.0 if s.good else 0.0 for s in valid]),
        "good_move_ratio_risky": _mean([1.0 if s.good else 0.0 for s in risky]),
        "invalid_rate": _mean([0.0 if s.action is not None else 1.0 for s in steps]) if steps else 0.0,
        "fell_in_hole_rate": _mean([1.0 if e.outcome == "hole" else 0.0 for e in episodes]),
        "mean_moves": _mean([float(len(e.moves)) for e in episodes]),
        "recoverability_rate": _mean([1.0 if _KEYWORD.search(t) else 0.0 for t in texts]),
        "act_calls": len(steps),
        "reflect_calls": sum(e.reflect_calls for e in episodes),
    }


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
