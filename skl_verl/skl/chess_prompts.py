"""The chess prompt set of the stateful and SKL-RL loops (``prompt_set: chess_authors``, the chess entries' default).

It carries the contents of the authors' chess prompt set (``QWEN_TWO_STAGE_VALUE_PARALLEL_PLAN_PROMPT_SET``, the
paper's Table 6) in our own words: a system prompt that casts the policy as a player who may try moves in a simulator
and writes moves in SAN, with a reminder of how each piece moves; the state's understanding question carrying its FEN;
the proposal request; at each branch node the simulation state, then the understanding and the move; a refine request
that asks for a value-iteration-style judgement of the root moves over one line of (state, move, opponent's move,
reward, next state, game over) tuples per branch; a separate ẑ question carrying the root FEN; the answer request.
As in the authors' set the real game's next turn does not name the opponent's reply (the simulator's results do, in
UCI). ``prompt_set: ours`` keeps the loops' generic wording (``stateful_loop`` and ``rl_loop`` constants).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PROMPT_SETS = ("ours", "chess_authors")


@dataclass(frozen=True)
class ChessPromptSet:
    system: str
    knowledge_question: str  # after every real state: {fen}
    action_request: str  # the stateful loop's answer request (no simulation)
    simulated_action_request: str  # SKL-RL's answer request, after ẑ
    propose_request: str  # {n}
    branch_request: str  # {branch} {first} {step} {horizon} {observation} {ask}
    branch_understanding_ask: str
    branch_move_ask: str
    refine_request: str  # {branches}: one tuple line per branch (simulation.render_transition_tuples)
    refined_question: str  # the separate ẑ turn: {fen}


CHESS_AUTHORS = ChessPromptSet(
    system=(
        "A user and an assistant talk. The user shows a chess position and asks for the best move in it. The assistant "
        "is a strong chess player who can look a few moves ahead by trying moves in a simulator; it thinks first and "
        "answers after.\n"
        "Its thinking holds an understanding of the position, and the move it chooses follows from that understanding. "
        "The understanding judges the position strategically and compares a few important candidate moves by what they "
        "are likely to lead to; it follows only the likely continuations, not every move or every outcome.\n"
        "Moves are written in SAN: the piece's letter and the square it goes to, for example Nf3, Qxe5 or Rd1 (a pawn "
        "move names the square only, for example e4).\n"
        "How the pieces move: a bishop along diagonals; a rook along ranks and files; a queen as a rook or a bishop; a "
        "knight in an L, two squares one way and one to the side, jumping over pieces; the king one square in any "
        "direction; a pawn one square forward (two from its first rank), captures one square diagonally forward, and "
        "promotes when it reaches the last rank."
    ),
    knowledge_question="Give your understanding of this game state: {fen}",
    action_request="Using your understanding, choose the best move in this position and give it as <answer>SAN</answer>.",
    simulated_action_request=(
        "The simulation is over. Using it and your understanding, choose the best move in the root position and give "
        "it as <answer>SAN</answer>."
    ),
    propose_request=(
        "You are now in a simulation of this position. It is there to learn what moves lead to: try the most promising "
        "moves, or moves whose outcome you are unsure of. Name at most {n} different candidate moves from the legal "
        "moves above, each on its own line as <move>SAN</move>."
    ),
    branch_request="Simulation line {branch} (first move {first}), step {step} of {horizon}. Simulation state:\n{observation}\n\n{ask}",
    branch_understanding_ask="Give your understanding of this simulated state.",
    branch_move_ask="Choose the next move of this simulation line, as <move>SAN</move>.",
    refine_request=(
        "Summary stage. Judge the simulated trajectories below, all started from the same root position, and work out "
        "how good each root move is, reasoning as value iteration would:\n"
        "1. The trajectories are independent; each is a sequence of (state, move, opponent's move, reward, next state, "
        "game over) tuples.\n"
        "2. A rollout is noisy evidence of how good its moves are, not proof.\n"
        "3. Look closely at the positions the moves lead to.\n"
        "4. Weigh this evidence with your chess knowledge to judge the long-term value of each root move.\n"
        "5. No numbers are needed.\n"
        "6. Most rollouts stop before the game ends; judge such a move by the quality of the position it reaches.\n\n"
        "Simulation history:\n{branches}"
    ),
    refined_question="In light of the simulation history, give your updated understanding of this game state: {fen}",
)

_FEN_LINE = re.compile(r"^FEN: (\S+(?: \S+){3,5})$", re.M)


def chess_prompt_set(name: str) -> ChessPromptSet | None:
    """The chess prompt set called ``name``; None for ``ours`` (the loops' own constants)."""
    if name not in PROMPT_SETS:
        raise ValueError(f"prompt_set must be one of {PROMPT_SETS}, got {name!r}")
    return CHESS_AUTHORS if name == "chess_authors" else None


def observation_fen(observation: str) -> str | None:
    """The last FEN line of a chess observation, or None."""
    found = _FEN_LINE.findall(observation)
    return found[-1] if found else None
