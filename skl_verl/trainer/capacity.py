"""GPU memory per GPU and phase, checked before any worker starts: the capacity table of a composed verl config.

From the model's ``config.json`` (shapes only, no weights) and the config verl 0.9.1 runs (FSDP2 actor, optional
critic and reference model, vLLM rollout colocated on the same GPUs), each phase of a training step gets a peak:

- **rollout**: what the trainer keeps on the GPU while vLLM generates (fp32 params and AdamW states unless
  offloaded) + vLLM's share (``gpu_memory_utilization`` x the GPU: weights, its activations, the KV cache that fills
  the rest) + the ``prompt_logprobs`` transient of loops that rescore (not in vLLM's memory profile);
- **weight sync**: trainer state + vLLM's weights woken up + the transfer bucket;
- **log-prob** (actor, old log-probs and entropy), **ref** (reference log-probs), **critic** and **update** (actor
  forward + backward + AdamW step): FSDP state, the gathered bf16 layer, activations and the logits of the micro-batch.

Every formula is a pure function below with the verl or transformers source it reads. Logits are bf16, not fp32:
the FSDP engine runs the model under ``torch.autocast(bfloat16)`` with bf16 compute params
(``verl/workers/engine/fsdp/transformer_impl.py`` ``forward_step``, ``MixedPrecisionPolicy``) and transformers 5
does not upcast them (``modeling_qwen2.py``: "do not upcast them to float"). What is fp32 is the entropy's eager
softmax (autocast's fp32 list), which is why compiling the entropy matters.

Nothing here imports verl, Ray, vLLM or omegaconf at module level (``scripts/gpu_memory_probe.py`` imports it on a
machine with only torch and transformers); a config is read through ``.get``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from skl_verl.options import ConfigError, Option
from skl_verl.trainer.model_shape import (ModelShape, critic_parameter_count, largest_layer_parameters,
                                          linear_state_bytes_per_sequence, model_shape, parameter_count)

GIB = 1 << 30

CLUSTER_OPTIONS = {
    # What CUDA reports for an H100 80GB (its 81,559 MiB less the driver's share), rounded down; an H200: 139.
    "gpu_memory_gib": Option(float, 79.0, low=1),
    # A node's memory and CPUs for its env workers (skl_verl.trainer.env_capacity); null: the launching machine's.
    "memory_gib_per_node": Option(float, None, low=1, optional=True),
    "cpus_per_node": Option(int, None, low=1, optional=True),
}
"""``skl.cluster.*``: the machines a run is checked against (``skl_verl.trainer.config_checks`` checks the section)."""

CUDA_CONTEXTS_BYTES = GIB
"""The trainer's and vLLM's CUDA contexts, NCCL and cuBLAS workspaces on each GPU (two processes, ~0.5 GiB each);
vLLM's own profile does not count its context (it is created before the baseline)."""

VLLM_RESERVE_BYTES = GIB
"""What vLLM keeps from its ``gpu_memory_utilization`` share beside weights, activations and KV cache (CUDA graph
pools, non-torch allocations it profiles), an estimate."""

TIGHT_FRACTION = 0.9
"""A phase above this fraction of the GPU is flagged in the table: allocator fragmentation and what the estimate
leaves out live there."""


# ------------------------------------------------------------------------------------ activations, bytes per token

def saved_layer_bytes_per_token(shape: ModelShape) -> int:
    """What autograd saves for one decoder layer's backward, per token, bf16 compute: two RMSNorms (fp32 input 4H,
    rsqrt 4, bf16 normed 2H, the projections' input 2H: 16H), the MLP's gate, act, up and product (8I), attention's
    q, out (4 q_dim), k, v (4 kv_dim) and log-sum-exp (4 heads), Qwen3's q/k norms (6 q_dim + 6 kv_dim + 4 heads).
    Counted with ``torch.autograd.graph.saved_tensors_hooks`` on transformers 5.10's Qwen2/Qwen3 layers (exact)."""
    per_token = (16 * shape.hidden + 8 * shape.intermediate + 4 * shape.q_dim + 4 * shape.kv_dim
                 + 4 * shape.heads + 8)
    if shape.qk_norm:
        per_token += 6 * shape.q_dim + 6 * shape.kv_dim + 4 * (shape.heads + shape.kv_heads)
    if shape.attention_gate:
        # Qwen3.5: the gate's sigmoid and product (8 q_dim), its (1 + w) RMSNorms' fp32 copies (4H), k/v (2 kv_dim);
        # counted the same way on transformers 5.9's Qwen3_5DecoderLayer (within 0.2% at Qwen3.5-4B's sizes).
        per_token += 4 * shape.hidden + 8 * shape.q_dim + 2 * shape.kv_dim
    return per_token


def saved_linear_layer_bytes_per_token(shape: ModelShape) -> int:
    """What autograd saves for one Gated DeltaNet layer, per token: the norms and MLP as a full-attention layer
    (20H + 8I) and the mixer's projections, convolution, L2-normed q/k expanded to the value heads and the chunked
    delta rule's fp32 64 x 64 blocks per value head. Fitted (least squares over 14 random small shapes, within 0.5%;
    within 3% at Qwen3.5-4B's sizes) to saved-tensor counts of transformers 5.9's torch path, the one a machine
    without flash-linear-attention runs; fla's fused kernels save less, so this is an upper bound there."""
    linear = shape.linear
    if linear is None:
        return 0
    return (20 * shape.hidden + 8 * shape.intermediate + 17 * linear.key_heads * linear.key_dim // 2
            + 36 * linear.value_width + 33 * linear.value_heads * linear.key_dim + 109 * 64 * linear.value_heads)


def saved_model_bytes_per_token(shape: ModelShape) -> int:
    """Every layer's saved tensors, per token, without checkpointing."""
    linear_layers = shape.linear.layers if shape.linear else 0
    return (shape.attention_layers * saved_layer_bytes_per_token(shape)
            + linear_layers * saved_linear_layer_bytes_per_token(shape))


def checkpoint_bytes_per_token(shape: ModelShape) -> int:
    """With gradient checkpointing (verl: ``gradient_checkpointing_enable(use_reentrant=False)``,
    ``transformer_impl._build_module``) a layer keeps only its bf16 input."""
    return 2 * shape.hidden


def layer_backward_bytes_per_token(shape: ModelShape) -> int:
    """The transient of one layer's backward beside its saved tensors: gradients of the MLP's intermediates
    (two of 2I at once) and of the hidden states (2 x 2H). Fitted within 5% to live-tensor peaks measured on CPU."""
    return 4 * shape.intermediate + 4 * shape.hidden


def layer_inference_bytes_per_token(shape: ModelShape) -> int:
    """One layer's transient without autograd (log-prob passes): the MLP's act, up and product alive at once (6I)
    and the residual, fp32 norm and attention tensors (8H). Within 2% of measured no-grad peaks. A Gated DeltaNet
    layer, the larger, adds 32 bytes per value head x key dim (the torch path's fp32 q, k, v and state updates
    expanded to the value heads): within 2% of the no-grad peak of one Qwen3.5-4B-sized layer at 512 tokens."""
    linear = shape.linear
    mixer = 32 * linear.value_heads * linear.key_dim if linear else 0
    return 6 * shape.intermediate + 8 * shape.hidden + mixer


ENTROPY_MODES = ("compiled", "chunked", "eager")


def entropy_mode(engine: Mapping[str, Any]) -> str:
    """How verl's FSDP engine computes the entropy (``transformer_impl.FSDPEngine.__init__``): ``torch.compile`` of
    ``entropy_from_logits[_with_chunking]`` when ``use_torch_compile`` (``fsdp_config``, verl's default true; the
    actor-level ``use_torch_compile`` is not read by this engine), else the eager function."""
    if engine.get("use_torch_compile", True):
        return "compiled"
    return "chunked" if engine.get("entropy_from_logits_with_chunking", False) else "eager"


def logits_bytes_per_element(*, grad: bool, entropy: str | None, temperature_one: bool = True) -> int:
    """Bytes per (token, vocab) element of a micro-batch's logits pass, at its peak (verl 0.9.1
    ``FSDPEngineWithLMHead.prepare_model_outputs``, ``verl/utils/torch_functional.py``):

    - the bf16 logits (2); a temperature other than 1 divides them into a second copy (2, forward);
    - log-probs through flash-attn's cross entropy (``logprobs_from_logits``): no [tokens, vocab] output; its backward
      writes the gradient into the logits in place, unless the entropy is computed too (``inplace_backward=False``: 2);
    - the entropy (``entropy=None``: not computed). No grad (log-prob pass): compiled is one fused reduction (0);
      chunked works 2,048 rows at a time (0 per element); eager ``entropy_from_logits`` materialises the fp32 softmax
      (autocast's fp32 list) and the fp32 product ``pd * logits`` (8). With grad (update, ``entropy_coeff != 0``):
      compiled returns a bf16 gradient (2); chunked saves every chunk's fp32 copy and softmax (8) + gradient (2);
      eager saves the softmax (4) and its backward holds fp32 gradients of the softmax and the product (8) + bf16 (2).
      ``entropy_checkpointing`` moves this into the backward, where the peak is anyway, so it is counted the same.
    """
    total = 2 + (0 if temperature_one else 2)
    if entropy is None:
        return total
    if grad:
        return total + 2 + {"compiled": 2, "chunked": 10, "eager": 14}[entropy]
    return total + {"compiled": 0, "chunked": 0, "eager": 8}[entropy]


def update_activation_bytes(shape: ModelShape, tokens: int, *, checkpointing: bool, entropy: str | None,
                            temperature_one: bool = True, vocab: int | None = None) -> int:
    """Peak activation bytes of one micro-batch's forward + backward: the saved layers (checkpointed inputs, or every
    layer's saved tensors), then the larger of the logits phase (start of backward) and one layer's recompute +
    backward. ``vocab=0`` is a value head (the critic)."""
    vocab = shape.vocab if vocab is None else vocab
    saved = max(saved_layer_bytes_per_token(shape), saved_linear_layer_bytes_per_token(shape))
    backward = layer_backward_bytes_per_token(shape)
    logits = vocab * logits_bytes_per_element(grad=True, entropy=entropy, temperature_one=temperature_one)
    if checkpointing:
        kept = shape.layers * checkpoint_bytes_per_token(shape)
        return tokens * (kept + max(saved + backward, logits + 8 * shape.hidden))
    return tokens * (saved_model_bytes_per_token(shape) + max(backward, logits + 8 * shape.hidden))


def log_prob_activation_bytes(shape: ModelShape, tokens: int, *, entropy: str | None,
                              temperature_one: bool = True) -> int:
    """Peak activation bytes of a no-grad forward (old or reference log-probs): one layer at a time, or the logits
    with their entropy transient; chunked entropy adds one fp32 chunk (copy, softmax, product: 12 B x 2,048 x vocab)."""
    logits = shape.vocab * logits_bytes_per_element(grad=False, entropy=entropy, temperature_one=temperature_one)
    chunk = 12 * 2048 * shape.vocab if entropy == "chunked" else 0
    return max(tokens * layer_inference_bytes_per_token(shape), tokens * (logits + 2 * shape.hidden) + chunk)


# ------------------------------------------------------------------------------------------ FSDP and vLLM state

def fsdp_state_bytes(parameters: int, shards: int) -> dict[str, int]:
    """Per GPU, FSDP2 sharded over ``shards`` ranks: fp32 master params (``fsdp.yaml`` ``model_dtype: fp32``), fp32
    grads, AdamW's two fp32 moments (``torch.optim.AdamW``, created at the first step and kept), and the foreach
    step's fp32 temporary (one more copy during ``optimizer.step``)."""
    shard = math.ceil(parameters / shards)
    return {"params": 4 * shard, "grads": 4 * shard, "adam": 8 * shard, "adam_step": 4 * shard}


def gathered_bytes(shape: ModelShape, *, backward: bool, parameters_per_layer: int | None = None) -> int:
    """bf16 compute params FSDP2 gathers (``verl/utils/fsdp_utils.py`` ``apply_fsdp2``): the root module stays
    gathered through forward and backward (it holds a tied embedding), plus the current and the prefetched unit
    (a layer, or an untied embedding / lm_head); in backward that unit's bf16 gradient and its fp32 copy for the
    reduce-scatter (``reduce_dtype`` fp32)."""
    layer = largest_layer_parameters(shape) if parameters_per_layer is None else parameters_per_layer
    embedding = shape.vocab * shape.hidden
    root = (embedding if shape.tied else 0) + shape.hidden
    unit = layer if shape.tied else max(layer, embedding)
    return 2 * root + 2 * 2 * unit + (6 * unit if backward else 0)


def kv_bytes_per_token(shape: ModelShape, tensor_parallel: int) -> int:
    """vLLM's bf16 KV cache per token on one GPU: K and V x full-attention layers x KV heads x head size x 2 bytes, KV
    heads split over the tensor-parallel ranks (replicated when fewer than the ranks)."""
    heads = max(shape.kv_heads // tensor_parallel, 1)
    return 2 * shape.attention_layers * heads * shape.head_dim * 2


def vllm_activation_bytes(shape: ModelShape, *, batched_tokens: int, max_num_seqs: int, tensor_parallel: int) -> int:
    """vLLM's profiled peak beside weights (an estimate): one layer's no-grad transient for ``max_num_batched_tokens``
    (MLP split over TP) and the sampler's fp32 logits and probabilities for ``max_num_seqs`` rows."""
    layer = 6 * shape.intermediate // tensor_parallel + 8 * shape.hidden
    return batched_tokens * layer + max_num_seqs * shape.vocab * 8


def prompt_logprobs_bytes(shape: ModelShape, batched_tokens: int) -> int:
    """A rescoring step's ``prompt_logprobs`` transient in vLLM (not in its profile): bf16 logits of every token of
    the engine step and their fp32 log-softmax (vLLM v1 ``gpu_model_runner`` / ``Sampler.compute_logprobs``)."""
    return batched_tokens * shape.vocab * 6


# ---------------------------------------------------------------------------------------------- the table

@dataclass
class Phase:
    name: str
    terms: list[tuple[str, int]]
    fix: str = ""
    """The one-line fix the check names when this phase does not fit."""

    @property
    def total(self) -> int:
        return sum(b for _, b in self.terms)


@dataclass
class CapacityTable:
    gpu_bytes: int
    gpus: int
    model: str
    parameters: int
    phases: list[Phase]
    kv_tokens: int
    sequence_tokens: int
    notes: list[str] = field(default_factory=list)

    @property
    def concurrent_sequences(self) -> int:
        """Sequences of the longest length (prompt + response) vLLM's KV cache holds at once, per replica."""
        return self.kv_tokens // max(self.sequence_tokens, 1)

    def phase(self, name: str) -> Phase:
        return next(p for p in self.phases if p.name == name)


def config_value(config: Any, dotted: str, default: Any = None) -> Any:
    """``dotted`` in a composed config (or any nested mapping), ``default`` where it is missing or null."""
    node = config
    for part in dotted.split("."):
        if node is None or not hasattr(node, "get"):
            return default
        node = node.get(part)
    return default if node is None else node


@dataclass(frozen=True)
class BatchKeys:
    """The keys that size one pass's micro-batches: dynamic batch sizes on or off, the token limit per GPU they
    use, and the sample count used without them."""

    dynamic: str
    tokens: str
    micro: str

    @classmethod
    def log_prob(cls, section: str) -> "BatchKeys":
        return cls(f"{section}.log_prob_use_dynamic_bsz", f"{section}.log_prob_max_token_len_per_gpu",
                   f"{section}.log_prob_micro_batch_size_per_gpu")

    @classmethod
    def update(cls, section: str) -> "BatchKeys":
        return cls(f"{section}.use_dynamic_bsz", f"{section}.ppo_max_token_len_per_gpu",
                   f"{section}.ppo_micro_batch_size_per_gpu")

    def dynamic_on(self, config: Any) -> bool:
        return bool(config_value(config, self.dynamic, False))


def micro_batch_tokens(config: Any, keys: BatchKeys, *, sequence: int) -> int:
    """Tokens of one micro-batch on one GPU: with dynamic batch sizes the token limit (a hard bound: verl adds
    micro-batches until every one is within it, ``seqlen_balancing.rearrange_micro_batches``), else samples x the
    longest sequence (``prepare_micro_batches``)."""
    if keys.dynamic_on(config):
        return int(config_value(config, keys.tokens))
    return int(config_value(config, keys.micro, 1)) * sequence


def plan_capacity(config: Any, config_json: Mapping[str, Any], *, rescores: bool = False,
                  gpu_memory_gib: float | None = None) -> CapacityTable:
    """Every phase's peak per GPU for a composed verl config (FSDP2 actor, vLLM rollout on the same GPUs).
    ``rescores``: an agent loop sends ``prompt_logprobs`` requests (``rescores_sequences``)."""
    shape = model_shape(config_json)
    gpu_gib = float(gpu_memory_gib if gpu_memory_gib is not None
                    else config_value(config, "skl.cluster.gpu_memory_gib", CLUSTER_OPTIONS["gpu_memory_gib"].default))
    gpu = int(gpu_gib * GIB)
    gpus = int(config_value(config, "trainer.n_gpus_per_node", 1)) * int(config_value(config, "trainer.nnodes", 1))
    arr = "actor_rollout_ref"
    rollout, actor = f"{arr}.rollout", f"{arr}.actor"
    sequence = int(config_value(config, "data.max_prompt_length")) + int(config_value(config, "data.max_response_length"))
    temperature_one = float(config_value(config, f"{rollout}.temperature", 1.0)) == 1.0
    checkpointing = bool(config_value(config, f"{arr}.model.enable_gradient_checkpointing", False))
    params = parameter_count(shape)
    state = fsdp_state_bytes(params, gpus)
    param_offload = bool(config_value(config, f"{actor}.fsdp_config.param_offload", False))
    optimizer_offload = bool(config_value(config, f"{actor}.fsdp_config.optimizer_offload", False))
    # Between phases the actor keeps its fp32 params and AdamW states unless offloaded (transformer_impl.py
    # BaseEngineCtx / engine_workers.update_weights); grads are freed by zero_grad (set_to_none).
    resident = [("actor fp32 params", 0 if param_offload else state["params"]),
                ("actor AdamW", 0 if optimizer_offload else state["adam"])]
    critic_on = bool(config_value(config, "critic.enable", False))
    critic_params = critic_parameter_count(shape)
    critic_state = fsdp_state_bytes(critic_params, gpus)
    if critic_on:
        resident += [("critic fp32 params", 0 if config_value(config, "critic.fsdp.param_offload", False) else critic_state["params"]),
                     ("critic AdamW", 0 if config_value(config, "critic.fsdp.optimizer_offload", False) else critic_state["adam"])]
    resident = [(label, b) for label, b in resident if b]

    tp = int(config_value(config, f"{rollout}.tensor_model_parallel_size", 1))
    utilisation = float(config_value(config, f"{rollout}.gpu_memory_utilization", 0.5))
    vllm_share = int(utilisation * gpu)
    weights = 2 * params // tp
    batched = int(config_value(config, f"{rollout}.max_num_batched_tokens", 8192) or 8192)
    max_num_seqs = int(config_value(config, f"{rollout}.max_num_seqs", 256))
    activations = vllm_activation_bytes(shape, batched_tokens=batched, tensor_parallel=tp, max_num_seqs=max_num_seqs)
    # A hybrid model's recurrent state: one per running sequence, taken from the same share as the KV cache.
    linear_state = max_num_seqs * linear_state_bytes_per_sequence(shape, tp)
    kv = max(vllm_share - weights - activations - VLLM_RESERVE_BYTES - linear_state, 0)
    kv_tokens = kv // kv_bytes_per_token(shape, tp)
    sleeps = bool(config_value(config, f"{rollout}.free_cache_engine", True)) and bool(config_value(config, f"{rollout}.enable_sleep_mode", True))
    # vLLM sleeps (level 2: weights and KV cache released) during the trainer's phases when free_cache_engine
    # (vllm_async_server.sleep); otherwise its share stays.
    asleep = [] if sleeps else [("vLLM (awake: free_cache_engine off)", vllm_share)]
    base = [("CUDA contexts", CUDA_CONTEXTS_BYTES)]

    phases = []
    rescoring = [("prompt_logprobs transient", prompt_logprobs_bytes(shape, batched))] if rescores else []
    phases.append(Phase("rollout", base + resident + [
        ("vLLM weights", weights), ("vLLM activations", activations), ("vLLM reserve", VLLM_RESERVE_BYTES),
        ("linear-attention state", linear_state), ("KV cache", kv)] + rescoring,
        fix=(f"set {actor}.fsdp_config.optimizer_offload=true (frees {state['adam'] / GIB:.1f} GiB a GPU between updates)"
             if not optimizer_offload else
             f"lower {rollout}.gpu_memory_utilization (vLLM's KV cache shrinks with it)")))
    bucket = int(config_value(config, f"{rollout}.checkpoint_engine.update_weights_bucket_megabytes", 2048)) << 20
    phases.append(Phase("weight sync", base + resident + [("vLLM weights", weights), ("transfer bucket", bucket)],
                        fix=f"lower {rollout}.checkpoint_engine.update_weights_bucket_megabytes"))

    actor_engine = config_value(config, f"{actor}.fsdp_config", {}) or {}
    mode = entropy_mode(actor_engine)
    on_gpu = [("actor fp32 params", state["params"])] + [(l, b) for l, b in resident if l != "actor fp32 params"]
    if not config_value(config, "algorithm.rollout_correction.bypass_mode", False):
        keys = BatchKeys.log_prob(rollout)
        phases.append(_pass_phase(
            "log-prob", base + asleep + on_gpu, shape, micro_batch_tokens(config, keys, sequence=sequence), mode,
            temperature_one, keys=keys, dynamic=keys.dynamic_on(config), sequence=sequence))
    uses_ref = bool(config_value(config, f"{actor}.use_kl_loss", False)) or bool(config_value(config, "algorithm.use_kl_in_reward", False))
    if uses_ref:
        keys = BatchKeys.log_prob(f"{arr}.ref")
        # The reference model is forward-only: its fp32 params stay in pinned CPU memory (CPUOffloadPolicy), only the
        # gathered bf16 units come to the GPU (transformer_impl._build_fsdp_module); it computes no entropy.
        phases.append(_pass_phase(
            "ref", base + asleep + resident, shape, micro_batch_tokens(config, keys, sequence=sequence), None,
            temperature_one, keys=keys, dynamic=keys.dynamic_on(config), sequence=sequence))
    if critic_on:
        critic_keys = BatchKeys.update("critic")
        tokens = micro_batch_tokens(config, critic_keys, sequence=sequence)
        critic_gc = bool(config_value(config, "critic.model.enable_gradient_checkpointing", checkpointing))
        others = [(l, b) for l, b in resident if not l.startswith("critic")]
        layer = largest_layer_parameters(shape)
        phases.append(Phase("critic update", base + asleep + others + [
            ("critic fp32 params", critic_state["params"]), ("critic grads", critic_state["grads"]),
            ("critic AdamW", critic_state["adam"]),
            ("gathered bf16", gathered_bytes(shape, backward=True, parameters_per_layer=layer)),
            ("activations", update_activation_bytes(shape, tokens, checkpointing=critic_gc, entropy=None, vocab=0))],
            fix=_lower_tokens_fix(config, critic_keys)))
    calculate_entropy = bool(config_value(config, f"{actor}.calculate_entropy", False)) or float(config_value(config, f"{actor}.entropy_coeff", 0.0)) != 0.0
    tokens = micro_batch_tokens(config, BatchKeys.update(actor), sequence=sequence)
    others = [(l, b) for l, b in resident if not l.startswith("actor")]
    update_state = base + asleep + others + [("actor fp32 params", state["params"]), ("actor grads", state["grads"]),
                                              ("actor AdamW", state["adam"])]
    update = Phase("update", update_state + [
        ("gathered bf16", gathered_bytes(shape, backward=True)),
        ("activations + logits", update_activation_bytes(shape, tokens, checkpointing=checkpointing,
                                                         entropy=mode if calculate_entropy else None,
                                                         temperature_one=temperature_one))],
        fix=_update_fix(config, mode if calculate_entropy else None, checkpointing))
    step = sum(b for _, b in update_state) + state["adam_step"]
    if step > update.total:  # the AdamW step after the backward, activations freed
        update.terms = update_state + [("AdamW step temporary", state["adam_step"])]
    phases.append(update)
    notes = []
    if config_value(config, f"{actor}.use_torch_compile", True) != config_value(config, f"{actor}.fsdp_config.use_torch_compile", True):
        notes.append(f"{actor}.use_torch_compile is not read by verl 0.9.1's FSDP engine; "
                     f"{actor}.fsdp_config.use_torch_compile is (here {actor_engine.get('use_torch_compile', True)})")
    return CapacityTable(gpu_bytes=gpu, gpus=gpus, model=shape.architecture, parameters=params, phases=phases,
                         kv_tokens=kv_tokens, sequence_tokens=sequence, notes=notes)


def _pass_phase(name: str, state: list[tuple[str, int]], shape: ModelShape, tokens: int, mode: str | None,
                temperature_one: bool, *, keys: BatchKeys, dynamic: bool, sequence: int) -> Phase:
    activations = log_prob_activation_bytes(shape, tokens, entropy=mode, temperature_one=temperature_one)
    terms = state + [("gathered bf16", gathered_bytes(shape, backward=False)), ("activations + logits", activations)]
    if mode == "eager":
        fix = ("the eager entropy materialises fp32 [tokens, vocab] tensors; set "
               "actor_rollout_ref.actor.entropy_from_logits_with_chunking=true, or keep "
               "actor_rollout_ref.actor.fsdp_config.use_torch_compile=true (verl's default)")
    elif dynamic:
        fix = f"lower {keys.tokens} (at least {sequence}, the longest sequence)"
    else:
        fix = f"lower {keys.micro}, or set {keys.dynamic}=true with a token limit per GPU"
    return Phase(name, terms, fix=fix)


def _lower_tokens_fix(config: Any, keys: BatchKeys) -> str:
    if keys.dynamic_on(config):
        return f"lower {keys.tokens}"
    return f"lower {keys.micro}, or set {keys.dynamic}=true with {keys.tokens} sized from the table"


def _update_fix(config: Any, mode: str | None, checkpointing: bool) -> str:
    actor = "actor_rollout_ref.actor"
    if mode == "eager":
        return (f"the eager entropy keeps fp32 [tokens, vocab] tensors for backward; keep "
                f"{actor}.fsdp_config.use_torch_compile=true (verl's default) or lower the update's tokens")
    if not checkpointing:
        return "set actor_rollout_ref.model.enable_gradient_checkpointing=true"
    return _lower_tokens_fix(config, BatchKeys.update(actor))


def format_table(table: CapacityTable) -> str:
    """The capacity table a dry run prints: one line per phase (peak GiB, share of the GPU, terms), then the KV
    cache in tokens and sequences."""
    gpu = table.gpu_bytes / GIB
    lines = [f"capacity per GPU ({table.model}, {table.parameters / 1e9:.2f}B params; {table.gpus} GPU(s) of "
             f"{gpu:.1f} GiB, skl.cluster.gpu_memory_gib):"]
    for phase in table.phases:
        flag = "  TIGHT" if phase.total > TIGHT_FRACTION * table.gpu_bytes else ""
        flag = "  DOES NOT FIT" if phase.total > table.gpu_bytes else flag
        terms = ", ".join(f"{label} {b / GIB:.1f}" for label, b in phase.terms if b)
        lines.append(f"  {phase.name:<14}{phase.total / GIB:6.1f} GiB {100 * phase.total / table.gpu_bytes:4.0f}%{flag}  ({terms})")
    lines.append(f"  KV cache: {table.kv_tokens:,} tokens a replica: {table.concurrent_sequences} sequence(s) of "
                 f"{table.sequence_tokens:,} tokens at once")
    lines += [f"  note: {note}" for note in table.notes]
    return "\n".join(lines)


def check_fits(table: CapacityTable) -> None:
    """Refuse the first phase whose peak exceeds the GPU (one line: the phase, its size, the fix), and a KV cache
    that holds not one sequence."""
    gpu = table.gpu_bytes / GIB
    for phase in table.phases:
        if phase.total > table.gpu_bytes:
            biggest = max(phase.terms, key=lambda term: term[1])
            raise ConfigError(
                f"GPU memory: the {phase.name} phase needs {phase.total / GIB:.1f} GiB a GPU, past "
                f"skl.cluster.gpu_memory_gib={gpu:g} (largest: {biggest[0]} {biggest[1] / GIB:.1f} GiB); {phase.fix}")
    if table.kv_tokens < table.sequence_tokens:
        raise ConfigError(
            f"GPU memory: vLLM's KV cache holds {table.kv_tokens:,} tokens, less than one {table.sequence_tokens:,}-token "
            "sequence; raise actor_rollout_ref.rollout.gpu_memory_utilization or "
            "actor_rollout_ref.rollout.tensor_model_parallel_size")


def check_batch_limits(config: Any) -> None:
    """What verl asserts only when the first batch reaches the workers: a token limit per GPU below the longest
    sequence (``seqlen_balancing.rearrange_micro_batches``), and dynamic batch sizes that differ between the actor's
    update and its log-prob pass (``engine_workers.ActorRolloutRefWorker.init_model``)."""
    arr = "actor_rollout_ref"
    sequence = int(config_value(config, "data.max_prompt_length")) + int(config_value(config, "data.max_response_length"))
    actor_dynamic = bool(config_value(config, f"{arr}.actor.use_dynamic_bsz", False))
    if actor_dynamic != bool(config_value(config, f"{arr}.rollout.log_prob_use_dynamic_bsz", False)):
        raise ConfigError(f"{arr}.actor.use_dynamic_bsz={str(actor_dynamic).lower()} but {arr}.rollout."
                          f"log_prob_use_dynamic_bsz is not: verl asserts they agree; set both to the same value")
    for keys in (BatchKeys.update(f"{arr}.actor"), BatchKeys.log_prob(f"{arr}.rollout"), BatchKeys.log_prob(f"{arr}.ref")):
        limit = keys.tokens
        value = config_value(config, limit)
        if keys.dynamic_on(config) and (value is None or int(value) < sequence):
            raise ConfigError(f"{limit}={value} is below the longest sequence (data.max_prompt_length + "
                              f"data.max_response_length = {sequence}): verl refuses such a sample at the first "
                              f"micro-batch split; set {limit}={sequence} or more")


def rescoring_loops(config: Any) -> bool:
    """Whether the run's training or validation loop sends ``prompt_logprobs`` requests (``rescores_sequences``),
    read from the registered agent loops (imports the registry: call it where verl is installed)."""
    from skl_verl.trainer import registry
    from skl_verl.trainer.loop_checks import rescoring_loop_names

    entries = registry.agent_loop_entries(config_value(config, "actor_rollout_ref.rollout.agent.agent_loop_config_path"))
    return bool(rescoring_loop_names(config, entries))


def check_capacity(config: Any) -> str:
    """The pre-flight of GPU memory for a composed config (after ``prepare_config``): the capacity table as text,
    printed by every dry run and run. Raises ``ConfigError`` (one line, the key and the fix) for a token limit verl
    would refuse, or a phase past ``skl.cluster.gpu_memory_gib``. On ``trainer.device=cpu``, or without a readable
    config.json, it returns the line that says why it was skipped."""
    from skl_verl.trainer.context_checks import model_config_json

    if config_value(config, "trainer.device", "cuda") == "cpu":
        return "capacity: skipped on trainer.device=cpu (no GPU memory to size)"
    check_batch_limits(config)
    model_path = str(config_value(config, "actor_rollout_ref.model.path"))
    config_json = model_config_json(model_path)
    if config_json is None:
        return (f"warning: capacity check skipped: no config.json readable for {model_path} (a local folder with "
                "config.json, or a hub id online or in the cache)")
    text_config = config_json.get("text_config") or config_json
    missing = [key for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
               if key not in text_config and key not in config_json]
    if missing:
        return f"warning: capacity check skipped: {model_path}'s config.json has no {', '.join(missing)}"
    table = plan_capacity(config, config_json, rescores=rescoring_loops(config))
    text = format_table(table)
    check_fits(table)
    return text
