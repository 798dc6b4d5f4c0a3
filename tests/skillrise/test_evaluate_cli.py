"""The evaluation CLI checks its arguments before any rollout, keeps what it measured, and says
in one line what is wrong with an endpoint."""

import asyncio
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from skl_verl.rollout.openai_client import EndpointError, OpenAICompletionsClient
from skl_verl.skillrise import evaluate

ROOT = Path(__file__).resolve().parents[2]
FROZENLAKE = ["--env", "frozenlake", "--env-kwargs", json.dumps({"size": 4, "num_tasks": 3, "seed": 1, "slip": [0, 0]})]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--max-tasks", "-1"], "argument --max-tasks: -1 is below 1"),
        (["--max-tasks", "0"], "argument --max-tasks: 0 is below 1"),
        (["--max-tasks", "many"], "argument --max-tasks: 'many' is not a whole number"),
        (["--attempts", "0"], "argument --attempts: 0 is below 1"),
        (["--scaling-k", "a,b"], "argument --scaling-k: 'a,b': 'a' is not a whole number; give lengths like 1,2,3"),
        (["--scaling-k", "1,0"], "argument --scaling-k: '1,0': 0 is below 1"),
        (["--env-kwargs", "{split: test}"], "argument --env-kwargs: not JSON"),
        (["--temperature", "-0.5"], "argument --temperature: -0.5 is below 0"),
        (["--top-p", "0"], "argument --top-p: 0.0 is not in (0, 1]"),
        (["--top-k", "0"], "argument --top-k: 0 is neither -1 (off) nor a positive count"),
        (["--sample", "random"], "argument --sample: invalid choice: 'random'"),
        (["--seed", "-1001"], "argument --seed: -1001 is below -1000"),
        (["--validation", "-1"], "argument --validation: -1 is below 0"),
        (["--method", "LaMer"], "no lamer_frozenlake agent loop to evaluate LaMer on frozenlake; pass --agent-loop"),
    ],
)
def test_bad_arguments_stop_before_anything_loads(args, message, capsys):
    # --model names nothing: had the CLI got as far as loading it, the error would be another one.
    with pytest.raises(SystemExit) as stop:
        evaluate.main([*FROZENLAKE, "--model", "/nonexistent/model", *args])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "env,env_kwargs,expected",
    [
        ("alfworld", {"max_steps": 10}, {"split": "valid_seen", "max_steps": 10}),  # released: eval_in_distribution
        ("alfworld", {"split": "valid_unseen"}, {"split": "valid_unseen"}),
        ("sciworld", {"max_steps": 30}, {"split": "test", "task_set": "l0", "max_steps": 30}),
    ],
)
def test_the_released_held_out_split_and_draw_are_the_defaults(env, env_kwargs, expected, monkeypatch):
    monkeypatch.setattr(evaluate, "_evaluate", lambda args, results: {"args": args, "results": results})
    seen = evaluate.main(["--env", env, "--env-kwargs", json.dumps(env_kwargs), "--model", "/nonexistent/model"])
    assert seen["args"].env_kwargs == expected and seen["args"].sample == "released"
    assert seen["results"]["env_kwargs"] == expected and seen["results"]["sample"] == "released"
    # the draw of the released runs' last validation (after step 150: the 31st), not the one before training
    assert seen["args"].validation == 30 and seen["results"]["validation"] == 30


def test_unwritable_out_stops_before_any_rollout(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as stop:
        evaluate.main([*FROZENLAKE, "--model", "/nonexistent/model", "--out", str(blocker / "results.json")])
    assert stop.value.code == 2
    assert f"argument --out: cannot write {blocker / 'results.json'}" in capsys.readouterr().err


def test_results_measured_before_a_failure_are_kept(tmp_path, tiny_model_dir, monkeypatch):
    records = [{"trial": "t0", "sequence": "s", "position": 0, "family": "", "won": True, "failed": False}]
    calls = []

    def rollouts(args, env_kwargs, sequences, tokenizer, client, workdir, name):
        calls.append(name)
        if name != "pass_at_k":
            raise EndpointError("cannot reach http://gpu-node:8000/v1/completions: connection reset")
        return records

    monkeypatch.setattr(evaluate, "run_rollouts", rollouts)
    out = tmp_path / "results.json"
    with pytest.raises(SystemExit) as stop:
        evaluate.main([*FROZENLAKE, "--model", tiny_model_dir, "--max-tasks", "1", "--scaling-k", "1",
                       "--out", str(out)])
    assert "connection reset" in str(stop.value.code) and f"results so far are in {out}" in str(stop.value.code)
    saved = json.loads(out.read_text())
    assert calls == ["pass_at_k", "scaling_k1"]
    assert saved["pass_at_k"] == {"1": 1.0, "2": 1.0, "3": 1.0} and saved["complete"] is False
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


class _Endpoint(http.server.BaseHTTPRequestHandler):
    """A stand-in endpoint that answers from a script of (status, content type, body)."""

    script: list = []
    requests = 0

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        status, content_type, body = _Endpoint.script[min(_Endpoint.requests, len(_Endpoint.script) - 1)]
        _Endpoint.requests += 1
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Endpoint)
    _Endpoint.requests = 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


COMPLETION = (200, "application/json", json.dumps({"choices": [{"text": "<action>up</action>", "finish_reason": "stop"}]}).encode())
HTML = (200, "text/html", b"<!DOCTYPE html><html><body>Welcome to nginx!</body></html>")


def test_transient_endpoint_errors_are_retried(endpoint, tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    _Endpoint.script = [(503, "text/plain", b"loading"), (502, "text/plain", b"bad gateway"), COMPLETION]
    client = OpenAICompletionsClient(endpoint, "served", tokenizer, 8, backoff_s=0.01)
    out = asyncio.run(client.generate("r", prompt_ids=[1], sampling_params={}))
    assert tokenizer.decode(out.token_ids, skip_special_tokens=True) == "<action>up</action>"
    assert _Endpoint.requests == 3
    _Endpoint.requests, _Endpoint.script = 0, [(503, "text/plain", b"loading")]
    with pytest.raises(EndpointError, match="HTTP 503.*after 3 attempts"):
        asyncio.run(client.generate("r", prompt_ids=[1], sampling_params={}))
    _Endpoint.requests, _Endpoint.script = 0, [(404, "text/plain", b"no such model")]
    with pytest.raises(EndpointError, match="HTTP 404"):
        asyncio.run(client.generate("r", prompt_ids=[1], sampling_params={}))
    assert _Endpoint.requests == 1, "a wrong model name is not worth repeating"


def test_an_endpoint_answering_html_is_one_clear_line(endpoint, tiny_model_dir):
    _Endpoint.script = [HTML]
    with pytest.raises(SystemExit) as stop:
        evaluate.main([*FROZENLAKE, "--endpoint", endpoint, "--served-model", "served", "--tokenizer", tiny_model_dir])
    message = str(stop.value.code)
    assert message.startswith("error: ") and "\n" not in message
    assert "text/html" in message and "not JSON" in message and "base URL" in message


def test_a_dead_endpoint_is_one_line_on_stderr(tiny_model_dir, tmp_path):
    dead = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there
    result = subprocess.run(
        [sys.executable, "-m", "skl_verl.skillrise.evaluate", *FROZENLAKE, "--endpoint", dead, "--served-model", "m",
         "--tokenizer", tiny_model_dir, "--out", str(tmp_path / "r.json")],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot reach {dead}/completions"), result.stderr[-2000:]
    assert "after 3 attempts" in lines[0]


@pytest.mark.parametrize("env", ["alfworld", "webshop", "sciworld"])
def test_each_method_is_evaluated_with_the_loop_it_was_trained_for(env):
    assert evaluate.default_agent_loop(env, "SkillRise") == f"skillrise_{env}"
    assert evaluate.default_agent_loop(env, "LaMer") == f"lamer_{env}"
    assert {evaluate.default_agent_loop(env, m) for m in ("GRPO", "GiGPO", "RLOO", "PPO")} == {f"attempts_{env}"}


def test_an_env_without_recipe_loops_falls_back_to_the_generic_skillrise_loop():
    assert evaluate.default_agent_loop("frozenlake", "SkillRise") == "skillrise"


class _AlwaysRight:
    """Scripted policy: every reply (each action and each skill curation) is ``<action>right</action>``."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        from verl.workers.rollout.replica import TokenOutput

        ids = self.tokenizer("<action>right</action>", add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


# Issue 27 item 1. Always moving right, without slips: on the 7 maps "SFFFFFG" the policy reaches G in 6 steps
# (won); on the 3 maps "SFFFFFF" (G is below the start) it walks 6 steps to the east border, then bumps it
# until skillrise_alfworld's 10-turn cap (lost). Step mode makes one solve row per env step, so K=1 scaling
# sees 7 * 6 = 42 won rows among 7 * 6 + 3 * 10 = 72: the old rate 42 / 72 = 0.583 "over 72 tasks".
# Per task it is 7 / 10 = 0.700, Pass@1's number.
SOLVED_MAP, LOST_MAP = ["SFFFFFG", "FFFFFFF"], ["SFFFFFF", "GFFFFFF"]


@pytest.mark.parametrize("method,extra,top_p,top_k", [
    ("SkillRise", [], 1.0, -1), ("GRPO", [], 1.0, -1),  # the SkillRise release's scripts: verl's defaults
    ("LaMer", [], 0.8, 20), ("GiGPO", [], 0.8, 20),  # LaMer's lamer_ and gigpo_*_qwen3_4b.sh
    ("LaMer", ["--top-p", "1.0", "--top-k", "-1"], 1.0, -1),
])
def test_each_method_is_sampled_as_it_was_evaluated_when_released(method, extra, top_p, top_k, monkeypatch):
    monkeypatch.setattr(evaluate, "_evaluate", lambda args, results: {"args": args, "results": results})
    seen = evaluate.main(["--env", "alfworld", "--model", "/nonexistent/model", "--method", method, *extra])
    assert (seen["args"].top_p, seen["args"].top_k, seen["args"].temperature) == (top_p, top_k, 0.7)
    assert (seen["results"]["top_p"], seen["results"]["top_k"]) == (top_p, top_k)  # recorded with the numbers


@pytest.mark.parametrize("config,top_p,top_k", [("skillrise_alfworld", 1.0, -1), ("grpo", 1.0, -1),
                                                ("gigpo", 0.8, 20), ("lamer", 0.8, 20)])
def test_training_time_validation_samples_as_released(config, top_p, top_k):
    from golden import recipe_config

    val = recipe_config(config, ["env=alfworld"] if config != "skillrise_alfworld" else []).actor_rollout_ref.rollout.val_kwargs
    assert (val.top_p, val.top_k, val.temperature, val.do_sample) == (top_p, top_k, 0.7, True)


def test_step_mode_scaling_counts_tasks_not_step_rows(tmp_path, tiny_model_dir, monkeypatch):
    rows = {}
    real_rollouts = evaluate.run_rollouts

    def rollouts(args, env_kwargs, sequences, tokenizer, client, workdir, name):
        rows[name] = real_rollouts(args, env_kwargs, sequences, tokenizer, client, workdir, name)
        return rows[name]

    monkeypatch.setattr(evaluate, "run_rollouts", rollouts)
    monkeypatch.setattr(evaluate, "generation_client", lambda tokenizer, *a, **k: _AlwaysRight(tokenizer))
    env_kwargs = {"maps": [SOLVED_MAP] * 7 + [LOST_MAP] * 3, "slip": [0, 0], "max_steps": 12}
    out = tmp_path / "results.json"
    evaluate.main(["--env", "frozenlake", "--env-kwargs", json.dumps(env_kwargs), "--model", tiny_model_dir,
                   "--max-tasks", "10", "--attempts", "1", "--scaling-k", "1", "--agent-loop", "skillrise_alfworld",
                   "--out", str(out)])
    results = json.loads(out.read_text())
    scaled = rows["scaling_k1"]
    assert (len(scaled), sum(r["won"] for r in scaled)) == (72, 42)  # the rows the old rate divided
    assert results["scaling"]["1"] == {"success_rate": 0.7, "tasks_played": 10}  # was 42 / 72 over 72
    assert results["pass_at_k"] == {"1": 0.7} and results["pass_at_k_tasks_played"] == 10
