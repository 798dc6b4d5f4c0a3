"""AlfWorldEnv on the real alfworld/TextWorld engine, with games made offline by
scripts/make_alfworld_games.py (ALFWorld's own domain, grammar, goal templates and planner expert)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from alfworld_games import load_generator

pytest.importorskip("alfworld", reason="alfworld (TextWorld engine) not installed: pip install alfworld==0.4.2")
pytest.importorskip("fast_downward", reason="fast-downward-textworld not installed (textworld[pddl])")

from envs.alfworld_env import (  # noqa: E402
    FAMILIES,
    NOTHING_HAPPENS,
    AlfWorldEngineError,
    AlfWorldEnv,
)
from envs.base import DependencyMissingError, EnvError, EnvNotResetError, UnknownTaskError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

PICK = "pick_and_place_simple-CellPhone-None-Bed-301/trial_T20190000_000000_000001"
PICK_CLOSED = "pick_and_place_simple-KeyChain-None-Safe-301/trial_T20190000_000000_000002"
LOOK = "look_at_obj_in_light-AlarmClock-None-DeskLamp-301/trial_T20190000_000000_000003"
EXPECTED_TRAIN = {
    PICK: "Pick",
    PICK_CLOSED: "Pick",
    LOOK: "Look",
    "pick_clean_then_place_in_recep-Cloth-None-Cabinet-401/trial_T20190000_000000_000004": "Clean",
    "pick_heat_then_place_in_recep-Egg-None-CounterTop-1/trial_T20190000_000000_000005": "Heat",
    "pick_cool_then_place_in_recep-Potato-None-DiningTable-1/trial_T20190000_000000_000006": "Cool",
    "pick_two_obj_and_place-Book-None-Desk-301/trial_T20190000_000000_000007": "Pick2",
}



@pytest.fixture(scope="module")
def generator():
    return load_generator()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, generator):
    out = tmp_path_factory.mktemp("alfworld_data")
    generator.make_games(out)
    return out


@pytest.fixture(scope="module")
def env(data_dir):
    env = AlfWorldEnv(data_dir=data_dir, split="train")
    yield env
    env.close()


# ----------------------------------------------------------------------------------- tasks


def test_tasks_list_every_game_with_its_family(env, data_dir):
    specs = env.tasks()
    assert {s.task_id: s.family for s in specs} == EXPECTED_TRAIN
    assert [s.task_id for s in specs] == sorted(EXPECTED_TRAIN)
    assert {s.family for s in specs} == set(FAMILIES.values())
    for s in specs:
        md = s.metadata
        assert md["family"] == s.family and FAMILIES[md["task_type"]] == s.family
        assert md["difficulty_source"] == "walkthrough"
        assert s.difficulty == md["plan_length"] == md["walkthrough_len"] == len(env.walkthrough(s.task_id))
        assert md["high_pddl_len"] <= md["walkthrough_len"]
        assert md["goal"] and md["split"] == "train" and Path(md["game_file"]).is_file()
        assert md["num_receptacles"] >= 8
    assert env.task(PICK).metadata["goal"] in ("put a cellphone in bed", "put some cellphone on bed")
    assert env.task(PICK).metadata["high_pddl_len"] == 4  # Goto, Pickup, Goto, Put (ALFRED subgoals)
    # the closed drawer and safe make the second Pick task longer than the first
    assert env.task(PICK_CLOSED).difficulty > env.task(PICK).difficulty

    seen = AlfWorldEnv(data_dir=data_dir, split="valid_seen")
    unseen = AlfWorldEnv(data_dir=data_dir / "json_2.1.1", split="valid_unseen")  # the json_2.1.1 folder works too
    assert [s.family for s in seen.tasks()] == ["Pick"]
    assert sorted(s.family for s in unseen.tasks()) == ["Heat", "Pick2"]


def test_family_filter_max_tasks_and_difficulty_choice(data_dir):
    env = AlfWorldEnv(data_dir=data_dir, families=["Pick", "pick_heat_then_place_in_recep"])
    assert sorted(s.family for s in env.tasks()) == ["Heat", "Pick", "Pick"]
    assert len(AlfWorldEnv(data_dir=data_dir, max_tasks=2).tasks()) == 2
    high = AlfWorldEnv(data_dir=data_dir, difficulty="high_pddl")
    assert high.task(PICK).difficulty == 4.0 and high.task(PICK).metadata["difficulty_source"] == "high_pddl"
    low = AlfWorldEnv(data_dir=data_dir, difficulty="low_actions")  # the test games have no THOR actions
    assert low.task(PICK).metadata["difficulty_source"] == "high_pddl"
    with pytest.raises(ValueError, match="family"):
        AlfWorldEnv(data_dir=data_dir, families=["Slice"])
    with pytest.raises(ValueError, match="split"):
        AlfWorldEnv(data_dir=data_dir, split="test")


def test_unknown_task_and_protocol_misuse(env):
    with pytest.raises(UnknownTaskError, match="no-such-game"):
        env.reset("no-such-game")
    with pytest.raises(UnknownTaskError):
        env.task("no-such-game")
    fresh = AlfWorldEnv(data_dir=env.split_dir.parent.parent, split="train")
    for call in (lambda: fresh.step("look"), fresh.admissible_actions, fresh.state_key):
        with pytest.raises(EnvNotResetError):
            call()
    with pytest.raises(Exception) as exc_info:
        fresh.get_state()
    assert isinstance(exc_info.value, EnvError) and not fresh.supports_snapshot


# ----------------------------------------------------------------------------------- missing data


def test_missing_data_dir_says_to_run_alfworld_download(tmp_path, monkeypatch):
    with pytest.raises(DependencyMissingError, match="alfworld-download"):
        AlfWorldEnv(data_dir=tmp_path / "nowhere")
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "also_nowhere"))
    with pytest.raises(DependencyMissingError, match="alfworld-download") as exc_info:
        AlfWorldEnv()
    assert "also_nowhere" in str(exc_info.value) and "$ALFWORLD_DATA" in str(exc_info.value)
    (tmp_path / "empty" / "json_2.1.1" / "train").mkdir(parents=True)
    with pytest.raises(DependencyMissingError, match="alfworld-download"):
        AlfWorldEnv(data_dir=tmp_path / "empty")


def test_alfworld_data_env_var_is_the_default(data_dir, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(data_dir))
    assert {s.task_id for s in AlfWorldEnv().tasks()} == set(EXPECTED_TRAIN)


# ----------------------------------------------------------------------------------- episodes


def test_reset_shows_the_room_and_the_goal(env):
    argv = list(sys.argv)
    obs, info = env.reset(PICK)
    assert sys.argv == argv  # fast_downward's translator overwrites sys.argv; the env restores it
    goal = env.task(PICK).metadata["goal"]
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert "You are in the middle of a room" in obs and "a bed 1" in obs and "a desk 1" in obs
    assert obs.rstrip().endswith(f"Your task is to: {goal}.")
    assert info["task"] == env.task(PICK) and info["won"] is False and info["invalid_action"] is False
    actions = env.admissible_actions()
    assert actions and actions == sorted(actions)
    assert "go to desk 1" in actions and "go to bed 1" in actions and "look" in actions
    assert "help" not in actions


def test_hand_written_solutions_win(env):
    env.reset(PICK)
    script = ["go to desk 1", "take cellphone 1 from desk 1", "go to bed 1", "move cellphone 1 to bed 1"]
    results = [env.step(a) for a in script]
    assert [r.reward for r in results] == [0.0, 0.0, 0.0, 1.0]
    assert [r.done for r in results] == [False, False, False, True]
    assert results[-1].won and not any(r.invalid_action for r in results)
    assert "You move the cellphone 1 to the bed 1." in results[-1].observation
    assert "On the desk 1, you see" in results[0].observation and "cellphone 1" in results[0].observation
    with pytest.raises(EnvNotResetError):
        env.step("look")
    with pytest.raises(EnvNotResetError):
        env.admissible_actions()
    env.state_key()  # still readable after the end

    env.reset(LOOK)  # the alarm clock is on shelf 2 (alfworld's Demangler numbers instances)
    for a in ["go to shelf 2", "take alarmclock 1 from shelf 2", "go to sidetable 1"]:
        result = env.step(a)
        assert not result.done and not result.invalid_action, a
    final = env.step("use desklamp 1")
    assert final.won and final.reward == 1.0 and final.done and "You turn on the desklamp 1." in final.observation


@pytest.mark.parametrize("split", ["train", "valid_seen", "valid_unseen"])
def test_every_expert_walkthrough_wins(env, data_dir, split):
    env = env if split == "train" else AlfWorldEnv(data_dir=data_dir, split=split)
    for spec in env.tasks():
        env.reset(spec.task_id)
        walkthrough = env.walkthrough(spec.task_id)
        for i, action in enumerate(walkthrough):
            assert action in env.admissible_actions(), (spec.task_id, action)
            result = env.step(action)
            assert result.done == (i == len(walkthrough) - 1), (spec.task_id, i)
        assert result.won and result.reward == 1.0 and not result.info["truncated"], spec.task_id


def test_invalid_actions_are_flagged_not_raised(env):
    env.reset(PICK_CLOSED)
    key, actions = env.state_key(), env.admissible_actions()
    for bad in ["fly to the moon", "", "take keychain 1 from drawer 1", "help", None, 42]:
        result = env.step(bad)
        assert result.invalid_action and result.observation == NOTHING_HAPPENS, bad
        assert result.reward == 0.0 and not result.done and not result.won
        assert env.state_key() == key and env.admissible_actions() == actions
    # case and spacing do not matter; the closed drawer must be opened before taking from it
    ok = env.step("  Go TO   drawer 2 ")
    assert not ok.invalid_action and "The drawer 2 is closed." in ok.observation
    assert env.step("take keychain 1 from drawer 2").invalid_action
    opened = env.step("open drawer 2")
    assert not opened.invalid_action and "keychain 1" in opened.observation
    assert "take keychain 1 from drawer 2" in env.admissible_actions()


def test_max_steps_truncates_and_counts_invalid_steps(data_dir):
    env = AlfWorldEnv(data_dir=data_dir, max_steps=3)
    env.reset(PICK)
    assert not env.step("look").done
    assert not env.step("dance").done
    last = env.step("inventory")
    assert last.done and last.info["truncated"] and not last.won and last.reward == 0.0
    with pytest.raises(EnvNotResetError):
        env.step("look")


def test_help_is_admissible_when_not_hidden(data_dir):
    env = AlfWorldEnv(data_dir=data_dir, hide_help=False)
    env.reset(PICK)
    assert "help" in env.admissible_actions()
    result = env.step("help")
    assert not result.invalid_action and "Available commands" in result.observation


def test_state_key_is_the_world_state(env, data_dir):
    env.reset(PICK)
    start = env.state_key()
    env.step("go to bed 1")
    env.step("go to desk 1")
    via_bed = env.state_key()
    env.reset(PICK)
    assert env.state_key() == start
    env.step("go to desk 1")
    assert env.state_key() == via_bed != start  # same facts, different path
    env.step("take cellphone 1 from desk 1")
    assert env.state_key() != via_bed
    assert env.state_key().startswith(f"alfworld:{PICK}:")

    obs_env = AlfWorldEnv(data_dir=data_dir, state_key_mode="observation")
    obs_env.reset(PICK)
    first = obs_env.state_key()
    obs_env.step("go to desk 1")
    assert obs_env.state_key() != first and ":obs:" in first


def test_expert_plan_from_mid_episode(env):
    env.reset(PICK_CLOSED)
    env.step("go to bed 1")
    plan = env.expert_plan()
    assert plan and plan[0].startswith("go to ")
    for action in plan:
        result = env.step(action)
    assert result.won


def test_engine_errors_are_typed(data_dir, tmp_path):
    bad_root = tmp_path / "bad"
    src = data_dir / "json_2.1.1" / "train" / PICK
    dst = bad_root / "json_2.1.1" / "train" / PICK
    shutil.copytree(src, dst)
    game = json.loads((dst / "game.tw-pddl").read_text())
    game["pddl_problem"] = game["pddl_problem"].replace("(:init", "(:init (", 1)  # unbalanced parentheses
    (dst / "game.tw-pddl").write_text(json.dumps(game))
    env = AlfWorldEnv(data_dir=bad_root)
    argv = list(sys.argv)
    with pytest.raises(AlfWorldEngineError) as exc_info:
        env.reset(PICK)
    assert isinstance(exc_info.value, EnvError) and exc_info.value.task_id == PICK
    assert "game.tw-pddl" in str(exc_info.value) and sys.argv == argv
    with pytest.raises(EnvNotResetError):
        env.step("look")


def test_games_from_an_older_download_are_skipped_with_the_dash_f_hint(data_dir, tmp_path, caplog):
    """alfworld issue #98: ``alfworld-download`` without ``-f`` keeps files that predate the ``solvable`` flag."""
    root = tmp_path / "stale"
    shutil.copytree(data_dir, root)
    stale = root / "json_2.1.1" / "train" / PICK / "game.tw-pddl"
    game = json.loads(stale.read_text())
    del game["solvable"]
    stale.write_text(json.dumps(game))
    with caplog.at_level("WARNING"):
        env = AlfWorldEnv(data_dir=root, split="train")
    try:
        assert env.skipped == {"no_solvable_flag": 1} and PICK not in {t.task_id for t in env.tasks()}
        assert "alfworld-download -f" in caplog.text and "1 games" in caplog.text
    finally:
        env.close()
    all_stale = tmp_path / "all_stale"  # every game stale: the error says -f too (a new folder: indexes are cached)
    shutil.copytree(data_dir, all_stale)
    for file in (all_stale / "json_2.1.1" / "train").rglob("game.tw-pddl"):
        game = json.loads(file.read_text())
        game.pop("solvable", None)
        file.write_text(json.dumps(game))
    with pytest.raises(DependencyMissingError, match="alfworld-download -f"):
        AlfWorldEnv(data_dir=all_stale, split="train")


def test_instances_in_threads(data_dir):
    """The agent loop steps envs from a thread pool; TextWorld's parsers are module-global."""
    from concurrent.futures import ThreadPoolExecutor

    def play(task_id):
        env = AlfWorldEnv(data_dir=data_dir)
        env.reset(task_id)
        for action in env.walkthrough(task_id):
            result = env.step(action)
        return result.won

    argv = list(sys.argv)
    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(play, [PICK, LOOK, PICK])) == [True, True, True]
    assert sys.argv == argv


def test_close_then_reuse(data_dir):
    env = AlfWorldEnv(data_dir=data_dir)
    env.reset(PICK)
    env.close()
    with pytest.raises(EnvNotResetError):
        env.step("look")
    obs, _ = env.reset(PICK)
    assert "Your task is to:" in obs


# ----------------------------------------------------------------------------------- generator


def test_generated_games_follow_the_alfworld_layout(data_dir, generator):
    assert (data_dir / "logic" / "alfred.pddl").is_file() and (data_dir / "logic" / "alfred.twl2").is_file()
    for spec in generator.GAMES:
        folder = data_dir / "json_2.1.1" / spec.split / spec.task_dir / spec.trial_dir
        game = json.loads((folder / "game.tw-pddl").read_text())
        traj = json.loads((folder / "traj_data.json").read_text())
        assert set(game) == {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
        assert game["solvable"] is True and game["walkthrough"]
        assert "UNKNOWN GOAL" not in game["grammar"]
        assert traj["task_type"] == spec.task_type
        assert traj["plan"]["high_pddl"][-1]["discrete_action"]["action"] == "NoOp"
        # the problem is a pure function of the spec: regenerating it gives the same text
        assert (folder / "initial_state.pddl").read_text() == game["pddl_problem"]
        assert generator.problem_pddl(spec, f"plan_{spec.trial_dir}") == game["pddl_problem"]


# ----------------------------------------------------------------------------------- env runtime


def test_episodes_in_parallel_worker_processes_replay_the_serial_trajectories(env, data_dir):
    """Each ALFWorld env in its own worker process (skl_verl.rollout.env_runtime): three episodes at
    a time give exactly what one in-process env gives serially, observation by observation."""
    import asyncio

    from skl_verl.rollout.env_runtime import EnvWorkerClient, guarded_call

    def serial(task_id):
        seen = [env.reset(task_id)[0], env.admissible_actions()]
        for command in env.walkthrough(task_id) + ["look"]:  # an invalid command too, to end on
            result = env.step(command)
            seen += [result.observation, result.reward, result.done, env.state_key()]
            if result.done:
                break
            seen.append(env.admissible_actions())
        return seen

    async def through_worker(client, task_id):
        call = lambda fn, *args: guarded_call(fn, *args, timeout_s=120)  # noqa: E731
        seen = [(await call(client.reset, task_id))[0], await call(client.admissible_actions)]
        for command in env.walkthrough(task_id) + ["look"]:
            result = await call(client.step, command)
            seen += [result.observation, result.reward, result.done, await call(client.state_key)]
            if result.done:
                break
            seen.append(await call(client.admissible_actions))
        return seen

    tasks = sorted(EXPECTED_TRAIN)
    expected = {task_id: serial(task_id) for task_id in tasks}
    clients = [EnvWorkerClient.for_env("alfworld", {"data_dir": str(data_dir), "split": "train"}) for _ in range(3)]

    async def main():
        queue, played = list(tasks), {}

        async def worker(client):
            while queue:
                task_id = queue.pop()
                played[task_id] = await through_worker(client, task_id)

        await asyncio.gather(*(worker(c) for c in clients))
        return played

    try:
        played = asyncio.run(main())
        assert len({c.worker_pid for c in clients}) == 3
    finally:
        for client in clients:
            client.close()
    assert played == expected
    assert all(seen[-3] == 1.0 and seen[-2] is True for seen in played.values())  # every walkthrough won
