"""Every code path of the recipes through the real entry point on CPU: 2 training steps each.

One smoke per distinct (agent-loop class, estimator, policy loss, rollout backend) and per env engine under
Ray; every config a user can launch passes every check in a dry run at these settings
(tests/recipes/test_recipes.py::test_every_recipe_config_passes_every_check_at_the_smoke_settings). Configs
whose path another smoke trains, and what covers them:

* ``no_curation_alfworld``, ``skillrise_webshop``, ``skillrise_sciworld`` (SkillRiseAgentLoop, ``skillrise``,
  vanilla): ``test_skillrise_alfworld`` on vLLM; the ablation's ``curate: false`` is played in process by
  tests/skillrise/test_skillrise_end_to_end.py (``attempts_*``), each env's SkillRise episode by
  tests/skillrise/test_golden_episodes.py.
* ``skl_sd_sciworld`` (SklSdAgentLoop, ``skl_sd``, ``skl_sd_eq1``): ``test_skl_sd_webshop`` on vLLM;
  tests/skl/test_skl_sd_golden.py plays ScienceWorld's episodes.
* ``grpo_webshop`` (EnvAgentLoop episodes, verl's ``grpo``, reference policy): ``test_grpo_sciworld``; the
  WebShop stand-in runs under Ray in ``test_skl_sd_webshop``.
* The other baselines' envs (``grpo``/``gigpo``/``rloo``/``ppo``/``lamer`` on WebShop and ScienceWorld), the
  SKL-RL expert rates and Knowledge Weaver's ablations and WebShop configs: the same classes and estimators as
  the smokes below, other settings.

Each test launches what a user launches, the recipe's run script (``bash recipes/<paper>/run_<env>.sh``,
which builds the dataset and then runs ``python -m skl_verl.main ... trainer.device=cpu``), with a
tiny local model and small batches (tests/recipes/recipe_smoke.py), and checks what a user would check from
verl's file logger: the run exited 0, step 2 was logged, the recipe's loop and estimator really ran
(their metrics are there, or absent for the ablations/baselines), and the rollout server served the
trained weights (tests/weight_sync.py: rollout-vs-actor probabilities, mean difference and Pearson, on
every step). The smokes marked ``rollout="vllm"`` run verl's vLLM replica on vLLM's CPU build (one per
recipe family: SkillRise's step samples, SKL-SD's teacher-forced retries, PPO's critic, Knowledge Weaver's
``prompt_logprobs`` rescoring); the others the ``hf`` stand-in, to keep the suite's time.

Env data: ALFWorld games made offline (scripts/make_alfworld_games.py), the WebShop stand-in
(tests/webshop_standin.py), ScienceWorld's real JVM, the chess sample CSV (+ Stockfish for the
simulation recipes). Marked ``slow``: the fast tier (``-m "not slow"``) leaves them out; CI runs them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from alfworld_games import load_generator
from recipe_smoke import PYTHON, ROOT, RecipeRun, run_recipe
from weight_sync import weight_sync_problems
from skl_verl import checked_jsonl

pytestmark = pytest.mark.slow

CHESS_CSV = str(ROOT / "envs" / "data" / "chess_puzzles_sample.csv")
HAS_STOCKFISH = shutil.which("stockfish") is not None or os.path.exists("/usr/games/stockfish")
needs_stockfish = pytest.mark.skipif(not HAS_STOCKFISH, reason="stockfish not installed (apt-get install stockfish)")
SKILLRISE_KEYS = ("curate/", "env/curate_success_rate", "env/solve_success_rate")


def check_synced(run: RecipeRun, steps=(1, 2)) -> None:
    """The rollout server generated with the actor's weights: its probabilities match the actor's."""
    problems = weight_sync_problems({step: run.steps[step] for step in steps})
    assert not problems, problems


def check_run(run: RecipeRun) -> dict:
    run.check_ok(steps=2)
    check_synced(run)
    for step in (1, 2):
        assert "env/success_rate" in run.steps[step] and "actor/pg_loss" in run.steps[step], sorted(run.steps[step])
    return run.steps[2]


def check_step_samples(run: RecipeRun) -> None:
    """The loop ran in step mode: each episode gave one sample per policy turn (>= 1 per episode)."""
    per_episode = [run.steps[s].get("env/samples_per_episode") for s in (1, 2)]
    assert all(v is not None and v >= 1 for v in per_episode), per_episode


def check_skillrise_run(run: RecipeRun) -> None:
    """A SkillRise run as released: step samples, and both phases ran (curation metrics and
    later-position solves are logged)."""
    check_run(run)
    check_step_samples(run)
    keys = run.all_keys()
    assert "curate/error_rate" in keys, skillrise_metrics(run)
    assert {"env/curate_success_rate@0", "env/solve_success_rate@1"} & keys, skillrise_metrics(run)


def skillrise_metrics(run: RecipeRun) -> list[str]:
    return sorted(k for k in run.all_keys() if k.startswith(SKILLRISE_KEYS))


# ----------------------------------------------------------------------------- SkillRise (ALFWorld)


@pytest.fixture(scope="module")
def alfworld_data(tmp_path_factory):
    """The generator's 10 games plus three more, each a new instance (object, receptacle or scene) of a
    family the split has, so K=2 sequences of distinct instances exist in both splits (3 train, 1 val)."""
    pytest.importorskip("alfworld", reason="alfworld not installed")
    pytest.importorskip("fast_downward", reason="fast-downward-textworld not installed (textworld[pddl])")
    gen = load_generator()
    G = gen.GameSpec
    extra = [
        G("train", "look_at_obj_in_light", "bedroom", "CellPhone", toggle_target="DeskLamp", trial=11),
        G("train", "pick_clean_then_place_in_recep", "bathroom", "SoapBar", "Cabinet", trial=12),
        G("valid_seen", "pick_and_place_simple", "bedroom", "CellPhone", "Bed", trial=13),  # val is valid_seen
    ]
    out = tmp_path_factory.mktemp("alfworld_data")
    gen.make_games(out, [*gen.GAMES, *extra])
    return {"ALFWORLD_DATA": str(out), "K": "2"}


@pytest.mark.vllm_server
def test_skillrise_alfworld(tmp_path, tiny_model_dir, alfworld_data):
    run = run_recipe(tmp_path, tiny_model_dir, "skillrise_alfworld", script="skillrise/run_alfworld.sh", env=alfworld_data, rollout="vllm")
    check_skillrise_run(run)


def test_grpo_alfworld(tmp_path, tiny_model_dir, alfworld_data):
    run = run_recipe(tmp_path, tiny_model_dir, "grpo", script="skillrise/run_alfworld.sh", env=alfworld_data)
    check_run(run)
    check_step_samples(run)
    assert not skillrise_metrics(run), skillrise_metrics(run)


def test_gigpo_alfworld(tmp_path, tiny_model_dir, alfworld_data):
    run = run_recipe(tmp_path, tiny_model_dir, "gigpo", script="skillrise/run_alfworld.sh", env=alfworld_data)
    check_run(run)
    check_step_samples(run)
    assert not skillrise_metrics(run), skillrise_metrics(run)
    assert "algorithm.adv_estimator=gigpo" in run.output or "adv_estimator: gigpo" in run.output or "'adv_estimator': 'gigpo'" in run.output


def test_rloo_alfworld(tmp_path, tiny_model_dir, alfworld_data):
    run = run_recipe(tmp_path, tiny_model_dir, "rloo", script="skillrise/run_alfworld.sh", env=alfworld_data)
    check_run(run)
    check_step_samples(run)
    assert "'adv_estimator': 'skl_rloo'" in run.output or "adv_estimator: skl_rloo" in run.output


@pytest.mark.vllm_server
def test_ppo_alfworld(tmp_path, tiny_model_dir, alfworld_data):
    run = run_recipe(tmp_path, tiny_model_dir, "ppo", script="skillrise/run_alfworld.sh", env=alfworld_data, rollout="vllm")
    check_run(run)
    check_step_samples(run)
    keys = run.all_keys()
    assert {"critic/vf_loss", "critic/vpred_mean"} <= keys, sorted(k for k in keys if k.startswith("critic"))


def test_lamer_alfworld(tmp_path, tiny_model_dir, alfworld_data):
    run = run_recipe(tmp_path, tiny_model_dir, "lamer", script="skillrise/run_alfworld.sh", env=alfworld_data)
    check_run(run)
    check_step_samples(run)
    assert "env/solve_success_rate@1" in run.all_keys(), skillrise_metrics(run)  # the smokes' K = 2 attempts
    rows = pd.read_parquet(tmp_path / "data" / "alfworld_attempts_train.parquet")
    task_ids = [json.loads(info["task_ids"]) for info in rows["extra_info"]]
    assert task_ids and all(len(ids) == 2 and ids[0] == ids[1] for ids in task_ids)  # one task, attempted twice


# ----------------------------------------------------------------------------- WebShop (stand-in server)


@pytest.fixture(scope="module")
def webshop():
    from webshop_standin import MiniWebShopStandIn

    # 4,200 goals: SKL-SD's R3L split tests on goals 4,096-4,195 (trains on 0-4,095); SkillRise trains from goal 500
    server = MiniWebShopStandIn(n_goals=4200)
    yield {"WEBSHOP_URL": server.url}
    server.close()


@pytest.mark.vllm_server
def test_skl_sd_webshop(tmp_path, tiny_model_dir, webshop):
    run = run_recipe(tmp_path, tiny_model_dir, "skl_sd_webshop", script="skl_sd/run_webshop.sh", env=webshop, rollout="vllm")
    check_run(run)
    assert all(run.steps[s].get("loss_terms/base_samples", 0) > 0 for s in (1, 2)), sorted(run.all_keys())


# ----------------------------------------------------------------------------- ScienceWorld (real JVM)
# The run scripts' env kwargs ({"split": ..., "max_steps": 50}) enumerate every task variation of the
# split, which takes over 15 min on 2 cores; so the tests build the same datasets with the same modules
# from 2 tasks x 2 variations into DATA_DIR first, and the run script (which builds only missing files)
# trains on them.

pytest_sciworld = pytest.mark.skipif(
    importlib.util.find_spec("scienceworld") is None or shutil.which("java") is None,
    reason="scienceworld package or java missing",
)
SCIWORLD_TASKS = ["find-living-thing", "find-non-living-thing"]


def sciworld_kwargs(split: str) -> str:
    # both recipes' run scripts build ScienceWorld data with the verb templates
    return json.dumps({"split": split, "max_steps": 10, "task_names": SCIWORLD_TASKS, "max_variations_per_task": 2,
                       "action_format": "templates"})


def build(data_dir: Path, module: str, split: str, name: str, *extra: str) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([PYTHON, "-m", module, "--env", "sciworld", "--env-kwargs", sciworld_kwargs(split), *extra,
                    "--out", str(data_dir / f"{name}.parquet")], cwd=ROOT, check=True)


@pytest_sciworld
def test_grpo_sciworld(tmp_path, tiny_model_dir):
    data = tmp_path / "data"
    build(data, "skl_verl.rollout.data", "train", "sciworld_plain_train")
    build(data, "skl_verl.rollout.data", "test", "sciworld_plain_val")
    run = run_recipe(tmp_path, tiny_model_dir, "grpo_sciworld", script="skl_sd/run_sciworld.sh", data_dir=data)
    check_run(run)
    assert not [k for k in run.all_keys() if k.startswith(("loss_terms/", *SKILLRISE_KEYS))]


# ----------------------------------------------------------------------------- SKL-RL (chess puzzles)

CHESS_ENV = {"PUZZLES": CHESS_CSV}


@needs_stockfish
def test_skl_rl_chess(tmp_path, tiny_model_dir):
    """The run script's default behaviour policy (EXPERT=1_2). The 1/3 and 1/6 variants are the same
    config and loop class with another ``expert_rate``; tests/recipes/test_recipes.py checks that each composes
    its loop and rate (a trainer launch each would add ~80 s of start-up to CI for no new code path)."""
    expert = "1_2"
    run = run_recipe(tmp_path, tiny_model_dir, "skl_rl_chess", script="skl_rl/run_chess.sh",
                     env={**CHESS_ENV, "EXPERT": expert}, tag=f"expert_{expert}")
    check_run(run)
    assert f"skl_rl_chess_expert_{expert}" in run.output  # the run script picked the expert loop
    simulated = [run.steps[s].get("env/simulated_steps/mean", 0) for s in (1, 2)]
    assert sum(simulated) > 0, f"no simulated steps: {simulated}"


@needs_stockfish
def test_skl_rl_chess_distill(tmp_path, tiny_model_dir):
    """Reverse-KL distillation (Eq. 6), whose teacher probes the tiny model always produces. Forward mode
    (Eq. 5) needs a well-formed refined <knowledge> reply, which the tiny random model does not write, so
    on the trainer it would only repeat this run's code path; tests/skl/test_skl_rl_loop.py drives both
    directions with scripted replies and checks their credit by hand."""
    loop = "skl_rl_chess_distill_reverse"
    overrides = [f"actor_rollout_ref.rollout.agent.default_agent_loop={loop}"]
    run = run_recipe(tmp_path, tiny_model_dir, "skl_rl_chess_distill", script="skl_rl/run_chess.sh", env=CHESS_ENV,
                     overrides=overrides, tag=loop)
    check_run(run)
    terms = {k: [run.steps[s].get(k, 0) for s in (1, 2)] for k in sorted(run.all_keys()) if k.endswith("_samples")}
    assert sum(terms.get("loss_terms/act_samples", [])) > 0, terms  # the skl_rl estimator ran on the traces
    # The ablation self-simulates (the authors' N3 H1): the random tiny model names no admissible move, so
    # nothing is simulated here; tests/skl/test_skl_rl_golden.py plays the simulations with scripted replies.
    # Eq. 6: one teacher probe per knowledge turn, whatever the model wrote; no forward distill samples.
    assert sum(terms.get("loss_terms/distill_teacher_samples", [])) > 0, terms
    assert not sum(terms.get("loss_terms/distill_samples", [])), terms


def test_grpo_chess_resumes_and_validates(tmp_path, tiny_model_dir):
    """grpo_chess (no Stockfish needed), plus checkpoint -> resume -> validation on a tiny test set."""
    ckpt = tmp_path / "ckpt"  # run_recipe's trainer.default_local_dir, shared by both launches
    first = run_recipe(tmp_path, tiny_model_dir, "grpo_chess", script="skl_rl/run_chess.sh", env=CHESS_ENV,
                       overrides=["trainer.save_freq=1"], tag="first")
    check_run(first)
    # Its move windows are "act" samples (one loss term, the policy's); no distillation or SkillRise term.
    assert not [k for k in first.all_keys() if k.startswith(("loss_terms/", *SKILLRISE_KEYS))
                and not k.startswith("loss_terms/act_")]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"

    # A tiny validation set (2 puzzles, played by skl.val_agent_loop as the run script's test set is).
    val = tmp_path / "val.parquet"
    subprocess.run([PYTHON, "-m", "skl_verl.rollout.data", "--env", "chess_puzzles", "--env-kwargs",
                    json.dumps({"csv_path": CHESS_CSV, "max_rating": 1000, "split": "test"}), "--max-tasks", "2",
                    "--agent-loop", "skl_stateful_chess_val", "--out", str(val)], cwd=ROOT, check=True)
    second = run_recipe(tmp_path, tiny_model_dir, "grpo_chess", script="skl_rl/run_chess.sh", env=CHESS_ENV, steps=3,
                        overrides=["trainer.resume_mode=auto", "trainer.test_freq=1", f"data.val_files={val}",
                                   "trainer.save_freq=-1"], tag="resumed")
    second.check_ok(steps=3)
    assert sorted(second.steps) == [3], f"resumed run logged steps {sorted(second.steps)}, expected only step 3"
    check_synced(second, steps=(3,))
    val_keys = [k for k in second.steps[3] if k.startswith(("val-core/", "val-aux/"))]
    assert any(k.startswith("val-core/") for k in val_keys), sorted(second.steps[3])
    assert any(k.startswith("val-aux/") for k in val_keys), sorted(second.steps[3])


# ----------------------------------------------------------------------------- Knowledge Weaver

# The ALFWorld recipe through its run script (pool, dataset, training), on two one-row lakes where "right"
# wins: a tiny curator warmed up to write "<skill>Go right.</skill>" for curator prompts, and an executor
# stand-in that plays the moves its guidance names (tests/knowledge_weaver/kw_standins.py; the real one
# is a served model). With no guidance it walks left and never wins, so a valid entry has MSR 1 at step 1.
KW_LAKES = "{maps:[[SG],[HSG]],slip:[0.0,0.0],max_steps:3}"


@pytest.fixture(scope="module")
def kw_curator_model():
    from skl_verl.knowledge_weaver.tiny_curator import build_tiny_curator

    return str(build_tiny_curator())


@pytest.mark.vllm_server
def test_knowledge_weaver_alfworld(tmp_path, kw_curator_model, alfworld_data):
    overrides = [
        "kw.env.name=frozenlake", "~kw.env.kwargs", f"+kw.env.kwargs={KW_LAKES}",
        "kw.executor.client={_target_:kw_standins.GuidanceFollowingExecutor}", f"kw.executor.tokenizer={kw_curator_model}",
        "kw.executor.max_steps=3", "kw.seed=23003", "kw.mi.set_size=2", "kw.reward.tasks=2", "kw.context.trajectories=1",
        "kw.retrieval.backend=bm25", "data.max_response_length=32",
    ]
    env = {**alfworld_data, "POOL_PER_TYPE": "2", "PYTHONPATH": str(ROOT / "tests" / "knowledge_weaver")}
    run = run_recipe(tmp_path, kw_curator_model, "kw_alfworld", script="knowledge_weaver/run_alfworld.sh", env=env,
                     overrides=overrides, rollout="vllm")
    run.check_ok(steps=2)  # bypass mode (l_prox = rollout log-probs): verl logs no rollout/actor log-prob diff
    first, second = run.steps[1], run.steps[2]
    logged = {"kw/valid_rate", "kw/reward", "kw/sr", "kw/msr", "kw/bank_only_sr", "kw/aug_sr", "kw/mi_credit",
              "kw/mi_clip_frac", "kw/retrieved", "kw/bank_size", "kw/admitted", "kw/executor_episodes",
              "kw/bank_only_runs_per_group", "actor/pg_loss"}
    for metrics in (first, second):
        assert logged <= set(metrics) and metrics["kw/valid_rate"] > 0, sorted(logged - set(metrics))
        assert metrics["kw/bank_only_runs_per_group"] == 1.0
        assert "actor/reward_kl_penalty" in metrics  # the reference policy ran (Eq. 15's l_ref)
    # Step 1: empty bank, so MSR = SR; the entry was admitted. Step 2: it is retrieved for every task.
    assert first["kw/sr"] == 1.0 and first["kw/msr"] == 1.0 and first["kw/admitted"] == 1.0
    assert second["kw/retrieved"] == 1.0 and second["kw/bank_only_sr"] == 1.0 and second["kw/bank_size"] == 1.0
    # kw.seed 23003: step 1's two slots draw different pool episodes, so their contexts differ. (Step 2's pool
    # adds episodes filed under verl's random uids, so which ones its slots draw varies from run to run.)
    assert first["kw/mi_credit"] > 0 and second["actor/grad_norm"] > 0  # MI credit; the update moved
    bank = checked_jsonl.read(tmp_path / "ckpt" / "kw_state" / "bank" / "bank_000001.jsonl", "knowledge_bank")
    assert [entry["text"] for entry in bank] == ["Go right."]
