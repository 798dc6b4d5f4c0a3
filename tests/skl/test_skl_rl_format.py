"""SKL-RL's chess format as the authors' code scores it (issue 37 item 2): understandings are free text (no
penalty for an untagged knowledge turn), simulation turns carry no format penalty, and an untagged answer is
read as a bare move or loses the game at -1.01. Through the shipped ``skl_rl_chess_self`` entry and verl's
agent-loop worker; values derived by hand from the positions."""

import pytest
from verl.workers.rollout.replica import TokenOutput

from test_skl_rl_golden import OPENING, ROWS, GoldenChessPolicy, chess_rollout, listed_moves, request_kind

# The tiny model's tokenizer spends ~2.3x Qwen's tokens on the chess prompts (the system prompt and the first
# position: 1,256 against Qwen's 537; FENs most), and the first test simulates H=3, so the windows get 2,048 + 8,192;
# the recipe's 1,024 + 5,120 is checked at H=2 with Qwen's own tokenizer in test_skl_rl_windows.py.
LENGTHS = ["data.max_prompt_length=2048", "data.max_response_length=8192"]
# (moves, outcome) of the untagged game: Black plays the first listed move (Nh6, then Rg8 and Rh8 in turn) and
# White its first legal one; the position repeats a third time at Black's 8th move: a draw, 0.
GAME_OUTCOME = (8, 0.0)


class UntaggedPolicy(GoldenChessPolicy):
    """Every understanding (z, each branch node's, ẑ) is free text without <knowledge>; proposals and branch
    moves are tagged; the answer is ``answer(listed moves)`` with no tag. Counts the understandings."""

    def __init__(self, tokenizer, answer=lambda moves: moves[0], **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.answer, self.understandings = answer, 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
        prompt = self.tokenizer.decode(prompt_ids)
        last_user = prompt.rsplit("<|im_start|>user", 1)[-1]
        kind = request_kind(last_user)
        if kind == "action":
            # the real position's list is the window's first (later ones are the simulator's)
            real = next(line for line in prompt.splitlines() if line.startswith("Legal moves (SAN"))
            text = self.answer(real.split(": ", 1)[1].split(", "))
        elif kind in ("proposal", "node_move"):
            return await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kw)
        else:  # z, a branch node's understanding, ẑ
            self.understandings += 1
            text = "The position is quiet; developing the pieces matters most."
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids), extra_fields={"global_steps": 0})


def test_a_game_with_50_untagged_knowledge_turns_still_scores_its_outcome(tmp_path, tiny_model_dir):
    """The opening puzzle (Black to move after 1.e4) against the first-legal opponent, 10 moves, N3 and H3 (the
    entry's H2 plus one, for more branch nodes): per move z, up to six branch nodes' understandings and ẑ, all
    untagged: at least 50 in the game (61). Every answer is a bare first listed move. The game is drawn by
    repetition at move 8: its outcome 0, not 0 - 0.1 per untagged turn (the old scoring: -5 or less)."""
    data, _, _, policy = chess_rollout(
        tmp_path, tiny_model_dir, OPENING, {"opponent": "first_legal", "max_steps": 10}, "skl_rl_chess_self",
        {"horizon": 3}, LENGTHS, policy_class=UntaggedPolicy)
    fields = data.non_tensor_batch
    steps = fields["skl_knowledge_steps"][0]
    print(f"untagged understandings: {policy.understandings}")
    assert policy.understandings >= 50
    assert all(s.action for s in steps) and steps[-1].done and len(data) == len(steps)
    assert all(s.knowledge and not s.knowledge_error for s in steps)
    outcome = GAME_OUTCOME
    assert len(steps) == outcome[0] and steps[-1].reward == outcome[1]
    assert fields["skl_invalid_format_turns"][0] == 0 and fields["skl_episode_reward"][0] == outcome[1]
    assert data.batch["rm_scores"].sum(-1).tolist() == [outcome[1]] * len(steps)  # every window: the game's score


def test_a_bare_answer_is_played_ignoring_case(tmp_path, tiny_model_dir):
    """Backrank: the untagged answer 'ra8#' is Ra8, mate at once: +1, no retry."""
    data, *_ = chess_rollout(tmp_path, tiny_model_dir, ROWS, {"opponent": "first_legal"}, "skl_rl_chess_self", {},
                             LENGTHS, policy_class=UntaggedPolicy, answer=lambda moves: "ra8#")
    steps = data.non_tensor_batch["skl_knowledge_steps"][0]
    assert [(s.action, s.reward, s.done) for s in steps] == [("Ra8", 1.0, True)]
    assert data.batch["rm_scores"][0].sum().item() == pytest.approx(1.0)


def test_an_answer_that_is_no_move_loses_at_minus_1_01(tmp_path, tiny_model_dir):
    data, *_ = chess_rollout(tmp_path, tiny_model_dir, ROWS, {"opponent": "first_legal"}, "skl_rl_chess_self", {},
                             LENGTHS, policy_class=UntaggedPolicy, answer=lambda moves: "hello")
    steps = data.non_tensor_batch["skl_knowledge_steps"][0]
    assert len(steps) == 1 and steps[0].done and steps[0].action is None
    assert data.non_tensor_batch["skl_turns"][0] == 1  # no retry
    assert data.batch["rm_scores"][0].sum().item() == pytest.approx(-1.01)


def test_the_previous_scoring_stays_an_option():
    """knowledge_format: tagged, untagged_action: retry, simulation_format_errors and the 0.1 penalty: the
    loop classes' defaults, which the chess entries override."""
    from skl_verl.skl.rl_loop import SklRlAgentLoop
    from skl_verl.options import declared_options

    declared = declared_options(SklRlAgentLoop)
    assert {k: declared[k].default for k in ("knowledge_format", "untagged_action", "simulation_format_errors",
                                               "invalid_format_penalty")} == {
        "knowledge_format": "tagged", "untagged_action": "retry", "simulation_format_errors": True, "invalid_format_penalty": 0.1}
