"""Recipes compose on CPU with the paper's settings, and their run scripts' --dry-run works."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from dry_run import dry_run, printed_section
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from skl_verl.trainer.entry import ConfigError, prepare_config
from skl_verl.trainer.registry import estimator_options, with_declared_options

ROOT = Path(__file__).resolve().parents[2]
SKILLRISE = ROOT / "recipes" / "skillrise"


def load(config_name, overrides=(), recipe=SKILLRISE):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(recipe / "config"), version_base=None):
        return prepare_config(compose(config_name=config_name, overrides=with_declared_options(list(overrides))))


def options(config):
    """The options the run's estimator computes with (its declaration's defaults, then the config's values)."""
    return estimator_options(config.algorithm, config.algorithm.adv_estimator)


def plays_per_update(config, k=3):
    per_prompt = k if config.actor_rollout_ref.rollout.agent.default_agent_loop.startswith(("skillrise", "lamer")) else 1
    return config.data.train_batch_size * config.actor_rollout_ref.rollout.n * per_prompt


@pytest.mark.parametrize("name", ["skillrise_alfworld", "skillrise_webshop", "skillrise_sciworld"])
def test_skillrise_configs_carry_the_paper_settings(name):
    config = load(name)
    assert config.algorithm.adv_estimator == "skillrise" and options(config).gamma == 0.6
    assert config.trainer.v1.trainer_mode == "skl_sync"
    assert config.actor_rollout_ref.model.path == "Qwen/Qwen3-4B"
    assert plays_per_update(config) == 384  # 16 sequences x K=3 x N=8
    assert config.actor_rollout_ref.actor.optim.lr == 1e-6
    assert config.skl.mini_batch_samples == 128  # step samples per mini-batch, as released
    assert config.data.max_response_length == 1024
    assert config.trainer.total_training_steps == 150
    assert config.actor_rollout_ref.rollout.val_kwargs.temperature == 0.7
    assert config.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook == "skl_verl.register"
    assert config.data.train_files.endswith(f"{name.split('_')[1]}_train.parquet")
    # As the authors' released code trains it (issue 10): step samples with a per-action budget,
    # thinking off, 10 * won, mean-only normalisation, entropy 0.001, the released history per env.
    env = name.split("_")[1]
    assert config.data.apply_chat_template_kwargs.enable_thinking is False
    assert options(config).norm == "mean" and config.actor_rollout_ref.actor.entropy_coeff == 0.001
    assert config.data.max_prompt_length == {"alfworld": 4096, "webshop": 12288, "sciworld": 10240}[env]
    loop = agent_loop_entry(config.actor_rollout_ref.rollout.agent.default_agent_loop)
    assert loop.name == f"skillrise_{env}" and loop.sample_granularity == "step"
    assert (loop.reward_fn, loop.reward_scale, loop.invalid_format_penalty) == ("scaled_success", 10.0, 0.5)
    assert loop.step_history == {"alfworld": 15, "webshop": 5, "sciworld": 2}[env]
    assert loop.history_window == {"alfworld": 50, "webshop": 50, "sciworld": 30}[env]


BASELINES = {"grpo": "skl_grpo", "gigpo": "gigpo", "rloo": "skl_rloo", "ppo": "skl_gae", "lamer": "lamer"}
"""Each Table 1 baseline config and the estimator it trains with."""
ENVS = ["alfworld", "webshop", "sciworld"]
SHARED_LOOP_OPTIONS = ("sample_granularity", "step_history", "max_turns", "reward_fn", "reward_scale",
                       "invalid_format_penalty", "env_step_timeout_s")
"""What a baseline's loop must share with SkillRise's loop on the same env: the per-step prompt and the reward."""


def baseline(method, env, overrides=()):
    return load(method, [f"env={env}", *overrides])


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("method", sorted(BASELINES))
def test_baselines_train_on_each_env_with_skillrise_settings(method, env):
    config, skillrise = baseline(method, env), load(f"skillrise_{env}")
    assert config.algorithm.adv_estimator == BASELINES[method]
    assert plays_per_update(config) == 384
    loop_name = config.actor_rollout_ref.rollout.agent.default_agent_loop
    assert loop_name == f"{'lamer' if method == 'lamer' else 'step'}_{env}"
    data_kind = {"lamer": "attempts_"}.get(method, "tasks_")
    assert config.data.train_files.endswith(f"/{env}_{data_kind}train.parquet")
    assert config.data.val_files.endswith(f"/{env}_{data_kind}val.parquet")
    assert config.trainer.experiment_name == f"{method}_{env}"
    for key in ("data.max_prompt_length", "data.max_response_length", "data.apply_chat_template_kwargs",
                "actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.entropy_coeff",
                "actor_rollout_ref.rollout.temperature", "actor_rollout_ref.model.path",
                "trainer.total_training_steps", "skl.mini_batch_samples"):
        assert OmegaConf.select(config, key) == OmegaConf.select(skillrise, key), key
    # evaluation sampling as each was evaluated when released: LaMer's scripts (LaMer, GiGPO) add nucleus 0.8
    # and top-k 20 to SkillRise's temperature 0.7
    val, skillrise_val = dict(config.actor_rollout_ref.rollout.val_kwargs), dict(skillrise.actor_rollout_ref.rollout.val_kwargs)
    released = {"top_p": 0.8, "top_k": 20} if method in ("lamer", "gigpo") else {}
    assert val == {**skillrise_val, **released}
    loop, skillrise_loop = agent_loop_entry(loop_name), agent_loop_entry(f"skillrise_{env}")
    for option in SHARED_LOOP_OPTIONS:
        assert loop[option] == skillrise_loop[option], option
    if method == "lamer":
        assert loop.carried_text == "reflection" and loop.history_window == skillrise_loop.history_window
        assert (loop.reflections, loop.stop_after_win) == ("accumulate", True)  # as LaMer's code plays


@pytest.mark.parametrize("env", ENVS)
def test_a_baselines_retries_play_its_training_loop_with_nothing_carried(env):
    """evaluate.py's Pass@k loop for GRPO/GiGPO/RLOO/PPO checkpoints shows the prompt they trained on."""
    attempts, step = agent_loop_entry(f"attempts_{env}"), agent_loop_entry(f"step_{env}")
    assert attempts.carried_text == "none" and attempts.curate is False
    for option in SHARED_LOOP_OPTIONS:
        assert attempts[option] == step[option], option


def test_env_settings_come_from_one_place_for_skillrise_and_its_ablation():
    assert [load(f"skillrise_{env}").skl.env for env in ENVS] == ENVS
    assert [load(f"skillrise_{env}").data.max_prompt_length for env in ENVS] == [4096, 12288, 10240]
    assert load("no_curation_alfworld").data.max_prompt_length == 4096


def test_a_baseline_config_needs_an_env():
    with pytest.raises(Exception, match="You must specify 'env'"):
        load("grpo")


def test_grpo_baseline_and_no_curation_ablation():
    grpo = baseline("grpo", "alfworld")
    assert grpo.actor_rollout_ref.rollout.n == 24
    # the released GRPO baseline: std normalisation over every step sample of the task's group
    assert (options(grpo).norm, options(grpo).count) == ("std", "steps")
    ablation = load("no_curation_alfworld")
    assert ablation.actor_rollout_ref.rollout.agent.default_agent_loop == "skillrise_no_curation_alfworld"
    assert agent_loop_entry("skillrise_no_curation_alfworld").curate is False
    assert plays_per_update(ablation) == 384


@pytest.mark.parametrize("env", ENVS)
def test_gigpo_baseline_composes_with_the_released_qwen3_4b_settings(env):
    gigpo = baseline("gigpo", env)
    assert gigpo.actor_rollout_ref.rollout.n == 24
    # LaMer's gigpo_<env>_qwen3_4b.sh: gamma 0.95, step_advantage_w 1.0, mode mean_norm, no KL
    assert (options(gigpo).gamma, options(gigpo).step_advantage_weight, options(gigpo).norm, options(gigpo).count) == (
        0.95, 1.0, "mean", "steps")
    assert not gigpo.actor_rollout_ref.actor.use_kl_loss and not gigpo.algorithm.use_kl_in_reward
    assert gigpo.trainer.v1.trainer_mode == "skl_sync"
    with pytest.raises(ConfigError, match="gigpo groups env steps"):
        baseline("gigpo", env, ["actor_rollout_ref.rollout.agent.default_agent_loop=skl_env"])
    with pytest.raises(ValueError, match="algorithm.gigpo.gamma"):
        baseline("gigpo", env, ["algorithm.gigpo.gamma=1.5"])


@pytest.mark.parametrize("env", ENVS)
def test_lamer_baseline_attempts_one_task_with_a_reflection(env):
    lamer = baseline("lamer", env)
    settings = options(lamer)  # LaMer's run scripts: step_gamma, traj_gamma, gigpo.mode, step_advantage_w
    assert (settings.step_gamma, settings.attempt_gamma, settings.norm, settings.step_advantage_weight) == (0.95, 0.6, "mean", 1.0)
    with pytest.raises(ValueError, match="algorithm.lamer.attempt_gamma"):
        baseline("lamer", env, ["algorithm.lamer.attempt_gamma=1.5"])
    with pytest.raises(ValueError, match="algorithm.lamer.norm"):
        baseline("lamer", env, ["algorithm.lamer.norm=median"])
    with pytest.raises(ConfigError, match="needs a lamer agent loop"):
        baseline("lamer", env, [f"actor_rollout_ref.rollout.agent.default_agent_loop=step_{env}"])
    with pytest.raises(ConfigError, match="lamer credits env steps"):
        baseline("lamer", env, ["actor_rollout_ref.rollout.agent.default_agent_loop=skillrise"])


@pytest.mark.parametrize("env", ENVS)
def test_ppo_baseline_trains_a_critic(env):
    ppo = baseline("ppo", env)
    assert ppo.critic.enable and ppo.critic.model.path == ppo.actor_rollout_ref.model.path
    assert (ppo.algorithm.gamma, ppo.algorithm.lam) == (1.0, 1.0)
    with pytest.raises(ConfigError, match="skl_gae .* needs the critic"):
        baseline("ppo", env, ["critic.enable=false"])


@pytest.mark.parametrize(
    "override,message",
    [
        ("algorithm.adv_estimator=skilrise", "not registered"),
        ("actor_rollout_ref.rollout.agent.default_agent_loop=skl_env", "needs a skillrise agent loop"),
        ("actor_rollout_ref.rollout.agent.default_agent_loop=nope", "is not an agent loop of the registered recipes"),
        ("algorithm.skillrise.gamma=1.5", "gamma"),
        ("trainer.v1.trainer_mode=separate_async", "skl_sync"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode=clip_nll", "not registered"),
    ],
)
def test_bad_configs_fail_with_the_key_named(override, message):
    with pytest.raises(ConfigError, match=message):
        load("skillrise_alfworld", [override])


def test_run_script_dry_run_prints_the_composed_config_without_gpus(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, DATA_DIR=str(tmp_path), CONFIG="skillrise_alfworld", N_GPUS="4", NNODES="2")
    result = subprocess.run(
        ["bash", str(SKILLRISE / "run_alfworld.sh"), "--dry-run", "trainer.total_training_steps=7"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "dry run: config composed and checked" in result.stdout
    assert "adv_estimator: skillrise" in result.stdout and "total_training_steps: 7" in result.stdout
    trainer = printed_section(result.stdout, "trainer")
    assert (trainer["n_gpus_per_node"], trainer["nnodes"]) == (4, 2), "N_GPUS and NNODES, when set, place the run"
    assert not list(tmp_path.iterdir()), "a dry run must not build datasets"


SKL_SD = ROOT / "recipes" / "skl_sd"
SKL_RL = ROOT / "recipes" / "skl_rl"


def agent_loop_entry(name):
    """The registered loop ``name`` with every option it runs with (declared defaults filled in)."""
    from skl_verl.trainer.loop_checks import loop_settings
    from skl_verl.trainer.registry import AGENT_LOOPS

    return OmegaConf.create({"name": name, **loop_settings(AGENT_LOOPS[name])})


@pytest.mark.parametrize("name", ["skl_sd_webshop", "skl_sd_sciworld"])
def test_skl_sd_configs(name):
    config = load(name, recipe=SKL_SD)
    assert config.algorithm.adv_estimator == "skl_sd" and config.trainer.v1.trainer_mode == "skl_sync"
    assert config.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B-Instruct"
    loop = agent_loop_entry(config.actor_rollout_ref.rollout.agent.default_agent_loop)
    assert (loop.rollouts_per_state, loop.horizon, loop.bootstrap_fraction) == (3, 3, 0.2)
    # R3L's optimisation (issue #37 item 5): OPMD loss and weights, k2 KL at 0.001, n/2 = 4 first rollouts, and
    # one update a step (every sample of a step in one mini-batch); the GRPO baseline keeps k3 at 0.01, n 8.
    assert config.actor_rollout_ref.actor.policy_loss.loss_mode == "skl_opmd"
    assert options(config).objective == "r3l_opmd"
    actor = config.actor_rollout_ref.actor
    assert (actor.kl_loss_type, actor.kl_loss_coef, config.actor_rollout_ref.rollout.n) == ("k2", 0.001, 4)
    turns = {"skl_sd_webshop": 15, "skl_sd_sciworld": 30}[name]
    assert config.skl.mini_batch_samples == config.data.train_batch_size * 4 * (2 + -(-turns // 5))
    baseline = load(name.replace("skl_sd", "grpo"), recipe=SKL_SD)
    base_actor = baseline.actor_rollout_ref.actor
    assert (base_actor.kl_loss_type, base_actor.kl_loss_coef, baseline.actor_rollout_ref.rollout.n) == ("low_var_kl", 0.01, 8)
    assert base_actor.ppo_mini_batch_size == baseline.data.train_batch_size
    env = name.split("_")[-1]
    # Per-env loops with R3L's step limit (WebShop 15, ScienceWorld 30) for training, validation and the baseline.
    assert baseline.algorithm.adv_estimator == "grpo" and baseline.actor_rollout_ref.rollout.agent.default_agent_loop == f"skl_sd_grpo_{env}"
    for loop_name in (f"skl_sd_{env}", config.skl.val_agent_loop, f"skl_sd_grpo_{env}"):
        assert agent_loop_entry(loop_name).max_turns == {"webshop": 15, "sciworld": 30}[env], loop_name
    with pytest.raises(ConfigError, match="needs a skl_sd agent loop"):
        load(name, ["actor_rollout_ref.rollout.agent.default_agent_loop=skl_stateful"], recipe=SKL_SD)


@pytest.mark.parametrize("variant,rate", [("1_2", 1 / 2), ("1_3", 1 / 3), ("1_6", 1 / 6)])
def test_skl_rl_chess_behaviour_policies(variant, rate):
    config = load("skl_rl_chess", [f"actor_rollout_ref.rollout.agent.default_agent_loop=skl_rl_chess_expert_{variant}"], recipe=SKL_RL)
    loop = agent_loop_entry(config.actor_rollout_ref.rollout.agent.default_agent_loop)
    assert (loop.simulations, loop.horizon, loop.simulation_policy) == (3, 2, "expert_mix")
    assert loop.expert_rate == pytest.approx(rate)
    # skl_rl: GRPO over games whose moves are windows of their own (one advantage a game)
    assert config.algorithm.adv_estimator == "skl_rl" and config.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B-Instruct"
    assert load("grpo_chess", recipe=SKL_RL).actor_rollout_ref.rollout.agent.default_agent_loop == "skl_stateful_chess"


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
    # The authors' distillation script: self-generated simulation, N=3, H=1, 10 moves a game (#37 item 8; the
    # paper's 5 is the forward/reverse options' episode length).
    assert (loop.max_turns, loop.distill_interval, loop.simulations, loop.horizon) == (10, 1, 3, 1)
    assert loop.simulation_policy == "self"
    # validation plays the training loop's simulation greedily with the script's H=1 (skl_rl_chess_val)
    assert config.skl.val_agent_loop == "skl_rl_chess_val" and config.skl.val_loop.horizon == 1
    # one move's window at the authors' per-turn caps (the game is 10 windows; recipes/skl_rl/README.md)
    assert config.data.max_response_length == 5120


def test_a_dataset_built_with_other_arguments_stops_the_run_instead_of_training_on_it(tmp_path):
    """recipes/common.sh build_missing: a DATA_DIR reused across settings (a split, a task set, a seed) would
    otherwise train on the first setting's file without a word."""
    out = tmp_path / "tasks.parquet"

    def build(mark, dry_run=False):
        script = (f'ENV_NAME=x CONFIG=y RECIPE_DIR={ROOT}/recipes/skl_sd DEFAULT_MODEL=m DATA_DIR={tmp_path}; '
                  f'source {ROOT}/recipes/common.sh {"--dry-run" if dry_run else ""}; '
                  f'build_missing {out} {sys.executable} -c "import sys; open(sys.argv[1], \'a\').write(sys.argv[2])" '
                  f'{out} {mark}')
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)

    assert build("first").returncode == 0 and out.read_text() == "first"
    assert build("first").returncode == 0 and out.read_text() == "first"  # the same arguments: reused
    refused = build("second")
    assert refused.returncode == 2 and out.read_text() == "first", refused.stderr
    assert "was built with other arguments" in refused.stderr and "first" in refused.stderr and "second" in refused.stderr
    dry = build("second", dry_run=True)  # a dry run says so and goes on
    assert dry.returncode == 0 and "was built with other arguments" in dry.stderr
    (tmp_path / "tasks.parquet.build").unlink()  # built before notes were kept: reused, with a warning
    unnoted = build("second")
    assert unnoted.returncode == 0 and "warning: reusing" in unnoted.stderr and out.read_text() == "first"


@pytest.mark.parametrize("env", ENVS)
def test_step_mode_with_an_estimator_that_counts_samples_is_refused(env):
    with pytest.raises(ConfigError, match="would count steps as if they were trials"):
        baseline("grpo", env, ["algorithm.adv_estimator=grpo"])


def test_run_script_dry_run_shows_thinking_off_mean_norm_and_the_per_action_budget(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, DATA_DIR=str(tmp_path))
    result = subprocess.run(["bash", str(ROOT / "recipes/skillrise/run_alfworld.sh"), "--dry-run"],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "enable_thinking: false" in out and "norm: mean" in out
    assert "max_response_length: 1024" in out and "default_agent_loop: skillrise_alfworld" in out


RELEASED_ENV_KWARGS = {
    "alfworld": ({"split": "train", "max_steps": 10}, {"split": "valid_seen", "max_steps": 10}),  # eval_in_distribution
    # the released goals: a training site (seed 0) and a validation site (seed 1000) on its own server
    "webshop": ({"split": "train", "split_convention": "verl_agent", "max_steps": 12, "history_items": 15,
                 "site": "skillrise_train"},
                {"split": "test", "split_convention": "verl_agent", "max_steps": 12, "history_items": 15,
                 "site": "skillrise_val", "server_url": "http://127.0.0.1:3001"}),
    "sciworld": ({"split": "train", "task_set": "l0", "max_steps": 30, "action_format": "templates"},
                 {"split": "test", "task_set": "l0", "max_steps": 30, "action_format": "templates"}),
}
"""The released splits, turn caps, action rendering and (WebShop) history pages SkillRise plays each env with."""


def planned_builds(stdout):
    """(dataset file name, builder module, env kwargs) for each "dry run: would build" line."""
    builds = []
    for line in stdout.splitlines():
        if line.startswith("dry run: would build "):
            command = shlex.split(line.split(" unless it exists:", 1)[1])
            builds.append((Path(command[command.index("--out") + 1]).name, command[command.index("-m") + 1],
                           json.loads(command[command.index("--env-kwargs") + 1])))
    return builds


@pytest.mark.parametrize("env,method,module,data_kind,loop", [
    ("alfworld", "lamer", "skl_verl.skillrise.build_dataset", "attempts_", "lamer_alfworld"),
    ("webshop", "gigpo", "skl_verl.rollout.data", "tasks_", "step_webshop"),
    ("sciworld", "lamer", "skl_verl.skillrise.build_dataset", "attempts_", "lamer_sciworld"),
])
def test_run_script_builds_a_baselines_data_with_skillrises_env_settings(env, method, module, data_kind, loop, tmp_path):
    environ = dict(os.environ, PYTHON=sys.executable, DATA_DIR=str(tmp_path), CONFIG=method, WEBSHOP_URL="http://127.0.0.1:9")
    result = subprocess.run(["bash", str(SKILLRISE / f"run_{env}.sh"), "--dry-run"],
                            check=False, capture_output=True, text=True, env=environ, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    train, val = RELEASED_ENV_KWARGS[env]
    assert planned_builds(result.stdout) == [(f"{env}_{data_kind}train.parquet", module, train),
                                             (f"{env}_{data_kind}val.parquet", module, val)]
    assert f"default_agent_loop: {loop}" in result.stdout and f"experiment_name: {method}_{env}" in result.stdout
    assert "dry run: config composed and checked" in result.stdout and not list(tmp_path.iterdir())


@pytest.mark.parametrize("config,args,message", [
    ("skillrise_alfworld", [], "CONFIG=skillrise_alfworld trains on alfworld; run it with recipes/skillrise/run_alfworld.sh"),
    ("grpo", ["env=alfworld"], "env=alfworld: run_webshop.sh trains on webshop"),
])
def test_run_script_refuses_to_train_on_another_env_than_its_own(config, args, message, tmp_path):
    environ = dict(os.environ, PYTHON=sys.executable, DATA_DIR=str(tmp_path), CONFIG=config)
    result = subprocess.run(["bash", str(SKILLRISE / "run_webshop.sh"), "--dry-run", *args],
                            check=False, capture_output=True, text=True, env=environ, cwd=ROOT, timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
    assert "dry run: config composed" not in result.stdout


def test_ppo_dry_run_works_offline_and_still_checks_the_critic(tmp_path):
    """verl builds critic.model (the model's Hugging Face config) while validating; a dry run must not need the hub."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_HOME")}
    env.update(PYTHON=sys.executable, DATA_DIR=str(tmp_path / "data"), CONFIG="ppo", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))  # an empty cache: no Qwen3-4B anywhere

    def dry_run(*overrides):
        return subprocess.run(["bash", str(SKILLRISE / "run_alfworld.sh"), "--dry-run", *overrides],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)

    result = dry_run()
    assert result.returncode == 0, result.stderr[-2000:]
    assert "dry run: critic.model (Qwen/Qwen3-4B) was not loaded" in result.stdout
    assert "dry run: config composed and checked" in result.stdout
    assert printed_section(result.stdout, "critic")["model"]["path"] == "Qwen/Qwen3-4B"
    bad = dry_run("critic.ppo_mini_batch_size=1000")  # the critic's batch settings are still verl-validated
    assert bad.returncode != 0 and "critic.ppo_mini_batch_size (1000)" in bad.stderr, bad.stderr[-2000:]


def every_recipe_config():
    """(recipe, config, overrides) for every config a user can launch: each recipe's top-level YAML files (not
    its ``*_base``), the SkillRise baselines once per env."""
    cases = []
    for config in sorted(ROOT.glob("recipes/*/config/*.yaml")):
        recipe, name = config.parent.parent.name, config.stem
        if name.endswith("_base"):
            continue
        envs = ENVS if recipe == "skillrise" and name in BASELINES else [None]
        cases += [pytest.param(recipe, name, [f"env={env}"] if env else [], id=f"{name}-{env}" if env else name)
                  for env in envs]
    return cases


@pytest.mark.parametrize("recipe,name,overrides", every_recipe_config())
def test_every_recipe_config_passes_every_check_at_the_smoke_settings(recipe, name, overrides, tmp_path, monkeypatch,
                                                                       tiny_model_dir):
    """Our checks and verl's own (``validate_config``) on the config a CPU smoke would launch. A config whose
    code path (loop class, estimator, policy loss, rollout) another config's smoke already trains stops here
    (tests/recipes/test_recipe_smokes.py lists which smoke covers it)."""
    from recipe_smoke import cpu_overrides

    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MODEL_PATH", tiny_model_dir)
    smoke = ["kw.mi.set_size=2"] if recipe == "knowledge_weaver" else []  # the smoke's batch of 2 holds one MI set
    code, out, err = dry_run(recipe, name, [*overrides, *cpu_overrides(name), *smoke], tmp_path)
    assert code == 0, (out + err)[-3000:]
    assert "dry run: config composed and checked" in out
