"""The held-out split and draw SkillRise is evaluated on, as the authors' validation plays them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from envs import TaskSpec
from skl_verl.skillrise.held_out import distinct, held_out_env_kwargs, released_draw
from skl_verl.skillrise.sequences import retry_sequences


def tasks(n, family="pick"):
    return [TaskSpec(task_id=f"{family}-{i:03d}", family=family, difficulty=0.0) for i in range(n)]


def test_the_default_held_out_split_is_the_released_one():
    assert held_out_env_kwargs("alfworld", {}) == {"split": "valid_seen"}  # eval_in_distribution, not valid_unseen
    assert held_out_env_kwargs("alfworld", {"max_steps": 10}) == {"split": "valid_seen", "max_steps": 10}
    assert held_out_env_kwargs("alfworld", {"split": "valid_unseen"}) == {"split": "valid_unseen"}  # the user's wins
    assert held_out_env_kwargs("webshop", {}) == {"split": "test", "split_convention": "verl_agent"}
    assert held_out_env_kwargs("sciworld", {"max_steps": 30}) == {"split": "test", "task_set": "l0", "max_steps": 30}
    assert held_out_env_kwargs("frozenlake", {"size": 4}) == {"size": 4}


def test_alfworld_rows_draw_independently_with_replacement_as_textworld_does():
    games = tasks(140)  # valid_seen's size
    drawn = released_draw("alfworld", games, 128, seed=0)
    assert drawn == released_draw("alfworld", list(games), 128, seed=0)  # reproducible
    assert drawn != released_draw("alfworld", games, 128, seed=1)
    assert len(drawn) == 128 and len(distinct(drawn)) < 128  # independent draws repeat games
    # row i: worker seeded env.seed + 1000 + i; TextWorld shuffles the game list with that seed, reset()
    # plays the first game (textworld/gym/envs/textworld_batch.py, seed() and reset())
    for row in (0, 1, 127):
        order = [g.task_id for g in games]
        np.random.RandomState(1000 + row).shuffle(order)
        assert drawn[row].task_id == order[0]
    # seed s is the authors' env.seed: row 0 of seed 5 is row 5 of seed 0
    assert released_draw("alfworld", games, 1, seed=5) == drawn[5:6]


def test_alfworld_draw_matches_textworlds_own_game_order():
    textworld_batch = pytest.importorskip("textworld.gym.envs.textworld_batch")
    games = tasks(140)
    drawn = released_draw("alfworld", games, 8, seed=0)
    for row in range(8):
        worker = SimpleNamespace(gamefiles=[g.task_id for g in games])
        textworld_batch.TextworldBatchGymEnv.seed(worker, 1000 + row)  # as the authors' worker: env.seed(seed)
        assert next(worker._gamefiles_iterator) == drawn[row].task_id


@pytest.mark.parametrize("env", ["webshop", "sciworld"])
def test_webshop_and_sciworld_draw_distinct_tasks_with_one_generator(env):
    pool = tasks(500)
    drawn = released_draw(env, pool, 128, seed=0)
    # the authors' call (skillrise_{webshop,sciworld}/envs.py reset): RandomState(seed).choice(range(N), 128, replace=False)
    expected = np.random.RandomState(1000).choice(range(len(pool)), size=128, replace=False)
    assert [t.task_id for t in drawn] == [pool[i].task_id for i in expected]
    assert len(distinct(drawn)) == 128
    assert released_draw(env, pool[:50], 128) == [pool[i] for i in np.random.RandomState(1000).permutation(50)]


def test_bad_draw_arguments_are_named():
    with pytest.raises(ValueError, match="n must be >= 1"):
        released_draw("alfworld", tasks(3), 0)
    with pytest.raises(ValueError, match="no tasks"):
        released_draw("webshop", [], 3)
    with pytest.raises(ValueError, match="seed -1001"):
        released_draw("webshop", tasks(3), 3, seed=-1001)


def test_a_task_drawn_twice_is_played_twice_as_its_own_sequence():
    a, b = tasks(2)
    sequences = retry_sequences([b, a, b, b], attempts=3)
    assert [s.sequence_id for s in sequences] == [
        f"retry-{a.task_id}", f"retry-{b.task_id}", f"retry-{b.task_id}-draw2", f"retry-{b.task_id}-draw3"]
    assert all(s.task_ids == (s.task_ids[0],) * 3 for s in sequences)
    assert distinct([b, a, b]) == [b, a]


def test_each_validation_plays_the_next_alfworld_games_of_textworlds_own_cycle():
    # The authors' validation envs live all run; validation v is each worker's (v + 1)-th reset: its
    # TextWorld iterator's next game, reshuffled by the same generator after each pass (shuffled_cycle).
    textworld_batch = pytest.importorskip("textworld.gym.envs.textworld_batch")
    games = tasks(7)  # a short list: 31 validations pass over it four times
    for row in range(3):
        worker = SimpleNamespace(gamefiles=[g.task_id for g in games])
        textworld_batch.TextworldBatchGymEnv.seed(worker, 1000 + row)
        for validation in range(31):
            expected = next(worker._gamefiles_iterator)
            assert released_draw("alfworld", games, 3, seed=0, validation=validation)[row].task_id == expected


@pytest.mark.parametrize("env", ["webshop", "sciworld"])
def test_each_validation_draws_the_next_choice_of_one_generator(env):
    # skillrise_{webshop,sciworld}/envs.py reset: self._rng.choice(..., 128, replace=False) on one RandomState
    # that lives all run; before training, then every 5 steps: the validation after step 150 is the 31st call.
    pool = tasks(500)
    rng = np.random.RandomState(1000)
    calls = [rng.choice(range(len(pool)), size=128, replace=False) for _ in range(31)]
    for validation in (0, 1, 2, 30):
        drawn = released_draw(env, pool, 128, seed=0, validation=validation)
        assert [t.task_id for t in drawn] == [pool[i].task_id for i in calls[validation]]
    assert released_draw(env, pool, 128, validation=1) != released_draw(env, pool, 128, validation=0)
    with pytest.raises(ValueError, match="validation must be >= 0"):
        released_draw(env, pool, 128, validation=-1)
