"""Knowledge Weaver's MI rescoring cost per candidate against one plain forward of the same tokens, on CPU.

Run from the repository root::

    python benchmarks/mi_rescoring.py [--contexts 8] [--context-tokens 600] [--candidate-tokens 128] [--repeats 5]

Eq. 6 needs log pi_old(z_t | x_l, z_<t) of a candidate z under each of the N contexts of its comparison
set. The model is the tiny local Qwen2 (``skl_verl.rollout.tiny_model``, no format warm-up; ``--hidden-size``
and ``--layers`` make it larger), its random weights being irrelevant to cost. Per candidate: N contexts of
random token ids, lengths spread +-10% around ``--context-tokens`` (as curator prompts differ), and one
candidate of ``--candidate-tokens``. Contenders:

* ``plain_forward``: one forward of x_own + z, the cost floor (scoring z once, under its own context).
* ``naive``: the real path, ``credit.rescore_under_contexts`` through ``HFGenerationClient``: N requests
  with ``prompt_logprobs=0, max_tokens=1``, served one at a time; each runs the prompt-logprob forward and
  then ``model.generate`` of one token (a second full forward, which vLLM would share with the first).
* ``sequential_forwards``: N plain forwards, one per context (the naive path without its 1-token generate).
* ``batched``: one right-padded forward of all N sequences, log-probs gathered at the candidate's rows.

Timing: ``--threads`` torch threads (default 1: on a shared, loaded machine OpenMP threads that spin-wait
for busy cores made 2-thread medians 5-50x slower and unstable); one warm-up round, then ``--repeats`` rounds, each contender once per round in a rotated
order; medians and their ratios to ``plain_forward`` and ``batched``. The three scoring paths are
checked to give the same (N, T) log-probs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

# benchmarks/envs.py would shadow the envs package when this folder leads sys.path (running as a script).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

TOLERANCE = 1e-4


def candidate_rows(logprobs: torch.Tensor, context_length: int, candidate_length: int) -> torch.Tensor:
    """Log-probs of the candidate's tokens from next-token log-probs of x + z (row i scores token i + 1)."""
    return logprobs[context_length - 1 : context_length - 1 + candidate_length]


@torch.no_grad()
def token_logprobs(model, sequence: list[int]) -> torch.Tensor:
    input_ids = torch.tensor([sequence])
    logits = model(input_ids=input_ids).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, input_ids[0, 1:, None])[:, 0]


def sequential_forwards(model, contexts: list[list[int]], candidate: list[int]) -> torch.Tensor:
    return torch.stack([candidate_rows(token_logprobs(model, [*c, *candidate]), len(c), len(candidate))
                        for c in contexts]).double()


@torch.no_grad()
def batched_forward(model, contexts: list[list[int]], candidate: list[int], pad_id: int) -> torch.Tensor:
    sequences = [[*c, *candidate] for c in contexts]
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad_id)
    attention_mask = torch.zeros_like(input_ids)
    for row, sequence in enumerate(sequences):
        input_ids[row, : len(sequence)] = torch.tensor(sequence)
        attention_mask[row, : len(sequence)] = 1
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    logprobs = torch.log_softmax(logits, -1).gather(-1, input_ids[:, 1:, None])[..., 0]
    return torch.stack([candidate_rows(logprobs[row], len(c), len(candidate)) for row, c in enumerate(contexts)]).double()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--contexts", type=int, default=8, help="N, the MI comparison set size (paper: 8)")
    parser.add_argument("--context-tokens", type=int, default=600)
    parser.add_argument("--candidate-tokens", type=int, default=128, help="paper: at most 256")
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes: tiny sizes, one repeat; checks it runs (CI)")
    args = parser.parse_args()
    if args.quick:
        args.contexts, args.context_tokens, args.candidate_tokens, args.repeats = 2, 64, 16, 1
    torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skl_verl.knowledge_weaver.credit import rescore_under_contexts
    from skl_verl.rollout.hf_client import HFGenerationClient
    from skl_verl.rollout.tiny_model import build_tiny_model

    with tempfile.TemporaryDirectory() as folder:
        path = build_tiny_model(folder, seed=args.seed, hidden_size=args.hidden_size, num_layers=args.layers, format_steps=0)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path).eval()
    client = HFGenerationClient(model, tokenizer, max_new_tokens=1)
    generator = torch.Generator().manual_seed(args.seed)
    low = len(tokenizer.all_special_ids) + 1
    vocab = len(tokenizer)

    def tokens(count: int) -> list[int]:
        return torch.randint(low, vocab, (count,), generator=generator).tolist()

    spread = max(args.context_tokens // 10, 1)
    lengths = torch.randint(args.context_tokens - spread, args.context_tokens + spread + 1, (args.contexts,), generator=generator)
    contexts = [tokens(int(n)) for n in lengths]
    candidate = tokens(args.candidate_tokens)

    contenders = {
        "plain_forward": lambda: token_logprobs(model, [*contexts[0], *candidate]),
        "naive": lambda: asyncio.run(rescore_under_contexts(client, contexts, candidate, "bench")),
        "sequential_forwards": lambda: sequential_forwards(model, contexts, candidate),
        "batched": lambda: batched_forward(model, contexts, candidate, tokenizer.pad_token_id),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    results = {}
    names = list(contenders)
    for round_ in range(args.repeats + 1):
        for name in names[round_ % len(names):] + names[: round_ % len(names)]:
            start = time.perf_counter()
            results[name] = contenders[name]()
            if round_:  # round 0 warms up
                times[name].append(time.perf_counter() - start)

    parameters = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__}, torch.get_num_threads() = {torch.get_num_threads()}; tiny Qwen2 "
          f"{args.layers} layers x {args.hidden_size} hidden ({parameters / 1e6:.2f}M parameters), CPU")
    print(f"per candidate: N = {args.contexts} contexts of {min(lengths)}-{max(lengths)} tokens, "
          f"candidate of {args.candidate_tokens} tokens")
    median = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    width = max(len(name) for name in median)
    print(f"\nmedian of {args.repeats} (after 1 warm-up), interleaved:")
    print(f"{'contender':<{width}} | {'median ms':>9} | {'x plain_forward':>15} | {'x batched':>9}")
    print(f"{'-' * width}-+-{'-' * 9}-+-{'-' * 15}-+-{'-' * 9}")
    for name, ms in median.items():
        print(f"{name:<{width}} | {ms:>9.2f} | {ms / median['plain_forward']:>14.2f}x | {ms / median['batched']:>8.2f}x")

    naive = results["naive"]
    print(f"\nchecks (tolerance {TOLERANCE:g} on the (N, T) log-probs):")
    for name in ("sequential_forwards", "batched"):
        diff = float((results[name] - naive).abs().max())
        print(f"  {name} vs naive: max |diff| = {diff:.2e}  {'ok' if diff <= TOLERANCE else 'MISMATCH'}")
    own = candidate_rows(results["plain_forward"], len(contexts[0]), len(candidate)).double()
    diff = float((own - naive[0]).abs().max())
    print(f"  plain_forward (own context) vs naive row 0: max |diff| = {diff:.2e}  {'ok' if diff <= TOLERANCE else 'MISMATCH'}")


if __name__ == "__main__":
    main()
