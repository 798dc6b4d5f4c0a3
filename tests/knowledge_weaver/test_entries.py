"""Knowledge entries: validity, body tokens, guidance text."""

import pytest

from skl_verl.knowledge_weaver.entries import (
    NO_GUIDANCE,
    body_token_mask,
    format_guidance,
    parse_entry,
)


@pytest.mark.parametrize("reply,error", [
    ("Heat the mug first.", "not exactly one"),
    ("<skill>a</skill><skill>b</skill>", "tags inside"),
    ("Sure: <skill>Heat it.</skill>", "not exactly one"),
    ("<skill>   </skill>", "empty entry"),
    ("<skill>Use <b>bold</b> moves.</skill>", "tags inside"),
    ("<skill>" + "word " * 101 + "</skill>", "101 words, over the 100-word cap"),
    ("<skill>TODO</skill>", "placeholder"),
    ("<skill><your skill here></skill>", "tags inside"),
])
def test_invalid_replies_say_why(reply, error):
    parsed = parse_entry(reply)
    assert not parsed.valid and error in parsed.error


def test_a_valid_reply_with_stop_tokens_and_its_body_span():
    reply = "  <skill>\n Open the fridge before cooling.  </skill><|im_end|>"
    parsed = parse_entry(reply)
    assert parsed.valid and parsed.body == "Open the fridge before cooling."
    assert reply[slice(*parsed.body_span)] == parsed.body


def test_body_mask_marks_the_tokens_inside_the_tags(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    reply = "<skill>Open the fridge.</skill>"
    ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    decoded = tokenizer.decode(ids, skip_special_tokens=False)
    parsed = parse_entry(decoded)
    mask = body_token_mask(tokenizer, ids, parsed.body_span)
    inside = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    assert "Open the fridge." in inside and "<skill>" not in inside and "</skill>" not in inside
    assert 0 < sum(mask) < len(ids) and mask[-1] == 0  # the stop token is never credited
    outside = tokenizer.decode([i for i, m in zip(ids, mask) if not m])
    assert "Open" not in outside and "fridge" not in outside


def test_guidance_text():
    assert format_guidance([]) == NO_GUIDANCE
    assert format_guidance(["Heat first."]) == "Heat first."
    assert format_guidance(["A.", "B."]) == "Retrieved guidance skills:\n1. A.\n\n2. B."
