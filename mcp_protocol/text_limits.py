"""The one bound on free text a caller hands in, and on caller text an answer quotes back.

A watermark decision's note is the free text vidforge keeps (in the task record, and in every later read of a
rejected render). Wherever it comes in — `vidforge_approve_watermark`, `tasks/update`'s form answer, the review
page's form — it has at most `FREE_TEXT_MAX_CHARS` characters, or it is refused (`invalid_argument`, naming the
limit) and nothing is recorded. The bound is published as the approve tool's inputSchema `maxLength` for `note`
(catalog/tools.json), and read from there: that file is the one place it is set.

Caller text that an answer quotes back (an asset URI that names nothing, a schema violation's value) is quoted
up to the same bound, so no answer grows with what a caller sent.
"""

from __future__ import annotations

from typing import Final, cast

from mcp_protocol.catalog import APPROVE_TOOL, input_schemas
from mcp_protocol.json_types import JSONObject


def _published_note_max_length() -> int:
    properties = cast(JSONObject, input_schemas()[APPROVE_TOOL]["properties"])
    max_length = cast(JSONObject, properties["note"])["maxLength"]
    assert isinstance(max_length, int)
    return max_length


FREE_TEXT_MAX_CHARS: Final = _published_note_max_length()


def too_long(text: str) -> str | None:
    """Why `text` is refused (its length and the limit), or None when it is within the limit."""
    if len(text) <= FREE_TEXT_MAX_CHARS:
        return None
    return f"{len(text)} characters; the limit is {FREE_TEXT_MAX_CHARS} (the maxLength of {APPROVE_TOOL}'s note)"


def excerpt(text: str) -> str:
    """`text` as an answer may quote it: whole within the limit, else its start and its length."""
    if len(text) <= FREE_TEXT_MAX_CHARS:
        return text
    return f"{text[:FREE_TEXT_MAX_CHARS]}… ({len(text)} characters)"
