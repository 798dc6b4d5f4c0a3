"""SKL-SD golden episodes on the WebShop stand-in (tests/webshop_standin.py) and on the real ScienceWorld,
played by scripted policies through verl's agent-loop worker with the recipe's own ``skl_sd_webshop`` and
``skl_sd_sciworld`` loop entries, then the registered ``skl_sd`` estimator and ``skl_sd_eq1`` term weights.
Every expected value is derived by hand below.

Task webshop-500 (run_webshop.sh's train split, verl-agent's convention): "i need coffee table that is
solid wood, and price lower than 159.00 dollars"; the stand-in's reward is
(attributes matched + options matched + price ok) / (attributes + options + 1), times 0.1 off-category.

  base:  search[shampoo], click[b000000aaa], click[buy now] -> shampoo, off-category: (0 + 0 + 1) / 2 * 0.1 = 0.05
  retry: search[coffee table], click[b000000cc1], click[buy now] -> (1 + 0 + 1) / 2 = 1.0

Every knowledge turn is 250 words (over the old 200-word cap): no format error, so no 0.1 penalty per turn.

ScienceWorld (the real JVM, scienceworld 1.2.3), task sciworld-find-living-thing-v0 of the train split with
run_sciworld.sh's env kwargs {"split": "train", "task_set": "r3l", "max_steps": 30}, played through ``skl_sd_sciworld``.
The task: "Your task is to find a(n) living thing. First, focus on the thing. Then, move it to the red box
in the kitchen."; the agent starts in the hallway, every door open (the "easy" simplification). The step
reward is the change of progress max(score, 0) / 100, and the episode's return R the sum of its rewards,
p_final - p_reset; this task already scores 8 right after reset, so R = (final score - 8) / 100.

  base:  "look around" 29 times (valid, changes nothing: score 8), then "go to greenhouse" (score 17) as the
         30th move, after which the env's max_steps ends the episode (truncated); the loop's max_turns is
         the same 30, so all 30 moves are played and the env, not the loop, ends it.
         R = (17 - 8) / 100 = 0.09, not won: a partial score.
  retry: the package's gold path (its route and animal vary between calls, e.g. "open door to greenhouse",
         "go to greenhouse", "open door to outside", "go to outside", "look around", "focus on dove",
         "pick up dove", "open door to kitchen", "go to kitchen", "move egg dove egg in inventory to red box":
         scores 8, 17, 17, 17, 17, 67, 75, 75, 83, 100). Every route ends at score 100 (won), so
         R = (100 - 8) / 100 = 0.92, whatever the route; every route opens with "open door to <room>" on a
         door that is already open, which changes nothing.

Quality filter: R3L keeps reward >= 1 on ScienceWorld's score / 100, i.e. the finished task (score 100),
the env's won flag: ``success: won`` on the ScienceWorld entry. (``reward_full``, R >= 1 on this env's
return, would discard this 0.92 win, and every win of the four find-* tasks, which start at 8.)
  base, 0.09, not won: discarded (coefficient 0) and bootstrapped: ceil(0.2 * 30) = 6 distinct steps,
      processed from the latest back to the earliest (descending).
  retry, won: kept (D_distill, coefficient λ1); so the 6 reflections score 1.0 and are kept (D_reflect, λ2).
State keys hash (task, score, free look, inventory): the 30 states the base acted in are one state H (the
hallway at score 8), so every reflection refines H and the last written, the one on the smallest sampled
step, is H's refined knowledge. The retry is at H for its first two moves (the first opens an open door)
and never again (the score rises past 8 once it leaves): its first two knowledge turns are that ẑ,
pre-filled (one refined state), and the policy writes its own knowledge at the other len(gold) - 2.
Normaliser: kept tokens weigh n_all / n_kept (response-mask tokens of the batch over those of the 7 kept
rows), the base's 0; per row the term weight is -scale for a reflection (SFT) and +scale for the retry (PG).
Budgets: the recipe's episode budget is R3L's, 16,384 response tokens; the base's 30 turns (observations
with the action templates, the knowledge and action turns) must fit it under a real 49k BPE (SmolLM2's).
The tiny test tokenizer spends about 1.4 characters a token, hence the test's larger budget while playing.
"""

import importlib.util
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.workers.rollout.replica import TokenOutput

from loop_helpers import advantage_step, packaged_loops
from skl_verl.rollout.data import env_rows, write_parquet
from skl_verl.skl.stateful_loop import ACTION_REQUEST, KNOWLEDGE_QUESTION
from skl_verl.trainer.inprocess_rollout import AgentRollout, compose_config

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
LAMBDA_DISTILL, LAMBDA_REFLECT = 0.5, 0.25
GOAL = "i need coffee table that is solid wood, and price lower than 159.00 dollars"
LONG_KNOWLEDGE = " ".join(["check every required attribute before buying"] * 42)[: 10_000]  # 252 words
WRONG = ["search[shampoo]", "click[b000000aaa]", "click[buy now]"]
RIGHT = ["search[coffee table]", "click[b000000cc1]", "click[buy now]"]


class ScriptedShopper:
    """The policy: long knowledge at every state, the wrong product in the base episode and the right
    one in the retry; a reflection answers with ẑ naming the state's step."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.moves: dict[str, int] = {}
        self.prompts: dict[str, list[str]] = {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        prompt = self.tokenizer.decode(prompt_ids)
        last_user = prompt.rsplit("<|im_start|>user", 1)[-1]
        phase = request_id.rsplit(":", 1)[1]
        self.prompts.setdefault(phase, []).append(last_user)
        if phase.startswith("reflect"):
            text = f"<knowledge>refined {phase}: the goal is a solid wood coffee table</knowledge>"
        elif "Based on your understanding" in last_user:
            move = self.moves.get(phase, 0)
            self.moves[phase] = move + 1
            text = f"<action>{(RIGHT if phase == 'retry' else WRONG)[move]}</action>"
        else:
            text = f"<knowledge>{LONG_KNOWLEDGE}</knowledge>"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        scored = {"prompt_logprobs": [[-2.0]] * len(prompt_ids)} if "prompt_logprobs" in sampling_params else {}
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids), extra_fields=scored)


@pytest.fixture(scope="module")
def webshop_url():
    from webshop_standin import MiniWebShopStandIn

    server = MiniWebShopStandIn()
    yield server.url
    server.close()


def play_recipe_entry(tmp_path, model_dir, entry_name, env_name, env_kwargs, task_id, make_policy,
                      response_length, prompt_length=4096, entry_options=None, estimator="skl_sd"):
    """One SKL-SD trial of ``task_id`` through verl's agent-loop worker with the registered loop entry
    ``entry_name`` as shipped (but for ``entry_options``), the ``skl_sd`` estimator with Eq. 1's
    ``policy_gradient`` objective and the ``skl_sd_eq1`` loss named in the config (R3L's default objective:
    test_skl_sd_objective.py); returns (batch, config, policy)."""
    loop_yaml = tmp_path / "loops.yaml"
    loops = packaged_loops()
    for entry in loops:
        if entry.name == entry_name:
            entry.update(entry_options or {})
    OmegaConf.save(loops, loop_yaml)
    train = write_parquet(env_rows(env_name, env_kwargs, task_ids=[task_id], agent_name=entry_name),
                          tmp_path / "sd.parquet")
    config = compose_config([
        f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={train}", f"data.val_files={train}",
        "data.train_batch_size=1", f"data.max_prompt_length={prompt_length}",
        f"data.max_response_length={response_length}",
        "actor_rollout_ref.rollout.n=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={entry_name}", f"algorithm.adv_estimator={estimator}",
        *([f"+algorithm.skl_sd.lambda_distill={LAMBDA_DISTILL}", f"+algorithm.skl_sd.lambda_reflect={LAMBDA_REFLECT}",
           "+algorithm.skl_sd.objective=policy_gradient", "actor_rollout_ref.actor.policy_loss.loss_mode=skl_sd_eq1"]
          if estimator == "skl_sd" else []),
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loop_yaml}",
    ])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    policy = make_policy(tokenizer)
    rollout = AgentRollout(config, policy, tokenizer, train)
    return rollout.rollout(next(rollout.batches(1)), step=1, n=1), config, policy


def test_skl_sd_webshop_golden_episode(tmp_path, tiny_model_dir, webshop_url, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    (entry,) = [e for e in packaged_loops() if e.name == "skl_sd_webshop"]
    # The recipe's entry, as shipped: R3L's 15 steps and 512 tokens a turn.
    assert (entry.max_turns, entry.max_tokens_per_turn) == (15, 512)
    kwargs = {"server_url": webshop_url, "split": "train", "split_convention": "verl_agent", "max_steps": 15}
    data, config, policy = play_recipe_entry(tmp_path, tiny_model_dir, "skl_sd_webshop", "webshop", kwargs,
                                             "webshop-500", ScriptedShopper, response_length=6144)
    fields = data.non_tensor_batch

    # Observations: the goal and the knowledge question open the episode; the retry's second action
    # prompt shows the coffee-table results it searched for.
    first = policy.prompts["base"][0]
    assert GOAL in first and KNOWLEDGE_QUESTION in first
    assert "b000000cc1" in policy.prompts["retry"][2].lower()

    # Samples: the base episode, one reflection (ceil(0.2 * 3) = 1 state of the 3-step failure), the retry.
    phases = list(fields["skl_phase"])
    assert phases == ["base", "reflect", "distill"]
    (t,) = list(fields["skl_bootstrap_order"][0])
    assert 0 <= t < 3
    # Item 4: the 252-word knowledge is the prior z_{s_t} of C_t, not thrown away.
    assert LONG_KNOWLEDGE in policy.prompts[f"reflect{t}"][0]
    # Rewards: 0.05 and 1.0 (no format penalty for long knowledge); the kept reflection scores 1.
    assert [float(x) for x in fields["skl_score"]] == pytest.approx([0.05, 1.0, 1.0])
    # Item 3 (success threshold): R3L's R >= 1, so the partial 0.05 purchase is not imitated and bootstraps.
    assert [bool(k) for k in fields["skl_keep"]] == [False, True, True]

    advantage_step(data, config)
    mask = data.batch["response_mask"]
    coefficient = data.batch["advantages"].sum(-1) / mask.sum(-1)
    # Every kept sample positive: the retry λ1 (GRPO within its one-sample group gave it 0), the reflection λ2.
    assert coefficient.tolist() == pytest.approx([0.0, LAMBDA_REFLECT, LAMBDA_DISTILL])

    # Normaliser: kept tokens carry n_all / n_kept, so verl's token mean is the mean over kept tokens only.
    from skl_verl.trainer.registry import TERM_WEIGHT_FNS

    n_tokens = mask.sum(-1).tolist()
    scale = sum(n_tokens) / (n_tokens[1] + n_tokens[2])
    weights = TERM_WEIGHT_FNS["skl_sd_eq1"]({k: v for k, v in fields.items() if k.startswith("skl_")}, mask, None)
    per_row = (weights * mask).sum(-1) / mask.sum(-1)
    assert per_row.tolist() == pytest.approx([0.0, -scale, scale])  # reflection: SFT (sign −), retry: PG
    assert (per_row[1:].abs() > 1).all()  # the discarded base row's tokens really were taken out


SCIWORLD_TASK = "sciworld-find-living-thing-v0"
# run_sciworld.sh's sciworld_train: R3L's training types, find-living-thing among them, variations 0-149
SCIWORLD_KWARGS = {"split": "train", "task_set": "r3l", "max_steps": 30, "action_format": "templates"}
SCIWORLD_GOAL = ("Your task is to find a(n) living thing. First, focus on the thing. "
                 "Then, move it to the red box in the kitchen.")
# The base dawdles in the hallway (valid moves that change nothing) and walks to the greenhouse at the last step.
SCIWORLD_BASE = ["look around"] * 29 + ["go to greenhouse"]
BASE_KNOWLEDGE = "living things are probably in the greenhouse; looking around shows what is there"


def refined_knowledge(step):
    """ẑ the scripted reflection on the base's step ``step`` writes."""
    return f"refined at step {step}: the living thing is outside; focus on it, then carry it to the red box"


needs_sciworld = pytest.mark.skipif(
    importlib.util.find_spec("scienceworld") is None or shutil.which("java") is None,
    reason="scienceworld package or java missing",
)


class ScriptedScientist:
    """The policy: the same short knowledge at every state it is asked; the base episode's moves in the base,
    ``gold`` in the retry; a reflection answers with ẑ naming the step it reflects on. Every prompt is kept
    whole, by kind, in call order."""

    def __init__(self, tokenizer, gold):
        self.tokenizer, self.gold = tokenizer, gold
        self.prompts: dict[str, list[str]] = {}

    def keep(self, kind, prompt):
        self.prompts.setdefault(kind, []).append(prompt)
        return len(self.prompts[kind]) - 1

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        prompt = self.tokenizer.decode(prompt_ids)
        phase = request_id.rsplit(":", 1)[1]
        if "prompt_logprobs" in sampling_params:  # scoring a pre-filled knowledge turn, as vLLM does
            self.keep("scored", prompt)
            return TokenOutput(token_ids=[self.tokenizer.eos_token_id], log_probs=[-1.0],
                               extra_fields={"prompt_logprobs": [[-2.0]] * len(prompt_ids)})
        if phase.startswith("reflect"):
            self.keep(phase, prompt)
            text = f"<knowledge>{refined_knowledge(int(phase.removeprefix('reflect')))}</knowledge>"
        elif prompt.rsplit("<|im_start|>user", 1)[1].lstrip().startswith(ACTION_REQUEST):
            move = self.keep(f"{phase}:action", prompt)
            actions = self.gold if phase == "retry" else SCIWORLD_BASE
            text = f"<action>{actions[min(move, len(actions) - 1)]}</action>"
        else:
            self.keep(f"{phase}:knowledge", prompt)
            text = f"<knowledge>{BASE_KNOWLEDGE}</knowledge>"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids))


@needs_sciworld
def test_skl_sd_sciworld_golden_episode(tmp_path, tiny_model_dir, smollm2_dir, long_window, monkeypatch):
    from envs.sciworld_env import SciWorldEnv

    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    (entry,) = [e for e in packaged_loops() if e.name == "skl_sd_sciworld"]
    # The recipe's entry, as shipped: R3L's 30 steps, 16,384 tokens a turn, and R3L's success (score 100).
    assert (entry.max_turns, entry.max_tokens_per_turn, entry.success) == (30, 16384, "won")
    # The scripted success is the package's own gold path (its route and animal vary from call to call).
    env = SciWorldEnv(**SCIWORLD_KWARGS)
    try:
        gold = env.gold_action_sequence(SCIWORLD_TASK)
    finally:
        env.close()
    assert gold[0].startswith("open door to ") and len(gold) < 30
    # Budgets for the tiny tokenizer (about 1.4 characters a token), past its 8,192 positions (a long-window copy);
    # the real-tokenizer fit is checked below.
    # The base's 29 "look around" and the progress-gained return below are this episode's design: it plays with
    # R3L's episode rules off (3 repeats end an episode, the return is the best score / 100), which
    # tests/skl/test_skl_sd_rules.py plays on.
    data, config, policy = play_recipe_entry(tmp_path, long_window(tiny_model_dir), "skl_sd_sciworld", "sciworld", SCIWORLD_KWARGS,
                                             SCIWORLD_TASK, lambda tokenizer: ScriptedScientist(tokenizer, gold),
                                             response_length=65536, prompt_length=12288,
                                             entry_options={"repeat_end": 0, "episode_return": "sum"})
    fields = data.non_tensor_batch
    prompts = policy.prompts

    # What the model sees first: the task and the hallway, the admissible actions, the knowledge question.
    first = prompts["base:knowledge"][0].rsplit("<|im_start|>user", 1)[1]
    assert SCIWORLD_GOAL in first and "This room is called the hallway." in first
    # The recipe's action format: verb templates and the objects in reach, not the ~4,000-character valid list.
    assert "Action templates" in first and "Admissible actions:" not in first and KNOWLEDGE_QUESTION in first

    # Samples: the base episode, ceil(0.2 * 30) = 6 reflections, the retry.
    assert list(fields["skl_phase"]) == ["base"] + ["reflect"] * 6 + ["distill"]

    # The whole 30-turn base episode fits the recipe's episode budget (R3L's 20,480 = prompt 4,096 +
    # response 16,384) under a real 49k BPE; the full valid-action list (~93,000 characters) would not.
    recipe = OmegaConf.load(RECIPES / "skl_sd/config/skl_sd_base.yaml")
    live = data.batch["attention_mask"][0][data.batch["prompts"].shape[1]:].bool()
    base_text = AutoTokenizer.from_pretrained(tiny_model_dir).decode(data.batch["responses"][0][live])
    real_tokens = len(AutoTokenizer.from_pretrained(smollm2_dir)(base_text, add_special_tokens=False)["input_ids"])
    print(f"ScienceWorld base episode: {len(base_text)} characters, {real_tokens} SmolLM2 tokens")
    assert 20_000 < len(base_text) and real_tokens <= recipe.data.max_response_length == 16384
    order = [int(t) for t in fields["skl_bootstrap_order"][0]]
    assert len(set(order)) == 6 and order == sorted(order, reverse=True) and all(0 <= t < 30 for t in order)

    # Step limit: one limit, 30. The base made all 30 moves, and the env itself ended the episode at the
    # 30th (truncated): neither the loop's max_turns nor the env's max_steps cut it before the other.
    base_steps, retry_steps = fields["skl_knowledge_steps"][0], fields["skl_knowledge_steps"][-1]
    assert [s.action for s in base_steps] == SCIWORLD_BASE
    assert base_steps[-1].done and not any(s.done for s in base_steps[:-1])
    assert [s.knowledge for s in base_steps] == [BASE_KNOWLEDGE] * 30
    # Every state the base acted in is the hallway at score 8, one state key H.
    hallway = base_steps[0].state_key
    assert {s.state_key for s in base_steps} == {hallway}
    # Each reflection's context C_t shows the base's knowledge there as the prior z_{s_t}.
    for t in order:
        assert BASE_KNOWLEDGE in prompts[f"reflect{t}"][0]

    # The retry: the gold path, with H's refined knowledge (ẑ of the smallest sampled step, written last)
    # pre-filled at its first two states, and the policy's own knowledge everywhere else.
    refined = refined_knowledge(min(order))
    assert [s.action for s in retry_steps] == gold and retry_steps[-1].done
    assert [s.state_key for s in retry_steps[:2]] == [hallway, hallway]
    assert hallway not in {s.state_key for s in retry_steps[2:]}
    assert [s.prefilled for s in retry_steps] == [True, True] + [False] * (len(gold) - 2)
    assert [s.knowledge for s in retry_steps] == [refined] * 2 + [BASE_KNOWLEDGE] * (len(gold) - 2)
    assert int(fields["skl_prefilled_states"][-1]) == 1
    # The retry's first action prompt carries ẑ as the policy's own knowledge turn, after the task; the
    # policy was asked for knowledge only where no refined knowledge was given.
    first_retry_action = prompts["retry:action"][0]
    assert first_retry_action.index(SCIWORLD_GOAL) < first_retry_action.index(f"<knowledge>{refined}</knowledge>")
    assert len(prompts["retry:knowledge"]) == len(gold) - 2

    # Rewards: R = (17 - 8) / 100 for the base and (100 - 8) / 100 for the retry; the reflections of a
    # successful retry score 1.
    assert [float(x) for x in fields["skl_score"]] == pytest.approx([0.09] + [1.0] * 6 + [0.92])
    # Quality filter (won: score 100, R3L's reward >= 1 on score / 100): the partial base is not imitated
    # and bootstraps; the won retry and its reflections are kept.
    assert [bool(k) for k in fields["skl_keep"]] == [False] + [True] * 7

    advantage_step(data, config)
    mask = data.batch["response_mask"]
    coefficient = data.batch["advantages"].sum(-1) / mask.sum(-1)
    # Every kept sample positive: each reflection λ2, the successful retry λ1; the discarded base 0.
    assert coefficient.tolist() == pytest.approx([0.0] + [LAMBDA_REFLECT] * 6 + [LAMBDA_DISTILL])

    # Normaliser: kept tokens carry n_all / n_kept, so verl's token mean is the mean over kept tokens only.
    from skl_verl.trainer.registry import TERM_WEIGHT_FNS

    n_tokens = mask.sum(-1).tolist()
    scale = sum(n_tokens) / sum(n_tokens[1:])
    weights = TERM_WEIGHT_FNS["skl_sd_eq1"]({k: v for k, v in fields.items() if k.startswith("skl_")}, mask, None)
    per_row = (weights * mask).sum(-1) / mask.sum(-1)
    assert per_row.tolist() == pytest.approx([0.0] + [-scale] * 6 + [scale])  # reflections: SFT (sign −); retry: PG
    assert scale > 1  # the discarded base row's tokens really were taken out


def test_step_limits_are_one_limit_per_env():
    """Item 5: the env's max_steps in the run scripts is the loops' max_turns (R3L: WebShop 15, ScienceWorld 30),
    so neither cuts the episode before the other."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    loops = {e.name: e for e in OmegaConf.load(root / "skl_verl/skl/agent_loops.yaml")}
    for env, limit in (("webshop", 15), ("sciworld", 30)):
        script = (root / f"recipes/skl_sd/run_{env}.sh").read_text()
        assert re.search(rf"^MAX_STEPS={limit}$", script, re.M), env
        assert script.count("$MAX_STEPS") == (2 if env == "webshop" else 1) and '"max_steps": 50' not in script
        for name in (f"skl_sd_{env}", f"skl_stateful_{env}", f"skl_sd_grpo_{env}"):
            assert loops[name].max_turns == limit, name
    # Every ScienceWorld dataset the script builds shows the templates the golden episode was measured with.
    script = (root / "recipes/skl_sd/run_sciworld.sh").read_text()
    assert script.count('\\"action_format\\": \\"templates\\"') == 1 and "$KWARGS}" in script
    assert script.count("build_train_val ") == 1 and script.count("$KWARGS}") == 2  # train and test


def test_recipe_settings_are_r3l_7b():
    """Item 9: R3L's 7B configs (examples/R3L/{webshop,scienceworld}/opmd_R3L_7B.yaml, grpo_7B.yaml)."""
    from pathlib import Path

    base = OmegaConf.load(Path(__file__).resolve().parents[2] / "recipes/skl_sd/config/skl_sd_base.yaml")
    actor, rollout = base.actor_rollout_ref.actor, base.actor_rollout_ref.rollout
    # opmd_reweight_adv: repeat_times 8 = 4 first rollouts (each with at most one second), k2 KL at 0.001
    assert base.data.train_batch_size == 96 and rollout.n == 4 and actor.optim.lr == 1e-6
    assert base.trainer.total_epochs == 20 and "total_training_steps" not in base.trainer
    assert actor.use_kl_loss and actor.kl_loss_type == "k2" and actor.kl_loss_coef == 0.001
    assert rollout.val_kwargs.temperature == 0.4 and rollout.val_kwargs.do_sample
    for env in ("webshop", "sciworld"):
        cfg = OmegaConf.load(Path(__file__).resolve().parents[2] / f"recipes/skl_sd/config/skl_sd_{env}.yaml")
        assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == f"skl_sd_{env}"
        assert cfg.skl.val_agent_loop == f"skl_stateful_{env}"
