"""The rooms' one-way doors (pyproject.toml's `[tool.importlinter]` contracts), and proof that they bite.

The contracts are checked by import-linter on the tree as it stands; then each planted import (a loop inside a
room, a back-arrow between top-level rooms, a back-arrow between serve_app's sub-packages, the client reaching past
the wire) is added to a copy of the tree, where the same check must fail and name the contract it breaks.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("serve_app", "vidforge_client", "actors", "media_store", "render_kernels", "mcp_protocol")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    # The tree first on the path, so the copy's packages are the ones analysed (not the installed checkout).
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_tree_keeps_every_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


@contextmanager
def planted_in(path: Path, line: str) -> Iterator[None]:
    """`line` appended to the module at `path` (in the tree's copy) while the block runs."""
    original = path.read_text()
    path.write_text(original + f"\n{line}  # planted by the test\n")
    try:
        yield
    finally:
        path.write_text(original)


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("tree")
    shutil.copy(ROOT / "pyproject.toml", tree)
    for room in ROOMS:
        shutil.copytree(ROOT / room, tree / room, ignore=shutil.ignore_patterns("__pycache__"))
    return tree


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        # the loop of four this contract was written against: the codes importing the catalog of factories
        ("mcp_protocol/error_codes.py", "import mcp_protocol.errors", "No import loop between the modules"),
        ("actors/task_registry.py", "import serve_app._config", "Top-level rooms import downward only"),
        ("render_kernels/probe.py", "import mcp_protocol.domain", "Top-level rooms import downward only"),
        ("serve_app/media/disk_full.py", "import serve_app.ingress._refusals", "serve_app's sub-packages"),
        ("serve_app/_config.py", "import serve_app._handles", "serve_app's sub-packages"),
        # the client: the wire and third-party libraries only, no loop of its own, and nothing below imports it
        ("vidforge_client/_listing.py", "import media_store", "The client imports only the wire"),
        ("vidforge_client/tasks.py", "import ray", "The client imports only the wire"),
        ("vidforge_client/address.py", "import vidforge_client.commands", "No import loop between the modules"),
        ("actors/task_registry.py", "import vidforge_client.address", "Top-level rooms import downward only"),
    ],
)
def test_a_planted_loop_or_back_arrow_breaks_the_check(tree_copy, module, planted, broken):
    with planted_in(tree_copy / module, planted):
        result = lint_imports(tree_copy)
    assert result.returncode != 0, result.stdout
    assert f"{broken}" in result.stdout and "BROKEN" in result.stdout, result.stdout


def outside_private_imports(tree: Path) -> list[str]:
    """Each import of a `_`-marked module from outside the package that owns it, as `importer -> module`."""
    found: set[str] = set()
    for room in ROOMS:
        for path in sorted((tree / room).rglob("*.py")):
            importer = ".".join(path.relative_to(tree).with_suffix("").parts)
            package = importer.rsplit(".", 1)[0] if path.name != "__init__.py" else importer.removesuffix(".__init__")
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue  # relative imports stay inside their package
                for name in names:
                    parts = name.split(".")
                    if parts[0] not in ROOMS:
                        continue  # a library's own private modules are its business
                    for index, part in enumerate(parts[1:], start=1):
                        owner = ".".join(parts[:index])
                        private = part.startswith("_") and not part.startswith("__")
                        if private and not (package == owner or package.startswith(owner + ".")):
                            found.add(f"{importer} -> {'.'.join(parts[: index + 1])}")
    return sorted(found)


def test_a_private_module_is_imported_only_inside_its_package(tree_copy):
    assert outside_private_imports(ROOT) == []
    # and the check bites: the client reaching into the wire's private tasks module
    with planted_in(tree_copy / "vidforge_client/commands.py", "from mcp_protocol._tasks import TaskRecord"):
        assert outside_private_imports(tree_copy) == ["vidforge_client.commands -> mcp_protocol._tasks"]


def test_the_console_scripts_module_is_public():
    """`vidforge`'s module is what an installed package's entry point names: a public module (no `_`-marked part).
    The Serve application's import path is checked where the deployment files are read (tests/test_cluster_config.py)."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert [target.split(":")[0] for target in scripts.values()] == ["serve_app.launch.cli"]
    assert (ROOT / "serve_app/launch/cli.py").is_file()


# The modules a server's long-lived processes load: `vidforge serve` itself (its driver deploys the ingress and then
# waits), its actors and its render workers (Ray imports an actor's or a task's module in its worker process). None
# answers JSON-RPC, so none should pay for the MCP SDK, which loads whole: about 0.7 CPU-s and 25 MiB in every one of
# those processes, at every start. The ingress replicas load it, and the job desk (its task params are the SDK's).
SERVER_PROCESS_MODULES = (
    "serve_app.launch.cli",
    "serve_app.launch.deployment",
    "serve_app.launch._startup",
    "actors.task_registry",
    "serve_app.rendering.supervisor",
    "serve_app.rendering._render_tasks",
    "serve_app.webhooks.host",
    "serve_app.ingress.leases",
    "serve_app.observability.exporter",
)


def test_the_driver_actors_and_workers_load_without_the_mcp_sdk():
    script = (
        f"import sys; import {', '.join(SERVER_PROCESS_MODULES)}; print(sorted(m for m in sys.modules if m == 'mcp'))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"
