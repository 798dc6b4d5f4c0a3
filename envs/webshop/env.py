"""WebShop (Yao et al., 2022) as a text environment: a client of a running WebShop web server.

The real WebShop (``princeton-nlp/WebShop``) is a Flask site (``web_agent_site/app.py``) over a
pyserini/Lucene search index and a product set downloaded from Google Drive; it is not on PyPI in
usable form (the ``webshop`` 0.1.0 sdist there is a stub that imports the missing
``web_agent_site`` package and ships no data), so it cannot be a dependency of this package.
This env talks HTTP to a server started separately (``docs/webshop_setup.md``): the server URL is
the ``server_url`` argument, else the ``WEBSHOP_URL`` environment variable, else
``http://127.0.0.1:3000`` (the site's own default). Either may list several comma-separated servers
built the same way: each env instance keeps one of them, at random, for its lifetime. An unreachable server raises
``DependencyMissingError`` in the constructor.

Protocol
--------
Actions are WebShop's text actions, ``search[<query>]`` and ``click[<button>]``, with the semantics
of WebShop's own text env (``web_agent_site/envs/web_agent_text_env.py``, ``WebAgentTextEnv``):

* the action argument is lower-cased;
* ``click[x]`` must name a clickable of the current page: a button (``Back to Search``,
  ``< Prev``, ``Next >``, ``Description``, ``Features``, ``Reviews``, ``Attributes``, ``Buy Now``),
  a product link (its ASIN) or a product option (a radio input's value); ``click[search]`` is not
  one. Buttons submit their form (POST to its ``action``), product links and options load their
  ``href`` / ``data-url`` (GET), exactly what a browser does on the Flask site;
* ``search[q]`` posts ``search_query=q`` to the session's search form (``/<session_id>``) and
  follows the redirect to the results page. Like ``WebAgentTextEnv`` it is carried out from any
  page, but ``admissible_actions()`` lists ``search[<query>]`` only on pages that show the search
  box (as verl-agent's prompts do);
* anything else (unparseable text, an unknown clickable, an empty query) is an invalid action:
  ``info["invalid_action"] = True``, reward 0, the page is unchanged and the observation is a short
  note followed by the current page. ``WebAgentTextEnv`` silently does nothing instead.

Observations are WebShop's ``text`` observation mode (the one ReAct and verl-agent use): the page's
visible text fragments, stripped, joined with ``" [SEP] "``; fragments in ``<head>``, ``<script>``,
``<style>``, HTML comments and elements hidden with ``display:none`` or ``hidden`` are left out,
and so are empty fragments (``WebAgentTextEnv`` keeps empty ones and the done page's hidden goal
block).

``history_items`` (None by default) gives a step's page a shorter form for prompt histories,
``info["history_observation"]``, as the SkillRise and LaMer authors' WebShop memory shows past pages: the
fragments before and including the goal's instruction dropped, the rest cut to the first ``history_items``
fragments and a count of the others (``history_view``).

Clicking ``Buy Now`` ends the episode: the reward is WebShop's own reward, in [0, 1], read from the
done page (``<h3 id="reward">... <pre>reward</pre>``); ``won`` is ``reward == 1.0`` (verl-agent's
success criterion); every other step has reward 0. After ``max_steps`` (default 15, verl-agent's
WebShop setting) steps without a purchase the episode ends with reward 0, ``won=False`` and
``info["truncated"]=True``. Every call to ``step``, invalid ones included, counts as a step.

Tasks
-----
A task is a WebShop goal index ``i``; the site serves goal ``i`` to any session id that contains
``fixed`` and ends in ``_i`` (``fixed_{i}`` in WebShop's own code). Each episode uses a fresh
session id ``skl<token>_fixed_{i}`` so that concurrent episodes never share server-side state.
Task ids are ``"webshop-{i}"``. Splits over the goal list (in the site's order: goals are shuffled
with ``random.seed(233)`` when the site starts):

* ``split_convention="webshop"`` (default; WebShop's ``baseline_models/env.py``): ``test`` = goals
  0-499, ``dev`` = 500-1499, ``train`` = 1500 to the end;
* ``split_convention="verl_agent"`` (verl-agent / GiGPO's WebShop env): ``test`` = 0-499,
  ``train`` = 500 to the end, no ``dev``;
* ``split_convention="r3l"`` (R3L's ``examples/R3L/webshop/get_webshop_data.py``, where the paper reruns SKL-SD):
  ``train`` = goals 0-4095, ``test`` = 4096-4195 (100 goals), no ``dev``. Its train holds WebShop's usual
  test goals 0-499;
* ``split="all"``: every goal. ``max_goals=N`` keeps the first N goals of the split.

The SkillRise paper uses the 1,000-product version with synthetic goals and evaluates on 128
held-out instances (from the test goals).

``site`` (None by default: anything) names how the server must have been built: a name of
``envs.webshop.server.SITES`` or a dict of some of ``num_products`` (None: all), ``human_goals``, ``seed``
(prices and price limits) and ``shuffle_seed`` (goal order). The goal table's build settings are checked
against it at construction, so a run cannot silently play another goal list: the authors' SkillRise
trains on ``skillrise_train`` (seed 0) and validates on ``skillrise_val`` (seed 1000), two servers.

Goal data (difficulty, family)
------------------------------
Difficulty and family need each goal's attributes, options and category, which the stock site
only shows after a purchase. They come from a goals table, in this order of preference:

1. ``goals_file`` (or the ``WEBSHOP_GOALS_FILE`` environment variable): a JSON file, either a list
   of goals in goal-index order or ``{"goals": [...]}``;
2. the server's ``GET /skl_api/goals`` endpoint, served by the launcher ``envs/webshop/server.py``
   (copied into the WebShop checkout with ``python -m envs.webshop --write-launcher PATH``, see
   ``docs/webshop_setup.md``), which starts the stock site with the paper's setting (1,000
   products, synthetic goals) and also exports the same table with ``--export-goals``.

Without either, the constructor raises ``DependencyMissingError``. Each goal needs
``attributes`` (list) and ``goal_options`` (dict for synthetic goals, list for human goals); the
launcher also writes ``category``, ``query``, ``product_category``, ``instruction_text``,
``price_upper``, ``asin`` and ``weight``.

* ``difficulty`` = ``len(attributes) + len(goal_options)``: the number of required attributes
  plus the number of required options, the paper's ordering key for WebShop sequences (price is
  required by every goal and is not counted);
* ``family`` = the goal's ``category`` (default; the paper groups WebShop tasks by product
  category: beauty, electronics, fashion, food, furniture), or ``query`` / ``product_category``
  with ``family_by``;
* ``metadata``: ``goal_index``, ``category``, ``query``, ``product_category``,
  ``instruction_text``, ``attributes``, ``goal_options``, ``n_attributes``, ``n_options``,
  ``price_upper``, ``split``, ``max_steps``. (The target ASIN is deliberately not copied into the
  metadata; ``query`` is the search phrase the product was scraped with, so keep metadata out of
  prompts.)

Snapshot
--------
The Flask site keeps the whole page state in the URL (keywords, page, ASIN, chosen options); the
server-side session only holds the goal. ``get_state()`` is therefore a plain dict with the
current URL and the episode counters, and ``set_state`` reloads that URL (on the same server,
which must still be running: a restarted server has forgotten the session).

State key: SHA-256 of the task id, the current URL path without the session id (it holds the
chosen options, which the text observation does not show) and the page text.

Errors: HTTP failures during an episode (connection lost, 5xx) raise ``WebShopServerError`` (an
``EnvError``) naming the task, action and URL.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
import os
import re
import secrets
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from envs.base import (
    is_encodable_text,
    DependencyMissingError,
    EnvNotResetError,
    InvalidSnapshotError,
    StepResult,
    TaskSpec,
    TextEnv,
    checked_snapshot,
)
from envs.webshop.pages import Page, Target, WebShopServerError, parse_action, parse_page
from envs.webshop.server import launcher_flags, site_mismatches, site_settings

DEFAULT_URL = "http://127.0.0.1:3000"


def server_urls(value: str) -> list[str]:
    """The WebShop servers a ``server_url`` / ``WEBSHOP_URL`` value lists (comma-separated, spaces allowed),
    each as ``http(s)://host[:port]``; a bare ``host:port`` is HTTP. Anything else raises ValueError."""
    urls = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        url = item if "://" in item else "http://" + item
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"WebShop server {item!r} is not an http(s) URL")
        urls.append(url.rstrip("/"))
    if not urls:
        raise ValueError(f"no WebShop server in {value!r}")
    return urls
GOALS_ENDPOINT = "/skl_api/goals"
SPLIT_CONVENTIONS: dict[str, dict[str, tuple[int, int | None]]] = {
    "webshop": {"test": (0, 500), "dev": (500, 1500), "train": (1500, None)},
    "verl_agent": {"test": (0, 500), "train": (500, None)},
    # R3L's task ids are WebShop session ints, and the site serves goals[i] to session i: the same goal list.
    "r3l": {"train": (0, 4096), "test": (4096, 4196)},
}
_SESSION_IN_PATH = re.compile(r"skl[0-9a-f]+_fixed_\d+|fixed_\d+")
_SNAPSHOT_VERSION = 1

MAX_QUERY_CHARS = 500
"""Longer search queries are invalid actions: WebShop's own are a few words, and a runaway one
would come back in redirect headers longer than Python's HTTP client accepts."""


# ---------------------------------------------------------------------- goals


def _load_goals_json(raw: Any, where: str) -> list[dict[str, Any]]:
    goals = raw.get("goals") if isinstance(raw, dict) else raw
    if not isinstance(goals, list) or not goals:
        raise ValueError(f"webshop: {where}: expected a non-empty list of goals (or {{'goals': [...]}})")
    for i, goal in enumerate(goals):
        if not isinstance(goal, dict):
            raise ValueError(f"webshop: {where}: goal {i} is not an object")
        if not isinstance(goal.get("attributes"), list):
            raise ValueError(f"webshop: {where}: goal {i} has no 'attributes' list")
        if not isinstance(goal.get("goal_options", {}), (dict, list)):
            raise ValueError(f"webshop: {where}: goal {i} has 'goal_options' that is neither a dict nor a list")
        if "index" in goal and int(goal["index"]) != i:
            raise ValueError(f"webshop: {where}: goal {i} carries index {goal['index']}; goals must be in index order")
    return goals


def _product_key(asin: Any) -> str | None:
    return None if not asin else hashlib.sha256(str(asin).encode()).hexdigest()[:12]


class WebShopEnv(TextEnv):
    """A WebShop client behind the TextEnv protocol; see the module docstring."""

    name = "webshop"
    supports_snapshot = True

    def __init__(
        self,
        server_url: str | None = None,
        split: str = "test",
        split_convention: str = "webshop",
        goals_file: str | os.PathLike[str] | None = None,
        max_goals: int | None = None,
        family_by: str = "category",
        max_steps: int = 15,
        timeout_s: float = 30.0,
        history_items: int | None = None,
        site: str | dict[str, Any] | None = None,
    ) -> None:
        if site is not None:
            site = site_settings(site)  # ValueError for an unknown name or key
        if split_convention not in SPLIT_CONVENTIONS:
            raise ValueError(f"split_convention must be one of {sorted(SPLIT_CONVENTIONS)}, got {split_convention!r}")
        splits = SPLIT_CONVENTIONS[split_convention]
        if split != "all" and split not in splits:
            raise ValueError(
                f"split must be 'all' or one of {sorted(splits)} under split_convention={split_convention!r}, got {split!r}"
            )
        if family_by not in ("category", "query", "product_category"):
            raise ValueError(f"family_by must be 'category', 'query' or 'product_category', got {family_by!r}")
        if isinstance(max_steps, bool) or int(max_steps) != max_steps or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        if max_goals is not None and (isinstance(max_goals, bool) or int(max_goals) < 1):
            raise ValueError(f"max_goals must be a positive int or None, got {max_goals!r}")
        if not (timeout_s > 0):
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        if history_items is not None and (isinstance(history_items, bool) or int(history_items) != history_items
                                          or history_items < 1):
            raise ValueError(f"history_items must be a positive int or None, got {history_items!r}")
        urls = server_urls(server_url or os.environ.get("WEBSHOP_URL") or DEFAULT_URL)
        # Several servers (identically built): each env instance, i.e. each env worker process, keeps
        # one at random for its lifetime, spreading concurrent sessions over them.
        self.server_url = urls[secrets.randbelow(len(urls))]
        self.split = split
        self.split_convention = split_convention
        self.family_by = family_by
        self.max_steps = int(max_steps)
        self.timeout_s = float(timeout_s)
        self.history_items = history_items
        self._opener = urllib.request.build_opener(urllib.request.HTTPRedirectHandler())
        self._token = secrets.token_hex(4)
        self._episode_counter = 0

        goals_file = goals_file or os.environ.get("WEBSHOP_GOALS_FILE") or None
        served = self._probe_server(need_goals=goals_file is None)
        if goals_file is not None:
            path = Path(goals_file)
            try:
                raw = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise ValueError(f"webshop: cannot read goals file {path}: {exc}") from exc
            goals = _load_goals_json(raw, str(path))
        else:
            raw = served
            goals = _load_goals_json(served, f"{self.server_url}{GOALS_ENDPOINT}")
        self.site = site
        if site is not None and (wrong := site_mismatches(raw, site)):
            where = goals_file or self.server_url
            raise DependencyMissingError(
                f"webshop: {where} serves a goal table built with "
                + ", ".join(f"{key}={served_value!r}" for key, _, served_value in wrong)
                + "; this env needs " + ", ".join(f"{key}={value!r}" for key, value, _ in wrong)
                + f": start the launcher with {launcher_flags(site)} (docs/webshop_setup.md)"
            )
        self.num_goals = len(goals)

        if split == "all":
            start, stop = 0, len(goals)
        else:
            start, stop_or_none = splits[split]
            stop = len(goals) if stop_or_none is None else min(stop_or_none, len(goals))
        indices = list(range(start, stop))
        if max_goals is not None:
            indices = indices[: int(max_goals)]
        if not indices:
            raise ValueError(
                f"webshop: split {split!r} ({split_convention} convention) selects no goal out of {len(goals)}"
            )
        self.set_tasks([self._make_spec(i, goals[i]) for i in indices])
        self._reset_episode()

    # ------------------------------------------------------------------ server

    def _request(self, target: Target, what: str) -> tuple[str, str]:
        data = None
        if target.method == "POST":
            data = urllib.parse.urlencode(target.data or {}).encode("utf-8")
        request = urllib.request.Request(target.url, data=data, method=target.method)
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                body = response.read().decode("utf-8", errors="replace")
                return body, response.geturl()
        except urllib.error.HTTPError as exc:
            snippet = exc.read(300).decode("utf-8", errors="replace") if exc.fp is not None else ""
            raise WebShopServerError(
                f"webshop: {what}: HTTP {exc.code} from {target.method} {target.url} "
                f"(task={self._task_id!r}): {snippet!r}"
            ) from exc
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise WebShopServerError(
                f"webshop: {what}: no usable answer from {target.method} {target.url:.200} (task={self._task_id!r}): "
                f"{type(exc).__name__}: {exc!s:.200}"
            ) from exc

    def _probe_server(self, need_goals: bool) -> Any:
        """Check that a server answers; return the goals endpoint's JSON when it serves one."""
        url = self.server_url + GOALS_ENDPOINT
        try:
            with self._opener.open(urllib.request.Request(url), timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:  # the server is up but has no goals endpoint
            if need_goals:
                raise DependencyMissingError(
                    f"webshop: the server at {self.server_url} answers but serves no goal table "
                    f"(GET {GOALS_ENDPOINT} gave HTTP {exc.code}); start it with the skl-verl launcher or pass "
                    "goals_file= / WEBSHOP_GOALS_FILE (see docs/webshop_setup.md)"
                ) from exc
            return None
        except (urllib.error.URLError, OSError) as exc:
            raise DependencyMissingError(
                f"webshop: no WebShop server reachable at {self.server_url} ({exc}); start one and point "
                "server_url= or WEBSHOP_URL at it (see docs/webshop_setup.md)"
            ) from exc
        if not need_goals:
            return None
        try:
            return json.loads(body.decode("utf-8"))
        except ValueError as exc:
            raise DependencyMissingError(
                f"webshop: {url} did not return JSON; is WEBSHOP_URL pointing at a WebShop server?"
            ) from exc

    # ------------------------------------------------------------------ tasks

    def _make_spec(self, index: int, goal: dict[str, Any]) -> TaskSpec:
        attributes = list(goal.get("attributes") or [])
        options = goal.get("goal_options") or {}
        family = goal.get(self.family_by)
        if self.family_by == "product_category" and isinstance(family, str):
            family = " > ".join(part.strip() for part in family.split("›"))
        return TaskSpec(
            task_id=f"webshop-{index}",
            family=str(family) if family else "unknown",
            difficulty=float(len(attributes) + len(options)),
            metadata={
                "goal_index": index,
                "category": goal.get("category"),
                "query": goal.get("query"),
                "product_category": goal.get("product_category"),
                "instruction_text": goal.get("instruction_text"),
                "attributes": attributes,
                "goal_options": options,
                "n_attributes": len(attributes),
                "n_options": len(options),
                "price_upper": goal.get("price_upper"),
                # The product (a digest of its ASIN, so the answer never reaches a prompt through
                # metadata): SkillRise sequences never hold two goals for one product.
                "instance": {"product": _product_key(goal.get("asin"))},
                "split": self.split,
                "split_convention": self.split_convention,
                "max_steps": self.max_steps,
            },
        )


    # ------------------------------------------------------------------ episode

    def _reset_episode(self) -> None:
        self._task_id: str | None = None
        self._session_id: str | None = None
        self._page: Page | None = None
        self._steps = 0
        self._done = False
        self._won = False
        self._reward = 0.0
        self._truncated = False

    def _session_for(self, index: int) -> str:
        self._episode_counter += 1
        return f"skl{self._token}{self._episode_counter:x}_fixed_{index}"

    def _load(self, target: Target, what: str) -> Page:
        body, final_url = self._request(target, what)
        try:
            return parse_page(body, final_url)
        except WebShopServerError:
            raise
        except Exception as exc:  # a page this parser cannot read
            raise WebShopServerError(f"webshop: {what}: cannot parse the page at {final_url}: {exc}") from exc

    def reset(self, task_id: str, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Open a new session on goal ``task_id``; ``seed`` is ignored (the site is deterministic per goal)."""
        spec = self.task(task_id)
        self._reset_episode()
        session = self._session_for(spec.metadata["goal_index"])
        self._task_id = task_id
        try:
            page = self._load(Target("GET", f"{self.server_url}/{session}"), "reset")
        except BaseException:
            self._task_id = None
            raise
        self._session_id, self._page = session, page
        info = {
            "task": spec,
            "won": False,
            "invalid_action": False,
            "instruction_text": page.instruction,
            "session_id": session,
            "url": page.url,
            "steps": 0,
            "max_steps": self.max_steps,
        }
        return page.text, info

    def _require_running(self, what: str) -> Page:
        if self._task_id is None or self._page is None:
            raise EnvNotResetError(f"{self.name}: {what}() called before reset()")
        if self._done:
            raise EnvNotResetError(f"{self.name}: {what}() called after the episode ended; call reset()")
        return self._page

    def step(self, action: str) -> StepResult:
        page = self._require_running("step")
        self._steps += 1
        info: dict[str, Any] = {"won": False, "invalid_action": False, "truncated": False}
        parsed = parse_action(action)
        problem = None
        target: Target | None = None
        if parsed is None:
            problem = "actions are search[<query>] or click[<button>]"
        else:
            kind, arg = parsed
            if kind == "search":
                if not arg:
                    problem = "empty search query"
                elif len(arg) > MAX_QUERY_CHARS:
                    problem = f"search query longer than {MAX_QUERY_CHARS} characters"
                elif not is_encodable_text(arg):
                    problem = "the search query holds characters that are not text (lone surrogates)"
                else:
                    base = page.search_target or Target("POST", f"{self.server_url}/{self._session_id}", {})
                    field_name = next(iter(base.data), "search_query") if base.data else "search_query"
                    target = Target(base.method, base.url, {field_name: arg})
            else:
                target = page.clickables.get(arg)
                if target is None:
                    problem = f"{arg!r} is not clickable on this page"

        reward = 0.0
        if target is None:
            observation = f"Invalid action: {problem}.\n\n{page.text}"
            info["invalid_action"] = True
        else:
            page = self._load(target, f"step {str(action)!r}")
            self._page = page
            observation = page.text
            if page.reward is not None:
                reward = float(page.reward)
                self._reward = reward
                self._won = math.isclose(reward, 1.0, rel_tol=0.0, abs_tol=1e-9) or reward > 1.0
                self._done = True
                info.update(page.done_details)
        if not self._done and self._steps >= self.max_steps:
            self._done = self._truncated = True
            info["truncated"] = True
        info.update(
            {
                "won": self._won,
                "task_score": reward if page.reward is not None else None,
                "steps": self._steps,
                "max_steps": self.max_steps,
                "url": page.url,
                "task_id": self._task_id,
            }
        )
        if self.history_items is not None:
            info["history_observation"] = history_view(observation, self.history_items)
        return StepResult(observation=observation, reward=reward, done=self._done, info=info)

    def admissible_actions(self) -> list[str]:
        page = self._require_running("admissible_actions")
        actions = ["search[<query>]"] if page.has_search_bar else []
        actions.extend(f"click[{name}]" for name in page.clickables)
        return actions

    def state_key(self) -> str:
        if self._task_id is None or self._page is None:
            raise EnvNotResetError(f"{self.name}: state_key() called before reset()")
        path = urllib.parse.unquote(urllib.parse.urlsplit(self._page.url).path)
        path = _SESSION_IN_PATH.sub("<session>", path)
        payload = "\x1f".join([self._task_id, path, self._page.text])
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    # ------------------------------------------------------------------ snapshot

    def get_state(self) -> dict[str, Any]:
        if self._task_id is None or self._page is None:
            raise EnvNotResetError(f"{self.name}: get_state() called before reset()")
        return {
            "env": self.name,
            "version": _SNAPSHOT_VERSION,
            "server_url": self.server_url,
            "task_id": self._task_id,
            "session_id": self._session_id,
            "url": self._page.url,
            "steps": self._steps,
            "done": self._done,
            "won": self._won,
            "reward": self._reward,
            "truncated": self._truncated,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a ``get_state`` snapshot (reloads its page); a rejected snapshot, or a server
        that fails to serve the page, raises and changes nothing."""
        checked_snapshot(self.name, state, {
            "env": str, "version": int, "server_url": str, "task_id": str, "session_id": str, "url": str,
            "steps": int, "done": bool, "won": bool, "reward": (int, float), "truncated": bool,
        })
        if state["env"] != self.name or state["version"] != _SNAPSHOT_VERSION:
            raise InvalidSnapshotError(f"{self.name}: not a webshop snapshot (version {_SNAPSHOT_VERSION}): {state!r:.200}")
        self.task(state["task_id"])  # UnknownTaskError for a task this env does not have
        if state["server_url"] != self.server_url:
            raise InvalidSnapshotError(
                f"{self.name}: snapshot from server {state['server_url']!r}, this env talks to {self.server_url!r}"
            )
        if not state["url"].startswith(self.server_url + "/") or not is_encodable_text(state["url"]):
            raise InvalidSnapshotError(f"{self.name}: snapshot url {state['url']!r:.120} is not a page of {self.server_url}")
        if state["steps"] < 0:
            raise InvalidSnapshotError(f"{self.name}: snapshot steps={state['steps']} is negative")
        previous = self._task_id
        self._task_id = state["task_id"]  # named in the server errors of the reload
        try:
            page = self._load(Target("GET", state["url"]), "set_state")
        finally:
            self._task_id = previous
        self._task_id = state["task_id"]
        self._session_id = state["session_id"]
        self._page = page
        self._steps = state["steps"]
        self._done = state["done"]
        self._won = state["won"]
        self._reward = float(state["reward"])
        self._truncated = state["truncated"]


def history_view(observation: str, items: int) -> str:
    """A page as a prompt's history shows it (the released SkillRise/LaMer WebShop memory): the fragments up to
    and including the goal's instruction dropped, then at most ``items`` fragments and ``... (N more)``."""
    fragments = observation.split(" [SEP] ")
    for i, fragment in enumerate(fragments[:-1]):
        if fragment.strip().lower().endswith("instruction:"):
            # an invalid action's note is written before the page, in the instruction's fragment: kept
            note = fragment.strip()[: -len("instruction:")].strip()
            fragments = [note] * bool(note) + fragments[i + 2:]
            break
    if len(fragments) > items:
        return " [SEP] ".join(fragments[:items]) + f" ... ({len(fragments) - items} more)"
    return " [SEP] ".join(fragments)
