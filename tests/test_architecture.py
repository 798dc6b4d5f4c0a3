"""The layout rules of docs/architecture.md, checked on the source: imports run one way, ``skl_verl/trainer/``
knows verl and no recipe, verl stays behind it, and files stay small."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("skl_verl", "envs", "reward_fns")
RECIPE_WORDS = re.compile(r"skillrise|skill_rise|knowledge_weaver|knowledge weaver|\bkw_|\bskl_sd\b|\bskl_rl\b|"
                          r"SKL-SD|SKL-RL|stateful knowledge|lamer", re.IGNORECASE)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def runtime_nodes(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:`` (imports for annotations only, never run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *runtime_nodes(child)])
            continue
        yield node
        yield from runtime_nodes(node)


def imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The modules of ours ``path`` imports anywhere in it when it runs (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges = set()
    for node in runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        edges |= {target for target in targets if target in known and target != name}
    return edges


def test_no_import_circle_among_our_modules():
    known = modules()
    graph = {name: imports(path, name, known) for name, path in known.items()}
    index, low, stack, on_stack, circles, counter = {}, {}, [], set(), [], [0]

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert not circles, f"import circles: {circles}"


def test_trainer_names_no_recipe_and_stays_small():
    for path in sorted((ROOT / "skl_verl" / "trainer").glob("*.py")):
        text = path.read_text()
        hits = sorted({m.group(0) for m in RECIPE_WORDS.finditer(text)})
        assert not hits, f"{path.relative_to(ROOT)} names a recipe: {hits}"
        assert len(text.splitlines()) <= 600, f"{path.relative_to(ROOT)} has {len(text.splitlines())} lines"


def test_verl_private_names_stay_behind_the_trainer():
    """Outside skl_verl/trainer/ only verl's public registries and data types: no name starting with ``_``,
    and no private method of verl's agent-loop base class called on a loop."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    inherited_private = {n for n in dir(AgentLoopBase) if n.startswith("_") and not n.startswith("__")}
    for name, path in modules().items():
        if name.startswith("skl_verl.trainer"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("verl"):
                private = [alias.name for alias in node.names if alias.name.startswith("_")]
                assert not private, f"{path.relative_to(ROOT)} imports verl's private {private} from {node.module}"
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in {"verl", "core_algos", "agent_loop", "rl_dataset"}:
                    raise AssertionError(f"{path.relative_to(ROOT)} uses verl's private {owner.id}.{node.attr}")
                if isinstance(owner, ast.Name) and owner.id == "self" and node.attr in inherited_private:
                    raise AssertionError(f"{path.relative_to(ROOT)} calls verl's private AgentLoopBase.{node.attr}")


def test_source_files_stay_under_600_lines():
    long = {str(path.relative_to(ROOT)): n for path in modules().values()
            if (n := len(path.read_text().splitlines())) > 600}
    assert not long, f"files doing several jobs (split past ~600 lines): {long}"


def test_each_sample_field_name_is_written_once_in_its_declaration():
    """The loop -> estimator contract is typed: a field's name appears as a string only where it is declared
    (``rollout/sample_fields.py`` or a recipe's ``fields.py``); everything else uses the constant."""
    declarations = {name: path for name, path in modules().items()
                    if name.endswith(".fields") or name.endswith(".sample_fields")}
    declared: dict[str, str] = {}
    for name, path in declarations.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                if node.value.value.startswith("skl_") and node.value.value != "skl_":
                    declared[node.value.value] = name
    assert len(declared) > 20
    for name, path in modules().items():
        if name in declarations:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in declared:
                raise AssertionError(f"{path.relative_to(ROOT)}:{node.lineno} writes the field name {node.value!r}; "
                                     f"use the constant of {declared[node.value]}")
