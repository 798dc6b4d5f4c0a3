"""The curator prompt: trajectory rendering and fitting a token budget without dropping a trajectory."""

import pytest

from skl_verl.knowledge_weaver.executor import ExecutorEpisode, ExecutorStep
from skl_verl.knowledge_weaver.prompts import (
    CuratorView,
    RenderProfile,
    curator_view,
    fit_curator_prompt,
    profiles,
    render_trajectory,
)


def episode(won, moves=6):
    steps = [ExecutorStep(f"You are at spot {t} of a long corridor " * 3, "go to cabinet 1", f"You arrive at spot {t + 1}.",
                          0.0, False, False) for t in range(moves - 1)]
    steps.append(ExecutorStep("You see a mug.", "take mug from cabinet 1", "You pick up the mug.", 1.0 if won else 0.0,
                              True, won))
    return ExecutorEpisode("task-1", "", task_text="put a clean mug on the table", steps=steps, won=won,
                           status="won" if won else "done")


def test_render_by_hand():
    text = render_trajectory(2, episode(True, moves=3), "pick_clean_then_place", RenderProfile(1, 20))
    assert text.splitlines() == [
        "=== Trajectory 2 (success) ===",
        "Task type: pick_clean_then_place",
        "Task: put a clean mug on the table",
        "Outcome: SUCCESS; status=won; steps=3",
        "S01 | Action: go to cabinet 1",
        "S02 | Action: go to cabinet 1",
        "S03 | Obs: You see a mug. | Action: take mug from cabinet 1 | Result: You pick up the mug.",
    ]
    full = render_trajectory(1, episode(False, moves=2), "x", RenderProfile(None, 20))
    assert "S01 | Obs: You are at spot 0... | Action: go to cabinet 1 | Result: You arrive at spo..." in full


def test_a_small_budget_summarises_but_keeps_every_trajectory(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    full_view = profiles(curator_view("alfworld"))[0]
    episodes = [episode(k % 2 == 0, moves=12) for k in range(4)]
    _, full_ids, profile = fit_curator_prompt(tokenizer, "alfworld", "pick_clean_then_place", episodes, budget=100_000)
    assert profile == full_view == RenderProfile(None, 120, 24)
    messages, ids, profile = fit_curator_prompt(tokenizer, "alfworld", "pick_clean_then_place", episodes,
                                                budget=len(full_ids) - 1)
    assert profile != full_view and len(ids) < len(full_ids)
    assert all(f"=== Trajectory {k} " in messages[1]["content"] for k in range(1, 5))
    with pytest.raises(ValueError, match="the budget is 50"):
        fit_curator_prompt(tokenizer, "alfworld", "pick_clean_then_place", episodes, budget=50)


def test_table4_views_per_env():
    """Table 4: 24 rendered steps; observations cut to 120 characters (ALFWorld) and 400 (WebShop)."""
    assert curator_view("alfworld") == CuratorView(24, 120)
    assert curator_view("webshop") == CuratorView(24, 400)
    assert curator_view("webshop", max_steps=30, observation_chars=200) == CuratorView(30, 200)


def test_only_the_first_rendered_steps_show():
    text = render_trajectory(1, episode(False, moves=30), "x", RenderProfile(None, 120, 24)).splitlines()
    assert [line[:3] for line in text if line.startswith("S")] == [f"S{t:02d}" for t in range(1, 25)]
    assert text[-1] == "(6 later steps not shown)" and "steps=30" in text[3]
