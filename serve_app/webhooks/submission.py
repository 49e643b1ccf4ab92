"""A render's webhook destination, settled at submit: the caller's notify_url, checked by the guard before the task
exists (refused with `invalid_argument` naming the rule, and nothing sent), or else the principal's default endpoint
from the secrets file (the operator's, checked at each delivery like any other)."""

from __future__ import annotations

from collections.abc import Callable

from mcp_protocol import errors
from mcp_protocol.catalog import RENDER_TOOL
from mcp_protocol.domain import RenderRequest
from mcp_protocol.envelope import repair
from serve_app._config import Config
from serve_app.outbound.address_guard import Resolver, system_resolver
from serve_app.webhooks._destinations import DestinationGuard, DestinationRefused, DestinationUnavailable
from serve_app.webhooks.secrets import WebhookSecrets


class NotifyTargets:
    """Settles destinations; `on_destination` is called before a render with one is created (on a cluster:
    serve_app.webhooks.host.DeliveryStart, which starts the dispatcher)."""

    def __init__(
        self,
        config: Config,
        resolver: Resolver = system_resolver,
        on_destination: Callable[[], None] | None = None,
    ) -> None:
        self.guard = DestinationGuard(config.webhook_allow_hosts, resolver)
        self.secrets = WebhookSecrets(config.webhook_secrets_file, config.review_key)
        self.on_destination = on_destination

    async def settled(self, principal: str, request: RenderRequest) -> RenderRequest:
        """`request` with its destination: the caller's notify_url once the guard allows it, else the principal's
        default (None: no webhooks). Raises `invalid_argument` on `notify_url`."""
        settled = await self._settled(principal, request)
        if settled.notify_url is not None and self.on_destination is not None:
            self.on_destination()
        return settled

    async def _settled(self, principal: str, request: RenderRequest) -> RenderRequest:
        url = request.notify_url
        if url is None:
            default = self.secrets.default_url(principal)
            return request if default is None else request.model_copy(update={"notify_url": default})
        try:
            await self.guard.check(url)
        except (DestinationRefused, DestinationUnavailable) as exc:
            reason = exc.reason if isinstance(exc, DestinationRefused) else str(exc)
            arguments = request.arguments()
            arguments.pop("notify_url", None)
            raise errors.invalid_argument(
                "The notify_url is refused: nothing was sent to it and no render was started.",
                "notify_url",
                reason,
                repair(
                    "fix_argument_value",
                    RENDER_TOOL,
                    arguments,
                    "Pass a notify_url on a public https:// host, or omit it (the operator's default endpoint, if "
                    "any, is used).",
                ),
            ) from None
        return request
