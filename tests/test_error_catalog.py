"""The one error catalog (`mcp_protocol/errors.py`) against the published one (the capability summary's
`error_catalog`): every code vidforge can raise is published with the same `temporary` flag, every published
code is raised somewhere, and errors are built nowhere but in the catalog's factories. Static (the source's
syntax tree) and pure: no Ray, no server."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from mcp_protocol import errors
from mcp_protocol.catalog import capability_summary
from mcp_protocol.envelope import VidforgeError
from mcp_protocol.error_codes import TEMPORARY, ErrorCode
from serve_app.config import Config
from tests.harness import REPO

PACKAGES = ("mcp_protocol", "serve_app", "actors", "render_kernels")
CATALOG_MODULE = REPO / "mcp_protocol" / "errors.py"
PUBLISHED = capability_summary(Config())["error_catalog"]


def sources() -> dict[Path, ast.Module]:
    return {
        path: ast.parse(path.read_text(encoding="utf-8"))
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    }


def factories() -> dict[str, ast.FunctionDef]:
    tree = ast.parse(CATALOG_MODULE.read_text(encoding="utf-8"))
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def codes_named(node: ast.AST) -> set[str]:
    """The `ErrorCode.X` members a piece of source names, by value."""
    return {
        ErrorCode[sub.attr].value
        for sub in ast.walk(node)
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "ErrorCode"
    }


def test_the_codes_are_the_published_ones_in_order_with_the_same_temporary_flag():
    assert [code.value for code in ErrorCode] == [entry["code"] for entry in PUBLISHED]
    for entry in PUBLISHED:
        assert entry["temporary"] == (ErrorCode(entry["code"]) in TEMPORARY), entry["code"]


def test_the_tool_catalog_agrees_with_the_published_one():
    """The render tool's inline `com.vidforge/errors` is a subset of the full catalog, flags included."""
    from mcp_protocol.catalog import tool_definitions

    published = {entry["code"]: entry["temporary"] for entry in PUBLISHED}
    inline = tool_definitions(Config())[0]["_meta"]["com.vidforge/errors"]
    assert inline and all(published[entry["code"]] == entry["temporary"] for entry in inline)


def test_every_code_has_one_factory_and_each_factory_builds_only_its_own_code():
    defined = factories()
    for code in ErrorCode:
        assert code.value in defined, f"no factory for {code.value}"
    for name, node in defined.items():
        named = codes_named(node)
        assert named <= {name}, f"{name} builds {sorted(named - {name})}"
        if name in {code.value for code in ErrorCode} and name != ErrorCode.TASK_NOT_FOUND:
            assert named == {name}, f"{name} does not build its code"


def test_the_error_type_is_constructed_only_in_the_catalog():
    for path, tree in sources().items():
        if path == CATALOG_MODULE:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                assert called != "VidforgeError", f"{path.relative_to(REPO)}:{node.lineno} builds an error by hand"


def test_every_published_code_is_raised_somewhere():
    """Each code's factory is used by the code that serves it (referenced: called, or held to call later)."""
    used: set[str] = set()
    for path, tree in sources().items():
        if path == CATALOG_MODULE:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
    missing = [code.value for code in ErrorCode if code.value not in used]
    assert not missing, f"published but never raised: {missing}"


def test_temporary_is_a_property_of_the_code():
    assert "temporary" not in inspect.signature(VidforgeError).parameters
    assert errors.render_failed is not None and errors.storage_full(None).temporary is True
    assert errors.render_not_found("task_x", 60).temporary is False
