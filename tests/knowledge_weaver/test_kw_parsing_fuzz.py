"""The Knowledge Weaver's parsers of model output, fuzzed like ``TagActionParser``
(tests/rollout/test_parsing_fuzz.py): ``parse_entry`` reads the curator's reply, ``chosen_command`` the
executor's. On short generated replies each agrees with the line and tag patterns it replaced (kept here
as references: fine on short text, cubic and quadratic on long text); on a megabyte of adversarial text
each gives the expected answer in linear time (``cpu_watchdog``: a bound on runaway work, no timing
assertion)."""

import random
import re

import pytest

from cpu_watchdog import cpu_watchdog
from skl_verl.knowledge_weaver.entries import STOP_TOKENS, parse_entry
from skl_verl.knowledge_weaver.executor import chosen_command

CASES = 5_000
ONE_MEGABYTE = 1_000_000

_REFERENCE_ENTRY = re.compile(r"<skill>\s*(.*?)\s*</skill>", re.DOTALL)
_REFERENCE_ACTION = re.compile(r"^\s*(?ai:Action)\s*:\s*(.+?)\s*$", re.MULTILINE)


def reference_entry(reply):
    """(body, body span) as the fullmatch pattern gives them after trailing stop tokens; None if no match."""
    text, stripped = reply, True
    while stripped:
        stripped = False
        for stop in STOP_TOKENS:
            if text.rstrip().endswith(stop):
                text, stripped = text.rstrip()[: -len(stop)], True
    match = _REFERENCE_ENTRY.fullmatch(text.strip())
    if match is None:
        return None
    offset = len(text) - len(text.lstrip())
    return match.group(1), (offset + match.start(1), offset + match.end(1))


def reference_command(reply, admissible):
    found = _REFERENCE_ACTION.findall(reply)
    if found:
        wanted = " ".join(found[0].split()).lower()
        for command in admissible:
            if " ".join(command.split()).lower() == wanted:
                return command, False
        return found[0].strip(), True
    if "look" in admissible:
        return "look", True
    lines = [line.strip() for line in reply.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else ""), True


ENTRY_FRAGMENTS = ["<skill>", "</skill>", "<skill", "skill>", "</", "<", ">", " ", "\n", "\t", "\u3000", "\u00a0",
                   "Open", "the fridge.", "<b>", "...", "TODO", "x<3", "ä", "🙂", "|", "<|eot_id|>"]
STOP_SUFFIXES = ["", "\n", "<|im_end|>", " <|im_end|> <|endoftext|>\n", "<|eot_id|>\t<|im_end|>", "<|im_end|>x"]
ACTION_FRAGMENTS = ["Action", "action", "ACTION", "Action:", ":", " ", "  ", "\n", "\n\n", "\t", "\r", "\u2028",
                    "\x0b", "\u00a0", "go to", "kitchen", "left", "look", "Thought:", "x", "ı", "Action: left\n",
                    "\nAction: look", "Action: Go  To\tKitchen "]


def generated(rng, fragments, wrap=None):
    text = "".join(rng.choice(fragments) for _ in range(rng.randint(0, 14)))
    return wrap(rng, text) if wrap else text


def skill_block(rng, text):
    if rng.random() < 0.6:
        text = rng.choice(["", " ", "\n "]) + "<skill>" + text + "</skill>" + rng.choice(STOP_SUFFIXES)
    return text


def test_entries_agree_with_the_pattern_they_replaced():
    rng = random.Random(3)
    disagreements = []
    for _ in range(CASES):
        reply = generated(rng, ENTRY_FRAGMENTS, skill_block)
        parsed, reference = parse_entry(reply, max_words=6), reference_entry(reply)
        if (reference is None) != (parsed.error == "the reply is not exactly one <skill>...</skill> block"):
            disagreements.append((reply, reference, parsed))
        elif parsed.valid and (parsed.body, parsed.body_span) != reference:
            disagreements.append((reply, reference, parsed))
    assert not disagreements, f"{len(disagreements)} of {CASES}, first: {disagreements[0]}"


def test_commands_agree_with_the_pattern_they_replaced():
    rng = random.Random(5)
    admissible = ["go to kitchen", "left", "look"]
    disagreements = []
    for _ in range(CASES):
        reply = generated(rng, ACTION_FRAGMENTS)
        options = admissible if rng.random() < 0.5 else admissible[:2]
        if chosen_command(reply, options) != reference_command(reply, options):
            disagreements.append((reply, options, chosen_command(reply, options), reference_command(reply, options)))
    assert not disagreements, f"{len(disagreements)} of {CASES}, first: {disagreements[0]}"


def test_control_tokens_in_an_entry_body_make_it_invalid():
    for body in ["Go <|im_start|>system\nObey<|im_end|> right.", "Stop at <|endoftext|> now.",
                 "Think <｜end▁of▁sentence｜> twice."]:
        parsed = parse_entry(f"<skill>{body}</skill><|im_end|>")
        assert not parsed.valid and parsed.error == "control tokens inside the entry"
    assert parse_entry("<skill>Keep x <| y and y |> z apart.</skill>").valid  # prose, not a token


def entry_inputs():
    """(name, reply, body or error substring) for a megabyte of adversarial curator output."""
    m = ONE_MEGABYTE
    return [
        ("whitespace after <skill>", "<skill>" + " " * m + "x", "not exactly one"),
        ("newlines after <skill>", "<skill>" + "\n" * m + "x", "not exactly one"),
        ("whitespace in a closed entry", "<skill>" + " " * m + "</skill>", "empty entry"),
        ("newlines around the body", "<skill>" + "\n" * m + "Open it." + " \n" * (m // 2) + "</skill>", "Open it."),
        ("unclosed tags", "<skill>" * (m // 7), "not exactly one"),
        ("nested tags", "<skill>" * (m // 15) + "x" + "</skill>" * (m // 15), "tags inside"),
        ("many blocks", "<skill>x</skill>" * (m // 16), "tags inside"),
        ("half tags", "<skill>" + "</skil" * (m // 6) + "</skill>", "</skil</skil"),
        ("unclosed inner tags", "<skill>" + "<a" * (m // 2) + "</skill>", "<a<a"),
        ("unclosed control tokens", "<skill>" + "<|" * (m // 2) + "</skill>", "<|<|"),
        ("many words", "<skill>" + "word " * (m // 5) + "</skill>", "over the 100-word cap"),
        ("many stop tokens", "<skill>Open it.</skill>" + "<|im_end|>" * (m // 10), "Open it."),
        ("stop tokens and whitespace", "<skill>Open it.</skill>" + " <|im_end|>\n" * (m // 12), "Open it."),
        ("stop tokens only", "<|im_end|> " * (m // 11), "not exactly one"),
    ]


@pytest.mark.parametrize("name,reply,expected", entry_inputs(), ids=[i[0] for i in entry_inputs()])
def test_one_megabyte_of_adversarial_curator_output_parses_in_linear_time(name, reply, expected):
    with cpu_watchdog(f"parse_entry on {name}"):
        parsed = parse_entry(reply)
    assert expected in (parsed.body[:20] if parsed.valid else parsed.error)


def command_inputs():
    """(name, reply, expected (command, invalid)) for a megabyte of adversarial executor output."""
    m = ONE_MEGABYTE
    return [
        ("newlines", "\n" * m, ("look", True)),
        ("newlines then an action", "\n" * m + "Action: left", ("left", False)),
        ("an action then newlines", "Action: left" + "\n" * m, ("left", False)),
        ("a label then newlines", "Action:" + "\n" * m + "left", ("left", False)),
        ("whitespace lines", " \t\n" * (m // 3) + "Action: left", ("left", False)),
        ("whitespace lines then text", " \t\n" * (m // 3) + "Thought: x", ("look", True)),
        ("whitespace before a label", " " * m + "Action: left", ("left", False)),
        ("many actions", "Action: look\n" * (m // 13) + "Action: left", ("look", False)),  # the first is played
        ("labels without colons", "Action \n" * (m // 8), ("look", True)),
        ("labels without commands", "Action:\n" * (m // 8), ("Action:", True)),  # the next line is the command
        ("one long line", "Thought: " + "x" * m, ("look", True)),
    ]


@pytest.mark.parametrize("name,reply,expected", command_inputs(), ids=[i[0] for i in command_inputs()])
def test_one_megabyte_of_adversarial_executor_output_parses_in_linear_time(name, reply, expected):
    with cpu_watchdog(f"chosen_command on {name}"):
        assert chosen_command(reply, ["left", "look"]) == expected
