"""Shared by agent-loop tests: a scripted policy and a one-row rollout through verl's AgentLoopWorker."""

import asyncio

import numpy as np
from verl import DataProto
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.replica import TokenOutput

from skl_verl.trainer.inprocess_rollout import compose_config, multi_output_agent_loop_worker
from skl_verl.rollout.data import env_rows, write_parquet

# Row 0: S then ice to the right; the goal is two steps down-right. No slip: outcomes are scripted.
OPEN_MAP = ["SFF", "FHF", "FFG"]
ENV_KWARGS = {"maps": [OPEN_MAP], "slip": [0.0, 0.0], "max_steps": 10}


class ScriptedClient:
    """Stand-in for the rollout server that replies with fixed texts (a scripted policy)."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.calls = tokenizer, list(replies), 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        if "prompt_logprobs" in sampling_params:  # scoring a teacher-forced turn, as vLLM's prompt_logprobs do
            return TokenOutput(token_ids=[self.tokenizer.eos_token_id], log_probs=[-0.5],
                               extra_fields={"prompt_logprobs": [[-0.5]] * len(prompt_ids)})
        text = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def rollout(tmp_path, model_dir, replies, env_kwargs=ENV_KWARGS, overrides=(), env_name="frozenlake", rows=None):
    """Play the first dataset row once with a ScriptedClient; returns (DataProto, tokenizer)."""
    rows = rows if rows is not None else env_rows(env_name, env_kwargs)
    train = write_parquet(rows, tmp_path / "train.parquet")
    config = compose_config(
        [f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={train}", f"data.val_files={train}",
         "data.max_prompt_length=1024", "data.max_response_length=1024", *overrides]
    )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    client = ScriptedClient(tokenizer, replies)
    worker = multi_output_agent_loop_worker()(config, llm_client=client)
    dataset = RLHFDataset(data_files=train, tokenizer=tokenizer, config=config.data, processor=None)
    batch = DataProto.from_single_dict(collate_fn([dataset[0]]))
    batch.non_tensor_batch["uid"] = np.array(["u0"], dtype=object)
    return asyncio.run(worker.generate_sequences(batch)), tokenizer




def advantage_step(data, config, model_dir=None):
    """skl_sync's advantage step in this process, for loop tests with scripted policies: per-sample
    scores, old log-probs (teacher-forced on the checkpoint, when ``model_dir`` is given), our
    estimator, and the metrics the trainer logs. The update itself runs in the recipe smokes."""
    from skl_verl.trainer.estimators import compute_advantage, set_token_level_scores
    from skl_verl.trainer.metrics import episode_metrics, loss_term_metrics

    set_token_level_scores(data)
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    if model_dir is not None:
        data.batch["old_log_probs"] = response_log_probs(model_dir, data)
    compute_advantage(data, config.algorithm)
    return {**episode_metrics(data.non_tensor_batch), **loss_term_metrics(data)}


def response_log_probs(model_dir, data):
    """log π(response token | everything before it) for every row of a verl batch, on the HF checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    prompt_width, responses = data.batch["prompts"].shape[1], data.batch["responses"]
    with torch.no_grad():
        logits = model(input_ids=data.batch["input_ids"], attention_mask=data.batch["attention_mask"],
                       position_ids=data.batch["position_ids"]).logits
    logits = logits[:, prompt_width - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, responses[..., None])[..., 0]


def loop_options_override(tmp_path, name="skl_env", **options):
    """A copy of our agent-loop YAML with ``options`` changed on entry ``name``, as the hydra
    override that points verl's agent-loop workers at it."""
    from omegaconf import OmegaConf

    entries = OmegaConf.to_container(packaged_loops())
    matched = [entry for entry in entries if entry["name"] == name]
    assert matched, f"no registered agent loop {name!r}"
    matched[0].update(options)
    path = tmp_path / f"loops_{name}.yaml"
    OmegaConf.save(OmegaConf.create(entries), path)
    return f"actor_rollout_ref.rollout.agent.agent_loop_config_path={path}"


def packaged_loops():
    """Every registered agent loop as an agent-loop YAML list, to change and pass as a run's
    ``agent_loop_config_path`` (whose entries replace the registered ones, as in verl's workers)."""
    from omegaconf import OmegaConf

    from skl_verl.trainer.registry import agent_loop_entries

    return OmegaConf.create([{"name": name, **entry} for name, entry in agent_loop_entries().items()])
