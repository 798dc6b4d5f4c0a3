"""Measure the activation memory the capacity pre-flight estimates (skl_verl/trainer/capacity.py), on a bare CUDA machine.

Needs only torch and transformers (no verl, Ray or vLLM): a random-weight model built from a config.json (no
download), bf16 under bf16 autocast as verl's FSDP engine runs it, gradient checkpointing as the recipes set it,
then one micro-batch of the recipes' token counts:

- update: forward + backward of log-probs (a chunked cross entropy with flash-attn's memory behaviour: no
  [tokens, vocab] output, the gradient written once) and, with ``--update-entropy``, the entropy (verl's
  ``entropy_from_logits``, compiled as verl's default, chunked or eager);
- log-prob: the same forward without autograd, log-probs and entropy.

It prints ``torch.cuda.max_memory_allocated`` above the model's weights and grads (allocated before) beside the
estimate of ``skl_verl.trainer.capacity`` for the same shape. FSDP's sharded state and gathered weights are not in
either number. On ``--device cpu`` (tests) the measure is the peak of live tensor bytes seen through a dispatch mode.

    python scripts/gpu_memory_probe.py --model tests/trainer/model_configs/qwen3-4b --update-tokens 32768 \\
        --log-prob-tokens 65536 --update-entropy
    python scripts/gpu_memory_probe.py --model tests/trainer/model_configs/qwen2.5-7b-instruct \\
        --update-tokens 40960 --log-prob-tokens 81920
    python scripts/gpu_memory_probe.py --model tests/trainer/model_configs/qwen3.5-4b   # the KW curator
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import weakref
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from skl_verl.trainer import capacity, model_shape  # noqa: E402  (import nothing from verl, Ray, vLLM or omegaconf)

GIB = 1 << 30


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """verl/utils/torch_functional.py ``entropy_from_logits``."""
    pd = torch.nn.functional.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)


def entropy_from_logits_with_chunking(logits: torch.Tensor, chunk_size: int = 2048) -> torch.Tensor:
    """verl/utils/torch_functional.py ``entropy_from_logits_with_chunking``."""
    entropy = torch.zeros(logits.shape[0], device=logits.device)
    for i in range(0, logits.shape[0], chunk_size):
        chunk = logits[i: i + chunk_size].float()
        pd = torch.nn.functional.softmax(chunk, dim=-1)
        entropy[i: i + chunk_size] = torch.logsumexp(chunk, dim=-1) - torch.sum(pd * chunk, dim=-1)
    return entropy


class ChunkedLogProbs(torch.autograd.Function):
    """Log-probs of ``labels`` with flash-attn's cross entropy's memory: saves the logits and a per-row log-sum-exp,
    returns one float per row, and its backward allocates one [rows, vocab] gradient in the logits' dtype."""

    @staticmethod
    def forward(ctx, logits, labels, chunk=4096):
        lse = torch.cat([torch.logsumexp(logits[i: i + chunk].float(), -1) for i in range(0, len(logits), chunk)])
        ctx.save_for_backward(logits, labels, lse)
        ctx.chunk = chunk
        return logits.gather(-1, labels[:, None]).squeeze(-1).float() - lse

    @staticmethod
    def backward(ctx, grad):
        logits, labels, lse = ctx.saved_tensors
        out = torch.empty_like(logits)
        for i in range(0, len(logits), ctx.chunk):
            rows = slice(i, i + ctx.chunk)
            g = -torch.exp(logits[rows].float() - lse[rows, None]) * grad[rows, None]
            g.scatter_add_(-1, labels[rows, None], grad[rows, None])
            out[rows] = g.to(out.dtype)
        return out, None, None


class LiveBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """Peak bytes of live tensor storages created inside the mode (CPU stand-in for max_memory_allocated)."""

    def __init__(self):
        super().__init__()
        self.live, self.current, self.peak = {}, 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in torch.utils._pytree.tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor):
                self._track(tensor)
        return out

    def _track(self, tensor):
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key == 0:
            return
        count, nbytes = self.live.get(key, (0, storage.nbytes()))
        if count == 0:
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        self.live[key] = (count + 1, nbytes)
        weakref.finalize(tensor, self._release, key)

    def _release(self, key):
        count, nbytes = self.live[key]
        if count == 1:
            del self.live[key]
            self.current -= nbytes
        else:
            self.live[key] = (count - 1, nbytes)


def build_model(config_json: dict, device: str, checkpointing: bool):
    from transformers import AutoConfig, AutoModelForCausalLM

    # A multimodal checkpoint (Qwen3.5) trains text-only batches through its language model: build that one.
    source = config_json.get("text_config") or config_json
    fields = {k: v for k, v in source.items() if k not in ("architectures", "torch_dtype")}
    config = AutoConfig.for_model(**fields)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa").to(device)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def entropy_function(mode: str):
    if mode == "compiled":
        return torch.compile(entropy_from_logits, dynamic=True)
    return {"eager": entropy_from_logits, "chunked": entropy_from_logits_with_chunking}[mode]


def run_pass(model, tokens: int, *, grad: bool, entropy, device: str) -> int:
    """One micro-batch of ``tokens`` tokens (one packed row); returns the peak bytes above what was allocated before."""
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, tokens), device=device)
    labels = torch.roll(ids[0], -1)
    tracker = LiveBytes() if device == "cpu" else None
    if device != "cpu":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    model.train(grad)
    with tracker or contextlib.nullcontext(), torch.set_grad_enabled(grad), \
            torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(input_ids=ids, use_cache=False).logits.squeeze(0)
        log_probs = ChunkedLogProbs.apply(logits, labels) if grad else ChunkedLogProbs.forward(_Ctx(), logits, labels)
        loss = log_probs.sum() + (entropy(logits).sum() if entropy is not None else 0)
        if grad:
            loss.backward()
        del logits, log_probs, loss
    if device == "cpu":
        return tracker.peak
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


class _Ctx:  # ChunkedLogProbs.forward without autograd
    def save_for_backward(self, *tensors):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a folder with config.json (tests/trainer/model_configs/...)")
    parser.add_argument("--update-tokens", type=int, default=32768, help="tokens of one update micro-batch")
    parser.add_argument("--log-prob-tokens", type=int, default=65536, help="tokens of one log-prob micro-batch")
    parser.add_argument("--entropy", choices=capacity.ENTROPY_MODES, default="compiled",
                        help="verl's entropy: compiled (fsdp_config.use_torch_compile, the default), chunked, eager")
    parser.add_argument("--update-entropy", action="store_true", help="the update computes the entropy (entropy_coeff != 0)")
    parser.add_argument("--no-checkpointing", action="store_true", help="without gradient checkpointing")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--tiny", action="store_true", help="shrink the model to 2 layers, hidden 64, vocab 512 (tests)")
    args = parser.parse_args(argv)

    config_json = json.loads((Path(args.model) / "config.json").read_text())
    if args.tiny:
        text = config_json.get("text_config") or config_json
        text.update(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, vocab_size=512)
        if "layer_types" in text:  # a hybrid keeps one layer of each kind
            text.update(layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
                        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16)
        config_json.pop("vision_config", None)
    shape = model_shape.model_shape(config_json)
    checkpointing = not args.no_checkpointing
    torch.manual_seed(0)
    model = build_model(config_json, args.device, checkpointing)
    for parameter in model.parameters():  # grads exist before, as FSDP's do: the pass adds one unit's at a time
        parameter.grad = torch.zeros_like(parameter)
    entropy = entropy_function(args.entropy)
    layer = model_shape.largest_layer_parameters(shape)
    unit = layer if shape.tied else max(layer, shape.vocab * shape.hidden)
    print(f"{shape.architecture}: {model_shape.parameter_count(shape) / 1e9:.3f}B params, device {args.device}, "
          f"gradient checkpointing {checkpointing}, entropy {args.entropy}")
    update_entropy = entropy if args.update_entropy else None
    measured = run_pass(model, args.update_tokens, grad=True, entropy=update_entropy, device=args.device)
    estimate = capacity.update_activation_bytes(shape, args.update_tokens, checkpointing=checkpointing,
                                                entropy=args.entropy if args.update_entropy else None) + 2 * unit
    _report(f"update (forward + backward, {args.update_tokens:,} tokens)", measured, estimate)
    model.zero_grad(set_to_none=True)
    measured = run_pass(model, args.log_prob_tokens, grad=False, entropy=entropy, device=args.device)
    estimate = capacity.log_prob_activation_bytes(shape, args.log_prob_tokens, entropy=args.entropy)
    _report(f"log-prob (no grad, {args.log_prob_tokens:,} tokens)", measured, estimate)
    return 0


def _report(what: str, measured: int, estimate: int) -> None:
    error = 100 * (estimate - measured) / max(measured, 1)
    print(f"{what}: measured {measured / GIB:.3f} GiB ({measured:,} B), estimate {estimate / GIB:.3f} GiB "
          f"({estimate:,} B), estimate {error:+.1f}% of measured")


if __name__ == "__main__":
    sys.exit(main())
