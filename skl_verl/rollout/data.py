"""Datasets verl's RLHFDataset can load, one row per (env, task) to play."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

import pandas as pd

from envs import make_env


def env_rows(
    env_name: str,
    env_kwargs: dict[str, Any],
    task_ids: Iterable[str] | None = None,
    agent_name: str | None = None,
    data_source: str | None = None,
) -> list[dict[str, Any]]:
    """Rows naming the env and task in ``extra_info``; the agent loop builds the real prompt.

    Rows name no agent loop: verl prefers a row's ``agent_name`` over the config's
    ``rollout.agent.default_agent_loop``, so the config alone decides which loop trains. Only a
    validation set played by another loop than training (``skl.val_agent_loop``) passes ``agent_name``.

    ``prompt`` holds a short placeholder message because RLHFDataset requires a prompt column.
    Task ids are checked against the env now, so a typo fails at dataset build, not mid-training.
    """
    env = make_env(env_name, **env_kwargs)
    try:
        specs = {spec.task_id: spec for spec in env.tasks()}
    finally:
        env.close()
    ids = list(specs) if task_ids is None else list(task_ids)
    unknown = [t for t in ids if t not in specs]
    if unknown:
        raise ValueError(f"{env_name}: unknown task ids {unknown[:5]}{'...' if len(unknown) > 5 else ''}")
    env_spec = json.dumps({"name": env_name, "kwargs": env_kwargs}, sort_keys=True)
    loop = {} if agent_name is None else {"agent_name": agent_name}
    return [
        {
            "data_source": data_source or env_name,
            **loop,
            "prompt": [{"role": "user", "content": f"Play {env_name} task {task_id}."}],
            "reward_model": {"style": "env", "ground_truth": ""},
            "extra_info": {
                "index": i,
                "env_spec": env_spec,
                "task_id": task_id,
                "family": specs[task_id].family,
                "difficulty": float(specs[task_id].difficulty),
            },
        }
        for i, task_id in enumerate(ids)
    ]


def json_object_arg(text: str) -> dict[str, Any]:
    """An argparse type for a JSON object option (``--env-kwargs``), with the reason when it is not one."""
    import argparse

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object like '{{\"split\": \"test\"}}'")
    return value


def write_parquet(rows: list[dict[str, Any]], path: str | os.PathLike) -> str:
    """Atomically write rows as parquet (a half-written dataset file must never be read)."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    pd.DataFrame(rows).to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> str:
    """CLI: one row per task, for task-independent baselines (GRPO) and plain env training."""
    import argparse

    parser = argparse.ArgumentParser(description="Write a verl dataset with one row per env task.")
    parser.add_argument("--env", required=True)
    parser.add_argument("--env-kwargs", default="{}", help="JSON kwargs for envs.make_env")
    parser.add_argument("--max-tasks", type=int, default=None)
    parser.add_argument("--agent-loop", default=None, help="only for a validation set played by skl.val_agent_loop")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rows = env_rows(args.env, json.loads(args.env_kwargs), agent_name=args.agent_loop)[: args.max_tasks]
    path = write_parquet(rows, args.out)
    print(f"wrote {len(rows)} {args.env} tasks to {path}")
    return path


if __name__ == "__main__":
    main()
