"""The documentation holds: every local link resolves (headings too), the README is short, with its contents and
the two commands (the test command is CI's), the configuration reference is what the schemas generate, every
command of the README and ``docs/`` is listed in ``docs/checks.md`` with what runs it, every documented ``run.py``
command composes and passes the checks, and the documented Python examples run."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
from conftest import ROOT
from hydra import compose, initialize_config_dir

from uavgnn.algorithms.registry import algorithms, check_config
from uavgnn.algorithms.run_config import training_config
from uavgnn.config import register_configs

DOCS = ROOT / "docs"
PAGES = [ROOT / name for name in ("README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "RELIABILITY.md")]
PAGES += sorted(DOCS.glob("*.md"))
CHECKS = DOCS / "checks.md"
# the pages whose commands docs/checks.md lists: the history keeps the commands of figures as they were measured
DOCUMENTED = [ROOT / "README.md"]
DOCUMENTED += [p for p in sorted(DOCS.glob("*.md")) if p.name not in ("benchmarks-history.md", CHECKS.name)]
MAIN_JOB = "bash scripts/setup.sh && .venv/bin/python run.py"
TEST_COMMAND = (
    "bash scripts/setup.sh && .venv/bin/ruff format --check . && .venv/bin/ruff check . && .venv/bin/python -m pytest"
)
# overrides that name the reader's own code or a launcher: they compose only where those exist
NOT_COMPOSED = ("hydra", "hparams_search=", "env.target=", "task.generator=")


def prose(text: str) -> str:
    """A page without its code blocks and code spans (links there are code, not links)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", page.read_text(), flags=re.S), re.M)}


def commands(text: str) -> list[str]:
    """Every command of the bash blocks in ``text``, continuation lines joined, comments and extra spaces dropped."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line and not line.startswith("#"):
                found.append(" ".join(line.split()))
    return found


def overrides(command: str) -> list[str] | None:
    """The Hydra overrides of a ``run.py`` (or ``uavgnn``) command, the first value of a swept key, but those of
    ``NOT_COMPOSED`` and the checkpoints an earlier command of the page trains; None if the command runs neither."""
    words = shlex.split(command.replace("$s", "0"))
    starts = [i for i, w in enumerate(words) if w.endswith("run.py") or w.endswith("bin/uavgnn")]
    if not starts:
        return None
    found = []
    for word in words[starts[0] + 1 :]:
        word = word.rstrip(";)")
        key, _, value = word.partition("=")
        if not value or word.startswith("-") or word.startswith(NOT_COMPOSED):
            continue
        if value.endswith(".pt") and not (ROOT / value).exists():
            continue  # a checkpoint of an earlier command's run: checked for existence before any work
        found.append(f"{key}={value if value[0] in '[{' else value.split(',')[0]}")
    return found


def test_every_local_link_and_heading_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken


def test_the_readme_is_short_with_its_contents_and_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250 and "\n## Contents\n" in readme
    two = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert commands(two) == [MAIN_JOB, TEST_COMMAND]
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == TEST_COMMAND


def reference_module():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "scripts" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_reference_is_what_the_schemas_generate() -> None:
    reference = reference_module()
    assert reference.PAGE.read_text() == reference.render(), (
        "docs/configuration.md is not what the schemas say: run .venv/bin/python scripts/config_reference.py"
    )


def test_every_documented_command_is_listed_with_what_runs_it() -> None:
    listed = " ".join(CHECKS.read_text().replace("\\|", "|").split())
    missing = [f"{page.name}: {c}" for page in DOCUMENTED for c in commands(page.read_text()) if f"`{c}`" not in listed]
    assert not missing, "add these to docs/checks.md, with the test or the check that runs them"
    for path, name in re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", listed):
        assert (ROOT / path).exists(), path
        assert not name or re.search(rf"def {name}\b", (ROOT / path).read_text()), f"{path}::{name}"


DOCUMENTED_RUNS = sorted(
    {
        " ".join(found)
        for page in [*DOCUMENTED, ROOT / "BENCHMARKS.md"]
        for command in commands(page.read_text())
        if (found := overrides(command)) is not None
    }
)


@pytest.mark.slow  # about 60 compositions: 15-30 s
def test_every_documented_run_composes_and_passes_the_checks(monkeypatch) -> None:
    """Every ``run.py`` command of the README, docs/ and BENCHMARKS.md as Hydra composes it, checked as the
    program checks it before any work (the example algorithm registered, as its commands put it on PYTHONPATH): a
    renamed key or option in the code fails here."""
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "a2c"))
    algorithms.cache_clear()  # found again with the example beside the built-ins (and without it after)
    register_configs()
    failed = []
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
            for line in DOCUMENTED_RUNS:
                given = line.split(" ") if line else []
                try:
                    cfg = compose("config", overrides=given)
                    check_config(cfg)
                    if cfg.mode == "train":
                        training_config(cfg, given)  # an override of a group its algorithm never reads: refused
                except Exception as err:  # noqa: BLE001 - every failure is reported, with its command
                    failed.append(f"{line}: {type(err).__name__}: {str(err).splitlines()[0]}")
    finally:
        algorithms.cache_clear()
    assert not failed


EXCERPT = re.compile(r"# from (\S+)\n")  # the first line of a block that is an excerpt of a file


def python_examples() -> list[tuple[str, str]]:
    """Every python block of the README and docs/ but excerpts of a file (the first line names it: checked as
    such) and those that need a trained MASAC run (``tests/test_api.py`` trains one and runs them)."""
    return [
        (page.name, code)
        for page in DOCUMENTED
        for code in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
        if "load_env_policy(" not in code and not EXCERPT.match(code)
    ]


def test_the_guides_code_is_the_examples_code() -> None:
    """Every code block of the guide to adding an algorithm is an excerpt, word for word, of a file of the example
    the suite runs (``tests/test_example_algorithm.py``): the guide cannot drift from the code it shows."""
    guide = (DOCS / "adding-an-algorithm.md").read_text()
    blocks = re.findall(r"```(python|toml)\n(.*?)```", guide, re.S)
    assert len(blocks) >= 5
    for _, block in blocks:
        named = EXCERPT.match(block)
        assert named and named.group(1).startswith("examples/"), block[:80]
        assert block[named.end() :] in (ROOT / named.group(1)).read_text(), f"not in {named.group(1)}: {block[:200]}"


@pytest.mark.parametrize("page, code", python_examples(), ids=lambda x: x if x.endswith(".md") else "")
def test_the_documented_python_examples_run(page, code) -> None:
    exec(compile(code, page, "exec"), {})  # noqa: S102 - the documented example, as a user runs it
