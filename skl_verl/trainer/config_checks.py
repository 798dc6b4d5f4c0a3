"""The options skl-verl adds to a verl config, checked before anything starts.

A misspelt or out-of-range option must stop the run (and the dry run) with the key named and the
fix said, not surface after the first rollout or, worse, be ignored. Each option has one
:class:`Option` entry here; the estimators read their options through :func:`estimator_options`, so
the defaults and the checks cannot drift apart.

``python -m skl_verl.trainer.config_checks --env NAME [--dry-run]`` checks what a recipe needs outside the
config (ALFWorld's data, the WebShop server); the run scripts call it before building data.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import math
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from envs import ENV_CLASSES
from reward_fns import REWARD_FNS


@dataclass(frozen=True)
class Option:
    """One option: its type (``float``, ``int``, ``str``, ``bool``), default and allowed values."""

    kind: type
    default: Any
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] = ()
    optional: bool = False
    """``null`` is allowed (and means the default behaviour)."""

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        noun = {float: "a number", int: "a whole number", str: "text", bool: "true or false"}[self.kind]
        if self.low is not None and self.high is not None:
            noun += f" in [{self.low}, {self.high}]"
        elif self.low is not None:
            noun += f" {'>' if self.low_open else '>='} {self.low}"
        return noun + (" or null" if self.optional else "")

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not allowed, or None."""
        if value is None:
            return None if self.optional else "is null"
        if self.kind is bool:
            ok = isinstance(value, bool)
        elif self.kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else:
            ok = isinstance(value, str)
        if not ok:
            return f"is {value!r} ({type(value).__name__})"
        if self.choices and value not in self.choices:
            return f"is {value!r}"
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return f"is {value!r}"
        if self.high is not None and value > self.high:
            return f"is {value!r}"
        return None


def _fraction(default: float) -> Option:
    return Option(float, default, low=0, high=1)


def _weight(default: float) -> Option:
    return Option(float, default, low=0)


def _count(default: int, low: int = 1) -> Option:
    return Option(int, default, low=low)


_NORM = Option(str, "std", choices=("std", "mean"))
_EPS = Option(float, 1e-6, low=0)

ESTIMATOR_OPTIONS: dict[str, dict[str, Option]] = {
    "skillrise": {
        "gamma": _fraction(0.6),
        "norm": _NORM,
        "curate_weight": _weight(1.0),
        "eps": _EPS,
        "solve_return": Option(str, "task", choices=("task", "discounted")),
    },
    "skl_sd": {
        "objective": Option(str, "policy_gradient", choices=("policy_gradient", "weighted_nll")),
        "lambda_distill": _weight(1.0),
        "lambda_reflect": _weight(1.0),
        "norm": _NORM,
        "eps": _EPS,
    },
    "skl_rl": {"distill_coef": _weight(0.1), "norm": _NORM, "eps": _EPS},
    "skl_grpo": {"norm": _NORM, "eps": _EPS},
    "skl_rloo": {},
    "skl_gae": {},  # verl's algorithm.gamma and algorithm.lam
    "knowledge_weaver": {"eps": Option(float, 1e-5, low=0), "kl_clip": Option(float, 10.0, low=0),
                         "clip": Option(float, 20.0, low=0)},
    "gigpo": {"gamma": _fraction(0.95), "step_advantage_weight": _weight(1.0), "norm": _NORM, "eps": _EPS},
}
"""``algorithm.<estimator>.*``."""

RUN_OPTIONS: dict[str, tuple[Option, str]] = {
    "trainer.total_training_steps": (Option(int, None, low=1, optional=True), "null runs trainer.total_epochs"),
    "trainer.total_epochs": (_count(1), ""),
    "trainer.n_gpus_per_node": (_count(8), "N_GPUS in the run scripts"),
    "trainer.nnodes": (_count(1), "NNODES in the run scripts"),
    "actor_rollout_ref.rollout.n": (_count(8), "samples per prompt"),
    "data.train_batch_size": (_count(16), ""),
    "data.max_prompt_length": (_count(4096), ""),
    "data.max_response_length": (_count(1024), ""),
}
"""verl options our recipes set, whose bad values verl reports late or without the key."""

LOOP_OPTIONS: dict[str, Option] = {
    "max_turns": _count(20),
    "invalid_format_penalty": _weight(0.1),
    "env_step_timeout_s": Option(float, 60.0, low=0, low_open=True),
    "system_prompt": Option(str, ""),
    "max_tokens_per_turn": Option(int, None, low=1, optional=True),
    "reward_fn": Option(str, "env_return", choices=tuple(REWARD_FNS)),
    "reward_scale": Option(float, 10.0, low=0, low_open=True),
    "sample_granularity": Option(str, "episode", choices=("episode", "step")),
    "step_history": _count(4, low=0),
    "curate": Option(bool, True),
    "carried_text": Option(str, "skill_document", choices=("skill_document", "reflection", "none")),
    "max_document_words": _count(300),
    "curate_penalty": _weight(0.1),
    "history_window": _count(50, low=0),
    "max_knowledge_words": _count(200),
    "rollouts_per_state": _count(3),
    "horizon": _count(3),
    "bootstrap_fraction": _fraction(0.2),
    "buffer_scope": Option(str, "all", choices=("all", "last_epoch")),
    "memory_dir": Option(str, None, optional=True),
    "simulations": _count(3),
    "simulation_policy": Option(str, "self", choices=("self", "random", "expert_mix")),
    "success": Option(str, "reward_positive", choices=("reward_positive", "won")),
    "expert_rate": _fraction(0.5),
    "engine_path": Option(str, None, optional=True),
    "distill_interval": _count(0, low=0),
    "distill_kind": Option(str, "forward", choices=("forward", "reverse")),
}
"""Options of our agent loops (entries of the agent-loop YAML whose ``_target_`` is ours); each
loop accepts the subset its ``__init__`` (and its bases') names. ``parser`` is checked by
building it."""


def config_error(message: str) -> ValueError:
    """skl_verl.main's ConfigError, imported late: the resource check below runs without verl."""
    from skl_verl.trainer.entry import ConfigError

    return ConfigError(message)


def _fail(key: str, option: Option, problem: str, hint: str = "") -> ValueError:
    example = option.choices[0] if option.choices else option.default
    example = "null" if example is None else str(example).lower() if isinstance(example, bool) else example
    hint = f" ({hint})" if hint else ""
    return config_error(f"{key} {problem}: it must be {option.describe()}{hint}; e.g. {key}={example}")


def _unknown(prefix: str, key: str, known: list[str]) -> ValueError:
    close = difflib.get_close_matches(key, known, n=1)
    guess = f"did you mean {prefix}.{close[0]}? " if close else ""
    return config_error(f"{prefix}.{key} is not an option: {guess}known: {', '.join(sorted(known))}")


def check_section(prefix: str, section: Mapping[str, Any], schema: Mapping[str, Option]) -> dict[str, Any]:
    """``section`` checked against ``schema``, defaults filled in. Raises ``skl_verl.main.ConfigError``."""
    for key in section:
        if key not in schema:
            raise _unknown(prefix, str(key), list(schema))
    values = {}
    for key, option in schema.items():
        value = section.get(key, option.default)
        problem = option.problem(value)
        if problem:
            raise _fail(f"{prefix}.{key}", option, problem)
        values[key] = value
    return values


def estimator_options(algorithm_config: Any, estimator: str) -> dict[str, Any]:
    """``algorithm.<estimator>`` checked, with defaults: what the estimator computes with."""
    section = None
    if algorithm_config is not None:
        getter = getattr(algorithm_config, "get", None)
        section = getter(estimator) if getter else getattr(algorithm_config, estimator, None)
    if isinstance(section, DictConfig):
        section = OmegaConf.to_container(section, resolve=True)
    elif section is not None and not isinstance(section, Mapping):
        section = dict(vars(section))
    if section is not None and not isinstance(section, Mapping):
        raise config_error(f"algorithm.{estimator} must be a mapping of options, got {section!r}")
    return check_section(f"algorithm.{estimator}", section or {}, ESTIMATOR_OPTIONS[estimator])


def _loop_option_names(target: str) -> set[str] | None:
    """Keyword options of the agent loop class ``target`` and its bases; None if not importable."""
    from verl.utils.import_utils import load_extern_object

    module, _, name = target.rpartition(".")
    try:
        cls = load_extern_object(module_path=f"pkg://{module}", object_name=name)
    except Exception:  # noqa: BLE001 - reported by the caller with the key named
        return None
    names: set[str] = set()
    for klass in inspect.getmro(cls):
        if "__init__" in vars(klass):
            names |= {
                p.name for p in inspect.signature(klass.__init__).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY
            }
    return names


def check_agent_loops(path: str) -> None:
    """Every entry of the agent-loop YAML at ``path`` whose ``_target_`` is one of our loops."""
    from skl_verl.rollout.parsing import build_parser

    for index, entry in enumerate(OmegaConf.load(path)):
        target = str(entry.get("_target_", ""))
        if not target.startswith("skl_verl."):
            continue
        prefix = f"{path}: agent loop {entry.get('name', index)!r}"
        accepted = _loop_option_names(target)
        if accepted is None:
            raise config_error(f"{prefix}: _target_ {target!r} cannot be imported; fix the class path")
        options = {k: v for k, v in OmegaConf.to_container(entry, resolve=True).items() if k not in ("name", "_target_")}
        parser = options.pop("parser", None)
        schema = {k: LOOP_OPTIONS[k] for k in sorted(accepted) if k in LOOP_OPTIONS}
        for key in options:
            if key not in schema:
                raise _unknown(prefix, key, list(schema) + (["parser"] if "parser" in accepted else []))
        for key, value in options.items():
            problem = schema[key].problem(value)
            if problem:
                raise _fail(f"{prefix}.{key}", schema[key], problem)
        try:
            build_parser(parser)
        except (ValueError, ImportError, AttributeError) as exc:
            raise config_error(f"{prefix}.parser: {exc}") from exc


RESCORING_LOOPS = ("skl_verl.rollout.stateful_loop.StatefulAgentLoop", "skl_verl.knowledge_weaver.loop.KnowledgeWeaverCuratorLoop")
"""Agent loops (and their subclasses) that rescore whole sequences on the rollout server: one
``generate(prompt + response, prompt_logprobs=0, max_tokens=1)`` for a teacher-forced turn (the stateful
loops: SKL-SD's refined knowledge, SKL-RL's distillation targets and probes) or for a candidate under each
context (Knowledge Weaver's MI credit)."""


def _rescoring_loop(target: str) -> bool:
    from hydra.utils import get_class

    try:
        cls = get_class(target)
    except Exception:  # noqa: BLE001 - an unimportable _target_ is reported by check_agent_loops
        return False
    return any(issubclass(cls, get_class(path)) for path in RESCORING_LOOPS)


def check_rescoring_room(config: DictConfig, path: str) -> None:
    """A loop that rescores sends prompts of up to data.max_prompt_length + data.max_response_length tokens
    with max_tokens=1; verl's vLLM server refuses a prompt that leaves no token of headroom under
    rollout.max_model_len (vllm_async_server.py, "leaves no room to generate"), mid-rollout. And with
    chunked prefill off verl raises max_num_batched_tokens to max_model_len, undoing the bound that keeps
    prompt_logprobs' [tokens, vocab] logits within memory (the recipes' max_num_batched_tokens comment)."""
    agent = config.actor_rollout_ref.rollout.agent
    entries = {entry.get("name"): entry for entry in OmegaConf.load(path)}
    loops = {agent.default_agent_loop, (config.get("skl") or {}).get("val_agent_loop") or agent.default_agent_loop}
    rescoring = sorted(name for name in loops if name in entries and _rescoring_loop(str(entries[name].get("_target_", ""))))
    if not rescoring:
        return
    rollout = config.actor_rollout_ref.rollout
    longest = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    max_model_len = rollout.get("max_model_len")
    if max_model_len is not None and int(max_model_len) <= longest:
        raise config_error(
            f"actor_rollout_ref.rollout.max_model_len={max_model_len} leaves no room to rescore: agent loop "
            f"{rescoring[0]!r} scores whole sequences of up to data.max_prompt_length + data.max_response_length "
            f"= {longest} tokens as prompts (prompt_logprobs, max_tokens=1), and vLLM needs one token of headroom; "
            f"set actor_rollout_ref.rollout.max_model_len={longest + 1} or more, or null (the model's maximum)"
        )
    if not rollout.get("enable_chunked_prefill", True):
        raise config_error(
            f"actor_rollout_ref.rollout.enable_chunked_prefill=false: agent loop {rescoring[0]!r} rescores with "
            "prompt_logprobs, whose logits scale with the tokens of one engine step, and without chunked prefill "
            "verl raises actor_rollout_ref.rollout.max_num_batched_tokens to max_model_len; keep "
            "actor_rollout_ref.rollout.enable_chunked_prefill=true"
        )


def check_config(config: DictConfig) -> None:
    """Every option of ours in a composed recipe config. Raises ``skl_verl.main.ConfigError`` naming the key."""
    algorithm = config.get("algorithm") or {}
    for estimator in ESTIMATOR_OPTIONS:
        if algorithm.get(estimator) is not None:
            estimator_options(algorithm, estimator)
    for key, (option, hint) in RUN_OPTIONS.items():
        value = OmegaConf.select(config, key, default=option.default)
        problem = option.problem(value)
        if problem:
            raise _fail(key, option, problem, hint)
    skl = config.get("skl") or {}
    known = {"dry_run": Option(bool, False), "recipe": Option(str, ""), "val_agent_loop": Option(str, "", optional=True),
             "env": Option(str, None, choices=tuple(ENV_CLASSES), optional=True)}
    check_section("skl", OmegaConf.to_container(skl) if isinstance(skl, DictConfig) else skl, known)
    path = OmegaConf.select(config, "actor_rollout_ref.rollout.agent.agent_loop_config_path")
    if path:
        check_agent_loops(str(path))
        check_rescoring_room(config, str(path))


# ------------------------------------------------------------------ what a recipe needs outside its config

def _webshop_problem(url: str, timeout_s: float = 5.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None  # something answered: the server is up
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return (f"WEBSHOP_URL={url} is not reachable ({reason}); start the server (docs/webshop_setup.md) "
                "or point WEBSHOP_URL at it")


def resource_problems(env_name: str, environ: Mapping[str, str] = os.environ) -> list[str]:
    """What ``env_name`` needs outside the config and is missing, as messages naming the variable."""
    problems = []
    if env_name == "alfworld":
        data = environ.get("ALFWORLD_DATA") or os.path.expanduser("~/.cache/alfworld")
        if not os.path.isdir(data) or not os.listdir(data):
            problems.append(f"ALFWORLD_DATA={data} holds no ALFWorld data; run `alfworld-download` "
                            "or set ALFWORLD_DATA to its folder")
    elif env_name == "webshop":
        problem = _webshop_problem(environ.get("WEBSHOP_URL") or "http://127.0.0.1:3000")
        if problem:
            problems.append(problem)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", required=True, help="env name of the recipe (alfworld, webshop, ...)")
    parser.add_argument("--dry-run", action="store_true", help="report problems as warnings, exit 0")
    args = parser.parse_args(argv)
    problems = resource_problems(args.env)
    for problem in problems:
        print(f"{'warning' if args.dry_run else 'error'}: {problem}", file=sys.stderr)
    return 0 if args.dry_run or not problems else 2


if __name__ == "__main__":
    sys.exit(main())
