"""Role-specific instructions for SkillRise's two phases (the paper's templates are images; these are ours)."""

EMPTY_DOCUMENT = "(The skill document is currently empty. No skills have been distilled yet.)"

SOLVE_SYSTEM = (
    "You are an agent solving a task in a text environment. You are given a skill document that "
    "summarises transferable skills learned on earlier, related tasks; use what applies. Each turn, "
    "think briefly, then reply with exactly one action inside <action>...</action>, copied from "
    "the admissible actions."
)

CURATE_SYSTEM = (
    "You maintain a skill document for an agent that solves a sequence of related but different "
    "tasks. Rewrite the COMPLETE document: keep skills that still hold, add general procedures or "
    "failure modes revealed by the latest attempt, and remove instance-specific details (object "
    "names, positions) that will not transfer. Reply with the full revised document inside "
    "<skill>...</skill> and nothing else. At most {max_words} words."
)

CURATE_USER = """Current skill document:
{document}

Most recent task: {task}
Outcome: {outcome}
Last {shown} of {total} steps of the attempt (action -> result):
{steps}

Write the revised skill document inside <skill>...</skill>."""


def document_words(document: str) -> int:
    return 0 if document == EMPTY_DOCUMENT else len(document.split())


def solve_preamble(document: str) -> str:
    return f"Skill document:\n{document}\n\nTask:\n"


def render_steps(transcript: list[tuple[str, str]], window: int, max_chars_per_step: int = 400) -> tuple[str, int]:
    """The last ``window`` turns as numbered 'reply -> result' lines; returns (text, number shown)."""
    shown = transcript[-window:] if window > 0 else []
    start = len(transcript) - len(shown)
    lines = []
    for i, (reply, result) in enumerate(shown, start=start + 1):
        reply = " ".join(reply.split())[:max_chars_per_step]
        result = " ".join(result.split())[:max_chars_per_step] or "(episode ended)"
        lines.append(f"{i}. {reply} -> {result}")
    return "\n".join(lines) or "(no steps)", len(shown)
