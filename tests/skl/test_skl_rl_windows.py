"""SKL-RL's chess game bounded as the authors ran it (issue 37 item 1, issue 35 deliverable 3): every move is
its own window and sample, each turn generated under its cap (1,024 tokens for an understanding, 100 for a
move) seeing that move's turns only; z, the proposal, ẑ and the move are trained, the branch nodes' turns are
generated but not trained; every window of a game carries the game's advantage. Counted with Qwen2.5's own
tokenizer (``qwen_tokenizer``: the BPE ranks the ``dashscope`` package ships) beside Qwen2.5-7B-Instruct's
config.json (its 32,768-token window), through verl's agent-loop worker and the recipe's loop entry.

The scripted policy fills every reply to the cap it is given (``max_tokens``): the largest window a move can
take at the authors' caps."""

from pathlib import Path

import numpy as np
import pytest
import torch
from verl.workers.rollout.replica import TokenOutput

from qwen_tokenizer import build_qwen_model_dir, qwen_ranks_file
from test_skl_rl_golden import OPENING, chess_rollout, listed_moves, request_kind, unpadded

RECIPE = Path(__file__).resolve().parents[2] / "recipes/skl_rl/config"
KNOWLEDGE_CAP, MOVE_CAP, QWEN_WINDOW = 1024, 100, 32768
TRAINED_KINDS = ("z", "proposal", "refine", "action")
NODE_KINDS = ("node_understanding", "node_move")


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    if qwen_ranks_file() is None:
        pytest.skip("pip install --no-deps dashscope==2.0.2 (Qwen's BPE ranks)")
    return str(build_qwen_model_dir(tmp_path_factory.mktemp("qwen2.5-7b-instruct")))


class CapFillingPolicy:
    """Replies by the request it reads (z, proposal, branch node, ẑ, move), each filled with plain words to
    exactly the ``max_tokens`` it was given; records (kind, prompt ids, reply ids) of every call."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls, self.proposed = tokenizer, [], []
        self.filler = self.encode(" the knight and the bishop guard the king" * 200)

    def encode(self, text):
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def filled(self, cap, before, after=""):
        head, tail = self.encode(before), self.encode(after) + [self.tokenizer.eos_token_id]
        return head + self.filler[: cap - len(head) - len(tail)] + tail

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        prompt = self.tokenizer.decode(prompt_ids)
        last_user = prompt.rsplit("<|im_start|>user", 1)[-1]
        cap = sampling_params["max_tokens"]
        kind = request_kind(last_user)
        if kind == "proposal":
            self.proposed = listed_moves(prompt)[:3]
            ids = self.filled(cap, "", "".join(f"<move>{m}</move>" for m in self.proposed))
        elif kind == "node_understanding":
            ids = self.filled(cap, "<knowledge>At this branch node:", "</knowledge>")
        elif kind == "node_move":
            ids = self.filled(cap, "Branch node move:", f"<move>{listed_moves(prompt)[0]}</move>")
        elif kind == "refine":
            ids = self.filled(cap, "<knowledge>", "</knowledge>")
        elif kind == "action":
            ids = self.filled(cap, "", f"<action>{self.proposed[0]}</action>")
        else:
            ids = self.filled(cap, "<knowledge>", "</knowledge>")
        self.calls.append((kind, list(prompt_ids), ids, cap))
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids), extra_fields={"global_steps": 0})


def recipe_lengths():
    from skl_verl.knowledge_weaver.build import compose

    recipe = compose(str(RECIPE), "skl_rl_chess", [])
    return int(recipe.data.max_prompt_length), int(recipe.data.max_response_length)


def trained_runs(mask):
    """[start, end) of each run of trained tokens."""
    runs, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


def ten_move_game(tmp_path, qwen_dir):
    prompt_length, response_length = recipe_lengths()
    data, config, tok, policy = chess_rollout(
        tmp_path, qwen_dir, OPENING, {"opponent": "random", "max_steps": 10}, "skl_rl_chess_self", {},
        [f"data.max_prompt_length={prompt_length}", f"data.max_response_length={response_length}"],
        policy_class=CapFillingPolicy)
    return data, config, tok, policy, prompt_length, response_length


def test_a_ten_move_game_at_the_authors_caps_fits_its_windows_under_qwens_tokenizer(tmp_path, qwen_dir):
    data, _, tok, policy, prompt_length, response_length = ten_move_game(tmp_path, qwen_dir)
    fields = data.non_tensor_batch
    steps = fields["skl_knowledge_steps"][0]
    assert len(steps) == 10 and all(s.acted for s in steps) and steps[-1].done and not fields["skl_truncated"][0]
    assert list(fields["skl_step_index"]) == list(range(10))
    # Every turn got its whole cap: nothing was cut by a window's budget.
    assert {(kind, cap) for kind, _, _, cap in policy.calls} == {
        ("z", KNOWLEDGE_CAP), ("refine", KNOWLEDGE_CAP), ("node_understanding", KNOWLEDGE_CAP),
        ("proposal", MOVE_CAP), ("node_move", MOVE_CAP), ("action", MOVE_CAP)}
    sizes = []
    for row in range(10):
        prompt, response, mask = unpadded(data, row)
        sizes.append((len(prompt), len(response), sum(mask)))
        assert len(prompt) <= prompt_length and len(response) <= response_length
        assert len(prompt) + len(response) <= QWEN_WINDOW
    generated = sum(len(ids) for _, _, ids, _ in policy.calls)
    print(f"Qwen2.5 tokens per window (prompt, response, trained): {sizes}; largest prompt {max(s[0] for s in sizes)}, "
          f"largest response {max(s[1] for s in sizes)}; game: {sum(s[0] + s[1] for s in sizes)} in its windows, "
          f"{sum(s[2] for s in sizes)} trained, {generated} generated (branch nodes included)")


def test_each_window_trains_exactly_its_moves_turns_in_the_context_they_were_sampled_in(tmp_path, qwen_dir):
    data, _, tok, policy, *_ = ten_move_game(tmp_path, qwen_dir)
    sampled = {}
    for kind, prompt_ids, ids, _ in policy.calls:
        sampled.setdefault(tuple(prompt_ids), []).append((kind, ids))
    trained_kinds = []
    for row in range(len(data)):
        prompt, response, mask = unpadded(data, row)
        assert "knight and the bishop" not in tok.decode(prompt)  # no earlier move's turns in the window
        kinds = []
        for start, end in trained_runs(mask):
            context = tuple(prompt + response[:start])
            # The trained tokens are one reply the policy returned for exactly this context.
            assert context in sampled, f"window {row}: trained tokens at {start} were not sampled in this context"
            [(kind, ids)] = sampled[context]
            assert response[start:end] == ids
            kinds.append(kind)
        assert kinds == list(TRAINED_KINDS), (row, kinds)  # z, the proposal, ẑ, the move: this move's four turns
        trained_kinds += kinds
    assert len(trained_kinds) == 40
    # Branch nodes were generated (each at most one move's window long) but no sample trains them.
    nodes = [(prompt_ids, ids) for kind, prompt_ids, ids, _ in policy.calls if kind in NODE_KINDS]
    assert nodes
    for row in range(len(data)):
        prompt, response, _ = unpadded(data, row)
        stream = prompt + response
        for _, ids in nodes:
            assert not any(stream[i : i + len(ids)] == ids for i in range(len(stream) - len(ids) + 1))


def test_every_window_of_a_game_carries_the_games_advantage():
    """Two games of one puzzle: a win in 3 windows, a loss in 1. Each game counts once in its group (GRPO over
    games: +0.707, -0.707), and every window of a game gets its game's advantage."""
    from omegaconf import OmegaConf

    from skl_verl.skl.recipe import register  # noqa: F401 - registers skl_rl
    from skl_verl.trainer.estimators import compute_advantage
    from verl import DataProto

    register()
    scores, trajectories, windows = [1.0, 1.0, 1.0, -1.0], ["a", "a", "a", "b"], [0, 1, 2, 0]
    mask = torch.ones(4, 3, dtype=torch.long)
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor(scores)
    data = DataProto.from_dict(
        tensors={"response_mask": mask, "token_level_rewards": rewards},
        non_tensors={"skl_trajectory_id": np.array(trajectories, dtype=object), "skl_sequence_id": np.array(["p"] * 4, dtype=object),
                     "skl_position": np.zeros(4, dtype=object), "skl_phase": np.array(["act"] * 4, dtype=object),
                     "skl_step_index": np.array(windows, dtype=object)})
    compute_advantage(data, OmegaConf.create({"adv_estimator": "skl_rl"}))
    per_window = data.batch["advantages"][:, 0]
    assert per_window.tolist() == pytest.approx([0.7071, 0.7071, 0.7071, -0.7071], abs=1e-3)
