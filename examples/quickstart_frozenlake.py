"""Quickstart: GRPO on a small FrozenLake through verl's real trainer, on CPU, in a few minutes.

    python examples/quickstart_frozenlake.py [--steps 20] [--out outputs/quickstart] [hydra overrides...]

It builds a tiny model and the task file locally, then runs the command a GPU user runs,

    python -m skl_verl.main --config-path examples/config --config-name quickstart_frozenlake trainer.device=cpu

(Ray, TransferQueue, verl's v1 trainer, FSDP2 actor, verl's vLLM replica on vLLM's CPU build). It prints
one line per training step as it finishes (step, success rate, seconds), then the curve, and writes a PNG
of it (``success_rate.png`` beside ``metrics.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from skl_verl.rollout.data import env_rows, write_parquet
from skl_verl.rollout.tiny_model import build_tiny_model

CONFIG_DIR = Path(__file__).resolve().parent / "config"
# A 2x2 deterministic map: short enough that a tiny model's episodes end inside the response budget,
# so the success signal is the env's, not truncation's.
ENV_KWARGS = {"size": 2, "num_tasks": 16, "seed": 0, "slip": [0.0, 0.0], "max_steps": 6}


def read_metrics(path: Path) -> list[dict]:
    """verl's file logger: one JSON line per logged step (a line still being written is left for later)."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            break
    return entries


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", default="outputs/quickstart")
    parser.add_argument("overrides", nargs="*", help="extra hydra overrides on the quickstart config")
    args = parser.parse_args(argv)
    if args.steps <= 0:
        parser.error("--steps must be positive")
    started = time.perf_counter()

    out = Path(args.out).resolve()
    model_dir = build_tiny_model(out / "tiny_model")
    write_parquet(env_rows("frozenlake", ENV_KWARGS), out / "frozenlake_train.parquet")
    metrics_file = out / "metrics.jsonl"
    metrics_file.unlink(missing_ok=True)
    env = dict(os.environ, DATA_DIR=str(out), MODEL_PATH=str(model_dir), VERL_FILE_LOGGER_PATH=str(metrics_file),
               HF_HUB_OFFLINE="1")
    command = [
        sys.executable, "-m", "skl_verl.main", f"--config-path={CONFIG_DIR}", "--config-name=quickstart_frozenlake",
        "trainer.device=cpu", f"trainer.total_training_steps={args.steps}", "trainer.logger=[console,file]",
        *args.overrides,
    ]
    print("running:", " ".join(command), flush=True)
    print(f"training log: {out / 'train.log'}; one line per step below as it finishes", flush=True)
    with open(out / "train.log", "w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        shown = 0
        while True:
            finished = process.poll() is not None
            history = success_history(metrics_file)
            for step, rate in history[shown:]:
                print(f"step {step}/{args.steps}: success rate {rate:.3f} ({time.perf_counter() - started:.0f} s)", flush=True)
            shown = len(history)
            if finished:
                break
            time.sleep(1.0)
    if process.returncode:
        sys.exit(f"training failed (exit {process.returncode}); see {out / 'train.log'}")
    curve = [round(rate, 3) for _, rate in history]
    print(f"quickstart: {len(history)} steps in {time.perf_counter() - started:.0f}s through verl's trainer")
    print(f"success rate per step: {curve}")
    print(f"plot: {plot_curve(history, out / 'success_rate.png')}")
    return history


def success_history(metrics_file: Path) -> list[tuple[int, float]]:
    """(step, env/success_rate) for every step the file logger has written so far."""
    return [(int(entry["step"]), float(entry["data"]["env/success_rate"])) for entry in read_metrics(metrics_file)
            if "env/success_rate" in entry["data"]]


def plot_curve(history: list[tuple[int, float]], path: Path) -> Path:
    """Success rate per step as a PNG beside the metrics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.5))
    axes.plot([step for step, _ in history], [rate for _, rate in history], marker="o")
    axes.set(xlabel="training step", ylabel="success rate", ylim=(-0.02, 1.02), title="Quickstart: GRPO on FrozenLake")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


if __name__ == "__main__":
    main()
