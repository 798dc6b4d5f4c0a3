"""SKL-RL's reverse-KL distillation as the authors ran their ablation (Eq. 6; their DISTILL.sh, ``op-sd``).

The teacher is the same policy conditioned on the simulations (π(z | τ^H_N, s_t, H)). The authors build its
context from the trace itself: the **teacher sequence** is the whole trace with the student's root z tokens put
where ẑ was (everything else identical: the proposal, the simulator's results, the refine request, the answer
request and the answer), so z is scored after everything the simulations showed. The **student sequence** is the
trace with its loss mask on the root z tokens only. Both masks count the same tokens (z's).

Here the trace is the sample the move was generated and trained in: its move's window with ``window: move`` (the
chess entries), the episode's stream otherwise. The functions below work on a sample's response: token ids, loss
mask, and the [start, end) of z and of ẑ in it.
"""

from __future__ import annotations

Span = tuple[int, int]
"""[start, end) of a turn's tokens in a sample's response."""


def trace_teacher(response_ids: list[int], response_mask: list[int], z: Span, z_hat: Span) -> tuple[list[int], list[int], int]:
    """(teacher response, its loss mask, where z starts in it) for Eq. 6's teacher π(z | τ^H_N, s_t, H).

    The teacher response is ``response_ids`` with ẑ's span replaced by z's tokens; the mask is z's own mask at the
    placed tokens and 0 everywhere else, so it counts exactly the tokens the student mask (``student_mask``) does.
    The prompt is the trace's, unchanged. z must come before ẑ (z is written first, ẑ after the simulations)."""
    (z_start, z_end), (h_start, h_end) = z, z_hat
    if not 0 <= z_start < z_end <= h_start < h_end <= len(response_ids) or len(response_mask) != len(response_ids):
        raise ValueError(f"need z {z} before ẑ {z_hat} inside a response of {len(response_ids)} tokens "
                         f"with a mask of the same length ({len(response_mask)})")
    z_ids, z_mask = response_ids[z_start:z_end], response_mask[z_start:z_end]
    teacher = response_ids[:h_start] + z_ids + response_ids[h_end:]
    mask = [0] * h_start + list(z_mask) + [0] * (len(response_ids) - h_end)
    return teacher, mask, h_start


def student_mask(response_mask: list[int], spans: list[Span]) -> list[int]:
    """The student sequence's loss mask: ``response_mask`` kept on the z spans only (one per step of the sample),
    0 on every other turn (proposal, ẑ, answer), as the authors' student mask. A sample with no span keeps none."""
    keep = [0] * len(response_mask)
    for start, end in spans:
        keep[start:end] = [1] * (end - start)
    return [int(m and k) for m, k in zip(response_mask, keep)]
