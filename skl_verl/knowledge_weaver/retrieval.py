"""Knowledge-bank retrieval behind one interface: ``rank(queries, entries, k)`` returns, per query,
the indices of the top ``k`` entries, best first, ties broken by entry id.

``HFMeanPoolRetriever`` is the paper's retriever: a transformers encoder (``all-mpnet-base-v2`` in
real runs, a local path), mean pooling over the attention mask, L2-normalised, cosine similarity.
``BM25Retriever`` is an offline lexical stand-in (Okapi BM25, k1 1.5, b 0.75) for tests and for
machines without the embedding model.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from envs.alfworld_env import FAMILIES


@dataclass(frozen=True)
class BankEntry:
    entry_id: str
    text: str


class Retriever(Protocol):
    def rank(self, queries: Sequence[str], entries: Sequence[BankEntry], k: int) -> list[list[int]]: ...


ALFWORLD_QUERY_TYPES = {family: task_type for task_type, family in FAMILIES.items()}
"""Our ALFWorld family names (``Pick``) -> the game's task type the authors' query names (``pick_and_place_simple``)."""


def query_task_type(env_name: str, family: str) -> str:
    """The type a task's query names, as the authors' query builders write it (``build_retrieval_query``): ALFWorld
    the game's task type (``pick_and_place_simple``), WebShop ``WebShop/<goal category>``; other envs the family."""
    if env_name == "alfworld":
        return ALFWORLD_QUERY_TYPES.get(family, family)
    if env_name == "webshop":
        return f"WebShop/{family}"
    return family


def retrieval_query(task_type: str, description: str, observation: str) -> str:
    """The query for a task before its first action: type, description, first observation, and the
    (still empty) recent history, one whitespace-collapsed line each."""
    lines = [
        f"Task type: {task_type}",
        f"Task description: {description}",
        f"Current observation: {observation}",
        "Previous 8 commands: none (retrieval occurs before the first action)",
        "Recent 5 online-memory action/result pairs: none (retrieval occurs before the first action)",
    ]
    return "\n".join(" ".join(line.split()) for line in lines)


def top_k(scores: torch.Tensor, entries: Sequence[BankEntry], k: int) -> list[list[int]]:
    """Per row of ``scores`` (queries x entries): the ``k`` best entries, ties broken by entry id."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    by_id = sorted(range(len(entries)), key=lambda i: entries[i].entry_id)
    ranked = []
    for row in scores.tolist():
        ranked.append(sorted(by_id, key=lambda i: -row[i])[:k])  # stable sort: equal scores stay in id order
    return ranked


_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class BM25Retriever:
    """Okapi BM25 over lowercase alphanumeric words; the entries are the corpus."""

    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b

    def scores(self, queries: Sequence[str], entries: Sequence[BankEntry]) -> torch.Tensor:
        documents = [Counter(_words(e.text)) for e in entries]
        lengths = [sum(d.values()) for d in documents]
        average = sum(lengths) / len(lengths) if lengths else 0.0
        frequency = Counter(word for d in documents for word in d)
        n = len(documents)
        out = torch.zeros(len(queries), n, dtype=torch.float64)
        for q, query in enumerate(queries):
            for word in set(_words(query)):
                if word not in frequency:
                    continue
                idf = math.log(1 + (n - frequency[word] + 0.5) / (frequency[word] + 0.5))
                for i, document in enumerate(documents):
                    tf = document.get(word, 0)
                    if tf:
                        norm = self.k1 * (1 - self.b + self.b * lengths[i] / average) if average else self.k1
                        out[q, i] += idf * tf * (self.k1 + 1) / (tf + norm)
        return out

    def rank(self, queries: Sequence[str], entries: Sequence[BankEntry], k: int) -> list[list[int]]:
        return top_k(self.scores(queries, entries), entries, k)


class HFMeanPoolRetriever:
    """Mean-pooled, L2-normalised embeddings of a transformers encoder; cosine similarity."""

    def __init__(self, model_path: str, max_length: int = 256, batch_size: int = 32, device: str | None = None) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModel.from_pretrained(model_path).eval()
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device)
        self.max_length, self.batch_size = max_length, batch_size

    @torch.no_grad()
    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        vectors = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(list(texts[start : start + self.batch_size]), padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="pt").to(self.device)
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            vectors.append(torch.nn.functional.normalize(pooled, p=2, dim=1).float().cpu())
        return torch.cat(vectors) if vectors else torch.zeros(0, self.model.config.hidden_size)

    def rank(self, queries: Sequence[str], entries: Sequence[BankEntry], k: int) -> list[list[int]]:
        if not entries:
            return [[] for _ in queries]
        return top_k(self.embed(queries) @ self.embed([e.text for e in entries]).T, entries, k)
