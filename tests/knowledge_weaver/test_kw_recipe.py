"""The Knowledge Weaver recipe configs: paper Table 4's values, the ablations, and the checks that stop a
run that cannot train before any worker starts."""

from pathlib import Path

import pytest
from dry_run import printed_section

from skl_verl.knowledge_weaver.build import compose
from skl_verl.knowledge_weaver.settings import kw_settings
from skl_verl.trainer.entry import ConfigError, prepare_config

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "recipes" / "knowledge_weaver" / "config")


@pytest.mark.parametrize("env", ["alfworld", "webshop"])
def test_configs_carry_table_4(env):
    config = compose(CONFIG_DIR, f"kw_{env}", [])
    kw = kw_settings(config)
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    assert (config.data.train_batch_size, rollout.n, kw.mi["set_size"], kw.context["trajectories"]) == (32, 8, 8, 4)
    assert (actor.optim.lr, actor.clip_ratio, actor.ppo_mini_batch_size, actor.ppo_epochs) == (1e-6, 0.2, 1, 1)
    assert actor.clip_ratio_c >= 1e9 and not actor.use_kl_loss and actor.entropy_coeff == 0
    assert (config.algorithm.kl_ctrl.kl_coef, rollout.temperature, config.data.max_response_length) == (0.01, 1.0, 256)
    assert config.data.max_prompt_length + config.data.max_response_length == 6000
    assert (kw.reward["lambda_sr"], kw.reward["lambda_msr"], kw.reward["valid_bonus"], kw.reward["invalid_penalty"]) == (0.5, 0.5, 0.02, -0.1)
    assert (kw.mi["weight"], kw.mi["cap"], kw.bank["top_m"], kw.reward["tasks"], kw.entry["max_words"]) == (0.1, 0.15, 3, 8, 100)
    assert (kw.executor["max_steps"], kw.executor["max_tokens"]) == ((50, 192) if env == "alfworld" else (15, 128))
    assert kw.bank["per_type"] == (env == "alfworld") and kw.single_type == (None if env == "alfworld" else "webshop")


@pytest.mark.parametrize("env", ["alfworld", "webshop"])
def test_mini_batches_mix_contexts(env):
    """Issue 39 item 8: the authors' 32 mini-batches of a step mix contexts (AReaL packs the 256 samples by tokens); ours
    held one context's 8 candidates each. The composed config through verl 0.9.1's own split (``make_iterator``, as
    ``train_mini_batch`` calls it with ``_update_actor``'s mini-batch size, seed and shuffle) on a batch in verl's
    order, each context's candidates side by side."""
    import torch
    from tensordict import TensorDict
    from verl.utils.tensordict_utils import make_iterator

    config = compose(CONFIG_DIR, f"kw_{env}", [])
    actor, n = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout.n
    samples = config.data.train_batch_size * n
    batch = TensorDict({"context": torch.arange(samples) // n}, batch_size=[samples])
    mini_batches = [b["context"].tolist() for b in make_iterator(
        batch, mini_batch_size=actor.ppo_mini_batch_size * n, epochs=actor.ppo_epochs, seed=actor.data_loader_seed,
        dataloader_kwargs={"shuffle": actor.shuffle})]
    assert len(mini_batches) == 32 and {len(b) for b in mini_batches} == {8}
    assert sorted(c for b in mini_batches for c in b) == sorted(batch["context"].tolist())  # every sample once
    assert all(len(set(b)) > 1 for b in mini_batches)  # no mini-batch is one context's candidates


@pytest.mark.parametrize("env", ["alfworld", "webshop"])
def test_ablations_drop_the_bank_and_then_the_mi_credit(env):
    sr_mi, sr = (kw_settings(compose(CONFIG_DIR, f"kw_{name}_{env}", [])) for name in ("sr_mi", "sr"))
    assert not sr_mi.bank["enabled"] and sr_mi.reward["lambda_msr"] == 0 and sr_mi.mi["enabled"]
    assert not sr.bank["enabled"] and sr.reward["lambda_msr"] == 0 and not sr.mi["enabled"]


@pytest.mark.parametrize(("override", "message"), [
    ("data.shuffle=true", "data.shuffle must be false"),
    ("data.train_batch_size=12", r"train_batch_size=12 must be a whole number of MI comparison sets \(kw.mi.set_size=8\)"),
    ("actor_rollout_ref.actor.use_kl_loss=true", "use_kl_loss must be false"),
    ("algorithm.kl_ctrl.type=adaptive", "kl_ctrl.type must be fixed"),
    ("algorithm.use_kl_in_reward=false", r"algorithm.use_kl_in_reward must be true: .*beta of Eq. 16 .* is 0 without it"),
    ("+kw.bank.top_k=3", "kw.bank.top_k is not an option"),
    ("kw.reward.tasks=0", r"kw.reward.tasks is 0"),
    ("kw.retrieval.backend=faiss", "kw.retrieval.backend is 'faiss'"),
    # Accepted before (#24 item 5): a zero timeout fails every executor step; a device name fails at the first retrieval.
    ("kw.executor.env_timeout_s=0", r"kw.executor.env_timeout_s is 0: it must be a number > 0"),
    ("kw.retrieval.device=banana", r"kw.retrieval.device is 'banana': it must be cpu, cuda or cuda:<index>"),
    ("actor_rollout_ref.rollout.agent.default_agent_loop=skl_env", "needs a knowledge_weaver agent loop"),
    # Ignored before (#36 item 7): a stray key beside the env, an env argument the env does not take, a client
    # class that does not exist (each failed only in the workers, or never).
    ("+kw.env.kwarg={split: train}", "kw.env.kwarg is not an option: did you mean kw.env.kwargs"),
    ("+kw.env.kwargs.max_step=5", "kw.env.kwargs.max_step is not an option: did you mean kw.env.kwargs.max_steps"),
    ("kw.executor.client._target_=skl_verl.rollout.openai_client.OpenAIClient",
     r"kw.executor.client._target_='skl_verl.rollout.openai_client.OpenAIClient' cannot be imported"),
])
def test_a_config_that_cannot_train_stops_naming_the_key(override, message):
    config = compose(CONFIG_DIR, "kw_alfworld", [override, "trainer.device=cpu"])
    with pytest.raises(ConfigError, match=message):
        prepare_config(config)


def test_the_run_scripts_check_stops_without_a_pool_or_an_answering_executor(tmp_path, tiny_model_dir, capsys):
    from skl_verl.knowledge_weaver.build import main

    args = ["check", f"--config-path={CONFIG_DIR}", "--config-name=kw_alfworld", f"kw.pool.initial={tmp_path / 'none.jsonl'}",
            "kw.executor.client.base_url=http://127.0.0.1:9/v1", "+kw.executor.client.attempts=1",
            f"kw.executor.tokenizer={tiny_model_dir}"]
    with pytest.raises(SystemExit) as stopped:
        main(args)
    assert stopped.value.code == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors[0].startswith(f"error: kw.pool.initial={tmp_path / 'none.jsonl'} does not exist")
    assert errors[1].startswith("error: the executor (kw.executor.client") and "127.0.0.1:9" in errors[1]
    main([*args, "--dry-run"])  # a dry run only warns
    assert all(line.startswith("warning: ") for line in capsys.readouterr().err.splitlines())


def test_an_in_process_checkpoint_serves_as_the_frozen_executor(tiny_model_dir):
    """The CPU executor (README): a local checkpoint behind verl's generate, replacing the endpoint client."""
    from skl_verl.knowledge_weaver.loop import frozen_executor
    from skl_verl.rollout.hf_client import HFGenerationClient

    config = compose(CONFIG_DIR, "kw_alfworld", [
        "~kw.executor.client", f"+kw.executor.client={{_target_:skl_verl.rollout.clients.generation_client,checkpoint:{tiny_model_dir}}}",
        f"kw.executor.tokenizer={tiny_model_dir}"])
    executor = frozen_executor(kw_settings(config))
    assert isinstance(executor.client, HFGenerationClient) and executor.client.max_new_tokens == 192
    assert not any(p.requires_grad for p in executor.client.model.parameters())


def test_the_run_scripts_dry_run_shows_what_it_would_build_and_warns(tmp_path):
    import os
    import subprocess
    import sys

    root = Path(CONFIG_DIR).parents[2]
    env = dict(os.environ, PYTHON=sys.executable, DATA_DIR=str(tmp_path))
    for unset in ("N_GPUS", "NNODES", "HF_HUB_OFFLINE"):  # the dry run itself keeps to the local model cache
        env.pop(unset, None)
    done = subprocess.run(["bash", "recipes/knowledge_weaver/run_webshop.sh", "--dry-run"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    # kw_base's 2 curator GPUs stand unless N_GPUS is set: a default of 8 would put curator replicas on
    # the GPUs serve_executor.sh gave the executor.
    assert printed_section(done.stdout, "trainer")["n_gpus_per_node"] == 2
    # WebShop draws its contexts as the authors' run does (issue 39 item 3): no initial pool to build
    assert "would build no initial pool (kw.context.draw bundles: step 0 is zero-shot" in done.stdout
    assert "warning: the executor (kw.executor.client" in done.stderr
    assert "dry run: config composed and checked" in done.stdout and not list(tmp_path.iterdir())
    # an uncached hub model is a warning at once, not a download or a minute of retries (66 s before)
    assert "Retrying in" not in done.stdout + done.stderr
