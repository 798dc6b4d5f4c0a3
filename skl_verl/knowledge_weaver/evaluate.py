"""Evaluate knowledge banks with a frozen executor and top-k retrieval (the paper's §4 protocol).

    # Table 1 / Fig. 4 on ALFWorld: 3 banks, k = 0..15, the executor served by vLLM
    python -m skl_verl.knowledge_weaver.evaluate --env alfworld --split valid_unseen \\
        --bank banks/kw_42.jsonl --bank banks/kw_43.jsonl --bank banks/kw_44.jsonl --k 0..15 \\
        --executor-url http://127.0.0.1:8001/v1 --executor-model <served name> --executor-tokenizer <path> \\
        --retriever hf_mean_pool --embedding-model <all-mpnet-base-v2 path> --out results/kw_alfworld
    # WebShop test100: the first 500 human goals, 100 of them drawn by Random(42)
    python -m skl_verl.knowledge_weaver.evaluate --env webshop --split test \\
        --env-kwargs '{"split_convention": "verl_agent"}' --sample 100 --sample-seed 42 ...
    # retrieval only (Jaccard overlap, guidance tokens): no executor runs
    python -m skl_verl.knowledge_weaver.evaluate ... --retrieval-only

Per task: reset, the retrieval query (task type, description, first observation), the top k entries
of each bank (ranked once per bank; ties by entry id), the guidance fixed for the episode, the frozen
executor at temperature 0. Bank r (0-based, in --bank order) is one run, played with executor and env seed
--seed + r; its k = 0 control (no guidance) is played in the same run with the same seed, so the control
has as many runs and seeds as there are banks and its std is over them, as the paper's 24.6 ± 1.5 (each
curve keeps its own k = 0 control, App. E.4). Episodes are keyed by (task, guidance, seed): within a run the
same guidance is played once (a k above the bank size). Metrics per bank and k: success rate overall and per task type, score = 100 x mean episode
reward (WebShop), success = won or reward >= 0.999999; mean and sample std over banks; guidance-block
tokens in the executor's tokenizer (at k = 0, the no-guidance text's). Jaccard overlap (§4.3): at k (10), the tasks
each entry is retrieved for; the mean over pairs of retrieved entries of |A & B| / |A | B|, averaged over
banks. Writes ``results.json`` (with every episode: task, guidance, seed, won, reward, steps, and replies
that named no admissible command), ``table.txt`` (ours beside the paper's Tables 1-3) and ``sr_vs_k.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from envs import make_env
from skl_verl.knowledge_weaver import paper_results
from skl_verl.knowledge_weaver.entries import format_guidance
from skl_verl.knowledge_weaver.executor import (
    ExecutorEpisode,
    FrozenExecutor,
    executor_style,
    task_description,
)
from skl_verl.knowledge_weaver.generate_bank import read_bank
from skl_verl.knowledge_weaver.retrieval import (
    BankEntry,
    BM25Retriever,
    HFMeanPoolRetriever,
    query_task_type,
    retrieval_query,
)
from skl_verl.rollout.clients import generation_client
from skl_verl.rollout.data import json_object_arg

SUCCESS_REWARD = 0.999999
"""WebShop counts an episode a success at this reward (the paper's threshold); won counts everywhere."""
EXECUTOR_LIMITS = {
    "alfworld": {"max_steps": 50, "max_tokens": 192, "observation_chars": 1800},
    "webshop": {"max_steps": 100, "max_tokens": 128, "observation_chars": 5000},
}
"""The authors' evaluation caps per env (steps, new tokens per action, observation characters shown)."""
DEFAULT_LIMITS = EXECUTOR_LIMITS["alfworld"]


@dataclass(frozen=True)
class EvalTask:
    task_id: str
    task_type: str
    query: str


def eval_tasks(env: Any, task_ids: Sequence[str]) -> list[EvalTask]:
    """Each task's retrieval query, from a reset: its type, description and first observation."""
    tasks = []
    for task_id in task_ids:
        observation, info = env.reset(task_id)
        spec = env.task(task_id)
        query = retrieval_query(query_task_type(env.name, spec.family), task_description(info, observation), observation)
        tasks.append(EvalTask(task_id, spec.family, query))
    return tasks


def jaccard_overlap(ranked: Sequence[Sequence[int]], k: int) -> float | None:
    """§4.3: per entry, the set of tasks whose top ``k`` holds it; the mean over unordered pairs of
    entries retrieved at least once of |A & B| / |A | B|. None with fewer than two such entries."""
    retrieved_for: dict[int, set[int]] = defaultdict(set)
    for task, entries in enumerate(ranked):
        for entry in entries[:k]:
            retrieved_for[entry].add(task)
    pairs = list(combinations(retrieved_for.values(), 2))
    if not pairs:
        return None
    return sum(len(a & b) / len(a | b) for a, b in pairs) / len(pairs)


def guidance_tokens(tokenizer: Any, bodies: Sequence[str]) -> int:
    """Tokens of the guidance block the executor is shown for ``bodies``: with nothing retrieved (k = 0) that is the
    "No additional guidance." text, which the authors count too (Fig. 3's x-axis starts there, not at 0)."""
    return len(tokenizer(format_guidance(bodies), add_special_tokens=False)["input_ids"])


def episode_reward(episode: ExecutorEpisode) -> float:
    return sum(step.reward for step in episode.steps)


def succeeded(episode: ExecutorEpisode) -> bool:
    return episode.won or episode_reward(episode) >= SUCCESS_REWARD


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample std (None for a single value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def run_seed(seed: int, run: int) -> int:
    """The executor and env seed of run ``run`` (bank ``run`` and its k = 0 control)."""
    return seed + run


async def play_episodes(executor: FrozenExecutor, env_factory: Callable[[], Any], jobs: Sequence[tuple[str, str, int]],
                        workers: int) -> dict[tuple[str, str, int], ExecutorEpisode]:
    """Play each (task id, guidance, seed) once, ``workers`` at a time, each worker on its own env."""
    queue: asyncio.Queue[tuple[int, tuple[str, str]]] = asyncio.Queue()
    for number, job in enumerate(jobs):
        queue.put_nowait((number, job))
    episodes: dict[tuple[str, str, int], ExecutorEpisode] = {}

    async def worker() -> None:
        env = env_factory()
        try:
            while not queue.empty():
                number, (task_id, guidance, seed) = queue.get_nowait()
                episodes[task_id, guidance, seed] = await executor.play(env, task_id, guidance, seed,
                                                                        request_id=f"eval{number}")
                if len(episodes) % 50 == 0:
                    print(f"{len(episodes)}/{len(jobs)} episodes", file=sys.stderr, flush=True)
        finally:
            env.close()

    await asyncio.gather(*(worker() for _ in range(min(workers, len(jobs)))))
    return episodes


def bank_metrics(tasks: Sequence[EvalTask], guidance: Sequence[str],
                 episodes: dict[tuple[str, str, int], ExecutorEpisode], types: Sequence[str], seed: int) -> dict[str, Any]:
    """SR % (overall and per type) and score (100 x mean reward) of one bank at one k, in the run of ``seed``."""
    played = [episodes[task.task_id, text, seed] for task, text in zip(tasks, guidance)]
    by_type = {}
    for task_type in types:
        mine = [succeeded(e) for task, e in zip(tasks, played) if task.task_type == task_type]
        by_type[task_type] = 100 * statistics.fmean(mine)
    return {"sr": 100 * statistics.fmean(succeeded(e) for e in played),
            "score": 100 * statistics.fmean(episode_reward(e) for e in played), "sr_by_type": by_type}


def summarize(per_bank: Sequence[dict[str, Any]], tokens: Sequence[float]) -> dict[str, Any]:
    summary: dict[str, Any] = {"per_bank": list(per_bank), "guidance_tokens_per_bank": list(tokens),
                               "guidance_tokens": statistics.fmean(tokens)}
    if per_bank:
        summary["sr"], summary["sr_std"] = mean_std([m["sr"] for m in per_bank])
        summary["score"], summary["score_std"] = mean_std([m["score"] for m in per_bank])
        summary["sr_by_type"] = {t: statistics.fmean(m["sr_by_type"][t] for m in per_bank) for t in per_bank[0]["sr_by_type"]}
    return summary


# ------------------------------------------------------------------------------------------------ tables


def _cell(value: float | None, std: float | None = None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if std is None else f"{value:.1f}±{std:.1f}"


def format_table(title: str, header: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]]) -> str:
    name_width = max(len(name) for name, _ in rows) + 2
    widths = [max(len(h), *(len(cells[i]) for _, cells in rows)) + 2 for i, h in enumerate(header)]
    lines = [title, "".ljust(name_width) + "".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += [name.ljust(name_width) + "".join(c.rjust(w) for c, w in zip(cells, widths)) for name, cells in rows]
    return "\n".join(lines)


def _ours(per_k: dict[int, dict[str, Any]], k: int, metric: str) -> str:
    if k not in per_k or metric not in per_k[k]:
        return "-"
    summary = per_k[k]
    return _cell(summary[metric], summary.get(f"{metric}_std"))


def paper_tables(env: str, per_k: dict[int, dict[str, Any]], method: str, label: str, executor_name: str) -> list[str]:
    """Tables 1-3 with our rows (only the columns of ``env``, only where we ran the k they use)."""
    tables = []
    if env == "alfworld":
        header = [*paper_results.ALFWORLD_TYPES, "Overall"]
        rows = [(name, [*(_cell(v) for v in types), _cell(*overall)])
                for name, (types, overall, _, _) in paper_results.TABLE1.items()]
        for name, k in (("Zero-shot (ours, k=0)", 0), (label, 10)):
            if k in per_k and "sr" in per_k[k]:
                by_type = per_k[k]["sr_by_type"]
                rows.append((name, [*(_cell(by_type.get(t)) for t in paper_results.ALFWORLD_TYPES), _ours(per_k, k, "sr")]))
        tables.append(format_table("Table 1 (ALFWorld SR %, k = 10; paper: frozen Qwen3.5-4B, 3 banks)", header, rows))
        metrics = [("ALF SR", "sr", 0)]
    elif env == "webshop":
        rows = [(name, [_cell(*score), _cell(*sr)]) for name, (_, _, score, sr) in paper_results.TABLE1.items()]
        for name, k in (("Zero-shot (ours, k=0)", 0), (label, 10)):
            if k in per_k and "sr" in per_k[k]:
                rows.append((name, [_ours(per_k, k, "score"), _ours(per_k, k, "sr")]))
        tables.append(format_table("Table 1 (WebShop, k = 10; paper: frozen Qwen3.5-4B, 3 banks)", ["Score", "SR%"], rows))
        metrics = [("WS Score", "score", 1), ("WS SR", "sr", 2)]
    else:
        return tables

    rows = [(name, [_cell(values[i]) for _, _, i in metrics]) for name, values in paper_results.TABLE2.items()]
    if 10 in per_k and "sr" in per_k[10]:
        rows.append((f"{paper_results.TABLE2_ROW.get(method, method)} (ours)", [_ours(per_k, 10, m) for _, m, _ in metrics]))
    tables.append(format_table("Table 2 (reward ablation, k = 10)", [name for name, _, _ in metrics], rows))

    header = [f"{name} {column}" for name, _, _ in metrics for column in ("None", "GRPO", "Ours")]
    rows = [(name, [_cell(v) for _, _, i in metrics for v in values[i]]) for name, values in paper_results.TABLE3.items()]
    if 0 in per_k and "sr" in per_k[0]:
        cells = []
        for _, metric, _ in metrics:
            mine = ["-", "-", "-"]
            mine[0] = _ours(per_k, 0, metric)
            if method in paper_results.TABLE3_COLUMN:
                mine[paper_results.TABLE3_COLUMN[method]] = _ours(per_k, 8, metric)
            cells += mine
        rows.append((f"{executor_name} (ours)", cells))
    tables.append(format_table("Table 3 (transfer across frozen executors, k = 8; None = k = 0)", header, rows))
    return tables


def sweep_table(per_k: dict[int, dict[str, Any]], label: str, webshop: bool) -> str:
    header = ["SR%", *(["Score"] if webshop else []), "guidance tokens"]
    rows = [(f"k={k}", [_ours(per_k, k, "sr"), *([_ours(per_k, k, "score")] if webshop else []),
                        f"{summary['guidance_tokens']:.1f}"]) for k, summary in per_k.items()]
    return format_table(f"{label}: success rate vs k (mean±sample std over banks)", header, rows)


def plot_sr_vs_k(path: Path, per_k: dict[int, dict[str, Any]], label: str, env: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [k for k in per_k if "sr" in per_k[k]]
    means = [per_k[k]["sr"] for k in ks]
    stds = [per_k[k]["sr_std"] or 0.0 for k in ks]
    figure, axes = plt.subplots(figsize=(5, 3.5))
    axes.plot(ks, means, marker="o", label=label)
    axes.fill_between(ks, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)], alpha=0.2)
    axes.set_xticks(ks)
    axes.set_ylim(0, 100)
    axes.set_xlabel("retrieved entries k")
    axes.set_ylabel("success rate (%)")
    axes.set_title(f"{env}: SR vs k (mean ± std over banks)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


# ------------------------------------------------------------------------------------------------ CLI


def parse_ks(text: str) -> list[int]:
    """``0..15``, ``0,5,10`` or ``10``."""
    try:
        if ".." in text:
            low, high = (int(part) for part in text.split(".."))
            ks = list(range(low, high + 1))
        else:
            ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give k as 0..15, 0,5,10 or 10") from None
    if not ks or min(ks) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: k values must be >= 0 and at least one")
    return sorted(set(ks))


def make_executor_client(args, tokenizer):
    limits = EXECUTOR_LIMITS.get(args.env, DEFAULT_LIMITS)
    # The key serve_executor.sh started the executor with, if any (the training config reads the same variable).
    return generation_client(tokenizer, limits["max_tokens"], endpoint=args.executor_url, served_model=args.executor_model,
                             checkpoint=args.executor_checkpoint, seed=args.seed, api_key_env="KW_EXECUTOR_API_KEY")


def make_retriever(args):
    if args.retriever == "bm25":
        return BM25Retriever()
    model = args.embedding_model or os.environ.get("KW_EMBEDDING_MODEL")
    if not model:
        sys.exit("error: --retriever hf_mean_pool needs --embedding-model or $KW_EMBEDDING_MODEL (all-mpnet-base-v2)")
    return HFMeanPoolRetriever(model)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True)
    parser.add_argument("--split", help="the env's task split (ALFWorld: valid_unseen; WebShop: test)")
    parser.add_argument("--env-kwargs", type=json_object_arg, default={})
    parser.add_argument("--bank", action="append", required=True, help="a bank JSONL; repeat for each bank (seed)")
    parser.add_argument("--k", type=parse_ks, default=[10], help="0..15, a list 0,8,10, or one k (default 10)")
    parser.add_argument("--sample", type=int, help="evaluate this many tasks, drawn by Random(--sample-seed)")
    parser.add_argument("--sample-seed", type=int, default=42)
    executor = parser.add_mutually_exclusive_group(required=True)
    executor.add_argument("--executor-url", help="OpenAI-compatible base URL of the served executor")
    executor.add_argument("--executor-checkpoint", help="local Hugging Face checkpoint of the executor")
    parser.add_argument("--executor-model", help="model name at --executor-url")
    parser.add_argument("--executor-tokenizer", help="executor tokenizer path (with --executor-url)")
    parser.add_argument("--executor-name", help="the executor's name in Table 3 (default: model name or checkpoint folder)")
    parser.add_argument("--retriever", choices=("bm25", "hf_mean_pool"), default="hf_mean_pool")
    parser.add_argument("--embedding-model", help="encoder path for hf_mean_pool (default: $KW_EMBEDDING_MODEL)")
    parser.add_argument("--max-steps", type=int, help="executor actions per episode (default: ALFWorld 50, WebShop 100)")
    parser.add_argument("--seed", type=int, default=1001,
                        help="executor and env seed of the first bank's run (the authors' ALFWorld eval: 1001); "
                             "bank r and its k = 0 control use --seed + r")
    parser.add_argument("--workers", type=int, default=8, help="episodes played at once (one env each)")
    parser.add_argument("--jaccard-k", type=int, default=10)
    parser.add_argument("--method", choices=[*paper_results.TABLE1, "SR + MI"], default="Knowledge Weaver",
                        help="what made the banks: names our row in Tables 1-3")
    parser.add_argument("--label", help="our row's name (default: '<method> (ours)')")
    parser.add_argument("--retrieval-only", action="store_true", help="Jaccard and guidance tokens only; no executor runs")
    parser.add_argument("--out", required=True, help="folder for results.json, table.txt and sr_vs_k.png")
    args = parser.parse_args(argv)
    if args.executor_url and not (args.executor_model and args.executor_tokenizer):
        parser.error("--executor-url needs --executor-model and --executor-tokenizer")
    if args.workers < 1 or (args.sample is not None and args.sample < 1) or (args.max_steps is not None and args.max_steps < 1):
        parser.error("--workers, --sample and --max-steps must be at least 1")
    args.label = args.label or f"{args.method} (ours)"
    args.executor_name = args.executor_name or args.executor_model or Path(args.executor_checkpoint).name
    return evaluate(args)


def evaluate(args) -> dict[str, Any]:
    from transformers import AutoTokenizer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    banks = [read_bank(path) for path in args.bank]
    env_kwargs = {**args.env_kwargs, **({"split": args.split} if args.split else {})}
    env_factory = lambda: make_env(args.env, **env_kwargs)
    env = env_factory()
    try:
        task_ids = [spec.task_id for spec in env.tasks()]
        if args.sample is not None:
            task_ids = random.Random(args.sample_seed).sample(task_ids, min(args.sample, len(task_ids)))
        tasks = eval_tasks(env, task_ids)
    finally:
        env.close()
    types = sorted({task.task_type for task in tasks})
    tokenizer = AutoTokenizer.from_pretrained(args.executor_tokenizer or args.executor_checkpoint)
    retriever = make_retriever(args)
    depth = max(*args.k, args.jaccard_k)
    ranked = [retriever.rank([t.query for t in tasks], bank, depth) for bank in banks]

    def guidance(bank: Sequence[BankEntry], ranks: Sequence[int], k: int) -> list[str]:
        return [bank[i].text for i in ranks[:k]]

    jaccard = [jaccard_overlap(ranks, args.jaccard_k) for ranks in ranked]
    known = [j for j in jaccard if j is not None]
    results: dict[str, Any] = {
        "env": args.env, "split": args.split, "banks": list(args.bank), "tasks": len(tasks), "ks": args.k,
        "retriever": args.retriever, "executor": args.executor_name, "method": args.method, "seed": args.seed,
        "jaccard": {"k": args.jaccard_k, "per_bank": jaccard, "mean": statistics.fmean(known) if known else None},
    }
    seeds = [run_seed(args.seed, run) for run in range(len(banks))]
    results["run_seeds"] = seeds
    jobs: dict[tuple[str, str, int], None] = {}
    for bank, ranks, seed in zip(banks, ranked, seeds):
        for k in args.k:
            for task, task_ranks in zip(tasks, ranks):
                jobs[task.task_id, format_guidance(guidance(bank, task_ranks, k)), seed] = None
    episodes: dict[tuple[str, str, int], ExecutorEpisode] = {}
    if not args.retrieval_only:
        limits = {**EXECUTOR_LIMITS.get(args.env, DEFAULT_LIMITS), **({"max_steps": args.max_steps} if args.max_steps else {})}
        client = make_executor_client(args, tokenizer)
        executor = FrozenExecutor(client, tokenizer, max_steps=limits["max_steps"], max_tokens=limits["max_tokens"],
                                  observation_chars=limits["observation_chars"], style=executor_style(args.env))
        episodes = asyncio.run(play_episodes(executor, env_factory, list(jobs), args.workers))
    results["executor_episodes"] = len(episodes)

    per_k: dict[int, dict[str, Any]] = {}
    for k in args.k:
        tokens, per_bank = [], []
        for bank, ranks, seed in zip(banks, ranked, seeds):
            bodies = [guidance(bank, task_ranks, k) for task_ranks in ranks]
            tokens.append(statistics.fmean(guidance_tokens(tokenizer, b) for b in bodies))
            if episodes:
                per_bank.append(bank_metrics(tasks, [format_guidance(b) for b in bodies], episodes, types, seed))
        per_k[k] = summarize(per_bank, tokens)
    results["per_k"] = {str(k): summary for k, summary in per_k.items()}
    results["episodes"] = [{"task_id": task_id, "guidance": text, "seed": seed, "won": e.won, "reward": episode_reward(e),
                            "status": e.status, "steps": len(e.steps), "invalid_replies": sum(s.invalid_reply for s in e.steps)}
                           for (task_id, text, seed), e in episodes.items()]

    sections = []
    if episodes:
        sections.append(sweep_table(per_k, args.label, webshop=args.env == "webshop"))
        sections += paper_tables(args.env, per_k, args.method, args.label, args.executor_name)
    else:
        sections.append(format_table(f"{args.label}: guidance tokens vs k (retrieval only)", ["guidance tokens"],
                                     [(f"k={k}", [f"{s['guidance_tokens']:.1f}"]) for k, s in per_k.items()]))
    paper_jaccard = paper_results.JACCARD_K10.get(args.env, {})
    mean = results["jaccard"]["mean"]
    sections.append(f"Jaccard overlap of retrieved task sets at k = {args.jaccard_k}: ours "
                    f"{'-' if mean is None else f'{100 * mean:.2f}%'} (per bank: "
                    f"{', '.join('-' if j is None else f'{100 * j:.2f}%' for j in jaccard)})"
                    + "".join(f"; paper {name} {value:.2f}%" for name, value in paper_jaccard.items()))
    if args.env in paper_results.GUIDANCE_TOKENS_K10 and 10 in per_k:
        sections.append(f"Guidance block at k = 10: ours {per_k[10]['guidance_tokens']:.0f} tokens; paper (Knowledge "
                        f"Weaver, Qwen3.5-4B tokenizer) ~{paper_results.GUIDANCE_TOKENS_K10[args.env]}")
    table = "\n\n".join(sections)
    print(table)
    (out / "table.txt").write_text(table + "\n")
    if episodes:
        results["plot"] = str(plot_sr_vs_k(out / "sr_vs_k.png", per_k, args.label, args.env))
    tmp = out / ".results.json.tmp"
    tmp.write_text(json.dumps(results, indent=2))
    os.replace(tmp, out / "results.json")
    return results


if __name__ == "__main__":
    main()
