"""The operator settings the wire states or enforces, as the protocol room sees them: a read-only view that
the server's own settings object satisfies, so this room never imports the server."""

from __future__ import annotations

from typing import Protocol


class WireSettings(Protocol):
    """The operator settings the wire states or enforces (`serve_app._config.Config` has them all, with their
    defaults and environment variables): the durations its texts name, and the bounds on a listen stream."""

    @property
    def task_ttl_ms(self) -> int: ...

    @property
    def result_retention_s(self) -> int: ...

    @property
    def idempotency_ttl_s(self) -> int: ...

    @property
    def approval_timeout_s(self) -> float: ...

    @property
    def import_timeout_s(self) -> float: ...

    @property
    def inspect_answer_max_s(self) -> float: ...

    @property
    def inspect_wait_s(self) -> float: ...

    @property
    def inspect_timeout_s(self) -> float: ...

    @property
    def max_listen_task_ids(self) -> int: ...

    @property
    def listen_idle_s(self) -> float: ...

    @property
    def public_base_url(self) -> str: ...
