"""Knowledge Weaver's Eq. 6 MI credit and Eqs. 4/7, 15, 16 advantages against hand computations."""

import math

import pytest
import torch

from skl_verl.knowledge_weaver.credit import (
    knowledge_weaver_advantages,
    mi_token_credit,
)


def test_mi_credit_by_hand():
    # One candidate, three contexts, two tokens; its own context is 0.
    lp = torch.tensor([[[-0.5, -1.0], [-2.0, -1.0], [-3.0, -0.2]]])
    credit = mi_token_credit(lp, torch.tensor([0]), torch.tensor([[1, 1]]), weight=0.1, cap=0.15)
    delta0 = -0.5 - math.log((math.exp(-2.0) + math.exp(-3.0)) / 2)  # 2.12: more likely in its own context
    delta1 = -1.0 - math.log((math.exp(-1.0) + math.exp(-0.2)) / 2)  # negative: |delta| counts
    assert credit[0].tolist() == pytest.approx([min(0.15, 0.1 * abs(delta0)), min(0.15, 0.1 * abs(delta1))])
    assert credit[0, 0] == 0.15 and credit[0, 1] < 0.15


def test_mi_credit_only_on_body_tokens_and_zero_when_contexts_agree():
    lp = torch.full((2, 4, 3), -1.0)
    lp[1, 2] = -4.0  # the second candidate's own context (2) finds its tokens unlikely
    credit = mi_token_credit(lp, torch.tensor([0, 2]), torch.tensor([[1, 1, 1], [0, 1, 0]]))
    assert credit[0].tolist() == [0.0, 0.0, 0.0]
    assert credit[1].tolist() == pytest.approx([0.0, 0.15, 0.0])
    with pytest.raises(ValueError, match="contexts >= 2"):
        mi_token_credit(lp[:, :1], torch.tensor([0, 0]), torch.ones(2, 3))


def test_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 30.0, 30.0])  # group 1's rewards are equal (and clipped to 20)
    groups = torch.tensor([0, 0, 1, 1])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1]])
    beh = torch.tensor([[-1.0, -1.0], [-1.0, -9.0], [-1.0, -1.0], [-20.0, -1.0]])
    ref = torch.tensor([[-2.0, -1.5], [-1.0, 0.0], [-1.0, -1.0], [-1.0, -1.0]])
    credit = torch.tensor([[0.1, 0.0], [0.0, 5.0], [0.0, 0.0], [0.0, 0.15]])
    out = knowledge_weaver_advantages(rewards, groups, beh, ref, credit, mask, beta=0.01)
    exec_adv = [0.5 / (math.sqrt(0.5) + 1e-5), -0.5 / (math.sqrt(0.5) + 1e-5), 0.0, 0.0]  # sample std of [1, 0]
    # kappa (clipped to +-10, masked): row 0 [1, 0.5], row 1 [0, -], row 3 [-10, 0]; return-to-go
    raw = [
        exec_adv[0] + 0.1 - 0.01 * 1.5, exec_adv[0] + 0.0 - 0.01 * 0.5,
        exec_adv[1] + 0.0 - 0.0,
        0.0, 0.0,
        0.0 - 0.01 * -10.0, 0.15 - 0.0,
    ]
    values = torch.tensor(raw, dtype=torch.float64)
    expected = (values - values.mean()) / (values.std(unbiased=True) + 1e-5)
    assert out[mask.bool()].tolist() == pytest.approx(expected.tolist(), abs=1e-6)  # inputs are float32
    assert out[1, 1] == 0.0  # off the mask: no advantage, and the masked-out credit of 5 counted nowhere


def test_rescoring_under_each_context_matches_a_teacher_forced_forward(tiny_model_dir):
    """The CPU rollout server's prompt log-probs, read at vLLM's rows, equal log-softmax of the model's
    own forward pass over context + candidate."""
    import asyncio

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skl_verl.knowledge_weaver.credit import rescore_under_contexts
    from skl_verl.rollout.hf_client import HFGenerationClient

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32).eval()
    client = HFGenerationClient(model, tokenizer, max_new_tokens=1)
    contexts = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in
                ("Trajectory: heat the mug.", "Trajectory: clean the apple in the sink.", "Shop for shoes")]
    candidate = tokenizer("<skill>Heat before placing.</skill>", add_special_tokens=False)["input_ids"]
    scored = asyncio.run(rescore_under_contexts(client, contexts, candidate, "t"))
    for row, context in zip(scored, contexts):
        ids = torch.tensor([context + candidate])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
        expected = [logp[len(context) + t - 1, candidate[t]].item() for t in range(len(candidate))]
        assert row.tolist() == pytest.approx(expected, abs=1e-5)
    credit = mi_token_credit(scored[None], torch.tensor([0]), torch.ones(1, len(candidate)))
    assert credit.shape == (1, len(candidate)) and (credit >= 0).all() and (credit <= 0.15).all()


def test_the_registered_estimator_reads_own_scores_credit_and_both_log_probs_and_skips_pad_rows():
    """Through compute_advantage (what skl_sync calls): R from skl_score, not from the KL-penalised
    token rewards; beta from algorithm.kl_ctrl; an all-zero-mask row (verl padding) joins nothing."""
    import numpy as np
    from omegaconf import OmegaConf
    from verl import DataProto

    import skl_verl
    from skl_verl.trainer.estimators import compute_advantage

    skl_verl.register(with_trainer=False)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1], [0, 0]])
    beh = torch.tensor([[-1.0, -1.0], [-1.0, -9.0], [-1.0, -1.0], [-20.0, -1.0], [-3.0, -3.0]])
    ref = torch.tensor([[-2.0, -1.5], [-1.0, 0.0], [-1.0, -1.0], [-1.0, -1.0], [0.0, 0.0]])
    data = DataProto.from_single_dict({
        "response_mask": mask, "old_log_probs": beh, "ref_log_prob": ref,
        "token_level_rewards": torch.full((5, 2), 99.0),  # KL-penalised rewards: never read
    })
    data.non_tensor_batch.update({
        "uid": np.array(["a", "a", "b", "b", "a"], dtype=object),
        "skl_sequence_id": np.array(["kw0:0", "kw0:0", "kw0:1", "kw0:1", "kw0:0"], dtype=object),
        "skl_score": np.array([1.0, 0.0, 30.0, 30.0, 7.0], dtype=object),
        "skl_token_credit": np.array([[0.1, 0.0], [0.0, 5.0], None, [0.0, 0.15], [1.0, 1.0]], dtype=object),
    })
    algorithm = OmegaConf.create({"adv_estimator": "knowledge_weaver", "use_kl_in_reward": True,
                                  "kl_ctrl": {"type": "fixed", "kl_coef": 0.01}})
    out = compute_advantage(data, algorithm).batch["advantages"]
    expected = knowledge_weaver_advantages(
        torch.tensor([1.0, 0.0, 30.0, 30.0]), torch.tensor([0, 0, 1, 1]), beh[:4], ref[:4],
        torch.tensor([[0.1, 0.0], [0.0, 5.0], [0.0, 0.0], [0.0, 0.15]]), mask[:4], beta=0.01)
    assert torch.allclose(out[:4], expected.float(), atol=1e-6)
    assert out[4].abs().sum() == 0
