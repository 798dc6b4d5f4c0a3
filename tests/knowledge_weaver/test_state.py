"""Knowledge Weaver's step plan, update types, admission rule and bank versions."""

import pytest

from skl_verl.knowledge_weaver.state import (
    BankStore,
    Candidate,
    Entry,
    select_admissions,
    step_plan,
    update_types,
)

TYPES = ["clean", "cool", "examine", "heat", "pick", "pick_two"]


def test_step_plan_rotates_the_types_per_step():
    plan = step_plan(TYPES, seed=23000, step=1)
    # (23000 + 1) mod 6 = 3: start with heat, five full rounds, then the first two again.
    assert plan[:6] == ["heat", "pick", "pick_two", "clean", "cool", "examine"]
    assert len(plan) == 32 and plan[30:] == ["heat", "pick"] and plan[6:12] == plan[:6]
    assert step_plan(["webshop"], 23000, 7) == ["webshop"] * 32


def test_update_types_two_during_warmup_then_one_and_reproducible():
    assert len(update_types(TYPES, 23000, 0)) == 2 and len(update_types(TYPES, 23000, 19)) == 2
    assert len(update_types(TYPES, 23000, 20)) == 1
    assert update_types(TYPES, 23000, 3) == update_types(TYPES, 23000, 3)
    assert set(update_types(TYPES, 23000, 3)) <= set(TYPES)


def candidate(i, task_type, text, msr, valid=True):
    return Candidate(i, task_type, text, valid, msr, 0.5)


def test_admission_picks_the_best_new_positive_candidate_per_update_type():
    bank = [Entry("s0-c1", "Heat  the mug first.", "heat", 0, 0.2, 0.5)]
    candidates = [
        candidate(0, "heat", "Heat the mug first.", 0.9),  # already in the bank (whitespace aside)
        candidate(1, "heat", "Use the microwave.", 0.4),
        candidate(2, "heat", "Open the microwave door.", 0.4),  # tie with 1: the smaller id wins
        candidate(3, "clean", "Rinse in the sink.", 0.0),  # MSR must be > 0
        candidate(4, "clean", "Any sink works.", 0.7, valid=False),
        candidate(5, "cool", "Fridge.", 0.3),  # not an update type this step
    ]
    admitted = select_admissions(candidates, bank, ["heat", "clean"])
    assert [c.candidate_id for c in admitted] == [1]
    assert [c.candidate_id for c in select_admissions(candidates, bank, None)] == [1]  # WebShop: one at most
    assert select_admissions(candidates, bank, ["cool"], casefold=True)[0].candidate_id == 5


def test_bank_versions_are_immutable_and_replayable(tmp_path):
    store = BankStore(tmp_path)
    assert store.bank(0) == []
    store.finalize_step(0, [candidate(3, "heat", "Use the microwave.", 0.5)])
    first = store.bank(1)
    assert [e.entry_id for e in first] == ["s0-c3"] and store.bank(0) == []
    store.finalize_step(0, [candidate(3, "heat", "Use the microwave.", 0.5)])  # a replayed step
    assert store.bank(1) == first
    with pytest.raises(FileNotFoundError, match="no knowledge bank for step 5"):
        store.bank(5)
