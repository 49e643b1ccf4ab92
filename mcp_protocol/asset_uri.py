"""An asset's URI, `vidforge://assets/<id>`, read as the id it names.

A string names an asset only if it is that URI exactly, matched whole (`re.fullmatch`; a `$` anchor would also
match before a final newline): no trailing newline or space, no other case of the scheme or the id, no
percent-encoding, nothing after the id. Anything else names no asset and is refused where it comes in, as an
unknown id is (`source_not_found`), so a request only ever holds URIs in this one form, and every reader that
compares assets — the retention sweep's in-use set, the render's resolve — compares the ids parsed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ASSET_ID = re.compile(r"a_[a-z0-9]{16,64}")  # what the asset store mints: `a_` and 24 hex digits today
_ASSET_URI = re.compile(rf"vidforge://assets/(?P<id>{ASSET_ID.pattern})")


@dataclass(frozen=True)
class AssetRef:
    """An asset named by its id; `uri` is its one canonical URI."""

    asset_id: str

    def __post_init__(self) -> None:
        if not ASSET_ID.fullmatch(self.asset_id):
            raise ValueError(f"not an asset id: {self.asset_id!r}")

    @property
    def uri(self) -> str:
        return f"vidforge://assets/{self.asset_id}"

    @classmethod
    def parse(cls, uri: object) -> AssetRef | None:
        """The asset `uri` names, or None when it is not exactly `vidforge://assets/<id>`."""
        match = _ASSET_URI.fullmatch(uri) if isinstance(uri, str) else None
        return cls(match["id"]) if match is not None else None
