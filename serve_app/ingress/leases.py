"""The lease ledger: one detached actor that counts, cluster-wide, what each principal holds open.

Per-principal caps on listen streams, uploads and downloads must hold however many ingress replicas there are
(`VIDFORGE_REPLICAS`): a per-replica counter would let a principal hold N times the cap by landing on N
replicas. So every replica asks this actor for a lease before serving such a request and returns it when the
request ends. Leases must never leak:

- a request that ends (completion, client disconnect, error) releases its lease — see
  `serve_app/ingress/admission.py`;
- a replica that dies cannot release anything: each replica (a *holder*) sends a heartbeat listing the leases
  it holds every `ttl_s / 3`; a holder silent for `ttl_s` loses all its leases;
- this actor restarting loses its table: the first heartbeat of each holder after a restart re-adopts what
  that holder still holds, so the caps are back in force within one heartbeat.

A plain class with an injectable clock so its rules are tested in-process; as an actor its methods are
coroutines without awaits, so calls never interleave.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Protocol

import ray

from actors.actor_calls import ActorCall, ActorCast, ActorClient
from actors.handle import singleton_actor_options

LEDGER_NAME = "vidforge-lease-ledger"

Key = tuple[str, str]  # (principal, kind)


class LeaseLedger:
    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self.leases: dict[str, tuple[str, Key]] = {}  # lease id -> (holder, key)
        self.by_key: dict[Key, set[str]] = defaultdict(set)
        self.last_heard: dict[str, float] = {}  # holder -> clock
        self.adopted: set[str] = set()  # holders whose heartbeat this incarnation has taken in

    async def acquire(self, holder: str, lease_id: str, principal: str, kind: str, limit: int) -> bool:
        """Grant `lease_id` unless `principal` already holds `limit` leases of `kind` across the cluster."""
        self._expire()
        self.last_heard[holder] = self.clock()
        key = (principal, kind)
        if len(self.by_key.get(key, ())) >= limit:
            return False
        self._add(lease_id, holder, key)
        return True

    async def release(self, lease_id: str) -> None:
        """Return a lease (unknown ids are ignored: a release may race a holder's expiry)."""
        if lease_id in self.leases:
            self._drop(lease_id)

    async def heartbeat(self, holder: str, held: dict[str, tuple[str, str]]) -> None:
        """`holder` is alive and holds `held` (lease id -> (principal, kind)); adopted after a restart or expiry."""
        self._expire()
        self.last_heard[holder] = self.clock()
        if holder not in self.adopted:
            self.adopted.add(holder)
            for lease_id, (principal, kind) in held.items():
                self._add(lease_id, holder, (principal, kind))

    def _add(self, lease_id: str, holder: str, key: Key) -> None:
        self.leases[lease_id] = (holder, key)
        self.by_key[key].add(lease_id)

    def _drop(self, lease_id: str) -> None:
        _, key = self.leases.pop(lease_id)
        self.by_key[key].discard(lease_id)
        if not self.by_key[key]:
            del self.by_key[key]

    def _expire(self) -> None:
        cutoff = self.clock() - self.ttl_s
        dead = {holder for holder, heard in self.last_heard.items() if heard < cutoff}
        if not dead:
            return
        for lease_id in [lease_id for lease_id, (holder, _) in self.leases.items() if holder in dead]:
            self._drop(lease_id)
        for holder in dead:
            del self.last_heard[holder]
            self.adopted.discard(holder)


class LedgerApi(Protocol):
    """What a replica asks of the ledger (`serve_app/ingress/admission.py`)."""

    async def acquire(self, holder: str, lease_id: str, principal: str, kind: str, limit: int) -> bool: ...
    async def release(self, lease_id: str) -> None: ...
    async def heartbeat(self, holder: str, held: dict[str, tuple[str, str]]) -> None: ...


_IN_PROCESS: type[LedgerApi] = LeaseLedger  # mypy checks the ledger's signatures against the protocol


class LedgerClient(ActorClient):
    """The cluster's ledger actor: a lease asked for and a heartbeat are awaited; a release is sent, not awaited
    (it runs in the `finally` of a request that may be cancelled)."""

    acquire = ActorCall(LedgerApi.acquire)
    release = ActorCast(LedgerApi.release)
    heartbeat = ActorCall(LedgerApi.heartbeat)


def ledger_client(namespace: str, ttl_s: float) -> LedgerClient:
    """The cluster's ledger (created by the first replica that asks)."""
    handle = ray.remote(LeaseLedger).options(**singleton_actor_options(LEDGER_NAME, namespace)).remote(ttl_s)
    return LedgerClient(handle, "lease ledger")
