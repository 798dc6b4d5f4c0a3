"""Knowledge entries: what a valid curator reply is, which of its tokens are the entry body (the
tokens Eq. 6's MI credit may reach), and how retrieved entries become the executor's guidance."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

STOP_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>")
OPEN_TAG, CLOSE_TAG = "<skill>", "</skill>"
# Stop tokens (and whitespace between them) at the end of a reply, matched on the reversed reply: a
# possessive scan from its start is linear, where searching for a suffix would retry every position.
_TRAILING_STOPS_REVERSED = re.compile(r"(?:\s*+(?:" + "|".join(re.escape(s[::-1]) for s in STOP_TOKENS) + "))*+")
_TAG = re.compile(r"</?[A-Za-z][^<>]*+>")
# Chat control tokens (<|im_start|>, DeepSeek's <｜end▁of▁sentence｜>: no whitespace between the bars)
# are no tags to _TAG, yet in the executor's prompt they would open a turn of the curator's choosing.
_CONTROL_TOKEN = re.compile(r"<[|｜][^<>\s]*+(?<=[|｜])>")
PLACEHOLDERS = {"...", "…", "n/a", "none", "null", "todo", "tbd"}
NO_GUIDANCE = "No additional guidance."


@dataclass(frozen=True)
class ParsedEntry:
    valid: bool
    body: str = ""
    error: str = ""
    body_span: tuple[int, int] = (0, 0)
    """Character span of the body in the reply as given (before stop tokens were stripped)."""


def parse_entry(reply: str, max_words: int = 100) -> ParsedEntry:
    """A reply is a valid entry when, after trailing stop tokens, it is exactly one
    ``<skill>body</skill>`` whose body is non-empty, has no tags and no chat control tokens, at most
    ``max_words`` words, and is not a placeholder. No repair and no truncation: an invalid reply scores
    the format penalty.

    Linear time: a curator under RL can write anything, and this runs on the agent loop's event loop."""
    text = reply[: len(reply) - _TRAILING_STOPS_REVERSED.match(reply[::-1]).end()]
    entry = text.strip()
    if not (entry.startswith(OPEN_TAG) and entry.endswith(CLOSE_TAG)):  # the two tags cannot overlap
        return ParsedEntry(False, error="the reply is not exactly one <skill>...</skill> block")
    inside = entry[len(OPEN_TAG) : len(entry) - len(CLOSE_TAG)]
    body = inside.strip()
    start = (len(text) - len(text.lstrip())) + len(OPEN_TAG) + (len(inside) - len(inside.lstrip()))
    span = (start, start + len(body))
    if not body:
        return ParsedEntry(False, error="empty entry")
    if _CONTROL_TOKEN.search(body):
        return ParsedEntry(False, error="control tokens inside the entry")
    if _TAG.search(body):
        return ParsedEntry(False, error="tags inside the entry")
    if len(body.split()) > max_words:
        return ParsedEntry(False, error=f"{len(body.split())} words, over the {max_words}-word cap")
    if body.lower() in PLACEHOLDERS or re.fullmatch(r"<[^<>]*>", body):
        return ParsedEntry(False, error=f"placeholder entry {body!r}")
    return ParsedEntry(True, body=body, body_span=span)


def body_token_mask(tokenizer, token_ids: Sequence[int], body_span: tuple[int, int]) -> list[int]:
    """1 for each token whose characters overlap ``body_span`` of ``decode(token_ids)``, by prefix
    decoding (a token's characters are what it adds to the decoded prefix)."""
    mask, end = [], 0
    start_body, end_body = body_span
    for t in range(len(token_ids)):
        start, end = end, len(tokenizer.decode(list(token_ids[: t + 1]), skip_special_tokens=False))
        mask.append(int(start < end_body and end > start_body and end > start))
    return mask


def format_guidance(bodies: Sequence[str]) -> str:
    """The executor's guidance from retrieved entries (the candidate, when there is one, last)."""
    if not bodies:
        return NO_GUIDANCE
    if len(bodies) == 1:
        return bodies[0]
    return "Retrieved guidance skills:\n" + "\n\n".join(f"{k}. {body}" for k, body in enumerate(bodies, start=1))
