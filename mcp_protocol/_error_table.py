"""What one entry of the error catalog is, and the one factory that builds an error from an entry and its inputs.

An `Entry` is a row of data: its `code`, whether it is `temporary`, the record of inputs it takes (a frozen
dataclass of `error_inputs`), and the parts of the envelope — message, field, reason, retry hint, repair — each
written as a template over those inputs (`str.format` syntax: `{name}` an input or a property of the record,
`{name:duration}` one of `FORMATS`, `{render_tool}` one of `NAMES`), an `Input` (an input as given), a
`Given` (one of two parts, by whether an input is given), or a fixed value. Calling an entry is the factory:
`errors.render_not_found("task_x", 3600)` builds the inputs record — typed by its dataclass, so mypy checks every
call's inputs — and fills the entry's parts from it. `VidforgeError` is constructed here and nowhere else
(tests/test_error_catalog.py checks it, and that every template names only its entry's inputs).
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeAlias, TypeVar

from mcp_protocol._jsonrpc_error import jsonrpc_error
from mcp_protocol.catalog import IMPORT_TOOL, RENDER_TOOL, STATUS_TOOL
from mcp_protocol.envelope import UNSET, VidforgeError, repair
from mcp_protocol.error_codes import INVALID_PARAMS, ErrorCode
from mcp_protocol.json_types import JSONObject
from mcp_protocol.timefmt import duration_adjective, duration_text, iso_ms

if TYPE_CHECKING:
    from mcp.shared.exceptions import MCPError

P = ParamSpec("P")
T = TypeVar("T")

# The catalog's own names a template may use, beside the inputs.
NAMES: Mapping[str, str] = {"render_tool": RENDER_TOOL, "import_tool": IMPORT_TOOL}

# `{name:spec}`: how a template says an input (any other spec is Python's own format spec).
FORMATS: Mapping[str, Callable[[Any], str]] = {
    "duration": duration_text,  # 3600 -> "1 hour"
    "adjective": duration_adjective,  # 86400 -> "1-day"
    "iso": iso_ms,  # epoch ms -> "2026-01-01T00:00:00Z"
    "bool": lambda value: "true" if value else "false",  # as JSON says it
}


@dataclasses.dataclass(frozen=True)
class Input:
    """A part that is the input `name` (or a property of the record) as given: the caller's own message, field,
    reason or repair."""

    name: str


@dataclasses.dataclass(frozen=True)
class Given(Generic[T]):
    """A part that is `given` when the input `name` is not None, else `missing`."""

    name: str
    given: T | Input
    missing: T | Input


Part: TypeAlias = "T | Input | Given[T]"


@dataclasses.dataclass(frozen=True)
class Repair:
    """[6.repair-object]: `next_step` with `tool` called with the inputs named in `arguments` (none: `{}`), and an
    `alternative` in words (a template)."""

    next_step: str
    alternative: str | None = None
    tool: str | None = None
    arguments: tuple[str, ...] = ()

    def build(self, inputs: Any) -> JSONObject:
        arguments: JSONObject = {name: getattr(inputs, name) for name in self.arguments}
        return repair(self.next_step, self.tool, arguments, fill(self.alternative, inputs))


@dataclasses.dataclass(frozen=True)
class CallAgain:
    """[6.repair-intent]: the render tool with the caller's still-valid original arguments (the input `request`),
    literally callable; without the idempotency key unless `with_key`."""

    next_step: str
    alternative: str
    with_key: bool = False

    def build(self, inputs: Any) -> JSONObject:
        arguments: JSONObject = inputs.request.arguments(with_key=self.with_key)
        return repair(self.next_step, RENDER_TOOL, arguments, fill(self.alternative, inputs))


def check_status(alternative: str | None = None) -> Repair:
    """The repair that reads the render's status (the input `render_id`)."""
    return Repair("check_render_status", alternative, STATUS_TOOL, ("render_id",))


@dataclasses.dataclass(frozen=True)
class Entry(Generic[P]):
    """One code of the catalog. Calling it with the inputs its `inputs` record takes builds the error."""

    code: ErrorCode
    inputs: Callable[P, object]
    temporary: bool
    message: Part[str]
    field: Part[str | None]
    reason: Part[str]
    repair: Part[Repair | CallAgain | None]
    retry_after_ms: Part[int | None] = None
    value: Input | None = None  # [6.offending-value]: only a value the server minted or knows to be safe
    text: str | None = None  # a tool result's text (a template), when not "code: message reason"
    jsonrpc_code: int = INVALID_PARAMS
    jsonrpc_message: str | None = None  # the JSON-RPC error's own message, where the protocol fixes it

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> VidforgeError:
        return build(self, self.inputs(*args, **kwargs))


@dataclasses.dataclass(frozen=True)
class BareEntry:
    """A code answered as a plain JSON-RPC error with a fixed text and no envelope (where the SDK's own text is the
    answer)."""

    code: ErrorCode
    temporary: bool
    message: str
    jsonrpc_code: int = INVALID_PARAMS

    def __call__(self) -> MCPError:
        return jsonrpc_error(self.jsonrpc_code, self.message)


def build(entry: Entry[...], inputs: Any) -> VidforgeError:
    """The one factory: `entry`'s parts, filled from `inputs` (the record its `inputs` made)."""
    fix = _part(entry.repair, inputs)
    return VidforgeError(
        code=entry.code,
        temporary=entry.temporary,
        message=_text(entry.message, inputs),
        field=_part(entry.field, inputs),
        reason=_text(entry.reason, inputs),
        retry_after_ms=_part(entry.retry_after_ms, inputs),
        repair=fix.build(inputs) if isinstance(fix, Repair | CallAgain) else fix,
        value=UNSET if entry.value is None else _part(entry.value, inputs),
        text=fill(entry.text, inputs),
        jsonrpc_code=entry.jsonrpc_code,
        jsonrpc_message=entry.jsonrpc_message,
    )


def _branch(part: Part[T], inputs: Any) -> T | Input:
    if isinstance(part, Given):
        return part.given if getattr(inputs, part.name) is not None else part.missing
    return part


def _part(part: Part[T], inputs: Any) -> Any:
    """The part for these inputs: a `Given`'s branch, an `Input`'s value, or the part itself."""
    chosen = _branch(part, inputs)
    return getattr(inputs, chosen.name) if isinstance(chosen, Input) else chosen


def _text(part: Part[str], inputs: Any) -> str:
    """A text part: an `Input` as given, a template filled."""
    chosen = _branch(part, inputs)
    text: str = getattr(inputs, chosen.name) if isinstance(chosen, Input) else _Filler(inputs).format(chosen)
    return text


def fill(template: str | None, inputs: Any) -> str | None:
    """`template` with its `{name}`s filled from `inputs` (and `NAMES`)."""
    return None if template is None else _Filler(inputs).format(template)


class _Filler(string.Formatter):
    def __init__(self, inputs: Any) -> None:
        self.inputs = inputs

    def get_value(self, key: int | str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        assert isinstance(key, str), "templates name their inputs"
        return NAMES[key] if key in NAMES else getattr(self.inputs, key)

    def format_field(self, value: Any, format_spec: str) -> str:
        return FORMATS[format_spec](value) if format_spec in FORMATS else format(value, format_spec)
