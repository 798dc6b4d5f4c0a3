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

Recorded continuations from this state ({count} of them, up to {horizon} steps each):
{rollouts}

Knowledge of the state {horizon} steps later in the failed episode:
{successor}

Write the refined knowledge of this state inside <knowledge>...</knowledge>."""

NO_KNOWLEDGE = "(none yet)"


def render_rollouts(rollouts, max_chars: int = 300) -> str:
    """Buffered partial rollouts (lists of Transition) as numbered action/reward lines."""
    if not rollouts:
        return "(no recorded continuation)"
    lines = []
    for i, rollout in enumerate(rollouts, start=1):
        steps = []
        for tr in rollout:
            outcome = " (episode ended)" if tr.done else ""
            steps.append(f"{tr.action} -> reward {tr.reward:g}{outcome}")
        lines.append(f"{i}. " + "; ".join(steps)[:max_chars])
    return "\n".join(lines)
