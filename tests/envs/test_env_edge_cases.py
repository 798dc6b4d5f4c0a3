"""Misused envs raise typed errors and stay as they were; odd actions are invalid actions."""

import copy
import http.client

import pytest

from envs.base import InvalidSnapshotError, UnknownTaskError
from envs.chess.env import ChessPuzzlesEnv
from envs.frozenlake import FrozenLakeEnv
from envs.webshop.env import MAX_QUERY_CHARS
from envs.webshop.pages import WebShopServerError
from test_webshop_env import env as webshop, standin  # noqa: F401 - fixtures


def assert_unchanged(env, before, snapshot):
    assert env.get_state() == before
    # and the env still plays: restoring the saved snapshot works after the rejection
    env.set_state(snapshot)
    assert env.get_state() == snapshot


FROZENLAKE_BAD = {
    "missing key": lambda s: {k: v for k, v in s.items() if k != "steps"},
    "steps as text": lambda s: {**s, "steps": "3"},
    "steps as bool": lambda s: {**s, "steps": True},
    "negative steps": lambda s: {**s, "steps": -1},
    "done as int": lambda s: {**s, "done": 1},
    "position off the map": lambda s: {**s, "position": [9, 0]},
    "position as text": lambda s: {**s, "position": "0,1"},
    "position of floats": lambda s: {**s, "position": [0.0, 1.0]},
    "slip of one value": lambda s: {**s, "slip": [0.5]},
    "rng of another kind": lambda s: {**s, "rng_state": {**s["rng_state"], "bit_generator": "seed"}},
    "rng state damaged": lambda s: {**s, "rng_state": {**s["rng_state"], "state": {"state": "x", "inc": 1}}},
    "not a dict": lambda s: [s],
    "other env": lambda s: {**s, "env": "chess_puzzles"},
}


@pytest.mark.parametrize("damage", list(FROZENLAKE_BAD.values()), ids=list(FROZENLAKE_BAD))
def test_frozenlake_rejects_a_bad_snapshot_and_keeps_its_state(damage):
    env = FrozenLakeEnv(size=4, num_tasks=2, seed=0, slip=(1 / 3, 1 / 3))
    env.reset(env.tasks()[0].task_id)
    snapshot = env.get_state()
    env.step("right")
    before = env.get_state()
    with pytest.raises(InvalidSnapshotError, match="frozenlake: "):
        env.set_state(damage(copy.deepcopy(snapshot)))
    assert_unchanged(env, before, snapshot)


def test_frozenlake_unknown_task_in_a_snapshot_is_an_unknown_task():
    env = FrozenLakeEnv(size=4, num_tasks=2, seed=0)
    env.reset(env.tasks()[0].task_id)
    before = env.get_state()
    with pytest.raises(UnknownTaskError):
        env.set_state({**before, "task_id": "frozenlake-s4-9999"})
    assert env.get_state() == before


@pytest.fixture
def chess_env():
    env = ChessPuzzlesEnv()
    env.reset(env.tasks()[0].task_id)
    return env


@pytest.mark.parametrize("task_id", [["x"], {"id": 1}, None, 7])
def test_chess_reset_with_a_non_string_task_is_an_unknown_task(chess_env, task_id):
    before = chess_env.get_state()
    with pytest.raises(UnknownTaskError, match="unknown task id"):
        chess_env.reset(task_id)
    assert chess_env.get_state() == before


CHESS_BAD = {
    "index past the line": lambda s: {**s, "index": 7},
    "odd index": lambda s: {**s, "index": 1},
    "index without its moves": lambda s: {**s, "index": 2},
    "index as text": lambda s: {**s, "index": "0"},
    "won but not done": lambda s: {**s, "won": True},
    "illegal move": lambda s: {**s, "moves": [*s["moves"], "a1a8"]},
    "moves not text": lambda s: {**s, "moves": [1, 2]},
    "another root": lambda s: {**s, "root_fen": "8/8/8/8/8/8/8/K6k w - - 0 1"},
    "missing key": lambda s: {k: v for k, v in s.items() if k != "moves"},
}


@pytest.mark.parametrize("damage", list(CHESS_BAD.values()), ids=list(CHESS_BAD))
def test_chess_rejects_a_bad_snapshot_now_not_at_the_next_step(chess_env, damage):
    snapshot = chess_env.get_state()
    before = chess_env.get_state()
    with pytest.raises(InvalidSnapshotError, match="chess"):
        chess_env.set_state(damage(copy.deepcopy(snapshot)))
    assert_unchanged(chess_env, before, snapshot)
    assert chess_env.step(chess_env.admissible_actions()[0]).observation  # still plays


WEBSHOP_BAD = {
    "missing key": lambda s: {k: v for k, v in s.items() if k != "url"},
    "steps as text": lambda s: {**s, "steps": "x"},
    "url of another site": lambda s: {**s, "url": "http://127.0.0.1:1/item"},
    "url not text": lambda s: {**s, "url": None},
    "reward as text": lambda s: {**s, "reward": "1"},
    "other server": lambda s: {**s, "server_url": "http://elsewhere:3000"},
}


@pytest.mark.parametrize("damage", list(WEBSHOP_BAD.values()), ids=list(WEBSHOP_BAD))
def test_webshop_rejects_a_bad_snapshot_and_keeps_its_state(webshop, damage):
    webshop.reset("webshop-0")
    webshop.step("search[shampoo]")
    snapshot = webshop.get_state()
    webshop.step("click[b000000aaa]")
    before = webshop.get_state()
    with pytest.raises(InvalidSnapshotError, match="webshop"):
        webshop.set_state(damage(copy.deepcopy(snapshot)))
    assert_unchanged(webshop, before, snapshot)


def test_webshop_snapshot_whose_page_fails_to_load_changes_nothing(webshop, standin):
    webshop.reset("webshop-0")
    before = webshop.get_state()
    with pytest.raises(WebShopServerError, match="HTTP 500"):
        webshop.set_state({**before, "url": standin.url + "/item_page/x"})
    assert webshop.get_state() == before


@pytest.mark.parametrize(
    "action,problem",
    [
        ("search[\ud800 shoes]", "not text"),
        ("search[" + "shoes " * MAX_QUERY_CHARS + "]", f"longer than {MAX_QUERY_CHARS}"),
        ("click[\udfff]", "not clickable"),
    ],
)
def test_webshop_odd_text_is_an_invalid_action(webshop, action, problem):
    webshop.reset("webshop-0")
    before = webshop.get_state()
    result = webshop.step(action)
    assert result.info["invalid_action"] and problem in result.observation and not result.done
    assert webshop.get_state()["url"] == before["url"]


def test_webshop_unreadable_http_answer_is_a_typed_error(webshop, monkeypatch):
    webshop.reset("webshop-0")

    def overlong_header(*args, **kwargs):
        raise http.client.LineTooLong("header line")

    monkeypatch.setattr(webshop._opener, "open", overlong_header)
    with pytest.raises(WebShopServerError, match="LineTooLong"):
        webshop.step("search[shampoo]")
