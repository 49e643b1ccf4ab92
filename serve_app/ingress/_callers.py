"""Who a request is, as a replica's door sees it before the request takes a request slot.

A request's share of the replica's slots (serve_app/ingress/_request_slots.py) goes by who sends it, and that has to
be known before the request runs: a request that is nobody yet must not hold a slot a tenant needs. So the door
checks the credential itself, with the app's own `BearerBackend`:

- a valid bearer credential (or, with none configured, anyone: the one local principal) is that principal;
- else a valid review or watch link in the URL (`/review/<task>…?cap=…`, `/watch/<task>…?cap=…`: the signed
  capabilities of serve_app/ingress/review/capability.py) is that link's task;
- else the request is anonymous: no credential, a wrong one, or a review capability only in a form body, which the
  door cannot see before reading it.

The verdict is kept in the request's scope, and the authenticated mount's `AuthenticationMiddleware` takes it from
there (`DoorVerdict`), so a credential is checked once per request (a JWT's signature included).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum

from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError, BaseUser
from starlette.datastructures import QueryParams
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.types import Scope

from serve_app._config import Config
from serve_app.ingress.auth import BearerBackend
from serve_app.ingress.review.capability import LinkRefused, ReviewSigner
from serve_app.ingress.review.links import CAPABILITY_PARAM, REVIEW_PATH
from serve_app.ingress.watch.links import WATCH_PATH, watch_signer

VERDICT = "vidforge.credential_verdict"  # the scope key of the door's verdict

Verdict = tuple[AuthCredentials, BaseUser] | AuthenticationError


class CallerKind(StrEnum):
    PRINCIPAL = "principal"
    REVIEW_LINK = "review_link"
    WATCH_LINK = "watch_link"
    ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Caller:
    """Whose share a request counts against: a principal's, a review or watch link's (by task), or the anonymous
    one."""

    kind: CallerKind
    name: str = ""


ANONYMOUS = Caller(CallerKind.ANONYMOUS)


class Callers:
    """Tells who sends each request (see the module docstring)."""

    def __init__(self, backend: BearerBackend, config: Config) -> None:
        self.backend = backend
        review_signer = ReviewSigner(config.review_key) if config.review_key else None
        self.link_signers = {
            REVIEW_PATH: (CallerKind.REVIEW_LINK, review_signer),
            WATCH_PATH: (CallerKind.WATCH_LINK, watch_signer(config)),
        }

    async def identify(self, scope: Scope) -> Caller:
        conn = HTTPConnection(scope)
        verdict: Verdict
        try:
            verdict = await self.backend.authenticate(conn)
        except AuthenticationError as failure:
            verdict = failure
        scope[VERDICT] = verdict
        if not isinstance(verdict, AuthenticationError):
            return Caller(CallerKind.PRINCIPAL, verdict[1].identity)
        return self._link_caller(scope) or ANONYMOUS

    def _link_caller(self, scope: Scope) -> Caller | None:
        """The task a valid review or watch capability in the URL grants a look at; None without one."""
        path: str = scope["path"]
        for prefix, (kind, signer) in self.link_signers.items():
            if signer is None or not path.startswith(prefix + "/"):
                continue
            task_id = path[len(prefix) + 1 :].partition("/")[0]
            try:
                signer.verify(task_id, QueryParams(scope["query_string"]).get(CAPABILITY_PARAM), time.time())
            except LinkRefused:
                return None
            return Caller(kind, task_id)
        return None

    def authentication(self) -> Middleware:
        """The authenticated mount's `AuthenticationMiddleware`, on the door's verdict."""
        return Middleware(AuthenticationMiddleware, backend=DoorVerdict(self.backend), on_error=self.backend.on_error)


class DoorVerdict(AuthenticationBackend):
    """`backend`'s verdict as the door reached it for this request; `backend` itself where the door did not ask (the
    paths that take no slot: /healthz)."""

    def __init__(self, backend: BearerBackend) -> None:
        self.backend = backend

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser]:
        verdict: Verdict | None = conn.scope.get(VERDICT)
        if verdict is None:
            return await self.backend.authenticate(conn)
        if isinstance(verdict, AuthenticationError):
            raise verdict
        return verdict
