"""The SkillRise authors' ScienceWorld task set (L0): rebuilt without a JVM, then from the real package."""

from __future__ import annotations

import shutil

import pytest

from envs.sciworld_l0 import L0_TASK_ORDER, l0_index


def fake_variations(task_index):
    return list(range(100 * task_index, 100 * task_index + 4)), [10_000 + task_index, 20_000 + task_index]


def test_l0_holds_29_tasks_train_variations_and_dev_variations_as_test():
    index = l0_index(fake_variations)
    assert sorted(L0_TASK_ORDER) == list(range(29))  # every package task but index 29 (use-thermometer)
    assert [t for t, _ in index["train"][::4]] == list(L0_TASK_ORDER)  # tasks in the generator's order
    assert {t for t, _ in index["test"]} == set(range(29))
    for task_index in range(29):
        train, dev = fake_variations(task_index)
        assert sorted(v for t, v in index["train"] if t == task_index) == train
        assert sorted(v for t, v in index["test"] if t == task_index) == dev  # dev, not the package's test
    assert index == l0_index(fake_variations)  # one fixed shuffle stream
    assert [v for t, v in index["train"] if t == 0] != fake_variations(0)[0]  # ... that does shuffle


@pytest.fixture(scope="module")
def package_l0():
    pytest.importorskip("scienceworld", reason="the scienceworld package is not installed")
    if shutil.which("java") is None:
        pytest.skip("no 'java' executable on PATH: the ScienceWorld JVM cannot start here")
    from scienceworld import ScienceWorldEnv

    sw = ScienceWorldEnv("", envStepLimit=10**9)
    try:
        names = list(sw.get_task_names())

        def variations(task_index):
            sw.load(names[task_index], 0, "")
            return sw.get_variations_train(), sw.get_variations_dev()

        yield names, l0_index(variations)
    finally:
        sw.close()


def test_the_package_l0_set_matches_the_released_one(package_l0):
    names, index = package_l0
    assert names[29] == "use-thermometer" and all(t != 29 for t, _ in index["train"] + index["test"])
    # scienceworld 1.2.3: 3,592 train / 1,796 dev variations, less use-thermometer's 270 / 135
    assert (len(index["train"]), len(index["test"])) == (3322, 1661)
    # the generator's stream (random.Random(42)), pinned: boil (index 0) is shuffled first
    assert index["train"][:4] == [(0, 8), (0, 12), (0, 7), (0, 6)]
    assert index["test"][:4] == [(0, 17), (0, 16), (0, 18), (0, 15)]
    # the authors' released training groups (data/groups/skillrise_sciworld_K3.jsonl) cover exactly
    # these train variations: boil 0-13, chemistry-mix 0-15, 300 of test-conductivity-of-unknown-substances
    assert sorted(v for t, v in index["train"] if t == 0) == list(range(14))
    assert sorted(v for t, v in index["train"] if t == 2) == list(range(16))
    assert sum(t == 28 for t, _ in index["train"]) == 300
