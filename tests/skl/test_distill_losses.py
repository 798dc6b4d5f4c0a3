"""SKL-RL self-distillation reference math (paper App. E, Eqs. 5-6; ``distill_reference.py``): values,
gradients, sampled estimators, and agreement with verl's top-k kernel."""

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import distill_reference as D

SHAPES = [(1, 1, 2), (2, 5, 7), (3, 8, 33)]
TEMPS = [0.5, 1.0, 2.3]
REDUCTIONS = ["none", "token-mean", "sum", "seq-mean-token-sum"]


def _inputs(shape, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    B, T, V = shape
    s = torch.randn(B, T, V, generator=g) * scale
    t = torch.randn(B, T, V, generator=g) * scale
    mask = torch.ones(B, T, dtype=torch.bool)
    if T > 1:  # right padding of varying length, and one left-padded row
        for b in range(B):
            mask[b, T - (b % T) :] = False
        if B > 1:
            mask[-1, 0] = False
    if B > 2:
        mask[1] = False  # a fully padded sequence
    return s, t, mask


def _ref_kl(p_logits, q_logits, mask, temperature, reduction):
    """KL(p || q) in float64, token by token, then reduced."""
    lp = F.log_softmax(p_logits.double() / temperature, dim=-1)
    lq = F.log_softmax(q_logits.double() / temperature, dim=-1)
    kl = (lp.exp() * (lp - lq)).sum(-1) * mask.double()
    if reduction == "none":
        return kl
    if reduction == "sum":
        return kl.sum()
    if reduction == "token-mean":
        return kl.sum() / max(int(mask.sum()), 1)
    return kl.sum(-1).sum() / max(int(mask.any(-1).sum()), 1)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("temperature", TEMPS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_both_directions_match_float64_reference(shape, temperature, reduction):
    s, t, mask = _inputs(shape, seed=hash((shape, temperature)) % 1000)
    # garbage in padding must not leak
    s_dirty, t_dirty = s.clone(), t.clone()
    s_dirty[~mask] = float("nan")
    t_dirty[~mask] = float("inf")
    fwd = D.forward_kl(s_dirty, t_dirty, mask, temperature=temperature, reduction=reduction)
    rev = D.reverse_kl(s_dirty, t_dirty, mask, temperature=temperature, reduction=reduction)
    assert fwd.dtype == rev.dtype == torch.float32
    torch.testing.assert_close(fwd.double(), _ref_kl(t, s, mask, temperature, reduction), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rev.double(), _ref_kl(s, t, mask, temperature, reduction), rtol=1e-5, atol=1e-5)


def test_self_kl_is_zero_and_nonnegative_and_asymmetric():
    s, t, mask = _inputs((3, 8, 33), seed=1)
    for fn in (D.forward_kl, D.reverse_kl):
        assert fn(s, s, mask, reduction="sum").abs().item() < 1e-5
        assert (fn(s, t, mask, reduction="none") >= -1e-6).all()
    fwd = D.forward_kl(s, t, mask, reduction="sum")
    rev = D.reverse_kl(s, t, mask, reduction="sum")
    assert fwd.item() > 0 and rev.item() > 0
    assert abs(fwd.item() - rev.item()) > 1e-2 * max(fwd.item(), rev.item())


def test_zero_probability_vocab_entries_are_nan_free():
    s, t, mask = _inputs((2, 4, 9), seed=2)
    s[..., 0] = -math.inf  # student can never emit token 0 (e.g. banned token)
    s.requires_grad_(True)
    loss = D.reverse_kl(s, t, mask, reduction="sum")
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all()


@pytest.mark.parametrize("fn", [D.forward_kl, D.reverse_kl])
def test_gradient_flows_only_to_student(fn):
    s, t, mask = _inputs((2, 5, 7), seed=3)
    s.requires_grad_(True)
    t.requires_grad_(True)
    fn(s, t, mask, temperature=1.7).backward()
    assert t.grad is None
    assert s.grad is not None and torch.isfinite(s.grad).all()
    assert (s.grad[~mask] == 0).all()
    assert s.grad[mask].abs().sum() > 0


def test_forward_kl_gradient_is_softmax_difference():
    s, t, mask = _inputs((2, 5, 7), seed=4)
    T = 1.7
    s.requires_grad_(True)
    D.forward_kl(s, t, mask, temperature=T, reduction="sum").backward()
    expected = (F.softmax(s.detach().double() / T, -1) - F.softmax(t.double() / T, -1)) / T
    expected = expected * mask.unsqueeze(-1)
    torch.testing.assert_close(s.grad.double(), expected, rtol=1e-4, atol=1e-6)


def test_bf16_inputs_give_float32_close_to_reference():
    s, t, mask = _inputs((2, 6, 50), seed=5)
    sb, tb = s.bfloat16().requires_grad_(True), t.bfloat16()
    for fn, ref in ((D.forward_kl, lambda: _ref_kl(tb, sb, mask, 1.3, "sum")),
                    (D.reverse_kl, lambda: _ref_kl(sb, tb, mask, 1.3, "sum"))):
        out = fn(sb, tb, mask, temperature=1.3, reduction="sum")
        assert out.dtype == torch.float32
        torch.testing.assert_close(out.double(), ref().detach(), rtol=1e-5, atol=1e-5)
    D.reverse_kl(sb, tb, mask).backward()
    assert sb.grad.dtype == torch.bfloat16 and torch.isfinite(sb.grad.float()).all()


def test_topk_forward_kl_equals_full_when_k_is_vocab_and_matches_verl_kernel():
    s, t, mask = _inputs((2, 5, 11), seed=6)
    lt = F.log_softmax(t, -1)
    vals, ids = lt.topk(11, dim=-1)
    full = D.forward_kl(s, t, mask, reduction="none")
    torch.testing.assert_close(D.forward_kl_topk(s, vals, ids, mask, reduction="none"), full, rtol=1e-5, atol=1e-6)

    # K < V: same number as verl's FSDP logits-processor kernel (clamped at 0 like verl's final step)
    from verl.trainer.distillation.fsdp.losses import compute_forward_kl_topk as verl_kernel

    k = 3
    vals, ids = lt.topk(k, dim=-1)
    ours = D.forward_kl_topk(s, vals, ids, torch.ones(2, 5, dtype=torch.bool), reduction="none")
    nested = lambda x: torch.nested.nested_tensor_from_jagged(x.reshape(-1, k), offsets=torch.tensor([0, 5, 10]))
    cfg = SimpleNamespace(distillation_loss=SimpleNamespace(use_chunked_topk=False, log_prob_min_clamp=None))
    out = verl_kernel(s.reshape(1, 10, 11), nested(vals), nested(ids), cfg, "thd")
    torch.testing.assert_close(ours.reshape(1, 10), out["distillation_losses"].clamp_min(0), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- sampled estimators


def _sampled_setup(seed=7, T=4, V=6):
    g = torch.Generator().manual_seed(seed)
    s_logits = torch.randn(1, T, V, generator=g)
    t_logits = torch.randn(1, T, V, generator=g)
    return F.log_softmax(s_logits, -1), F.log_softmax(t_logits, -1)


def test_k3_and_k1_are_unbiased_for_reverse_kl():
    log_s, log_t = _sampled_setup()
    exact = D.reverse_kl(log_s, log_t, torch.ones(1, 4, dtype=torch.bool), reduction="none")[0]  # (T,)
    torch.manual_seed(0)
    n = 20000
    x = torch.distributions.Categorical(logits=log_s[0]).sample((n,))  # (n, T)
    s = log_s[0].gather(-1, x.T).T  # (n, T)
    t = log_t[0].gather(-1, x.T).T
    mask = torch.ones(n, 4, dtype=torch.bool)
    for est in ("k3", "k1"):
        per = D.reverse_kl_sampled(s, t, mask, estimator=est, reduction="none")
        if est == "k3":
            assert (per >= 0).all()
        mean, se = per.mean(0), per.std(0) / math.sqrt(n)
        assert ((mean - exact).abs() <= 5 * se + 1e-3).all(), (est, mean, exact, se)
    # token-mean of k3 approximates the token-mean exact KL
    k3 = D.reverse_kl_sampled(s, t, mask, estimator="k3")
    assert abs(k3.item() - exact.mean().item()) < 0.05 * exact.mean().item() + 1e-3


def test_estimator_expected_gradients():
    """Exact expectations over x ~ s (weights s detached): k2 and k3+ give grad KL[s||t], k3 gives grad KL[t||s]."""
    log_s0, log_t = _sampled_setup(seed=8, T=3, V=5)
    logits = log_s0.clone().requires_grad_(True)
    ones = torch.ones(1, 3, dtype=torch.bool)

    def grad_of(fn):
        logits.grad = None
        fn().backward()
        return logits.grad.clone()

    g_rev = grad_of(lambda: D.reverse_kl(logits, log_t, ones, reduction="sum"))
    g_fwd = grad_of(lambda: D.forward_kl(logits, log_t, ones, reduction="sum"))

    def expected_grad(est):
        def f():
            ls = F.log_softmax(logits, -1)[0]  # (T, V): every token of the vocab as the "sample"
            w = ls.detach().exp()
            per = D.reverse_kl_sampled(ls, log_t[0], torch.ones(3, 5, dtype=torch.bool), estimator=est,
                                       reduction="none")
            return (w * per).sum()
        return grad_of(f)

    torch.testing.assert_close(expected_grad("k2"), g_rev, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(expected_grad("k3+"), g_rev, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(expected_grad("k3"), g_fwd, rtol=1e-4, atol=1e-6)
    assert expected_grad("k1").abs().max() < 1e-6


def test_sampled_teacher_detached_and_padding_ignored():
    s = torch.randn(2, 5).requires_grad_(True)
    t = torch.randn(2, 5).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    t_dirty = t.detach().clone()
    t_dirty[0, 3:] = -math.inf
    t_dirty.requires_grad_(True)
    loss = D.reverse_kl_sampled(s, t_dirty, mask, estimator="k3", reduction="sum")
    loss.backward()
    assert torch.isfinite(loss) and t_dirty.grad is None
    assert (s.grad[~mask] == 0).all() and torch.isfinite(s.grad).all()
    # bf16 in -> float32 out
    out = D.reverse_kl_sampled(s.detach().bfloat16(), t.detach().bfloat16(), mask)
    assert out.dtype == torch.float32


# --------------------------------------------------------------------------- wrapper and validation


def test_distill_loss_wrapper_dispatch_and_metrics():
    s, t, mask = _inputs((2, 5, 7), seed=9)
    loss, m = D.distill_loss(s, t, mask, kind="forward", coef=0.5)
    torch.testing.assert_close(loss, 0.5 * D.forward_kl(s, t, mask))
    assert m["distill/num_tokens"] == int(mask.sum()) and m["distill/coef"] == 0.5
    assert math.isclose(m["distill/loss"], 0.5 * m["distill/kl"], rel_tol=1e-6)
    loss, m = D.distill_loss(s, t, mask, kind="reverse", coef=2.0, reduction="sum", temperature=2.0)
    torch.testing.assert_close(loss, 2.0 * D.reverse_kl(s, t, mask, temperature=2.0, reduction="sum"))
    assert m["distill/kl_max"] >= m["distill/kl"] / m["distill/num_tokens"] - 1e-6
    ls, lt = F.log_softmax(s, -1)[..., 0], F.log_softmax(t, -1)[..., 0]
    loss, _ = D.distill_loss(ls, lt, mask, kind="reverse", estimator="k1")
    torch.testing.assert_close(loss, D.reverse_kl_sampled(ls, lt, mask, estimator="k1"))
    empty = torch.zeros_like(mask)
    loss, m = D.distill_loss(s, t, empty)
    assert loss.item() == 0.0 and m["distill/num_tokens"] == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda s, t, m: D.forward_kl(s, t[:, :-1], m),  # misaligned tokens
        lambda s, t, m: D.reverse_kl(s, t[..., :-1], m),  # different vocab
        lambda s, t, m: D.forward_kl(s[0], t[0], m),  # not 3-D
        lambda s, t, m: D.forward_kl(s, t, m[:, :-1]),  # bad mask shape
        lambda s, t, m: D.forward_kl(s, t, m.float() * 0.5),  # non 0/1 mask
        lambda s, t, m: D.forward_kl(s.long(), t.long(), m),  # integer logits
        lambda s, t, m: D.forward_kl(s, t, m, temperature=0.0),
        lambda s, t, m: D.forward_kl(s, t, m, temperature=-1.0),
        lambda s, t, m: D.reverse_kl(s, t, m, temperature=float("nan")),
        lambda s, t, m: D.reverse_kl(s, t, m, reduction="mean"),
        lambda s, t, m: D.reverse_kl_sampled(s[..., 0], t[..., 0], m, estimator="k4"),
        lambda s, t, m: D.reverse_kl_sampled(s[..., 0], t[..., :2, 0], m),
        lambda s, t, m: D.reverse_kl_sampled(s, t, m),  # 3-D into sampled variant
        lambda s, t, m: D.reverse_kl_sampled(s[..., 0], t[..., 0], m, log_ratio_clamp=0),
        lambda s, t, m: D.distill_loss(s, t, m, kind="both"),
        lambda s, t, m: D.distill_loss(s, t, m, coef=-1.0),
        lambda s, t, m: D.distill_loss(s, t, m, coef=float("inf")),
        lambda s, t, m: D.distill_loss(s, t, m, reduction="none"),
        lambda s, t, m: D.distill_loss(s[..., 0], t[..., 0], m, kind="forward"),
        lambda s, t, m: D.distill_loss(s[0, 0], t[0, 0], m),
        lambda s, t, m: D.distill_loss(s[..., 0], t[..., 0], m, temperature=2.0),  # T on log-probs
        lambda s, t, m: D.forward_kl_topk(s, t[..., :2], torch.full((2, 5, 2), 99), m),  # id out of range
        lambda s, t, m: D.forward_kl_topk(s, t[..., :2], t[..., :2], m),  # float ids
    ],
)
def test_invalid_arguments_raise_value_error(call):
    s, t, mask = _inputs((2, 5, 7), seed=10)
    with pytest.raises(ValueError):
        call(s, t, mask)


# --------------------------------------------------------------------------- the authors' sampled form, as trained


def test_authors_sampled_reverse_kl_on_two_tokens_is_what_the_credit_trains():
    """The authors' op-sd loss (DISTILL.sh, full_logit_distillation off): token mean of log π_s·sg(log π_s − log π_t).
    z = two tokens, log π_s = (-1, -2), log π_t = (-1.5, -1): gaps (0.5, -1.0), loss (-0.5 + 2.0) / 2 = 0.75, gradient
    gap / 2 = (0.25, -0.5). Our credit A = -λ·gap = (-0.5, 1.0) under verl's surrogate -A·π/π_old at the sampling
    policy gives the same gradient (its value, -0.25, differs: only the gradient is trained)."""
    from skl_verl.skl.losses import reverse_kl_credit

    teacher = torch.tensor([-1.5, -1.0])
    student = torch.tensor([-1.0, -2.0], requires_grad=True)
    theirs = (student * (student - teacher).detach()).mean()
    theirs.backward()
    assert theirs.item() == pytest.approx(0.75)
    torch.testing.assert_close(student.grad, torch.tensor([0.25, -0.5]))

    credit = reverse_kl_credit(student.detach(), teacher, coef=1.0)
    torch.testing.assert_close(credit, torch.tensor([-0.5, 1.0]))
    log_prob = student.detach().clone().requires_grad_(True)
    ours = (-credit * torch.exp(log_prob - student.detach())).mean()
    ours.backward()
    assert ours.item() == pytest.approx(-0.25)
    torch.testing.assert_close(log_prob.grad, torch.tensor([0.25, -0.5]))
    # λ scales it: the authors' distillation_loss_coef 1 against ours 0.1 before issue 37
    torch.testing.assert_close(reverse_kl_credit(student.detach(), teacher, coef=0.1), torch.tensor([-0.05, 0.1]))
