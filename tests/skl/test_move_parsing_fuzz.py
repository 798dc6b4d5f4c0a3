"""SKL-RL's reader of proposed moves, fuzzed like ``TagActionParser`` (tests/rollout/test_parsing_fuzz.py):
on short generated replies ``tagged_moves`` agrees with the ``<move>(.*?)</move>`` pattern it replaced
(kept here as the reference: fine on short text, quadratic on long text); on a megabyte of adversarial
text ``proposed_moves`` gives the expected moves in linear time (``cpu_watchdog``: a bound on runaway
work, no timing assertion)."""

import random
import re

import pytest

from cpu_watchdog import cpu_watchdog
from skl_verl.skl.rl_loop import proposed_moves, tagged_moves

CASES = 5_000
ONE_MEGABYTE = 1_000_000
LEGAL = ["e4", "Nf3", "Qxf7#"]

_REFERENCE_MOVE = re.compile(r"<move>(.*?)</move>", re.DOTALL | re.IGNORECASE | re.ASCII)
FRAGMENTS = ["<move>", "</move>", "<MOVE>", "</Move>", "<move", "move>", "</", "<", ">", " ", "\n", "e4", "Nf3",
             "qxf7", "x", "<MoVe>", "🙂"]


def test_blocks_agree_with_the_pattern_they_replaced():
    rng = random.Random(11)
    disagreements = []
    for _ in range(CASES):
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 16)))
        if list(tagged_moves(text)) != _REFERENCE_MOVE.findall(text):
            disagreements.append((text, list(tagged_moves(text)), _REFERENCE_MOVE.findall(text)))
    assert not disagreements, f"{len(disagreements)} of {CASES}, first: {disagreements[0]}"


def adversarial_inputs():
    """(name, reply, expected moves) for a megabyte of adversarial proposal text."""
    m = ONE_MEGABYTE
    return [
        ("unclosed tags", "<move>" * (m // 6), []),
        ("unclosed tags then a block", "<move>" * (m // 6) + "e4</move>", []),  # the block opened at the first tag
        ("stray closing tags then a block", "</move>" * (m // 7) + "<move>e4</move>", ["e4"]),
        ("half tags", "<move>" + "</mov" * (m // 5), []),
        ("many blocks", "<move>e4</move>" * (m // 15) + "<move>Nf3</move>", ["e4", "Nf3"]),
        ("long reasoning before the moves", "I think " * (m // 8) + "<move>Nf3</move><move>e4</move>", ["Nf3", "e4"]),
        ("whitespace in a block", "<move>" + " " * m + "e4 </move>", ["e4"]),
        ("newlines", "\n" * m, []),
    ]


@pytest.mark.parametrize("name,reply,expected", adversarial_inputs(), ids=[i[0] for i in adversarial_inputs()])
def test_one_megabyte_of_adversarial_proposals_parses_in_linear_time(name, reply, expected):
    with cpu_watchdog(f"proposed_moves on {name}"):
        assert proposed_moves(reply, LEGAL, 3) == expected
