"""JSON as the wire carries it: what result builders return to the SDK and what envelopes hold.

Recursive and read-only in its containers (`Sequence`, `Mapping`), so a `list[str]` or a nested result is a
`JSONValue` as it is; a `JSONObject` is a plain dict the builder may still add keys to. The types are for type
checking only: pydantic fields holding JSON are typed `object` and checked where they are read. `with_meta_entry` is
how every builder adds an entry to a result's `_meta`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JSONValue: TypeAlias = "str | int | float | bool | None | Sequence[JSONValue] | Mapping[str, JSONValue]"
JSONObject: TypeAlias = "dict[str, JSONValue]"


def with_meta_entry(body: JSONObject, key: str, value: JSONValue) -> JSONObject:
    """A copy of `body` with `value` under `_meta[key]`, beside whatever `_meta` it had."""
    meta = body.get("_meta")
    return {**body, "_meta": {**(meta if isinstance(meta, dict) else {}), key: value}}
