"""Text environments behind one protocol (see ``envs.base``).

``make_env(name, **kwargs)`` builds an environment by registered name, so recipes and loops
name envs in config and never import env classes directly.
"""

from __future__ import annotations

import importlib
from typing import Any

from envs.base import (
    DependencyMissingError,
    EnvError,
    EnvNotResetError,
    InvalidSnapshotError,
    SnapshotNotSupportedError,
    StepResult,
    TaskSpec,
    TextEnv,
    UnknownTaskError,
)

# name -> "module:Class"; imported lazily so an env's optional dependency is only needed when it is used.
ENV_CLASSES: dict[str, str] = {
    "alfworld": "envs.alfworld_env:AlfWorldEnv",
    "frozenlake": "envs.frozenlake:FrozenLakeEnv",
    "chess_puzzles": "envs.chess.env:ChessPuzzlesEnv",
    "sciworld": "envs.sciworld_env:SciWorldEnv",
    "webshop": "envs.webshop.env:WebShopEnv",
}


def make_env(name: str, **kwargs: Any) -> TextEnv:
    if name not in ENV_CLASSES:
        raise ValueError(f"unknown environment {name!r}; known: {sorted(ENV_CLASSES)}")
    module_name, class_name = ENV_CLASSES[name].split(":")
    env_class = getattr(importlib.import_module(module_name), class_name)
    return env_class(**kwargs)


__all__ = [
    "ENV_CLASSES",
    "DependencyMissingError",
    "EnvError",
    "EnvNotResetError",
    "InvalidSnapshotError",
    "SnapshotNotSupportedError",
    "StepResult",
    "TaskSpec",
    "TextEnv",
    "UnknownTaskError",
    "make_env",
]
