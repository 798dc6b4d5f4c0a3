"""WebShopEnv's client protocol, tested against ``MiniWebShopStandIn``.

The real WebShop (Flask site + Lucene index + product data from Google Drive) cannot run here, so
these tests serve a tiny STAND-IN on 127.0.0.1: three products, the URL scheme and the page
structure (element ids, classes, forms, radio ``data-url``s, the done page's reward block) of
WebShop's ``web_agent_site`` templates, and a simplified reward. They prove the client's
protocol and parsing, not WebShop's search or reward.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from envs.base import DependencyMissingError, EnvNotResetError, UnknownTaskError
from envs.webshop import server
from envs.webshop.env import GOALS_ENDPOINT, WebShopEnv, history_view
from envs.webshop.pages import WebShopServerError, parse_action, parse_page
from webshop_standin import MiniWebShopStandIn, make_goals  # the one copy, shared with the recipe smokes


@pytest.fixture(scope="module")
def standin():
    s = MiniWebShopStandIn()
    yield s
    s.close()


@pytest.fixture
def env(standin):
    return WebShopEnv(server_url=standin.url, split="all", max_goals=12)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------- construction


def test_unreachable_server_is_a_clear_dependency_error(monkeypatch):
    monkeypatch.delenv("WEBSHOP_GOALS_FILE", raising=False)
    with pytest.raises(DependencyMissingError, match="no WebShop server reachable"):
        WebShopEnv(server_url=f"http://127.0.0.1:{_free_port()}", timeout_s=5)


def test_server_without_goal_table_needs_a_goals_file(tmp_path, monkeypatch):
    monkeypatch.delenv("WEBSHOP_GOALS_FILE", raising=False)
    bare = MiniWebShopStandIn(n_goals=6, serve_goals=False)
    try:
        with pytest.raises(DependencyMissingError, match="serves no goal table"):
            WebShopEnv(server_url=bare.url, split="all")
        goals_file = tmp_path / "goals.json"
        goals_file.write_text(json.dumps(make_goals(6)))  # a bare list works too
        env = WebShopEnv(server_url=bare.url, split="all", goals_file=goals_file)
        assert [t.task_id for t in env.tasks()] == [f"webshop-{i}" for i in range(6)]
        monkeypatch.setenv("WEBSHOP_GOALS_FILE", str(goals_file))
        assert len(WebShopEnv(server_url=bare.url, split="all").tasks()) == 6
    finally:
        bare.close()


def test_server_url_from_environment(standin, monkeypatch):
    monkeypatch.setenv("WEBSHOP_URL", standin.url)
    env = WebShopEnv(split="test", max_goals=2)
    assert env.server_url == standin.url


def test_a_list_of_servers_spreads_env_instances_over_them(standin):
    other = MiniWebShopStandIn(n_goals=1600)
    try:
        picked = {WebShopEnv(server_url=f"{standin.url}, {other.url}", split="test", max_goals=1).server_url
                  for _ in range(40)}
        assert picked == {standin.url, other.url}
    finally:
        other.close()


def test_splits_follow_the_conventions(standin):
    def ids(**kw):
        return [t.metadata["goal_index"] for t in WebShopEnv(server_url=standin.url, **kw).tasks()]

    assert ids(split="test") == list(range(500))
    assert ids(split="dev") == list(range(500, 1500))
    assert ids(split="train") == list(range(1500, 1600))
    assert ids(split="train", split_convention="verl_agent") == list(range(500, 1600))
    assert ids(split="test", max_goals=3) == [0, 1, 2]
    with pytest.raises(ValueError):
        WebShopEnv(server_url=standin.url, split="dev", split_convention="verl_agent")
    with pytest.raises(ValueError):
        WebShopEnv(server_url=standin.url, split="validation")


def test_r3l_split_is_goals_0_to_4095_for_training_and_the_next_100_for_testing():
    """Issue 37 item 4: R3L's get_webshop_data.py (train [:4096], test [4096:4196] of the session ints)."""
    big = MiniWebShopStandIn(n_goals=4300)
    try:
        def ids(split):
            return [t.metadata["goal_index"] for t in WebShopEnv(server_url=big.url, split=split, split_convention="r3l").tasks()]

        train, test = ids("train"), ids("test")
        assert train == list(range(4096)) and (train[0], train[-1]) == (0, 4095)
        assert test == list(range(4096, 4196)) and (test[0], test[-1], len(test)) == (4096, 4195, 100)
        assert set(range(500)) <= set(train)  # WebShop's usual test goals are R3L training goals
        with pytest.raises(ValueError, match="split must be 'all' or one of"):
            WebShopEnv(server_url=big.url, split="dev", split_convention="r3l")
    finally:
        big.close()


def test_difficulty_is_required_attributes_plus_options(env, standin):
    for spec in env.tasks():
        goal = standin.goals[spec.metadata["goal_index"]]
        assert spec.difficulty == len(goal["attributes"]) + len(goal["goal_options"])
        assert spec.family == goal["category"]
        assert spec.metadata["n_options"] == len(goal["goal_options"])
        assert "asin" not in spec.metadata
    assert {s.difficulty for s in env.tasks()} == {1.0, 2.0, 3.0, 4.0}
    by_query = WebShopEnv(server_url=standin.url, split="all", max_goals=3, family_by="query")
    assert [s.family for s in by_query.tasks()] == ["shampoo", "headphones", "coffee table"]


# ---------------------------------------------------------------------- episodes


def _buy(env, task_id, search, asin, options):
    obs, info = env.reset(task_id)
    assert info["instruction_text"] and info["instruction_text"] in obs
    env.step(f"search[{search}]")
    env.step(f"click[{asin}]")
    for value in options:
        assert not env.step(f"click[{value}]").invalid_action
    return env.step("click[Buy Now]")


def test_search_click_options_and_buy_wins(env, standin):
    goal = standin.goals[4]  # headphones, 2 attributes, color + style
    obs, info = env.reset("webshop-4")
    assert obs.startswith("WebShop [SEP] Instruction: [SEP] i need headphones")
    assert env.admissible_actions() == ["search[<query>]"]  # the Search button itself is not clickable

    result = env.step("search[Wireless Headphones]")
    assert not result.invalid_action and not result.done and result.reward == 0.0
    assert "B000000BBB [SEP] Wireless Bluetooth Headphones" in result.observation
    assert "electronics" not in result.observation  # commented-out HTML is not text
    actions = env.admissible_actions()
    assert {"click[back to search]", "click[next >]", "click[b000000bbb]"} <= set(actions)
    assert not any(a.startswith("search[") for a in actions)

    result = env.step("click[B000000BBB]")
    assert "Buy Now" in result.observation and "var options" not in result.observation
    assert {"click[black]", "click[white]", "click[over-ear]", "click[on-ear]", "click[buy now]",
            "click[description]", "click[< prev]"} <= set(env.admissible_actions())
    for value in goal["goal_options"].values():
        assert not env.step(f"click[{value}]").invalid_action
    result = env.step("click[Buy Now]")
    assert result.done and result.won and result.reward == 1.0
    assert result.info["task_score"] == 1.0 and result.info["purchased_asin"] == "B000000BBB"
    assert "Thank you for shopping" in result.observation
    assert "goal-attrs" not in result.observation and "noise cancelling" not in result.observation  # hidden block
    assert any(m == "POST" and p.startswith("/done/") for m, p in standin.requests)  # Buy Now submits its form
    with pytest.raises(EnvNotResetError):
        env.step("click[back to search]")
    with pytest.raises(EnvNotResetError):
        env.admissible_actions()


def test_wrong_purchase_is_partial_reward_not_won(env):
    result = _buy(env, "webshop-4", "oak coffee table", "b000000ccc", [])
    assert result.done and not result.won and 0.0 <= result.reward < 1.0


def test_sub_pages_and_navigation(env):
    env.reset("webshop-0")
    env.step("search[shampoo]")
    env.step("click[b000000aaa]")
    result = env.step("click[Features]")
    assert "paraben free; dry hair" in result.observation
    result = env.step("click[< Prev]")
    assert "click[buy now]" in env.admissible_actions()
    result = env.step("click[back to search]")
    assert env.admissible_actions() == ["search[<query>]"]
    # like WebAgentTextEnv, a search is carried out from any page
    env.step("search[coffee table]")
    env.step("click[b000000ccc]")
    result = env.step("search[shampoo]")
    assert not result.invalid_action and "B000000AAA" in result.observation


def test_invalid_actions_are_flagged_and_change_nothing(env):
    env.reset("webshop-1")
    env.step("search[headphones]")
    key = env.state_key()
    for bad in ("buy the headphones", "click[nothing here]", "search[   ]", "click[search]", "scroll[down]"):
        result = env.step(bad)
        assert result.invalid_action and not result.done and result.reward == 0.0, bad
        assert result.observation.startswith("Invalid action:")
        assert env.state_key() == key


def test_truncation(standin):
    env = WebShopEnv(server_url=standin.url, split="all", max_goals=3, max_steps=3)
    env.reset("webshop-2")
    assert not env.step("search[table]").done
    assert not env.step("click[nope]").done  # invalid actions count as steps
    result = env.step("click[b000000ccc]")
    assert result.done and result.info["truncated"] and not result.won and result.reward == 0.0


def test_unknown_task_and_not_reset(env):
    with pytest.raises(UnknownTaskError):
        env.reset("webshop-99999")
    with pytest.raises(EnvNotResetError):
        env.step("search[x]")
    with pytest.raises(EnvNotResetError):
        env.state_key()
    with pytest.raises(EnvNotResetError):
        env.get_state()


def test_state_key_sees_chosen_options_and_sessions_are_fresh(env, standin):
    env.reset("webshop-4")
    env.step("search[headphones]")
    env.step("click[b000000bbb]")
    plain = env.state_key()
    env.step("click[white]")
    white = env.state_key()
    assert white != plain  # same page text, different chosen options
    first_session = env.get_state()["session_id"]
    env.reset("webshop-4")
    env.step("search[headphones]")
    env.step("click[b000000bbb]")
    assert env.state_key() == plain  # the session id is not part of the key
    assert env.get_state()["session_id"] != first_session and first_session.endswith("_fixed_4")


def test_snapshot_round_trip_and_into_a_fresh_env(env, standin):
    env.reset("webshop-4")
    env.step("search[headphones]")
    env.step("click[b000000bbb]")
    env.step("click[white]")
    state = env.get_state()
    key = env.state_key()
    json.dumps(state)  # plain data
    bad = _buy(env, "webshop-4", "shampoo", "b000000aaa", [])
    assert bad.done and not bad.won
    env.set_state(state)
    assert env.state_key() == key and not env.get_state()["done"]
    assert env.step("click[on-ear]").info["steps"] == 4
    other = WebShopEnv(server_url=standin.url, split="all", max_goals=12)
    other.set_state(state)
    assert other.state_key() == key
    goal = standin.goals[4]
    for value in goal["goal_options"].values():
        other.step(f"click[{value}]")
    assert other.step("click[buy now]").won
    with pytest.raises(ValueError):
        other.set_state({"env": "frozenlake"})


def test_server_failure_mid_episode_is_a_typed_error():
    s = MiniWebShopStandIn(n_goals=3)
    env = WebShopEnv(server_url=s.url, split="all", timeout_s=5)
    env.reset("webshop-0")
    s.close()
    with pytest.raises(WebShopServerError, match="webshop-0"):
        env.step("search[shampoo]")


def test_http_error_is_a_typed_error(env, standin):
    env.reset("webshop-0")
    env._page.clickables["broken"] = type(env._page.search_target)("GET", standin.url + "/item_page/x")
    with pytest.raises(WebShopServerError, match="HTTP 500"):
        env.step("click[broken]")


# ---------------------------------------------------------------------- parsing units


def test_parse_action():
    assert parse_action("search[ Red  Shoes ]") == ("search", "red shoes")
    assert parse_action(" Click[Buy Now] ") == ("click", "buy now")
    assert parse_action("click[< Prev]") == ("click", "< prev")
    assert parse_action("buy now") is None and parse_action("click") is None
    # only ASCII case folds: the long s and the Kelvin sign are not "s" and "k"
    assert parse_action("\u017fearch[shoes]") is None and parse_action("clic\u212a[buy now]") is None
    assert parse_action("SEARCH[shoes]") == ("search", "shoes")


def test_parse_page_reads_the_real_template_structure():
    page_html = """<html><head><title>t</title><script>x()</script></head><body>
    <div id="instruction-text" class="text-center"><h4>Instruction: <br>i want a &amp; b</h4></div>
    <form method="post" action="/s_fixed_1"><button type="submit" class="btn btn-success">Back to Search</button></form>
    <h4 class="product-asin"><a class="product-link" href="/item_page/s_fixed_1/B1/%5B%27a%27%5D/1/%7B%7D">B1</a></h5>
    <input type="radio" name="color" value="Navy Blue" data-url="/item_page/s_fixed_1/B1/x/1/%7B%22color%22%3A%22navy%22%7D">
    <label>Navy Blue</label><p hidden>secret</p></body></html>"""
    page = parse_page(page_html, "http://h:1/search_results/s_fixed_1/x/1")
    assert page.instruction == "i want a & b"
    assert page.text == "Instruction: [SEP] i want a & b [SEP] Back to Search [SEP] B1 [SEP] Navy Blue"
    assert page.clickables["back to search"].method == "POST"
    assert page.clickables["back to search"].url == "http://h:1/s_fixed_1"
    assert page.clickables["b1"].url == "http://h:1/item_page/s_fixed_1/B1/%5B%27a%27%5D/1/%7B%7D"
    assert page.clickables["navy blue"].method == "GET"
    assert not page.has_search_bar and page.reward is None


# ---------------------------------------------------------------------- launcher

FAKE_SITE = {
    "web_agent_site/__init__.py": "",
    "web_agent_site/engine/__init__.py": "",
    "web_agent_site/utils.py": "DEFAULT_FILE_PATH = 'data/items_shuffle_1000.json'\n",
    "web_agent_site/app.py": (
        "class _App:\n"
        "    rules = []\n"
        "    view_functions = {}\n"
        "    def response_class(self, body, mimetype=None):\n"
        "        return (body, mimetype)\n"
        "    def add_url_rule(self, rule, endpoint, view):\n"
        "        self.rules.append((rule, endpoint, view()))\n"
        "    def run(self, **kw):\n"
        "        raise SystemExit('run should not be called with --no-serve')\n"
        "app = _App()\n"
        "search_engine = None\n"
    ),
    "web_agent_site/engine/engine.py": (
        "import random\n"
        "CALLS = []\n"
        "def load_products(filepath, num_products=None, human_goals=True):\n"
        "    CALLS.append(('load', filepath, num_products, human_goals))\n"
        "    products = [{'asin': f'A{i}'} for i in range(5)]\n"
        "    return products, {p['asin']: p for p in products}, {p['asin']: random.random() for p in products}, {}\n"
        "def init_search_engine(num_products=None):\n"
        "    CALLS.append(('index', num_products))\n"
        "    return 'searcher'\n"
    ),
    "web_agent_site/engine/goal.py": (
        "def get_goals(all_products, product_prices, human_goals=True):\n"
        "    assert human_goals is False\n"
        "    return [{'asin': p['asin'], 'category': 'beauty', 'query': 'q', 'product_category': 'a › b',\n"
        "             'instruction_text': f'goal {p[\"asin\"]}', 'attributes': ['x'] * (i + 1),\n"
        "             'goal_options': {'size': 's'} if i % 2 else {}, 'price_upper': 10.0, 'weight': 1}\n"
        "            for i, p in enumerate(all_products)]\n"
    ),
}


def test_launcher_builds_the_paper_setting_and_exports_goals(tmp_path, standin):
    for rel, text in FAKE_SITE.items():
        path = tmp_path / "fake_webshop" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    launcher = tmp_path / "fake_webshop" / "skl_webshop_server.py"
    subprocess.run([sys.executable, "-m", "envs.webshop", "--write-launcher", str(launcher)], check=True,
                   capture_output=True)
    assert launcher.read_text() == Path(server.__file__).read_text()
    exported = tmp_path / "goals.json"
    probe = (
        "import sys, runpy; sys.argv = ['x', '--no-serve', '--export-goals', sys.argv[1]];\n"
        "ns = runpy.run_path('skl_webshop_server.py', run_name='__main__')\n"
        "import web_agent_site.app as site, web_agent_site.engine.engine as eng\n"
        "print(eng.CALLS); print(site.app.rules[0][0]); print(site.search_engine, len(site.goals))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(exported)], cwd=tmp_path / "fake_webshop",
                         capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "[('load', 'data/items_shuffle_1000.json', 1000, False), ('index', 1000)]"
    assert lines[1] == GOALS_ENDPOINT and lines[2] == "searcher 5"
    payload = json.loads(exported.read_text())
    assert payload["num_products"] == 1000 and payload["human_goals"] is False
    # WebShop's goal order: built in product order, then random.seed(233); random.shuffle(goals)
    expected = [f"A{i}" for i in range(5)]
    random.Random(233).shuffle(expected)
    assert [g["asin"] for g in payload["goals"]] == expected
    assert [g["index"] for g in payload["goals"]] == list(range(5))
    env = WebShopEnv(server_url=standin.url, split="all", goals_file=exported)
    assert [s.difficulty for s in env.tasks()] == [
        len(g["attributes"]) + len(g["goal_options"]) for g in payload["goals"]
    ]


def test_all_products_from_the_1000_product_file_stops_the_launcher():
    """WebShop's utils.py points at items_shuffle_1000.json unless edited: "all" would silently be 1,000."""
    with pytest.raises(SystemExit, match="every product .* holds 1000; point web_agent_site/utils.py"):
        server.check_product_count(None, 1000, "data/items_shuffle_1000.json")
    server.check_product_count(None, 1_181_436, "data/items_shuffle.json")
    server.check_product_count(1000, 1000, "data/items_shuffle_1000.json")


STOCK_SESSIONS = """
import logging
user_sessions = {}
printed = []
class _App:
    view_functions = {}
app = _App()
def print(*args):  # the stock app's `from rich import print`
    printed.append(len(args[0]))
def index(session_id):
    user_sessions.setdefault(session_id, {'goal': session_id, 'done': False})
    logging.getLogger(session_id)  # every page of the stock app does this
    return 'page'
def done(session_id, asin, options):
    user_sessions[session_id]['done'] = True
    print(user_sessions)
    del logging.root.manager.loggerDict[session_id]
    return 'done page'
app.view_functions.update(index=index, done=done)
"""


def test_launcher_bounds_the_sites_session_state():
    import logging
    import types

    site = types.ModuleType("fake_app")
    exec(STOCK_SESSIONS, site.__dict__)
    now = [0.0]
    server.bound_session_state(site, keep_finished=3, idle_ttl_s=100.0, clock=lambda: now[0])
    views = site.app.view_functions
    for i in range(10):
        assert views["index"](session_id=f"s{i}") == "page"
    for i in range(8):
        assert views["done"](session_id=f"s{i}", asin="A", options="{}") == "done page"
    assert site.printed == []  # no print of every session per purchase
    assert sorted(site.user_sessions) == ["s5", "s6", "s7", "s8", "s9"]
    assert "s0" not in logging.root.manager.loggerDict and "s8" in logging.root.manager.loggerDict
    now[0] = 50.0
    views["index"](session_id="s9")
    now[0] = 120.0  # s8 idle for 120 s (an episode cut short by its step limit), s9 for 70 s
    views["index"](session_id="s10")
    views["done"](session_id="s10", asin="A", options="{}")
    assert sorted(site.user_sessions) == ["s10", "s9"]
    assert "s8" not in logging.root.manager.loggerDict


def test_the_setup_script_is_valid_bash_and_stops_at_its_first_failed_check(tmp_path):
    script = Path(__file__).resolve().parents[2] / "scripts" / "setup_webshop.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    # the Python check comes first: a wrong Python stops the script before anything is cloned or installed
    result = subprocess.run(["bash", str(script), "--dir", str(tmp_path / "ws"), "--python", sys.executable],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "need Python 3.8" in result.stderr and not (tmp_path / "ws").exists()
    bad = subprocess.run(["bash", str(script), "--data", "some"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--data must be small or all" in bad.stderr


def test_history_view_drops_the_instruction_and_cuts_a_long_page_as_the_released_memory_does():
    results = ["Back to Search", "Page 1 (Total results: 7)", "Next >"] + [f"B00000000{i} [SEP] Item {i} [SEP] $1{i}.0"
                                                                           for i in range(7)]
    page = " [SEP] ".join(["WebShop", "Instruction:", "i need a red lamp, price lower than 30.00 dollars", *results])
    fragments = " [SEP] ".join(results).split(" [SEP] ")
    assert len(fragments) == 24
    assert history_view(page, 15) == " [SEP] ".join(fragments[:15]) + " ... (9 more)"
    assert history_view(page, 30) == " [SEP] ".join(fragments)  # short enough: only the instruction goes
    # an invalid action's note comes before the page, in the instruction's fragment: the note stays
    invalid = "Invalid action: 'x' is not clickable on this page.\n\n" + page.removeprefix("WebShop [SEP] ")
    assert history_view(invalid, 2) == "Invalid action: 'x' is not clickable on this page. [SEP] Back to Search ... (23 more)"
    assert history_view("Thank you for shopping with us! [SEP] Your score [SEP] 1.0", 15) == \
        "Thank you for shopping with us! [SEP] Your score [SEP] 1.0"  # a page without an instruction is kept


def test_history_items_puts_the_short_form_beside_the_page(standin):
    env = WebShopEnv(server_url=standin.url, split="all", history_items=3)
    env.reset(env.tasks()[0].task_id)
    step = env.step("search[coffee table]")
    assert step.info["history_observation"] == history_view(step.observation, 3)
    assert "Instruction:" in step.observation and "Instruction:" not in step.info["history_observation"]
    plain = WebShopEnv(server_url=standin.url, split="all")
    plain.reset(plain.tasks()[0].task_id)
    assert "history_observation" not in plain.step("search[coffee table]").info  # None: pages as served
    with pytest.raises(ValueError, match="history_items must be a positive int or None"):
        WebShopEnv(server_url=standin.url, history_items=0)
