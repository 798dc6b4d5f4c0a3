"""skl_sync's advantage step against verl's own sync GRPO step, on the same batch in one run.

    python benchmarks/trainer_step.py [--samples 512] [--response-length 256] [--repeats 7]

skl_sync is verl's sync trainer with one overridden method, ``_compute_advantage``; rollout, old
log-probs, the actor update and weight sync are verl's code in both. So the step-time difference is
this method's: both read the batch from a real TransferQueue (in-process Ray), compute advantages
(verl's ``grpo`` on prompt uids; our ``skl_grpo`` on (sequence, position, phase) groups, padding rows
left out, per-sample scores) and write them back. Runs alternate A/B and the ratio is taken per pair.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

# benchmarks/envs.py would shadow the envs package when this folder leads sys.path (running as a script).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))


def build_batch(samples: int, response_length: int, group: int, seed: int = 0):
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    rng = np.random.default_rng(seed)
    fields, tags = [], []
    for i in range(samples):
        task, session = f"task{i // group}", i % group
        length = int(rng.integers(response_length // 2, response_length + 1))
        score = float(rng.integers(0, 2))
        output = AgentLoopOutput(
            prompt_ids=[5] * 64, response_ids=[7] * length, response_mask=[1] * length,
            response_logprobs=[-0.5] * length, reward_score=score, num_turns=2, metrics=AgentLoopMetrics(),
            extra_fields={"skl_trajectory_id": f"{task}_{session}", "skl_sequence_id": task, "skl_position": 0,
                          "skl_phase": "act", "skl_token_credit": None, "skl_score": score, "skl_won": score > 0,
                          "reward_extra_info": {}, "min_global_steps": 0, "max_global_steps": 0},
        )
        field = output.as_dict()
        field.update(uid=task, session_id=session, global_steps=1, old_log_probs=torch.full((length,), -0.5))
        fields.append(field)
        tags.append({"status": "success", "prompt_len": 64, "response_len": length, "seq_len": 64 + length,
                     "global_steps": 1, "min_global_steps": 0, "max_global_steps": 0})
    return list_of_dict_to_tensordict(fields), tags


def trainer(config, mode: str, estimator: str):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import get_trainer_cls

    instance = object.__new__(get_trainer_cls(mode))  # only the advantage step runs
    instance.config = OmegaConf.merge(config, {"algorithm": {"adv_estimator": estimator}})
    instance.global_steps = 1  # what __init__ and fit() would have set; the step hooks read it
    return instance


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes: tiny sizes, one repeat; checks it runs (CI)")
    args = parser.parse_args(argv)
    if args.quick:
        args.samples, args.response_length, args.repeats = 64, 32, 1

    import ray
    import transfer_queue as tq
    from hydra import compose, initialize_config_module

    import skl_verl

    skl_verl.register()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=["transfer_queue.backend.SimpleStorage.num_data_storage_units=1"])
    ray.init(num_cpus=4, include_dashboard=False)
    tq.init(config.transfer_queue)
    try:
        arms = {"verl sync + grpo": trainer(config, "sync", "grpo"), "skl_sync + skl_grpo": trainer(config, "skl_sync", "skl_grpo")}
        fields, tags = build_batch(args.samples, args.response_length, args.group)
        times: dict[str, list[float]] = {name: [] for name in arms}
        for repeat in range(args.repeats + 1):  # the first round warms up
            for name, arm in arms.items():
                # verl's key format {prompt}_{session}_{output}
                keys = [f"r{repeat}{name[:4]}task{i // args.group}_{i % args.group}_0" for i in range(args.samples)]
                meta = tq.kv_batch_put(keys=keys, partition_id="train", fields=fields, tags=tags)
                start = time.perf_counter()
                arm._compute_advantage(meta, {})
                if repeat:
                    times[name].append(time.perf_counter() - start)
                tq.kv_clear(keys=keys, partition_id="train")
    finally:
        tq.close()
        ray.shutdown()
    base, ours = times["verl sync + grpo"], times["skl_sync + skl_grpo"]
    ratios = [o / b for o, b in zip(ours, base)]
    print(f"advantage step, {args.samples} samples x <= {args.response_length} response tokens, {args.repeats} pairs")
    for name, values in times.items():
        print(f"  {name:22s} median {statistics.median(values) * 1e3:8.1f} ms  (min {min(values) * 1e3:.1f}, max {max(values) * 1e3:.1f})")
    print(f"  ratio skl_sync / sync: median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    main()
