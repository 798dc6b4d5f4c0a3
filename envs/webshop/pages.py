"""WebShop's pages as the text env reads them: the text observation and what can be clicked.

``parse_page`` reads a page of WebShop's Flask site (``web_agent_site`` templates) the way WebShop's
text env (``WebAgentTextEnv.get_available_actions``) does; ``parse_action`` reads a
``search[...]``/``click[...]`` action. ``envs.webshop.env`` states the protocol they serve.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from envs.base import EnvError

# ASCII: under Unicode case folding "ſearch" (long s) or "clicK" (Kelvin sign) would be actions too
_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL | re.ASCII)
_SKIP_TAGS = frozenset({"head", "script", "style", "title", "meta", "noscript", "template"})
_VOID_TAGS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
)


class WebShopServerError(EnvError, RuntimeError):
    """The WebShop server failed to answer a request (connection lost, HTTP error, unparseable page)."""


@dataclass
class _Node:
    tag: str
    attrs: dict[str, str]
    parent: _Node | None = None
    children: list[Any] = field(default_factory=list)  # _Node or str

    def classes(self) -> list[str]:
        return self.attrs.get("class", "").split()

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        yield self
        for child in self.children:
            if isinstance(child, _Node):
                yield from child.iter()

    def ancestor(self, tag: str) -> _Node | None:
        node = self.parent
        while node is not None and node.tag != tag:
            node = node.parent
        return node

    def hidden(self) -> bool:
        style = re.sub(r"\s+", "", self.attrs.get("style", "")).lower()
        return "hidden" in self.attrs or "display:none" in style


class _TreeBuilder(HTMLParser):
    """A forgiving HTML tree: an end tag closes the nearest open element of that name (WebShop's
    templates close some ``<h4>`` with ``</h5>``); stray end tags are ignored; comments dropped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = _Node("[document]", {})
        self._stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = _Node(tag, {k: (v if v is not None else "") for k, v in attrs}, parent=self._stack[-1])
        self._stack[-1].children.append(node)
        if tag not in _VOID_TAGS:
            self._stack.append(node)

    def handle_startendtag(self, tag, attrs):
        node = _Node(tag, {k: (v if v is not None else "") for k, v in attrs}, parent=self._stack[-1])
        self._stack[-1].children.append(node)

    def handle_endtag(self, tag):
        for i in range(len(self._stack) - 1, 0, -1):
            if self._stack[i].tag == tag:
                del self._stack[i:]
                return

    def handle_data(self, data):
        self._stack[-1].children.append(data)


@dataclass(frozen=True)
class Target:
    """The request a click or a search makes."""

    method: str  # "GET" or "POST"
    url: str
    data: dict[str, str] | None = None


@dataclass
class Page:
    """A parsed WebShop page: its text observation and what can be clicked on it."""

    url: str
    text: str
    instruction: str
    has_search_bar: bool
    search_target: Target | None
    clickables: dict[str, Target]  # lower-cased name -> request
    reward: float | None  # set on the done page
    done_details: dict[str, str]


def _visible_texts(node: _Node, out: list[str]) -> None:
    for child in node.children:
        if isinstance(child, str):
            text = " ".join(child.split())
            if text:
                out.append(text)
        elif child.tag not in _SKIP_TAGS and not child.hidden():
            _visible_texts(child, out)


def _is_visible(node: _Node) -> bool:
    while node is not None:
        if node.tag in _SKIP_TAGS or node.hidden():
            return False
        node = node.parent
    return True


def _form_target(form: _Node, page_url: str, extra: dict[str, str] | None = None) -> Target:
    method = form.attrs.get("method", "get").strip().upper() or "GET"
    url = urllib.parse.urljoin(page_url, form.attrs.get("action", "") or page_url)
    return Target("POST" if method == "POST" else "GET", url, dict(extra or {}))


def parse_page(html: str, url: str) -> Page:
    """Parse a WebShop page the way ``WebAgentTextEnv.get_available_actions`` reads it."""
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    root = builder.root
    texts: list[str] = []
    _visible_texts(root, texts)

    instruction = ""
    search_target: Target | None = None
    has_search_bar = False
    clickables: dict[str, Target] = {}
    reward: float | None = None
    done_details: dict[str, str] = {}
    for node in root.iter():
        node_id = node.attrs.get("id")
        if node_id == "instruction-text":
            instruction = " ".join(node.text().split())
            instruction = re.sub(r"^Instruction:\s*", "", instruction)
        elif node_id == "search_input":
            has_search_bar = True
            form = node.ancestor("form")
            if form is not None:
                search_target = _form_target(form, url, {node.attrs.get("name", "search_query"): ""})
        elif node_id == "reward":
            pre = next((n for n in node.iter() if n.tag == "pre"), None)
            raw = (pre.text() if pre is not None else node.text()).strip()
            match = re.search(r"-?\d+(?:\.\d+)?(?:[eE]-?\d+)?", raw)
            if match is None:
                raise WebShopServerError(f"webshop: done page at {url} shows no readable reward: {raw!r}")
            reward = float(match.group(0))
        elif node_id in ("asin", "options"):
            pre = next((n for n in node.iter() if n.tag == "pre"), None)
            if pre is not None:
                done_details[f"purchased_{node_id}"] = pre.text().strip()

        if not _is_visible(node):
            continue
        if "btn" in node.classes():
            name = " ".join(node.text().split()).lower()
            form = node.ancestor("form")
            if name and name != "search" and form is not None:
                clickables[name] = _form_target(form, url)
        elif node.tag == "a" and "product-link" in node.classes() and node.attrs.get("href"):
            name = " ".join(node.text().split()).lower()
            if name:
                clickables[name] = Target("GET", urllib.parse.urljoin(url, node.attrs["href"]))
        elif node.tag == "input" and node.attrs.get("type", "").lower() == "radio":
            value = node.attrs.get("value", "").strip().lower()
            target = node.attrs.get("data-url")
            if value and target:
                clickables[value] = Target("GET", urllib.parse.urljoin(url, target))
    return Page(
        url=url,
        text=" [SEP] ".join(texts),
        instruction=instruction,
        has_search_bar=has_search_bar,
        search_target=search_target,
        clickables=clickables,
        reward=reward,
        done_details=done_details,
    )


def parse_action(action: str) -> tuple[str, str] | None:
    """``("search"|"click", lower-cased stripped argument)`` or None if not of that form."""
    match = _ACTION.match(str(action))
    if match is None:
        return None
    return match.group(1).lower(), " ".join(match.group(2).split()).lower()
