"""The tag grammar documented in ``TagActionParser``, checked on generated model outputs.

Each generated output is built around one decision block whose action is known by construction,
surrounded by the noise models really produce: reasoning (closed, unclosed, or only its end),
earlier candidate blocks, near-miss tag spellings, stray and unclosed tags, non-tags such as
``<actions>`` or ``x<3``. The parser must return exactly the known action, in linear time.
"""

import random

import pytest
from cpu_watchdog import cpu_watchdog

from skl_verl.rollout.parsing import KeywordActionParser, ParsedAction, TagActionParser

CASES_PER_PARSER = 10_000
PARSER_TAGS = [("action", "answer"), ("skill",), ("knowledge",), ("reflection",)]
WORDS = ["go", "to", "kitchen", "Nf3", "e2e4", "click[Buy", "Now]", "x > y", "a&b", "ä", "漢字", "🙂", "'q'", '"q"',
         "search[red", "shoes]", "1.5", "-", "/", "=", "<=", "x<3", "a < b", "<<", "<actions>", "<b>", "</i>", "tag>"]
SPACES = [" ", "  ", "\n", "\t", " \n "]


def case_variant(rng, name):
    return rng.choice([name, name.upper(), name.capitalize()])


def opening(rng, name):
    name = case_variant(rng, name)
    return rng.choice([f"<{name}>", f"<{name} >", f"< {name}>", f'<{name} id="1">', f"<{name}\n>", f"<\t{name} class='x'>"])


def closing(rng, name):
    name = case_variant(rng, name)
    return rng.choice([f"</{name}>", f"</ {name}>", f"< /{name} >", f"</{name}\n>"])


def noise(rng):
    return "".join(rng.choice(WORDS) + rng.choice(SPACES) for _ in range(rng.randint(0, 6)))


def generated_output(rng, tags):
    """(model output, the action the grammar says it holds)."""
    tag = rng.choice(tags)
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 8))]
    content = rng.choice(SPACES + [""]) + "".join(w + rng.choice(SPACES) for w in words)
    decision = opening(rng, tag) + content + closing(rng, tag)
    if rng.random() < 0.2:
        decision = opening(rng, tag) + decision + closing(rng, tag)
    pieces = []
    if rng.random() < 0.2:
        pieces.append(noise(rng) + opening(rng, rng.choice(tags)) + "decoy" + closing(rng, tag) + " reasoning </think>")
    think_open = False
    for _ in range(rng.randint(0, 4)):
        kind = rng.randrange(6)
        other = rng.choice(tags)
        if kind == 0:
            pieces.append(noise(rng))
        elif kind == 1:
            pieces.append(f"<think>{noise(rng)}{opening(rng, other)}decoy{closing(rng, other)}{noise(rng)}</think>")
            think_open = False
        elif kind == 2:
            pieces.append(opening(rng, other) + "earlier candidate" + closing(rng, other))
        elif kind == 3:
            pieces.append(opening(rng, other) + noise(rng))  # unclosed: the decision's own opening supersedes it
        elif kind == 4:
            pieces.append(closing(rng, other) + noise(rng))  # stray closing tag
        else:
            pieces.append("<think>" + noise(rng))  # unclosed reasoning hides nothing
            think_open = True
    pieces.append(decision)
    suffix_opened = False  # after an opening tag, a closing one would form a later block that wins
    for _ in range(rng.randint(0, 3)):
        kind = rng.randrange(4)
        other = rng.choice(tags)
        if kind == 0:
            pieces.append(noise(rng))
        elif kind == 1 and not suffix_opened:
            pieces.append(closing(rng, other))
        elif kind == 2:
            pieces.append(opening(rng, other) + noise(rng))
            suffix_opened = True
        elif kind == 3 and not think_open:
            pieces.append("<think>" + noise(rng))
            think_open = True
    return "".join(pieces), " ".join(content.split())


@pytest.mark.parametrize("tags", PARSER_TAGS, ids="+".join)
def test_generated_outputs_give_the_action_the_grammar_defines(tags):
    parser = TagActionParser(tags=tags)
    rng = random.Random(9)
    wrong = []
    for _ in range(CASES_PER_PARSER):
        text, expected = generated_output(rng, tags)
        got = parser(text)
        if got.action != expected:
            wrong.append((text, expected, got))
    assert not wrong, f"{len(wrong)} of {CASES_PER_PARSER} wrong, first: {wrong[0]}"


FRAGMENTS = ["<think>", "</think>", "<", ">", "/", "\n", " ", "left", "\x00", "\ud800", "🙂", "< ", "=\"", "\\"]


@pytest.mark.parametrize("tags", PARSER_TAGS, ids="+".join)
def test_random_fragment_soup_never_raises_and_always_says_why(tags):
    parser = TagActionParser(tags=tags, max_action_chars=40)
    rng = random.Random(7)
    fragments = FRAGMENTS + [form for tag in tags for form in (f"<{tag}>", f"</{tag}>", f"<{tag} ", f"</ {tag.upper()}>")]
    outcomes = [parser("".join(rng.choice(fragments) for _ in range(rng.randint(0, 60)))) for _ in range(CASES_PER_PARSER)]
    assert all(isinstance(o, ParsedAction) and (o.action is None) == (o.error is not None) for o in outcomes)
    markup = [form for tag in tags for form in (f"<{tag}>", f"</{tag}>")]
    assert all(0 < len(o.action) <= 40 and not any(m in o.action.lower() for m in markup) for o in outcomes if o.ok)
    assert sum(o.ok for o in outcomes) > 100 and sum(not o.ok for o in outcomes) > 100


ONE_MEGABYTE = 1_000_000
ADVERSARIAL_UNITS = ["<action>", "<skill>", "<knowledge>", "</action>", "<action>x</action>", "<think>", "</think>",
                     "< ", "</ ", "<action ", "<action x=", "<think><action>"]


@pytest.mark.parametrize("tags", PARSER_TAGS, ids="+".join)
def test_one_megabyte_of_adversarial_output_parses_in_linear_time(tags):
    parser = TagActionParser(tags=tags)
    texts = [unit * (ONE_MEGABYTE // len(unit)) for unit in ADVERSARIAL_UNITS]
    texts += ["<" + " " * ONE_MEGABYTE, "<action " + "x" * ONE_MEGABYTE, f"<{tags[0]}>" + "word " * (ONE_MEGABYTE // 5)]
    for text in texts:
        # linear parsing takes ~0.1 s of CPU here; the old quadratic regex took >90 s on the first text
        with cpu_watchdog(f"TagActionParser on {text[:20]!r}… ({len(text)} chars)"):
            result = parser(text)
        assert isinstance(result, ParsedAction)


def test_one_megabyte_near_the_keywords_parses_in_linear_time():
    parser = KeywordActionParser(["left", "down", "right", "up", "go up"])
    near_misses = [(unit, None) for unit in ["lef", "xleft", "go go ", "u", "leftx", "go u"]]
    repeated = [("left ", "left"), ("left down ", None), ("up go up ", None)]
    for unit, action in near_misses + repeated:
        text = unit * (ONE_MEGABYTE // len(unit))
        with cpu_watchdog(f"KeywordActionParser on {text[:20]!r}… ({len(text)} chars)"):
            result = parser(text)
        assert result.action == action
