"""Each principal's webhook secrets and default endpoint.

VIDFORGE_WEBHOOK_SECRETS_FILE is a JSON object keyed by principal; a value is either the list of the principal's
active secrets (newest first; two during a rotation) or an object `{"secrets": [...], "default_url": "https://..."}`
adding the endpoint its renders notify when they name no notify_url. The file is re-read when its modification time
or size changes, so a rotation needs no restart. A principal the file does not name (or every principal, without a
file) signs with one secret derived from the review-link key (HMAC, domain-separated), which the operator reads with
`vidforge webhooks secret PRINCIPAL`: nothing to store, the same on every replica and after every restart.

Secrets are never logged, and never part of an error or a listing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass
from pathlib import Path

SECRET_PREFIX = "whsec_"


class SecretsFileInvalid(ValueError):
    """The secrets file is not the documented shape (the message names the principal, never a secret)."""


@dataclass(frozen=True)
class PrincipalHooks:
    secrets: tuple[str, ...]
    default_url: str | None = None


def derived_secret(key: str, principal: str) -> str:
    """The secret of a principal the file does not name, derived from the review-link key."""
    digest = hmac.new(key.encode("utf-8"), b"vidforge webhook secret\n" + principal.encode("utf-8"), hashlib.sha256)
    return SECRET_PREFIX + digest.hexdigest()


def parse_secrets(raw: str) -> dict[str, PrincipalHooks]:
    try:
        loaded = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SecretsFileInvalid(f"not JSON (line {exc.lineno})") from None
    if not isinstance(loaded, dict):
        raise SecretsFileInvalid("expected an object keyed by principal")
    out: dict[str, PrincipalHooks] = {}
    for principal, entry in loaded.items():
        secrets, url = (entry, None) if isinstance(entry, list) else (None, None)
        if isinstance(entry, dict):
            secrets, url = entry.get("secrets"), entry.get("default_url")
        valid = isinstance(secrets, list) and secrets and all(isinstance(s, str) and s for s in secrets)
        if not valid or not (url is None or isinstance(url, str)):
            raise SecretsFileInvalid(
                f"{principal!r}: expected a non-empty list of secrets, or {{'secrets': [...], 'default_url': '...'}}"
            )
        assert isinstance(secrets, list)
        out[str(principal)] = PrincipalHooks(tuple(secrets), url)
    return out


class WebhookSecrets:
    """The secrets in force, from the file (re-read on change) or derived from `derive_key`."""

    def __init__(self, path: str | None, derive_key: str | None) -> None:
        self._path = Path(path) if path else None
        self._derive_key = derive_key
        self._lock = threading.Lock()
        self._seen: tuple[int, int] | None = None
        self._entries: dict[str, PrincipalHooks] = {}

    def _current(self) -> dict[str, PrincipalHooks]:
        if self._path is None:
            return {}
        stat = self._path.stat()
        with self._lock:
            if self._seen != (stat.st_mtime_ns, stat.st_size):
                self._entries = parse_secrets(self._path.read_text(encoding="utf-8"))
                self._seen = (stat.st_mtime_ns, stat.st_size)
            return self._entries

    def secrets_of(self, principal: str) -> tuple[str, ...]:
        """The principal's active secrets: the file's, else the derived one (none without a key to derive it)."""
        entry = self._current().get(principal)
        if entry is not None:
            return entry.secrets
        return (derived_secret(self._derive_key, principal),) if self._derive_key else ()

    def default_url(self, principal: str) -> str | None:
        entry = self._current().get(principal)
        return entry.default_url if entry is not None else None
