"""Recipes compose on CPU with the paper's settings, and their run scripts' --dry-run works."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from skl_verl.trainer.entry import ConfigError, prepare_config

ROOT = Path(__file__).resolve().parents[2]
SKILLRISE = ROOT / "recipes" / "skillrise"


def load(config_name, overrides=(), recipe=SKILLRISE):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(recipe / "config"), version_base=None):
        return prepare_config(compose(config_name=config_name, overrides=list(overrides)))


def plays_per_update(config, k=3):
    per_prompt = k if config.actor_rollout_ref.rollout.agent.default_agent_loop.startswith(("skillrise", "lamer")) else 1
    return config.data.train_batch_size * config.actor_rollout_ref.rollout.n * per_prompt


@pytest.mark.parametrize("name", ["skillrise_alfworld", "skillrise_webshop", "skillrise_sciworld"])
def test_skillrise_configs_carry_the_paper_settings(name):
    config = load(name)
    assert config.algorithm.adv_estimator == "skillrise" and config.algorithm.skillrise.gamma == 0.6
    assert config.trainer.v1.trainer_mode == "skl_sync"
    assert config.actor_rollout_ref.model.path == "Qwen/Qwen3-4B"
    assert plays_per_update(config) == 384  # 16 sequences x K=3 x N=8
    assert config.actor_rollout_ref.actor.optim.lr == 1e-6
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n == 128
    assert config.data.max_response_length == 1024
    assert config.trainer.total_training_steps == 150
    assert config.actor_rollout_ref.rollout.val_kwargs.temperature == 0.7
    assert config.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook == "skl_verl.register"
    assert config.data.train_files.endswith(f"{name.split('_')[1]}_train.parquet")
    # As the authors' released code trains it (issue 10): step samples with a per-action budget,
    # thinking off, 10 * won, mean-only normalisation, entropy 0.001, the released history per env.
    env = name.split("_")[1]
    assert config.data.apply_chat_template_kwargs.enable_thinking is False
    assert config.algorithm.skillrise.norm == "mean" and config.actor_rollout_ref.actor.entropy_coeff == 0.001
    assert config.data.max_prompt_length == {"alfworld": 4096, "webshop": 12288, "sciworld": 10240}[env]
    loop = agent_loop_entry(config.actor_rollout_ref.rollout.agent.default_agent_loop)
    assert loop.name == f"skillrise_{env}" and loop.sample_granularity == "step"
    assert (loop.reward_fn, loop.reward_scale, loop.invalid_format_penalty) == ("scaled_success", 10.0, 0.5)
    assert loop.step_history == {"alfworld": 15, "webshop": 5, "sciworld": 2}[env]
    assert loop.history_window == {"alfworld": 50, "webshop": 50, "sciworld": 30}[env]


def test_grpo_baseline_and_no_curation_ablation():
    grpo = load("grpo_alfworld")
    assert grpo.algorithm.adv_estimator == "skl_grpo" and grpo.actor_rollout_ref.rollout.n == 24
    assert grpo.algorithm.skl_grpo.norm == "std"  # the released GRPO baseline keeps std normalisation
    assert grpo.actor_rollout_ref.rollout.agent.default_agent_loop == "step_alfworld"
    assert agent_loop_entry("step_alfworld").sample_granularity == "step"
    assert plays_per_update(grpo) == 384
    ablation = load("no_curation_alfworld")
    assert ablation.actor_rollout_ref.rollout.agent.default_agent_loop == "skillrise_no_curation_alfworld"
    assert agent_loop_entry("skillrise_no_curation_alfworld").curate is False
    assert plays_per_update(ablation) == 384


def test_gigpo_baseline_composes_with_verl_agent_settings():
    gigpo = load("gigpo_alfworld")
    assert gigpo.algorithm.adv_estimator == "gigpo" and gigpo.actor_rollout_ref.rollout.n == 24
    assert dict(gigpo.algorithm.gigpo) == {"gamma": 0.95, "step_advantage_weight": 1.0, "norm": "std"}
    assert gigpo.actor_rollout_ref.rollout.agent.default_agent_loop == "step_alfworld"
    assert gigpo.trainer.v1.trainer_mode == "skl_sync"
    assert plays_per_update(gigpo) == 384
    with pytest.raises(ConfigError, match="gigpo groups env steps"):
        load("gigpo_alfworld", ["actor_rollout_ref.rollout.agent.default_agent_loop=skl_env"])
    with pytest.raises(ValueError, match="algorithm.gigpo.gamma"):
        load("gigpo_alfworld", ["algorithm.gigpo.gamma=1.5"])


def test_lamer_baseline_attempts_one_task_with_a_reflection():
    lamer = load("lamer_alfworld")
    assert plays_per_update(lamer) == 384  # 16 tasks x 8 trials x 3 attempts
    assert lamer.algorithm.adv_estimator == "skillrise"
    assert (lamer.algorithm.skillrise.gamma, lamer.algorithm.skillrise.solve_return) == (0.6, "discounted")
    loop = agent_loop_entry("lamer_alfworld")
    assert loop.carried_text == "reflection" and loop.sample_granularity == "step"
    with pytest.raises(ValueError, match="algorithm.skillrise.solve_return"):
        load("lamer_alfworld", ["algorithm.skillrise.solve_return=episode"])


def test_rloo_and_ppo_baselines_compose_on_the_same_plays():
    rloo = load("rloo_alfworld")
    assert rloo.algorithm.adv_estimator == "skl_rloo" and plays_per_update(rloo) == 384
    assert rloo.actor_rollout_ref.rollout.agent.default_agent_loop == "step_alfworld"
    ppo = load("ppo_alfworld")
    assert ppo.algorithm.adv_estimator == "skl_gae" and plays_per_update(ppo) == 384
    assert ppo.critic.enable and ppo.critic.model.path == ppo.actor_rollout_ref.model.path
    assert (ppo.algorithm.gamma, ppo.algorithm.lam) == (1.0, 1.0)
    with pytest.raises(ConfigError, match="skl_gae .* needs the critic"):
        load("ppo_alfworld", ["critic.enable=false"])


@pytest.mark.parametrize(
    "override,message",
    [
        ("algorithm.adv_estimator=skilrise", "not registered"),
        ("actor_rollout_ref.rollout.agent.default_agent_loop=skl_env", "needs a skillrise agent loop"),
        ("actor_rollout_ref.rollout.agent.default_agent_loop=nope", "is not in"),
        ("algorithm.skillrise.gamma=1.5", "gamma"),
        ("trainer.v1.trainer_mode=separate_async", "skl_sync"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode=clip_nll", "not registered"),
    ],
)
def test_bad_configs_fail_with_the_key_named(override, message):
    with pytest.raises(ConfigError, match=message):
        load("skillrise_alfworld", [override])


def test_run_script_dry_run_prints_the_composed_config_without_gpus(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, DATA_DIR=str(tmp_path), CONFIG="skillrise_alfworld")
    result = subprocess.run(
        ["bash", str(SKILLRISE / "run_alfworld.sh"), "--dry-run", "trainer.total_training_steps=7"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "dry run: config composed and checked" in result.stdout
    assert "adv_estimator: skillrise" in result.stdout and "total_training_steps: 7" in result.stdout
    assert not list(tmp_path.iterdir()), "a dry run must not build datasets"


SKL_SD = ROOT / "recipes" / "skl_sd"
SKL_RL = ROOT / "recipes" / "skl_rl"


def agent_loop_entry(name):
    from omegaconf import OmegaConf

    from skl_verl.trainer.registration import AGENT_LOOP_CONFIG

    return {entry.name: entry for entry in OmegaConf.load(AGENT_LOOP_CONFIG)}[name]


@pytest.mark.parametrize("name", ["skl_sd_webshop", "skl_sd_sciworld"])
def test_skl_sd_configs(name):
    config = load(name, recipe=SKL_SD)
    assert config.algorithm.adv_estimator == "skl_sd" and config.trainer.v1.trainer_mode == "skl_sync"
    assert config.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B-Instruct"
    loop = agent_loop_entry(config.actor_rollout_ref.rollout.agent.default_agent_loop)
    assert (loop.rollouts_per_state, loop.horizon, loop.bootstrap_fraction) == (3, 3, 0.2)
    assert config.actor_rollout_ref.actor.policy_loss.loss_mode == "skl_sd_eq1"
    assert config.algorithm.skl_sd.objective == "policy_gradient"
    baseline = load(name.replace("skl_sd", "grpo"), recipe=SKL_SD)
    assert baseline.algorithm.adv_estimator == "grpo" and baseline.actor_rollout_ref.rollout.agent.default_agent_loop == "skl_env"
    with pytest.raises(ConfigError, match="needs a skl_sd agent loop"):
        load(name, ["actor_rollout_ref.rollout.agent.default_agent_loop=skl_stateful"], recipe=SKL_SD)


@pytest.mark.parametrize("variant,rate", [("1_2", 1 / 2), ("1_3", 1 / 3), ("1_6", 1 / 6)])
def test_skl_rl_chess_behaviour_policies(variant, rate):
    config = load("skl_rl_chess", [f"actor_rollout_ref.rollout.agent.default_agent_loop=skl_rl_chess_expert_{variant}"], recipe=SKL_RL)
    loop = agent_loop_entry(config.actor_rollout_ref.rollout.agent.default_agent_loop)
    assert (loop.simulations, loop.horizon, loop.simulation_policy) == (3, 2, "expert_mix")
    assert loop.expert_rate == pytest.approx(rate)
    assert config.algorithm.adv_estimator == "grpo" and config.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B-Instruct"
    assert load("grpo_chess", recipe=SKL_RL).actor_rollout_ref.rollout.agent.default_agent_loop == "skl_stateful"


def test_skl_rl_run_script_dry_run(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, DATA_DIR=str(tmp_path), EXPERT="1_3")
    result = subprocess.run(
        ["bash", str(SKL_RL / "run_chess.sh"), "--dry-run"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "default_agent_loop: skl_rl_chess_expert_1_3" in result.stdout
    assert "dry run: config composed and checked" in result.stdout and not list(tmp_path.iterdir())


def test_skl_rl_distillation_ablation_config():
    config = load("skl_rl_chess_distill", recipe=SKL_RL)
    assert config.algorithm.adv_estimator == "skl_rl" and config.trainer.v1.trainer_mode == "skl_sync"
    loop = agent_loop_entry(config.actor_rollout_ref.rollout.agent.default_agent_loop)
    assert (loop.max_turns, loop.distill_interval, loop.simulations, loop.horizon) == (5, 1, 3, 2)


def test_step_mode_with_an_estimator_that_counts_samples_is_refused():
    with pytest.raises(ConfigError, match="would count steps as if they were trials"):
        load("grpo_alfworld", ["algorithm.adv_estimator=grpo"])


def test_run_script_dry_run_shows_thinking_off_mean_norm_and_the_per_action_budget(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, DATA_DIR=str(tmp_path))
    result = subprocess.run(["bash", str(ROOT / "recipes/skillrise/run_alfworld.sh"), "--dry-run"],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "enable_thinking: false" in out and "norm: mean" in out
    assert "max_response_length: 1024" in out and "default_agent_loop: skillrise_alfworld" in out
