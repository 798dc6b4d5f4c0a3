"""A model's sizes from its config.json (#35 item 1): parameter counts equal transformers' own models built on the meta
device for the recipes' three models, Qwen3.5-4B's hybrid layers and vision tower included; its KV cache lives in its
8 full-attention layers and its Gated DeltaNet state is counted per sequence; the saved-activation formulas stay
within their stated error of what autograd saves in transformers' layers."""

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from skl_verl.trainer import capacity, model_shape

MODEL_CONFIGS = Path(__file__).parent / "model_configs"


def config_json(name):
    return json.loads((MODEL_CONFIGS / name / "config.json").read_text())


def transformers_parameters(config: dict) -> int:
    """What transformers builds from the same config.json (no weights: the meta device)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    fields = {k: v for k, v in config.items() if k not in ("architectures", "torch_dtype")}
    built = AutoConfig.for_model(**fields)
    auto = AutoModelForImageTextToText if "vision_config" in config else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(built)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["qwen3-4b", "qwen2.5-7b-instruct", "qwen3.5-4b"])
def test_parameter_counts_equal_transformers_models(name):
    config = config_json(name)
    assert model_shape.parameter_count(model_shape.model_shape(config)) == transformers_parameters(config)


def test_qwen3_5_4b_is_a_hybrid_with_a_vision_tower():
    shape = model_shape.model_shape(config_json("qwen3.5-4b"))
    assert (shape.layers, shape.attention_layers, shape.linear.layers) == (32, 8, 24)
    assert (shape.hidden, shape.q_dim, shape.kv_dim, shape.vocab, shape.tied) == (2560, 4096, 1024, 248320, True)
    assert shape.attention_gate and shape.qk_norm and not shape.qkv_bias
    assert shape.vision_parameters == 333_514_240
    assert model_shape.parameter_count(shape) == 4_539_265_536  # the model card's 4.5B
    # only the 8 full-attention layers keep K and V: 2 x 8 layers x 4 heads x 256 x 2 bytes
    assert capacity.kv_bytes_per_token(shape, 1) == 2 * 8 * 4 * 256 * 2 == 32768
    # recurrent state 32 heads x 128 x 128 and conv state 8,192 channels x 3, bf16, in each of 24 layers
    assert model_shape.linear_state_bytes_per_sequence(shape, 1) == 24 * 2 * (32 * 128 * 128 + 8192 * 3) == 26_345_472
    assert model_shape.linear_state_bytes_per_sequence(shape, 2) == 26_345_472 // 2
    assert model_shape.largest_layer_parameters(shape) == model_shape.linear_layer_parameters(shape)


def test_models_without_linear_layers_have_no_state():
    shape = model_shape.model_shape(config_json("qwen3-4b"))
    assert shape.linear is None and shape.attention_layers == shape.layers and shape.vision_parameters == 0
    assert model_shape.linear_state_bytes_per_sequence(shape, 1) == 0
    assert capacity.saved_linear_layer_bytes_per_token(shape) == 0


def saved_bytes_per_token(layer, config, tokens=128) -> float:
    """Bytes autograd saves for one bf16 layer's forward, per token (weights and input left out)."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen3_5

    hidden = torch.randn(1, tokens, config.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    positions = torch.arange(tokens)[None]
    rotary = qwen3_5.Qwen3_5TextRotaryEmbedding(config)(hidden, positions.expand(3, 1, tokens))
    seen = {}

    def pack(tensor):
        seen[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        layer(hidden, position_embeddings=rotary, attention_mask=None, position_ids=positions)
    skip = {p.untyped_storage().data_ptr() for p in layer.parameters()} | {hidden.untyped_storage().data_ptr()}
    return sum(size for ptr, size in seen.items() if ptr not in skip) / tokens


def test_qwen3_5_saved_activations_match_what_autograd_saves():
    """Both layer kinds of a small Qwen3.5 (the torch path, as on a machine without flash-linear-attention)."""
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen3_5

    fields = dict(hidden_size=256, intermediate_size=640, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, layer_types=["linear_attention", "full_attention"],
                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32,
                  vocab_size=1000)
    config = Qwen3_5TextConfig(**fields)
    config._attn_implementation = "sdpa"
    shape = model_shape.model_shape({"model_type": "qwen3_5_text", **fields})
    torch.manual_seed(0)
    linear = saved_bytes_per_token(qwen3_5.Qwen3_5DecoderLayer(config, 0).to(torch.bfloat16), config)
    full = saved_bytes_per_token(qwen3_5.Qwen3_5DecoderLayer(config, 1).to(torch.bfloat16), config)
    assert capacity.saved_linear_layer_bytes_per_token(shape) == pytest.approx(linear, rel=0.01)
    assert capacity.saved_layer_bytes_per_token(shape) == pytest.approx(full, rel=0.01)


def test_a_hybrid_rollout_takes_the_state_from_the_kv_cache():
    config = OmegaConf.create({
        "trainer": {"n_gpus_per_node": 2, "nnodes": 1}, "data": {"max_prompt_length": 6000, "max_response_length": 1024},
        "actor_rollout_ref": {"model": {"enable_gradient_checkpointing": True},
                              "actor": {"ppo_micro_batch_size_per_gpu": 1, "fsdp_config": {"optimizer_offload": True}},
                              "rollout": {"gpu_memory_utilization": 0.6, "max_num_seqs": 256,
                                          "log_prob_micro_batch_size_per_gpu": 1}}})
    table = capacity.plan_capacity(config, config_json("qwen3.5-4b"))
    rollout = dict(table.phase("rollout").terms)
    assert rollout["linear-attention state"] == 256 * 26_345_472
    assert table.kv_tokens == rollout["KV cache"] // 32768
