"""scripts/make_alfworld_games.py as a module, for the tests that generate ALFWorld games offline."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_generator():
    spec = importlib.util.spec_from_file_location("make_alfworld_games", ROOT / "scripts" / "make_alfworld_games.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
