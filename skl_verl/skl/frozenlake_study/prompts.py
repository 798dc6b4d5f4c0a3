"""The study's prompt text: acting (plain and stateful), and the three reflection prompts
(trajectory-level, root-state, and one-step bootstrap refinement)."""

SYSTEM_PLAY = (
    "You are playing FrozenLake, a grid game. Walk from S to the goal G without falling into a hole H. "
    "The ice is slippery: a move does not always go in the intended direction, and how it slips must "
    "be learnt from experience. Moving into the border keeps you in place."
)
SYSTEM_STATEFUL = (
    SYSTEM_PLAY + " You keep predictive knowledge about each state: what each action from that state "
    "is likely to lead to (where you may slide, the risk of falling, whether the goal can still be "
    "reached safely). You act on that knowledge."
)
ACTION_INSTRUCTION = "Think briefly if you need to, then give exactly one action inside <action>...</action>."
WRITE_KNOWLEDGE_INSTRUCTION = (
    "First write your knowledge of this state inside <knowledge>...</knowledge>: for each action, where you "
    "may end up, the risk of falling into a hole, and whether the goal can still be reached safely from there. "
    "Then give exactly one action inside <action>...</action>."
)
STORED_KNOWLEDGE_INSTRUCTION = "Based on this knowledge, give exactly one action inside <action>...</action>."
TRANSFER_NOTE = " (learnt on a different map, at a position whose surrounding tiles are the same as here)"

TRAJECTORY_REFLECT_SYSTEM = (
    "You review an attempt at FrozenLake, a grid game where slippery ice makes moves go astray, and write a "
    "reflection that will guide your next attempt on the same map."
)
TRAJECTORY_REFLECT_USER = """The map at the start of the attempt:
{observation}

Your reflection before this attempt:
{previous}

The attempt, move by move:
{trajectory}
Outcome: {outcome}

Reflect on the whole attempt: what went wrong or right and why, and write a plan for the next attempt on this map. Reply inside <reflection>...</reflection>."""

ROOT_REFLECT_SYSTEM = (
    "You refine your predictive knowledge about one state of FrozenLake, a grid game where slippery ice makes "
    "moves go astray. The knowledge must predict what happens from this state: for each action, where you may "
    "end up, the risk of falling into a hole and whether the goal can still be reached safely."
)
ROOT_REFLECT_USER = """State (the start of this map):
{observation}

Your current knowledge of this state:
{prior}

Recorded attempts that started from this state ({count} of them, most recent last):
{continuations}

Write your refined knowledge of this state inside <knowledge>...</knowledge>."""

BOOTSTRAP_REFLECT_SYSTEM = ROOT_REFLECT_SYSTEM + (
    " Keep it consistent with your knowledge of the states it leads to: if a successor is dangerous, the "
    "actions that can reach it are dangerous too."
)
BOOTSTRAP_REFLECT_USER = """State:
{observation}

Your current knowledge of this state:
{prior}

Recorded continuations from this state ({count} of them, one step each, most recent last):
{continuations}

Your knowledge of the state reached next in the latest attempt ({successor_where}):
{successor}

Write your refined knowledge of this state inside <knowledge>...</knowledge>."""
NO_KNOWLEDGE = "(none yet)"
