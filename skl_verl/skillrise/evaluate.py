"""SkillRise evaluation: Pass@1/2/3 and cross-task test-time scaling over K (§4.2, §5.1).

    # a local HF checkpoint (CPU or GPU), on ALFWorld's released held-out split (valid_seen)
    python -m skl_verl.skillrise.evaluate --env alfworld --env-kwargs '{"max_steps": 10}' \\
        --model checkpoints/skillrise/hf --max-tasks 128 --scaling-k 1,2,3,4,5 --out results.json
    # or a served model: vllm serve <checkpoint> --port 8000
    python -m skl_verl.skillrise.evaluate --env webshop --endpoint http://127.0.0.1:8000/v1 \\
        --served-model <name> --tokenizer <checkpoint> --max-tasks 128

Pass@k retries the *same* task up to k times, carrying the evolving skill document, and counts
a task solved if any of its first k attempts wins. Scaling partitions the held-out tasks into
sequences of K related tasks (one attempt each) and reports the success rate for each K.
The printed tables put the paper's numbers (Qwen3-4B) beside ours.

Held-out tasks (``held_out``): the paper envs default to the split the authors validate on (ALFWorld
valid_seen, WebShop goals 0-499, ScienceWorld the L0 set's test list); a key given in ``--env-kwargs``
overrides its default (e.g. ``{"split": "valid_unseen"}``, or ``{"task_set": "package"}``).
``--sample released`` (default) draws ``--max-tasks`` of them as the authors' validation does, seeded by
``--seed`` (their env.seed): ALFWorld one seeded shuffle per row, so a task can be played twice; WebShop
and ScienceWorld distinct tasks. Their draws advance with every validation of a run; ``--validation`` picks
which one (default 30: the one after step 150, the 31st; 0: the one before training). ``--sample stratified`` instead takes distinct tasks, each family its
share (``sequences.sample_tasks``). Scaling plays each drawn task once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from envs import make_env
from skl_verl.rollout.clients import generation_client
from skl_verl.rollout.data import json_object_arg, write_parquet
from skl_verl.skillrise import paper_results
from skl_verl.skillrise.held_out import (RELEASED_LAST_VALIDATION, SAMPLES, distinct, held_out_env_kwargs,
                                         released_draw)
from skl_verl.skillrise.build_dataset import sequence_rows
from skl_verl.skillrise.sequences import (
    covering_sequences,
    retry_sequences,
    sample_tasks,
)
from skl_verl.rollout import sample_fields as sf

PAPER_ENVS = ("alfworld", "webshop", "sciworld")


def solve_records(data) -> list[dict[str, Any]]:
    """One record per solve sample: trial, sequence, position, family, won."""
    fields = data.non_tensor_batch
    records = []
    for i, phase in enumerate(fields[sf.PHASE]):
        if phase != "solve":
            continue
        extra = fields["extra_info"][i]
        records.append(
            {
                "trial": fields[sf.TRAJECTORY_ID][i],
                "sequence": fields[sf.SEQUENCE_ID][i],
                "position": int(fields[sf.POSITION][i]),
                "family": extra.get("family", ""),
                "won": bool(fields[sf.WON][i]),
                "failed": bool(fields[sf.FAILED][i]),
            }
        )
    return records


def pass_at_k(records: Iterable[dict[str, Any]], attempts: int) -> dict[int, float]:
    """Fraction of trials solved within their first k attempts, for k = 1..attempts."""
    first_win: dict[str, int | None] = {}
    for r in records:
        best = first_win.get(r["trial"])
        if r["won"] and (best is None or r["position"] < best):
            first_win[r["trial"]] = r["position"]
        else:
            first_win.setdefault(r["trial"], best)
    if not first_win:
        raise ValueError("no solve records to score")
    wins = list(first_win.values())
    return {k: float(np.mean([w is not None and w < k for w in wins])) for k in range(1, attempts + 1)}


def pass_at_k_by_family(records: list[dict[str, Any]], attempts: int) -> dict[str, dict[int, float]]:
    by_family: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_family[r["family"]].append(r)
    return {family: pass_at_k(rs, attempts) for family, rs in sorted(by_family.items())}


def task_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per task played, i.e. per (trial, position), as ``pass_at_k`` counts them: in step
    mode an episode is one solve row per env step (each carrying the episode's outcome), and a failing
    episode runs longer than a winning one, so a rate over rows is biased down (issue 27: 7 of 10
    tasks won read as 42 of 78 rows, 0.538). ``won``/``failed``: whether any row of the task says so."""
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for r in records:
        key = (r["trial"], r["position"])
        if key in merged:
            merged[key]["won"] = merged[key]["won"] or r["won"]
            merged[key]["failed"] = merged[key]["failed"] or r["failed"]
        else:
            merged[key] = dict(r)
    return list(merged.values())


def success_rate(records: Iterable[dict[str, Any]]) -> float:
    """Share of tasks played (``task_records``, never rows) that were won."""
    won = [r["won"] for r in task_records(records)]
    if not won:
        raise ValueError("no solve records to score")
    return float(np.mean(won))


def format_table(header: list[str], rows: list[tuple[str, list[float | None]]]) -> str:
    width = max(len(name) for name, _ in rows) + 2
    lines = ["".ljust(width) + "".join(h.rjust(9) for h in header)]
    for name, values in rows:
        cells = "".join(("-" if v is None else f"{v:.1f}").rjust(9) for v in values)
        lines.append(name.ljust(width) + cells)
    return "\n".join(lines)


def table2(env: str, ours: dict[int, float], label: str) -> str:
    """Pass@1/2/3 in the layout of the paper's Table 2 (one environment)."""
    rows = [(name, list(by_env[env])) for name, by_env in paper_results.TABLE2.items() if env in by_env]
    note = "; paper rows are Qwen3-4B" if rows else "; the paper has no rows for this env"
    rows.append((label, [100 * ours.get(k) if k in ours else None for k in (1, 2, 3)]))
    return f"Table 2 ({env}, Pass@k %{note})\n" + format_table(["Pass@1", "Pass@2", "Pass@3"], rows)


def table1(env: str, ours_overall: float, ours_by_family: dict[str, float], label: str) -> str:
    """Pass@1 in the layout of the paper's Table 1 (ALFWorld families, or the env's SR column)."""
    columns = paper_results.TABLE1_COLUMNS
    rows = [(name, list(values)) for name, values in paper_results.TABLE1.items()]
    mine: list[float | None] = [None] * len(columns)
    if env == "alfworld":
        for i, family in enumerate(paper_results.ALFWORLD_FAMILIES):
            mine[i] = 100 * ours_by_family[family] if family in ours_by_family else None
        mine[6] = 100 * ours_overall
    else:
        mine[columns.index({"webshop": "WebShop", "sciworld": "SciWorld"}.get(env, "Avg."))] = 100 * ours_overall
    rows.append((label, mine))
    return "Table 1 (Pass@1 %; paper rows are Qwen3-4B)\n" + format_table(list(columns), rows)


METHOD_LOOPS = {"SkillRise": "skillrise", "LaMer": "lamer", "GRPO": "attempts", "GiGPO": "attempts",
                "RLOO": "attempts", "PPO": "attempts"}
"""How each method of Tables 1-2 plays a held-out task: SkillRise carries its skill document, LaMer its
reflection, and the task-independent baselines retry with their training prompt and nothing carried."""


EVAL_TOP_P_TOP_K = {"LaMer": (0.8, 20), "GiGPO": (0.8, 20)}
"""Nucleus and top-k sampling each method was evaluated with as released: LaMer's lamer_ and gigpo_*_qwen3_4b.sh
(val_kwargs top_p 0.8, top_k 20); the SkillRise release's scripts (SkillRise, GRPO) leave verl's 1.0 and -1."""


def default_agent_loop(env: str, method: str = "SkillRise") -> str:
    """The loop ``method`` is evaluated with on ``env`` (``<kind>_<env>``); SkillRise falls back to the
    generic ``skillrise`` loop for envs without a recipe loop."""
    import skl_verl
    from skl_verl.trainer.registry import AGENT_LOOPS

    skl_verl.register(with_trainer=False)
    names = set(AGENT_LOOPS)
    kind = METHOD_LOOPS[method]
    if f"{kind}_{env}" in names:
        return f"{kind}_{env}"
    if method == "SkillRise":
        return "skillrise"
    raise ValueError(f"no {kind}_{env} agent loop to evaluate {method} on {env}; pass --agent-loop")


def run_rollouts(args, env_kwargs: dict[str, Any], sequences, tokenizer, client, workdir: Path, name: str):
    import skl_verl
    from skl_verl.trainer.inprocess_rollout import AgentRollout, compose_config

    skl_verl.register(with_trainer=False)
    path = write_parquet(
        sequence_rows(args.env, env_kwargs, sequences, stop_after_success=name == "pass_at_k"), workdir / f"{name}.parquet"
    )
    config = compose_config(
        [
            f"actor_rollout_ref.model.path={args.tokenizer or args.model}",
            f"data.train_files={path}",
            f"data.val_files={path}",
            f"data.max_prompt_length={args.max_prompt_length}",
            f"data.max_response_length={args.max_response_length}",
            f"actor_rollout_ref.rollout.val_kwargs.temperature={args.temperature}",
            f"actor_rollout_ref.rollout.val_kwargs.top_p={args.top_p}",
            f"actor_rollout_ref.rollout.val_kwargs.top_k={args.top_k}",
            "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
            f"actor_rollout_ref.rollout.agent.default_agent_loop={args.agent_loop}",
            f"++data.apply_chat_template_kwargs.enable_thinking={str(args.thinking).lower()}",
            *args.overrides,
        ]
    )
    rollout = AgentRollout(config, client, tokenizer, path)
    records = []
    for step, batch in enumerate(rollout.batches(args.batch_size, shuffle=False, drop_last=False)):
        data = rollout.rollout(batch, step=step, n=args.trials, validate=True)
        records.extend(solve_records(data))
    return records


def _at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value

    return parse


def _sequence_lengths(text: str) -> list[int]:
    parse = _at_least(1)
    try:
        return [parse(part.strip()) for part in text.split(",") if part.strip()]
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}; give lengths like 1,2,3") from None


def write_results(path: str | os.PathLike, results: dict[str, Any]) -> None:
    """Replace ``path`` with ``results`` atomically: a kill leaves the previous version whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(results, indent=2))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True)
    parser.add_argument("--env-kwargs", type=json_object_arg, default={})
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="local Hugging Face checkpoint (runs on GPU when available)")
    source.add_argument("--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--served-model", help="model name at the endpoint")
    parser.add_argument("--tokenizer", help="tokenizer path (required with --endpoint)")
    parser.add_argument("--max-tasks", type=_at_least(1), default=128, help="held-out tasks (paper: 128)")
    parser.add_argument("--sample", choices=SAMPLES, default="released",
                        help="how --max-tasks are drawn: as the authors' validation (released; ALFWorld may "
                             "repeat a task) or distinct tasks stratified by family (stratified)")
    parser.add_argument("--attempts", type=_at_least(1), default=3, help="Pass@k up to this k (paper: 3)")
    parser.add_argument("--scaling-k", type=_sequence_lengths, default=[],
                        help="comma-separated sequence lengths, e.g. 1,2,3,4,5")
    parser.add_argument("--trials", type=_at_least(1), default=1, help="independent trials per task or sequence")
    parser.add_argument("--temperature", type=float, default=0.7, help="paper: 0.7")
    parser.add_argument("--top-p", type=float, help="nucleus sampling (default: the method's released value, "
                        "0.8 for LaMer and GiGPO, else 1.0)")
    parser.add_argument("--top-k", type=int, help="top-k sampling (default: the method's released value, 20 for "
                        "LaMer and GiGPO, else -1: off)")
    parser.add_argument("--max-new-tokens", type=_at_least(1), default=1024, help="per model turn (released: 1,024 per action)")
    parser.add_argument("--agent-loop", help="agent loop to play (default: skillrise_<env>, the one the recipe trains, else skillrise)")
    parser.add_argument("--thinking", action="store_true", help="leave Qwen3's thinking mode on (the recipe trains and evaluates with it off)")
    parser.add_argument("--max-prompt-length", type=_at_least(1), default=4096)
    parser.add_argument("--max-response-length", type=_at_least(1), default=1024)
    parser.add_argument("--batch-size", type=_at_least(1), default=8)
    parser.add_argument("--seed", type=int, default=0, help="draws the held-out tasks (released: env.seed=0)")
    parser.add_argument("--validation", type=_at_least(0), default=RELEASED_LAST_VALIDATION,
                        help="with --sample released: the draw of this validation of the released runs (0: before "
                             f"training, then one every 5 steps; default {RELEASED_LAST_VALIDATION}: after step 150)")
    parser.add_argument("--method", choices=sorted(METHOD_LOOPS), default="SkillRise",
                        help="what the checkpoint was trained as: picks the evaluation loop and names the row")
    parser.add_argument("--label", help="the row's name (default: '<method> (ours)')")
    parser.add_argument("--out", help="write all numbers as JSON here (rewritten after each stage)")
    parser.add_argument("overrides", nargs="*", help="hydra overrides on verl's ppo_trainer config")
    args = parser.parse_args(argv)
    if args.endpoint and not (args.served_model and args.tokenizer):
        parser.error("--endpoint needs --served-model and --tokenizer")
    if args.temperature < 0:
        parser.error(f"argument --temperature: {args.temperature} is below 0")
    released_top_p, released_top_k = EVAL_TOP_P_TOP_K.get(args.method, (1.0, -1))
    args.top_p = released_top_p if args.top_p is None else args.top_p
    args.top_k = released_top_k if args.top_k is None else args.top_k
    if not 0 < args.top_p <= 1:
        parser.error(f"argument --top-p: {args.top_p} is not in (0, 1]")
    if args.top_k == 0 or args.top_k < -1:
        parser.error(f"argument --top-k: {args.top_k} is neither -1 (off) nor a positive count")
    if args.sample == "released" and args.seed < -1000:
        parser.error(f"argument --seed: {args.seed} is below -1000 (the released draw seeds numpy with seed + 1000)")
    args.env_kwargs = held_out_env_kwargs(args.env, args.env_kwargs)
    if not args.agent_loop:
        try:
            args.agent_loop = default_agent_loop(args.env, args.method)
        except ValueError as exc:
            parser.error(str(exc))
    args.label = args.label or f"{args.method} (ours)"
    results: dict[str, Any] = {"env": args.env, "env_kwargs": args.env_kwargs, "sample": args.sample,
                               "seed": args.seed, "validation": args.validation, "trials": args.trials, "temperature": args.temperature,
                               "top_p": args.top_p, "top_k": args.top_k, "complete": False}
    if args.out:
        try:
            write_results(args.out, results)
        except OSError as exc:
            parser.error(f"argument --out: cannot write {args.out}: {exc.strerror or exc}")

    from skl_verl.rollout.openai_client import EndpointError

    try:
        return _evaluate(args, results)
    except EndpointError as exc:
        saved = f"; results so far are in {args.out}" if args.out else ""
        sys.exit(f"error: {exc}{saved}")


def _evaluate(args, results: dict[str, Any]) -> dict[str, Any]:
    from transformers import AutoTokenizer

    def save() -> None:
        if args.out:
            write_results(args.out, results)

    env = make_env(args.env, **args.env_kwargs)
    try:
        if args.sample == "released":
            tasks = released_draw(args.env, env.tasks(), args.max_tasks, seed=args.seed,
                                  validation=args.validation)
        else:
            tasks = sample_tasks(env.tasks(), args.max_tasks, seed=args.seed)
        if args.scaling_k:  # scaling's sequences run easy -> hard: only the drawn tasks' difficulty is needed
            drawn = sorted({t.task_id for t in tasks})
            env.measure_difficulty(drawn)
            tasks = [env.task(t.task_id) for t in tasks]
    finally:
        env.close()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.model)
    client = generation_client(tokenizer, args.max_new_tokens, endpoint=args.endpoint, served_model=args.served_model,
                               checkpoint=args.model, seed=args.seed)
    results["tasks"] = len(tasks)
    results["distinct_tasks"] = len(distinct(tasks))
    with tempfile.TemporaryDirectory() as tmp:
        records = run_rollouts(args, args.env_kwargs, retry_sequences(tasks, args.attempts), tokenizer, client, Path(tmp), "pass_at_k")
        results["pass_at_k"] = pass_at_k(records, args.attempts)
        results["pass_at_k_tasks_played"] = len({r["trial"] for r in records})  # one trial = one task, up to k attempts
        first_attempts = [r for r in records if r["position"] == 0]
        results["pass_at_1_by_family"] = {f: v[1] for f, v in pass_at_k_by_family(first_attempts, 1).items()}
        results["scaling"] = {}
        save()
        for k in args.scaling_k:
            sequences = covering_sequences(distinct(tasks), k, seed=args.seed)
            scaled = run_rollouts(args, args.env_kwargs, sequences, tokenizer, client, Path(tmp), f"scaling_k{k}")
            results["scaling"][k] = {"success_rate": success_rate(scaled), "tasks_played": len(task_records(scaled))}
            save()

    if args.env in PAPER_ENVS:
        print(table1(args.env, results["pass_at_k"][1], results["pass_at_1_by_family"], args.label))
        print()
    print(table2(args.env, results["pass_at_k"], args.label))
    print(f"Pass@k over {results['pass_at_k_tasks_played']} tasks played")
    if results["scaling"]:
        played = ", ".join(f"K={k}: {v['tasks_played']}" for k, v in results["scaling"].items())
        print(f"\nTest-time scaling (success % by sequence length K, one attempt per task; tasks played {played})")
        print(format_table([f"K={k}" for k in results["scaling"]], [(args.label, [100 * v["success_rate"] for v in results["scaling"].values()])]))
    results["complete"] = True
    save()
    return results


if __name__ == "__main__":
    main()
