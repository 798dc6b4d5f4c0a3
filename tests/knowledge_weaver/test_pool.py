import pytest

from skl_verl.knowledge_weaver.executor import ExecutorEpisode, ExecutorStep
from skl_verl.knowledge_weaver.pool import (
    PoolEpisode,
    is_usable,
    read_pool,
    sample_context,
    write_pool,
)


def _episode(task_id: str, status: str = "won", invalid: bool = False) -> ExecutorEpisode:
    step = ExecutorStep("You see a desk.", "go to desk 1", "You arrive.", 1.0, True, status == "won", invalid)
    return ExecutorEpisode(task_id, "No additional guidance.", "put a pen on the desk", [step], status == "won", status)


def test_pool_round_trip_and_usable_episodes(tmp_path):
    records = [PoolEpisode("pick", _episode("a")), PoolEpisode("pick", _episode("b", "failed: env.step() raised X")),
               PoolEpisode("pick", _episode("c", "done", invalid=True)), PoolEpisode("look", _episode("d", "max_steps"))]
    path = write_pool(tmp_path / "pool.jsonl", records)
    assert read_pool(path) == records
    assert [is_usable(r.episode) for r in records] == [True, False, False, True]
    # only usable episodes of the asked type; a stable seed gives the same draw
    assert [e.task_id for e in sample_context(records, "pick", 4, seed=3)] == ["a"] * 4
    assert sample_context(records, "look", 1, seed=5) == sample_context(records, "look", 1, seed=5)
    with pytest.raises(ValueError, match="no usable 'heat' episode"):
        sample_context(records, "heat", 4, seed=0)


def test_a_damaged_pool_line_names_the_file_and_line(tmp_path):
    from skl_verl import checked_jsonl
    from skl_verl.knowledge_weaver.pool import POOL_KIND

    path = tmp_path / "pool.jsonl"
    checked_jsonl.write(path, POOL_KIND, [{"task_type": "pick"}])  # intact, but not a pool record
    with pytest.raises(ValueError, match=r"pool.jsonl:2: not a pool record"):
        read_pool(path)
    path.write_text('{"task_type": "pick"}\n')  # a plain line: no header, no checksum
    with pytest.raises(ValueError, match=r"pool.jsonl:1: damaged trajectory_pool line"):
        read_pool(path)
