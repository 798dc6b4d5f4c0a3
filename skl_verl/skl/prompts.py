"""Prompts for SKL's bootstrapping step (Alg. 1 line 14; §2.2 context C_t)."""

REFLECT_SYSTEM = (
    "You refine an agent's predictive knowledge about one state of a text environment. You are "
    "given the state, the agent's current knowledge of it, several recorded continuations that "
    "started from this exact state, and the agent's knowledge of the state reached a few steps "
    "later. Write improved knowledge of the state: which actions lead where, what risks and "
    "opportunities follow, stated so it helps the next decision. Reply inside <knowledge>...</knowledge>."
)

REFLECT_USER = """State:
{state}

Current knowledge of this state:
{prior}

Recorded continuations from this state ({count} of them, up to {horizon} steps each, with the
states they reached and the knowledge held there):
{rollouts}

Knowledge of the state {horizon} steps later in the failed episode:
{successor}

Write the refined knowledge of this state inside <knowledge>...</knowledge>."""

NO_KNOWLEDGE = "(none yet)"


def _clip(text: str, limit: int | None) -> str:
    """``text`` on one line, cut to ``limit`` characters (None: whole)."""
    text = " ".join(text.split())
    return text if limit is None or len(text) <= limit else text[: max(0, limit - 3)] + "..."


def render_rollouts(rollouts, horizon: int, max_state_chars: int | None = None, max_knowledge_chars: int | None = None) -> str:
    """Buffered partial rollouts τ^H_n(s_t) as C_t shows them (Alg. 1 line 13).

    Each rollout is the list of buffered transitions from a visit of s_t: the first ``horizon`` are
    the steps taken (action, reward, the knowledge the agent held at each later state, the states
    s_{t+1..t+H} reached), a transition after them only supplies the observation of s_{t+H}. Every
    state and knowledge text is whole unless its bound is set (R3L's reflection sees the whole trajectory);
    the caller keeps the whole prompt within its budget by showing fewer continuations (``SklSdAgentLoop``).
    """
    if not rollouts:
        return "(no recorded continuation)"
    blocks = []
    for i, rollout in enumerate(rollouts, start=1):
        steps, after = rollout[:horizon], rollout[horizon : horizon + 1]
        lines = [f"Continuation {i}:"]
        for k, tr in enumerate(steps):
            if k:  # s_t itself is the state under study, shown once above
                lines.append(f"  State after {k} step{'s' if k > 1 else ''}: {_clip(tr.observation, max_state_chars)}")
                if tr.knowledge:
                    lines.append(f"  Knowledge held there: {_clip(tr.knowledge, max_knowledge_chars)}")
            outcome = " (the episode ended here)" if tr.done else ""
            lines.append(f"  Step {k + 1}: action {tr.action} -> reward {tr.reward:g}{outcome}")
        if after:
            n = len(steps)
            lines.append(f"  State after {n} step{'s' if n > 1 else ''}: {_clip(after[0].observation, max_state_chars)}")
            if after[0].knowledge:
                lines.append(f"  Knowledge held there: {_clip(after[0].knowledge, max_knowledge_chars)}")
        elif steps and not steps[-1].done:
            lines.append(f"  (the recorded episode stops after {len(steps)} steps without ending)")
        blocks.append("\n".join(lines))
    return "\n".join(blocks)
