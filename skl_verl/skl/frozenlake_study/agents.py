"""The four methods the study compares; each is an :class:`Agent` with its own memory.

``retry``
    No reflection: the map is simply replayed every iteration. ``success_at_least_once`` (the share
    of maps won in at least one of the first ``i`` tries) is the paper's grey dashed "retry ten times
    and succeed once" baseline.
``trajectory``
    Reflexion-style hindsight. After each episode the model reads the whole trajectory and its
    outcome (plus its previous reflection) and writes a trajectory-level reflection/plan inside
    ``<reflection>``; the latest reflection of that map is shown at every step of the next attempt.
``stateful_root``
    Stateful knowledge, root update only (the budget-matched variant of §2.1). At a state with no
    stored knowledge the model replies with ``<knowledge>z_s</knowledge>`` then ``<action>a</action>``
    in ONE reply (knowledge first, so the action is conditioned on it); at a state with stored
    knowledge, that ``z_s`` is shown and the model replies with the action (a ~ π(·|z_s, s)). After
    each episode one reflection call refines ``z_{s0}`` of the map's start state from the recorded
    continuations that start there (the ``N`` most recent, full length, outcomes included) and the
    prior ``z_{s0}``. Only ``z_{s0}`` is stored; every other state's knowledge is regenerated at each
    visit with ``z_{s0}`` in the prompt ("taking the new root-state knowledge into account").
``stateful_bootstrap``
    Fully bootstrapping agent, H = 1 (§2.2). Same acting as above. After each episode every visited
    state is refined backward, ``t = T-1, ..., 0``, from the context
    ``[s_t, {τ^1_n(s_t)}_{n≤N}, z_{s_{t+1}}, z_{s_t}]``: the state, its ``N`` most recent recorded
    one-step continuations (every visit of that state in this agent's history, current episode
    included), the knowledge of the successor just refined in this backward pass (for ``t = T-1`` the
    terminal outcome: hole / goal / step limit) and the prior ``z_{s_t}`` (the table's, else the one
    written while acting). A state visited several times in one episode is refined once, at its
    last visit, so the pass is strictly backward and each key gets one version per iteration.

Knowledge lives in :class:`~skl_verl.skl.knowledge.KnowledgeTable` (epoch = iteration), transitions
in a :class:`~skl_verl.skl.knowledge.ReplayBuffer`, both keyed by the env's ``state_key()``, which
contains the map. Transfer to the held-out maps therefore goes through a map-agnostic key: the
player's ``(2r+1)x(2r+1)`` neighbourhood of tiles (``r = --neighbourhood-radius``, default 1; the
centre tile included, off-grid cells ``#``). Held-out map ``j`` is paired with training map
``j mod n_train`` (as if each training run were "transferred to a newly generated testing map"):

* ``trajectory``: the paired map's final reflection is shown (marked as written on another map);
* stateful: at a test state, the knowledge of a training state with the same neighbourhood is shown,
  preferring the paired map, else any training map (most recently updated wins); the start state
  falls back to the paired map's ``z_{s0}`` when no neighbourhood matches (the start is the start on
  every map). States with no match are regenerated as usual. Knowledge is frozen during the test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from skl_verl.rollout.parsing import TagActionParser
from skl_verl.skl.frozenlake_study.board import neighbourhood_key
from skl_verl.skl.frozenlake_study.episodes import Decision, Episode, describe_position, render_move
from skl_verl.skl.frozenlake_study.prompts import (
    BOOTSTRAP_REFLECT_SYSTEM,
    BOOTSTRAP_REFLECT_USER,
    NO_KNOWLEDGE,
    ROOT_REFLECT_SYSTEM,
    ROOT_REFLECT_USER,
    SYSTEM_PLAY,
    SYSTEM_STATEFUL,
    TRAJECTORY_REFLECT_SYSTEM,
    TRAJECTORY_REFLECT_USER,
    TRANSFER_NOTE,
)
from skl_verl.skl.knowledge import KnowledgeTable, ReplayBuffer, Transition

if TYPE_CHECKING:  # the runner imports this module to build its agents
    from skl_verl.skl.frozenlake_study.runner import FrozenLakeStudy


class Agent:
    """One method's memory. ``decide`` says what the policy sees at a state; ``update`` reflects."""

    name = "agent"
    system = SYSTEM_PLAY

    def __init__(self, study: FrozenLakeStudy):
        self.study = study

    def decide(self, episode: Episode, map_index: int, position: tuple[int, int], state_key: str) -> Decision:
        return Decision()

    async def update(self, episode: Episode) -> None:
        return None

    def observe(self, episode: Episode) -> None:
        """A training episode that gets no reflection (a won one, with ``refine_failed_only``)."""
        return None

    def prepare_test(self) -> None:
        return None

    def save(self, out_dir: Path) -> None:
        return None


class RetryAgent(Agent):
    name = "retry"


class TrajectoryAgent(Agent):
    """Reflexion: a trajectory-level reflection per map, rewritten after every episode."""

    name = "trajectory"

    def __init__(self, study: FrozenLakeStudy):
        super().__init__(study)
        self.reflections: dict[int, list[str]] = {}
        self.parser = TagActionParser(tags=("reflection",), max_action_chars=20_000)

    def latest(self, train_map: int) -> str | None:
        history = self.reflections.get(train_map)
        return history[-1] if history else None

    def decide(self, episode, map_index, position, state_key):
        if episode.phase == "train":
            text, note = self.latest(map_index), ""
        else:
            text, note = self.latest(self.study.paired_train_map(map_index)), " (written on a different map)"
        if not text:
            return Decision()
        return Decision(blocks=[f"Your reflection from previous attempts{note}:\n{text}"])

    async def update(self, episode):
        previous = self.latest(episode.map_index)
        lines = [f"{i}. {render_move(s)}" for i, s in enumerate(episode.steps, start=1)] or ["(no move)"]
        user = TRAJECTORY_REFLECT_USER.format(
            observation=episode.root_observation, previous=previous or "(none yet)",
            trajectory="\n".join(lines), outcome=episode.outcome_sentence(),
        )
        messages = [{"role": "system", "content": TRAJECTORY_REFLECT_SYSTEM}, {"role": "user", "content": user}]
        reply = await self.study.llm.complete(f"{episode.episode_id}:reflect", messages)
        episode.reflect_calls += 1
        parsed = self.parser(reply)
        if parsed.ok:
            self.reflections.setdefault(episode.map_index, []).append(parsed.action)
            episode.texts.append(parsed.action)
        self.study.log_reflection(episode, kind="trajectory", state_key=episode.root_key, t=None,
                                  text=parsed.action, error=parsed.error, prompt=user)

    def save(self, out_dir):
        with open(out_dir / f"reflections_{self.name}.json", "w", encoding="utf-8") as handle:
            json.dump({str(k): v for k, v in sorted(self.reflections.items())}, handle, indent=1, ensure_ascii=False)


class StatefulAgent(Agent):
    """Shared by both stateful variants: knowledge table, experience buffer, acting, transfer lookup."""

    system = SYSTEM_STATEFUL
    uses_root_context = False

    def __init__(self, study: FrozenLakeStudy):
        super().__init__(study)
        self.table = KnowledgeTable()
        self.buffer = ReplayBuffer()
        self.key_info: dict[str, tuple[int, tuple[int, int]]] = {}  # state key -> (train map, position)
        self.update_order: dict[str, int] = {}  # state key -> global counter of its latest update
        self.episodes: dict[str, Episode] = {}
        self.parser = TagActionParser(tags=("knowledge",), max_action_chars=20_000)
        self._by_neighbourhood: dict[str, list[tuple[int, int, str]]] = {}
        self._counter = 0

    def set_knowledge(self, state_key: str, text: str, epoch: int, map_index: int, position: tuple[int, int]) -> None:
        self.table.set(state_key, text, epoch)
        self.key_info[state_key] = (map_index, tuple(position))
        self._counter += 1
        self.update_order[state_key] = self._counter

    def prepare_test(self) -> None:
        """Index the trained table by the map-agnostic neighbourhood key for transfer."""
        index: dict[str, list[tuple[int, int, str]]] = {}
        for key in self.table.keys():
            map_index, position = self.key_info[key]
            nkey = neighbourhood_key(self.study.maps[map_index], position, self.study.config.neighbourhood_radius)
            index.setdefault(nkey, []).append((self.update_order[key], map_index, key))
        self._by_neighbourhood = index

    def transferred(self, test_map: int, position: tuple[int, int]) -> str | None:
        """Knowledge for a held-out state: same neighbourhood on the paired map, else on any training
        map (latest update wins), else (start state only) the paired map's start-state knowledge."""
        paired = self.study.paired_train_map(test_map)
        nkey = neighbourhood_key(self.study.maps[test_map], position, self.study.config.neighbourhood_radius)
        candidates = self._by_neighbourhood.get(nkey, [])
        for pool in ([c for c in candidates if c[1] == paired], candidates):
            if pool:
                return self.table.get(max(pool)[2])
        if tuple(position) == self.study.start_position(test_map):
            return self.table.get(self.study.root_key(paired))
        return None

    def stored(self, episode: Episode, map_index: int, position: tuple[int, int], state_key: str) -> tuple[str | None, str]:
        if episode.phase == "train":
            text = self.table.get(state_key) if state_key in self.table else None
            return text, "stored" if text is not None else "none"
        text = self.transferred(map_index, position)
        return text, "transferred" if text is not None else "none"

    def decide(self, episode, map_index, position, state_key):
        text, source = self.stored(episode, map_index, position, state_key)
        decision = Decision(knowledge=text, source=source, ask_knowledge=text is None)
        if self.uses_root_context and state_key != episode.root_key:
            root, _ = self.stored(episode, map_index, self.study.start_position(map_index), episode.root_key)
            if root:
                note = TRANSFER_NOTE if episode.phase == "test" else ""
                decision.blocks.append(f"Your knowledge of the start state of this map{note}:\n{root}")
        return decision

    def observe(self, episode: Episode) -> None:
        self.record(episode)  # its continuations still inform later refinements

    def record(self, episode: Episode) -> None:
        moves = episode.moves
        self.episodes[episode.episode_id] = episode
        if not moves:
            return
        transitions = [
            Transition(
                episode_id=episode.episode_id, t=t, state_key=s.state_key, observation=s.observation,
                knowledge=s.knowledge, action=s.action, reward=s.reward, next_state_key=s.next_state_key,
                done=s.done, epoch=episode.iteration,
            )
            for t, s in enumerate(moves)
        ]
        self.buffer.add_episode(episode.episode_id, transitions, episode.iteration)

    def continuations(self, state_key: str, horizon: int | None) -> list[str]:
        """The ``N`` most recent recorded continuations from ``state_key`` (all visits in history),
        ``horizon`` moves each (None: to the end of the episode), rendered one per line."""
        visits = self.buffer.visits(state_key)[-self.study.config.n_continuations :]
        lines = []
        for i, (episode_id, t) in enumerate(visits, start=1):
            episode = self.episodes[episode_id]
            moves = episode.moves
            stop = len(moves) if horizon is None else min(len(moves), t + horizon)
            text = "; then ".join(render_move(s) for s in moves[t:stop])
            if stop == len(moves):
                text += f". Outcome: {episode.outcome_sentence()}"
            lines.append(f"{i}. (iteration {episode.iteration}) {text}")
        return lines

    async def refine(self, episode: Episode, t: int | None, state_key: str, system: str, user: str) -> str | None:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        tag = "root" if t is None else f"t{t}"
        reply = await self.study.llm.complete(f"{episode.episode_id}:reflect:{tag}", messages)
        episode.reflect_calls += 1
        parsed = self.parser(reply)
        if parsed.ok:
            episode.texts.append(parsed.action)
        self.study.log_reflection(episode, kind=self.name, state_key=state_key, t=t, text=parsed.action,
                                  error=parsed.error, prompt=user)
        return parsed.action

    def save(self, out_dir):
        self.table.save(out_dir / f"knowledge_{self.name}.jsonl")
        self.buffer.save(out_dir / f"buffer_{self.name}.jsonl")


class StatefulRootAgent(StatefulAgent):
    """Only ``z_{s0}`` is stored and refined; other states are regenerated with ``z_{s0}`` in context."""

    name = "stateful_root"
    uses_root_context = True

    async def update(self, episode):
        self.record(episode)
        lines = self.continuations(episode.root_key, horizon=None)
        if not lines:  # never moved from the start (only invalid replies so far)
            return
        prior = self.table.get(episode.root_key) if episode.root_key in self.table else None
        if prior is None and episode.steps:
            prior = episode.steps[0].knowledge
        user = ROOT_REFLECT_USER.format(
            observation=episode.root_observation, prior=prior or NO_KNOWLEDGE, count=len(lines),
            continuations="\n".join(lines),
        )
        text = await self.refine(episode, None, episode.root_key, ROOT_REFLECT_SYSTEM, user)
        if text is not None:
            start = self.study.start_position(episode.map_index)
            self.set_knowledge(episode.root_key, text, episode.iteration, episode.map_index, start)


class StatefulBootstrapAgent(StatefulAgent):
    """Every visited state refined backward from ``s_{T-1}`` to ``s_0`` with ``z_{s_{t+1}}`` in context (H=1)."""

    name = "stateful_bootstrap"

    def successor(self, episode: Episode, t: int) -> tuple[str, str]:
        """``(where, z_{s_{t+1}})``: the terminal outcome for the last move, else the latest knowledge."""
        moves = episode.moves
        step = moves[t]
        where = describe_position(step.next_position)
        if t == len(moves) - 1 and episode.outcome in ("goal", "hole"):
            return where, f"(terminal state) The attempt {episode.outcome_sentence()}"
        key = step.next_state_key
        if key in self.table:
            return where, self.table.get(key)
        later = next((s.knowledge for s in moves[t + 1 :] if s.state_key == key and s.knowledge), None)
        if later:
            return where, later
        if t == len(moves) - 1:
            return where, f"{NO_KNOWLEDGE} The attempt ended here: {episode.outcome_sentence()}"
        return where, NO_KNOWLEDGE

    async def update(self, episode):
        self.record(episode)
        moves = episode.moves
        done: set[str] = set()
        for t in range(len(moves) - 1, -1, -1):
            step = moves[t]
            if step.state_key in done:  # once, at its last visit: the pass stays strictly backward
                continue
            done.add(step.state_key)
            prior = self.table.get(step.state_key) if step.state_key in self.table else step.knowledge
            where, successor = self.successor(episode, t)
            lines = self.continuations(step.state_key, horizon=1)
            user = BOOTSTRAP_REFLECT_USER.format(
                observation=step.observation, prior=prior or NO_KNOWLEDGE, count=len(lines),
                continuations="\n".join(lines), successor_where=where, successor=successor,
            )
            text = await self.refine(episode, t, step.state_key, BOOTSTRAP_REFLECT_SYSTEM, user)
            if text is not None:
                self.set_knowledge(step.state_key, text, episode.iteration, episode.map_index, step.position)


AGENTS: dict[str, type[Agent]] = {
    "retry": RetryAgent,
    "trajectory": TrajectoryAgent,
    "stateful_root": StatefulRootAgent,
    "stateful_bootstrap": StatefulBootstrapAgent,
}
METHODS: tuple[str, ...] = tuple(AGENTS)
METHOD_LABELS = {
    "retry": "retry (no reflection)",
    "trajectory": "trajectory reflection",
    "stateful_root": "stateful (root update)",
    "stateful_bootstrap": "stateful (bootstrap, H=1)",
}
