"""Env workers per node and WebShop servers, checked before any worker starts (skl_verl.trainer.env_capacity)."""

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dry_run import PAPER_WEBSHOP_SERVERS, dry_run
from skl_verl.knowledge_weaver.settings import kw_settings
from skl_verl.rollout.openai_client import OpenAICompletionsClient

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
QWEN25 = Path(__file__).parent / "model_configs" / "qwen2.5-7b-instruct"


def skl_sd_webshop(tmp_path, monkeypatch, servers, overrides=()):
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    monkeypatch.setenv("WEBSHOP_URL", servers)
    return dry_run("skl_sd", "skl_sd_webshop", [f"actor_rollout_ref.model.path={QWEN25}",
                                                "+skl.cluster.memory_gib_per_node=1024", "+skl.cluster.cpus_per_node=128",
                                                *overrides], tmp_path)


def test_skl_sd_at_paper_settings_on_one_webshop_server_is_refused_naming_the_servers_it_needs(tmp_path, monkeypatch):
    code, out, err = skl_sd_webshop(tmp_path, monkeypatch, "http://127.0.0.1:3000")
    # a dry run warns (as it does of missing data files); a run refuses to start with the same words
    assert code == 0
    assert "warning: WEBSHOP_URL lists 1 WebShop server(s) for 384 concurrent episodes" in out and "start 6" in out
    code, _, err = skl_sd_webshop(tmp_path, monkeypatch, "http://127.0.0.1:3000", ["skl.dry_run=false"])
    assert code == 2 and "WEBSHOP_URL lists 1 WebShop server(s) for 384 concurrent episodes" in err, err[-800:]
    code, out, err = skl_sd_webshop(tmp_path, monkeypatch, PAPER_WEBSHOP_SERVERS)
    assert code == 0 and "warning: WEBSHOP_URL" not in out, err[-800:]
    assert "384 concurrent webshop episode(s), 384 env worker(s) a node" in err
    assert "webshop: 384 concurrent episodes on 16 server(s)" in err


@pytest.mark.parametrize("memory_gib, refused", [(16, True), (512, False)])
def test_knowledge_weavers_env_workers_are_sized_against_the_nodes_memory(memory_gib, refused, tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    # kw.executor.max_parallel_episodes=256 over the run (not 256 in each of 8 agent-loop workers: 2,048)
    code, out, err = dry_run("knowledge_weaver", "kw_alfworld", [f"+skl.cluster.memory_gib_per_node={memory_gib}",
                                                                  "+skl.cluster.cpus_per_node=64"], tmp_path)
    assert code == 0 and "256 concurrent alfworld episode(s), 256 env worker(s) a node x 90 MB" in err, err[-800:]
    warned = "warning: 256 concurrent alfworld env workers a node need 22 GiB" in out
    assert warned == refused and ("skl.cluster.memory_gib_per_node" in out) == refused


def test_the_episode_limit_is_shared_by_the_agent_loop_workers(tmp_path):
    from skl_verl.knowledge_weaver import build

    config = build.compose(str(RECIPES / "knowledge_weaver" / "config"), "kw_alfworld",
                           [f"kw.state_dir={tmp_path}", "kw.executor.tokenizer=any", f"data.train_files={tmp_path}/t.parquet",
                            f"data.val_files={tmp_path}/t.parquet", "actor_rollout_ref.rollout.agent.num_workers=8"])
    settings = kw_settings(config)
    assert settings.executor["max_parallel_episodes"] == 256 and settings.episodes_per_process == 32


class Held(BaseHTTPRequestHandler):
    """Answers a completion once ``expected`` requests are open at the same time (or after 5 s)."""

    expected, open_now, most = 0, 0, 0
    lock = threading.Lock()

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        with Held.lock:
            Held.open_now += 1
            Held.most = max(Held.most, Held.open_now)
        deadline = time.monotonic() + 5
        while Held.most < Held.expected and time.monotonic() < deadline:
            time.sleep(0.01)
        body = b'{"choices": [{"text": "ok", "finish_reason": "length"}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with Held.lock:
            Held.open_now -= 1

    def log_message(self, *args):
        pass


class Tokenizer:
    eos_token_id = 0

    def decode(self, ids):
        return "x"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [1] * len(text)}


def test_the_executor_client_sends_as_many_requests_at_once_as_episodes_it_plays():
    Held.expected, Held.most = 40, 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Held)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = OpenAICompletionsClient(f"http://127.0.0.1:{server.server_address[1]}/v1", "m", Tokenizer(), 4)
        client.max_in_flight = 40  # what the Knowledge Weaver loop sets: its episodes at once

        async def many():
            await asyncio.gather(*(client.generate(str(i), prompt_ids=[1], sampling_params={}) for i in range(40)))

        asyncio.run(many())
    finally:
        server.shutdown()
    assert Held.most == 40  # Python's default executor would hold min(32, CPUs + 4) at once


def webshop_validation(tmp_path, rows, server_url):
    """A WebShop run's config whose validation file has ``rows`` rows naming ``server_url`` (none: WEBSHOP_URL's)."""
    import json

    from omegaconf import OmegaConf

    from skl_verl.rollout.data import write_parquet

    kwargs = {"split": "test"} if server_url is None else {"split": "test", "server_url": server_url}
    spec = json.dumps({"name": "webshop", "kwargs": kwargs})
    val = write_parquet([{"prompt": [{"role": "user", "content": "x"}], "extra_info": {"env_spec": spec, "task_id": str(i)}}
                         for i in range(rows)], tmp_path / "val.parquet")
    return OmegaConf.create({
        "skl": {"env": "webshop", "cluster": {"memory_gib_per_node": 1024, "cpus_per_node": 128}},
        "data": {"train_batch_size": 4, "val_files": val, "val_batch_size": None},
        "actor_rollout_ref": {"rollout": {"n": 8, "val_kwargs": {"n": 1}}},
    })


@pytest.mark.parametrize("val_servers, refused", [("http://127.0.0.1:3001", True),
                                                  ("http://127.0.0.1:3001,http://127.0.0.1:3002", False)])
def test_validation_episodes_are_counted_against_the_validation_sites_servers(val_servers, refused, tmp_path):
    from skl_verl.trainer.env_capacity import check_env_capacity

    # training: 4 x 8 = 32 episodes on WEBSHOP_URL's one server (fits); validation: all 128 rows at once on the
    # servers the rows name (one serves 64)
    lines, problems = check_env_capacity(webshop_validation(tmp_path, 128, val_servers),
                                         environ={"WEBSHOP_URL": "http://127.0.0.1:3000"})
    assert "webshop: 32 concurrent episodes on 1 server(s)" in lines
    servers = len(val_servers.split(","))
    assert f"webshop validation: 128 concurrent episodes on {servers} server(s) of the validation rows' server_url" in lines
    assert bool(problems) == refused
    if refused:
        assert problems == [f"the validation rows' server_url ({val_servers}) lists 1 WebShop server(s) for 128 "
                            "concurrent validation episodes; one serves at most 64 before env calls time out into "
                            "zero-reward samples: start 2 (docs/webshop_setup.md) and list them comma-separated in "
                            f"the validation rows' server_url ({val_servers})"]


def test_validation_rows_without_a_server_play_on_webshop_url(tmp_path):
    from skl_verl.trainer.env_capacity import check_env_capacity

    lines, problems = check_env_capacity(webshop_validation(tmp_path, 100, None),
                                         environ={"WEBSHOP_URL": "http://127.0.0.1:3000"})
    assert "webshop validation: 100 concurrent episodes on 1 server(s) of WEBSHOP_URL" in lines
    assert problems and problems[0].startswith("WEBSHOP_URL lists 1 WebShop server(s) for 100 concurrent validation")


def test_a_run_that_never_validates_is_not_checked_for_validation_servers(tmp_path):
    """The recipe smokes (trainer.test_freq=-1, val_before_train=false) play none of the validation rows."""
    from omegaconf import OmegaConf

    from skl_verl.trainer.env_capacity import check_env_capacity

    config = OmegaConf.merge(webshop_validation(tmp_path, 100, None),
                             {"trainer": {"test_freq": -1, "val_before_train": False}})
    lines, problems = check_env_capacity(config, environ={"WEBSHOP_URL": "http://127.0.0.1:3000"})
    assert "webshop validation" not in lines and not problems
