"""Tool-argument validation against the published `inputSchema`s.

[3.closed-schemas] + [6.validation-as-tool-error]: a call whose arguments break the schema is a tool
error (`isError: true`), not a JSON-RPC error, with `details.field` naming the argument and a `repair`
the agent can call — the same tool with the arguments fixed where the fix is mechanical (an unknown
property dropped), otherwise the still-valid arguments plus prose saying what to supply.
"""

from __future__ import annotations

import copy
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, relevance

from mcp_protocol.catalog import RENDER_TOOL, input_schemas
from mcp_protocol.errors import VidforgeError, repair

_validators: dict[str, Draft202012Validator] = {}


def _validator(tool: str) -> Draft202012Validator:
    if tool not in _validators:
        _validators[tool] = Draft202012Validator(input_schemas()[tool])
    return _validators[tool]


def validate_arguments(tool: str, arguments: Any) -> dict[str, Any]:
    """Return the arguments with schema defaults applied, or raise `invalid_argument`."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise VidforgeError(
            code="invalid_argument",
            message="Tool arguments must be a JSON object.",
            field=None,
            reason=f"arguments is a {type(arguments).__name__}, expected an object",
            repair=repair("fix_arguments", tool, {}, "Send the arguments as a JSON object per the tool's inputSchema."),
        )
    errors = sorted(_validator(tool).iter_errors(arguments), key=relevance)
    if errors:
        raise _argument_error(tool, arguments, errors[0])
    return _with_defaults(tool, arguments)


def _with_defaults(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The render tool's omission semantics: the server applies `position`/`opacity` defaults."""
    out = copy.deepcopy(arguments)
    if tool == RENDER_TOOL and isinstance(out.get("watermark"), dict):
        out["watermark"].setdefault("position", "bottom_right")
        out["watermark"].setdefault("opacity", 1.0)
    return out


def _field_path(error: ValidationError) -> str | None:
    path = [str(p) for p in error.absolute_path]
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else None
        path.append(missing or "?")
    elif error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        path.append(extra[0] if extra else "?")
    return ".".join(path) or None


def _without(arguments: dict[str, Any], dotted: str | None) -> dict[str, Any]:
    out = copy.deepcopy(arguments)
    if not dotted:
        return out
    *parents, leaf = dotted.split(".")
    node: Any = out
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(leaf, None)
    return out


def _argument_error(tool: str, arguments: dict[str, Any], error: ValidationError) -> VidforgeError:
    field = _field_path(error)
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties":
        reason = f"'{field}' is not a parameter of {tool}"
        alternative = "Unknown properties are rejected (the schema is closed); the repair drops it."
        step = "drop_unknown_argument"
    elif error.validator == "required":
        reason = f"'{field}' is required"
        alternative = f"Supply '{field}' as the inputSchema describes and call {tool} again."
        step = "supply_missing_argument"
    elif error.validator == "enum":
        reason = f"'{field}' must be one of {schema.get('enum')}"
        alternative = f"Set '{field}' to one of {schema.get('enum')} and call {tool} again."
        step = "fix_argument_value"
    else:
        reason = f"'{field}': {error.message}" if field else error.message
        alternative = f"Correct '{field}' per the inputSchema and call {tool} again."
        step = "fix_argument_value"
    if error.validator == "required":
        repaired = copy.deepcopy(arguments)
    else:
        repaired = _without(arguments, field)
    return VidforgeError(
        code="invalid_argument",
        message=f"Invalid arguments for {tool}.",
        field=field,
        reason=reason,
        repair=repair(step, tool, repaired, alternative),
    )
