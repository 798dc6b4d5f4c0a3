"""A model's sizes from its ``config.json`` (shapes only, no weights): what the capacity table
(``skl_verl.trainer.capacity``) and ``scripts/gpu_memory_probe.py`` count parameters, KV cache and state from.

Covers the recipes' models: Qwen2 / Qwen3 decoders (every layer full attention) and Qwen3.5's hybrid (three Gated
DeltaNet layers to one gated full-attention layer, ``layer_types``; a vision tower the trainer holds too). Counts are
checked against transformers' own models built on the meta device (``tests/trainer/test_model_shape.py``).

Nothing here imports torch, transformers or verl (the probe imports it on a machine with only torch and transformers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class LinearAttention:
    """Qwen3.5's Gated DeltaNet layers (``layer_types`` "linear_attention"; ``modeling_qwen3_5.Qwen3_5GatedDeltaNet``):
    a recurrent state per sequence instead of a KV cache."""

    layers: int
    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int
    conv_kernel: int

    @property
    def conv_channels(self) -> int:
        """q, k and v go through the short causal convolution together (``in_proj_qkv``'s output)."""
        return 2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim

    @property
    def value_width(self) -> int:
        return self.value_heads * self.value_dim


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's sizes, as its ``config.json`` gives them."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qk_norm: bool = False
    """Qwen3's per-head RMSNorm of q and k (``modeling_qwen3.py``), whose fp32 copies are saved for backward."""
    qkv_bias: bool = False
    attention_gate: bool = False
    """Qwen3.5's gated attention: ``q_proj`` also produces a sigmoid gate of the attention output (twice q's width)."""
    linear: LinearAttention | None = None
    """The Gated DeltaNet layers of a hybrid model (``layers`` counts them too)."""
    vision_parameters: int = 0
    """A multimodal checkpoint's vision tower: loaded and trained with the rest, unused by text-only batches."""
    architecture: str = ""

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def attention_layers(self) -> int:
        """Layers with full attention, the ones that keep a KV cache."""
        return self.layers - (self.linear.layers if self.linear else 0)


def model_shape(config_json: Mapping[str, Any]) -> ModelShape:
    """The shape of a model from its ``config.json`` (``text_config`` for multimodal configs). ``head_dim`` defaults to
    hidden / heads; q/k norms are Qwen3's (and Qwen3.5's); Qwen2 has q/k/v biases (``modeling_qwen2.py``,
    ``attention_bias`` else); Qwen3.5 gates its attention output (``modeling_qwen3_5.Qwen3_5Attention``)."""
    text = dict(config_json.get("text_config") or {})
    source = {**config_json, **text} if text else dict(config_json)
    hidden, heads = int(source["hidden_size"]), int(source["num_attention_heads"])
    model_type = str(source.get("model_type", ""))
    layers = int(source["num_hidden_layers"])
    linear_layers = sum(1 for kind in source.get("layer_types") or [] if kind == "linear_attention")
    linear = None
    if linear_layers:
        linear = LinearAttention(
            layers=linear_layers, key_heads=int(source["linear_num_key_heads"]),
            value_heads=int(source["linear_num_value_heads"]), key_dim=int(source["linear_key_head_dim"]),
            value_dim=int(source["linear_value_head_dim"]), conv_kernel=int(source.get("linear_conv_kernel_dim", 4)))
    return ModelShape(
        layers=layers, hidden=hidden, intermediate=int(source["intermediate_size"]),
        heads=heads, kv_heads=int(source.get("num_key_value_heads") or heads),
        head_dim=int(source.get("head_dim") or hidden // heads), vocab=int(source["vocab_size"]),
        tied=bool(source.get("tie_word_embeddings", config_json.get("tie_word_embeddings", False))),
        qk_norm=model_type.startswith("qwen3"),
        qkv_bias=bool(source.get("attention_bias", model_type == "qwen2")),
        attention_gate=bool(source.get("attn_output_gate", model_type.startswith("qwen3_5"))),
        linear=linear, vision_parameters=vision_parameters(config_json.get("vision_config") or {}),
        architecture=str((config_json.get("architectures") or [model_type])[0]),
    )


def vision_parameters(vision: Mapping[str, Any]) -> int:
    """Parameters of a Qwen3-VL / Qwen3.5 vision tower (``modeling_qwen3_5.Qwen3_5VisionModel``): the 3-D patch
    embedding, learned position embeddings, ``depth`` blocks (LayerNorms, qkv and proj with biases, a two-layer MLP)
    and the patch merger (LayerNorm, two linears from ``hidden x merge²`` to ``out_hidden_size``), one more merger per
    deepstack index. 0 for a config without a vision tower."""
    if not vision or "depth" not in vision:
        return 0
    h, inner = int(vision["hidden_size"]), int(vision["intermediate_size"])
    patch = int(vision.get("in_channels", 3)) * int(vision.get("temporal_patch_size", 2)) * int(vision["patch_size"]) ** 2
    merged = h * int(vision.get("spatial_merge_size", 2)) ** 2
    block = 2 * 2 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * inner + inner) + (inner * h + h)
    merger = 2 * h + (merged * merged + merged) + (merged * int(vision["out_hidden_size"]) + int(vision["out_hidden_size"]))
    deepstack = len(vision.get("deepstack_visual_indexes") or [])
    # a deepstack merger normalises the merged width (its LayerNorm is over h x merge², not h)
    deepstack_merger = merger - 2 * h + 2 * merged
    return (patch * h + h + int(vision.get("num_position_embeddings", 0)) * h + int(vision["depth"]) * block
            + merger + deepstack * deepstack_merger)


def layer_parameters(shape: ModelShape) -> int:
    """Parameters of one full-attention decoder layer: q, k, v, o projections (+ q/k/v biases; q twice as wide with
    Qwen3.5's output gate), the gated MLP, two RMSNorms and Qwen3's q/k norms (``modeling_qwen2.py`` /
    ``modeling_qwen3.py`` / ``modeling_qwen3_5.py``)."""
    h = shape.hidden
    q_out = shape.q_dim * (2 if shape.attention_gate else 1)
    attention = h * q_out + 2 * h * shape.kv_dim + shape.q_dim * h
    bias = shape.q_dim + 2 * shape.kv_dim if shape.qkv_bias else 0
    norms = 2 * h + (2 * shape.head_dim if shape.qk_norm else 0)
    return attention + bias + 3 * h * shape.intermediate + norms


def linear_layer_parameters(shape: ModelShape) -> int:
    """Parameters of one Gated DeltaNet layer (``Qwen3_5GatedDeltaNet``): ``in_proj_qkv``, ``in_proj_z`` (the output
    gate), ``in_proj_b`` and ``in_proj_a`` (one per value head), the depthwise convolution, ``dt_bias`` and ``A_log``,
    the gated RMSNorm over a value head, ``out_proj``; then the same MLP and norms as a full-attention layer. 0 for a
    model without such layers."""
    linear = shape.linear
    if linear is None:
        return 0
    h = shape.hidden
    mixer = (h * linear.conv_channels + h * linear.value_width + 2 * h * linear.value_heads
             + linear.conv_channels * linear.conv_kernel + 2 * linear.value_heads + linear.value_dim
             + linear.value_width * h)
    return mixer + 3 * h * shape.intermediate + 2 * h


def largest_layer_parameters(shape: ModelShape) -> int:
    """The larger decoder layer: the unit FSDP gathers at a time."""
    return max(layer_parameters(shape), linear_layer_parameters(shape))


def parameter_count(shape: ModelShape) -> int:
    """All parameters: embedding, layers, final norm, an untied lm_head and a vision tower."""
    embeddings = shape.vocab * shape.hidden * (1 if shape.tied else 2)
    linear_layers = shape.linear.layers if shape.linear else 0
    return (embeddings + shape.attention_layers * layer_parameters(shape)
            + linear_layers * linear_layer_parameters(shape) + shape.hidden + shape.vision_parameters)


def critic_parameter_count(shape: ModelShape) -> int:
    """verl's critic: the backbone with a one-label token-classification head instead of the lm_head
    (``FSDPEngineWithValueHead``, ``load_valuehead_model``)."""
    return parameter_count(shape) - (0 if shape.tied else shape.vocab * shape.hidden) + shape.hidden


def linear_state_bytes_per_sequence(shape: ModelShape, tensor_parallel: int) -> int:
    """vLLM's state of one running sequence in the Gated DeltaNet layers on one GPU, bf16 (``mamba_ssm_cache_dtype``
    auto: the model's dtype): the recurrent state (value heads x key dim x value dim) and the convolution's last
    ``kernel - 1`` inputs, heads split over the tensor-parallel ranks. 0 without such layers."""
    linear = shape.linear
    if linear is None:
        return 0
    recurrent = linear.value_heads * linear.key_dim * linear.value_dim
    conv = linear.conv_channels * (linear.conv_kernel - 1)
    return linear.layers * 2 * (recurrent + conv) // tensor_parallel
