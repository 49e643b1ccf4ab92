"""Webhooks: signed POSTs telling a caller's endpoint that a render needs approval or ended (docs/webhooks.md).

The TaskRegistry writes each event into its outbox in the same transaction as the change that caused it
(mcp_protocol.webhook_events); the dispatcher here delivers them at least once, apart from request handling:
signed with every active secret of the principal, to addresses the guard allows, retried with backoff until the
receiver acknowledges or the event is older than VIDFORGE_WEBHOOK_MAX_AGE_S.
"""
