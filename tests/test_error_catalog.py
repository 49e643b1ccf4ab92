"""The one error catalog (`mcp_protocol/errors.py`, with the HTTP door's entries in `mcp_protocol/http_refusals.py`)
against the published one (the capability summary's `error_catalog`): one entry per code, each published with its
entry's `temporary` flag; every template of an entry names only its own inputs; every catalog entry is used; and
errors are built nowhere but in the one factory (`mcp_protocol/_error_table.py`). Static (the source's syntax tree)
and pure: no Ray, no server."""

from __future__ import annotations

import ast
import dataclasses
import string
from pathlib import Path

import pytest

from mcp_protocol import errors, http_refusals
from mcp_protocol._error_table import FORMATS, NAMES, BareEntry, CallAgain, Entry, Given, Input, Repair, build
from mcp_protocol.catalog import capability_summary
from mcp_protocol.domain import RenderRequest
from mcp_protocol.envelope import VidforgeError
from mcp_protocol.error_codes import ErrorCode
from serve_app._config import Config
from tests.harness import REPO

PACKAGES = ("mcp_protocol", "serve_app", "actors", "render_kernels")
CATALOG_MODULES = {REPO / "mcp_protocol" / name for name in ("errors.py", "http_refusals.py")}
FACTORY_MODULE = REPO / "mcp_protocol" / "_error_table.py"
PUBLISHED = capability_summary(Config())["error_catalog"]
ENTRIES = [entry for entry in errors.CATALOG.values() if isinstance(entry, Entry)]
REQUEST = RenderRequest(
    source_asset_uri="vidforge://assets/a_0123456789abcdef01234567", output_format="mp4", resolution="720p"
)
# A value of each type an inputs record's fields are annotated with.
SAMPLES: dict[str, object] = {
    "str": "x",
    "int": 7,
    "float": 1.5,
    "bool": True,
    "RenderRequest": REQUEST,
    "JSONObject": {"next_step": "n", "tool": None, "arguments": {}},
}


def sources() -> dict[Path, ast.Module]:
    return {
        path: ast.parse(path.read_text(encoding="utf-8"))
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    }


def sample_inputs(entry: Entry, given: bool) -> object:
    """The entry's inputs record, each field a sample of its type; an optional one None unless `given`."""
    values = {}
    for field in dataclasses.fields(entry.inputs):
        annotation = str(field.type)
        optional = annotation.endswith(" | None")
        values[field.name] = None if optional and not given else SAMPLES[annotation.removesuffix(" | None")]
    return entry.inputs(**values)


def names_of(record: type) -> set[str]:
    """What a template may say of an inputs record: its fields and its properties."""
    return {f.name for f in dataclasses.fields(record)} | {
        name for name, value in vars(record).items() if isinstance(value, property)
    }


def parts(entry: Entry) -> list[object]:
    """Every part of the entry, a `Given`'s two branches each."""
    out = []
    for part in (entry.message, entry.field, entry.reason, entry.repair, entry.retry_after_ms, entry.value, entry.text):
        out += [part.given, part.missing] if isinstance(part, Given) else [part]
    return out


def test_the_codes_are_the_published_ones_in_order_with_their_entries_temporary_flag():
    assert [code.value for code in ErrorCode] == [entry["code"] for entry in PUBLISHED]
    for published in PUBLISHED:
        assert published["temporary"] == errors.CATALOG[ErrorCode(published["code"])].temporary, published["code"]


def test_the_tool_catalog_agrees_with_the_published_one():
    """The render tool's inline `com.vidforge/errors` is a subset of the full catalog, flags included."""
    from mcp_protocol.catalog import tool_definitions

    published = {entry["code"]: entry["temporary"] for entry in PUBLISHED}
    inline = tool_definitions(Config())[0]["_meta"]["com.vidforge/errors"]
    assert inline and all(published[entry["code"]] == entry["temporary"] for entry in inline)


def test_every_code_has_one_entry_named_after_it():
    assert list(errors.CATALOG) == list(ErrorCode)
    defined = [
        (name, value)
        for module in (errors, http_refusals)
        for name, value in vars(module).items()
        if isinstance(value, Entry | BareEntry)
    ]
    assert sorted(name for name, _ in defined) == sorted(code.value for code in ErrorCode)  # each once
    for name, entry in defined:
        assert entry.code.value == name and errors.CATALOG[entry.code] is entry


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry.code.value)
def test_every_template_names_only_its_entrys_inputs(entry):
    known = names_of(entry.inputs)
    fields = {f.name for f in dataclasses.fields(entry.inputs)}
    templates = []
    for part in parts(entry):
        if isinstance(part, str):
            templates.append(part)
        elif isinstance(part, Input):
            assert part.name in known, part
        elif isinstance(part, Repair):
            templates.append(part.alternative or "")
            assert set(part.arguments) <= fields, part
        elif isinstance(part, CallAgain):
            templates.append(part.alternative)
            assert "request" in fields, part
    for name in (p.name for p in (entry.message, entry.field, entry.reason, entry.repair) if isinstance(p, Given)):
        assert name in fields, name
    for template in templates:
        for _, name, spec, conversion in string.Formatter().parse(template):
            if name is not None:
                assert name in known | set(NAMES), f"{entry.code.value}: {{{name}}} is none of its inputs"
                assert conversion is None and spec in {"", *FORMATS}, template


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry.code.value)
@pytest.mark.parametrize("given", [True, False], ids=["optional inputs given", "optional inputs missing"])
def test_every_entry_builds_its_own_code_with_its_temporary_flag(entry, given):
    error = build(entry, sample_inputs(entry, given))
    assert error.code is entry.code and error.temporary is entry.temporary
    envelope = error.envelope()
    assert envelope["code"] == entry.code.value and envelope["temporary"] is entry.temporary
    assert isinstance(envelope["message"], str) and envelope["message"]
    assert isinstance(envelope["details"]["reason"], str)


def test_a_bare_entry_answers_the_sdks_text_without_an_envelope():
    error = errors.task_not_found()
    assert (error.error.code, error.error.message, error.error.data) == (
        -32602,
        "Failed to retrieve task: Task not found",
        None,
    )


def test_the_error_type_is_constructed_only_by_the_factory():
    for path, tree in sources().items():
        if path == FACTORY_MODULE:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                assert called != "VidforgeError", f"{path.relative_to(REPO)}:{node.lineno} builds an error by hand"


def test_every_catalog_entry_is_used():
    """Each code's entry is used by the code that serves it (referenced: called, or held to call later)."""
    used: set[str] = set()
    for path, tree in sources().items():
        if path in CATALOG_MODULES:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
    missing = [code.value for code in ErrorCode if code.value not in used]
    assert not missing, f"published but never raised: {missing}"


def test_temporary_is_the_entrys():
    """A code's `temporary` is said once, in its entry: the factory copies it into every error it builds."""
    assert errors.storage_full(None).temporary is True and errors.CATALOG[ErrorCode.STORAGE_FULL].temporary is True
    assert errors.render_not_found("task_x", 60).temporary is False
    assert isinstance(errors.render_failed(REQUEST, "boom"), VidforgeError)
