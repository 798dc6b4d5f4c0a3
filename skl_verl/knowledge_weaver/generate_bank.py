"""Generate an evaluation knowledge bank from a trained curator (the paper's separate generation stage).

    # a local HF checkpoint (merged with `python -m verl.model_merger merge`; GPU when available)
    python -m skl_verl.knowledge_weaver.generate_bank --env alfworld --pool pool.jsonl \\
        --curator checkpoints/kw/step40_hf --n 50 --seed 42 --out banks/kw_42.jsonl
    # or a served curator (vllm serve <checkpoint>), or any OpenAI-compatible completions API
    python -m skl_verl.knowledge_weaver.generate_bank --env alfworld --pool pool.jsonl \\
        --endpoint http://127.0.0.1:8000/v1 --model <served name> --tokenizer <checkpoint> --seed 42 --out ...

Entry i: the task type is ``Random(seed * 100000 + i * 100).choice(types)`` over the pool's types with
a usable episode (ALFWorld's in the authors' order, others sorted), and 4 usable episodes of that type are drawn as training draws them
(``--draw``, default the env's: ALFWorld uniformly with seed ``seed * 100000 + i * 100``; WebShop 2 successes +
2 failures with the seed of training group ``32 + i``, ``seed * 100000 + (32 + i) // 8 * 1000 + (32 + i) % 8 *
100``, as the authors' WebShop bank builder). Trajectories are rendered as in training (every action); on
ALFWorld the rendering must also be no longer than a 24-step one (``--rendered-steps``), as the authors'
ALFWorld generator bounds it. The curator writes one entry at temperature 1. Each env retries as the authors' script
for it does (``BANK_RETRIES``; ``--attempts``, ``--retry``): ALFWorld up to 10 replies, each invalid one answered with
a repair turn naming the problem; WebShop one reply (``skill_generation_max_retries: 0``), further attempts sampling
the same prompt again, as their rerun of missing entries does. A reply whose only fault is its length is cut to the
word cap at once (ALFWorld at the last sentence end within it, WebShop at the cap). An entry with no valid reply
stops the generation with an error naming it (``--missing error``, the authors'), before any bank is written;
``--missing skip`` leaves it out with a warning instead (a bank of fewer than ``--n`` entries).

The bank is JSONL, one entry per line: ``entry_id``, ``text``, ``task_type`` (the fields the training
bank's ``state.Entry`` also has, so ``read_bank`` loads both) and ``source`` (how it was made).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skl_verl import checked_jsonl
from skl_verl.knowledge_weaver.entries import parse_entry
from skl_verl.knowledge_weaver.pool import (
    PoolEpisode,
    context_draw,
    draw_context,
    is_usable,
    read_pool,
)
from skl_verl.knowledge_weaver.prompts import BANK_REFERENCE_STEPS, CuratorView, curator_view, fit_curator_prompt
from skl_verl.knowledge_weaver.settings import CONTEXT_DRAWS, CONTEXT_VIEWS
from skl_verl.knowledge_weaver.retrieval import BankEntry
from skl_verl.knowledge_weaver.state import BANK_KIND
from skl_verl.rollout.clients import generation_client
from skl_verl.rollout.prompt_safety import neutralise_special_tokens

REPAIR = ("That reply is not a valid entry: {error}. Reply again with exactly one <skill>...</skill> block holding "
          "one paragraph of at most {max_words} words, with nothing before or after the tags.")


@dataclass(frozen=True)
class GeneratedEntry:
    entry_id: str
    text: str
    task_type: str
    attempts: int
    truncated: bool
    context_task_ids: tuple[str, ...]


def entry_type(types: Sequence[str], seed: int, index: int) -> str:
    """The task type of entry ``index`` of the bank seeded ``seed``."""
    return random.Random(seed * 100000 + index * 100).choice(list(types))


AUTHORS_BUNDLE_GROUPS = (32, 8)
"""The authors' WebShop bank builder seeds entry i's draw as training group 32 + i (after the zero-shot first step
of 32 groups), in rounds of 8 groups."""


def draw_seed(seed: int, index: int, draw: str) -> int:
    """The seed of entry ``index``'s trajectory draw."""
    if draw == "bundles":
        skipped, per_round = AUTHORS_BUNDLE_GROUPS
        round_index, group = divmod(skipped + index, per_round)
        return seed * 100000 + round_index * 1000 + group * 100
    return seed * 100000 + index * 100


def pool_types(pool: Sequence[PoolEpisode]) -> list[str]:
    """The task types a context can be built for (at least one usable episode): ALFWorld's in the authors' order
    (``build.ALFWORLD_TYPE_ORDER``, which their generator draws from), others sorted."""
    from skl_verl.knowledge_weaver.build import ALFWORLD_TYPE_ORDER

    types = {r.task_type for r in pool if is_usable(r.episode)}
    if types <= set(ALFWORLD_TYPE_ORDER):
        return [t for t in ALFWORLD_TYPE_ORDER if t in types]
    return sorted(types)


_SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")


@dataclass(frozen=True)
class BankRetry:
    """How one env's bank generation answers an invalid reply (the authors' script for that env)."""

    attempts: int
    """Replies per entry."""
    retry: str
    """``repair``: the next reply follows a repair turn naming the error; ``resample``: the same prompt again."""
    sentence_cut: bool
    """An over-long body is cut to the word cap at the last sentence end within it (else at the cap)."""


RETRIES = ("repair", "resample")
MISSING = ("error", "skip")
BANK_RETRIES = {
    # generality_eval/config/alfworld_skillbank_generation.yaml (max_attempts_per_skill 10, truncate_overlong_skill)
    # with generate_external_skills.py's _validation_retry_messages and _truncate_skill_body.
    "alfworld": BankRetry(10, "repair", True),
    # webshop_generality/skillbank_generation.py: 1 + skill_generation_max_retries (0 in train_webshop.yaml) sends of
    # the same request, an over-long description cut at its 100th word; a rerun retries the missing entries.
    "webshop": BankRetry(1, "resample", False),
}
"""Each env's retry rule as the authors generated its banks; other envs (FrozenLake in tests) take ALFWorld's."""


def bank_retry(env_name: str) -> BankRetry:
    return BANK_RETRIES.get(env_name, BANK_RETRIES["alfworld"])


def cut_to_word_cap(body: str, max_words: int, at_sentence: bool = True) -> str:
    """The first ``max_words`` words, ended at the last sentence end among them when there is one
    (``at_sentence``)."""
    words = body.split()[:max_words]
    ends = [i for i, word in enumerate(words) if _SENTENCE_END.search(word)] if at_sentence else []
    return " ".join(words[: ends[-1] + 1] if ends else words)


def truncated_entry(reply: str, max_words: int, at_sentence: bool = True) -> str | None:
    """The body of a reply that is invalid only for its length, cut to the cap; None otherwise."""
    uncapped = parse_entry(reply, max_words=sys.maxsize)
    if uncapped.valid:
        cut = parse_entry(f"<skill>{cut_to_word_cap(uncapped.body, max_words, at_sentence)}</skill>", max_words)
        if cut.valid:
            return cut.body
    return None


@dataclass(frozen=True)
class MissingEntry:
    """An entry the curator wrote no valid reply for."""

    entry_id: str
    task_type: str
    attempts: int
    error: str


class BankIncomplete(RuntimeError):
    """Some entries never parsed (``missing="error"``): no bank is written."""


async def generate_entry(client: Any, tokenizer: Any, env_name: str, pool: Sequence[PoolEpisode], types: Sequence[str],
                         seed: int, index: int, *, trajectories: int = 4, attempts: int | None = None,
                         retry: str | None = None, max_words: int = 100, prompt_budget: int = 5744,
                         max_tokens: int = 256, view: CuratorView | None = None,
                         draw: str | None = None) -> GeneratedEntry | MissingEntry:
    """Entry ``index``; ``attempts`` and ``retry`` None: the env's (``BANK_RETRIES``)."""
    rule = bank_retry(env_name)
    attempts, retry = attempts or rule.attempts, retry or rule.retry
    task_type = entry_type(types, seed, index)
    draw = context_draw(env_name, draw)
    episodes = draw_context(pool, task_type, trajectories, draw_seed(seed, index, draw), draw)
    context_ids = tuple(e.task_id for e in episodes)
    # The same renderer as training (view None: the env's bank view: every action, on ALFWorld within the length
    # of a 24-step rendering), so the banks are written from the trajectories as the curator learned to read them.
    view = view or curator_view(env_name, reference_steps=BANK_REFERENCE_STEPS.get(env_name))
    messages, _, _ = fit_curator_prompt(tokenizer, env_name, task_type, episodes, prompt_budget, max_words, view=view)
    params = {"temperature": 1.0, "top_p": 1.0, "max_tokens": max_tokens}
    conversation = messages
    error = ""
    for attempt in range(1, attempts + 1):
        prompt_ids = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True,
                                                   enable_thinking=False)
        prompt_ids = list(prompt_ids if isinstance(prompt_ids, list) else prompt_ids["input_ids"])
        output = await client.generate(f"bank{seed}:entry{index}:attempt{attempt}", prompt_ids=prompt_ids,
                                       sampling_params=params)
        reply = tokenizer.decode(list(output.token_ids), skip_special_tokens=True)
        parsed = parse_entry(reply, max_words)
        if parsed.valid:
            return GeneratedEntry(f"entry_{index:06d}", parsed.body, task_type, attempt, False, context_ids)
        # Both authors' scripts keep an over-long entry, cut, rather than asking again.
        body = truncated_entry(reply, max_words, rule.sentence_cut)
        if body is not None:
            return GeneratedEntry(f"entry_{index:06d}", body, task_type, attempt, True, context_ids)
        error = parsed.error
        if retry == "repair":
            # Only the latest failed reply is shown, so the prompt stays within budget + one reply. It is shown as
            # text: a reply that spells out <|im_start|> must not become a turn when it is templated again.
            repair = REPAIR.format(error=parsed.error, max_words=max_words)
            conversation = [*messages, {"role": "assistant", "content": neutralise_special_tokens(reply, tokenizer)},
                            {"role": "user", "content": neutralise_special_tokens(repair, tokenizer)}]
    return MissingEntry(f"entry_{index:06d}", task_type, attempts, error)


async def generate_bank(client: Any, tokenizer: Any, env_name: str, pool: Sequence[PoolEpisode], n: int, seed: int,
                        concurrency: int = 16, missing: str = "error", **options: Any) -> list[GeneratedEntry]:
    """Entries 0..n-1 in index order. Entries with no valid reply raise ``BankIncomplete`` naming each, once all are
    done (``missing="error"``), or are left out with a warning (``"skip"``). Replies are seeded per request id, so
    the bank does not depend on how concurrent requests interleave (and a rerun with the same options fails the
    same way: raise ``attempts`` instead)."""
    if missing not in MISSING:
        raise ValueError(f"missing must be one of {MISSING}, got {missing!r}")
    types = pool_types(pool)
    if not types:
        raise ValueError("the trajectory pool has no usable episode")
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> GeneratedEntry | MissingEntry:
        async with gate:
            return await generate_entry(client, tokenizer, env_name, pool, types, seed, index, **options)

    results = await asyncio.gather(*(one(i) for i in range(n)))
    failed = [r for r in results if isinstance(r, MissingEntry)]
    described = "; ".join(f"{m.entry_id} ({m.task_type}): no valid reply in {m.attempts} attempts (last: {m.error})"
                          for m in failed)
    if failed and missing == "error":
        raise BankIncomplete(f"{len(failed)} of {n} entries never parsed: {described}. No bank was written; rerun "
                             "with a larger --attempts (the earlier attempts' replies come out the same), or "
                             "--missing skip to write the bank without them")
    if failed:
        warnings.warn(f"left out of the bank: {described}", stacklevel=2)
    return [r for r in results if isinstance(r, GeneratedEntry)]


def write_bank(path: str | os.PathLike[str], entries: Sequence[GeneratedEntry], curator: str, seed: int) -> Path:
    path = Path(path)
    checked_jsonl.write(path, BANK_KIND, ({"entry_id": e.entry_id, "text": e.text, "task_type": e.task_type,
                                          "source": {"curator": curator, "seed": seed, "attempts": e.attempts,
                                                     "truncated": e.truncated, "context_task_ids": list(e.context_task_ids)}}
                                         for e in entries))
    return path


def read_bank(path: str | os.PathLike[str]) -> list[BankEntry]:
    """A generated bank, or a training bank snapshot (``BankStore``'s ``bank_*.jsonl``): its entries'
    ids and texts."""
    entries: list[BankEntry] = []
    seen: dict[str, int] = {}
    for number, data in enumerate(checked_jsonl.read(path, BANK_KIND), start=2):  # line 1 is the header
        try:
            entries.append(BankEntry(str(data["entry_id"]), str(data["text"])))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: not a bank entry (no {exc})") from None
        if entries[-1].entry_id in seen:
            raise ValueError(f"{path}:{number}: entry {entries[-1].entry_id!r} appears twice (first on line {seen[entries[-1].entry_id]})")
        seen[entries[-1].entry_id] = number
    return entries


def make_curator_client(args, tokenizer):
    return generation_client(tokenizer, args.max_tokens, endpoint=args.endpoint, served_model=args.model,
                             checkpoint=args.curator, seed=args.seed)


def main(argv: list[str] | None = None) -> list[GeneratedEntry]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True, help="alfworld or webshop (picks the action vocabulary in the prompt)")
    parser.add_argument("--pool", required=True, help="trajectory pool JSONL (pool.write_pool)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--curator", help="local Hugging Face checkpoint of the curator")
    source.add_argument("--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--model", help="model name at the endpoint")
    parser.add_argument("--tokenizer", help="tokenizer path for --endpoint (default: --model)")
    parser.add_argument("--n", type=int, default=50, help="entries to generate (paper: 50)")
    parser.add_argument("--seed", type=int, required=True, help="bank seed (42, 43, 44 for the paper's three banks)")
    parser.add_argument("--trajectories", type=int, default=4, help="trajectories per context (paper: 4)")
    parser.add_argument("--attempts", type=int, help="replies per entry (default: the env's, ALFWorld 10, WebShop 1; "
                        "generate_bank.BANK_RETRIES)")
    parser.add_argument("--retry", choices=RETRIES, help="after an invalid reply: repair (a turn naming the error) or "
                        "resample (the same prompt again); default: the env's, ALFWorld repair, WebShop resample")
    parser.add_argument("--missing", choices=MISSING, default="error", help="an entry with no valid reply: error (the "
                        "authors': stop, naming it, and write no bank) or skip (leave it out with a warning)")
    parser.add_argument("--max-words", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=256, help="new tokens per reply")
    parser.add_argument("--prompt-budget", type=int, default=5744, help="curator prompt tokens (6000 - 256)")
    parser.add_argument("--draw", choices=CONTEXT_DRAWS, help="how a context's 4 trajectories are drawn (default: the "
                        "env's: uniform on ALFWorld, 2 successes + 2 failures on WebShop)")
    parser.add_argument("--view", choices=CONTEXT_VIEWS, default="complete",
                        help="complete: every action (the authors' code); first_steps: the first --rendered-steps")
    parser.add_argument("--rendered-steps", type=int, help="first_steps: steps shown per trajectory (default 24); "
                        "complete: the rendering is no longer than one of this many steps (default: ALFWorld 24, "
                        "WebShop no bound)")
    parser.add_argument("--observation-chars", type=int,
                        help="characters per observation and result (default: the env's, 120 ALFWorld / 400 WebShop)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.endpoint and not args.model:
        parser.error("--endpoint needs --model")
    for name in ("n", "trajectories", "max_words", "max_tokens", "prompt_budget", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: must be at least 1")
    for name in ("attempts", "rendered_steps", "observation_chars"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: must be at least 1")
    reference = None if args.view == "first_steps" else (args.rendered_steps or BANK_REFERENCE_STEPS.get(args.env))
    view = curator_view(args.env, args.rendered_steps, args.observation_chars, args.view, reference)

    from transformers import AutoTokenizer

    pool = read_pool(args.pool)
    tokenizer = AutoTokenizer.from_pretrained((args.tokenizer or args.model) if args.endpoint else args.curator)
    client = make_curator_client(args, tokenizer)
    entries = asyncio.run(generate_bank(client, tokenizer, args.env, pool, args.n, args.seed, concurrency=args.concurrency,
                                        missing=args.missing, trajectories=args.trajectories, attempts=args.attempts,
                                        retry=args.retry, max_words=args.max_words, prompt_budget=args.prompt_budget,
                                        max_tokens=args.max_tokens, view=view, draw=args.draw))
    write_bank(args.out, entries, f"{args.endpoint} {args.model}" if args.endpoint else args.curator, args.seed)
    retried = sum(e.attempts > 1 for e in entries)
    print(f"{args.out}: {len(entries)} of {args.n} entries ({retried} after more than one reply, "
          f"{sum(e.truncated for e in entries)} truncated, {args.n - len(entries)} skipped)")
    return entries


if __name__ == "__main__":
    main()
