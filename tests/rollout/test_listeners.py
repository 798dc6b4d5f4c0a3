"""Servers we start listen on 127.0.0.1 unless the user asks for another address."""

import asyncio
import http.server
import ipaddress
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import hydra
import pytest
from omegaconf import OmegaConf
from transformers import AutoTokenizer

from envs.webshop import server
from skl_verl.rollout.openai_client import EndpointError

ROOT = Path(__file__).resolve().parents[2]


def test_the_webshop_launcher_listens_on_loopback_unless_told_otherwise(monkeypatch):
    runs = []
    app = SimpleNamespace(add_url_rule=lambda *a, **k: None, response_class=lambda *a, **k: None, view_functions={},
                          run=lambda **kwargs: runs.append(kwargs))
    # WebShop itself is not here
    monkeypatch.setattr(server, "build", lambda *args: (SimpleNamespace(app=app), {"goals": []}))
    server.main([])
    server.main(["--host", "0.0.0.0", "--port", "3001"])
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


def serve_executor(tmp_path, **env_vars):
    """recipes/knowledge_weaver/serve_executor.sh with a stub ``vllm`` on PATH: (exit code, stderr, vllm's argv)."""
    stub = tmp_path / "bin" / "vllm"
    stub.parent.mkdir(exist_ok=True)
    stub.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$VLLM_ARGS_FILE"\n')
    stub.chmod(0o755)
    args_file = tmp_path / "vllm_args"
    args_file.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("HOST", "PORT", "KW_EXECUTOR_API_KEY")}
    env.update(PATH=f"{stub.parent}:{env['PATH']}", VLLM_ARGS_FILE=str(args_file), EXECUTOR_GPUS="2,3", **env_vars)
    done = subprocess.run(["bash", str(ROOT / "recipes/knowledge_weaver/serve_executor.sh")], env=env,
                          capture_output=True, text=True, timeout=30)
    return done.returncode, done.stderr, args_file.read_text().splitlines() if args_file.exists() else None


def option(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def test_the_executor_server_listens_on_loopback_and_takes_a_key(tmp_path):
    code, err, argv = serve_executor(tmp_path)
    assert code == 0, err
    assert argv[:2] == ["serve", "Qwen/Qwen3.5-4B"] and option(argv, "--host") == "127.0.0.1" and "--api-key" not in argv
    code, err, argv = serve_executor(tmp_path, KW_EXECUTOR_API_KEY="s3cret")
    assert code == 0 and option(argv, "--host") == "127.0.0.1" and option(argv, "--api-key") == "s3cret"
    assert option(argv, "--data-parallel-size") == "2"
    code, err, argv = serve_executor(tmp_path, HOST="0.0.0.0")
    assert code == 2 and argv is None and "HOST=0.0.0.0" in err and "KW_EXECUTOR_API_KEY" in err
    code, err, argv = serve_executor(tmp_path, HOST="0.0.0.0", KW_EXECUTOR_API_KEY="s3cret")
    assert code == 0 and option(argv, "--host") == "0.0.0.0" and option(argv, "--api-key") == "s3cret"


def test_the_curators_executor_client_sends_the_key_the_server_was_started_with(tiny_model_dir, monkeypatch):
    class KeyedCompletions(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Authorization") != "Bearer s3cret":  # what vllm serve --api-key checks
                self.send_response(401)
                self.end_headers()
                self.wfile.write(b'{"error": "Unauthorized"}')
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"choices": [{"text": "go", "finish_reason": "stop"}]}).encode())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), KeyedCompletions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    section = OmegaConf.load(ROOT / "recipes/knowledge_weaver/config/kw_base.yaml").kw.executor.client
    assert section.api_key_env == "KW_EXECUTOR_API_KEY" and "api_key" not in section  # the secret is not in the config
    section.base_url = f"http://127.0.0.1:{server.server_port}/v1"
    section.model = "served"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    def ask():
        client = hydra.utils.instantiate(section, tokenizer=tokenizer, max_new_tokens=4, attempts=1)
        return asyncio.run(client.generate("r", prompt_ids=[1, 2], sampling_params={}))

    try:
        monkeypatch.setenv("KW_EXECUTOR_API_KEY", "s3cret")
        assert tokenizer.decode(ask().token_ids, skip_special_tokens=True) == "go"
        monkeypatch.delenv("KW_EXECUTOR_API_KEY")
        with pytest.raises(EndpointError, match="HTTP 401.*none was sent"):
            ask()
    finally:
        server.shutdown()


def listening_addresses(script):
    """The addresses a fresh Python process running ``script`` (which sets up a process group) listens on."""
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME")}
    probe = script + (
        "\nimport json, psutil\nprint(json.dumps([c.laddr.ip for c in psutil.Process().net_connections(kind='inet')"
        " if c.status == psutil.CONN_LISTEN]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    addresses = json.loads(done.stdout.strip().splitlines()[-1])
    assert addresses, "gloo listens for its peers; no listener at all means the check saw nothing"
    return addresses


def test_init_single_process_group_listens_on_loopback_only():
    addresses = listening_addresses(
        "import torch, torch.distributed as dist\n"
        "from skl_verl.trainer.cpu_backend import init_single_process_group\n"
        "init_single_process_group()\n"
        "dist.all_reduce(torch.ones(1))\n"
        "dist.new_group([0])  # verl builds more groups (device meshes) after the first\n"
    )
    assert all(ipaddress.ip_address(a).is_loopback for a in addresses), addresses


def test_a_cpu_trainer_workers_process_group_listens_on_loopback_only():
    """What verl's engine workers run on the cpu platform (engine_workers.py: initialize_global_process_group_ray,
    with MASTER_ADDR/MASTER_PORT from the Ray worker group), through the CPU backend's backend-string patch."""
    addresses = listening_addresses(
        "import os, socket\n"
        "with socket.socket() as s:\n"
        "    s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]\n"
        "os.environ.update(RANK='0', LOCAL_RANK='0', WORLD_SIZE='1', MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))\n"
        "from skl_verl.trainer import cpu_backend\n"
        "cpu_backend._gloo_for_cpu_backend_strings()\n"
        "from verl.utils.distributed import initialize_global_process_group_ray\n"
        "initialize_global_process_group_ray(backend='cpu:gloo,cpu:gloo')\n"
    )
    assert all(ipaddress.ip_address(a).is_loopback for a in addresses), addresses
