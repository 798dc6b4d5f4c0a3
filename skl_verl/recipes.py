"""The built-in recipes, and the loading of every recipe into this process's registries.

A recipe is a module with a ``register()`` function that calls ``skl_verl.trainer.registry``. The built-in
ones are listed here; an installed package adds its own through the ``skl_verl.recipes`` entry-point group
(``[project.entry-points."skl_verl.recipes"] my_recipe = "my_package.recipe"``; docs/adding_a_recipe.md).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

BUILTIN_RECIPES = (
    "skl_verl.baselines.recipe",
    "skl_verl.skillrise.recipe",
    "skl_verl.skl.recipe",
    "skl_verl.knowledge_weaver.recipe",
)
ENTRY_POINT_GROUP = "skl_verl.recipes"

_LOADED: set[str] = set()


def recipe_modules() -> list[str]:
    """The built-in recipe modules, then the installed packages' (by entry-point name)."""
    installed = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda point: point.name)
    return [*BUILTIN_RECIPES, *(point.value for point in installed)]


def register_recipes() -> None:
    """Every recipe's ``register()``, once per process."""
    for name in recipe_modules():
        if name in _LOADED:
            continue
        module = importlib.import_module(name)
        register = getattr(module, "register", None)
        if not callable(register):
            raise TypeError(f"recipe module {name} (entry-point group {ENTRY_POINT_GROUP}) has no register() function")
        register()
        _LOADED.add(name)
