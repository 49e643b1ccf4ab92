"""Who a request is, as a replica's door sees it before the request takes a request slot.

A request's share of the replica's slots (serve_app/ingress/request_slots.py) goes by who sends it, and that has to
be known before the request runs: a request that is nobody yet must not hold a slot a tenant needs. So the door
checks the credential itself, with the app's own `BearerBackend`:

- a valid bearer credential (or, with none configured, anyone: the one local principal) is that principal;
- else a valid review link in the URL (`/review/<task>…?cap=…`: the signed capability of
  serve_app/ingress/review/capability.py) is that link's task;
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

from serve_app.ingress.auth import BearerBackend
from serve_app.ingress.review.capability import LinkRefused, ReviewSigner
from serve_app.ingress.review.links import CAPABILITY_PARAM, REVIEW_PATH

VERDICT = "vidforge.credential_verdict"  # the scope key of the door's verdict

Verdict = tuple[AuthCredentials, BaseUser] | AuthenticationError


class CallerKind(StrEnum):
    PRINCIPAL = "principal"
    REVIEW_LINK = "review_link"
    ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Caller:
    """Whose share a request counts against: a principal's, a review link's (by task), or the anonymous one."""

    kind: CallerKind
    name: str = ""


ANONYMOUS = Caller(CallerKind.ANONYMOUS)


class Callers:
    """Tells who sends each request (see the module docstring)."""

    def __init__(self, backend: BearerBackend, review_key: str | None) -> None:
        self.backend = backend
        self.review_signer = ReviewSigner(review_key) if review_key else None

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
        if (task_id := self._reviewed_task(scope)) is not None:
            return Caller(CallerKind.REVIEW_LINK, task_id)
        return ANONYMOUS

    def _reviewed_task(self, scope: Scope) -> str | None:
        """The task a valid review capability in the URL grants a look at; None without one."""
        path: str = scope["path"]
        if self.review_signer is None or not path.startswith(REVIEW_PATH + "/"):
            return None
        task_id = path[len(REVIEW_PATH) + 1 :].partition("/")[0]
        token = QueryParams(scope["query_string"]).get(CAPABILITY_PARAM)
        try:
            self.review_signer.verify(task_id, token, time.time())
        except LinkRefused:
            return None
        return task_id

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
