"""SciWorldEnv against the real ``scienceworld`` package (its jar, in a real JVM).

Skipped only when the package is not installed or no JVM can be started here. One JVM is
started for the module (``env`` fixture) plus one for the lifecycle test.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest

from envs.base import EnvError, EnvNotResetError, SnapshotNotSupportedError, UnknownTaskError

pytest.importorskip("scienceworld", reason="the scienceworld package is not installed (pip install scienceworld)")
if shutil.which("java") is None:
    pytest.skip("no 'java' executable on PATH: the ScienceWorld JVM cannot start here", allow_module_level=True)

from envs.sciworld_env import SciWorldEnv, SciWorldJVMError, cap_actions  # noqa: E402

TASKS = ("find-living-thing", "find-non-living-thing")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("sciworld_gold")


@pytest.fixture(scope="module")
def env(cache_dir):
    try:
        e = SciWorldEnv(task_names=list(TASKS), split="train", max_variations_per_task=2, gold_cache_dir=cache_dir)
    except SciWorldJVMError as exc:  # pragma: no cover - only where Java is present but broken
        pytest.skip(f"the ScienceWorld JVM could not start here: {exc}")
    yield e
    e.close()


def _tid(task: str, variation: int) -> str:
    return f"sciworld-{task}-v{variation}"


def test_tasks_come_from_the_package_splits(env, cache_dir, capsys):
    specs = env.tasks()
    assert [s.task_id for s in specs] == [_tid(t, v) for t in TASKS for v in (0, 1)]
    # building the env measured nothing: a difficulty is known once a dataset build asks for it
    assert all(math.isnan(s.difficulty) and s.metadata["gold_length"] is None for s in specs)
    env.measure_difficulty([_tid(TASKS[0], 0)], processes=1)
    assert not math.isnan(env.task(_tid(TASKS[0], 0)).difficulty) and math.isnan(env.task(_tid(TASKS[1], 0)).difficulty)
    env.measure_difficulty(processes=1)
    assert "sciworld: 3/3 measured" in capsys.readouterr().err  # progress and time left, only what was missing
    specs = env.tasks()
    for spec in specs:
        meta = spec.metadata
        assert spec.family == meta["task_name"] in TASKS
        assert meta["split"] == "train" and meta["simplification"] == "easy"
        assert meta["topic"] == "Classification" and meta["task_num"] in ("4-1", "4-2")
        assert spec.difficulty == float(meta["gold_length"]) > 0
    # the gold lengths were cached, keyed by package version and simplification
    (cache_file,) = cache_dir.glob("gold_lengths-scienceworld*-easy.json")
    cached = json.loads(cache_file.read_text())
    for spec in specs:
        assert cached[spec.metadata["task_name"]][str(spec.metadata["variation"])] == spec.metadata["gold_length"]
    # a new env (an env worker) reads the lengths from the cache without measuring
    again = SciWorldEnv(task_names=list(TASKS), split="train", max_variations_per_task=2, gold_cache_dir=cache_dir)
    try:
        assert [t.difficulty for t in again.tasks()] == [t.difficulty for t in specs]
    finally:
        again.close()


def test_measuring_in_worker_processes_gives_the_same_lengths(env, tmp_path, capsys):
    env.measure_difficulty(processes=1)  # in this process (a no-op where the cache has them)
    fresh = SciWorldEnv(task_names=[TASKS[0]], split="train", max_variations_per_task=2, gold_cache_dir=tmp_path)
    try:
        fresh.measure_difficulty(processes=2)  # two spawned processes, each its own JVM
        assert [t.difficulty for t in fresh.tasks()] == [env.task(t.task_id).difficulty for t in fresh.tasks()]
    finally:
        fresh.close()
    assert "in 2 process(es)" in capsys.readouterr().err


def test_unknown_task_and_not_reset(env):
    with pytest.raises(UnknownTaskError):
        env.reset("sciworld-boil-v0")  # not selected in this env
    with pytest.raises(UnknownTaskError):
        env.task("nope")
    with pytest.raises(SnapshotNotSupportedError):
        env.get_state()


def test_reset_gives_task_description(env):
    obs, info = env.reset(_tid("find-living-thing", 0))
    assert obs.startswith("Your task is to find a(n) living thing.")
    assert "This room is called" in obs
    assert info["task"].task_id == _tid("find-living-thing", 0)
    assert info["won"] is False and info["invalid_action"] is False
    assert "living thing" in info["task_description"]


def test_gold_sequence_wins(env):
    tid = _tid("find-living-thing", 0)
    gold = env.gold_action_sequence(tid)
    assert 0 < len(gold) <= env.max_steps
    with pytest.raises(EnvNotResetError):  # fetching the gold path ends any episode
        env.step("look around")
    _, info = env.reset(tid)
    initial = info["initial_score"] / 100
    total, result = 0.0, None
    for action in gold:
        result = env.step(action)
        total += result.reward
        assert not result.invalid_action, (action, result.observation)
        if result.done:
            break
    assert result is not None and result.done and result.won
    assert result.info["score"] == 100
    assert result.info["progress"] == 1.0
    assert total == pytest.approx(1.0 - initial)  # rewards are progress deltas from the reset state
    with pytest.raises(EnvNotResetError):
        env.step("look around")
    with pytest.raises(EnvNotResetError):
        env.admissible_actions()


def test_invalid_action_is_flagged_not_raised(env):
    env.reset(_tid("find-non-living-thing", 1))
    key = env.state_key()
    for bad in ("fly to the moon", "", "reset task", "look \ud800around"):
        result = env.step(bad)
        assert result.invalid_action and not result.done and result.reward == 0.0
    assert env.state_key() == key  # nothing moved


def test_admissible_actions_are_valid_and_bounded(env):
    env.reset(_tid("find-living-thing", 1))
    actions = env.admissible_actions()
    assert actions == sorted(actions) and len(actions) <= env.max_admissible
    assert "look around" in actions and "reset task" not in actions
    key = env.state_key()
    go = next(a for a in actions if a.startswith("go to ") and "door" not in a)
    result = env.step(go)
    assert not result.invalid_action, result.observation
    assert env.state_key() != key


def test_ambiguous_request_lists_choice_numbers(env):
    env.reset(_tid("find-living-thing", 0))
    result = env.step("open door")  # six doors from the hallway
    assert result.info["ambiguous"] and not result.invalid_action
    numbers = env.admissible_actions()
    assert numbers == [str(i) for i in range(len(result.info["choices"]))]
    result = env.step(result.info["choices"][0])  # the choice's text is mapped to its number
    assert not result.invalid_action and not result.info["ambiguous"]
    assert "door" in result.observation.lower()


def test_failure_ends_the_episode_unwon(env):
    env.reset(_tid("find-living-thing", 0))
    result = env.step("focus on picture")  # a picture hangs in the hallway; it is not a living thing
    assert result.done and not result.won and result.info["failed"]
    assert result.info["score"] < 0


def test_truncation_after_max_steps(env):
    saved = env.max_steps
    env.max_steps = 2
    try:
        env.reset(_tid("find-non-living-thing", 0))
        assert not env.step("look around").done
        result = env.step("look around")
        assert result.done and result.info["truncated"] and not result.won
    finally:
        env.max_steps = saved


def test_bad_constructor_arguments_fail_before_the_jvm_starts():
    with pytest.raises(ValueError, match="unknown ScienceWorld task"):
        SciWorldEnv(task_names=["no-such-task"], gold_cache_dir=None)
    with pytest.raises(ValueError):
        SciWorldEnv(split="validation", gold_cache_dir=None)
    with pytest.raises(ValueError, match="task_set must be one of"):
        SciWorldEnv(task_set="l1", gold_cache_dir=None)
    with pytest.raises(ValueError, match=r"split must be one of \('train', 'test'\) with task_set='l0'"):
        SciWorldEnv(task_set="l0", split="dev", gold_cache_dir=None)


def test_the_released_task_set_tests_on_dev_variations_in_its_own_order(cache_dir):
    # task_set="l0" (envs.sciworld_l0): boil's test tasks are its package *dev* variations, in the
    # released set's shuffled order (17, 16, 18, ...), where the package set would give test 21, 22, ...
    e = SciWorldEnv(task_names=["boil"], task_set="l0", split="test", max_variations_per_task=2, gold_cache_dir=cache_dir)
    try:
        assert [s.task_id for s in e.tasks()] == [_tid("boil", 17), _tid("boil", 16)]
        meta = e.tasks()[0].metadata
        assert (meta["split"], meta["task_set"], meta["package_split"]) == ("test", "l0", "dev")
    finally:
        e.close()
    with pytest.raises(ValueError, match="task_set='l0' leaves out the tasks \\['use-thermometer'\\]"):
        SciWorldEnv(task_names=["use-thermometer"], task_set="l0", gold_cache_dir=None)


def test_r3l_task_set_trains_on_17_types_and_tests_on_the_13_others(cache_dir):
    """Issue 37 item 4: R3L's get_sciworld_data.py (percentage 0.5 of the raw variation numbers, for both sets)."""
    from envs.sciworld_r3l import R3L_TRAIN_TASKS

    sets = {}
    for split in ("train", "test"):
        e = SciWorldEnv(task_set="r3l", split=split, gold_cache_dir=cache_dir)
        try:
            sets[split] = [(s.metadata["task_name"], s.metadata["variation"]) for s in e.tasks()]
        finally:
            e.close()
    train_types, test_types = {t for t, _ in sets["train"]}, {t for t, _ in sets["test"]}
    assert len(train_types) == 17 and train_types == set(R3L_TRAIN_TASKS) and len(test_types) == 13
    assert not train_types & test_types and len(train_types | test_types) == 30
    assert (len(sets["train"]), len(sets["test"])) == (2294, 1308)
    assert sorted(v for t, v in sets["train"] if t == "boil") == list(range(15))  # not the package's train list
    assert "freeze" in test_types and "freeze" not in train_types
    assert sum(t == "use-thermometer" for t, _ in sets["train"]) == 270
    assert sum(t == "mendelian-genetics-unknown-plant" for t, _ in sets["test"]) == 240
    with pytest.raises(ValueError, match=r"split must be one of \('train', 'test'\) with task_set='r3l'"):
        SciWorldEnv(task_set="r3l", split="dev", gold_cache_dir=None)
    with pytest.raises(ValueError, match=r"task_set='r3l' split='train' leaves out the tasks \['freeze'\]"):
        SciWorldEnv(task_names=["freeze"], task_set="r3l", split="train", gold_cache_dir=None)


def test_cap_actions_round_robin_over_verbs():
    actions = [f"connect a{i} to b{i}" for i in range(50)] + ["look around", "go to kitchen", "go to hallway"]
    kept, dropped = cap_actions(actions, 6)
    assert dropped == len(actions) - 6 and kept == sorted(kept)
    assert {"look around", "go to hallway", "go to kitchen"} <= set(kept)
    assert cap_actions(actions, None) == (sorted(actions), 0)


def test_lifecycle_topic_family_cached_gold_and_close(cache_dir):
    e = SciWorldEnv(task_names=["4-1"], split="train", max_variations_per_task=1, family_by="topic",
                    gold_cache_dir=cache_dir)
    try:
        (spec,) = e.tasks()
        assert spec.task_id == _tid("find-living-thing", 0) and spec.family == "Classification"
        e.reset(spec.task_id)
        # a JVM that dies mid-episode surfaces as a typed EnvError with context, not a py4j error
        java = e._sw._gateway.java_process
        java.kill()
        java.wait(timeout=10)
        with pytest.raises(SciWorldJVMError, match="server.step failed.*find-living-thing.*look around"):
            e.step("look around")
    finally:
        e.close()
    e.close()  # idempotent
    with pytest.raises(EnvError):
        e.reset(spec.task_id)


def test_templates_render_the_actions_compactly(env):
    env.reset(_tid("find-living-thing", 0))
    assert env.action_prompt() is None  # the default list format: prompts list admissible_actions()
    env.action_format = "templates"
    try:
        compact = env.action_prompt()
        listed = ", ".join(env.admissible_actions())
        assert "open OBJ" in compact and "look around" in compact and "Objects: " in compact
        assert "reset task" not in compact  # blocked actions stay out, as from the list
        assert "kitchen" in compact.split("Objects: ", 1)[1]
        assert len(compact) < len(listed) / 2
    finally:
        env.action_format = "list"
    with pytest.raises(ValueError, match="action_format must be one of"):
        SciWorldEnv(action_format="table")
