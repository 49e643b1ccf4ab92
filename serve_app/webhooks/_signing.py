"""The signature on every delivery, Stripe's scheme: `Vidforge-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…]`,
each v1 the HMAC-SHA256 of "<t>.<raw body>" under one active secret of the principal, so a receiver rotating keys
verifies with either. The timestamp is signed with the body: a receiver rejects old ones (docs/webhooks.md: five
minutes), so a captured delivery cannot be replayed later.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence


def signature(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(secrets: Sequence[str], timestamp: int, body: bytes) -> str:
    """The header's value: the timestamp and one v1 per secret, in the secrets' order."""
    if not secrets:
        raise ValueError("a delivery needs at least one secret to sign it")
    return ",".join([f"t={timestamp}", *(f"v1={signature(secret, timestamp, body)}" for secret in secrets)])
