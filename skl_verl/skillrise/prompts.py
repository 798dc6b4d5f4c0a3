"""Role-specific instructions for SkillRise's two phases (the paper's templates are images; these are ours)."""

from collections.abc import Callable
from dataclasses import dataclass

from skl_verl.rollout.env_loop import DEFAULT_SYSTEM_PROMPT

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
    "names, positions) that will not transfer. You may first reason about the attempt; then give "
    "the full revised document inside <skill>...</skill>, at most {max_words} words. Only the last "
    "<skill> block counts."
)

CURATE_USER = """Current skill document:
{document}

Most recent task: {task}
Outcome: {outcome}
Last {shown} of {total} steps of the attempt (action -> what the environment returned):
{steps}

Write the revised skill document inside <skill>...</skill>."""


def solve_preamble(document: str) -> str:
    return f"Skill document:\n{document}\n\nTask:\n"


def render_steps(actions: list[tuple[str, str]], window: int, max_chars_per_result: int = 1500) -> tuple[str, int]:
    """The last ``window`` steps as numbered 'action -> result' lines: the parsed action (or what was
    wrong with the reply) and the env's observation, whitespace-collapsed and capped at
    ``max_chars_per_result``. Returns (text, number shown)."""
    shown = actions[-window:] if window > 0 else []
    start = len(actions) - len(shown)
    lines = []
    for i, (action, result) in enumerate(shown, start=start + 1):
        result = " ".join(result.split())
        if len(result) > max_chars_per_result:
            result = result[:max_chars_per_result] + " ..."
        lines.append(f"{i}. {action} -> {result or '(episode ended)'}")
    return "\n".join(lines) or "(no steps)", len(shown)


# LaMer-style baseline: the same task attempted again, with a reflection on the earlier attempts
# carried between attempts instead of a cross-task skill document.
EMPTY_REFLECTION = "(No earlier attempt at this task yet.)"

REFLECT_SOLVE_SYSTEM = (
    "You are an agent solving a task in a text environment. You may be given a reflection written "
    "after your earlier attempts at this same task; use it to do better this time. Each turn, think "
    "briefly, then reply with exactly one action inside <action>...</action>, copied from the "
    "admissible actions."
)

REFLECT_SYSTEM = (
    "You will attempt the same task again. Write a reflection for your next attempt: what happened, "
    "what went wrong or right, and a concrete plan for the next attempt. Keep what still holds from "
    "your previous reflection. You may first reason; then give the full reflection inside "
    "<reflection>...</reflection>, at most {max_words} words. Only the last <reflection> block counts."
)

REFLECT_USER = """Previous reflection:
{document}

Task: {task}
Outcome of this attempt: {outcome}
Last {shown} of {total} steps of the attempt (action -> what the environment returned):
{steps}

Write the reflection for your next attempt inside <reflection>...</reflection>."""


# LaMer's own scheme (``reflections: accumulate``): each reflection looks back at one failed attempt
# only, and the next attempt sees every reflection written so far, in order.
REFLECT_ON_ATTEMPT_SYSTEM = (
    "Your attempt at this task did not succeed, and you will try it again from the start. Look back "
    "at this attempt: where it went wrong or wasted steps, and what you should have done instead. "
    "Then make a concrete plan for the next attempt that names the actions to take. You may first "
    "reason; then give the reflection inside <reflection>...</reflection>, at most {max_words} words. "
    "Only the last <reflection> block counts."
)

REFLECT_ON_ATTEMPT_USER = """Task: {task}
Outcome of this attempt: {outcome}
Last {shown} of {total} steps of the attempt (action -> what the environment returned):
{steps}

Write the reflection for your next attempt inside <reflection>...</reflection>."""

MISSING_REFLECTION = "(no reflection was written)"


def accumulated_reflections_preamble(reflections: list[str]) -> str:
    """Every earlier attempt's reflection, oldest first; nothing before the first attempt."""
    if not reflections:
        return ""
    lines = [f"Attempt {i} failed. Your reflection after it:\n{text or MISSING_REFLECTION}"
             for i, text in enumerate(reflections, start=1)]
    return ("\n\n".join(lines) + f"\n\nThis is attempt {len(reflections) + 1}, from the start.\n\nTask:\n")


def reflection_preamble(reflection: str) -> str:
    return f"Reflection on your earlier attempts at this task:\n{reflection}\n\nTask:\n"


def no_preamble(_: str) -> str:
    return ""


@dataclass(frozen=True)
class CarriedText:
    """What one trial carries from task to task, and the prompts around it."""

    solve_system: str
    empty: str
    """The text before anything was carried (its words do not count)."""
    preamble: Callable[[str], str]
    curate_system: str
    curate_user: str
    tag: str


CARRIED_TEXTS = {
    "skill_document": CarriedText(SOLVE_SYSTEM, EMPTY_DOCUMENT, solve_preamble, CURATE_SYSTEM, CURATE_USER, "skill"),
    "reflection": CarriedText(REFLECT_SOLVE_SYSTEM, EMPTY_REFLECTION, reflection_preamble, REFLECT_SYSTEM, REFLECT_USER,
                              "reflection"),
    # Independent attempts (task-independent baselines evaluated at Pass@k): the step loop's own prompt,
    # nothing carried; needs curate: false.
    "none": CarriedText(DEFAULT_SYSTEM_PROMPT, "", no_preamble, "", "", "skill"),
}
