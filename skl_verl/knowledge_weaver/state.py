"""Knowledge Weaver's per-step plan and knowledge-bank admission (§3.2 / App. B), and the bank store.

The bank of step j is immutable while step j runs: loops read ``bank(j)``; after the step the driver
admits the best new candidates (``select_admissions``) and writes ``bank(j + 1)``. Every bank version
is its own file, written atomically, so a resumed or replayed step reads exactly the bank it had.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from skl_verl import checked_jsonl

BANK_KIND = "knowledge_bank"
"""Training snapshots and generated banks alike: self-checked JSON lines (``skl_verl.checked_jsonl``)."""


@dataclass(frozen=True)
class Entry:
    entry_id: str
    text: str
    task_type: str
    step_added: int
    msr: float
    sr: float


@dataclass(frozen=True)
class Candidate:
    candidate_id: int
    task_type: str
    text: str
    valid: bool
    msr: float
    sr: float


def step_plan(types: Sequence[str], seed: int, step: int, slots: int = 32) -> list[str]:
    """The task type of each context slot of step ``step``: the types rotated by (seed + step) mod |types|,
    repeated until the slots are filled (6 ALFWorld types: 5 full rounds, then the first 2)."""
    if not types:
        raise ValueError("step_plan needs at least one task type")
    r = (seed + step) % len(types)
    rotated = list(types[r:]) + list(types[:r])
    return [rotated[i % len(rotated)] for i in range(slots)]


def update_types(types: Sequence[str], seed: int, step: int, warmup_steps: int = 20, warmup_count: int = 2,
                 later_count: int = 1) -> list[str]:
    """The task types whose best candidate may join the bank after step ``step``: a seeded sample of
    ``warmup_count`` types for the first ``warmup_steps`` steps, ``later_count`` afterwards."""
    digest = hashlib.sha256(f"{seed}\0{step}\0online-skillbank-update-types-v1".encode()).digest()
    count = warmup_count if step < warmup_steps else later_count
    return random.Random(int.from_bytes(digest[:8], "big")).sample(list(types), min(count, len(types)))


def normalised(text: str, casefold: bool = False) -> str:
    text = " ".join(text.split())
    return text.casefold() if casefold else text


def select_admissions(candidates: Sequence[Candidate], bank: Sequence[Entry], types: Sequence[str] | None,
                      casefold: bool = False) -> list[Candidate]:
    """The candidates admitted after a step. Eligible: valid, not already in the bank (whitespace-
    normalised, casefolded if asked), MSR > 0. With ``types`` (ALFWorld): per type, the eligible
    candidate of that input type with the highest MSR; with None (WebShop): the single highest.
    Ties go to the smaller candidate id; a text is admitted once."""
    known = {normalised(e.text, casefold) for e in bank}
    eligible = [c for c in candidates if c.valid and c.msr > 0 and normalised(c.text, casefold) not in known]
    best = lambda pool: min(pool, key=lambda c: (-c.msr, c.candidate_id))  # noqa: E731
    if types is None:
        return [best(eligible)] if eligible else []
    admitted: list[Candidate] = []
    for task_type in types:
        pool = [c for c in eligible if c.task_type == task_type
                and normalised(c.text, casefold) not in {normalised(a.text, casefold) for a in admitted}]
        if pool:
            admitted.append(best(pool))
    return admitted


class BankStore:
    """Bank versions under ``state_dir/bank/bank_{j:06d}.jsonl``; ``bank(0)`` is empty."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.folder = Path(state_dir) / "bank"
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self._path(0).exists():
            self._write(0, [])

    def _path(self, step: int) -> Path:
        return self.folder / f"bank_{step:06d}.jsonl"

    def bank(self, step: int) -> list[Entry]:
        path = self._path(step)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no knowledge bank for step {step} (was the run resumed with another state_dir?)")
        entries = []
        for number, record in enumerate(checked_jsonl.read(path, BANK_KIND), start=2):  # line 1 is the header
            try:
                entries.append(Entry(**record))
            except TypeError as exc:
                raise ValueError(f"{path}:{number}: not a bank entry ({exc})") from None
            if any(e.entry_id == entries[-1].entry_id for e in entries[:-1]):
                raise ValueError(f"{path}:{number}: entry {entries[-1].entry_id!r} appears twice")
        return entries

    def finalize_step(self, step: int, admitted: Sequence[Candidate]) -> list[Entry]:
        """Write bank(step + 1) = bank(step) + the admitted candidates; a replayed step overwrites it."""
        entries = self.bank(step)
        entries += [Entry(f"s{step}-c{c.candidate_id}", c.text, c.task_type, step, c.msr, c.sr) for c in admitted]
        self._write(step + 1, entries)
        return entries

    def _write(self, step: int, entries: Sequence[Entry]) -> None:
        checked_jsonl.write(self._path(step), BANK_KIND, (asdict(e) for e in entries))
