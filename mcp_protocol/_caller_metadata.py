"""The caller's own metadata on a render (`vidforge_render_video`'s `metadata`): string keys and values the server
keeps with the render and hands back unchanged — in the status tool's output, under `_meta` `com.vidforge/metadata`
on the task and its result, and in every webhook — so a pipeline needs no mapping of its own from task ids to work.

The render tool's inputSchema states the limits (mcp_protocol/catalog/tools.json); JSON Schema counts characters,
so the byte bound of a value is checked here, after the schema passed. Every refusal names its limit.
"""

from __future__ import annotations

from collections.abc import Mapping

from mcp_protocol.envelope import VidforgeError, repair
from mcp_protocol.errors import invalid_argument
from mcp_protocol.json_types import JSONObject, with_meta_entry

META_KEY = "com.vidforge/metadata"  # the server's `_meta` namespace entry carrying it
MAX_KEYS = 16
MAX_KEY_CHARS = 64
MAX_VALUE_BYTES = 512  # UTF-8


def value_too_long(tool: str, arguments: JSONObject, metadata: Mapping[str, str]) -> VidforgeError | None:
    """The refusal of the first value longer than `MAX_VALUE_BYTES` in UTF-8 (the value is not echoed: it is the
    caller's own); None when every value fits."""
    for key, value in metadata.items():
        size = len(value.encode("utf-8"))
        if size > MAX_VALUE_BYTES:
            field = f"metadata.{key}"
            fixed = {name: arg for name, arg in arguments.items() if name != "metadata"}
            return invalid_argument(
                f"Invalid arguments for {tool}.",
                field,
                f"'{field}' has {size} bytes in UTF-8; the limit is {MAX_VALUE_BYTES} bytes per metadata value",
                repair(
                    "fix_argument_value",
                    tool,
                    fixed,
                    f"Shorten '{field}' to at most {MAX_VALUE_BYTES} bytes (UTF-8) and call {tool} again.",
                ),
            )
    return None


def with_metadata(body: JSONObject, metadata: Mapping[str, str] | None) -> JSONObject:
    """`body` with the caller's metadata under `_meta` (beside whatever `_meta` it had); unchanged without any, so a
    render without metadata answers exactly as before."""
    return with_meta_entry(body, META_KEY, dict(metadata)) if metadata else body
