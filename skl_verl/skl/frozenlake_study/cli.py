"""Command line of the study (``python -m skl_verl.skl.frozenlake_study``).

Outputs in ``--out``: ``results.json``, ``frozenlake_study.png`` (Fig. 2a-style: success rate and
good-move ratio vs iteration, one line per method, retry dashed grey, test after the last
iteration), ``episodes.jsonl`` (every step: reply, parsed action, parse error, slip, death
probabilities), ``reflections.jsonl``, ``reflections_trajectory.json``, ``knowledge_<method>.jsonl``
and ``buffer_<method>.jsonl``.

Run::

    python -m skl_verl.skl.frozenlake_study --endpoint http://localhost:8000/v1 --served-model Qwen3 \\
        --tokenizer Qwen/Qwen3-235B-A22B --iterations 10 --train-maps 50 --test-maps 50 \\
        --slip 1/3,1/3 --size 5 --out results/frozenlake_study

(``--model HF_PATH`` runs a local Hugging Face model through the CPU/GPU stand-in client instead.)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skl_verl.rollout.clients import generation_client
from skl_verl.skl import frozenlake_study
from skl_verl.skl.frozenlake_study.agents import METHODS
from skl_verl.skl.frozenlake_study.board import parse_slip
from skl_verl.skl.frozenlake_study.runner import FrozenLakeStudy, StudyConfig


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skl_verl.skl.frozenlake_study",
                                description=frozenlake_study.__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="local Hugging Face model path (run in-process)")
    src.add_argument("--endpoint", help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    p.add_argument("--served-model", help="model name at the endpoint")
    p.add_argument("--tokenizer", help="tokenizer path for --endpoint (prompts are sent as token ids)")
    p.add_argument("--api-key", default=None)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--train-maps", type=int, default=50)
    p.add_argument("--test-maps", type=int, default=50)
    p.add_argument("--slip", default="1/3,1/3", help="p_left,p_right, e.g. 1/3,1/3 or 0,2/3")
    p.add_argument("--size", type=int, default=5, help="map side (the authors' eval_bootstrap: 5)")
    p.add_argument("--p-frozen", type=float, default=0.8)
    p.add_argument("--max-steps", type=int, default=20, help="attempts (and env steps) per episode")
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the authors' eval_bootstrap)")
    p.add_argument("--refine-every-episode", action="store_true",
                   help="reflect after won training episodes too (default: only after failed ones, as the authors)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--n-continuations", type=int, default=3, help="N: recorded continuations per refinement")
    p.add_argument("--neighbourhood-radius", type=int, default=1, help="transfer key: (2r+1)^2 tiles around the player")
    p.add_argument("--concurrency", type=int, default=32, help="in-flight model requests")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--no-thinking", action="store_true", help="pass enable_thinking=False to the chat template (Qwen3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="results/frozenlake_study")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def _client_and_tokenizer(args: argparse.Namespace) -> tuple[Any, Any]:
    from transformers import AutoTokenizer

    if args.endpoint and (not args.served_model or not args.tokenizer):
        raise SystemExit("--endpoint needs --served-model and --tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer if args.endpoint else args.model)
    client = generation_client(tokenizer, args.max_new_tokens, endpoint=args.endpoint, served_model=args.served_model,
                               checkpoint=args.model, seed=args.seed, api_key=args.api_key)
    return client, tokenizer


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config = StudyConfig(
        iterations=args.iterations, train_maps=args.train_maps, test_maps=args.test_maps, size=args.size,
        p_frozen=args.p_frozen, slip=parse_slip(args.slip), seed=args.seed, max_steps=args.max_steps,
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        refine_failed_only=not args.refine_every_episode, n_continuations=args.n_continuations, neighbourhood_radius=args.neighbourhood_radius,
        concurrency=args.concurrency, methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()),
        chat_template_kwargs={"enable_thinking": False} if args.no_thinking else {}, plot=not args.no_plot,
    )
    client, tokenizer = _client_and_tokenizer(args)
    results = asyncio.run(FrozenLakeStudy(client, tokenizer, config, args.out).run())
    for name, data in results["methods"].items():
        last = data["train"][-1] if data["train"] else {}
        test = data["test"] or {}
        print(f"{name:20s} train it{last.get('iteration')}: success {last.get('success_rate')}, "
              f"good-move {last.get('good_move_ratio')} | test: success {test.get('success_rate')}, "
              f"good-move {test.get('good_move_ratio')}")
    print(f"wrote {Path(args.out) / 'results.json'}")
    return 0
