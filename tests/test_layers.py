"""The architecture holds: import-linter's contracts (layers, independent algorithms, no cycles), every module
in a layer, and no module outside ``uavgnn/algorithms`` that compares or branches on an algorithm's name."""

from __future__ import annotations

import ast
import logging
import re
import tomllib

import grimp
import pytest
from conftest import ROOT
from importlinter.cli import lint_imports
from importlinter.contracts.independence import IndependenceContract

from uavgnn.algorithms.registry import algorithms

PACKAGE = ROOT / "uavgnn"


def test_the_import_contracts_are_kept(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    for logger in list(logging.root.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger):  # import-linter's logging config switches off every logger there is
            monkeypatch.setattr(logger, "disabled", logger.disabled)  # (say_once's too): this worker's, as they were
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0  # the report says why


def independence(graph: grimp.ImportGraph) -> bool:
    """import-linter's independence contract over every registered algorithm's module: a new algorithm is in
    it without touching the contracts in pyproject.toml (an installed plug-in's module is outside the graph)."""
    modules = sorted({a.__module__ for a in algorithms().values() if a.__module__.startswith("uavgnn.")})
    contract = IndependenceContract(
        name="the algorithms are independent of each other",
        session_options={"root_packages": ["uavgnn"]},
        contract_options={"modules": modules},
    )
    return contract.check(graph, verbose=False).kept


def test_the_algorithms_are_independent_of_each_other() -> None:
    graph = grimp.build_graph("uavgnn", cache_dir=None)
    assert independence(graph)
    graph.add_import(importer="uavgnn.algorithms.coma", imported="uavgnn.algorithms.masac")  # one shortcut
    assert not independence(graph)


def test_every_module_of_the_package_sits_in_a_layer() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    placed = {name.strip() for layer in layers for name in layer.split(":")}
    top = {
        f"uavgnn.{p.stem if p.is_file() else p.name}"
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert top - {"uavgnn.conf"} == placed  # conf/ holds Hydra's YAML files only


def name_tests(node: ast.AST, names: set[str]) -> bool:
    """Whether ``node`` is an algorithm's name, or a collection holding one."""
    if isinstance(node, ast.Constant):
        return node.value in names
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(name_tests(e, names) for e in node.elts)


def reads_algorithm_name(node: ast.AST) -> bool:
    """``<anything>.algorithm.name``, ``algorithm["name"]``: the configured algorithm's name."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        inner = node.value
        return (isinstance(inner, ast.Attribute) and inner.attr == "algorithm") or (
            isinstance(inner, ast.Name) and inner.id in ("algorithm", "alg")
        )
    return False


def branches_on_names(source: str, names: set[str]) -> list[str]:
    """The comparisons, dispatch tables, ``match`` cases and lookups of ``source`` keyed by an algorithm."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            hit = any(name_tests(x, names) or reads_algorithm_name(x) for x in (node.left, *node.comparators))
        elif isinstance(node, ast.Dict):
            hit = any(key is not None and name_tests(key, names) for key in node.keys)
        elif isinstance(node, ast.MatchValue):
            hit = name_tests(node.value, names)
        elif isinstance(node, ast.Subscript):
            hit = name_tests(node.slice, names)
        else:
            hit = False
        if hit:
            found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


@pytest.mark.parametrize(
    "source, expected",
    [
        ('if cfg.algorithm.name == "masac": pass', 1),
        ('x = name in ("coma", "masac")', 1),
        ('table = {"imitation": 1}', 1),
        ('match name:\n    case "reinforce": pass', 1),
        ('y = losses["dynamics"]', 1),
        ("if alg.name != other: pass", 1),
        ("z = algorithm_class(cfg.algorithm.name)", 0),  # asking the registry is the point
        ('w = "a dynamics model"', 0),
    ],
)
def test_the_name_check_sees_each_way_of_branching(source, expected) -> None:
    assert len(branches_on_names(source, set(algorithms()))) == expected


def names_listed(source: str, names: set[str]) -> list[str]:
    """The strings of ``source`` that name an algorithm (``algorithm=masac``) or list them (``masac, coma``), and
    its tuples, lists and sets holding a name: what a registry query (``which``, ``making``) says instead.
    Docstrings, which explain, aside."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    named = "|".join(map(re.escape, sorted(names)))
    said, word = re.compile(rf"algorithm=({named})\b"), re.compile(rf"\b({named})\b")
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            hit = said.search(node.value) is not None or len(set(word.findall(node.value))) > 1
        else:
            hit = isinstance(node, ast.Tuple | ast.List | ast.Set) and name_tests(node, names)
        if hit:
            found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


@pytest.mark.parametrize(
    "source, expected",
    [
        ('raise ConfigError(f"{key}: use algorithm=reinforce")', 1),
        ('RL = ("masac", "coma")', 1),
        ('echo("your environment trains masac, coma and mappo")', 1),
        ('raise ConfigError(f"{key}: use {which(test)}")', 0),  # the registry names them
        ('"""Trains like algorithm=masac does."""', 0),  # a docstring explains
        ('w = "the imitation phase"', 0),
    ],
)
def test_the_list_check_sees_messages_and_lists(source, expected) -> None:
    assert len(names_listed(source, set(algorithms()))) == expected


def test_no_message_or_list_names_an_algorithm_outside_its_own_file() -> None:
    """A message or list that names algorithms by hand (``mode=eval``'s refusal, the dynamics model's rollout
    policy, ``env.target`` and ``task=folder``'s) misses a new algorithm: only an algorithm's own file says its
    name; everything else asks the registry."""
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(("uavgnn", *path.relative_to(PACKAGE).with_suffix("").parts))
        others = {name for name, algorithm in algorithms().items() if algorithm.__module__ != module}
        if hits := names_listed(path.read_text(), others):
            offenders[str(path.relative_to(ROOT))] = hits
    assert not offenders


def named_in_source() -> set[str]:
    """The names the package's algorithm classes give themselves (``name = "masac"``), read from their files."""
    return {
        node.value.value
        for path in (PACKAGE / "algorithms").glob("*.py")
        for cls in ast.walk(ast.parse(path.read_text()))
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and any(isinstance(target, ast.Name) and target.id == "name" for target in node.targets)
    }


def test_no_module_outside_the_algorithms_branches_on_an_algorithms_name() -> None:
    names = set(algorithms())
    assert named_in_source() and named_in_source() <= names  # the check knows every algorithm of the package
    offenders = {
        str(path.relative_to(ROOT)): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if "algorithms" not in path.relative_to(PACKAGE).parts and (hits := branches_on_names(path.read_text(), names))
    }
    assert not offenders
