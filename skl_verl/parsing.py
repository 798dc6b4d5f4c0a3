"""Turning free-form model output into an env action, without ever raising.

Models under RL emit anything: missing tags, nested tags, unclosed tags, megabytes of text,
binary junk. A parse failure is reported as ``ParsedAction.error`` so the loop can penalise
and continue; one bad sample must never abort a rollout batch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Protocol

from verl.utils.import_utils import load_extern_object


@dataclass(frozen=True)
class ParsedAction:
    action: str | None
    """The extracted action text, stripped; None when the output held no usable action."""
    error: str | None = None
    """Why no action could be extracted (missing tag, empty, too long); None on success."""

    @property
    def ok(self) -> bool:
        return self.action is not None


class ActionParser(Protocol):
    def __call__(self, text: str) -> ParsedAction: ...


class TagActionParser:
    """Extracts the content of the last ``<tag>…</tag>`` among ``tags``.

    The *last* complete block wins because models often restate candidate actions while
    thinking and commit at the end. ``<think>…</think>`` spans are ignored so a tag quoted
    inside reasoning is not mistaken for the decision.
    """

    def __init__(self, tags: tuple[str, ...] | list[str] = ("action", "answer"), max_action_chars: int = 256):
        if not tags:
            raise ValueError("TagActionParser needs at least one tag name")
        for tag in tags:
            if not re.fullmatch(r"[A-Za-z_][\w-]*", tag):
                raise ValueError(f"invalid tag name {tag!r}: use letters, digits, '_' or '-'")
        if max_action_chars <= 0:
            raise ValueError("max_action_chars must be positive")
        self.tags = tuple(tags)
        self.max_action_chars = max_action_chars
        names = "|".join(re.escape(t) for t in self.tags)
        self._block = re.compile(rf"<({names})>(.*?)</\1\s*>", re.DOTALL | re.IGNORECASE)
        self._think = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)

    def __call__(self, text: str) -> ParsedAction:
        if not isinstance(text, str):
            return ParsedAction(None, f"model output is {type(text).__name__}, not text")
        visible = self._think.sub("", text)
        matches = self._block.findall(visible)
        if not matches:
            expected = " or ".join(f"<{t}>…</{t}>" for t in self.tags)
            return ParsedAction(None, f"no {expected} block found")
        action = " ".join(matches[-1][1].split())
        if not action:
            return ParsedAction(None, f"empty <{matches[-1][0]}> block")
        if len(action) > self.max_action_chars:
            return ParsedAction(None, f"action longer than {self.max_action_chars} characters")
        return ParsedAction(action)


def build_parser(spec: str | dict | None) -> ActionParser:
    """Build a parser from loop config.

    ``None`` → the default tag parser; ``{"tags": [...], "max_action_chars": n}`` → a tag
    parser; ``"pkg.module:callable"`` or ``{"path": "file.py", "name": "fn"}``-style specs
    load a user callable ``(text) -> ParsedAction`` through verl's own extern loader.
    """
    if spec is None:
        return TagActionParser()
    if isinstance(spec, str):
        module, _, name = spec.partition(":")
        if not name:
            raise ValueError(f"parser spec {spec!r} must look like 'package.module:callable'")
        return _guarded(load_extern_object(module_path=f"pkg://{module}", object_name=name))
    spec = dict(spec)
    if "path" in spec:
        return _guarded(load_extern_object(module_path=spec["path"], object_name=spec["name"]))
    unknown = set(spec) - {"tags", "max_action_chars"}
    if unknown:
        raise ValueError(f"unknown parser options {sorted(unknown)}; expected 'tags', 'max_action_chars'")
    return TagActionParser(**spec)


def _guarded(user_parser: Callable[[str], ParsedAction]) -> ActionParser:
    """A user parser that raises must still not kill a rollout: the exception becomes the error."""

    def parse(text: str) -> ParsedAction:
        try:
            result = user_parser(text)
        except Exception as exc:  # noqa: BLE001 - user code, any failure is a parse failure
            return ParsedAction(None, f"parser raised {type(exc).__name__}: {exc}")
        if not isinstance(result, ParsedAction):
            return ParsedAction(None, f"parser returned {type(result).__name__}, not ParsedAction")
        return result

    return parse
