"""Servers we start listen on 127.0.0.1 unless the user asks for another address."""

import re
from pathlib import Path
from types import SimpleNamespace

from envs.webshop_env import SERVER_LAUNCHER

ROOT = Path(__file__).resolve().parents[2]


def test_the_webshop_launcher_listens_on_loopback_unless_told_otherwise():
    launcher = {"__name__": "skl_webshop_launcher"}
    exec(compile(SERVER_LAUNCHER, "launcher.py", "exec"), launcher)
    runs = []
    app = SimpleNamespace(add_url_rule=lambda *a, **k: None, response_class=lambda *a, **k: None, view_functions={},
                          run=lambda **kwargs: runs.append(kwargs))
    launcher["build"] = lambda *args: (SimpleNamespace(app=app), {"goals": []})  # WebShop itself is not here
    launcher["main"]([])
    launcher["main"](["--host", "0.0.0.0", "--port", "3001"])
    assert [(run["host"], run["port"]) for run in runs] == [("127.0.0.1", 3000), ("0.0.0.0", 3001)]


def test_no_source_binds_every_interface_by_itself():
    wildcard = re.compile(r"""["'](0\.0\.0\.0|::)["']""")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("skl_verl", "envs", "scripts", "benchmarks", "reward_fns")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if wildcard.search(line)
    ]
    assert not offenders
