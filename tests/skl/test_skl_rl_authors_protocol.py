"""SKL-RL chess as the authors evaluate and prompt it (issue 37 items 3, 6, 7), through the shipped loop entries and
verl's agent-loop worker; values derived by hand from the positions.

backrank (6k1/5ppp/8/8/8/8/8/R3R1K1 w, opponent first_legal): the proposal [Kf1, Kh1] gives two branches that both
live to step 2 (Black answers each king move with its first legal move), so step 2 asks each branch's node in turn.
"""

import re
from pathlib import Path

import pytest

from test_skl_rl_golden import ROWS, GoldenChessPolicy, chess_rollout, request_kind

RECIPE = Path(__file__).resolve().parents[2] / "recipes/skl_rl/config"
LENGTHS = ["data.max_prompt_length=2048", "data.max_response_length=8192"]  # the tiny tokenizer: see test_skl_rl_format
UCI = re.compile(r"^[a-h][1-8][a-h][1-8][qrbn]?$")
TUPLE = re.compile(r"\(State: ([^,]+), Move: ([^,]+), Opponent's move: ([^,]+), Reward: ([^,]+), "
                   r"Next state: ([^,]+), Game over: (True|False)\)")
BACKRANK_FEN = "6k1/5ppp/8/8/8/8/8/R3R1K1 w - -"


class NodeCountingPolicy(GoldenChessPolicy):
    """The golden policy, whose branch-node understandings are numbered in the order they are asked; records
    every prompt it is given."""

    def __init__(self, tokenizer, **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.nodes, self.prompts, self.temperatures = 0, [], []

    def node_understanding(self) -> str:
        self.nodes += 1
        return f"<knowledge>node view {self.nodes}</knowledge>"

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
        self.prompts.append(self.tokenizer.decode(prompt_ids))
        self.temperatures.append(sampling_params.get("temperature"))
        return await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kw)


def backrank_game(tmp_path, tiny_model_dir, branch_move="Ra8", loop="skl_rl_chess_self", **options):
    return chess_rollout(tmp_path, tiny_model_dir, ROWS, {"opponent": "first_legal"}, loop,
                         {"simulations": 2, **options}, LENGTHS, policy_class=NodeCountingPolicy,
                         actions=["Kf1", "Ra8"], proposal=["Kf1", "Kh1"], branch_move=branch_move)


# ----------------------------------------------------------------------------- item 3: evaluation protocol


def test_the_head_split_tests_the_first_20_percent_of_the_rating_filtered_file_in_file_order(tmp_path):
    from skl_verl.rollout.data import env_rows

    ratings = [500, 900, 0, 800, 801, 300, 700, 100, 650, 200, 400, 750]  # 900 and 801 fall outside [0, 800]
    rows = "".join(f"p{i:02d},{r},6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,a1a8\n" for i, r in enumerate(ratings))
    csv = tmp_path / "puzzles.csv"
    csv.write_text("PuzzleId,Rating,FEN,Solution\n" + rows)
    kept = [f"p{i:02d}" for i, r in enumerate(ratings) if 0 <= r <= 800]  # 10 puzzles, file order
    split = lambda side, mode: [row["extra_info"]["task_id"] for row in env_rows("chess_puzzles", {
        "csv_path": str(csv), "min_rating": 0, "max_rating": 801, "split": side, "split_mode": mode})]
    assert split("test", "head") == kept[:2] == ["p00", "p02"]  # int(0.2 * 10) = 2
    assert split("train", "head") == kept[2:]
    hashed = split("test", "hash")
    assert set(hashed) | set(split("train", "hash")) == set(kept) and hashed != kept[:2]  # the old split stays an option


def test_the_recipe_validates_with_the_skl_rl_loop_greedily_and_the_run_script_builds_the_head_split():
    from skl_verl.knowledge_weaver.build import compose
    from loop_helpers import packaged_loops

    config = compose(str(RECIPE), "skl_rl_chess", [])
    assert config.skl.val_agent_loop == "skl_rl_chess_val"
    val_kwargs = config.actor_rollout_ref.rollout.val_kwargs
    assert val_kwargs.temperature == 0 and not val_kwargs.do_sample and val_kwargs.n == 1
    loops = {entry.name: dict(entry) for entry in packaged_loops()}
    train, val = loops["skl_rl_chess_self"], loops["skl_rl_chess_val"]
    assert val.pop("window_samples") == "last" and val.pop("name") == "skl_rl_chess_val"
    assert val == {k: v for k, v in train.items() if k != "name"}  # the training loop's options, simulation included
    # The GRPO baseline keeps validating with its own loop (the authors' notes do not say how theirs validated).
    assert compose(str(RECIPE), "grpo_chess", []).skl.val_agent_loop == "skl_stateful_chess_val"
    script = (RECIPE.parent / "run_chess.sh").read_text()
    assert "SPLIT=${SPLIT:-head}" in script and '\\"split_mode\\": \\"$SPLIT\\"' in script


def test_validation_plays_the_skl_rl_loop_greedily_one_sample_per_game(tmp_path, tiny_model_dir):
    data, _, _, policy = chess_rollout(
        tmp_path, tiny_model_dir, ROWS, {"opponent": "first_legal"}, "skl_rl_chess_val", {"simulations": 2},
        LENGTHS, policy_class=NodeCountingPolicy, validate=True, actions=["Kf1", "Ra8"], proposal=["Kf1", "Kh1"])
    steps = data.non_tensor_batch["skl_knowledge_steps"][0]
    assert len(data) == 1 and list(data.non_tensor_batch["skl_step_index"]) == [1]  # the game's last window
    assert steps[0].simulated_steps == 4 and steps[-1].reward == 1.0  # simulated, then mated
    assert set(policy.temperatures) == {0.0}


# ----------------------------------------------------------------------------- item 6: the authors' prompt set


def test_the_chess_loops_ask_in_the_authors_prompt_set(tmp_path, tiny_model_dir):
    data, _, _, policy = backrank_game(tmp_path, tiny_model_dir)
    system = policy.prompts[0].split("<|im_start|>user", 1)[0]
    assert "simulator" in system and "SAN" in system and "knight" in system and "bishop" in system
    users = policy.users
    # The refine request: one history line per branch, each step a six-field tuple; then the ẑ question alone.
    refine = [p.rsplit("<|im_start|>user", 2)[-2] for p, u in zip(policy.prompts, users) if request_kind(u) == "refine"][0]
    lines = [line for line in refine.splitlines() if re.match(r"^\d+\. \(State: ", line)]
    assert "value iteration" in refine and len(lines) == 2
    for line in lines:
        tuples = TUPLE.findall(line)
        assert len(tuples) == 2 and tuples[0][0] == BACKRANK_FEN and UCI.match(tuples[0][2]), line
        # the second move mates (Ra8): the opponent did not move
        assert all(UCI.match(t[2]) or (t[2] == "none" and t[5] == "True") for t in tuples), line
    refined_question = [u for u in users if request_kind(u) == "refine"][0]
    assert "Simulation history" not in refined_question and BACKRANK_FEN in refined_question
    # The opponent's reply: UCI in the simulator's results, absent from the real game's next turn.
    replies = re.findall(r"Opponent replied (\S+)\.", "".join(policy.prompts))
    assert replies and all(UCI.match(r) for r in replies)
    second_move = [u for u in users if request_kind(u) == "z"][1]
    assert "You played Kf1." in second_move and "Opponent replied" not in second_move
    assert "<answer>SAN</answer>" in [u for u in users if request_kind(u) == "action"][0]


def test_our_prompt_set_stays_an_option(tmp_path, tiny_model_dir):
    _, _, _, policy = backrank_game(tmp_path, tiny_model_dir, prompt_set="ours")
    assert any("Simulated continuations" in u for u in policy.users)
    assert not any("Simulation history" in p for p in policy.prompts)


# ----------------------------------------------------------------------------- item 7: simulation mechanics


def test_an_invalid_node_move_still_steps_the_branch_with_a_legal_move(tmp_path, tiny_model_dir):
    data, *_ = backrank_game(tmp_path, tiny_model_dir, branch_move="zz")
    first = data.non_tensor_batch["skl_knowledge_steps"][0][0]
    assert first.simulated_steps == 4  # both branches took a (random legal) second step
    data, *_ = backrank_game(tmp_path / "ends", tiny_model_dir, branch_move="zz", random_move_when_invalid=False)
    assert data.non_tensor_batch["skl_knowledge_steps"][0][0].simulated_steps == 2  # the option: the branch ends


def test_branch_k_is_asked_without_branch_k_minus_1s_node_turns(tmp_path, tiny_model_dir):
    _, _, _, policy = backrank_game(tmp_path, tiny_model_dir, branch_move="zz")
    nodes = [p for p, u in zip(policy.prompts, policy.users) if request_kind(u) == "node_understanding"]
    assert len(nodes) == 2 and "Simulation line 2" in nodes[1].rsplit("<|im_start|>user", 1)[-1]
    assert "node view 1" not in nodes[1] and "Simulation line 1" not in nodes[1] and "<move>zz</move>" not in nodes[1]
