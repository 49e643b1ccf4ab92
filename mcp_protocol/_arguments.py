"""Tool-argument validation against the published `inputSchema`s.

[3.closed-schemas] + [6.validation-as-tool-error]: a call whose arguments break the schema is a tool
error (`isError: true`), not a JSON-RPC error, with `details.field` naming the argument and a `repair`
the agent can call — the same tool with the arguments fixed where the fix is mechanical (an unknown
property dropped), otherwise the still-valid arguments plus prose saying what to supply.

The JSON Schema stays the one definition of what is valid; the tools then parse what passed into their types
(`RenderRequest` and the like), which apply the schema's documented defaults.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError, relevance
from jsonschema.protocols import Validator

from mcp_protocol.catalog import input_schemas
from mcp_protocol.envelope import VidforgeError, repair
from mcp_protocol.errors import invalid_argument
from mcp_protocol.json_types import JSONObject
from mcp_protocol.text_limits import excerpt

# A `$` not escaped: in a schema's pattern (ECMA-262, no multiline flag) it is the end of the string, where Python's
# `re` also lets it match before a final newline, so "key\n" would pass a key rule. `\Z` is the end alone.
_END_ANCHOR = re.compile(r"(?<!\\)\$")


def _pattern_matched_whole(
    validator: Validator, pattern: str, instance: object, schema: JSONObject
) -> Iterator[ValidationError]:
    """The `pattern` keyword with ECMA-262's `$`."""
    if validator.is_type(instance, "string") and not re.search(_END_ANCHOR.sub(r"\\Z", pattern), str(instance)):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_SchemaValidator = validators.extend(Draft202012Validator, {"pattern": _pattern_matched_whole})
_validators: dict[str, Validator] = {}


def _validator(tool: str) -> Validator:
    if tool not in _validators:
        _validators[tool] = _SchemaValidator(input_schemas()[tool])
    return _validators[tool]


def validate_arguments(tool: str, arguments: object) -> JSONObject:
    """The arguments (absent: none), or raise `invalid_argument`."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise invalid_argument(
            "Tool arguments must be a JSON object.",
            None,
            f"arguments is a {type(arguments).__name__}, expected an object",
            repair("fix_arguments", tool, {}, "Send the arguments as a JSON object per the tool's inputSchema."),
        )
    errors = sorted(_validator(tool).iter_errors(arguments), key=relevance)
    if errors:
        raise _argument_error(tool, arguments, errors[0])
    return arguments


def _field_path(error: ValidationError) -> str | None:
    path = [str(p) for p in error.absolute_path]
    if error.validator == "required":
        # One error per missing property, in the schema's order: the first one absent is this error's.
        path.append(next((name for name in error.validator_value if name not in error.instance), "?"))
    elif error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        path.append(extra[0] if extra else "?")
    return ".".join(path) or None


def _without(arguments: JSONObject, dotted: str | None) -> JSONObject:
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


def _argument_error(tool: str, arguments: JSONObject, error: ValidationError) -> VidforgeError:
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
    elif error.validator == "maxLength" and isinstance(error.instance, str):
        # The limit named, the value not echoed back (a note may be long; it is the caller's own).
        reason = f"'{field}' has {len(error.instance)} characters; the limit is {error.validator_value} (maxLength)"
        alternative = f"Shorten '{field}' to at most {error.validator_value} characters and call {tool} again."
        step = "fix_argument_value"
    elif error.validator == "maxProperties" and isinstance(error.instance, dict):
        reason = f"'{field}' has {len(error.instance)} keys; the limit is {error.validator_value} (maxProperties)"
        alternative = f"Keep at most {error.validator_value} keys in '{field}' and call {tool} again."
        step = "fix_argument_value"
    elif "propertyNames" in error.schema_path:
        # A key of an object breaks the schema's rule for keys (the metadata's charset and length): the key is the
        # caller's own, so it is quoted only up to the free-text bound.
        reason = f"'{field}' has the key {excerpt(repr(error.instance))}; keys must match {error.validator_value}"
        alternative = f"Rename the key to match {error.validator_value} and call {tool} again."
        step = "fix_argument_value"
    else:
        # jsonschema's message quotes the offending value: quoted only up to the free-text bound.
        message = excerpt(error.message)
        reason = f"'{field}': {message}" if field else message
        alternative = f"Correct '{field}' per the inputSchema and call {tool} again."
        step = "fix_argument_value"
    repaired = copy.deepcopy(arguments) if error.validator == "required" else _without(arguments, field)
    return invalid_argument(f"Invalid arguments for {tool}.", field, reason, repair(step, tool, repaired, alternative))
