"""Reference math for SKL-RL's multi-turn self-distillation (paper Appendix E, Eqs. 5-6), checked by
``test_distill_losses.py``; no production code calls it (see the last section).

The paper distils look-ahead simulations into the agent's *stateful knowledge* ``z``:

* student  ``pi_theta(z | s_t, H)``              - knowledge written without simulations,
* teacher  ``pi_theta(z | tau_N^H, s_t, H)``     - the same policy, conditioned on the
  simulation context ``tau_N^H``,

and aligns the student with the teacher with either

* **Forward KL** (Eq. 5), ``sum_{s_t} KL[teacher || student]`` - a multi-turn self-distillation
  extension of Supervised-KD (Agarwal et al., 2024), mode-covering, or
* **Reverse KL** (Eq. 6), ``sum_{s_t} KL[student || teacher]`` - a multi-turn extension of
  on-policy self-distillation (OPSD, Zhao et al., 2026), mode-seeking.

Both are computed token by token over the tokens of ``z`` (the KL of the sequence distribution
of ``z`` factorises, by the chain rule, into the sum over ``z``'s tokens of per-token KLs at
the visited prefixes); ``mask`` selects the ``z`` tokens.

Stop-gradient on the teacher
----------------------------
Teacher and student share ``theta`` and differ only in context. Eqs. 5-6 as written would also
differentiate through the teacher, which would pull the *simulation-informed* distribution
towards the uninformed one - the opposite of "internalise what the simulations taught". Every
function here therefore treats the teacher as a fixed target: teacher inputs are ``.detach()``-ed
(as in OPSD / on-policy distillation, and as verl does, where teacher log-probs are plain data).
The gradient reaches ``theta`` only through the student context.

Numerics
--------
Full-vocabulary losses cast to float32 *before* ``log_softmax`` (so bf16/fp16 logits give float32
results), divide by ``temperature`` (applied to student and teacher alike, standard KD), and
compute ``sum_v p_v (log p_v - log q_v)`` with terms where ``p_v == 0`` set to exactly 0 (no
``0 * -inf`` NaNs, also in the backward pass). Masked positions are zeroed *before* any math, so
garbage (``inf``/``nan``) in padding never leaks into the loss or its gradient.

Reductions
----------
``"token-mean"``: sum over masked tokens / number of masked tokens (0 if none);
``"sum"``: sum over masked tokens and the batch - the literal ``sum_{s_t}`` of Eqs. 5-6;
``"seq-mean-token-sum"``: per-sequence token sum, averaged over sequences with >= 1 masked
token (verl's ``agg_loss`` convention); ``"none"``: the (B, T) per-token matrix, 0 where masked.

Sampled-token variants (what verl's rollout stores)
---------------------------------------------------
When only the log-probs of the *sampled* tokens are available (verl keeps ``log_probs`` of the
rollout's tokens, and its teacher servers return the teacher's log-prob of the same tokens),
``reverse_kl_sampled`` estimates the reverse KL from ``x ~ student`` with, per token,
``d = log s(x) - log t(x)``, ``r = exp(-d) = t(x)/s(x)``:

* ``"k1"``: ``d`` - unbiased for ``KL[s||t]`` but can be negative and very noisy. As a *loss* its
  expected gradient is ``E_s[grad log s] = 0``: useless for backprop; use it as a (negative)
  reward in a policy gradient, which then gives exactly ``grad KL[s||t]``.
* ``"k2"``: ``d**2 / 2`` - biased in value (second-order approximation), but as a loss its
  expected gradient ``E_s[d grad log s]`` is exactly ``grad KL[s||t]`` (per token, prefix fixed).
* ``"k3"`` (default): ``r - log r - 1 = exp(t-s) - (t-s) - 1`` - unbiased for ``KL[s||t]``,
  always >= 0, low variance when ``s`` and ``t`` are close. Caveat: as a *loss* its expected
  gradient is ``E_s[(1 - r) grad log s] = grad KL[t||s]`` - the **forward** KL's gradient.
* ``"k3+"``: value of k3, gradient of k2 (straight-through, as verl's ``kl_penalty("k3+")``):
  unbiased value *and* the reverse-KL gradient.

Biases to keep in mind: (i) all of them are unbiased only if the tokens were sampled from the
*current* student; rollout-engine/actor mismatch and PPO's stale samples make them off-policy;
(ii) only the sampled prefix is scored, so the gradient ignores how ``theta`` changes which
prefixes are visited (the usual per-token surrogate); (iii) ``log_ratio_clamp`` (default 20,
verl's value) clips ``t - s`` before ``exp`` for stability and biases extreme tokens.

What training uses instead
--------------------------
verl's distillation registry does not fit: its losses need ``teacher_logprobs`` from a frozen
teacher server fed the student's own sequence, while SKL's teacher is the current policy under the
simulation context. So the rollout (``skl_verl/skl/rl_loop.py``) emits the samples and the
``skl_rl`` estimator (``skl_verl/skl/losses.py``) turns them into advantages: forward KL as a
sample of the student context with the teacher's ``z`` as its response, weight λ; reverse KL as
the ``"k1"`` reward form above, ``-λ (log s - log t)`` on the student's ``z`` tokens, from the old
log-probs of the trace and of its teacher probe (``reverse_kl_credit``). Its gradient under PPO's
surrogate at the sampling policy is that of the authors' ``log s · sg(log s - log t)`` (their op-sd
loss; checked on two tokens in ``test_distill_losses.py``). The probe is either the authors' teacher
sequence (the trace with ``z`` in the place of the refined ``ẑ``: ``distill_kind: reverse_trace``,
``skl_verl/skl/distillation.py``) or ours (the student's messages plus the simulations:
``distill_kind: reverse``). Neither calls these functions, which is why they live beside their tests.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F

__all__ = [
    "REDUCTIONS",
    "ESTIMATORS",
    "forward_kl",
    "reverse_kl",
    "forward_kl_topk",
    "reverse_kl_sampled",
    "distill_loss",
]

Reduction = Literal["none", "token-mean", "sum", "seq-mean-token-sum"]
REDUCTIONS: tuple[str, ...] = ("none", "token-mean", "sum", "seq-mean-token-sum")
ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3", "k3+")
KINDS: tuple[str, ...] = ("forward", "reverse")


# --------------------------------------------------------------------------- validation


def _check_mask(mask: torch.Tensor, shape: torch.Size, name: str = "mask") -> torch.Tensor:
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} (batch, tokens), got {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        if mask.is_floating_point() or mask.is_complex():
            bad = (mask != 0) & (mask != 1)
            if bool(bad.any()):
                raise ValueError(f"{name} must be boolean or 0/1 valued")
        mask = mask != 0
    return mask


def _check_temperature(temperature: float) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    if not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    return float(temperature)


def _check_reduction(reduction: str) -> str:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    return reduction


def _check_pair(student: torch.Tensor, teacher: torch.Tensor, kind: str, layout: str) -> None:
    """Both sides are floating tensors of ``layout`` (e.g. "(batch, tokens, vocab)") and equal shape."""
    for name, t in ((f"student_{kind}", student), (f"teacher_{kind}", teacher)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != layout.count(",") + 1:
            raise ValueError(f"{name} must have shape {layout}, got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be floating point, got {t.dtype}")
    if student.shape != teacher.shape:
        raise ValueError(
            f"student_{kind} and teacher_{kind} must be aligned token by token with the same shape: "
            f"got {tuple(student.shape)} vs {tuple(teacher.shape)}"
        )


def _check_logits_pair(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> None:
    _check_pair(student_logits, teacher_logits, "logits", "(batch, tokens, vocab)")
    if student_logits.shape[-1] < 1:
        raise ValueError("vocab dimension must be >= 1")


def _check_logprob_pair(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor) -> None:
    _check_pair(student_logprobs, teacher_logprobs, "logprobs", "(batch, tokens)")


def _reduce(per_token: torch.Tensor, mask: torch.Tensor, reduction: str) -> torch.Tensor:
    """Reduce a (B, T) per-token loss that is already 0 where ``mask`` is False."""
    if reduction == "none":
        return per_token
    if reduction == "sum":
        return per_token.sum()
    if reduction == "token-mean":
        return per_token.sum() / mask.sum().clamp_min(1).to(per_token.dtype)
    # seq-mean-token-sum: mean over sequences that have at least one z token (verl's agg_loss).
    seq = per_token.sum(dim=-1)
    n_seq = mask.any(dim=-1).sum().clamp_min(1).to(per_token.dtype)
    return seq.sum() / n_seq


def _masked_log_softmax(logits: torch.Tensor, mask: torch.Tensor, temperature: float) -> torch.Tensor:
    """float32 log-softmax of ``logits / temperature``; masked rows are replaced by zeros first."""
    x = logits.float()
    x = torch.where(mask.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype, device=x.device))
    if temperature != 1.0:
        x = x / temperature
    return F.log_softmax(x, dim=-1)


def _kl_from_logprobs(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """``sum_v p_v (log p_v - log q_v)`` over the last dim with ``0 log 0 = 0`` (NaN-free, also backward)."""
    p = log_p.exp()
    support = p > 0
    zero = torch.zeros((), dtype=log_p.dtype, device=log_p.device)
    diff = torch.where(support, log_p, zero) - torch.where(support, log_q, zero)
    return (p * diff).sum(dim=-1)


def _full_vocab_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
    reduction: str,
    direction: str,
) -> torch.Tensor:
    _check_logits_pair(student_logits, teacher_logits)
    mask = _check_mask(mask, student_logits.shape[:2])
    temperature = _check_temperature(temperature)
    reduction = _check_reduction(reduction)
    mask = mask.to(student_logits.device)

    log_s = _masked_log_softmax(student_logits, mask, temperature)
    log_t = _masked_log_softmax(teacher_logits.detach(), mask, temperature)  # stop-gradient teacher
    per_token = _kl_from_logprobs(log_t, log_s) if direction == "forward" else _kl_from_logprobs(log_s, log_t)
    per_token = torch.where(mask, per_token, torch.zeros((), dtype=per_token.dtype, device=per_token.device))
    return _reduce(per_token, mask, reduction)


def forward_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    reduction: Reduction = "token-mean",
) -> torch.Tensor:
    """Forward KL of Eq. 5: ``sum_{z tokens} KL[ pi(.|tau_N^H, s_t, H) || pi(.|s_t, H) ]``.

    Args:
        student_logits: (B, T, V) logits of ``pi_theta(z | s_t, H)`` at the z-token positions.
        teacher_logits: (B, T, V) logits of ``pi_theta(z | tau_N^H, s_t, H)``, aligned token by
            token with the student; detached (stop-gradient, see the module docstring).
        mask: (B, T) bool/0-1, True on the tokens of ``z``.
        temperature: > 0, both sides' logits are divided by it.
        reduction: ``"token-mean"`` | ``"sum"`` | ``"seq-mean-token-sum"`` | ``"none"``.

    Returns:
        float32 scalar (or (B, T) for ``"none"``), differentiable w.r.t. ``student_logits`` only.
    """
    return _full_vocab_kl(student_logits, teacher_logits, mask, temperature, reduction, "forward")


def reverse_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    reduction: Reduction = "token-mean",
) -> torch.Tensor:
    """Reverse KL of Eq. 6: ``sum_{z tokens} KL[ pi(.|s_t, H) || pi(.|tau_N^H, s_t, H) ]``.

    Same arguments and return as :func:`forward_kl`; teacher detached.
    """
    return _full_vocab_kl(student_logits, teacher_logits, mask, temperature, reduction, "reverse")


def forward_kl_topk(
    student_logits: torch.Tensor,
    teacher_topk_logprobs: torch.Tensor,
    teacher_topk_ids: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    reduction: Reduction = "token-mean",
) -> torch.Tensor:
    """Eq. 5 restricted to the teacher's top-k tokens (verl's ``forward_kl_topk`` form).

    ``sum_{k} t_k (log t_k - log s_k)`` over the K teacher tokens, with ``log s`` the student's
    full-vocabulary float32 log-softmax gathered at ``teacher_topk_ids``; no renormalisation,
    so a per-token value can be slightly negative; like verl it is clamped at 0. Equals
    :func:`forward_kl` when K = V. ``temperature`` divides the student logits only (teacher
    log-probs come precomputed).

    Args:
        student_logits: (B, T, V).
        teacher_topk_logprobs: (B, T, K) teacher log-probs (detached).
        teacher_topk_ids: (B, T, K) integer ids in [0, V).
        mask: (B, T) z-token mask.
    """
    if not isinstance(student_logits, torch.Tensor) or student_logits.dim() != 3:
        raise ValueError("student_logits must be a (batch, tokens, vocab) tensor")
    if not student_logits.is_floating_point():
        raise ValueError(f"student_logits must be floating point, got {student_logits.dtype}")
    B, T, V = student_logits.shape
    if not isinstance(teacher_topk_logprobs, torch.Tensor) or teacher_topk_logprobs.dim() != 3:
        raise ValueError("teacher_topk_logprobs must be a (batch, tokens, k) tensor")
    if not isinstance(teacher_topk_ids, torch.Tensor) or teacher_topk_ids.shape != teacher_topk_logprobs.shape:
        raise ValueError("teacher_topk_ids must be a tensor with the same shape as teacher_topk_logprobs")
    if teacher_topk_logprobs.shape[:2] != (B, T):
        raise ValueError(
            f"teacher top-k tensors must be aligned with student_logits on (batch, tokens)={(B, T)}, "
            f"got {tuple(teacher_topk_logprobs.shape[:2])}"
        )
    K = teacher_topk_logprobs.shape[-1]
    if not 1 <= K <= V:
        raise ValueError(f"top-k size must be in [1, vocab={V}], got {K}")
    if teacher_topk_ids.is_floating_point() or teacher_topk_ids.dtype == torch.bool:
        raise ValueError(f"teacher_topk_ids must be integer, got {teacher_topk_ids.dtype}")
    mask = _check_mask(mask, (B, T)).to(student_logits.device)
    temperature = _check_temperature(temperature)
    reduction = _check_reduction(reduction)

    dev = student_logits.device
    ids = teacher_topk_ids.to(dev).long()
    ids = torch.where(mask.unsqueeze(-1), ids, torch.zeros((), dtype=torch.long, device=dev))
    if bool(((ids < 0) | (ids >= V)).any()):
        raise ValueError(f"teacher_topk_ids out of range [0, {V})")
    log_s = _masked_log_softmax(student_logits, mask, temperature).gather(-1, ids)
    log_t = torch.where(
        mask.unsqueeze(-1),
        teacher_topk_logprobs.detach().to(dev).float(),
        torch.full((), -math.inf, device=dev),
    )
    per_token = _kl_from_logprobs(log_t, log_s).clamp_min(0.0)
    per_token = torch.where(mask, per_token, torch.zeros((), dtype=per_token.dtype, device=per_token.device))
    return _reduce(per_token, mask, reduction)


def _sampled_kl_terms(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, estimator: str, clamp):
    s = student_logprobs
    t = teacher_logprobs
    d = s - t  # log s(x) - log t(x)
    if estimator == "k1":
        return d
    k2 = 0.5 * d.square()
    if estimator == "k2":
        return k2
    log_r = -d  # log t(x)/s(x)
    if clamp is not None:
        log_r = log_r.clamp(min=-clamp, max=clamp)
    k3 = torch.exp(log_r) - log_r - 1.0
    if estimator == "k3":
        return k3
    return k2 - k2.detach() + k3.detach()  # "k3+": k3 value, k2 (reverse-KL) gradient


def reverse_kl_sampled(
    student_logprobs: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    mask: torch.Tensor,
    estimator: Literal["k1", "k2", "k3", "k3+"] = "k3",
    reduction: Reduction = "token-mean",
    log_ratio_clamp: float | None = 20.0,
) -> torch.Tensor:
    """Single-sample estimate of the reverse KL of Eq. 6 from the sampled z tokens.

    For tokens ``x ~ pi_theta(. | s_t, H)`` (the student's own rollout), with
    ``s = log pi_theta(x | s_t, H)`` and ``t = log pi_theta(x | tau_N^H, s_t, H)`` (detached):

    * ``"k1"``: ``s - t`` (unbiased value; zero expected gradient as a loss - use as a reward),
    * ``"k2"``: ``(s - t)**2 / 2`` (biased value; unbiased reverse-KL gradient as a loss),
    * ``"k3"``: ``exp(t - s) - (t - s) - 1 >= 0`` (unbiased value, low variance; as a loss its
      expected gradient is the *forward* KL's),
    * ``"k3+"``: k3 value with k2 gradient (straight-through).

    See the module docstring for the biases. ``log_ratio_clamp`` clips ``t - s`` to
    ``[-c, c]`` inside k3's ``exp`` (None disables it).

    Args:
        student_logprobs: (B, T) log-probs of the sampled tokens under the student (with grad).
        teacher_logprobs: (B, T) log-probs of the same tokens under the teacher.
        mask: (B, T) z-token mask.
    Returns:
        float32 scalar, or (B, T) for ``reduction="none"``.
    """
    _check_logprob_pair(student_logprobs, teacher_logprobs)
    mask = _check_mask(mask, student_logprobs.shape).to(student_logprobs.device)
    reduction = _check_reduction(reduction)
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    if log_ratio_clamp is not None:
        if isinstance(log_ratio_clamp, bool) or not isinstance(log_ratio_clamp, (int, float)):
            raise ValueError(f"log_ratio_clamp must be a positive number or None, got {log_ratio_clamp!r}")
        if not log_ratio_clamp > 0:
            raise ValueError(f"log_ratio_clamp must be > 0, got {log_ratio_clamp!r}")

    zero = torch.zeros((), dtype=torch.float32, device=student_logprobs.device)
    s = torch.where(mask, student_logprobs.float(), zero)
    t = torch.where(mask, teacher_logprobs.detach().float().to(s.device), zero)
    per_token = _sampled_kl_terms(s, t, estimator, log_ratio_clamp)
    per_token = torch.where(mask, per_token, zero)
    return _reduce(per_token, mask, reduction)


# --------------------------------------------------------------------------- wrapper


def distill_loss(
    student: torch.Tensor,
    teacher: torch.Tensor,
    mask: torch.Tensor,
    kind: Literal["forward", "reverse"] = "reverse",
    coef: float = 1.0,
    temperature: float = 1.0,
    reduction: Reduction = "token-mean",
    estimator: Literal["k1", "k2", "k3", "k3+"] = "k3",
) -> tuple[torch.Tensor, dict[str, Any]]:
    """``lambda * L_Distill`` (Eq. 5 for ``kind="forward"``, Eq. 6 for ``kind="reverse"``).

    The input form is read from the shapes: (B, T, V) logits on both sides -> exact
    full-vocabulary KL (:func:`forward_kl` / :func:`reverse_kl`); (B, T) sampled-token
    log-probs -> :func:`reverse_kl_sampled` with ``estimator`` (reverse only: the forward KL
    needs the teacher's distribution, not just its log-prob of the student's samples; and
    ``temperature`` must stay 1.0 since the log-probs come already normalised).

    Returns:
        ``(coef * loss, metrics)``; ``loss`` is a scalar (``reduction="none"`` is rejected),
        metrics are python floats: ``distill/kl`` (before ``coef``), ``distill/loss``,
        ``distill/kl_max`` (largest per-token value), ``distill/num_tokens``, ``distill/coef``.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not math.isfinite(coef) or coef < 0:
        raise ValueError(f"coef (lambda) must be a finite number >= 0, got {coef!r}")
    if reduction == "none":
        raise ValueError("distill_loss returns a scalar; use reduction 'token-mean', 'sum' or 'seq-mean-token-sum'")
    _check_reduction(reduction)
    if not isinstance(student, torch.Tensor) or not isinstance(teacher, torch.Tensor):
        raise ValueError("student and teacher must be torch.Tensors")

    if student.dim() == 3:
        fn = forward_kl if kind == "forward" else reverse_kl
        per_token = fn(student, teacher, mask, temperature=temperature, reduction="none")
    elif student.dim() == 2:
        if kind == "forward":
            raise ValueError(
                "kind='forward' needs (B, T, V) logits: the forward KL cannot be formed from the "
                "sampled-token log-probs alone"
            )
        if _check_temperature(temperature) != 1.0:
            raise ValueError(
                "temperature applies to logits only: sampled-token log-probs are already "
                "normalised at whatever temperature produced them; pass temperature=1.0"
            )
        per_token = reverse_kl_sampled(student, teacher, mask, estimator=estimator, reduction="none")
    else:
        raise ValueError(
            f"student must be (B, T, V) logits or (B, T) sampled-token log-probs, got shape {tuple(student.shape)}"
        )

    bool_mask = _check_mask(mask, per_token.shape).to(per_token.device)
    kl = _reduce(per_token, bool_mask, reduction)
    loss = kl * float(coef)
    with torch.no_grad():
        n = int(bool_mask.sum())
        metrics = {
            "distill/kl": float(kl.detach()),
            "distill/loss": float(loss.detach()),
            "distill/kl_max": float(per_token.detach()[bool_mask].max()) if n else 0.0,
            "distill/num_tokens": n,
            "distill/coef": float(coef),
        }
    return loss, metrics
