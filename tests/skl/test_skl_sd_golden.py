"""SKL-SD golden episode on the WebShop stand-in (tests/webshop_standin.py), played by a scripted policy
through verl's agent-loop worker with the recipe's own ``skl_sd_webshop`` loop entry, then the registered
``skl_sd`` estimator and ``skl_sd_eq1`` term weights. Every expected value is derived by hand below.

Task webshop-500 (run_webshop.sh's train split, verl-agent's convention): "i need coffee table that is
solid wood, and price lower than 159.00 dollars"; the stand-in's reward is
(attributes matched + options matched + price ok) / (attributes + options + 1), times 0.1 off-category.

  base:  search[shampoo], click[b000000aaa], click[buy now] -> shampoo, off-category: (0 + 0 + 1) / 2 * 0.1 = 0.05
  retry: search[coffee table], click[b000000cc1], click[buy now] -> (1 + 0 + 1) / 2 = 1.0

Every knowledge turn is 250 words (over the old 200-word cap): no format error, so no 0.1 penalty per turn.
"""

import numpy as np
import pytest
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.workers.rollout.replica import TokenOutput

from loop_helpers import advantage_step, packaged_loops
from skl_verl.rollout.data import env_rows, write_parquet
from skl_verl.skl.stateful_loop import KNOWLEDGE_QUESTION
from skl_verl.trainer.inprocess_rollout import AgentRollout, compose_config

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


def test_skl_sd_webshop_golden_episode(tmp_path, tiny_model_dir, webshop_url, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    loops = packaged_loops()
    (entry,) = [e for e in loops if e.name == "skl_sd_webshop"]
    # The recipe's entry, as shipped: R3L's 15 steps and 512 tokens a turn.
    assert (entry.max_turns, entry.max_tokens_per_turn) == (15, 512)
    loop_yaml = tmp_path / "loops.yaml"
    OmegaConf.save(loops, loop_yaml)
    kwargs = {"server_url": webshop_url, "split": "train", "split_convention": "verl_agent", "max_steps": 15}
    train = write_parquet(env_rows("webshop", kwargs, task_ids=["webshop-500"], agent_name="skl_sd_webshop"),
                          tmp_path / "sd.parquet")
    config = compose_config([
        f"actor_rollout_ref.model.path={tiny_model_dir}", f"data.train_files={train}", f"data.val_files={train}",
        "data.train_batch_size=1", "data.max_prompt_length=4096", "data.max_response_length=6144",
        "actor_rollout_ref.rollout.n=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.agent.default_agent_loop=skl_sd_webshop", "algorithm.adv_estimator=skl_sd",
        f"+algorithm.skl_sd.lambda_distill={LAMBDA_DISTILL}", f"+algorithm.skl_sd.lambda_reflect={LAMBDA_REFLECT}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loop_yaml}",
        "actor_rollout_ref.actor.policy_loss.loss_mode=skl_sd_eq1",
    ])
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    policy = ScriptedShopper(tokenizer)
    rollout = AgentRollout(config, policy, tokenizer, train)
    data = rollout.rollout(next(rollout.batches(1)), step=1, n=1)
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
        assert script.count("$MAX_STEPS") == 4 and '"max_steps": 50' not in script
        for name in (f"skl_sd_{env}", f"skl_stateful_{env}", f"skl_sd_grpo_{env}"):
            assert loops[name].max_turns == limit, name


def test_recipe_settings_are_r3l_7b():
    """Item 9: R3L's 7B configs (examples/R3L/{webshop,scienceworld}/opmd_R3L_7B.yaml, grpo_7B.yaml)."""
    from pathlib import Path

    base = OmegaConf.load(Path(__file__).resolve().parents[2] / "recipes/skl_sd/config/skl_sd_base.yaml")
    actor, rollout = base.actor_rollout_ref.actor, base.actor_rollout_ref.rollout
    assert base.data.train_batch_size == 96 and rollout.n == 8 and actor.optim.lr == 1e-6
    assert base.trainer.total_epochs == 20 and "total_training_steps" not in base.trainer
    assert actor.use_kl_loss and actor.kl_loss_type == "low_var_kl" and actor.kl_loss_coef == 0.01
    assert rollout.val_kwargs.temperature == 0.4 and rollout.val_kwargs.do_sample
    for env in ("webshop", "sciworld"):
        cfg = OmegaConf.load(Path(__file__).resolve().parents[2] / f"recipes/skl_sd/config/skl_sd_{env}.yaml")
        assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == f"skl_sd_{env}"
        assert cfg.skl.val_agent_loop == f"skl_stateful_{env}"
